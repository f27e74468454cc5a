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
        # config/cache.py CacheDType: what --kv-cache-dtype / speculative_config.kv_cache_dtype accept
        "cache_dtypes": literal_members(tree.tree("vllm/config/cache.py"), "CacheDType") or [],
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
            # ... for every draft but an independent model (0.33: `if self.method != "draft_model"`; 0.34: the
            # speculator configs' `shares_target_positions`), not only EAGLE's
            "draft_max_position_override_all_methods": find_text(
                tree, [spec_rel, f"{v2}/speculator_config.py"],
                re.compile(r'if self\.method != "draft_model":|if config_cls\.shares_target_positions')),
            # config/vllm.py: the target's max_model_len lowered to the draft's (V2)
            "limit_max_model_len_to_draft": find_def(tree, "vllm/config/vllm.py", "_limit_max_model_len_to_draft"),
            # the V2 runner reads eagle_config.use_aux_hidden_state (before: ignored, vllm#40656)
            "v2_reads_use_aux_hidden_state": find_text(tree, v2_files, '"use_aux_hidden_state"'),
            "legacy_reads_use_aux_hidden_state": find_text(tree, ["vllm/v1/spec_decode/llm_base_proposer.py"],
                                                           '"use_aux_hidden_state"'),
            # V2 runner at load: aux-hidden-state methods at pp > 1 need a target that relays them (0.34)
            "aux_hidden_states_over_pp_verified": find_def(tree, f"{v2}/eagle/eagle3_utils.py",
                                                           "verify_supports_aux_hidden_states_over_pp"),
            # config/vllm.py: an explicit float16 / bfloat16 KV cache that differs from the model's dtype
            "float_kv_cache_matches_model_dtype": find_def(tree, "vllm/config/vllm.py", "_reject_mismatched_float_kv_cache"),
            # config/speculative.py: parallel_drafting refused for every method but the block drafters (0.34:
            # P-EAGLE's parallel EAGLE-3 drafting gone; `{"method": "eagle3", "parallel_drafting": true}` refused)
            "parallel_drafting_block_only": find_text(tree, [spec_rel],
                                                      "parallel_drafting is only supported by the dflash and dspark"),
            # legacy runner: the drafter skipped past the draft's length (proposes token 0)
            "input_fits_in_drafter": find_def(tree, legacy, "_input_fits_in_drafter"),
            # issue 65: a k above the draft's n_predict (its MTP layers) that is no multiple of it is refused
            # (SpeculativeConfig; 0.34: SpeculatorConfig.resolve_num_speculative_tokens)
            "mtp_k_multiple_of_n_predict": find_text(tree, [spec_rel, f"{v2}/speculator_config.py"],
                                                     "must be divisible by {n_predict=}"),
            # FLy verification (rejection_sample_method "fly") refused with fewer than 2 draft tokens
            "fly_needs_two_tokens": find_text(tree, [spec_rel], "FLy requires num_speculative_tokens to be at least 2"),
            # the V2 DFlash speculator refuses a draft whose dflash_config asks sample_from_anchor; before it,
            # the DFlash speculators set it False whatever the file says
            "dflash_sample_from_anchor_refused": find_text(tree, [f"{v2}/dflash/speculator.py"],
                                                           "sample_from_anchor=True is not supported for DFlash"),
            # the speculators reader copies a DFlash file's sample_from_anchor into dflash_config
            "dflash_reader_copies_sample_from_anchor": find_text(
                tree, ["vllm/transformers_utils/configs/speculators/algos.py"],
                '"sample_from_anchor": config_dict.get("sample_from_anchor"'),
            # a Gated DeltaNet layer's conv width and value heads divided by tp (the mamba state shape the
            # engine sizes its cache with; the conv1d ColumnParallelLinear at model build)
            "gdn_state_shape_divides": find_def(tree, "vllm/model_executor/layers/mamba/mamba_utils.py",
                                                "gated_delta_net_state_shape"),
        },
        # method dspark: the draft architectures SpeculativeConfig keeps; any other is rewritten to
        # DeepSeek-V4's DSparkDraftModel (model_type deepseek_v4) before the registry is asked
        "dspark_kept_architectures": dspark_kept_architectures(spec),
        # ... except a qwen3 draft named DSparkDraftModel (SpecForge's name), renamed Qwen3DSparkModel first
        "dspark_qwen3_renamed": dspark_qwen3_renamed(spec, spec_rel),
        "classes": vllm_class_facts(tree),
        "kv_sharing_copy": kv_sharing_copy(tree),
    }
    facts["dspark"] = vllm_dspark_facts(tree)  # the DSpark block-layout flag (issue 58; dspark58)
    return facts


