"""SRG671: do the draft and the target tokenize alike? Read from the two checkpoints' tokenizer files
(tokenizer.json's vocabulary, merges and added tokens; tokenizer_config.json's special tokens), not only
vocab_size: a standalone draft with another vocabulary of the same size proposes ids that mean other
tokens, and output is silently corrupted or acceptance collapses (sgl-project/sglang#23838, #24051).
vLLM serves the draft with the target's tokenizer (SpeculativeConfig: tokenizer = the target's unless
use_heterogeneous_vocab), so draft ids must mean the target's tokens. Bounded reads, no tokenizers package.

A tokenizer file is content from outside (a hub, a downloaded folder): a part that is not in the
shape the tokenizers library writes (`added_tokens` not a list of objects with an int `id` and a
string `content`, a vocabulary that is no mapping of token -> int) makes the comparison "not checked"
with the reason (an info line), never a traceback; a token or special-token value quoted in the
message is escaped and cut (`surgery.text.escape`: a 40 MB vocabulary key once became 41.9 MB of output).
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ..text.diagnostics import INFO, Diagnostic, Location, SurgeryError, diag
from ..modelfiles.source import LocalSource, ModelSource
from ..text.escape import quoted, shown

MAX_TOKENIZER_BYTES = 64 << 20
SPECIAL_KEYS = ("bos_token", "eos_token", "pad_token", "unk_token")


def model_of(facts):
    """The model source whose tokenizer files go with these facts: the facts' own (a folder, a hub
    commit), else the folder of the config path; None for a lone config file in a folder that is no
    model folder."""
    src = getattr(facts, "model", None)
    if src is None:
        p = Path(facts.source)
        folder = p if p.is_dir() else p.parent
        return LocalSource(folder) if (folder / "config.json").exists() or p.name == "config.json" else None
    if src.is_local and src.is_config_file:
        return LocalSource(src.local_folder) if src.has("config.json") or src.config_name == "config.json" else None
    return src


def _json_file(src, name: str):
    """(parsed JSON, why-not) of a tokenizer file, bounded."""
    size = src.size(name)
    if size is not None and size > MAX_TOKENIZER_BYTES:
        return None, f"{name} larger than {MAX_TOKENIZER_BYTES >> 20} MiB"
    try:
        return json.loads(src.read_bytes(name, MAX_TOKENIZER_BYTES, "tokenizer").decode("utf-8")), ""
    except SurgeryError as exc:
        return None, f"{name} unreadable ({exc.diagnostics[0].code}: {shown(exc.diagnostics[0].message, 300)})"
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        return None, f"{name} unreadable ({type(exc).__name__})"


def tokenizer_summary(folder) -> tuple[dict | None, str]:
    """({'vocab': digest, 'size': n, 'special': {...}}, why-not). Only tokenizer.json is compared by
    content. `folder`: a model folder or a ModelSource."""
    src = folder if isinstance(folder, ModelSource) else LocalSource(folder)
    if not src.has("tokenizer.json"):
        found = sorted(n for n in src.names() if n in ("tokenizer.model", "vocab.json", "vocab.txt"))
        return None, ("no tokenizer.json" + (f" (only {', '.join(found)})" if found else ""))
    data, why = _json_file(src, "tokenizer.json")
    if data is None:
        return None, why
    model = data.get("model") if isinstance(data, dict) else None
    if not isinstance(model, dict):
        return None, "tokenizer.json has no model section"
    vocab = model.get("vocab")
    added, why = _added_tokens(data.get("added_tokens"))
    if why:
        return None, f"tokenizer.json's added_tokens {why}"
    payload = json.dumps({"type": model.get("type"), "vocab": vocab, "merges": model.get("merges"), "added": added},
                         sort_keys=True, default=str).encode()
    size = (len(vocab) if isinstance(vocab, (dict, list)) else 0) + len(added)
    special = {}
    if src.has("tokenizer_config.json"):
        tc, _ = _json_file(src, "tokenizer_config.json")
        if isinstance(tc, dict):
            for key in SPECIAL_KEYS:
                value = tc.get(key)
                special[key] = value.get("content") if isinstance(value, dict) else value
    return {"vocab": hashlib.sha256(payload).hexdigest(), "size": size, "special": special,
            "tokens": vocab if isinstance(vocab, dict) else None}, ""


def _added_tokens(value) -> tuple[list[tuple[int, str]], str]:
    """tokenizer.json's `added_tokens` as sorted (id, content) pairs, or why it cannot be read: the
    tokenizers library writes a list of objects, each with an int `id` and a string `content`."""
    if value is None:
        return [], ""
    if not isinstance(value, list):
        return [], f"is {type(value).__name__}, not a list"
    out = []
    for i, t in enumerate(value):
        if not isinstance(t, dict):
            return [], f"entry {i} is {type(t).__name__}, not an object"
        tid, content = t.get("id"), t.get("content")
        if not isinstance(tid, int) or isinstance(tid, bool) or not isinstance(content, str):
            return [], f"entry {i} has no int id and string content"
        out.append((tid, content))
    return sorted(out), ""


def same_blobs(d, t) -> bool:
    """Both models' tokenizer files are byte-identical by the content hashes the hub lists (no
    download needed): tokenizer.json, and tokenizer_config.json where either has one."""
    for name in ("tokenizer.json", "tokenizer_config.json"):
        if name == "tokenizer_config.json" and not d.has(name) and not t.has(name):
            continue
        a, b = d.blob_id(name), t.blob_id(name)
        if a is None or a != b:
            return False
    return True


def first_difference(a: dict | None, b: dict | None) -> str:
    if not isinstance(a, dict) or not isinstance(b, dict):
        return ""
    for token, i in a.items():
        if b.get(token) != i:
            return (f"; e.g. {quoted(token, 80)} is id {shown(i, 40)} in the draft, {shown(b.get(token), 40)} "
                    "in the target")
    return ""


def tokenizer_check(draft, target) -> list[Diagnostic]:
    if draft.source == target.source:
        return []  # the target's own MTP layers
    d_src, t_src = model_of(draft), model_of(target)
    if d_src is None or t_src is None or d_src.same_model(t_src):
        return []
    if same_blobs(d_src, t_src):
        return []  # identical files by content hash: nothing to read
    d, d_why = tokenizer_summary(d_src)
    # the target's tokenizer is read only when the draft's could be: a hub target's tokenizer.json
    # is megabytes that would answer nothing here
    t, t_why = tokenizer_summary(t_src) if d is not None else (None, "")
    if d is None or t is None:
        why = "; ".join(f"{side}: {w}" for side, w in (("draft", d_why), ("target", t_why)) if w)
        return [diag("SRG671", f"tokenizer identity not checked ({why}): only vocab_size was compared",
                     Location((d_src if d is None else t_src).location()), severity=INFO)]
    if d["vocab"] == t["vocab"] and d["special"] == t["special"]:
        return []
    what = "vocabularies differ" if d["vocab"] != t["vocab"] else "special tokens differ: " + ", ".join(
        f"{k} {quoted(d['special'].get(k), 80)} vs {quoted(t['special'].get(k), 80)}" for k in SPECIAL_KEYS
        if d["special"].get(k) != t["special"].get(k))
    return [diag("SRG671", f"draft and target tokenizers are not the same ({what}; {d['size']} vs {t['size']} tokens"
                 f"{first_difference(d['tokens'], t['tokens'])}): the draft's ids mean other tokens in the target",
                 Location(d_src.location("tokenizer.json")),
                 "use a draft trained with the target's tokenizer (vLLM serves the draft with the target's tokenizer)")]
