"""Issue 12, "no silent gaps": each item has a test here that failed on the old main.

The vLLM side runs the plugin's own entry points (`register`, the after-load callback, `inspect`)
on stand-in proposers and models built from the real E2B configs, so no engine is started; the
engine-level runs are in tests/vllm/test_plugin.py.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from testpaths import CONFIGS, E2B, E2B_ASSISTANT, ROOT  # noqa: E402
from surgery import Runtime, load_recipe, read_facts, resolve  # noqa: E402
from surgery.text.diagnostics import SurgeryError  # noqa: E402
from surgery.vllm import hooks, inspect as vinspect, live_apply, plugin, state, wiring  # noqa: E402
from surgery.applier.core import prepare_op  # noqa: E402
from surgery.live.vllm import VLLMContext  # noqa: E402


# ------------------------------------------------------------------------------ stand-ins
class VAttention(torch.nn.Module):
    """The attributes of vLLM's Attention that the adapter touches."""

    def __init__(self, name, scale, with_floats=True):
        super().__init__()
        self.layer_name, self.num_kv_heads, self.head_size, self.sliding_window = name, 1, 256, None
        self.attn_type, self.kv_cache_dtype, self.kv_sharing_target_layer_name = "decoder", "fp8", None
        self.register_buffer("_k_scale", torch.tensor(scale))
        self.register_buffer("_v_scale", torch.tensor(2 * scale))
        self._k_scale_cpu, self._v_scale_cpu = torch.tensor(scale), torch.tensor(2 * scale)
        if with_floats:
            self._k_scale_float, self._v_scale_float = float(scale), 2.0 * scale


def _model(prefix, n, scale, with_floats=True, tied=False):
    root = torch.nn.Module()
    root.model = torch.nn.Module()
    root.model.layers = torch.nn.ModuleList()
    for i in range(n):
        layer = torch.nn.Module()
        layer.self_attn = torch.nn.Module()
        layer.self_attn.attn = VAttention(f"{prefix}.layers.{i}.self_attn.attn", scale, with_floats)
        root.model.layers.append(layer)
    root.model.embed_tokens = torch.nn.Embedding(8, 4)
    root.lm_head = torch.nn.Linear(4, 8, bias=False)
    if tied:
        root.lm_head.weight = root.model.embed_tokens.weight
    return root


def e2b_models(with_floats=True):
    """Stand-ins shaped like the E2B target (35 layers) and its assistant (4 layers)."""
    return (_model("draft_model", 4, 1.0, with_floats, tied=True), _model("model", 35, 0.25, with_floats))


def proposer_for(draft, recipe="gemma4-mtp", method=None, **surgery_cfg):
    vcfg = types.SimpleNamespace(
        additional_config={"surgery": {"recipe": recipe, **surgery_cfg}},
        parallel_config=types.SimpleNamespace(pipeline_parallel_size=1, tensor_parallel_size=1, rank=0),
        cache_config=types.SimpleNamespace(cache_dtype="fp8"), attention_config=None,
        compilation_config=types.SimpleNamespace(static_forward_context=None),
        model_config=types.SimpleNamespace(model=str(E2B), hf_config=None))
    spec = types.SimpleNamespace(draft_model_config=types.SimpleNamespace(model=str(E2B_ASSISTANT), hf_config=None),
                                 method=method)
    return types.SimpleNamespace(vllm_config=vcfg, speculative_config=spec, model=draft)


@pytest.fixture
def stand_in_attention(monkeypatch):
    """The plugin's adapter recognises the stand-in attention class."""
    real = VLLMContext.__init__

    def init(self, sfc=None, is_attention=None, method=None, dummy_load=False):
        real(self, sfc, is_attention=lambda m: isinstance(m, VAttention), method=method, dummy_load=dummy_load)

    monkeypatch.setattr(VLLMContext, "__init__", init)
    monkeypatch.delenv("SURGERY_RECIPE", raising=False)
    monkeypatch.delenv("SURGERY_STRICT", raising=False)


