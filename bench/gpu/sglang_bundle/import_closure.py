#!/usr/bin/env python3
"""Static import closure of SGLang's start-up modules (no import is executed).

Starting from entry modules (default: what `sgl.Engine` with triton attention, pytorch sampling and
the EAGLE / MTP workers reaches), follow every module-level import of the packages named by --follow
(sglang, sgl_kernel, ...) found under --site, with `ast`, and list the third-party top-level modules
they import that neither the stdlib, the H200 image (image_packages.txt) nor a bundled distribution
(--site) provides.

An import is classified by where it sits in the module:
  unconditional  module level, or under an `if` at module level (e.g. `if _is_cuda:` - taken on the
                 H200, so it counts; `if TYPE_CHECKING:` and darwin/hip/npu/xpu/musa-looking guards
                 are skipped)
  optional       inside a module-level `try:` whose handler catches ImportError / Exception
  lazy           inside a function or class method body: run only when called; with --lazy these
                 are followed too (everything they reach counts as lazy) and listed

    python3 import_closure.py --site DIR [--site DIR2] [--image image_packages.txt] [--entry MOD ...]

Exit status 0; the report is the output.  Limits: dynamic imports (importlib, LazyImport, the model
registry's pkgutil walk) are invisible - the registry is covered by listing the models we use as
entries; `from pkg import name` follows pkg.name when it is a submodule.
"""
import argparse
import ast
import os
import re
import sys
from collections import defaultdict

ENTRIES = [
    "sglang",
    "sglang.srt.entrypoints.engine",
    "sglang.srt.managers.scheduler",
    "sglang.srt.managers.tp_worker",
    "sglang.srt.managers.detokenizer_manager",
    "sglang.srt.managers.tokenizer_manager",
    "sglang.srt.model_executor.model_runner",
    "sglang.srt.model_executor.runner.decode_cuda_graph_runner",
    "sglang.srt.model_loader.loader",
    "sglang.srt.models.registry",
    "sglang.srt.layers.attention.triton_backend",
    "sglang.srt.layers.attention.attention_registry",
    "sglang.srt.layers.sampler",
    "sglang.srt.speculative.spec_registry",       # 0.5.17: only the *_v2 workers exist
    "sglang.srt.speculative.eagle_worker_v2",
    "sglang.srt.speculative.multi_layer_eagle_worker_v2",
    "sglang.srt.speculative.standalone_worker_v2",
    "sglang.srt.speculative.frozen_kv_mtp_worker_v2",
    "sglang.srt.speculative.draft_utils",
    "sglang.srt.speculative.eagle_utils",
    "sglang.srt.models.llama",
    "sglang.srt.models.llama_eagle",
    "sglang.srt.models.llama_eagle3",
    "sglang.srt.models.mimo",
    "sglang.srt.models.mimo_mtp",
    "sglang.srt.models.deepseek_v2",
    "sglang.srt.models.deepseek_nextn",
    "sglang.srt.models.qwen2",
    "sglang.srt.models.qwen3",
]

