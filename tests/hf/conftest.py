"""Fixtures the HF test modules share: the built-in tiny Gemma 4 pair (``dirs``, from tests/conftest.py) loaded
and wired by the gemma4-mtp recipe.

Nothing heavy is imported at the top: test_tiny_pair_cache.py and test_transformers_range.py run without torch
or transformers, and the modules that need them skip themselves (``pytest.importorskip``) before any fixture
here is asked for.
"""
from __future__ import annotations

import pytest

from testpaths import GEMMA_RECIPE


@pytest.fixture(scope="module")
def wired(dirs):
    """(target, draft) of the tiny pair, freshly loaded and wired by ``surgery.apply`` with the gemma4-mtp plan
    (engine hf), as a user would have them before calling ``generate``.

    Why: test_hf_compat.py, test_hf_draftgraph.py and test_hf_verifygraph.py each built this same pair in a
    module fixture of their own; it is one fixture here.
    Scope: module, as each of those modules had it, so each module gets its own pair, built once for all its
    tests. Not session: the models carry state beyond the attributes the tests monkeypatch (undone after each
    test): surgery.hf.draftgraph and surgery.hf.verifygraph keep per-model runners (``_RUNNERS``, keyed by the
    model) that the reuse and fallback tests count and clear, so one module's runners must not reach another's.
    Not per test: within a module no test changes the models except through ``monkeypatch``, and a test that
    counts runners clears the cache first.
    test_hf_generate.py keeps a ``wired`` of its own (it also checks the plan and ``surgery.verify``), which
    overrides this one in that module; tests that change a pair for good (test_hf_apply.py's ``fresh``) load
    their own per test."""
    import surgery
    from surgery import Runtime, load_recipe, read_facts, resolve
    from surgery.hf.loader import load_pair

    target_dir, draft_dir = dirs
    plan = resolve(load_recipe(str(GEMMA_RECIPE)), read_facts(draft_dir), read_facts(target_dir), Runtime(engine="hf"))
    target, draft = load_pair(target_dir, draft_dir)
    surgery.apply(plan, draft, target)
    return target, draft
