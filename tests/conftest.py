import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from testpaths import CONFIGS, E2B, E2B_ASSISTANT, GEMMA_RECIPE, ROOT  # noqa: E402,F401


@pytest.fixture
def run_cli(capsys):
    """Run `surgery ...` in-process; returns (exit_code, stdout, stderr)."""
    from surgery.cli import main

    def run(*args):
        code = main([str(a) for a in args])
        out, err = capsys.readouterr()
        return code, out, err

    return run