# distribution name -> import names, where they differ (image packages and bundle alike)
DIST_IMPORTS = {
    "pyyaml": ["yaml"], "pillow": ["PIL"], "opencv-python-headless": ["cv2"],
    "scikit-learn": ["sklearn"], "scikit-image": ["skimage"], "python-dateutil": ["dateutil"],
    "nvidia-ml-py": ["pynvml"], "protobuf": ["google"], "typing-extensions": ["typing_extensions"],
    "cuda-bindings": ["cuda.bindings"], "cuda-core": ["cuda.core"], "cuda-pathfinder": ["cuda.pathfinder"],
    "huggingface-hub": ["huggingface_hub"], "hf-xet": ["hf_xet"], "py-cpuinfo": ["cpuinfo"],
    "pytorch-lightning": ["pytorch_lightning"], "lightning-utilities": ["lightning_utilities"],
    "torch-geometric": ["torch_geometric"], "nvidia-nccl-cu13": ["nvidia"],
    "nvidia-cudnn-cu13": ["nvidia"], "jax-cuda13-plugin": ["jax_plugins"], "msgpack": ["msgpack"],
    "attrs": ["attr", "attrs"], "markdown-it-py": ["markdown_it"], "tensorboard-data-server": [],
    "sentence-transformers": ["sentence_transformers"], "onnx-ir": ["onnx_ir"],
    "opt-einsum": ["opt_einsum"], "typing-inspect": ["typing_inspect"], "pyzmq": ["zmq"],
    "mypy-extensions": ["mypy_extensions"], "pyre-extensions": ["pyre_extensions"],
    "charset-normalizer": ["charset_normalizer"], "ml-dtypes": ["ml_dtypes"],
    "interface-meta": ["interface_meta"], "lazy-loader": ["lazy_loader"],
    "annotated-doc": ["annotated_doc"], "prometheus-client": ["prometheus_client"],
    "setuptools": ["setuptools", "pkg_resources", "_distutils_hack"],
    "pyproject-hooks": ["pyproject_hooks"], "scikit-build-core": ["scikit_build_core"],
    "numba-cuda": ["numba_cuda"], "wadler-lindig": ["wadler_lindig"],
}
# module-level `if` guards that are false on the H200 (other platforms, type checking, __main__)
SKIP_GUARD = re.compile(r"TYPE_CHECKING|__main__|darwin|\b_?(is_)?(hip|npu|xpu|musa|mps|hpu|cpu|aiter)\b|"
                        r"_?is_(hip|npu|xpu|musa|mps|hpu|cpu|host_cpu\w*|intel\w*)\(|_use_aiter")


# guard names that are true on the H200 (CUDA, NVIDIA)
CUDA_TRUE = {"_is_cuda", "is_cuda", "_is_cuda_alike", "is_cuda_alike", "_is_nvidia", "is_nvidia",
             "torch", "cuda", "is_available", "version"}


# namespace packages shared by several distributions: judged by their first two components
NAMESPACES = {"cuda"}


def import_key(module):
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] in NAMESPACES and len(parts) > 1 else parts[0]


