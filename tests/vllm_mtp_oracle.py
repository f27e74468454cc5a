"""Ask vLLM's own code (never a re-typed copy of it) which target configs it turns into MTP drafts and
how it numbers the MTP layers of the draft module it builds.

- `rewrite_triggers()`: every model type / architecture that `SpeculativeConfig.hf_config_override`
  rewrites into an MTP draft. Candidates are the string constants its source compares with (read
  from the installed vLLM with `ast`, so a family added to vLLM shows up here), kept when feeding a
  probe config with that model type / architecture through the real `hf_config_override` gives a
  model type in vLLM's `MTPModelTypes` that differs from the input (a draft checkpoint that already
  is an MTP type, e.g. `deepseek_mtp`, is normalised, not rewritten).
- `vllm_override(cfg)`: the real `hf_config_override` on a light stand-in of a transformers config.
- `vllm_mtp_layers(cfg)`: the layer indices of the MTP draft module vLLM would build for `cfg`:
  the draft architecture from `hf_config_override`, its class from vLLM's model registry, and in that
  class's source the `range(...)` its layer container (`self.layers` / `self.mtp_layers`) is built
  over, evaluated against the rewritten config (`mtp_start_layer_idx`, `num_mtp_layers` and the
  locals they come from). Only plain assignments and calls of builtins or of the module's own pure
  helpers are evaluated: no model is built, no engine started.
"""
from __future__ import annotations

import ast
import copy
import inspect
import textwrap
import types
from functools import lru_cache
from pathlib import Path
from typing import Any, get_args

_SAFE_BUILTINS = {"getattr": getattr, "max": max, "min": min, "int": int, "len": len, "hasattr": hasattr,
                  "bool": bool, "str": str, "range": range, "ValueError": ValueError, "isinstance": isinstance}


class HFConfig(types.SimpleNamespace):
    """Light stand-in for a transformers config object: attributes, `update`, `get_text_config`."""

    def update(self, values: dict) -> None:
        self.__dict__.update(values)

    def get_text_config(self, decoder: bool = False):  # noqa: ARG002 - transformers' signature
        return self.__dict__.get("text_config") or self

    def __deepcopy__(self, memo):
        return HFConfig(**copy.deepcopy(self.__dict__, memo))


def to_hf_config(cfg: dict) -> HFConfig:
    """A config dict (annotation keys `_...` dropped) as an `HFConfig`; `text_config` becomes one too
    (vLLM reads it by attribute), every other nested dict stays a dict (vLLM reads `mtp_config` by key)."""
    flat = {k: v for k, v in cfg.items() if not (k.startswith("_") and k != "_name_or_path")}
    if isinstance(flat.get("text_config"), dict):
        flat["text_config"] = to_hf_config(flat["text_config"])
    return HFConfig(**copy.deepcopy(flat))


def mtp_model_types() -> tuple[str, ...]:
    from vllm.config.speculative import MTPModelTypes

    return get_args(MTPModelTypes)


def vllm_override(cfg: dict) -> HFConfig:
    from vllm.config.speculative import SpeculativeConfig

    return SpeculativeConfig.hf_config_override(to_hf_config(cfg))


# ----------------------------------------------------------------------------- which types vLLM rewrites
def _compared_strings() -> set[str]:
    from vllm.config.speculative import SpeculativeConfig

    tree = ast.parse(textwrap.dedent(inspect.getsource(SpeculativeConfig.hf_config_override)))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for side in [node.left, *node.comparators]:
                for sub in ast.walk(side):
                    if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
                        found.add(sub.value)
    return found


def _probe(model_type: str, architecture: str) -> dict:
    fields = dict(num_nextn_predict_layers=1, mtp_num_hidden_layers=1, num_mtp_modules=1, hc_count=1,
                  num_hidden_layers=4, num_attention_heads=2, hidden_size=8, vocab_size=16,
                  mtp_num_experts=2, mtp_num_experts_per_tok=1, layer_types=["full_attention"] * 4)
    return {"model_type": model_type, "architectures": [architecture], **fields,
            "text_config": {"model_type": model_type, **fields},
            "mtp_config": {"num_nextn_predict_layers": 1}}


