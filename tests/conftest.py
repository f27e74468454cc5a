import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "tests" / "data" / "configs"
E2B = CONFIGS / "gemma-4-E2B-it.json"
E2B_ASSISTANT = CONFIGS / "gemma-4-E2B-it-assistant.json"
GEMMA_RECIPE = ROOT / "recipes" / "gemma4-mtp.yaml"


@pytest.fixture
def run_cli(capsys):
    """Run `surgery ...` in-process; returns (exit_code, stdout, stderr)."""
    from surgery.cli import main

    def run(*args):
        code = main([str(a) for a in args])
        out, err = capsys.readouterr()
        return code, out, err

    return run
