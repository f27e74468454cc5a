"""SRG671: do the draft and the target tokenize alike? Read from the two checkpoints' tokenizer files
(tokenizer.json's vocabulary, merges and added tokens; tokenizer_config.json's special tokens), not only
vocab_size: a standalone draft with another vocabulary of the same size proposes ids that mean other
tokens, and output is silently corrupted or acceptance collapses (sgl-project/sglang#23838, #24051).
vLLM serves the draft with the target's tokenizer (SpeculativeConfig: tokenizer = the target's unless
use_heterogeneous_vocab), so draft ids must mean the target's tokens. Bounded reads, no tokenizers package.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ..diagnostics import INFO, Diagnostic, Location, diag

MAX_TOKENIZER_BYTES = 64 << 20
SPECIAL_KEYS = ("bos_token", "eos_token", "pad_token", "unk_token")


def folder_of(source: str) -> Path | None:
    p = Path(source)
    folder = p if p.is_dir() else p.parent
    return folder if (folder / "config.json").exists() or p.name == "config.json" else None


def tokenizer_summary(folder: Path) -> tuple[dict | None, str]:
    """({'vocab': digest, 'size': n, 'special': {...}}, why-not). Only tokenizer.json is compared by content."""
    path = folder / "tokenizer.json"
    if not path.is_file():
        found = sorted(p.name for p in folder.glob("*") if p.name in ("tokenizer.model", "vocab.json", "vocab.txt"))
        return None, ("no tokenizer.json" + (f" (only {', '.join(found)})" if found else ""))
    if path.stat().st_size > MAX_TOKENIZER_BYTES:
        return None, f"tokenizer.json larger than {MAX_TOKENIZER_BYTES >> 20} MiB"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        return None, f"tokenizer.json unreadable ({type(exc).__name__})"
    model = data.get("model") if isinstance(data, dict) else None
    if not isinstance(model, dict):
        return None, "tokenizer.json has no model section"
    vocab = model.get("vocab")
    added = sorted((t.get("id"), t.get("content")) for t in data.get("added_tokens") or [] if isinstance(t, dict))
    payload = json.dumps({"type": model.get("type"), "vocab": vocab, "merges": model.get("merges"), "added": added},
                         sort_keys=True, default=str).encode()
    size = (len(vocab) if isinstance(vocab, (dict, list)) else 0) + len(added)
    special = {}
    cfg = folder / "tokenizer_config.json"
    if cfg.is_file() and cfg.stat().st_size <= MAX_TOKENIZER_BYTES:
        try:
            tc = json.loads(cfg.read_text(encoding="utf-8"))
            for key in SPECIAL_KEYS:
                value = tc.get(key)
                special[key] = value.get("content") if isinstance(value, dict) else value
        except (OSError, UnicodeDecodeError, ValueError):
            pass
    return {"vocab": hashlib.sha256(payload).hexdigest(), "size": size, "special": special,
            "tokens": vocab if isinstance(vocab, dict) else None}, ""


def first_difference(a: dict | None, b: dict | None) -> str:
    if not isinstance(a, dict) or not isinstance(b, dict):
        return ""
    for token, i in a.items():
        if b.get(token) != i:
            return f"; e.g. {token!r} is id {i} in the draft, {b.get(token)} in the target"
    return ""


def tokenizer_check(draft, target) -> list[Diagnostic]:
    if draft.source == target.source:
        return []  # the target's own MTP layers
    d_folder, t_folder = folder_of(draft.source), folder_of(target.source)
    if d_folder is None or t_folder is None or d_folder == t_folder:
        return []
    d, d_why = tokenizer_summary(d_folder)
    t, t_why = tokenizer_summary(t_folder)
    if d is None or t is None:
        why = "; ".join(f"{side}: {w}" for side, w in (("draft", d_why), ("target", t_why)) if w)
        return [diag("SRG671", f"tokenizer identity not checked ({why}): only vocab_size was compared",
                     Location(str(d_folder if d is None else t_folder)), severity=INFO)]
    if d["vocab"] == t["vocab"] and d["special"] == t["special"]:
        return []
    what = "vocabularies differ" if d["vocab"] != t["vocab"] else "special tokens differ: " + ", ".join(
        f"{k} {d['special'].get(k)!r} vs {t['special'].get(k)!r}" for k in SPECIAL_KEYS
        if d["special"].get(k) != t["special"].get(k))
    return [diag("SRG671", f"draft and target tokenizers are not the same ({what}; {d['size']} vs {t['size']} tokens"
                 f"{first_difference(d['tokens'], t['tokens'])}): the draft's ids mean other tokens in the target",
                 Location(str(d_folder / "tokenizer.json")),
                 "use a draft trained with the target's tokenizer (vLLM serves the draft with the target's tokenizer)")]
