"""SGLang's start-up and load-time limits, read from one release's wheel (issue 65): where each rule of
surgery/data/sglang_limits.yaml stands in the release's own code, and the lists the rules read (the
parser's kv-cache dtype and attention-backend choices, the registered model classes, the classes that
assert they are the only pipeline stage). Called by tools/gen_engine_releases.py; the result is
surgery/data/releases/sglang.json `start` per release. tests/sglang_oracle/ holds the 0.5.23 lists to
the release's imported parser and registry.
"""
from __future__ import annotations

import ast
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
SRT = "sglang/srt"


def _parse(tree, rel: str) -> ast.Module | None:
    """The file's module, or None: a file with a byte-order mark or a syntax this Python does not read is
    read as text (a BOM is dropped) rather than stopping the tool."""
    text = tree.read(rel)
    if text is None:
        return None
    try:
        return ast.parse(text.lstrip("\ufeff"))
    except SyntaxError:
        return None


def _rules() -> dict:
    return yaml.safe_load((ROOT / "surgery" / "data" / "sglang_limits.yaml").read_text(encoding="utf-8"))["rules"]


def _string_list(node: ast.AST) -> list[str] | None:
    if isinstance(node, (ast.List, ast.Tuple)) and all(isinstance(e, ast.Constant) and isinstance(e.value, str)
                                                        for e in node.elts):
        return [e.value for e in node.elts]
    return None


def _module_lists(tree) -> dict[str, list[str]]:
    """Module-level `NAME = [...strings...]` of the files choices can be defined in."""
    out: dict[str, list[str]] = {}
    for rel in tree.files_under(f"{SRT}/arg_groups") + [f"{SRT}/server_args.py"]:
        module = _parse(tree, rel)
        for node in (module.body if module else []):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                found = _string_list(node.value)
                if found is not None:
                    out.setdefault(node.targets[0].id, found)
    return out


def _choices(call: ast.Call, lists: dict[str, list[str]]) -> list[str] | None:
    for kw in call.keywords:
        if kw.arg == "choices":
            if isinstance(kw.value, ast.Name):
                return lists.get(kw.value.id)
            return _string_list(kw.value)
    return None


def parser_choices(tree, dest: str) -> list[str] | None:
    """The `choices=` of `--<dest>`: an `add_argument("--kv-cache-dtype", ..., choices=...)` (0.5.16-0.5.19,
    server_args.py) or a field `kv_cache_dtype: A[str, Arg(..., choices=...)]` (0.5.20+, arg_groups/fields/)."""
    lists = _module_lists(tree)
    flag = "--" + dest.replace("_", "-")
    for rel in tree.files_under(f"{SRT}/arg_groups") + [f"{SRT}/server_args.py"]:
        module = _parse(tree, rel)
        if module is None:
            continue
        for node in ast.walk(module):
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == dest:
                for call in (n for n in ast.walk(node.annotation) if isinstance(n, ast.Call)):
                    found = _choices(call, lists)
                    if found is not None:
                        return found
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument" and node.args \
                    and isinstance(node.args[0], ast.Constant) and node.args[0].value == flag:
                found = _choices(node, lists)
                if found is not None:
                    return found
    return None


def architectures(tree) -> list[str]:
    """Every class a models/*.py file registers (`EntryClass = X` or `[X, Y]`), as the registry imports them."""
    out: set[str] = set()
    for rel in tree.files_under(f"{SRT}/models"):
        module = _parse(tree, rel)
        for node in (module.body if module else []):
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "EntryClass"
                                                    for t in node.targets):
                values = node.value.elts if isinstance(node.value, (ast.List, ast.Tuple)) else [node.value]
                out |= {v.id for v in values if isinstance(v, ast.Name)}
    return sorted(out)


def single_stage_classes(tree, says: str) -> list[str]:
    """Registered classes whose own file asserts the model is the first and the last pipeline stage."""
    out = []
    for rel in tree.files_under(f"{SRT}/models"):
        text = tree.read(rel) or ""
        if says not in text:
            continue
        module = _parse(tree, rel)
        for node in (module.body if module else []):
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "EntryClass"
                                                    for t in node.targets):
                values = node.value.elts if isinstance(node.value, (ast.List, ast.Tuple)) else [node.value]
                out += [v.id for v in values if isinstance(v, ast.Name)]
    return sorted(set(out))


def where(tree, says: str, first: str | None = None) -> str | None:
    """"path:line" of the first line holding `says` (in `first` if it does, else anywhere in the sglang
    package), or None where the release has no such text."""
    for rel in ([first] if first else []) + tree.files_under("sglang"):
        text = tree.read(rel) or ""
        if says in text:
            line = text[:text.index(says)].count("\n") + 1
            return f"{rel}:{line}"
    return None


def in_file(tree, rel: str, says: str) -> str | None:
    """"path:line" of `says` in that one file, or None where the release's file lacks it (or the file)."""
    text = tree.read(rel) or ""
    if says not in text:
        return None
    return f"{rel}:{text[:text.index(says)].count(chr(10)) + 1}"


def catalogue4_facts(tree) -> dict[str, dict[str, str | None]]:
    """Where each fix of surgery/data/catalogue4.yaml `sglang:` stands in this release (None: not there)."""
    rows = yaml.safe_load((ROOT / "surgery" / "data" / "catalogue4.yaml").read_text(encoding="utf-8"))["sglang"]
    return {name: {fix: in_file(tree, at["file"], at["says"]) for fix, at in row["fixed_by"].items()}
            for name, row in rows.items()}


def start_facts(tree) -> dict:
    rules = _rules()
    limits = {}
    for name, rule in rules.items():
        if rule["stage"] in ("argparse", "silent"):
            continue
        limits[name] = where(tree, rule["says"], rule.get("file"))
    native = yaml.safe_load((ROOT / "surgery" / "data" / "sglang_limits.yaml").read_text(encoding="utf-8"))["native"]
    for name, row in native.items():
        limits[name] = where(tree, row["says"])
    return {"kv_cache_dtypes": parser_choices(tree, "kv_cache_dtype"),
            "attention_backends": parser_choices(tree, "attention_backend"),
            "architectures": architectures(tree),
            "single_stage_architectures": single_stage_classes(tree, rules["single_stage_target"]["says"]),
            "limits": limits,
            "catalogue4": catalogue4_facts(tree)}
