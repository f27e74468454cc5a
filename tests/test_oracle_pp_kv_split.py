"""Oracle: the target's OWN KV sharing under pipeline parallelism (SRG350).

Which layer each KV-shared target layer reads comes from transformers' own Gemma4TextAttention
modules (a shared layer of type T reads the layer that stores `shared_kv_states[T]`); where each layer
lives comes from vLLM's own `get_pp_indices`. Our plan must report SRG350 exactly when some reader and
its source land on different stages, and name every crossing reader.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("vllm")

import oracle_helpers as h  # noqa: E402
from oracle_helpers import FULL, SLIDING  # noqa: E402

transformers.logging.set_verbosity_error()

S, F = SLIDING, FULL
LAYOUTS = [
    ([S, S, F, S, S, F], 2),          # the built-in tiny target's shape
    ([S, S, S, S, F, S, S, S, S, F], 4),
    ([S, F, S, F, S, F, S, F], 5),
    ([S, S, S, F, S, S, S, F, S, S, S, F], 0),  # no shared tail: never crosses
    ([S, S, F, F, S, F, S], 3),
]


def _transformers_sources(target_hf) -> dict[int, int]:
    attn = h.hf_attention_modules(target_hf.get_text_config())
    store = {a.layer_type: i for i, a in enumerate(attn) if a.store_full_length_kv}
    return {i: store[a.layer_type] for i, a in enumerate(attn) if a.is_kv_shared_layer and a.layer_type in store}


def _crossing_readers(sources: dict[int, int], n: int, pp: int) -> set[int]:
    from vllm.distributed.utils import get_pp_indices

    def stage(layer: int) -> int:
        return next(r for r in range(pp) if get_pp_indices(n, r, pp)[0] <= layer < get_pp_indices(n, r, pp)[1])

    return {reader for reader, source in sources.items() if stage(reader) != stage(source)}


def _reported_readers(plan) -> set[int]:
    out: set[int] = set()
    for d in plan.diagnostics:
        if d.code != "SRG350":
            continue
        for ranges in re.findall(r"layers ([\d, -]+) \(stage \d+\) read", d.message):
            for part in ranges.split(","):
                a, _, b = part.strip().partition("-")
                out.update(range(int(a), int(b or a) + 1))
    return out


@pytest.mark.parametrize("layer_types,num_shared", LAYOUTS)
def test_own_kv_split_matches_transformers_and_vllm(layer_types, num_shared):
    from surgery import Runtime, facts_from_config

    target = h.target_text_config(layer_types, num_shared)
    target_hf = h.hf_target_config(target)
    sources = _transformers_sources(target_hf)
    assert facts_from_config(target, "target.json").own_kv_sources() == sources
    draft = h.assistant_config([S, F])
    n = len(layer_types)
    for pp in range(1, min(n, 4) + 1):
        plan = h.our_plan(draft, target, Runtime(pp_size=pp))
        expected = _crossing_readers(sources, n, pp) if pp > 1 else set()
        assert _reported_readers(plan) == expected, (layer_types, num_shared, pp, plan.diagnostics)
        assert any(d.code == "SRG350" for d in plan.errors) == bool(expected)


def test_cli_names_the_e2b_split_before_any_engine():
    """`surgery validate gemma4-mtp --pp 2` on the real E2B configs: exit 1, SRG350 with the split."""
    target, draft = h.CONFIGS / "gemma-4-E2B-it.json", h.CONFIGS / "gemma-4-E2B-it-assistant.json"
    out = subprocess.run([sys.executable, "-m", "surgery", "validate", "gemma4-mtp", "--target", str(target),
                          "--draft", str(draft), "--pp", "2", "--json"], capture_output=True, text=True,
                         cwd=h.REPO, timeout=60)
    assert out.returncode == 1, out.stderr
    report = json.loads(out.stdout)
    split = [d for d in report["diagnostics"] if d["code"] == "SRG350"]
    assert len(split) == 1, report["diagnostics"]
    assert "stage 0: layers 0..17 | stage 1: layers 18..34" in split[0]["message"]
    assert "read layer 13 (stage 0)" in split[0]["message"] and "read layer 14 (stage 0)" in split[0]["message"]
    assert "Traceback" not in out.stderr