def norm(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def dist_import_names(dist):
    return DIST_IMPORTS.get(norm(dist), [norm(dist).replace("-", "_")])


def site_top_levels(site):
    """Top-level import names present in a site dir (packages, modules, extension modules)."""
    names = set()
    for e in os.listdir(site):
        if e.endswith((".dist-info", ".egg-info", ".data")) or e in ("bin", "__pycache__"):
            continue
        p = os.path.join(site, e)
        if os.path.isdir(p):
            names.add(e)
            if e in NAMESPACES:
                names.update(f"{e}.{x.split('.', 1)[0]}" for x in os.listdir(p))
        elif e.endswith(".py"):
            names.add(e[:-3])
        elif e.endswith(".so"):
            names.add(e.split(".", 1)[0])
    return names


def find_module(mod, sites):
    rel = mod.replace(".", "/")
    for s in sites:
        for cand in (f"{rel}/__init__.py", f"{rel}.py"):
            p = os.path.join(s, cand)
            if os.path.isfile(p):
                return p
        if os.path.isdir(os.path.join(s, rel)):  # namespace package
            return os.path.join(s, rel)
        d, base = os.path.split(os.path.join(s, rel))
        if os.path.isdir(d) and any(f.startswith(base + ".") and f.endswith(".so") for f in os.listdir(d)):
            return "<extension>"
    return None


_BOUND = {}


def bound_names(pkg, sites):
    """Names a package's __init__ binds at module level (imports, defs, classes, assignments)."""
    if pkg not in _BOUND:
        names, path = set(), find_module(pkg, sites)
        if path and path.endswith("__init__.py"):
            try:
                tree = ast.parse(open(path, encoding="utf-8", errors="replace").read())
            except SyntaxError:
                tree = ast.Module(body=[], type_ignores=[])
            for st in ast.walk(tree):
                if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    names.add(st.name)
                elif isinstance(st, ast.Import):
                    names.update((al.asname or al.name).split(".")[0] for al in st.names)
                elif isinstance(st, ast.ImportFrom):  # `from . import sub` / `from pkg import sub`
                    if not ((st.level == 1 and not st.module) or (st.level == 0 and st.module == pkg)):
                        names.update(al.asname or al.name for al in st.names)
                elif isinstance(st, (ast.Assign, ast.AnnAssign)):
                    for t in (st.targets if isinstance(st, ast.Assign) else [st.target]):
                        names.update(n.id for n in ast.walk(t) if isinstance(n, ast.Name))
        _BOUND[pkg] = names
    return _BOUND[pkg]


def catches_import_error(handlers):
    for h in handlers:
        if h.type is None:
            return True
        names = [n for n in ast.walk(h.type) if isinstance(n, (ast.Name, ast.Attribute))]
        if any(getattr(n, "id", getattr(n, "attr", "")) in ("ImportError", "ModuleNotFoundError",
                                                            "Exception", "BaseException") for n in names):
            return True
    return False


UNPARSED = []


def imports_of(path, modname):
    """Yield (kind, absolute_module, names, lineno) for each import statement in the file."""
    src = open(path, encoding="utf-8", errors="replace").read()
    try:
        tree = ast.parse(src)
    except SyntaxError as e:  # newer syntax than this Python parses: its imports are not seen
        UNPARSED.append(f"{modname}: {e}")
        return
    is_pkg = path.endswith("__init__.py")
    pkg = modname if is_pkg else modname.rpartition(".")[0]

    def resolve(node):
        if isinstance(node, ast.Import):
            return [(a.name, []) for a in node.names]
        base = node.module or ""
        if node.level:
            parts = pkg.split(".")
            parts = parts[: len(parts) - (node.level - 1)]
            base = ".".join(parts + ([base] if base else []))
        return [(base, [a.name for a in node.names])]

    def walk(body, kind):
        for st in body:
            if isinstance(st, (ast.Import, ast.ImportFrom)):
                for m, names in resolve(st):
                    yield kind, m, names, st.lineno
            elif isinstance(st, ast.If):
                guard = " ".join((ast.get_source_segment(src, st.test) or "").split())
                names = {getattr(n, "id", getattr(n, "attr", None)) for n in ast.walk(st.test)
                         if isinstance(n, (ast.Name, ast.Attribute))}
                negated = isinstance(st.test, ast.UnaryOp) and isinstance(st.test.op, ast.Not)
                if names and names <= CUDA_TRUE:  # true on the H200: as if at module level
                    yield from walk(st.orelse if negated else st.body, kind)
                elif SKIP_GUARD.search(guard) and "cuda" not in guard:  # another platform
                    yield from walk(st.body if negated else st.orelse, kind)
                else:  # an availability / env / version check: reported with its guard
                    k = kind if kind != "unconditional" else f"guarded by `{guard[:60]}`"
                    yield from walk(st.body, k)
                    yield from walk(st.orelse, k)
            elif isinstance(st, ast.Try):
                k = "optional" if catches_import_error(st.handlers) else kind
                yield from walk(st.body, k)
                for h in st.handlers:
                    yield from walk(h.body, kind if kind != "unconditional" else "optional")
                yield from walk(st.orelse, k)
                yield from walk(st.finalbody, kind)
            elif isinstance(st, ast.With):  # `with contextlib.suppress(ImportError):` = optional
                items = " ".join(ast.get_source_segment(src, i.context_expr) or "" for i in st.items)
                sup = "suppress(" in items and re.search(r"ImportError|Exception", items)
                yield from walk(st.body, "optional" if sup and kind == "unconditional" else kind)
            elif isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                for n in ast.walk(st):
                    if isinstance(n, (ast.Import, ast.ImportFrom)):
                        for m, names in resolve(n):
                            yield "lazy", m, names, n.lineno

    yield from walk(tree.body, "unconditional")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--site", action="append", required=True, help="unpacked bundle dir(s)")
    ap.add_argument("--image", default=os.path.join(os.path.dirname(__file__), "image_packages.txt"))
    ap.add_argument("--follow", default="sglang,sgl_kernel", help="packages whose imports are followed")
    ap.add_argument("--entry", action="append", help="entry modules (default: the engine set)")
    ap.add_argument("--lazy", action="store_true",
                    help="also follow lazy (function-level) imports of followed packages and list theirs")
    ap.add_argument("--why", action="append", default=[], help="print the import chain to this module")
    a = ap.parse_args()

    follow = set(a.follow.split(","))
    image = set()
    for line in open(a.image):
        line = line.split("#", 1)[0].strip()
        if line:
            image.update(dist_import_names(line))
    bundled = set().union(*(site_top_levels(s) for s in a.site))
    stdlib = set(sys.stdlib_module_names) | {"__future__"}

    def rank(kind):
        return {"unconditional": 0, "optional": 2, "lazy": 3}.get(kind, 1)  # 1: "guarded by ..."

    entries = a.entry or ENTRIES
    # a module reached only through a guarded or optional import passes that on to its own imports
    seen = {}                                   # module -> kind it was reached with (strongest)
    queue = [(e, "unconditional") for e in entries]
    parent = {e: None for e in entries}         # module -> "importer:line" that reached it
    missing = defaultdict(lambda: defaultdict(set))  # top -> kind -> {where}
    internal_missing = defaultdict(set)
    while queue:
        mod, via = queue.pop(0)
        if mod in seen and rank(seen[mod]) <= rank(via):
            continue
        seen[mod] = via
        path = find_module(mod, a.site)
        if path is None or path == "<extension>" or os.path.isdir(path):
            continue
        for kind, m, names, line in imports_of(path, mod):
            if kind != "lazy" and rank(via) > rank(kind):
                kind = via
            top = m.split(".")[0]
            key = import_key(m if names == [] or top not in NAMESPACES or "." in m else f"{m}.{names[0]}")
            where = f"{mod}:{line}"
            if top in follow:
                if kind == "lazy" and not a.lazy:
                    continue
                if find_module(m, a.site) is None:
                    if kind == "unconditional":
                        internal_missing[m].add(where)
                    continue
                bound = bound_names(m, a.site)  # `from pkg import x`: x is a submodule only if
                new = [m] + [f"{m}.{n}" for n in names  # pkg/__init__ does not bind x itself
                             if n != "*" and n not in bound and find_module(f"{m}.{n}", a.site) is not None]
                parts = m.split(".")  # parent packages run their __init__ first
                new += [".".join(parts[:i]) for i in range(1, len(parts))]
                for x in new:
                    if x not in seen or rank(seen[x]) > rank(kind):
                        parent[x] = where
                        queue.append((x, kind))
            elif top and top not in stdlib and key not in image and key not in bundled:
                missing[key][kind].add(where)

    for e in entries:
        if not find_module(e, a.site):
            print(f"import_closure: WARNING: entry {e} is not in the site (renamed in this release?)")
    for m in a.why:
        chain, x = [], m
        while parent.get(x) and len(chain) < 40:
            chain.append(parent[x])
            x = parent[x].split(":")[0]
        print(f"why {m} ({seen.get(m, 'not reached')}): " + " <- ".join(chain or ["an entry"]))
    print(f"import_closure: {len([k for k in seen if find_module(k, a.site)])} modules of "
          f"{sorted(follow)} reached from {len(entries)} entries")
    report = defaultdict(dict)  # category -> top -> [where]; each top under its strongest kind
    for top, kinds in missing.items():
        best = min(kinds, key=rank)
        cat = ["unconditional", "guarded", "optional", "lazy"][rank(best)]
        ws = set()
        for k, w in kinds.items():
            if k == best or (cat == "guarded" and k.startswith("guarded")):
                ws.update(f"{x} [{k[11:]}]" if k.startswith("guarded") else x for x in w)
        report[cat][top] = sorted(ws)
    labels = {"unconditional": "NEEDED (imported at module level, provided by neither image nor bundle)",
              "guarded": "guarded (module-level `if` on availability/env; check the guard is false there)",
              "optional": "optional (module-level try/except ImportError; missing is tolerated)",
              "lazy": "lazy (inside functions of reached modules; only when called)"}
    for kind in ("unconditional", "guarded", "optional") + (("lazy",) if a.lazy else ()):
        tops = report.get(kind, {})
        print(f"  {labels[kind]}: {len(tops)}")
        for top in sorted(tops):
            w = tops[top]
            print(f"    {top:22s} {'; '.join(w[:2])}{' ...+%d' % (len(w) - 2) if len(w) > 2 else ''}")
    if UNPARSED:
        print(f"  modules this Python could not parse (imports unknown): {len(UNPARSED)}")
        for u in UNPARSED:
            print(f"    {u}")
    if internal_missing:  # e.g. a stripped file (STRIPPED.md) still imported somewhere
        print(f"  internal modules imported but absent from the bundle (stripped?): {len(internal_missing)}")
        for m in sorted(internal_missing):
            print(f"    {m:28s} {', '.join(sorted(internal_missing[m])[:3])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
