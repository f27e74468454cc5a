"""One fact, one line (issue 53): a general finding that a more specific check restates for the judged
release is dropped, so the user reads what the difference does, once. Which code restates which is data:
`restated_by` in surgery/data/codes.yaml, per config key (SRG330's max_position_embeddings is restated by
the length checks SRG645 / SRG641 / SRG620, its rope_theta by the RoPE checks SRG618 / SRG619)."""
from __future__ import annotations

from ..diagnostics import Diagnostic, catalogue


def drop_restated(diagnostics: list[Diagnostic]) -> list[Diagnostic]:
    present = {(d.code, (d.location.file if d.location else None)) for d in diagnostics}
    out = []
    for d in diagnostics:
        rules = catalogue().get(d.code, {}).get("restated_by") or {}
        key = ((d.location.key_path if d.location else None) or "").rsplit(".", 1)[-1]
        file = d.location.file if d.location else None
        if any((code, file) in present for code in rules.get(key, ())):
            continue
        out.append(d)
    return out