def dspark_kept_architectures(spec: ast.Module | None) -> list[str] | None:
    """The architectures of `if self.method == "dspark" and ("A" not in ...architectures and ...)`, whose
    body sets `architectures = ["DSparkDraftModel"]` (0.25-0.29); None where no such rewrite exists."""
    for node in ast.walk(spec) if spec else []:
        if not isinstance(node, ast.If):
            continue
        test = ast.unparse(node.test)
        body = ast.unparse(ast.Module(body=node.body, type_ignores=[]))
        if "self.method == 'dspark'" not in test or "not in self.draft_model_config.architectures" not in test \
                or "'DSparkDraftModel'" not in body:
            continue
        names = set()
        for c in ast.walk(node.test):
            if not (isinstance(c, ast.Compare) and any(isinstance(op, ast.NotIn) for op in c.ops)):
                continue
            left = _assign(spec, c.left.id) if isinstance(c.left, ast.Name) else c.left  # a module constant
            if isinstance(left, ast.Constant) and isinstance(left.value, str):
                names.add(left.value)
        return sorted(names)
    return None


def dspark_qwen3_renamed(spec: ast.Module | None, rel: str) -> str | None:
    """`file:line` of the `if` that renames a qwen3 draft named DSparkDraftModel to Qwen3DSparkModel."""
    for node in ast.walk(spec) if spec else []:
        if isinstance(node, ast.If):
            test = ast.unparse(node.test)
            body = ast.unparse(ast.Module(body=node.body, type_ignores=[]))
            if "'DSparkDraftModel'" in test and "'qwen3'" in test and "'Qwen3DSparkModel'" in body:
                return f"{rel}:{node.lineno}"
    return None


KV_SHARING_NAME = "kv_sharing_target_layer_name"


