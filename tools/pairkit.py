"""What the pair builders share: one definition each, imported by tools/build_tiny_pair.py,
tools/build_family_pairs.py and tools/build_deepseek_pair.py (which never import one another in a
loop: build_family_pairs runs build_deepseek_pair as one of its stages, nothing imports back).

- the corpus: Python standard-library source (a fixed, sorted file list present on every machine),
  split so that the last ``HELD_OUT_FILES`` files are never trained on; the measurement prompts
  are line starts from those (``held_out_prompts``), the same for every built-in pair;
- training windows, the learning-rate schedule and the next-byte LM loop;
- the target's greedy continuations: the draft's training pool and the distinct-token /
  distinct-4-gram statistics the index records next to every acceptance (a looping target makes
  any draft look good);
- the unrolled KL + CE loss of the heads trained with EAGLE-3's "training-time test";
- writing model folders (atomic) and merging a builder's figures into surgery/data/pairs/index.yaml.

Not part of the package: the wheel ships the pairs these build, not the builders.
"""

from __future__ import annotations

import json
import math
import sys
import sysconfig
import time
from pathlib import Path

import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from surgery.tinymodels import bytevocab  # noqa: E402
from surgery.folders import staged_dir  # noqa: E402

PAIR_INDEX = REPO / "surgery" / "data" / "pairs" / "index.yaml"
HELD_OUT_FILES = 8  # last files of the sorted corpus list: measurement prompts only, never trained on
CORPUS_FILES = (  # stdlib modules present in every CPython 3.9+; missing ones are skipped
    "argparse.py", "ast.py", "base64.py", "bisect.py", "calendar.py", "cmd.py", "code.py",
    "codecs.py", "colorsys.py", "configparser.py", "contextlib.py", "copy.py", "csv.py",
    "dataclasses.py", "datetime.py", "difflib.py", "dis.py", "enum.py", "fnmatch.py",
    "fractions.py", "ftplib.py", "functools.py", "genericpath.py", "getopt.py", "gettext.py",
    "glob.py", "gzip.py", "hashlib.py", "heapq.py", "hmac.py", "imaplib.py", "inspect.py",
    "ipaddress.py", "keyword.py", "linecache.py", "locale.py", "logging/__init__.py",
    "mailbox.py", "mimetypes.py", "netrc.py", "ntpath.py", "numbers.py", "opcode.py",
    "operator.py", "optparse.py", "os.py", "pathlib.py", "pickle.py", "pkgutil.py",
    "platform.py", "plistlib.py", "poplib.py", "posixpath.py", "pprint.py", "queue.py",
    "quopri.py", "random.py", "reprlib.py", "sched.py", "secrets.py", "selectors.py",
    "shelve.py", "shlex.py", "shutil.py", "signal.py", "smtplib.py", "socket.py",
    "socketserver.py", "statistics.py", "string.py", "stringprep.py", "struct.py",
    "subprocess.py", "symtable.py", "tabnanny.py", "tarfile.py", "tempfile.py", "textwrap.py",
    "threading.py", "timeit.py", "token.py", "tokenize.py", "trace.py", "traceback.py",
    "types.py", "typing.py", "uuid.py", "warnings.py", "wave.py", "weakref.py", "webbrowser.py",
    "zipapp.py", "zipimport.py",
)

# the family pairs (build_family_pairs.py and its DeepSeek stage, build_deepseek_pair.py)
FAMILY_SEED = 4321  # each stage draws from its own offset of it
FAMILY_HIDDEN = 64  # hidden size of the Llama target and of the DeepSeek target
K_STEPS = 3  # draft steps every head is unrolled over in training


def logger(name: str):
    """A ``log(msg)`` that prints ``[name] msg`` at once (builds run for half an hour)."""
    return lambda msg: print(f"[{name}] {msg}", flush=True)


# ----------------------------------------------------------------------------------- corpus


