"""The probe's written patch, read back (issue 66: `--write` closes the loop).

`surgery probe --write FILE` emits the answers it decided as `config_patch` (write.py). Every command that
takes a pair takes it back with `--patch FILE` (`validate`, `plan`, `audit`, `apply` on every engine): the
draft is replaced by a copy of it that says the patch (the config edits made, the weight edits made again by
name: `drop`, `d2t_absolute_to_offsets`), in a temporary folder removed when the command ends, so what is
checked, applied and measured is the wiring the probe decided, never the draft as it was. `--write-draft DIR`
keeps such a copy for `vllm serve` (weights linked where unchanged); the plugin refuses a served draft that does
not say the patch selected with `additional_config={"surgery": {"patch": FILE}}` (SRG505,
surgery/checks/probe_patch.py, which also reads the file).

The patch is refused (a usage error, exit 2: SRG011) when it is not a probe document, names no
config_patch, or was measured on another draft (`config_patch.file` names another folder than --draft and
the two config.json files differ: applying it there would claim a measurement nobody made)."""
from __future__ import annotations

import contextlib
import json
import tempfile
from pathlib import Path

from ..checks.probe_patch import TENSOR_OPS, read_patch  # noqa: F401 - the one reader of the patch
from ..text.diagnostics import Location, SurgeryError, diag
from .draftcopy import candidate_folder
from .answers import DROP
from .weights import d2t_values


def edits_of(patch: dict) -> tuple:
    return tuple(patch.get("set", {}).items()) + tuple((k, DROP) for k in patch.get("drop", []))


def _bad(path, why: str) -> SurgeryError:
    return SurgeryError(diag("SRG011", f"--patch {path}: {why}", Location(file=str(path)),
                             hint="give the file `surgery probe ... --write FILE` wrote"))


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