# ------------------------------------------------------------------------------ 1. hooks
def test_register_fails_aloud_when_no_load_hook_can_be_installed(monkeypatch):
    """vLLM moved the spec-decode classes: with a recipe selected, register() stops with SRG323
    naming the missing vLLM names (old main: returned normally, nothing applied, nothing said)."""
    moved = (("vllm.v1.spec_decode.moved_away", "SpecDecodeBaseProposer"),
             ("vllm.v1.spec_decode.gemma4_renamed", "Gemma4Proposer"))
    monkeypatch.setattr(hooks, "LOAD_MODEL_TARGETS", moved)
    monkeypatch.setattr(hooks, "RUNNER_TARGETS", ())
    monkeypatch.setenv("SURGERY_RECIPE", "gemma4-mtp")
    try:
        with pytest.raises(SurgeryError) as exc:
            plugin.register()
        (d,) = exc.value.diagnostics
        assert d.code == "SRG323"
        assert "vllm.v1.spec_decode.moved_away.SpecDecodeBaseProposer" in d.message
        assert "vllm.v1.spec_decode.gemma4_renamed.Gemma4Proposer" in d.message
        monkeypatch.delenv("SURGERY_RECIPE")
        plugin.register()  # no recipe selected: a warning line, engine start goes on
    finally:
        hooks.remove_hook(live_apply.after_draft_loaded)
        hooks.remove_hook(live_apply.after_kv_cache_bound)


def test_recipe_never_applied_is_caught_when_kv_caches_are_bound(stand_in_attention):
    """A recipe selected through additional_config, but the draft was loaded by a method no hook
    wraps: the KV-cache hook stops engine start (SRG323) instead of serving the draft unwired."""
    draft, _ = e2b_models()
    runner = types.SimpleNamespace(drafter=proposer_for(draft))
    with pytest.raises(SurgeryError) as exc:
        live_apply.after_kv_cache_bound(runner, None, False)
    assert exc.value.diagnostics[0].code == "SRG323" and "never applied" in exc.value.diagnostics[0].message
    live_apply.after_kv_cache_bound(runner, None, True)  # profiling run: nothing is bound yet
    runner.drafter.vllm_config.additional_config = {}
    live_apply.after_kv_cache_bound(runner, None, False)  # no recipe selected: nothing to say


# ------------------------------------------------------------------------------ 2. SRG321 visible
def test_not_applicable_results_in_log_line_and_inspect(stand_in_attention, caplog):
    """A vLLM without `_k_scale_float/_v_scale_float`: those 8 copies are not applicable; the log
    line and inspect say so (old main: `0 skipped, verification PASS` and nothing in inspect)."""
    draft, target = e2b_models(with_floats=False)
    proposer = proposer_for(draft)
    with caplog.at_level(logging.INFO):
        live_apply.after_draft_loaded(proposer, target)
    from surgery.vllm.log import APPLIED

    [found] = APPLIED.find("\n".join(r.getMessage() for r in caplog.records))
    assert found["recipe"] == "gemma4-mtp" and found["verification"] == "PASS", found
    assert found["summary"].startswith("8 not applicable (SRG321:") and "_k_scale_float" in found["summary"], found
    summary = vinspect.surgery_summary(proposer)
    assert len(summary["not_applicable"]) == 8
    assert {d["code"] for d in summary["not_applicable"]} == {"SRG321"}
    assert all("_scale_float" in d["message"] for d in summary["not_applicable"])
    json.dumps(summary)  # plain data