def corpus_files() -> list[Path]:
    """The corpus files present on this machine, in sorted name order."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    return [stdlib / n for n in sorted(CORPUS_FILES) if (stdlib / n).is_file()]


def corpus_split() -> tuple[torch.Tensor, list[torch.Tensor]]:
    """(training token ids, [held-out file token ids]): the last ``HELD_OUT_FILES`` files of the
    sorted list are kept out of every training step, so prompts taken from them measure the pairs
    on text they have never seen (every builder trains on the first part only)."""
    files = corpus_files()
    train, held = files[:-HELD_OUT_FILES], files[-HELD_OUT_FILES:]
    ids: list[int] = []
    for f in train:
        ids += bytevocab.encode(f.read_text(encoding="utf-8", errors="replace"))
    held_ids = [torch.tensor(bytevocab.encode(f.read_text(encoding="utf-8", errors="replace"))) for f in held]
    return torch.tensor(ids, dtype=torch.long), held_ids


def held_out_prompts(n: int = 8, length: int = 24) -> list[list[int]]:
    """``n`` prompts (BOS + ``length - 1`` bytes from a line start) from the held-out files,
    deterministic: the first indented line start of every 97th line."""
    _, held = corpus_split()
    prompts = []
    for ids in held:
        starts = line_starts(ids)
        for s in starts[10::97].tolist():
            text = ids[s : s + length - 1]
            if len(text) == length - 1 and len(prompts) < n and int(text[0]) == ord(" ") + bytevocab.BYTE_OFFSET:
                prompts.append([bytevocab.BOS_ID, *text.tolist()])
        if len(prompts) >= n:
            break
    return prompts


def line_starts(corpus: torch.Tensor) -> torch.Tensor:
    """Offsets just after a newline: windows start at line starts, like the prompts."""
    newline = ord("\n") + bytevocab.BYTE_OFFSET
    return (corpus == newline).nonzero().flatten() + 1


def sample_windows(corpus, starts, gen: torch.Generator, batch: int, length: int) -> torch.Tensor:
    """``batch`` windows of ``length`` tokens: BOS + text from a random line start."""
    ok = starts[starts < len(corpus) - length]
    picks = ok[torch.randint(len(ok), (batch,), generator=gen)]
    rows = [torch.cat([torch.tensor([bytevocab.BOS_ID]), corpus[p : p + length - 1]]) for p in picks.tolist()]
    return torch.stack(rows)


# ----------------------------------------------------------------------------------- training


def lr_at(step: int, total: int, peak: float, warmup: int) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    return peak * 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, total - warmup)))


def train_lm(model, corpus, starts, steps, batch, length, gen, log, peak=3e-3, name="target") -> None:
    """Plain next-byte LM training of a target; enough for non-trivial, code-like greedy
    continuations. The same loop for every target (the shipped weights were trained by it)."""
    opt = torch.optim.AdamW(model.parameters(), lr=peak, betas=(0.9, 0.95), weight_decay=0.01)
    model.train()
    t0 = time.perf_counter()
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, steps, peak, 50)
        x = sample_windows(corpus, starts, gen, batch, length)
        loss = model(input_ids=x, labels=x).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 100 == 0 or step == steps - 1:
            log(f"{name} step {step:4d} loss {loss.item():.3f} ({time.perf_counter() - t0:.0f}s)")
    model.eval()


def unrolled_loss(per_step, t_logits, keep=None):
    """(loss, top-1 agreement per step) of the unrolled draft steps: step s at anchor p is scored
    against the target's distribution at p + s, KL(target || draft) + CE(target argmax); ``keep``
    restricts the teacher to a reduced draft vocabulary. One definition for every head builder."""
    q_len = per_step[0].shape[1]
    total, accs = 0.0, []
    for s, logits in enumerate(per_step, start=1):
        teacher = t_logits[:, s : s + q_len]
        if keep is not None:
            teacher = teacher[..., keep]
        logp = F.log_softmax(logits, -1)
        kl = F.kl_div(logp, F.log_softmax(teacher, -1), log_target=True, reduction="none").sum(-1).mean()
        ce = F.cross_entropy(logp.flatten(0, 1), teacher.argmax(-1).flatten())
        total = total + kl + ce
        accs.append((logits.argmax(-1) == teacher.argmax(-1)).float().mean().item())
    return total, accs


def distil(params, pool, steps, batch, gen, losses, log, name, peak=3e-3) -> None:
    """The draft-training loop of every builder: AdamW over ``params`` (no weight decay, warmup 30
    then cosine), each step on ``batch`` windows drawn from the greedy ``pool`` with ``gen``;
    ``losses(x)`` returns (loss, top-1 agreement per draft step) for that batch."""
    opt = torch.optim.AdamW(params, lr=peak, betas=(0.9, 0.95), weight_decay=0.0)
    t0 = time.perf_counter()
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, steps, peak, 30)
        x = pool[torch.randint(len(pool), (batch,), generator=gen)]
        total, accs = losses(x)
        opt.zero_grad(set_to_none=True)
        total.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        if step % 50 == 0 or step == steps - 1:
            log(f"{name} step {step:4d} loss {total.item():.3f} top1/step [{' '.join(f'{a:.2f}' for a in accs)}] "
                f"({time.perf_counter() - t0:.0f}s)")


# ----------------------------------------------------------------------------------- greedy


@torch.no_grad()
def greedy_continue(target, prompts: torch.Tensor, n: int) -> torch.Tensor:
    """Batched greedy continuation (all prompts have the same length, no padding needed)."""
    out = target(input_ids=prompts, use_cache=True, logits_to_keep=1)
    cache, seq = out.past_key_values, [prompts]
    for _ in range(n):
        tok = out.logits[:, -1:].argmax(-1)
        seq.append(tok)
        out = target(input_ids=tok, past_key_values=cache, use_cache=True, logits_to_keep=1)
    return torch.cat(seq, dim=1)


def distinct_ratio(tokens: list[int]) -> float:
    return len(set(tokens)) / max(1, len(tokens))


def distinct_4gram_ratio(tokens: list[int]) -> float:
    grams = [tuple(tokens[i : i + 4]) for i in range(len(tokens) - 3)]
    return len(set(grams)) / max(1, len(grams))


def greedy_stats(target, prompts, log, n: int = 48) -> dict:
    """Distinct-token and distinct-4-gram ratios of the target's ``n``-token greedy continuations
    of the held-out prompts, averaged over prompts (a collapsed model loops: its 4-gram ratio falls
    towards 0). A draft of a looping target gets a high acceptance for free, so every pair's
    acceptance is reported next to these."""
    cont = greedy_continue(target, torch.tensor(prompts), n)[:, len(prompts[0]):]
    ratios = [distinct_ratio(r.tolist()) for r in cont]
    ratios4 = [distinct_4gram_ratio(r.tolist()) for r in cont]
    stats = {"distinct_token_ratio": round(sum(ratios) / len(ratios), 3),
             "distinct_4gram_ratio": round(sum(ratios4) / len(ratios4), 3)}
    log(f"target greedy on held-out prompts: {stats}")
    for r in cont[:3]:
        log("  " + repr(bytevocab.decode(r.tolist())))
    return stats


def greedy_pool(target, corpus, starts, gen, n_seqs: int, prompt_len: int = 48, gen_len: int = 80) -> torch.Tensor:
    """Windows of (stdlib text prompt + the target's greedy continuation), generated once: the
    continuation is exactly the text the draft has to predict at inference."""
    chunks = []
    for _ in range(0, n_seqs, 64):
        prompts = sample_windows(corpus, starts, gen, 64, prompt_len)
        chunks.append(greedy_continue(target, prompts, gen_len))
    return torch.cat(chunks)[:n_seqs]


# ----------------------------------------------------------------------------------- writing


def write_hf_folder(model, dest: Path, extra_config: dict | None = None) -> None:
    """Save ``model`` as an HF folder at ``dest`` atomically (temp dir in the same parent, then
    ``os.replace``), so a crash never leaves a half-written folder that looks complete.

    ``extra_config`` keys are merged into config.json: transformers 5.19 serialises the full-layer
    head size only as ``per_layer_config``; we also keep ``global_head_dim`` (what the public
    configs and older transformers use) so both readers understand the folder.
    """
    with staged_dir(dest) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        if extra_config:
            merge_config(tmp / "config.json", extra_config)


def merge_config(path: Path, extra: dict) -> None:
    """Merge ``extra`` into the JSON at ``path`` (dict values one level deep: ``text_config``)."""
    cfg = json.loads(path.read_text())
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(cfg.get(key), dict):
            cfg[key].update(value)
        else:
            cfg[key] = value
    path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


INDEX_HEADER = (
    "# Built-in miniature pairs per recipe family: `surgery apply RECIPE --engine vllm` with no model\n"
    "# arguments runs these. Folders are relative to this file. Written by tools/build_family_pairs.py\n"
    "# (gemma4-mtp: tools/build_tiny_pair.py). Prompts are held-out text (files never trained on);\n"
    "# byte-level vocabulary of all pairs: pad 0, eos 1, bos 2, byte b -> token b + 4.\n"
)


def param_count(folder: Path) -> int:
    """Parameters stored in a folder's safetensors."""
    from safetensors import safe_open

    with safe_open(str(folder / "model.safetensors"), framework="pt") as fh:
        return sum(math.prod(fh.get_slice(k).get_shape()) for k in fh.keys())


def update_index(path: Path, entries: dict) -> None:
    """Merge ``entries`` (name -> computed keys) into the pair index and rewrite it. Entries and
    keys a builder does not compute (another builder's pairs; ``tokenizer``, ``summary``,
    ``rebuild``) are kept as they are, so each builder owns only its own figures."""
    import yaml

    current = {}
    if path.is_file():
        current = (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("pairs") or {}
    pairs = dict(current)
    for name, keys in entries.items():
        pairs[name] = {**(current.get(name) or {}), **keys}

    class Plain(yaml.SafeDumper):  # every entry written out in full (no &id001 / *id001 aliases)
        def ignore_aliases(self, data):
            return True

    body = yaml.dump({"pairs": pairs}, Dumper=Plain, sort_keys=False, allow_unicode=True, width=120)
    path.write_text(INDEX_HEADER + body, encoding="utf-8")