def kv_sharing_copy(tree: SourceTree) -> dict:
    """Which attention classes of the release read their own copy of `kv_sharing_target_layer_name`
    (`self.kv_sharing_target_layer_name` loaded in a method other than `__init__`, along the class's
    lineage as Python resolves it) and which only store it. vLLM's Attention layer hands the name to its
    backend impl at construction; a proposer that sets the layer's name later (Gemma 4 MTP) leaves the
    impl's copy at None, which matters only where the impl reads it (SRG703): FlashInfer's KV write,
    ROCm AITER FA's prefill K/V fetch, HPC; Triton, FlashAttention and CPU store it and never read it.
    `reads`: class name -> `file:line` of the first read; `stores_only`: class names; `defined_in`:
    class name -> its file (the release oracle imports them there). The files read: every file that
    names the attribute, and every attention backend (subclasses that inherit a read)."""
    files = sorted({rel for rel in tree.files_under("vllm") if KV_SHARING_NAME in (tree.read(rel) or "")}
                   | set(tree.files_under("vllm/v1/attention/backends")))
    index = ClassIndex(tree)
    reads: dict[str, str] = {}
    stores: set[str] = set()
    defined: dict[str, str] = {}
    defined_store: dict[str, str] = {}
    for rel in files:
        module = tree.tree(rel)
        for cls in (n for n in (module.body if module else []) if isinstance(n, ast.ClassDef)):
            read_at, stored = None, False
            for r, c in index.lineage(rel, cls):
                if isinstance(c, str):
                    continue
                for fn in (n for n in c.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
                    for node in ast.walk(fn):
                        if not (isinstance(node, ast.Attribute) and node.attr == KV_SHARING_NAME
                                and isinstance(node.value, ast.Name) and node.value.id == "self"):
                            continue
                        if isinstance(node.ctx, ast.Store):
                            stored = True
                        elif fn.name != "__init__" and read_at is None:
                            read_at = f"{r}:{node.lineno}"
                if read_at:
                    break
            if read_at and cls.name not in reads:  # a name two classes share: a reader wins
                reads[cls.name], defined[cls.name] = read_at, rel
            elif stored and not read_at and cls.name not in stores:
                stores.add(cls.name)
                defined_store[cls.name] = rel
    defined = {**{k: v for k, v in defined_store.items() if k not in reads}, **defined}
    return {"reads": dict(sorted(reads.items())), "stores_only": sorted(stores - set(reads)),
            "defined_in": dict(sorted(defined.items()))}


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


# -- classes across modules (inheritance, class attributes, the inner decoder) ---------------------------

class ClassIndex:
    """Classes of one release resolved across its modules by their imports, so a fact that a class
    inherits (SupportsPP, `supports_aux_hidden_states_over_pp`) is read as Python would resolve it.
    The oracle venvs hold the result to the release's imported classes (tests/release_oracle)."""

    def __init__(self, tree: SourceTree):
        self.tree = tree

    def module_file(self, module: str) -> str | None:
        """A registry module name (`llama`, or a dotted path) -> its file."""
        dotted = module if "." in module else f"vllm.model_executor.models.{module}"
        return _module_file(self.tree, dotted)

    def _package(self, rel: str) -> list[str]:
        parts = rel[:-3].split("/")
        return parts[:-1] if parts[-1] != "__init__" else parts[:-1]

    @lru_cache(maxsize=None)  # noqa: B019 - one index per release
    def resolve(self, rel: str, name: str, depth: int = 0) -> tuple[str, ast.ClassDef] | None:
        """The class `name` as seen from module file `rel`: defined there or imported into it."""
        module = self.tree.tree(rel)
        if module is None or depth > 12:
            return None
        cls = find_class(module, name)
        if cls is not None:
            return rel, cls
        # every import, nested ones too (0.34's hardware-isolated packages import the CUDA class under
        # `if TYPE_CHECKING or current_platform.is_cuda():` first: the class GPU users run)
        for node in ast.walk(module):
            if not isinstance(node, ast.ImportFrom):
                continue
            for alias in node.names:
                if (alias.asname or alias.name) != name:
                    continue
                if node.level:
                    base = self._package(rel)[: len(self._package(rel)) - (node.level - 1)]
                    dotted = ".".join(base + ([node.module] if node.module else []))
                else:
                    dotted = node.module or ""
                target = _module_file(self.tree, dotted)
                if target is None:
                    return None
                return self.resolve(target, alias.name, depth + 1)
        return None

    def lineage(self, rel: str, cls: ast.ClassDef) -> list[tuple[str, ast.ClassDef | str]]:
        """The class and its bases, depth first; a base this tree cannot resolve stays its name."""
        out, todo, seen = [], [(rel, cls)], set()
        while todo:
            r, c = todo.pop(0)
            key = (r, c if isinstance(c, str) else c.name)
            if key in seen:
                continue
            seen.add(key)
            out.append((r, c))
            if isinstance(c, str):
                continue
            for b in c.bases:
                bname = b.id if isinstance(b, ast.Name) else b.attr if isinstance(b, ast.Attribute) else \
                    ast.unparse(b.value) if isinstance(b, ast.Subscript) else None
                if not bname:
                    continue
                found = self.resolve(r, bname)
                todo.append(found if found else (r, bname))
        return out

    def inherits(self, rel: str, cls: ast.ClassDef, base: str) -> bool:
        return any((c if isinstance(c, str) else c.name) == base for _, c in self.lineage(rel, cls))

    def supports_pp(self, rel: str, cls: ast.ClassDef) -> bool:
        """interfaces.supports_pp on a class: a SupportsPP subclass whose own (most derived) `forward`
        accepts `intermediate_tensors` (supports_kw: by name, or through **kwargs)."""
        if not self.inherits(rel, cls, "SupportsPP"):
            return False
        for _, c in self.lineage(rel, cls):
            if isinstance(c, str):
                continue
            fwd = next((n for n in c.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                        and n.name == "forward"), None)
            if fwd is not None:
                names = [a.arg for a in fwd.args.args + fwd.args.kwonlyargs]
                return "intermediate_tensors" in names or fwd.args.kwarg is not None
        return False

    def class_attr(self, rel: str, cls: ast.ClassDef, attr: str):
        """The first literal assignment of `attr` along the lineage (as getattr on the class finds it)."""
        for _, c in self.lineage(rel, cls):
            if isinstance(c, str):
                continue
            for node in c.body:
                target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else \
                    node.target if isinstance(node, ast.AnnAssign) else None
                if isinstance(target, ast.Name) and target.id == attr and node.value is not None:
                    try:
                        return ast.literal_eval(node.value)
                    except ValueError:
                        return ast.unparse(node.value)
        return None

    def inner_decoder(self, rel: str, cls: ast.ClassDef) -> tuple[str, ast.ClassDef] | None:
        """The class a top-level model builds as `self.model` (what eagle3_utils._inner_decoder reads):
        `self.model = X(...)`, `self.model = self._init_model(...)` -> `return X(...)`, or
        `self.model = self.model_cls(...)` with the class attribute `model_cls = X`."""
        wants_init_model = False
        for r, c in self.lineage(rel, cls):
            if isinstance(c, str):
                continue
            funcs = {n.name: n for n in c.body if isinstance(n, ast.FunctionDef)}
            for fname in ("__init__", "_init_model"):
                func = funcs.get(fname)
                if func is None or (fname == "_init_model" and not wants_init_model):
                    continue
                for node in ast.walk(func):
                    value = None
                    if isinstance(node, ast.Assign) and any(
                            isinstance(t, ast.Attribute) and t.attr == "model" and isinstance(t.value, ast.Name)
                            and t.value.id == "self" for t in node.targets):
                        value = node.value
                    elif isinstance(node, ast.Return) and fname == "_init_model":
                        value = node.value
                    if not isinstance(value, ast.Call):
                        continue
                    f = value.func
                    if isinstance(f, ast.Name):
                        found = self.resolve(r, f.id)
                        if found:
                            return found
                    if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "self":
                        if f.attr == "_init_model":
                            wants_init_model = True
                        elif f.attr == "model_cls":
                            for r2, c2 in self.lineage(rel, cls):
                                if isinstance(c2, str):
                                    continue
                                for n in c2.body:
                                    if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "model_cls"
                                                                         for t in n.targets) \
                                            and isinstance(n.value, ast.Name):
                                        return self.resolve(r2, n.value.id)
        return None


