"""What surgery knows about the engines (vLLM, SGLang, HF) and each of their releases, as data read once
per process. The one question at its face: what does release X do with this setup? `judge(engine,
version)` answers with that release's record (its methods, draft architectures, config fields, rules and
load-time class facts), with a coded line (SRG047) when the data does not cover `version` exactly.

What lives where:
- cards.py        the engine list and each engine's card (surgery/data/engines/<engine>.yaml), loaded once
- card_model.py   the card's typed models: what a card may hold, checked on load
- card_schema.py  the card's JSON Schema (schemas/engine-card.schema.json), generated from the models
- releases.py     each release's facts, read from its own wheel (surgery/data/releases/<engine>.json)
- matrix.py       the releases side by side: docs/releases.md and `surgery releases`
- servedarch.py   the architecture vLLM serves a draft config as, and EAGLE-3 head markers
- coverage.py     which draft families and methods the shipped recipes cover, against vLLM's own lists

A new release is one generated data file and one oracle run: add it to RELEASES in
tools/gen_engine_releases.py and run that tool (it rewrites surgery/data/releases/<engine>.json from the
wheel; then tools/gen_docs.py for docs/releases.md); for vLLM, build its oracle venv
(scripts/oracle_venv.sh <version>), add it to tests/release_oracle/venvs.py RELEASES and run
tests/release_oracle/, where the release's own config layer must agree with `surgery validate`.

Importing this package loads nothing else (no submodule, no YAML): every engine module's import runs it,
and `surgery validate`'s cold start counts (bench/cold_start.py).
"""
from __future__ import annotations


def judge(engine: str, version: str):
    """Release `version` of `engine` as surgery's data knows it: (Release | None, Diagnostic | None), the
    same as releases.release(). The diagnostic (SRG047) says when the data does not cover `version`
    exactly (the nearest older release answers) or covers nothing at or before it (no Release)."""
    from .releases import release  # on first use: the face stays free of its submodules

    return release(engine, version)