@lru_cache(maxsize=1)
def rewrite_triggers() -> tuple[tuple[str, str, str], ...]:
    """(kind, value, draft model type) for every model type / architecture hf_config_override turns
    into an MTP draft; kind is `model_type` or `architecture`; draft type `?` when the probe raised."""
    mtp = set(mtp_model_types())
    out = []
    for value in sorted(_compared_strings()):
        kind = "architecture" if value[:1].isupper() else "model_type"
        cfg = _probe(value, "ProbeForCausalLM") if kind == "model_type" else _probe("probe", value)
        try:
            draft_type = vllm_override(cfg).model_type
        except Exception:  # noqa: BLE001 - a rewrite branch that needs more fields than the probe has
            draft_type = "?"
        if draft_type == "?" or (draft_type in mtp and draft_type != cfg["model_type"]):
            out.append((kind, value, draft_type))
    return tuple(out)


# ----------------------------------------------------------------------------- how vLLM numbers the layers
def _vllm_root() -> Path:
    import vllm

    return Path(vllm.__file__).parent


def _class_file(module: str, cls: str) -> Path:
    root = _vllm_root()
    if not module.startswith("vllm."):
        return root / "model_executor" / "models" / f"{module}.py"
    pkg = root.joinpath(*module.split(".")[1:])
    hits = [p for p in sorted(pkg.rglob("*.py")) if f"class {cls}(" in p.read_text(encoding="utf-8")]
    if not hits:
        raise LookupError(f"class {cls} not found under {pkg}")
    for flavour in ("nvidia", "common"):
        for p in hits:
            if flavour in p.parts:
                return p
    return hits[0]


def _init_of(cls: ast.ClassDef) -> ast.FunctionDef | None:
    for node in cls.body:
        if isinstance(node, ast.FunctionDef) and node.name == "__init__":
            return node
    return None


def _flat(stmts: list[ast.stmt]):
    """Statements in order, descending into `with` blocks (qwen4_exp builds its layers inside one)."""
    for s in stmts:
        yield s
        if isinstance(s, ast.With):
            yield from _flat(s.body)


def _is_container(target: ast.expr) -> bool:
    node = target.value if isinstance(target, ast.Subscript) else target
    return (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self"
            and node.attr in ("layers", "mtp_layers"))


def _container_range(init: ast.FunctionDef) -> ast.Call | None:
    for s in _flat(init.body):
        if isinstance(s, ast.Assign) and any(_is_container(t) for t in s.targets):
            for sub in ast.walk(s.value):
                if isinstance(sub, ast.comprehension) and isinstance(sub.iter, ast.Call) and \
                        isinstance(sub.iter.func, ast.Name) and sub.iter.func.id == "range":
                    return sub.iter
        if isinstance(s, ast.For) and isinstance(s.iter, ast.Call) and getattr(s.iter.func, "id", "") == "range":
            if any(isinstance(b, ast.Assign) and any(_is_container(t) for t in b.targets) for b in ast.walk(s)):
                return s.iter
    return None


def _safe(expr: ast.expr, callables: set[str]) -> bool:
    for sub in ast.walk(expr):
        if isinstance(sub, ast.Call):
            f = sub.func
            if isinstance(f, ast.Name) and f.id in callables:
                continue
            if isinstance(f, ast.Attribute) and f.attr == "get_text_config":
                continue
            return False
        if isinstance(sub, (ast.Lambda, ast.NamedExpr)):
            return False
    return True


def _module_namespace(tree: ast.Module) -> dict:
    """Module constants and module-level helper functions, executed with a few builtins only."""
    ns: dict[str, Any] = {"__builtins__": _SAFE_BUILTINS}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) or (isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)):
            try:
                exec(compile(ast.Module([node], []), "<vllm helper>", "exec"), ns)  # noqa: S102 - vLLM's own code
            except Exception:  # noqa: BLE001 - a helper needing imports stays undefined
                pass
    return ns


def _evaluate_init(init: ast.FunctionDef, ns: dict) -> None:
    callables = set(_SAFE_BUILTINS) | {k for k, v in ns.items() if callable(v)}
    for s in _flat(init.body):
        if isinstance(s, ast.Assert) and _safe(s.test, callables):
            try:
                holds = eval(compile(ast.Expression(s.test), "<vllm assert>", "eval"), ns)  # noqa: S307
            except Exception:  # noqa: BLE001 - depends on something the stand-in does not model
                continue
            if not holds:  # vLLM's own check on the config (e.g. Nemotron-H: exactly one MTP layer)
                raise AssertionError(f"vLLM asserts `{ast.unparse(s.test)}`")
            continue
        if not isinstance(s, (ast.Assign, ast.AnnAssign)) or s.value is None:
            continue
        targets = s.targets if isinstance(s, ast.Assign) else [s.target]
        if len(targets) != 1 or not _safe(s.value, callables):
            continue
        t = targets[0]
        try:
            value = eval(compile(ast.Expression(s.value), "<vllm init>", "eval"), ns)  # noqa: S307 - vLLM's own code
        except Exception:  # noqa: BLE001 - depends on something the stand-in does not model
            continue
        if isinstance(t, ast.Name):
            ns[t.id] = value
        elif isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
            setattr(ns["self"], t.attr, value)


