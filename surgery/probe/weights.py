"""The probe's two weight-side questions, read from the draft's safetensors (headers, plus the d2t
values: a bounded read through surgery/checks/safetensors_header.py, the reader `validate --weights`
uses):

- the d2t convention: vLLM reads d2t as offsets (target id = i + d2t[i], weights_layout.yaml); an
  exporter may have written absolute target ids (d2t[i] = target id). The weights check (SRG608)
  flags a table that is wrong under the offsets reading; when BOTH readings give a valid map (every
  target id inside the vocabulary, strictly increasing: a draft vocabulary is a sorted subset) the
  values cannot say which one the head was trained with, and the probe asks (SRG495);
- the draft's own embedding / lm_head (SRG613: it differs from the target's and the engine keeps it):
  a fine-tune the head was trained with, or a copy an export perturbed or left random. The other
  answer drops the tensor from the candidate's copy, so the engine shares the target's.
"""
from __future__ import annotations

from pathlib import Path

from ..checks.safetensors_header import read_checkpoint, read_values
from ..resources import load_data
from ..text.diagnostics import Location, SurgeryError, diag

MAX_D2T = 1 << 18  # values read to decide the convention (a 32k draft vocabulary is read whole)


def _layout() -> dict:
    return load_data("data/weights_layout.yaml")


def d2t_tensor(folder: Path):
    """The draft's d2t TensorInfo, or None (no safetensors, no d2t)."""
    try:
        return read_checkpoint(str(folder)).first(_layout()["eagle3"]["d2t"])
    except SurgeryError:
        return None


def d2t_readings(values: list[int], vocab: int) -> dict[str, list[int]]:
    """'offsets' / 'absolute' -> the target ids that reading gives, for each reading that is a valid map
    (inside the target vocabulary, strictly increasing)."""
    out = {}
    for name, targets in (("offsets", [i + v for i, v in enumerate(values)]), ("absolute", list(values))):
        if targets and all(0 <= t < vocab for t in targets) and all(b > a for a, b in zip(targets, targets[1:])):
            out[name] = targets
    return out


def d2t_values(folder: Path) -> list[int] | None:
    info = d2t_tensor(folder)
    if info is None or len(info.shape) != 1 or not info.dtype.startswith(("I", "U")) or info.numel > MAX_D2T:
        return None
    try:
        return [int(v) for v in read_values(info, 0, info.numel)]
    except SurgeryError:  # SRG026: a dtype or a file the reader cannot decode: no question asked
        return None


def d2t_finding(folder: Path, vocab: int | None):
    """SRG495 when the draft's d2t reads as a valid map in both conventions, else None."""
    if not vocab:
        return None
    values = d2t_values(folder)
    if values is None:
        return None
    readings = d2t_readings(values, vocab)
    if len(readings) < 2:
        return None
    info = d2t_tensor(folder)
    return diag("SRG495", f"d2t ({len(values)} values) is a valid draft -> target map both as offsets (target id = "
                f"i + d2t[i], what the engine reads) and as absolute target ids: the values cannot say which one "
                f"the head was trained with", Location(file=info.file, key_path=info.name))


def role_tensor(folder: Path, role: str):
    """The draft's own tensor for `role` (input_embeddings / lm_head), or None."""
    try:
        return read_checkpoint(str(folder)).first(_layout()["roles"][role])
    except SurgeryError:
        return None


def roles_in(message: str) -> str | None:
    """The role an SRG613 message is about (its first word)."""
    head = message.split(":", 1)[0].strip()
    return head if head in _layout()["roles"] else None
