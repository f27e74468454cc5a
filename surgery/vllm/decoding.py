"""Decoding runs on real vLLM engines, one engine each: the target-only greedy reference, and a
speculative run (outputs against the reference, vLLM's counters, what the plugin verified and what
the live engine shows, optionally a rewire ablation performed after vLLM's wiring)."""
from __future__ import annotations

import time
from typing import Any

from .. import greedyties
from ..text.diagnostics import SurgeryError, diag
from . import engine, hooks, state
from .ablation import rewire_hook
from .engine import MAX_TOKENS, NUM_SPEC
from .readout import engine_checks, live_wiring, plan_steps
from ..tinymodels.bytevocab import encode


def decode_summary(reference, outputs, counters, num_spec, reference_top=None, noise=None) -> dict:
    """Identity with the greedy reference and vLLM's counters. With ``reference_top`` (the greedy
    engine's own top-n per position, :func:`greedy_reference_measured`): where the outputs part,
    whether that is a tie of the target within the numerical noise ``noise`` measured for this engine
    and dtype (surgery.greedyties.summary: `divergences`, `identical_up_to_ties`, `reference_ties`,
    `tolerance`; without ``noise`` only bit-equal ties count)."""
    drafted = int(counters.get("num_draft_tokens") or 0)
    accepted = int(counters.get("num_accepted_tokens") or 0)
    mismatched = [i for i, (a, b) in enumerate(zip(reference, outputs)) if a != b]
    out = {"identical": not mismatched and len(reference) == len(outputs), "prompts": len(outputs),
           "tokens": sum(len(o) for o in outputs), "drafted": drafted, "accepted": accepted,
           "acceptance_rate": accepted / drafted if drafted else 0.0, "num_draft_tokens": num_spec,
           "drafts": int(counters.get("num_drafts") or 0),
           "accepted_per_position": counters.get("num_accepted_tokens_per_pos"), "mismatched_prompts": mismatched}
    if reference_top is not None:
        out.update(greedyties.summary(reference, outputs, reference_top, noise))
    return out


def speculative_run(target, draft, method, prompts, reference, recipe=None, num_spec=NUM_SPEC,
                    max_tokens=MAX_TOKENS, inspect=None, rewire=None, spec_extra=None, head_as_model=False,
                    reference_top=None, guard=None, batches=None, reference_noise=None) -> dict:
    """One speculative engine: outputs vs ``reference``, vLLM's counters, and what
    ``inspect(proposer, target_model)`` (default :func:`live_wiring`) reads off the live objects.
    ``rewire`` (role -> target | random): an ablation performed after vLLM's wiring.
    ``spec_extra``: more speculative_config keys (engine.engine_kwargs).
    ``head_as_model``: a speculators head given as the model (vLLM takes target, method and k from
    its file); ``num_spec`` is then the file's k, for the summary.
    ``reference_top``: the reference's top-n per position (:func:`greedy_reference_measured`); the
    summary then says whether each place the outputs part is a tie of the target within
    ``reference_noise`` (the numerical noise measured with the reference; none: bit-equal only).
    ``guard``: the acceptance guard's settings (additional_config.surgery.guard); its record is
    returned as ``guard``. ``batches``: decode the prompts once per batch size (in chunks of that many
    prompts; vLLM's counters add up over the passes, the outputs compared are the first pass's).
    ``stock_wiring``: the same reading taken right after vLLM's own wiring, before the plugin's
    callback (the oracle a recipe's wiring is compared with)."""
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
        llm = engine.start_engine(**engine.engine_kwargs(target, draft, method, recipe, num_spec, spec_extra,
                                                         head_as_model=head_as_model, guard=guard))
    finally:
        for cb in callbacks:
            hooks.remove_hook(cb)
    if rewire and not rewired:  # the hook never ran: the row would measure the unablated pair
        engine.shutdown(llm)
        raise SurgeryError(diag("SRG460", f"ablation rewire {rewire} was not performed (no drafter load_model ran)"))
    try:
        start_s = time.perf_counter() - t0
        served = served_config(llm)
        proposer = live.get("proposer")
        seen = (inspect or live_wiring)(proposer, live["target"]) if proposer is not None else None
        t = time.perf_counter()
        passes = []
        for size in batches or (len(prompts),):
            passes.append([o for i in range(0, len(prompts), size)
                           for o in engine.generate(llm, prompts[i:i + size], max_tokens)])
        outs = passes[0]
        decode = decode_summary(reference, outs, engine.spec_counters(llm), num_spec, reference_top,
                                reference_noise)
        decode["wall_s"], decode["engine_start_s"] = round(time.perf_counter() - t, 3), round(start_s, 3)
        plugin = {"verified": None}
        st = state.get(proposer)
        v = st.verification if st is not None else None
        if v is not None:
            rep, plan = st.report, st.plan
            plugin = {"verified": v.ok, "checks": len(v.checks), "failed": [f"{c.op_id}: {c.name}" for c in v.failed],
                      "applied": list(rep.applied),
                      "not_applicable": [f"{d.code} {d.message}" for d in rep.not_applicable],
                      "skipped": [f"{x.code} step {x.step} {x.op}: {x.reason}" for x in plan.skipped],
                      "layer_sets": {name: list(v) for name, v in plan.layer_sets.items()},
                      "engine_checks": engine_checks(plan, rep, seen), "steps": plan_steps(plan)}
        return {"decode": decode, "plugin": plugin, "served": served, "inspect": seen, "stock_wiring": live.get("stock"), "outputs": outs,
                "rewired": rewired, "guard": guard_record(llm) if guard is not None else None}
    finally:
        engine.shutdown(llm)