def _registry_classes(index: ClassIndex, registry: ast.Module, name: str) -> dict[str, tuple[str, ast.ClassDef] | None]:
    out = {}
    for arch, where in _registry_dict(registry, name).items():
        module, _, cls_name = where.rpartition(".")
        rel = index.module_file(module)
        out[arch] = index.resolve(rel, cls_name) if rel else None
    return out


def vllm_class_facts(tree: SourceTree) -> dict:
    """What the release's model classes say that the config layer does not: which generation architectures
    are no SupportsPP (refused at --pp > 1), which draft architectures are SupportsPP (a release that gives
    the draft the target's pp refuses the others), and which targets relay aux hidden states between
    pipeline stages (a release that verifies it refuses EAGLE-3 / DFlash / DSpark at pp > 1 on the rest)."""
    registry = tree.tree("vllm/model_executor/models/registry.py")
    if registry is None:
        return {}
    index = ClassIndex(tree)
    gen = _registry_classes(index, registry, "_TEXT_GENERATION_MODELS")
    gen.update(_registry_classes(index, registry, "_MULTIMODAL_MODELS"))
    drafts = _registry_classes(index, registry, "_SPECULATIVE_DECODING_MODELS")
    without_pp = sorted(a for a, found in gen.items() if found and not index.supports_pp(*found))
    drafts_pp = sorted(a for a, found in drafts.items() if found and index.supports_pp(*found))
    stage_numbered = sorted(a for a, found in drafts.items() if found and _numbers_from_stage(index, *found))
    relay = []
    for arch, found in sorted(gen.items()):
        if not found or not index.inherits(*found, "SupportsEagle3"):
            continue
        inner = index.inner_decoder(*found)
        if inner and index.class_attr(*inner, "supports_aux_hidden_states_over_pp") is True:
            relay.append(arch)
    spec = tree.tree("vllm/config/speculative.py")
    draft_pp = None
    for node in ast.walk(spec) if spec else []:
        if isinstance(node, ast.FunctionDef) and node.name == "create_draft_parallel_config":
            for call in ast.walk(node):
                if isinstance(call, ast.Call) and ast.unparse(call.func) == "ParallelConfig":
                    kw = {k.arg: k.value for k in call.keywords}
                    v = kw.get("pipeline_parallel_size")
                    draft_pp = v.value if isinstance(v, ast.Constant) else "target" if v is not None else 1
    mtp_archs = set()
    for node in ast.walk(spec) if spec else []:
        if isinstance(node, ast.FunctionDef) and node.name == "hf_config_override":
            for d in ast.walk(node):
                if isinstance(d, ast.Dict):
                    for k, v in zip(d.keys, d.values):
                        if isinstance(k, ast.Constant) and k.value == "architectures" and isinstance(v, ast.List):
                            # every name the list can hold: `["Qwen3_5MoeMTP" if is_moe else "Qwen3_5MTP"]` too
                            mtp_archs |= {c.value for e in v.elts for c in ast.walk(e)
                                          if isinstance(c, ast.Constant) and isinstance(c.value, str)}
    return {"architectures_without_pp": without_pp, "draft_architectures_with_pp": drafts_pp,
            # the draft classes SpeculativeConfig.hf_config_override turns an MTP target into
            "mtp_architectures": sorted(mtp_archs),
            "aux_hidden_states_over_pp": relay, "draft_pp": draft_pp, "aux_methods": _aux_methods(tree, index),
            # draft classes whose own layers are numbered from the target's layer count on this pipeline stage
            # (`start_layer_id=model_config.get_num_layers(parallel_config)`, llama_eagle.py): at pp > 1 the
            # head's first layer can take the name of a target layer of the last stage (SRG346)
            "draft_architectures_stage_numbered": stage_numbered}


