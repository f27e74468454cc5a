"""The probe's written patch, read back (issue 66: `--write` closes the loop).

`surgery probe --write FILE` emits the answers it decided as `config_patch` (write.py). Every command that
takes a pair takes it back with `--patch FILE` (`validate`, `plan`, `audit`, `apply` on every engine): the
draft is replaced by a copy of it that says the patch (the config edits made, the weight edits made again by
name: `drop`, `d2t_absolute_to_offsets`), in a temporary folder removed when the command ends, so what is
checked, applied and measured is the wiring the probe decided, never the draft as it was. `--write-draft DIR`
keeps such a copy for `vllm serve` (weights linked where unchanged).

The patch is refused (SRG490-style usage errors, exit 2: SRG011) when it is not a probe document, names no
config_patch, or was measured on another draft (`config_patch.file` names another folder than --draft and
the two config.json files differ: applying it there would claim a measurement nobody made)."""
from __future__ import annotations

import contextlib
import json
import tempfile
from pathlib import Path

from ..text.diagnostics import Location, SurgeryError, diag
from ..text.localfile import read_text_file
from ..text.yamlload import load_yaml_text
from .draftcopy import candidate_folder
from .answers import DROP
from .weights import d2t_values

MAX_PATCH_BYTES = 1 << 20
TENSOR_OPS = ("drop", "d2t_absolute_to_offsets")


def _bad(path, why: str) -> SurgeryError:
    return SurgeryError(diag("SRG011", f"--patch {path}: {why}", Location(file=str(path)),
                             hint="give the file `surgery probe ... --write FILE` wrote"))


def read_patch(path) -> dict:
    """The `config_patch` mapping of a probe document (set, drop, tensor_ops, file)."""
    text = read_text_file(Path(path), MAX_PATCH_BYTES, "patch")
    doc = load_yaml_text(text, str(path)).data
    patch = doc.get("config_patch") if isinstance(doc, dict) else None
    if not isinstance(patch, dict):
        raise _bad(path, "no config_patch mapping (not a `surgery probe --write` document)")
    if not isinstance(patch.get("set", {}), dict) or not isinstance(patch.get("drop", []), list):
        raise _bad(path, "config_patch.set must be a mapping and config_patch.drop a list")
    ops = patch.get("tensor_ops") or {}
    if patch.get("tensors") and not ops:
        raise _bad(path, "it names tensor edits without tensor_ops (written before issue 66): probe again")
    bad = {k: v for k, v in ops.items() if v not in TENSOR_OPS}
    if bad:
        raise _bad(path, f"unknown tensor operations {bad} (known: {', '.join(TENSOR_OPS)})")
    return patch


def edits_of(patch: dict) -> tuple:
    return tuple(patch.get("set", {}).items()) + tuple((k, DROP) for k in patch.get("drop", []))


def _tensors(patch: dict, draft: Path) -> tuple:
    """(name, values | DROP) for draftcopy.rewrite_tensors, from the named operations."""
    out = []
    for name, op in (patch.get("tensor_ops") or {}).items():
        if op == "drop":
            out.append((name, DROP))
        elif op == "d2t_absolute_to_offsets":
            values = d2t_values(draft)
            if values is None:
                raise _bad(draft, f"the patch rewrites {name} but the draft has no readable d2t")
            out.append((name, [v - i for i, v in enumerate(values)]))
    return tuple(out)


def check_same_draft(patch: dict, draft: Path, path) -> None:
    """Refuse a patch measured on another draft (its config.json differs from this one's, beyond the keys the
    patch itself sets or drops)."""
    measured = patch.get("file")
    if not measured or Path(measured).resolve() == (Path(draft) / "config.json").resolve():
        return
    try:
        theirs = json.loads(Path(measured).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return  # the measured draft is gone (another machine): the keys below still say what is patched
    ours = json.loads((Path(draft) / "config.json").read_text(encoding="utf-8"))
    touched = {k.split(".")[0] for k in list(patch.get("set", {})) + list(patch.get("drop", []))}
    differ = sorted(k for k in set(ours) | set(theirs) if k not in touched and ours.get(k) != theirs.get(k))
    if differ:
        raise _bad(path, f"it was measured on {measured}, whose config differs from {draft}'s in {differ[:6]}")


def patched_draft(patch_path, draft, dest: Path) -> Path:
    """`dest`: a copy of `draft` that says the patch."""
    draft = Path(draft)
    if not (draft / "config.json").is_file():
        raise _bad(patch_path, f"--draft {draft} is not a local model folder (a patch edits a folder's files)")
    patch = read_patch(patch_path)
    check_same_draft(patch, draft, patch_path)
    return candidate_folder(draft, edits_of(patch), dest, _tensors(patch, draft))


@contextlib.contextmanager
def patched_folder(patch_path, draft):
    """For the span of a command: a patched copy of `draft` (cli.py swaps it in for --draft)."""
    if draft is None:
        raise _bad(patch_path, "give --draft: the patch edits the draft folder it was measured on")
    with tempfile.TemporaryDirectory(prefix="surgery-patch-") as tmp:
        yield str(patched_draft(patch_path, draft, Path(tmp) / "draft"))
