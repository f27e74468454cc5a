"""How many valid verdicts on the verdict corpus carry a warning, per judged release (issue 53: at most
10 % of valid verdicts on published pairs, unless the warning names that pair's real risk).

    python bench/verdict_warnings.py [RELEASE ...]        # default: 0.32.0 0.34.0
Runs every `validate` case of tests/verdicts/cases.yaml in-process with `--engine-version RELEASE --json`.
"""
from __future__ import annotations

import contextlib
import io
import json
import sys
from collections import Counter
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from surgery.cli import main  # noqa: E402


def count(release: str) -> dict:
    cases = yaml.safe_load((ROOT / "tests" / "verdicts" / "cases.yaml").read_text(encoding="utf-8"))
    valid, warned, codes = 0, [], Counter()
    for c in cases:
        if c["command"] != "validate" or c.get("drop"):
            continue
        args = ["validate", c["recipe"]] + (["--target", str(ROOT / c["target"])] if c.get("target") else [])
        args += ["--draft", str(ROOT / c["draft"]), *[str(a) for a in (c.get("args") or [])],
                 "--engine-version", release, "--json"]
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            rc = main(args)
        if rc != 0:
            continue
        valid += 1
        w = sorted({d["code"] for d in json.loads(out.getvalue())["diagnostics"] if d["severity"] == "warning"})
        if w:
            warned.append((c["id"], w))
            codes.update(w)
    return {"release": release, "valid": valid, "with_warnings": len(warned),
            "percent": round(100 * len(warned) / max(valid, 1), 1), "codes": dict(codes.most_common()),
            "cases": warned}


if __name__ == "__main__":
    for rel in sys.argv[1:] or ["0.32.0", "0.34.0"]:
        r = count(rel)
        print(f"vLLM {rel}: {r['with_warnings']} of {r['valid']} valid verdicts carry a warning ({r['percent']} %): "
              f"{r['codes']}")
        for case, w in r["cases"]:
            print(f"    {case}: {' '.join(w)}")
