"""One fact, one line (issue 53): a general finding that a more specific check restates for the judged
release is dropped, so the user reads what the difference does, once. Which code restates which is data:
`restated_by` in surgery/data/codes.yaml, per config key: a list of codes (SRG330's rope_theta is restated
by the RoPE checks SRG618 / SRG619 when they fire), or "*" for a key a check always covers with more
knowledge (SRG330's max_position_embeddings: the length checks know the serving length)."""
from __future__ import annotations

from ..text.diagnostics import Diagnostic, catalogue


def drop_restated(diagnostics: list[Diagnostic]) -> list[Diagnostic]:
    present = {(d.code, (d.location.file if d.location else None)) for d in diagnostics}
    out = []
    for d in diagnostics:
        rules = catalogue().get(d.code, {}).get("restated_by") or {}
        key = ((d.location.key_path if d.location else None) or "").rsplit(".", 1)[-1]
        file = d.location.file if d.location else None
        restaters = rules.get(key, ())
        if restaters == "*" or any((code, file) in present for code in restaters):
            continue
        out.append(d)
    return out