@lru_cache(maxsize=128)
def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def _predictor_file(path: Path, cls_name: str, depth: int = 0) -> tuple[Path, ast.Module, list[ast.ClassDef]]:
    """The file holding the MTP predictor: the registered class's own file, or - when the class only
    subclasses another MTP model (InternS2MobiusMTP(Qwen3_5MoeMTP)) - the file its base comes from."""
    tree = _parse(path)
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef)]
    if any(_init_of(c) and _container_range(_init_of(c)) is not None for c in classes) or depth > 3:
        return path, tree, classes
    cls = next((c for c in classes if c.name == cls_name), None)
    bases = [b.id for b in (cls.bases if cls else []) if isinstance(b, ast.Name)]
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
            for alias in node.names:
                if alias.name in bases:
                    return _predictor_file(path.parent / f"{node.module}.py", alias.name, depth + 1)
    return path, tree, classes


def _layer_classes(container_cls: ast.ClassDef) -> list[str]:
    """Names of the classes the layer container is filled with (the calls inside its assignment)."""
    init = _init_of(container_cls)
    names: list[str] = []
    for s in _flat(init.body):
        targets = s.targets if isinstance(s, ast.Assign) else []
        nodes = [s.value] if targets and any(_is_container(t) for t in targets) else []
        if isinstance(s, ast.For):
            nodes = [b.value for b in ast.walk(s) if isinstance(b, ast.Assign) and any(_is_container(t) for t in b.targets)]
        for node in nodes:
            for sub in ast.walk(node):
                if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name) and sub.func.id[:1].isupper():
                    names.append(sub.func.id)
    return [n for n in dict.fromkeys(names) if n not in ("ModuleDict", "ModuleList")]


def _class_assigns(path: Path, tree: ast.Module, name: str, attr: str, depth: int = 0) -> bool | None:
    """Whether class `name` (in this file or imported relatively, following vLLM base classes) assigns
    `self.<attr>` in its __init__; None when the class cannot be found."""
    if depth > 4:
        return None
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name), None)
    if cls is None:
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and node.module and any(a.name == name for a in node.names):
                if node.level == 1:
                    other = path.parent / f"{node.module}.py"
                elif node.module.startswith("vllm."):
                    other = _vllm_root().joinpath(*node.module.split(".")[1:]).with_suffix(".py")
                else:
                    continue
                return _class_assigns(other, _parse(other), name, attr, depth + 1) if other.exists() else None
        return None
    init = _init_of(cls)
    if init is not None and any(isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"
                                and t.attr == attr for s in ast.walk(init) if isinstance(s, ast.Assign) for t in s.targets):
        return True
    for base in cls.bases:
        if isinstance(base, ast.Name) and base.id not in ("Module", "object"):
            found = _class_assigns(path, tree, base.id, attr, depth + 1)
            if found:
                return True
    return False


def _any_shared_head(path: Path, tree: ast.Module, layer_classes: list[str]) -> bool | None:
    """Does an MTP layer of this family own a `shared_head` (whose head vLLM replaces by the target's
    lm_head)? From the layer classes' __init__ sources; None when none of them could be found."""
    seen = [_class_assigns(path, tree, name, "shared_head") for name in layer_classes]
    known = [s for s in seen if s is not None]
    return any(known) if known else None


