"""The kernel's KV-routing check runs the target's forward under the installed release's cache keyword
(surgery/live/kvrouting.py ``published_kv``): transformers 5.25 renamed ``past_key_values`` to ``cache`` and
warns (FutureWarning) on every call that still uses the old name; a release before the rename takes ``cache``
into ``**kwargs`` and leaves the cache we passed empty. Both wrong outcomes are caught here, on whichever
release is installed (tests/hf/test_transformers_range.py runs tests/hf on every release CI runs; run this
module there too: ``.cache/oracles/hf-transformers-5.25.0/bin/python -m pytest tests/live``)."""
from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from surgery.hf import compat  # noqa: E402
from surgery.hf.loader import load_pair  # noqa: E402
from surgery.live import hf as live_hf  # noqa: E402
from surgery.live import kvrouting  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")

KEYWORDS = ("past_key_values", "cache")


@pytest.fixture(scope="module")
def pair(dirs):
    return load_pair(*dirs)  # (target, draft), untouched


def _published(target) -> tuple[list[str], dict, object]:
    """(what went wrong, states, cache) of ``published_kv`` on ``target``: a FutureWarning it raised, a
    cache left without the unshared layers' K/V, a published default that is not the cache's own tensor."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        states, cache = kvrouting.published_kv(target)
    problems = [f"{w.category.__name__}: {w.message}" for w in caught if issubclass(w.category, FutureWarning)]
    for kind, j in kvrouting.default_kv_sources(target.config).items():
        if j >= len(cache.layers) or cache.layers[j].keys is None:
            problems.append(f"the cache passed has no K/V for target layer {j} (the forward did not take it)")
        elif states[kind][0] is not cache.layers[j].keys:
            problems.append(f"{kind!r} is not target layer {j}'s cache tensor")
    return problems, states, cache


def test_published_kv_passes_the_cache_under_this_releases_keyword(pair):
    target, _ = pair
    problems, _, cache = _published(target)
    assert problems == [], f"transformers {compat.release()}: {problems}"
    assert len(cache.layers) == kvrouting.first_kv_shared_layer(target.config)


def test_the_other_keyword_is_caught_on_this_release(pair, monkeypatch):
    """The check above has teeth on the installed release: the other release's keyword fails it (5.25: the
    FutureWarning; 5.19: an empty cache)."""
    target, _ = pair
    right = live_hf.cache_kwarg(target)
    other = next(k for k in KEYWORDS if k != right)
    monkeypatch.setattr(kvrouting, "cache_kwarg", lambda model: other)
    problems, _, _ = _published(target)
    assert problems, f"transformers {compat.release()} took {other!r} silently: the test above could not tell"


def test_wiring_check_on_the_untouched_pair_warns_nothing(pair):
    """Every draft layer of the untouched pair reads transformers' default layer of its type; the check that
    proves it (``reads_target_layer``, one target forward per call) raises no FutureWarning."""
    target, draft = pair
    defaults = kvrouting.default_kv_sources(target.config)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        for attn in kvrouting.draft_attentions(draft):
            ok, why = kvrouting.reads_target_layer(attn, target, defaults[attn.layer_type])
            assert ok, why


def test_one_home_for_the_cache_keyword():
    """hf/compat.py lists it among the internals the HF side relies on; live/hf.py, below both, defines it."""
    assert compat.cache_kwarg is live_hf.cache_kwarg is kvrouting.cache_kwarg
