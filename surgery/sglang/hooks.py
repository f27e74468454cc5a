"""Hook points into SGLang: where the draft is wired (the engine card's `wiring.draft_load_points`)
and where the target's capture list is set.

Lifecycle in SGLang's scheduler process (0.5.21, speculative/eagle_worker_v2.py)::

    EagleDraftWorker.__init__            draft TpModelWorker built, draft weights loaded
    Scheduler.init_memory_pools -> EagleDraftWorker.alloc_memory_pool
        init_token_map
        init_lm_head                     <- wrapped: the draft's own embedding / head kept aside; SGLang's
                                            set_embed_and_head / set_embed (del + rebind); then
                                            >>> the recipe is applied and verified here <<<
    (every model load) DefaultModelLoader.load_weights_and_postprocess <- wrapped: the checkpoint's
                                            tensor names recorded (has-own answers, must_exist)
    (every verify step) Req.update_spec_correct_drafts_histogram <- wrapped when the acceptance guard
                                            is on: one draft per request and step (surgery/sglang/guard.py)
    ModelRunner.init_attention_backends  <- wrapped: configure_aux_hidden_state_capture ->
                                            target.set_eagle3_layers_to_capture(SGLang's ids + 1);
                                            >>> the planned capture is re-applied and checked <<<

`install()` wraps what this SGLang has; finding none of the draft-load points is an error (SRG361),
never a hook that waits for a call that never comes. SGLang is imported here only, lazily.
"""
from __future__ import annotations

import functools
import importlib
from typing import Any

from ..text.diagnostics import SurgeryError, diag
from ..engine.cards import card
from . import guard as accept_guard, report
from .log import get_logger
from .selection import selected_recipe, strict
from ..applier.core import prepare_op

_MARK = "__surgery_hook__"
RUNNER_POINT = ("sglang.srt.model_executor.model_runner", "ModelRunner", "init_attention_backends")
# every model SGLang loads passes its checkpoint's (name, tensor) pairs through this static method:
# the names are recorded, since SGLang itself keeps no record of what a draft brought (sglang#27908)
LOADER_POINT = ("sglang.srt.model_loader.loader", "DefaultModelLoader", "load_weights_and_postprocess")
# applied: id(target) -> Applied; loaded: id(model) -> checkpoint names; own: id(worker) -> the drafts'
# own weights before SGLang's init_lm_head replaced them
_state: dict[str, Any] = {"recipe": None, "applied": {}, "loaded": {}, "own": {}}


def draft_load_points() -> list[tuple[str, str, str]]:
    return list(card("sglang").wiring.draft_load_points)


def _class(module: str, name: str):
    """The class, or (None, why). Only SGLang's own modules are ever imported: the names come from
    the engine card's `draft_load_points` and the two literals above (tests/test_security.py)."""
    if not module.startswith("sglang."):
        return None, "not an SGLang module (never imported)"
    try:
        return getattr(importlib.import_module(module), name, None), None
    except Exception as exc:  # noqa: BLE001 - an SGLang without this worker (or without its deps)
        return None, f"{type(exc).__name__}: {str(exc)[:160]}"


def engine_version() -> str:
    """The installed SGLang's version (ImportError when there is none)."""
    import sglang

    return str(getattr(sglang, "__version__", "unknown"))


def draft_load_point_status(points=None) -> tuple[list[str], list[str]]:
    """(present, missing) among the draft-load points `install()` wraps, looked up the same way, without
    wrapping anything: what `surgery doctor` reports before a server starts."""
    present, missing = [], []
    for module, name, method in points or draft_load_points():
        cls, why = _class(module, name)
        if cls is not None and method in cls.__dict__:
            present.append(f"{module}.{name}.{method}")
        else:
            missing.append(f"{module}.{name}.{method} ({why or 'absent'})")
    return present, missing


def _wrap(cls: Any, method: str, after, before=None) -> bool:
    fn = cls.__dict__.get(method)
    if fn is None:
        return False
    if getattr(fn, _MARK, None) is None:
        @functools.wraps(fn)
        def wrapper(self, *args, **kwargs):
            if before is not None:
                before(self)
            result = fn(self, *args, **kwargs)
            after(self)
            return result

        setattr(wrapper, _MARK, fn)
        setattr(cls, method, wrapper)
    return True


