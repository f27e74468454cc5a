"""Oracle: `surgery.pipeline.pp_layer_range` (re-implemented so the resolver need not import vLLM)
vs vLLM's own `vllm.distributed.utils.get_pp_indices`, with VLLM_PP_LAYER_PARTITION unset."""
from __future__ import annotations

import pytest

pytest.importorskip("vllm")

import oracle_helpers  # noqa: E402,F401  (puts the checkout on sys.path when surgery is not installed)
from surgery.pipeline import pp_layer_range, pp_partitions, stage_of_layer  # noqa: E402

CASES = [(n, pp) for n in range(1, 81) for pp in range(1, 9) if pp <= n]


@pytest.fixture(scope="module")
def get_pp_indices():
    import os

    import vllm.envs as envs
    from vllm.distributed.utils import get_pp_indices

    saved = os.environ.pop("VLLM_PP_LAYER_PARTITION", None)
    assert envs.VLLM_PP_LAYER_PARTITION is None
    yield get_pp_indices
    if saved is not None:
        os.environ["VLLM_PP_LAYER_PARTITION"] = saved


def test_pp_layer_range_matches_vllm(get_pp_indices):
    bad = []
    for n, pp in CASES:
        for rank in range(pp):
            ours, theirs = pp_layer_range(n, rank, pp), tuple(get_pp_indices(n, rank, pp))
            if ours != theirs:
                bad.append(f"num_layers={n} pp_size={pp} rank={rank}: ours {ours} vllm {theirs}")
    assert not bad, f"{len(bad)} disagreements, e.g.\n" + "\n".join(bad[:20])


def test_partitions_and_stage_of_layer_consistent(get_pp_indices):
    for n, pp in CASES:
        parts = pp_partitions(n, pp)
        assert sum(parts) == n and len(parts) == pp
        for layer in range(n):
            start, end = get_pp_indices(n, stage_of_layer(n, layer, pp), pp)
            assert start <= layer < end, (n, pp, layer)
