"""Which recipe the user selected for this vLLM engine, in which mode, how strictly, and its plan.

Selection is explicit, never guessed: `SURGERY_RECIPE=<path or shipped name>` or
`additional_config={"surgery": {"recipe": ...}}` (additional_config wins); `SURGERY_MODE=audit` /
`{"mode": "audit"}` observes instead of applying; `SURGERY_STRICT=0` / `{"strict": false}` reports
instead of failing on operations vLLM cannot perform.

The plugin (worker, after the draft is loaded), the start-up check (where vLLM builds its
config) and the audit all need the recipe, both models' facts and the plan. They get them from
`plan_from_config`, which reads each checkpoint's config.json once per process (keyed by the file
and its modification) and resolves once per runtime. The draft-load stage reads all of it at once
(`read`: mode, strictness, load format, the KV-scale fix, the plan), so every later step of that stage
works from one `Selected` and no step reads the selection again.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..facts import facts_from_config, read_facts
from ..modelfiles.source import is_hub_ref
from ..plan import Runtime
from ..recipe import find_recipe, load_recipe
from ..text.diagnostics import SurgeryError
from ..resolver import resolve

ENV_RECIPE = "SURGERY_RECIPE"
ENV_STRICT = "SURGERY_STRICT"  # "0": report (not fail on) operations vLLM cannot perform and failed verification
ENV_MODE = "SURGERY_MODE"
ENV_KV_SCALES = "SURGERY_KV_SCALES"  # "follow_target": draft layers take the target's calculated KV scales

_facts_cache: dict[tuple, Any] = {}
_recipe_cache: dict[tuple, Any] = {}
_plan_cache: dict[tuple, Any] = {}


def _surgery_config(vllm_config: Any) -> dict:
    extra = getattr(vllm_config, "additional_config", None) or {}
    sub = extra.get("surgery") if isinstance(extra, dict) else None
    return sub if isinstance(sub, dict) else {}


def surgery_config(vllm_config: Any) -> dict:
    """additional_config["surgery"] ({} when absent): the keys other modules read (the guard's)."""
    return _surgery_config(vllm_config)


def _recipe_of(sub: dict) -> str | None:
    return str(sub["recipe"]) if sub.get("recipe") else os.environ.get(ENV_RECIPE) or None


def _strict_of(sub: dict) -> bool:
    return sub.get("strict") is not False and os.environ.get(ENV_STRICT, "1") != "0"


def _mode_of(sub: dict) -> str:
    return str(sub["mode"]).lower() if sub.get("mode") else (os.environ.get(ENV_MODE) or "apply").lower()


def _follow_target_of(sub: dict) -> bool:
    value = sub.get("kv_scales") if sub.get("kv_scales") else os.environ.get(ENV_KV_SCALES)
    return str(value or "").lower() == "follow_target"


def selected_recipe(vllm_config: Any) -> str | None:
    return _recipe_of(_surgery_config(vllm_config))


def strict(vllm_config: Any) -> bool:
    """Strict unless the user opts out: SURGERY_STRICT=0 or additional_config {"surgery": {"strict": false}}."""
    return _strict_of(_surgery_config(vllm_config))


def selected_mode(vllm_config: Any) -> str:
    """"audit" or "apply" (the default). additional_config wins over the environment."""
    return _mode_of(_surgery_config(vllm_config))


def audit_mode(vllm_config: Any) -> bool:
    return selected_mode(vllm_config) == "audit"


def follow_target_selected(vllm_config: Any) -> bool:
    """The calculate_kv_scales fix (surgery/checks/kv_scales.py, surgery/vllm/kv_scales.py):
    SURGERY_KV_SCALES=follow_target or additional_config {"surgery": {"kv_scales": "follow_target"}}
    (additional_config wins)."""
    return _follow_target_of(_surgery_config(vllm_config))


def load_format(vllm_config: Any) -> str:
    """The engine's load format ("auto", "dummy", ...), as a string."""
    value = getattr(getattr(vllm_config, "load_config", None), "load_format", None)
    return str(getattr(value, "value", value) or "auto")


def load_info(vllm_config: Any) -> dict:
    """How the engine loads weights, and where the plugin's "has own weights" answer comes from."""
    fmt = load_format(vllm_config)
    dummy = fmt == "dummy"
    said = ("SRG512 load_format=dummy: has own weights = yes for every role the draft declares (every declared "
            "parameter is present, random)" if dummy else
            f"load_format={fmt}: has own weights from the checkpoint's names (vLLM's has-own flags)")
    return {"load_format": fmt, "dummy": dummy, "has_own_weights": "every declared parameter (dummy load)" if dummy
            else "from the checkpoint's weight names", "said": said}


def _file_key(path: Path) -> tuple | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (str(path.resolve()), st.st_mtime_ns, st.st_size)


def model_facts(path_or_id: str, hf_config: Any, side: str, revision: str | None = None):
    """Facts from the checkpoint's own config.json (vLLM rewrites the draft's live config, e.g.
    gemma4_assistant -> gemma4_mtp with num_kv_shared_layers forced to 0); from the live config
    only where there is no file. A hub id is read at the engine's revision, from the HF cache vLLM
    filled (surgery.facts.modelref). Cached per file version / commit."""
    if is_hub_ref(str(path_or_id)):
        ref = f"{path_or_id}@{revision}" if revision else str(path_or_id)
        key = ("hub", ref)
        if key not in _facts_cache:
            _facts_cache[key] = read_facts(ref)
        return _facts_cache[key]
    p = Path(str(path_or_id))
    config_file = p / "config.json" if (p / "config.json").exists() else p if p.suffix == ".json" else None
    if config_file is not None:
        key = ("file", _file_key(config_file))
        if key not in _facts_cache:
            _facts_cache[key] = read_facts(p)
        return _facts_cache[key]
    cfg = hf_config.to_dict() if hasattr(hf_config, "to_dict") else dict(hf_config)
    text = json.dumps(cfg, default=str, sort_keys=True)
    key = ("config", side, str(path_or_id), text)
    if key not in _facts_cache:
        _facts_cache[key] = facts_from_config(json.loads(text), f"{side}:{path_or_id}")
    return _facts_cache[key]


def load_selected_recipe(ref: str):
    """The recipe named by `ref` (path or shipped name), parsed once per file version."""
    try:
        key = (ref, _file_key(Path(find_recipe(ref))))
    except Exception:  # noqa: BLE001 - load_recipe reports the problem with its code
        return load_recipe(ref)
    if key[1] is None or key not in _recipe_cache:
        _recipe_cache[key] = load_recipe(ref)
    return _recipe_cache[key]


def parallel_ranks() -> tuple[int | None, int | None]:
    """This process's pipeline stage and tensor-parallel rank from vLLM's process groups.
    (`parallel_config.rank` is the GLOBAL rank: under TP 2 rank 1 would claim pp stage 1, and a recipe
    condition on `pp_rank` would decide differently per TP rank; tests/vllm/test_distributed.py.)
    None outside an initialised worker."""
    try:
        from vllm.distributed import get_pp_group, get_tensor_model_parallel_rank

        return int(get_pp_group().rank_in_group), int(get_tensor_model_parallel_rank())
    except Exception:  # noqa: BLE001 - groups not initialised (stand-ins, offline resolution)
        return None, None


def runtime_of(vllm_config: Any):
    par = vllm_config.parallel_config
    backend = getattr(getattr(vllm_config, "attention_config", None), "backend", None)
    pp_rank, tp_rank = parallel_ranks()
    # the device type vLLM runs on (cpu, cuda, ...): recipes condition on it (dspark: SRG675 on cpu)
    device = getattr(getattr(vllm_config, "device_config", None), "device_type", None)
    return Runtime(engine="vllm", pp_size=int(par.pipeline_parallel_size), tp_size=int(par.tensor_parallel_size),
                   kv_cache_dtype=str(vllm_config.cache_config.cache_dtype),
                   attention_backend=getattr(backend, "name", None) if backend is not None else None,
                   pp_rank=pp_rank, tp_rank=tp_rank, device=device if isinstance(device, str) and device else None)


@dataclass(frozen=True)
class Selection:
    """The selected recipe, both models' facts and the plan for this engine's runtime."""

    recipe: Any
    draft: Any
    target: Any
    plan: Any


def plan_from_config(vllm_config: Any, speculative_config: Any = None) -> Selection | None:
    """None when no recipe is selected. Raises SurgeryError when the recipe does not load; the
    plan may carry errors (callers decide: the start-up check and the plugin refuse, the audit
    reports). `speculative_config` defaults to the engine config's."""
    ref = selected_recipe(vllm_config)
    if ref is None:
        return None
    runtime = runtime_of(vllm_config)
    recipe = load_selected_recipe(ref)
    spec = speculative_config if speculative_config is not None else vllm_config.speculative_config
    draft_cfg, target_cfg = spec.draft_model_config, vllm_config.model_config
    draft = model_facts(draft_cfg.model, draft_cfg.hf_config, "draft", getattr(draft_cfg, "revision", None))
    target = model_facts(target_cfg.model, target_cfg.hf_config, "target", getattr(target_cfg, "revision", None))
    key = (id(recipe), id(draft), id(target), runtime)
    if key not in _plan_cache:
        _plan_cache[key] = resolve(recipe, draft, target, runtime)
    return Selection(recipe, draft, target, _plan_cache[key])


@dataclass(frozen=True)
class Selected:
    """What the draft-load stage reads of the user's selection, once: the mode, how strictly, how the engine loads
    weights (`load_info`), whether the calculate_kv_scales fix is selected, and the recipe's `Selection` (None
    without a recipe). `failure`: in audit mode, why the recipe could not be loaded or resolved (apply mode
    raises it instead: an engine never serves a recipe it could not read)."""

    mode: str
    strict: bool
    follow_target: bool
    load_info: dict
    selection: Selection | None = None
    failure: BaseException | None = None

    @property
    def audit(self) -> bool:
        return self.mode == "audit"

    @property
    def plan(self) -> Any:
        return self.selection.plan if self.selection is not None else None


def read(vllm_config: Any, speculative_config: Any = None) -> Selected:
    """The selection as the draft-load stage needs it, read once (`Selected`). Apply mode raises SurgeryError
    when the recipe does not load or its plan has errors for this engine; audit mode keeps the failure (the plan's
    errors are the audit's findings)."""
    sub = _surgery_config(vllm_config)
    mode, is_strict, follow = _mode_of(sub), _strict_of(sub), _follow_target_of(sub)
    info = load_info(vllm_config)
    try:
        selection = plan_from_config(vllm_config, speculative_config)
    except Exception as exc:  # noqa: BLE001 - the audit reports what it cannot compare; apply mode stops
        if mode != "audit":
            raise
        return Selected(mode, is_strict, follow, info, failure=exc)
    if mode != "audit" and selection is not None and not selection.plan.ok:
        raise SurgeryError(selection.plan.errors)  # before any live object is touched
    return Selected(mode, is_strict, follow, info, selection)