def vllm_mtp_layers(cfg: dict, num_speculative_tokens: int | None = None) -> dict:
    """What vLLM would build for this target config as its MTP draft: {draft_model_type,
    draft_architecture, n_predict, layers (the container's keys, in order), source (file:class)}."""
    from vllm.model_executor.models.registry import _SPECULATIVE_DECODING_MODELS

    rewritten = vllm_override(cfg)
    arch = rewritten.architectures[0]
    module, cls_name = _SPECULATIVE_DECODING_MODELS[arch]
    path, tree, classes = _predictor_file(_class_file(module, cls_name), cls_name)
    with_count = [c for c in classes if _init_of(c) and any(
        isinstance(s, ast.Assign) and any(isinstance(t, ast.Attribute) and t.attr == "num_mtp_layers" for t in s.targets)
        for s in _flat(_init_of(c).body))]
    holder = with_count[0] if with_count else None
    container = None
    for c in ([holder] if holder else []) + classes:
        if _init_of(c) and _container_range(_init_of(c)) is not None:
            container = (c, _container_range(_init_of(c)))
            break
    if holder is None or container is None:
        raise LookupError(f"{path.name}: no MTP predictor with a layer container found for {arch}")
    draft_model_config = types.SimpleNamespace(hf_config=rewritten)
    vllm_config = types.SimpleNamespace(
        model_config=types.SimpleNamespace(hf_config=rewritten, hf_text_config=rewritten.get_text_config()),
        speculative_config=types.SimpleNamespace(draft_model_config=draft_model_config,
                                                 num_speculative_tokens=num_speculative_tokens))
    ns = _module_namespace(tree)
    ns.update(self=types.SimpleNamespace(), vllm_config=vllm_config, config=rewritten,
              text_config=rewritten.get_text_config(), target_config=rewritten,
              speculative_config=vllm_config.speculative_config, draft_model_config=draft_model_config)
    _evaluate_init(_init_of(holder), ns)
    rng = container[1]
    layer_classes = _layer_classes(container[0])
    args = [eval(compile(ast.Expression(a), "<vllm range>", "eval"), ns) for a in rng.args]  # noqa: S307
    return {"draft_model_type": rewritten.model_type, "draft_architecture": arch,
            "n_predict": getattr(rewritten, "n_predict", None), "layers": list(range(*args)),
            "layer_classes": layer_classes,
            "shared_head": _any_shared_head(path, tree, layer_classes),
            "source": f"{path.relative_to(_vllm_root().parent)}:{container[0].name}"}


# ----------------------------------------------------------------------------- EAGLE-3 targets
@lru_cache(maxsize=None)
def architectures_with_interface(interface: str) -> tuple[str, ...]:
    """Architectures whose vLLM model class implements `interface` (SupportsEagle3, SupportsPP, ...;
    directly or through a vLLM base class), read from vLLM's model sources and its model registry (no
    model imported)."""
    from vllm.model_executor.models import registry

    import re

    root = _vllm_root()
    bases: dict[str, set[str]] = {}
    # top-level class statements only (a regex: parsing ~600 model files with ast takes seconds)
    class_stmt = re.compile(r"^class (\w+)\(([^)]*)\)\s*:", re.M)
    for path in [*(root / "model_executor" / "models").glob("*.py"), *(root / "models").rglob("*.py")]:
        for name, parents in class_stmt.findall(path.read_text(encoding="utf-8")):
            names = {p.strip().split("[")[0].split(".")[-1] for p in parents.split(",")}
            bases.setdefault(name, set()).update(n for n in names if n)
    found = {interface}
    grew = True
    while grew:
        grew = False
        for cls, parents in bases.items():
            if cls not in found and parents & found:
                found.add(cls)
                grew = True
    models = {**registry._TEXT_GENERATION_MODELS, **registry._MULTIMODAL_MODELS}
    return tuple(sorted(arch for arch, (_, cls) in models.items() if cls in found))


def eagle3_target_architectures() -> tuple[str, ...]:
    """Architectures whose vLLM model class is a `SupportsEagle3`."""
    return architectures_with_interface("SupportsEagle3")


def generation_architectures() -> tuple[str, ...]:
    """Every architecture of vLLM's text-generation and multimodal registries."""
    from vllm.model_executor.models import registry

    return tuple(sorted({**registry._TEXT_GENERATION_MODELS, **registry._MULTIMODAL_MODELS}))


def model_types_of_architecture() -> dict[str, set[str]]:
    """Architecture -> model types, from transformers' auto-model mappings (model type -> class name)."""
    from transformers.models.auto import modeling_auto

    out: dict[str, set[str]] = {}
    for name in dir(modeling_auto):
        mapping = getattr(modeling_auto, name)
        if name.endswith("_MAPPING_NAMES") and isinstance(mapping, dict):
            for model_type, archs in mapping.items():
                for arch in archs if isinstance(archs, (list, tuple)) else [archs]:
                    out.setdefault(arch, set()).add(model_type)
    return out