def test_vllm_engine_start_fails_on_an_op_it_cannot_perform(stand_in_attention, tmp_path, monkeypatch):
    """Strict by default: a step without `otherwise` that vLLM cannot perform stops engine start
    with SRG322; the user's opt-out (additional_config strict false, or SURGERY_STRICT=0) turns it
    into a reported SRG321."""
    text = (ROOT / "recipes" / "gemma4-mtp.yaml").read_text()
    text = text.replace("  - keep: {role: lm_head,", "  - share_buffer: {attr: topk_indices_buffer}\n  - keep: {role: lm_head,")
    recipe = tmp_path / "with-buffer.yaml"
    recipe.write_text(text)
    draft, target = e2b_models()
    with pytest.raises(SurgeryError) as exc:
        live_apply.after_draft_loaded(proposer_for(draft, str(recipe)), target)
    assert [d.code for d in exc.value.diagnostics] == ["SRG322"]
    assert "topk_indices_buffer" in exc.value.diagnostics[0].message
    assert draft.model.embed_tokens is not target.model.embed_tokens  # nothing applied
    proposer = proposer_for(draft, str(recipe), strict=False)
    live_apply.after_draft_loaded(proposer, target)
    assert [d.code for d in state.get(proposer).report.not_applicable] == ["SRG321"]
    draft2, target2 = e2b_models()
    monkeypatch.setenv("SURGERY_STRICT", "0")
    live_apply.after_draft_loaded(proposer_for(draft2, str(recipe)), target2)


def test_failed_verification_rolls_back(stand_in_attention, monkeypatch):
    draft, target = e2b_models()
    own_embedding = draft.model.embed_tokens
    import surgery.applier as applying
    from surgery.applier.core import Check, VerifyReport

    real = applying.verify_plan
    monkeypatch.setattr(applying, "verify_plan", lambda *a, **k: VerifyReport(
        [*real(*a, **k).checks, Check("share_kv:kv_source:0->13", "simulated broken invariant", False)]))
    with pytest.raises(SurgeryError) as exc:
        live_apply.after_draft_loaded(proposer_for(draft), target)
    assert exc.value.diagnostics[0].code == "SRG501" and "rolled back" in exc.value.diagnostics[0].message
    assert draft.model.embed_tokens is own_embedding  # the share was undone
    assert all(layer.self_attn.attn.kv_sharing_target_layer_name is None for layer in draft.model.layers)
    assert float(draft.model.layers[0].self_attn.attn._k_scale) == 1.0


# ------------------------------------------------------------------------------ 3. fields honoured
def _plan(recipe, target, draft, **runtime):
    return resolve(load_recipe(recipe), read_facts(CONFIGS / draft), read_facts(CONFIGS / target), Runtime(**runtime))


def _eagle_pair(draft_has_own, identical, draft_vocab=32):
    torch.manual_seed(0)
    target = _model("model", 2, 1.0)
    draft = _model("draft_model", 1, 1.0)
    draft.lm_head = torch.nn.Linear(4, draft_vocab, bias=False)
    target.model.embed_tokens, target.lm_head = torch.nn.Embedding(32, 4), torch.nn.Linear(4, 32, bias=False)
    draft.model.embed_tokens = torch.nn.Embedding(32, 4)
    if identical:
        draft.model.embed_tokens.weight.data.copy_(target.model.embed_tokens.weight)
        if draft_vocab == 32:
            draft.lm_head.weight.data.copy_(target.lm_head.weight)
    draft.has_own_embed_tokens = draft.has_own_lm_head = draft_has_own
    return draft, target


def _applied(plan, draft, target):
    from surgery.applier import apply_plan

    ops = tuple(o for o in plan.operations if o.op in ("share_module", "keep"))
    report = apply_plan(dataclasses.replace(plan, operations=ops), draft, target,
                        VLLMContext(is_attention=lambda m: isinstance(m, VAttention)))
    return report


@pytest.mark.parametrize("has_own, identical", [(False, False), (True, True), (True, False)])
def test_share_if_identical_decided_on_live_weights(has_own, identical):
    """EAGLE full-vocabulary head: shared when the head has none or identical weights, its own,
    different weights kept (old main: always overwritten)."""
    d = json.loads((CONFIGS / "EAGLE3-LLaMA3.1-Instruct-8B.json").read_text())
    d.pop("draft_vocab_size")
    from surgery import facts_from_config

    plan = resolve(load_recipe("eagle3"), facts_from_config(d), read_facts(CONFIGS / "Llama-3.1-8B-Instruct.json"),
                   Runtime())
    draft, target = _eagle_pair(has_own, identical)
    own_head = draft.lm_head
    report = _applied(plan, draft, target)
    shared = not has_own or identical
    assert (draft.model.embed_tokens is target.model.embed_tokens) == shared
    assert (draft.lm_head is target.lm_head) == shared
    if not shared:
        assert draft.lm_head is own_head and "kept" in report.decisions["share_module:lm_head"]