def _numbers_from_stage(index: ClassIndex, rel: str, cls: ast.ClassDef) -> bool:
    """A draft class (or a base it inherits) that calls `<model_config>.get_num_layers(...)`: the per-stage
    layer count (ModelConfig.get_num_layers(parallel_config) = end - start of this rank's stage), where
    EAGLE-3's classes take get_total_num_hidden_layers()."""
    for _, c in index.lineage(rel, cls):
        if isinstance(c, str):
            continue
        for node in ast.walk(c):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr == "get_num_layers":
                return True
    return False


def _aux_methods(tree: SourceTree, index: ClassIndex) -> list[str]:
    """The methods for which the V2 runner takes the target's aux hidden states (and, at pp > 1, verifies
    the target relays them): up to 0.33 a tuple in GPUModelRunner.load_model; from 0.34 every speculator
    config class whose `uses_aux_hidden_states` is not `return False` (EAGLE-3's reads the head's
    eagle_config.use_aux_hidden_state, true by default)."""
    runner = tree.read("vllm/v1/worker/gpu/model_runner.py") or ""
    m = re.search(r"method in \(([^)]*)\):\s*(?:#[^\n]*\n\s*)*self\.use_aux_hidden_state_outputs = True", runner)
    if m:
        return sorted(re.findall(r'"([a-z0-9_]+)"', m.group(1)))
    out = set()
    for rel in tree.files_under("vllm/v1/worker/gpu/spec_decode"):
        module = tree.tree(rel)
        for cls in (n for n in (module.body if module else []) if isinstance(n, ast.ClassDef)):
            method = index.class_attr(rel, cls, "base_method")
            if not isinstance(method, str):
                continue
            for _, c in index.lineage(rel, cls):
                if isinstance(c, str):
                    continue
                fn = next((n for n in c.body if isinstance(n, ast.FunctionDef) and n.name == "uses_aux_hidden_states"), None)
                if fn is not None:
                    body = [n for n in fn.body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
                    is_false = len(body) == 1 and isinstance(body[0], ast.Return) and \
                        isinstance(body[0].value, ast.Constant) and body[0].value.value is False
                    if not is_false:
                        out.add(method)
                    break
    return sorted(out)


# -- vLLM: DSpark (issue 58) -------------------------------------------------------------------------------

DSPARK_SPECULATOR = "vllm/v1/worker/gpu/spec_decode/dspark/speculator.py"


def vllm_dspark_facts(tree: SourceTree) -> dict | None:
    """Which draft-config key the release's DSparkSpeculator reads to pick its block layout, with its default:
    `self.sample_from_anchor = [not] getattr(<draft hf_config>, "<key>", <default>)` in `__init__`.

    Anchor-first (N query slots, the anchor's own output is draft 0) or fill-in (1 + N slots, the anchor is
    the bonus token and the masks are the drafts). 0.25-0.26 read `dspark_bonus_anchor` (default False,
    negated); 0.27 renamed it `sample_from_anchor` (default True) and read the old key no longer, so a
    config written with the old key alone is drafted in the other layout, silently (issue 58)."""
    cls = find_class(tree.tree(DSPARK_SPECULATOR), "DSparkSpeculator")
    if cls is None:
        return None
    flag = None
    for node in ast.walk(cls):
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1
                and ast.unparse(node.targets[0]) == "self.sample_from_anchor"):
            continue
        value, negated = node.value, False
        if isinstance(value, ast.UnaryOp) and isinstance(value.op, ast.Not):
            value, negated = value.operand, True
        if isinstance(value, ast.Call) and ast.unparse(value.func) == "getattr" and len(value.args) == 3 \
                and isinstance(value.args[1], ast.Constant) and isinstance(value.args[1].value, str):
            flag = {"key": value.args[1].value, "default": ast.literal_eval(value.args[2]), "negated": negated,
                    "reads": ast.unparse(value.args[0]), "at": f"{DSPARK_SPECULATOR}:{node.lineno}"}
            break
    return {"layout_flag": flag, "speculators": _speculators_dspark_layout(tree, flag)}