def guard_record(llm) -> dict | None:
    """The acceptance guard's record of an in-process engine (None when it was off or is elsewhere)."""
    core = getattr(getattr(getattr(llm, "llm_engine", None), "engine_core", None), "engine_core", None)
    st = state.get(getattr(core, "scheduler", None))
    run = st.guard if st is not None else None  # surgery/vllm/guard.py guard_run
    return run.guard.to_dict() if run is not None and run.guard is not None else None


def served_config(llm) -> dict | None:
    """What the engine serves, as vLLM configured it: target, draft, method, k (for a head given
    as the model, vLLM's speculators detection chose them)."""
    cfg = getattr(getattr(llm, "llm_engine", None), "vllm_config", None)
    spec = getattr(cfg, "speculative_config", None)
    if cfg is None or spec is None:
        return None
    return {"target": cfg.model_config.model, "draft": spec.model, "method": spec.method,
            "num_speculative_tokens": spec.num_speculative_tokens}


def greedy_reference(target, prompts, max_tokens=MAX_TOKENS) -> tuple[list[list[int]], float]:
    t = time.perf_counter()
    llm = engine.start_engine(**engine.engine_kwargs(target))
    try:
        outs = engine.generate(llm, prompts, max_tokens)
        return outs, time.perf_counter() - t
    finally:
        engine.shutdown(llm)


def greedy_reference_measured(target, prompts, max_tokens=MAX_TOKENS, top=5):
    """Target-only greedy outputs, the engine's own `top` best [token, logprob] per position, and the
    numerical noise of this engine and dtype (surgery.greedyties.margin_noise): the same engine scores
    each prompt + its greedy output again in one prefill forward (the verify pass's shape: several
    tokens per forward), and the margins of the tokens both shapes rank are compared. Cost: one more
    generate step of max_tokens=1 on the engine already started (no second engine)."""
    llm = engine.start_engine(**engine.engine_kwargs(target))
    try:
        tokens, best = engine.generate_top(llm, prompts, max_tokens, top)
        scored = engine.score_top(llm, [list(p) + list(t) for p, t in zip(prompts, tokens)],
                                  [len(p) for p in prompts], top)
        noise = greedyties.margin_noise(best, scored, shape="one prefill forward over prompt + greedy output",
                             dtype=engine.run_dtype(llm))
        noise["extra_forwards"] = {"generate_calls": 1, "sequences": len(prompts), "max_tokens": 1}
        return tokens, best, noise
    finally:
        engine.shutdown(llm)


def prompt_ids(texts) -> list[list[int]]:

    return [encode(t) for t in texts]
