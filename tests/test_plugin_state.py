"""The vLLM plugin's typed state (surgery/vllm/state.py): one `PluginState` per vLLM object, one engine
context per proposer, and every live change the plugin makes reversible.

Runs the plugin's hooks in engine order (dummy weights, draft loaded, KV caches bound, weights
reloaded, warmed up) on the stand-in E2B models of tests/test_no_silent_gaps.py, with the
calculate_kv_scales fix selected so that every kind of live change happens; no engine is started.
"""
from __future__ import annotations

import types

import pytest

torch = pytest.importorskip("torch")

from test_no_silent_gaps import e2b_models, proposer_for, stand_in_attention  # noqa: E402,F401
from surgery.live.vllm import VLLMContext  # noqa: E402
from surgery.vllm import live_apply, state  # noqa: E402

FLAGS = ("has_own_embed_tokens", "has_own_lm_head")


def _value(v):
    if isinstance(v, torch.Tensor):
        return ("tensor", id(v), v.detach().clone().tolist())
    if isinstance(v, (bool, int, float, str, type(None))):
        return v
    if isinstance(v, (set, frozenset)):
        return frozenset(v)
    return ("object", id(v))


def snapshot(*models) -> dict:
    """Every attribute of every module (parameters, buffers, sub-modules and plain attributes): the
    bound object's identity and, for tensors, its values."""
    out = {}
    for i, model in enumerate(models):
        for path, module in model.named_modules():
            for key, val in vars(module).items():
                if key == state.ATTR:
                    continue  # the plugin's record itself, not a live change
                if key in ("_parameters", "_buffers", "_modules"):
                    for name, item in val.items():
                        out[(i, path, key, name)] = _value(item)
                    out[(i, path, key)] = tuple(val)
                else:
                    out[(i, path, key)] = _value(val)
    return out


def engine(monkeypatch):
    """Stand-in draft / target / proposer / runner with calculate_kv_scales on and the fix selected,
    the dummy load format's flags in reach, and strict off (the stand-ins bind no KV caches)."""
    draft, target = e2b_models()
    for model in (draft, target):
        for layer in model.model.layers:
            layer.self_attn.attn.calculate_kv_scales = True
    for flag in FLAGS:
        setattr(draft, flag, False)
    proposer = proposer_for(draft, kv_scales="follow_target", strict=False)
    proposer.vllm_config.cache_config.calculate_kv_scales = True
    import vllm.config

    monkeypatch.setattr(vllm.config, "get_current_vllm_config", lambda: proposer.vllm_config)
    return draft, target, proposer, types.SimpleNamespace(drafter=proposer, kv_cache_config=None)


STAGES = (
    ("dummy weights", lambda d, t, p, r: live_apply.after_dummy_weights(d)),
    ("draft loaded", lambda d, t, p, r: live_apply.after_draft_loaded(p, t)),
    ("KV caches bound", lambda d, t, p, r: live_apply.after_kv_cache_bound(r, None, False)),
    ("weights reloaded", lambda d, t, p, r: live_apply.after_weights_reloaded(r)),
    ("warmed up", lambda d, t, p, r: live_apply.after_warmed_up(r)),
)


@pytest.mark.parametrize("n", range(1, len(STAGES) + 1), ids=[name for name, _ in STAGES])
def test_rollback_after_each_stage_restores_every_attribute(stand_in_attention, monkeypatch, n):  # noqa: F811
    draft, target, proposer, runner = engine(monkeypatch)
    before = snapshot(draft, target)
    for _, stage in STAGES[:n]:
        stage(draft, target, proposer, runner)
    assert snapshot(draft, target) != before  # the stages changed the live models
    state.rollback(proposer)
    after = snapshot(draft, target)
    assert after == before, sorted(str(k) for k in set(before) | set(after) if before.get(k) != after.get(k))[:10]


def test_the_plugins_own_changes_go_through_the_mutation_layer(stand_in_attention, monkeypatch):  # noqa: F811
    """The calculate_kv_scales fix and the dummy-load flags are SetAttr mutations kept on the state
    (before: plain assignments a rollback did not see)."""
    draft, target, proposer, runner = engine(monkeypatch)
    live_apply.after_dummy_weights(draft)
    assert state.get(draft).dummy_load == dict.fromkeys(FLAGS, True)
    assert sorted(m.name for m in state.get(draft).mutations) == sorted(FLAGS)
    live_apply.after_draft_loaded(proposer, target)
    st = state.get(proposer)
    assert st.kv_scales_fix["stopped"] and st.verification.ok
    stopped = [m for m in st.mutations if m.name == "calculate_kv_scales"]
    assert len(stopped) == len(st.kv_scales_fix["stopped"])
    assert all(m.obj.calculate_kv_scales is False for m in stopped)


