"""Random `surgery validate` runs on real configs, counted for tracebacks (issue 53: 0 tracebacks).

    python bench/validate_random.py [N] [SEED]       # default 600 runs, seed 1
Real configs from tests/data/configs, tests/verdicts/configs and ../shared/configs, any recipe, five
releases, the serving flags the release rules read (--pp, --tp, odd cache dtypes, a long --max-model-len).
A run is bad when it raises, or exits other than 0 / 1 / 2.
"""
from __future__ import annotations

import contextlib
import io
import random
import sys
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from surgery.cli import main  # noqa: E402

RECIPES = ["eagle3", "eagle", "mtp", "deepseek-mtp", "dflash", "dspark", "draft-model", "gemma4-mtp", "peagle", "mimo-v2-mtp"]
FLAGS = [[], ["--pp", "2"], ["--tp", "3"], ["--kv-cache-dtype", "octave_k3v4"], ["--kv-cache-dtype", "float16"],
         ["--max-model-len", "1000000"], ["--pp", "4", "--tp", "2"]]
RELEASES = ["0.26.0", "0.29.0", "0.32.0", "0.33.0", "0.34.0"]


def main_(n: int, seed: int) -> int:
    rnd = random.Random(seed)
    cfgs = sorted(str(p) for pattern in ("tests/data/configs/*.json", "tests/data/configs/*/*.json",
                                         "tests/verdicts/configs/*.json") for p in ROOT.glob(pattern))
    cfgs += sorted(str(p) for p in (ROOT.parent / "shared" / "configs").glob("*/*.json"))
    bad = 0
    for _ in range(n):
        t = rnd.choice(cfgs)
        d = rnd.choice(cfgs + [t] * 20)
        args = ["validate", rnd.choice(RECIPES), "--target", t, "--draft", d, "--engine-version", rnd.choice(RELEASES),
                *rnd.choice(FLAGS), "--json"]
        err = io.StringIO()
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
                rc = main(args)
        except SystemExit as exc:
            rc = exc.code
        except Exception:  # noqa: BLE001 - what this counts
            bad += 1
            print("TRACEBACK", args)
            traceback.print_exc(limit=4)
            continue
        if rc not in (0, 1, 2) or "Traceback" in err.getvalue():
            bad += 1
            print("BAD", rc, args)
    print(f"{n} runs, {bad} bad")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main_(int(sys.argv[1]) if len(sys.argv) > 1 else 600, int(sys.argv[2]) if len(sys.argv) > 2 else 1))