def test_must_exist_refuses_a_head_the_checkpoint_did_not_bring():
    """Reduced-vocabulary EAGLE-3 head without lm_head weights in its checkpoint: `keep ...
    must_exist` stops with SRG407 (old main: the field was read by no applier)."""
    plan = _plan("eagle3", "Llama-3.1-8B-Instruct.json", "EAGLE3-LLaMA3.1-Instruct-8B.json")
    draft, target = _eagle_pair(draft_has_own=False, identical=False, draft_vocab=16)
    with pytest.raises(SurgeryError) as exc:
        _applied(plan, draft, target)
    assert [d.code for d in exc.value.diagnostics] == ["SRG407"]
    draft.has_own_lm_head = True
    _applied(plan, draft, target)  # brings its own: kept


def test_mtp_shared_head_path_is_filled_with_the_layer():
    """deepseek-mtp: the shared_head of MTP layer 61 (`model.layers.{i}.shared_head.head`) becomes
    the target's lm_head (old main: the literal `{i}` path, SRG401)."""
    plan = _plan("deepseek-mtp", "DeepSeek-V3.json", "DeepSeek-V3.json")
    (op,) = plan.ops("share_module")[2:]
    assert op.role == "mtp_shared_head" and op.layer == 61
    draft, target = _model("model", 62, 1.0), _model("model", 61, 1.0)
    draft.model.layers[61].shared_head = torch.nn.Module()
    draft.model.layers[61].shared_head.head = torch.nn.Linear(4, 8, bias=False)
    prepared = prepare_op(op, draft, target, VLLMContext())
    (m,) = prepared.mutations
    assert m.obj is draft.model.layers[61].shared_head and m.name == "head" and m.value is target.lm_head


def test_engine_hint_method_is_checked():
    plan = _plan("eagle3", "Llama-3.1-8B-Instruct.json", "EAGLE3-LLaMA3.1-Instruct-8B.json")
    proposer = types.SimpleNamespace(speculative_config=types.SimpleNamespace(method="mtp"))
    problems = wiring.hint_problems(plan, proposer, torch.nn.Module(), torch.nn.Module())
    assert [d.code for d in problems] == ["SRG324"] and "'eagle3'" in problems[0].message
    proposer.speculative_config.method = "eagle3"
    assert wiring.hint_problems(plan, proposer, torch.nn.Module(), torch.nn.Module()) == []


def test_engine_hint_parallel_drafting_is_checked():
    """P-EAGLE: a head trained for mask slots served without parallel drafting is SRG324."""
    from surgery import facts_from_config

    cfg = json.loads((ROOT / "surgery" / "data" / "pairs" / "peagle" / "draft" / "config.json").read_text())
    target = json.loads((ROOT / "surgery" / "data" / "pairs" / "llama-target" / "config.json").read_text())
    plan = resolve(load_recipe("peagle"), facts_from_config(cfg, "d"), facts_from_config(target, "t"), Runtime())
    proposer = types.SimpleNamespace(speculative_config=types.SimpleNamespace(method="eagle3"), parallel_drafting=False)
    problems = wiring.hint_problems(plan, proposer, torch.nn.Module(), torch.nn.Module())
    assert [d.code for d in problems] == ["SRG324"] and "parallel_drafting" in problems[0].message
    proposer.parallel_drafting = True
    assert wiring.hint_problems(plan, proposer, torch.nn.Module(), torch.nn.Module()) == []