def _speculators_dspark_layout(tree: SourceTree, flag: dict | None) -> dict | None:
    """What the release's speculators reader (algos.py `update_dspark`) writes into the key the speculator
    reads: a constant (0.25-0.26: `dspark_bonus_anchor = True`, the fill-in layout whatever the file says), or
    the file's own `sample_from_anchor` with the reader's default (0.27+)."""
    rel = "vllm/transformers_utils/configs/speculators/algos.py"
    module = tree.tree(rel)
    fn = next((n for n in ast.walk(module) if isinstance(n, ast.FunctionDef) and n.name == "update_dspark"),
              None) if module is not None and flag else None
    if fn is None:
        return None
    names = {ast.unparse(n.targets[0]): n.value for n in ast.walk(fn)
             if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)}
    for node in ast.walk(fn):
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Subscript)
                and isinstance(node.targets[0].slice, ast.Constant) and node.targets[0].slice.value == flag["key"]):
            continue
        value = node.value
        negated = isinstance(value, ast.UnaryOp) and isinstance(value.op, ast.Not)
        value = value.operand if negated else value
        value = names.get(ast.unparse(value), value) if isinstance(value, ast.Name) else value
        at = f"{rel}:{node.lineno}"
        if isinstance(value, ast.Constant):
            return {"constant": (not value.value) if negated else value.value, "at": at}
        if isinstance(value, ast.Call) and ast.unparse(value.func).endswith(".get") and len(value.args) == 2 \
                and isinstance(value.args[0], ast.Constant):
            return {"file_key": value.args[0].value, "file_default": ast.literal_eval(value.args[1]),
                    "negated": negated, "at": at}
        return {"unparsed": ast.unparse(node.value), "at": at}
    return {"constant": None, "at": None}  # the reader does not write the key: the speculator's default holds
