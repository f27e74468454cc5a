"""Write surgery/data/releases/{vllm,sglang}.json: per-release engine knowledge read from each release's
own wheel (tools/releasefacts.py), never from memory.

    python tools/gen_engine_releases.py            # the wheels in .cache/wheels/ (downloaded when missing)
    python tools/gen_engine_releases.py --check    # compare with the committed data, exit 1 on a difference

Wheels come from `pip download --no-deps <engine>==<version>` into .cache/wheels/<engine>/ (about 300 MB
each for vLLM; nothing is installed). The releases covered are RELEASES below; a new release is one
line there and one run of this tool, then `python tools/gen_docs.py` for the matrix in docs/releases.md.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

from releasefacts import SourceTree, sglang_facts, vllm_facts  # noqa: E402
from sglang_limit_facts import start_facts  # noqa: E402

RELEASES = {
    "vllm": ["0.25.0", "0.25.1", "0.26.0", "0.27.0", "0.27.1", "0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0",
             "0.33.0", "0.34.0"],
    "sglang": ["0.5.16", "0.5.17", "0.5.18", "0.5.19", "0.5.20", "0.5.21", "0.5.22", "0.5.23"],
}
WHEELS = ROOT / ".cache" / "wheels"


def vllm_hook_targets() -> tuple[dict, dict]:
    """The plugin's own hook lists (surgery.vllm.hooks), and the method each list wraps."""
    from surgery.vllm import hooks

    targets = {"load_model": list(hooks.LOAD_MODEL_TARGETS), "runner": list(hooks.RUNNER_TARGETS),
               "worker": list(hooks.WORKER_TARGETS), "dummy_loader": list(hooks.DUMMY_LOADER_TARGETS)}
    wrapped = {"load_model": "load_model", "runner": "initialize_kv_cache", "worker": "compile_or_warm_up_model",
               "dummy_loader": "load_weights"}
    return targets, wrapped


def sglang_hook_points() -> list[tuple[str, str, str]]:
    from surgery.sglang import hooks

    return [hooks.RUNNER_POINT, hooks.LOADER_POINT, *[tuple(p) for p in hooks.draft_load_points()]]


def wheel(engine: str, version: str) -> Path:
    folder = WHEELS / engine
    found = sorted(folder.glob(f"{engine}-{version}-*.whl"))
    if not found:
        folder.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(folder),
                        f"{engine}=={version}"], check=True)
        found = sorted(folder.glob(f"{engine}-{version}-*.whl"))
    return found[0]


def facts_of(engine: str, version: str, tree: SourceTree) -> dict:
    if engine == "vllm":
        targets, wrapped = vllm_hook_targets()
        return vllm_facts(tree, version, targets, wrapped)
    # the start-up and load-time limits (surgery/data/sglang_limits.yaml) and the lists they read
    return {**sglang_facts(tree, version, sglang_hook_points()), "start": start_facts(tree)}


def generate(engine: str) -> dict:
    releases = {v: facts_of(engine, v, SourceTree(wheel(engine, v))) for v in RELEASES[engine]}
    return {"engine": engine,
            "generated_by": "tools/gen_engine_releases.py from each release's wheel (pip download --no-deps)",
            "releases": releases}


def data_path(engine: str) -> Path:
    return ROOT / "surgery" / "data" / "releases" / f"{engine}.json"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--engine", choices=sorted(RELEASES), action="append")
    args = ap.parse_args()
    bad = 0
    for engine in args.engine or sorted(RELEASES):
        data = generate(engine)
        text = json.dumps(data, indent=1, sort_keys=True) + "\n"
        path = data_path(engine)
        if args.check:
            if not path.is_file() or path.read_text() != text:
                print(f"{path.relative_to(ROOT)} differs from the wheels: run python tools/gen_engine_releases.py")
                bad = 1
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(f"wrote {path.relative_to(ROOT)} ({len(data['releases'])} releases)")
    return bad


if __name__ == "__main__":
    sys.exit(main())