def record_names(model: Any, weights):
    """Pass the checkpoint's (name, tensor) pairs through, keeping the names for `model`."""
    names = _state["loaded"].setdefault(id(model), set())
    for item in weights:
        names.add(item[0])
        yield item


def loaded_names(model: Any) -> frozenset[str] | None:
    names = _state["loaded"].get(id(model))
    return None if names is None else frozenset(names)


def _wrap_static(cls: Any, method: str) -> bool:
    raw = cls.__dict__.get(method)
    if not isinstance(raw, staticmethod):
        return False
    fn = raw.__func__
    if getattr(fn, _MARK, None) is None:
        @functools.wraps(fn)
        def wrapper(model, weights, *args, **kwargs):
            return fn(model, record_names(model, weights), *args, **kwargs)

        setattr(wrapper, _MARK, fn)
        setattr(cls, method, staticmethod(wrapper))
    return True


def install(recipe: str | None = None, points=None) -> list[str]:
    """Wrap SGLang's draft-load points (and the runner's attention-backend set-up). Returns the
    wrapped methods. SRG361 when no draft-load point exists in this SGLang."""
    _state["recipe"] = selected_recipe(recipe)
    guarded = accept_guard.install(_state["recipe"])  # SURGERY_GUARD checked first (SRG486 / SRG475)
    wrapped, missing = [], []
    for module, name, method in points or draft_load_points():
        cls, why = _class(module, name)
        if cls is not None and _wrap(cls, method, after_draft_load, before_draft_load):
            wrapped.append(f"{module}.{name}.{method}")
        else:
            missing.append(f"{module}.{name}.{method} ({why or 'absent'})")
    if not wrapped:
        if _state["recipe"] is None:  # nothing selected, nothing to apply: said, not an error
            get_logger().info("spec-surgery: no recipe selected and no SGLang draft-load point here (%s)",
                              "; ".join(missing))
            return []
        raise SurgeryError(diag("SRG361", f"recipe {_state['recipe']!r} is selected but there is no SGLang "
                                "draft-load point to wrap: " + "; ".join(missing)))
    cls, _ = _class(*RUNNER_POINT[:2])
    if cls is not None and _wrap(cls, RUNNER_POINT[2], after_attention_backends):
        wrapped.append(".".join(RUNNER_POINT))
    cls, _ = _class(*LOADER_POINT[:2])
    if cls is not None and _wrap_static(cls, LOADER_POINT[2]):
        wrapped.append(".".join(LOADER_POINT))
    wrapped += guarded
    get_logger().info("spec-surgery: recipe %s; wrapped %s", _state["recipe"] or "none selected (nothing changes)",
                      ", ".join(wrapped))
    try:
        version = engine_version()
    except Exception:  # noqa: BLE001 - a stand-in sglang module in tests
        version = "unknown"
    report.write("installed", recipe=_state["recipe"], wrapped=wrapped, sglang=version)
    return wrapped


def uninstall(points=None) -> None:
    for module, name, method in list(points or draft_load_points()) + [RUNNER_POINT, LOADER_POINT]:
        cls, _ = _class(module, name)
        raw = cls.__dict__.get(method) if cls is not None else None
        fn = raw.__func__ if isinstance(raw, staticmethod) else raw
        if fn is not None and getattr(fn, _MARK, None) is not None:
            orig = getattr(fn, _MARK)
            setattr(cls, method, staticmethod(orig) if isinstance(raw, staticmethod) else orig)
    for key in ("applied", "loaded", "own"):
        _state[key].clear()
    accept_guard.uninstall()


def algorithm_of(worker: Any) -> str | None:
    algo = getattr(worker, "speculative_algorithm", None)
    return getattr(algo, "name", None) or (str(algo) if algo is not None else None)


def draft_runners(worker: Any) -> list[Any]:
    """The model runners of the worker's drafts: one, or one per step (multi-layer EAGLE)."""
    return list(getattr(worker, "draft_runner_list", None) or [worker.draft_runner])


