"""Paths the tests share. A module of its own (not conftest): tests/vllm has its own conftest.py,
and `from conftest import ...` would depend on which conftest pytest imported first."""
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "tests" / "data" / "configs"
E2B = CONFIGS / "gemma-4-E2B-it.json"
E2B_ASSISTANT = CONFIGS / "gemma-4-E2B-it-assistant.json"
GEMMA_RECIPE = ROOT / "recipes" / "gemma4-mtp.yaml"

# vLLM's release wheels, read as the world's truth (never installed): every release under .cache/wheels/vllm
# (tools/gen_engine_releases.py fetches them), and CI's two under .cache/oracles/wheels (scripts/oracle_venv.sh)
VLLM_WHEEL_DIRS = (ROOT / ".cache" / "wheels" / "vllm", ROOT / ".cache" / "oracles" / "wheels")
VLLM_WHEELS_WHERE = ".cache/wheels/vllm or .cache/oracles/wheels"


def vllm_wheels(version: str = "*") -> list[Path]:
    """vLLM `version`'s wheel files (all releases by default), one per file name, sorted by name."""
    found = {p.name: p for d in reversed(VLLM_WHEEL_DIRS) if d.is_dir() for p in d.glob(f"vllm-{version}-*.whl")}
    return [found[n] for n in sorted(found)]
