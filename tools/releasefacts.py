"""Engine knowledge read from a release's own source, never imported: a wheel (`pip download --no-deps`)
or an installed package folder, parsed with `ast`. One function per engine returns the facts
surgery's per-release data holds (surgery/data/releases/<engine>.json, written by
tools/gen_engine_releases.py); the oracle tests run the same functions on the installed vLLM and the
pinned SGLang wheel and compare with the committed data.

Every fact is either a value read from a definition (a `Literal`, a dataclass field, a registry
dict, a class's methods) or the place (`file:line`) where a rule's code or message lives, so a rule
that appears or disappears between releases shows up as a difference in the data.
"""
from __future__ import annotations

import ast
import re
import zipfile
from functools import lru_cache
from pathlib import Path


class SourceTree:
    """The Python files of one release: a wheel (zip) or a folder holding the top-level package."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._zip = zipfile.ZipFile(self.path) if self.path.is_file() else None
        self._names = set(self._zip.namelist()) if self._zip else None

    def read(self, rel: str) -> str | None:
        if self._zip is not None:
            return self._zip.read(rel).decode("utf-8") if rel in self._names else None
        p = self.path / rel
        return p.read_text(encoding="utf-8") if p.is_file() else None

    def exists(self, rel: str) -> bool:
        if self._zip is not None:
            return rel in self._names or any(n.startswith(rel.rstrip("/") + "/") for n in self._names)
        return (self.path / rel).exists()

    def listdir(self, rel: str) -> list[str]:
        """Entries (files and folders) directly under `rel`, sorted; `__pycache__` left out."""
        rel = rel.rstrip("/") + "/"
        if self._zip is not None:
            out = {n[len(rel):].split("/", 1)[0] for n in self._names if n.startswith(rel) and len(n) > len(rel)}
        else:
            p = self.path / rel
            out = {c.name for c in p.iterdir()} if p.is_dir() else set()
        return sorted(n for n in out if n != "__pycache__" and not n.endswith(".pyc"))

    def files_under(self, rel: str) -> list[str]:
        rel = rel.rstrip("/") + "/"
        if self._zip is not None:
            return sorted(n for n in self._names if n.startswith(rel) and n.endswith(".py"))
        base = self.path / rel
        return sorted(str(p.relative_to(self.path)) for p in base.rglob("*.py")) if base.is_dir() else []

    @lru_cache(maxsize=None)  # noqa: B019 - one tree per release, kept for the tool's run
    def tree(self, rel: str) -> ast.Module | None:
        text = self.read(rel)
        return ast.parse(text) if text is not None else None


# -- ast helpers ----------------------------------------------------------------------------------------

def _assign(module: ast.Module, name: str) -> ast.AST | None:
    for node in module.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return node.value
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
            return node.value
    return None


def literal_members(module: ast.Module, node: ast.AST | str, seen: frozenset = frozenset()) -> list[str] | None:
    """The strings of a `Literal[...]` (nested Literal names of the same module expanded), or None."""
    if isinstance(node, str):
        if node in seen:
            return []
        value = _assign(module, node)
        return None if value is None else literal_members(module, value, seen | {node})
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == "Literal":
        elts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        out: list[str] = []
        for e in elts:
            if isinstance(e, ast.Constant) and isinstance(e.value, str):
                out.append(e.value)
            elif isinstance(e, ast.Name):
                out.extend(literal_members(module, e.id, seen) or [])
        return out
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):  # Literal[...] | None, A | B
        left, right = literal_members(module, node.left, seen), literal_members(module, node.right, seen)
        if left is None and right is None:
            return None
        return (left or []) + (right or [])
    if isinstance(node, ast.Name):
        return literal_members(module, node.id, seen)
    return None


def find_class(module: ast.Module | None, name: str) -> ast.ClassDef | None:
    if module is None:
        return None
    return next((n for n in module.body if isinstance(n, ast.ClassDef) and n.name == name), None)


def class_fields(module: ast.Module, cls: ast.ClassDef) -> dict[str, list[str] | None]:
    """Annotated class attributes (a dataclass's fields): name -> Literal values or None."""
    out = {}
    for node in cls.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and not node.target.id.startswith("_"):
            out[node.target.id] = literal_members(module, node.annotation)
    return out


def methods(cls: ast.ClassDef) -> dict[str, list[str]]:
    """The methods a class defines itself: name -> positional argument names."""
    return {n.name: [a.arg for a in n.args.args] for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


def base_names(cls: ast.ClassDef) -> list[str]:
    return [ast.unparse(b) for b in cls.bases]


def find_text(tree: SourceTree, files: list[str], needle: str | re.Pattern) -> str | None:
    """`file:line` of the first line holding `needle` (a string or a regex), in the order given."""
    for rel in files:
        text = tree.read(rel)
        if text is None:
            continue
        for i, line in enumerate(text.splitlines(), 1):
            if (needle.search(line) if isinstance(needle, re.Pattern) else needle in line):
                return f"{rel}:{i}"
    return None


def find_def(tree: SourceTree, rel: str, name: str) -> str | None:
    """`file:line` of a function or method `name` defined anywhere in `rel`."""
    module = tree.tree(rel)
    if module is None:
        return None
    for node in ast.walk(module):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return f"{rel}:{node.lineno}"
    return None


def _module_file(tree: SourceTree, dotted: str) -> str | None:
    base = dotted.replace(".", "/")
    for rel in (base + ".py", base + "/__init__.py"):
        if tree.read(rel) is not None:
            return rel
    return None


# -- vLLM -----------------------------------------------------------------------------------------------

def _registry_dict(module: ast.Module, name: str) -> dict[str, str]:
    value = _assign(module, name)
    out = {}
    if isinstance(value, ast.Dict):
        for k, v in zip(value.keys, value.values):
            if isinstance(k, ast.Constant) and isinstance(v, ast.Tuple) and len(v.elts) >= 2:
                parts = [e.value for e in v.elts[:2] if isinstance(e, ast.Constant)]
                if len(parts) == 2:
                    out[k.value] = f"{parts[0]}.{parts[1]}"
    return out


def _hook_points(tree: SourceTree, targets: dict[str, list[tuple[str, str]]], method_of: dict[str, str]) -> dict:
    """For each hook list of the plugin: which (module, class) this release defines, and the
    signature of the method the plugin wraps (None when the class does not define it itself)."""
    out = {}
    for kind, pairs in targets.items():
        rows = {}
        for module, cls_name in pairs:
            rel = _module_file(tree, module)
            cls = find_class(tree.tree(rel), cls_name) if rel else None
            key = f"{module}.{cls_name}"
            if cls is None:
                rows[key] = None
            else:
                own = methods(cls)
                rows[key] = {"bases": base_names(cls), "defines": own.get(method_of[kind])}
        out[kind] = rows
    return out


def vllm_facts(tree: SourceTree, version: str, hook_targets: dict, hook_methods: dict) -> dict:
    spec_rel = "vllm/config/speculative.py"
    spec = tree.tree(spec_rel)
    cfg_cls = find_class(spec, "SpeculativeConfig")
    registry = tree.tree("vllm/model_executor/models/registry.py")
    algos = tree.tree("vllm/transformers_utils/configs/speculators/algos.py")
    v2 = "vllm/v1/worker/gpu/spec_decode"
    gemma4_rel = f"{v2}/gemma4/speculator.py"
    g4 = find_class(tree.tree(gemma4_rel), "Gemma4Speculator")
    use_v2 = find_def(tree, "vllm/config/vllm.py", "use_v2_model_runner")
    v2_files = tree.files_under(v2)
    legacy = "vllm/v1/worker/gpu_model_runner.py"
    facts = {
        "version": version,
        "methods": literal_members(spec, "SpeculativeMethod") or [],
        "mtp_model_types": literal_members(spec, "MTPModelTypes") or [],
        "speculative_config_fields": class_fields(spec, cfg_cls) if cfg_cls else {},
        "draft_architectures": _registry_dict(registry, "_SPECULATIVE_DECODING_MODELS") if registry else {},
        # algos.py: SUPPORTED_SPECULATORS_TYPES filled by @register_speculator("<algorithm>")
        "speculators_algorithms": sorted(set(_dict_str_keys(algos, "SUPPORTED_SPECULATORS_TYPES"))
                                         | set(_decorated_names(algos, "register_speculator"))) if algos else [],
        "runners": {
            # the legacy ("V1") GPU runner and proposers; 0.34 has only the V2 runner
            "legacy": tree.read(legacy) is not None,
            "v2": tree.read("vllm/v1/worker/gpu/model_runner.py") is not None,
            # where a release with both picks one (VllmConfig.use_v2_model_runner: V2 unless unsupported)
            "choice": use_v2,
        },
        "v2_spec_decode": tree.listdir(v2),
        "gemma4_speculator": None if g4 is None else {
            "source": gemma4_rel, "bases": base_names(g4),
            "copies_target_kv_scales": find_def(tree, gemma4_rel, "_copy_target_kv_scales"),
        },
        "hook_points": _hook_points(tree, hook_targets, hook_methods),
        "rules": {
            # transformers_utils/config.py: a speculators file whose verifier is a local folder
            "local_verifier_refused": find_text(tree, tree.files_under("vllm/transformers_utils"),
                                                "Speculators verifier must name a remote model repository"),
            # config/speculative.py: an EAGLE draft's max_position_embeddings raised to the serving length
            "draft_max_position_override": find_def(tree, spec_rel, "_maybe_override_draft_max_position_embeddings"),
            # config/vllm.py: the target's max_model_len lowered to the draft's (V2)
            "limit_max_model_len_to_draft": find_def(tree, "vllm/config/vllm.py", "_limit_max_model_len_to_draft"),
            # the V2 runner reads eagle_config.use_aux_hidden_state (before: ignored, vllm#40656)
            "v2_reads_use_aux_hidden_state": find_text(tree, v2_files, '"use_aux_hidden_state"'),
            "legacy_reads_use_aux_hidden_state": find_text(tree, ["vllm/v1/spec_decode/llm_base_proposer.py"],
                                                           '"use_aux_hidden_state"'),
        },
    }
    return facts


def _decorated_names(module: ast.Module, decorator: str) -> list[str]:
    """The string argument of every `@decorator("name")` on a top-level function or class."""
    out = []
    for node in module.body:
        for d in getattr(node, "decorator_list", []):
            if isinstance(d, ast.Call) and isinstance(d.func, ast.Name) and d.func.id == decorator and d.args \
                    and isinstance(d.args[0], ast.Constant) and isinstance(d.args[0].value, str):
                out.append(d.args[0].value)
    return out


def _dict_str_keys(module: ast.Module, name: str) -> list[str]:
    value = _assign(module, name)
    if isinstance(value, ast.Dict):
        return [k.value for k in value.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)]
    return []


# -- SGLang ---------------------------------------------------------------------------------------------

def sglang_facts(tree: SourceTree, version: str, hook_points: list[tuple[str, str, str]]) -> dict:
    spec_rel = "sglang/srt/speculative/spec_info.py"
    spec = tree.tree(spec_rel)
    algo = find_class(spec, "SpeculativeAlgorithm")
    members = [t.id for n in (algo.body if algo else []) if isinstance(n, ast.Assign) for t in n.targets
               if isinstance(t, ast.Name)]
    server_args = tree.tree("sglang/srt/server_args.py")
    sa = find_class(server_args, "ServerArgs")
    fields = class_fields(server_args, sa) if sa else {}
    points = {}
    for module, cls_name, method in hook_points:
        rel = _module_file(tree, module)
        cls = find_class(tree.tree(rel), cls_name) if rel else None
        points[f"{module}.{cls_name}.{method}"] = None if cls is None else methods(cls).get(method)
    return {
        "version": version,
        "algorithms": members,
        "speculative_server_args": sorted(k for k in fields if k.startswith("speculative_")),
        "speculative_workers": [n for n in tree.listdir("sglang/srt/speculative") if n.endswith("_worker.py")
                                or n.endswith("_worker_v2.py")],
        "hook_points": points,
    }
