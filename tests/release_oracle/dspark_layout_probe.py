"""Run inside one vLLM release's own environment (an oracle venv): for each DSpark draft folder on stdin
(JSON: {"target": ..., "cases": [{"id", "draft"}]}), the block layout the release's DSparkSpeculator would
run, computed by the release's own code on the draft config its own config layer built:

- `create_engine_config()` (method dspark, load_format dummy) builds the speculative config;
- the right-hand side of `self.sample_from_anchor = ...` in DSparkSpeculator.__init__ (the installed
  release's source, parsed, not imported: the speculator module needs a GPU) is evaluated with `self`
  holding that speculative config's draft_model_config;
- where the release has it (0.34), VllmConfig.num_lookahead_tokens: N for anchor-first, N + 1 for fill-in
  (v1/worker/gpu/spec_decode/dspark/config.py), the config layer's own reading of the same key.

Imports nothing of surgery. One JSON line on stdout: {id: {...}}.
"""
from __future__ import annotations

import ast
import importlib.util
import json
import sys
import types
from pathlib import Path

SPECULATOR = "v1/worker/gpu/spec_decode/dspark/speculator.py"


def _layout_expression() -> tuple[ast.Expression, str]:
    root = Path(importlib.util.find_spec("vllm").submodule_search_locations[0])
    text = (root / SPECULATOR).read_text(encoding="utf-8")
    cls = next(n for n in ast.parse(text).body if isinstance(n, ast.ClassDef) and n.name == "DSparkSpeculator")
    for node in ast.walk(cls):
        if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "self.sample_from_anchor":
            return ast.Expression(node.value), f"vllm/{SPECULATOR}:{node.lineno}"
    raise LookupError("DSparkSpeculator.__init__ assigns no self.sample_from_anchor")


def main() -> int:
    payload = json.loads(sys.stdin.read())
    from vllm.engine.arg_utils import EngineArgs

    expr, at = _layout_expression()
    code = compile(expr, at, "eval")
    out = {}
    for case in payload["cases"]:
        spec = {"method": "dspark", "model": case["draft"], "num_speculative_tokens": case.get("k", 3)}
        args = EngineArgs(model=payload["target"], speculative_config=spec, load_format="dummy",
                          skip_tokenizer_init=True, enforce_eager=True)
        try:
            config = args.create_engine_config()
        except Exception as exc:  # noqa: BLE001 - a refusal is the release's answer
            out[case["id"]] = {"refused": f"{type(exc).__name__}: {str(exc)[:600]}"}
            continue
        sc = config.speculative_config
        me = types.SimpleNamespace(draft_model_config=sc.draft_model_config)
        row = {"sample_from_anchor": bool(eval(code, {"getattr": getattr, "__builtins__": {}}, {"self": me})),
               "at": at, "num_speculative_tokens": sc.num_speculative_tokens}
        try:
            row["num_lookahead_tokens"] = config.num_lookahead_tokens
        except AttributeError:
            pass
        out[case["id"]] = row
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
