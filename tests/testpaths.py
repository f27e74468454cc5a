"""Paths the tests share. A module of its own (not conftest): tests/vllm has its own conftest.py,
and `from conftest import ...` would depend on which conftest pytest imported first."""
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "tests" / "data" / "configs"
E2B = CONFIGS / "gemma-4-E2B-it.json"
E2B_ASSISTANT = CONFIGS / "gemma-4-E2B-it-assistant.json"
GEMMA_RECIPE = ROOT / "recipes" / "gemma4-mtp.yaml"
