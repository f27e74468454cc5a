"""Copied KV scales follow the target when its weights are reloaded (vLLM re-runs
process_weights_after_loading on reload, which rewrites the target's scales)."""
import copy
import logging
import sys
from pathlib import Path
from types import SimpleNamespace

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
# the stand-in models live with the copy_attrs tests; on the path here too, so that this file also
# runs on its own (in a whole run that folder happened to be on sys.path already)
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ops" / "copy_attrs"))
from test_tp_shards import FakeAttention, _model  # noqa: E402
from testpaths import E2B, E2B_ASSISTANT, GEMMA_RECIPE  # noqa: E402

from surgery import Runtime, facts_from_config, load_recipe, resolve  # noqa: E402
from surgery.applier import apply_plan  # noqa: E402
from surgery.facts import read_config  # noqa: E402
from surgery.vllm import kv_scales, live_apply, plugin, state  # noqa: E402
from surgery.vllm.log import REFRESHED  # noqa: E402
from surgery.live.vllm import VLLMContext  # noqa: E402


def test_refresh_copies_new_target_scales_in_place(caplog):
    t_cfg, d_cfg = (copy.deepcopy(read_config(p)[0]) for p in (E2B, E2B_ASSISTANT))
    plan = resolve(load_recipe(GEMMA_RECIPE), facts_from_config(d_cfg), facts_from_config(t_cfg), Runtime())
    plan = type(plan)(**{**plan.__dict__, "operations": tuple(o for o in plan.operations
                                                              if o.op in ("share_kv", "copy_attrs"))})
    target = _model("model", plan.target["layer_types"], 1, lambda i: torch.tensor(0.01 * (i + 1)))
    draft = _model("draft_model", plan.draft["layer_types"], 1, lambda i: torch.tensor(1.0))
    adapter = VLLMContext(is_attention=lambda m: isinstance(m, FakeAttention))
    report = apply_plan(plan, draft, target, adapter)
    held = {i: draft.model.layers[i].self_attn.attn._k_scale for i in range(4)}  # what kernels hold on to
    for layer in target.model.layers:  # a reload rewrites the target's scales
        layer.self_attn.attn._k_scale.fill_(0.5)
        layer.self_attn.attn._k_scale_float = 0.5
    proposer = SimpleNamespace(model=draft)
    state.of(proposer).loaded(plan, report, None, target, [], {}, None)
    state.of(proposer).context = adapter  # the context the plan was applied with
    copied = len([o for o in plan.ops("copy_attrs") if not o.attr.endswith("_cpu")])  # no _cpu attrs on stand-ins
    assert kv_scales.refresh(proposer) == copied
    for i in range(4):
        attn = draft.model.layers[i].self_attn.attn
        assert attn._k_scale is held[i] and float(attn._k_scale) == 0.5  # same tensor, new value
        assert attn._k_scale_float == 0.5
    with caplog.at_level(logging.INFO):  # the runner's hook: the same refresh, and its log line
        live_apply.after_weights_reloaded(SimpleNamespace(drafter=proposer))
    lines = REFRESHED.find("\n".join(r.getMessage() for r in caplog.records))
    assert [int(x["attributes"]) for x in lines] == [copied], caplog.text


def test_register_wraps_reload_weights():
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    plugin.register()
    assert getattr(GPUModelRunner.__dict__["reload_weights"], "__surgery_hook__", None) is not None