def test_capture_hidden_states_sets_vllm_aux_layers():
    """EAGLE-3: the target returns the planned auxiliary layers, set through vLLM's own
    EagleModelMixin (old main: no applier, SRG321 at best)."""
    vllm_interfaces = pytest.importorskip("vllm.model_executor.models.interfaces")
    plan = _plan("eagle3", "Llama-3.1-8B-Instruct.json", "EAGLE3-LLaMA3.1-Instruct-8B.json")
    (op,) = plan.ops("capture_hidden_states")

    class Inner(torch.nn.Module, vllm_interfaces.EagleModelMixin):
        pass

    target = torch.nn.Module()
    target.model = Inner()
    from surgery.applier import apply_plan, rollback, verify_plan

    sub = dataclasses.replace(plan, operations=(op,))
    report = apply_plan(sub, torch.nn.Module(), target, VLLMContext())
    assert target.model.aux_hidden_state_layers == (2, 16, 29) == tuple(op.layers)
    assert verify_plan(sub, None, target, VLLMContext(), report=report).ok
    rollback(report)
    assert target.model.aux_hidden_state_layers == ()


# ------------------------------------------------------------------------------ 5. honest loaders
def test_apply_refuses_a_pair_the_hf_loader_cannot_load(run_cli):
    """Standalone Llama drafts load for the draft-model recipe (tests/hf/test_hf_draft_model.py); an EAGLE-3
    head is neither a Gemma 4 assistant nor a standalone draft-model pair: SRG408 before any weight."""
    from surgery.hf.standalone import is_standalone  # noqa: F401  (the rule the loader applies)

    code, out, err = run_cli("apply", "eagle3", "--target", CONFIGS / "Llama-3.1-8B-Instruct.json",
                             "--draft", CONFIGS / "EAGLE3-LLaMA3.1-Instruct-8B.json", "--no-progress")
    assert code == 1 and "SRG408" in err and "SRG404" not in err and "Traceback" not in err


@pytest.mark.parametrize("flag, value", [("--num-draft-tokens", "0"), ("--max-new-tokens", "-3"),
                                         ("--prompts", "many")])
def test_bad_numbers_are_usage_errors(run_cli, flag, value):
    code, out, err = run_cli("apply", "gemma4-mtp", flag, value)
    assert code == 2 and "SRG011" in err and flag in err and "Traceback" not in err


# ------------------------------------------------------------------------------ 6. setup and CI fail aloud
def test_setup_script_fails_when_an_install_fails(tmp_path):
    """A pip that fails: scripts/setup.sh must fail too (old main: `|| true` swallowed it)."""
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    (repo / "scripts" / "setup.sh").write_text((ROOT / "scripts" / "setup.sh").read_text())
    fake = repo / ".venv" / "bin"
    fake.mkdir(parents=True)
    (fake / "activate").write_text(f'export PATH="{fake}:$PATH"\n')
    (fake / "python").write_text("#!/bin/sh\nexit 0\n")
    (fake / "pip").write_text("#!/bin/sh\necho 'ERROR: No matching distribution found' >&2\nexit 1\n")
    for f in ("python", "pip"):
        (fake / f).chmod(0o755)
    proc = subprocess.run(["bash", "scripts/setup.sh"], cwd=repo, capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert "No matching distribution" in proc.stdout + proc.stderr
    (fake / "pip").write_text("#!/bin/sh\nexit 0\n")  # every step fine: the script succeeds
    proc = subprocess.run(["bash", "scripts/setup.sh"], cwd=repo, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_vllm_tests_show_as_skipped_with_the_reason_when_vllm_is_missing(tmp_path):
    """A vllm that cannot be imported: the vLLM tests are reported as skipped, with the reason
    (old main: collected nothing, silently); SURGERY_REQUIRE_VLLM=1 (CI) makes that a failure."""
    shadow = tmp_path / "shadow" / "vllm"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('vllm hidden by the test')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(shadow.parent), str(ROOT)])}
    env.pop("SURGERY_REQUIRE_VLLM", None)
    cmd = [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "tests/vllm/test_refresh.py"]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "skipped" in proc.stdout and "vllm hidden by the test" in proc.stdout, proc.stdout
    proc = subprocess.run(cmd, cwd=ROOT, env={**env, "SURGERY_REQUIRE_VLLM": "1"}, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode != 0 and "vllm hidden by the test" in proc.stdout, proc.stdout
