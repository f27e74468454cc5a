"""The probe's written patch (`surgery probe --write FILE`, issue 66), read: its `config_patch`, and whether a
draft's config says it.

Why here (the checks' layer): the vLLM plugin's start-up check takes the patch too
(`additional_config={"surgery": {"patch": FILE}}`): vLLM builds the draft from the folder it is given and has no
way to override a draft's config, so the plugin cannot make the patch; it refuses a draft that does not say it
(SRG505), so a server never runs the wiring the probe measured against. surgery/probe/patch.py makes the
patched copy that `validate / plan / audit / apply --patch` and `probe --write-draft` use."""
from __future__ import annotations

from pathlib import Path

from ..text.diagnostics import Diagnostic, Location, SurgeryError, diag
from ..text.localfile import read_text_file
from ..text.yamlload import load_yaml_text

MAX_PATCH_BYTES = 1 << 20
TENSOR_OPS = ("drop", "d2t_absolute_to_offsets")
ABSENT = object()


def _bad(path, why: str) -> SurgeryError:
    return SurgeryError(diag("SRG011", f"patch {path}: {why}", Location(file=str(path)),
                             hint="give the file `surgery probe ... --write FILE` wrote"))


def read_patch(path) -> dict:
    """The `config_patch` mapping of a probe document (set, drop, tensor_ops, file); SRG011 otherwise."""
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


def lookup(cfg, dotted: str):
    for part in dotted.split("."):
        if not isinstance(cfg, dict) or part not in cfg:
            return ABSENT
        cfg = cfg[part]
    return cfg


def unsaid(patch: dict, raw: dict) -> list[str]:
    """The patch's config edits `raw` (a draft's config.json) does not say: `key: want X, has Y`."""
    out = []
    for key, want in (patch.get("set") or {}).items():
        has = lookup(raw, key)
        if has is ABSENT or has != want:
            out.append(f"{key}: the patch sets {want!r}, the draft has {'nothing' if has is ABSENT else repr(has)}")
    for key in patch.get("drop") or ():
        has = lookup(raw, key)
        if has is not ABSENT:
            out.append(f"{key}: the patch drops it, the draft has {has!r}")
    return out


def start_finding(patch_path, raw: dict, where: str) -> Diagnostic | None:
    """SRG505 when the draft an engine is about to serve does not say the patch selected with it."""
    missing = unsaid(read_patch(patch_path), raw)
    if not missing:
        return None
    return diag("SRG505", f"the draft served does not say the probe's patch {patch_path}: {'; '.join(missing[:6])}",
                Location(file=where))