def before_draft_load(worker: Any) -> None:
    """Right before SGLang's init_lm_head, which deletes the draft's embedding / head weights and
    binds the target's: keep the draft's own tensors, so a recipe that keeps them can put them back."""
    from .live_apply import snapshot_own_weights

    if _state["recipe"] is not None:
        _state["own"][id(worker)] = [snapshot_own_weights(r.model) for r in draft_runners(worker)]


def after_draft_load(worker: Any) -> None:
    """Right after SGLang's own init_lm_head: apply the selected recipe to each draft model."""
    from .live_apply import apply_recipe

    accept_guard.configure(worker)  # the acceptance guard's depth and method, from this draft worker
    ref = _state["recipe"]
    if ref is None:
        return
    target_runner = worker.target_worker.model_runner
    target = target_runner.model
    owns = _state["own"].pop(id(worker), None) or [None] * len(draft_runners(worker))
    for runner, own in zip(draft_runners(worker), owns):
        draft = runner.model
        try:
            applied = apply_recipe(ref, draft, target, runner.model_config.model_path,
                                   target_runner.model_config.model_path, algorithm=algorithm_of(worker),
                                   loaded_names=loaded_names(draft), own_weights=own, strict=strict())
        except SurgeryError as exc:
            report.write("failed", recipe=ref, algorithm=algorithm_of(worker),
                         diagnostics=[{"code": d.code, "message": d.message} for d in exc.diagnostics])
            raise
        _state["applied"][id(target)] = applied
        notes = applied.notes[0] if applied.notes else {}
        report.write("applied", algorithm=algorithm_of(worker), **applied.to_dict(),
                     sglang_wiring=notes.get("sglang_wiring"), after_recipe=notes.get("after_recipe"))


def after_attention_backends(runner: Any) -> None:
    """SGLang sets the target's capture list with its own ids here; the planned one goes back on
    and is checked (SRG501 when it does not hold)."""
    applied = _state["applied"].get(id(getattr(runner, "model", None)))
    if applied is None:
        _no_silent_gap(runner)
        return

    from ..live.sglang import capture_holder

    for op in applied.plan.ops("capture_hidden_states"):
        holder = capture_holder(runner.model)
        sglangs = list(getattr(holder, "layers_to_capture", ()) or ())
        prepared = prepare_op(op, None, runner.model, applied.context)
        for m in prepared.mutations:
            m.apply()
        failed = [c for c in (make() for make in prepared.checks) if not c.ok]
        get_logger().info("spec-surgery: SGLang's set_eagle3_layers_to_capture set layers_to_capture=%s; the planned "
                          "%s %s", sglangs, list(op.layers), "put back" if not failed else
                          "NOT held: " + "; ".join(f"{c.name} ({c.detail})" for c in failed))
        report.write("capture", sglang=sglangs, planned=list(op.layers), held=not failed,
                     failed=[f"{c.name} ({c.detail})" for c in failed])
        if failed and strict():
            raise SurgeryError(diag("SRG501", "; ".join(f"{c.op_id}: {c.name} ({c.detail})" for c in failed)))


def _no_silent_gap(runner: Any) -> None:
    """The target's attention backends are set up after every draft worker's memory pool (and so
    after init_lm_head, where the recipe is applied: scheduler.py init_memory_pools, then
    init_all_attention_backends). A speculative target reaching here with a recipe selected and no
    draft applied ran a worker no wrapped draft-load point covers: SRG363, never a quiet pass."""
    ref = _state["recipe"]
    spec = getattr(runner, "spec_algorithm", None)
    if ref is None or spec is None or getattr(runner, "is_draft_worker", True):
        return
    is_none = getattr(spec, "is_none", None)
    if callable(is_none) and is_none():
        return
    name = getattr(spec, "name", str(spec))
    message = (f"recipe {ref!r} is selected and SGLang set up a speculative target ({name}), but no draft passed "
               f"a wrapped draft-load point ({', '.join('.'.join(p[1:]) for p in draft_load_points())}): the "
               "worker that runs is not covered, the recipe was not applied")
    report.write("gap", recipe=ref, algorithm=name)
    get_logger().error("spec-surgery: SRG363 %s", message)
    if strict():
        raise SurgeryError(diag("SRG363", message))
