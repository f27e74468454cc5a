"""What the release oracles are asked (shared by conftest.py's session fixtures and the tests): the grid's
cases with their published config folders, every cache dtype a judged release knows, the classes whose
facts are held to each release, and which cases the construct oracle builds."""
from __future__ import annotations

import json
from pathlib import Path

import grid


def all_cache_dtypes() -> list[str]:
    from surgery.engine.releases import release_data

    import venvs

    out: list[str] = []
    for version in venvs.RELEASES:
        for kv in release_data("vllm")["releases"][version].get("cache_dtypes") or []:
            if kv not in out:
                out.append(kv)
    return out


def published_cases(root: Path) -> list[dict]:
    out = []
    for case in grid.cases(all_cache_dtypes()):
        out.append({**case, "target": str(grid.published(Path(case["target_src"]), root)),
                    "draft": str(grid.published(Path(case["draft_src"]), root))})
    return out


def construct_cases(cases: list[dict]) -> list[dict]:
    """The grid without its serving-length rows: a length changes what the config layer says (the release
    oracle holds that), not which classes are built from the configs; 27 fewer constructions per release."""
    return [c for c in cases if c["max_model_len"] is None]


def facts_asked(facts: dict) -> list[str]:
    """The classes whose facts are held to the release: every speculative-decoding class, every grid
    target, every target said to relay aux hidden states, and the first ten said not to run pipelined."""
    classes = facts.get("classes") or {}
    targets = set()
    for _, _, target, _, _ in grid.PAIRS:
        archs = json.loads(Path(target).read_text(encoding="utf-8")).get("architectures") or []
        targets |= {a.replace("Gemma4ForConditionalGeneration", "Gemma4ForCausalLM") for a in archs}
    return sorted(set(facts.get("draft_architectures") or {}) | targets
                  | set(classes.get("aux_hidden_states_over_pp") or [])
                  | set((classes.get("architectures_without_pp") or [])[:10]))
