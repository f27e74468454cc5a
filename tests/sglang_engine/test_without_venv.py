"""Without an SGLang venv (SURGERY_SGLANG_PYTHON unset), the opt-in tests that need one skip, and the
reason says how to make one. Issue 34: they failed instead, so every `pytest -m slow` on a machine
without that venv was red, and a red run that is always red stops being read."""
from __future__ import annotations

import pytest

import test_imported_oracle
import test_live_draft_load


@pytest.mark.parametrize("needs_venv", [test_live_draft_load.sglang_python,
                                        test_imported_oracle.test_imported_sglang_functions_equal_the_rules])
def test_no_sglang_venv_skips_with_the_reason(needs_venv, monkeypatch):
    monkeypatch.delenv("SURGERY_SGLANG_PYTHON", raising=False)
    with pytest.raises(pytest.skip.Exception, match="SURGERY_SGLANG_PYTHON.*scripts/sglang_venv.sh"):
        needs_venv()