def test_the_engine_context_is_built_once_per_proposer(stand_in_attention, monkeypatch):  # noqa: F811
    draft, target, proposer, runner = engine(monkeypatch)
    built = []
    real = VLLMContext.__init__  # the stand-in fixture's

    def counting(self, *args, **kwargs):
        built.append(self)
        real(self, *args, **kwargs)

    monkeypatch.setattr(VLLMContext, "__init__", counting)
    for _, stage in STAGES:
        stage(draft, target, proposer, runner)
    assert state.get(proposer).warmed is not None  # every stage ran, the warmed checks included
    assert built == [state.get(proposer).context]


def test_state_is_one_typed_attribute():
    proposer = types.SimpleNamespace()
    assert state.get(proposer) is None and state.get(None) is None
    st = state.of(proposer)
    assert state.of(proposer) is st and vars(proposer) == {state.ATTR: st}
    with pytest.raises(AttributeError):
        st.verify  # noqa: B018 - a misspelt field fails aloud instead of reading None


def test_the_scale_lifecycle_changes_go_through_the_mutation_layer(stand_in_attention, monkeypatch):  # noqa: F811
    """surgery/vllm/kv_scales.py's live changes after load are kept on the state, one mutation per
    attribute copied again: the refresh after a weight reload and the fix's copy after the warm-up
    (a refresh that bypassed `PluginState.change` would leave these counts short)."""
    draft, target, proposer, runner = engine(monkeypatch)
    live_apply.after_draft_loaded(proposer, target)
    live_apply.after_kv_cache_bound(runner, None, False)
    st = state.get(proposer)
    before = len(st.mutations)
    assert before == len(st.kv_scales_fix["stopped"])  # the load stage's own change: the fix, part 1
    for layer in target.model.layers:  # what vLLM's reload does to the target's scales
        layer.self_attn.attn._k_scale_float = 0.5
    live_apply.after_weights_reloaded(runner)
    refreshed = len(st.mutations) - before
    assert 0 < refreshed <= len(st.plan.ops("copy_attrs"))
    floats = [m for m in st.mutations[before:] if getattr(m, "name", None) == "_k_scale_float"]
    assert floats and all(m.obj._k_scale_float == 0.5 for m in floats)  # the reloaded value, on the draft
    live_apply.after_warmed_up(runner)
    assert len(st.mutations) - before - refreshed == st.kv_scales_fix["recopied"] > 0
    state.rollback(proposer)
    assert not st.mutations and all(m.obj._k_scale_float != 0.5 for m in floats)


def test_only_the_state_writes_its_fields():
    """Each hook stage records through a PluginState method (`loaded`, `kv_bound`, `warmed_up`,
    `guard_started`, ...): no other module of the vLLM integration assigns a state field itself, so
    what a stage leaves is written in one place. Found by reading the code: `st.<field> = ...` or
    `state.of(x).<field> = ...` anywhere but surgery/vllm/state.py."""
    import ast
    from dataclasses import fields
    from pathlib import Path

    names = {f.name for f in fields(state.PluginState)}
    root = Path(state.__file__).resolve().parent

    def state_call(node) -> bool:  # state.of(x) / state.get(x)
        return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("of", "get") \
            and isinstance(node.func.value, ast.Name) and node.func.value.id == "state"

    found = []
    for path in sorted(root.glob("*.py")):
        if path.name == "state.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        holders = {t.id for n in ast.walk(tree) if isinstance(n, ast.Assign) and state_call(n.value)
                   for t in n.targets if isinstance(t, ast.Name)}
        for node in ast.walk(tree):
            targets = node.targets if isinstance(node, ast.Assign) else \
                [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
            for t in (e for tgt in targets for e in (tgt.elts if isinstance(tgt, ast.Tuple) else [tgt])):
                if isinstance(t, ast.Attribute) and t.attr in names and (
                        state_call(t.value) or isinstance(t.value, ast.Name) and t.value.id in holders):
                    found.append(f"{path.name}:{node.lineno} assigns .{t.attr}")
    assert not found, "\n".join(found)


def test_the_draft_load_reads_the_selection_and_the_live_engine_once(stand_in_attention, monkeypatch):  # noqa: F811
    """after_draft_loaded (issue 70): the selection read once (one recipe resolution), the live engine read once
    (one at_load), each stage entered once; the stage's record as before (verified, the fix's part 1 kept)."""
    from surgery.vllm import kv_scales, selection, wiring

    draft, target, proposer, runner = engine(monkeypatch)
    calls: dict = {}
    for module, name in ((selection, "plan_from_config"), (wiring, "at_load"), (kv_scales, "before_apply"),
                         (kv_scales, "after_verify")):
        real = getattr(module, name)

        def counted(*args, _real=real, _name=name, **kwargs):
            calls[_name] = calls.get(_name, 0) + 1
            return _real(*args, **kwargs)

        monkeypatch.setattr(module, name, counted)
    live_apply.after_draft_loaded(proposer, target)
    assert calls == {"plan_from_config": 1, "at_load": 1, "before_apply": 1, "after_verify": 1}
    st = state.get(proposer)
    assert st.verification.ok and st.context is not None and st.kv_scales_fix["stopped"]
