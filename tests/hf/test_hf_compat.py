"""Issue 69: the transformers internals the HF side relies on (surgery/hf/compat.py). A release that moved one
(the shared-KV states contract, ``DynamicCache.crop``, the Gemma 4 / assistant classes, the assistant's
candidate generator) is refused with SRG436 naming the release, before anything is decoded: never a wrong
answer. Each moved internal is simulated on the installed release; the same tests run on every release CI
runs (tests/hf/test_transformers_range.py)."""
from __future__ import annotations

import contextlib
import io
import warnings
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import surgery  # noqa: E402
import surgery.hf  # noqa: E402
from surgery import SurgeryError  # noqa: E402
from surgery.hf import compat  # noqa: E402
from surgery.hf.loader import load_pair  # noqa: E402
from surgery.pairs import DEFAULT_PROMPTS  # noqa: E402
from surgery.tinymodels import bytevocab  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "gemma4-mtp.yaml"
SPEC = surgery.hf.speculative_decoding


def _ids():
    return torch.tensor([bytevocab.encode(DEFAULT_PROMPTS[0])])


def _srg436(excinfo) -> str:
    diags = excinfo.value.diagnostics
    assert [d.code for d in diags] == ["SRG436"], diags
    message = diags[0].message
    assert f"transformers {transformers.__version__}" in message  # the release is named
    return message


def _decode(target, draft, **kw):
    return target.generate(_ids(), assistant_model=draft, custom_generate=SPEC, do_sample=False, max_new_tokens=6,
                           num_assistant_tokens=3, **kw)


def test_decodes_without_a_deprecation_warning_on_this_release(wired):
    """The cache keyword follows the release (5.25 renamed past_key_values to cache, warning per call)."""
    target, draft = wired
    assert compat.cache_kwarg(target) in ("cache", "past_key_values")
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        out = _decode(target, draft)
        static = _decode(target, draft, verify_mode="static")
    assert torch.equal(out, static) and out.shape[1] == _ids().shape[1] + 6


def test_no_dynamic_cache_crop_is_srg436(wired, monkeypatch):
    target, draft = wired
    monkeypatch.setattr(transformers.DynamicCache, "crop", None)  # (the method lives on the Cache base class)
    with pytest.raises(SurgeryError) as exc:
        _decode(target, draft)
    assert "DynamicCache has no crop()" in _srg436(exc)


@pytest.mark.parametrize("attr", compat.ATTENTION_ATTRS)
@pytest.mark.parametrize("role", ["target", "draft"])
def test_moved_shared_kv_attributes_are_srg436(wired, monkeypatch, attr, role):
    target, draft = wired
    model = target if role == "target" else draft
    monkeypatch.delattr(model.model.layers[0].self_attn, attr)
    with pytest.raises(SurgeryError) as exc:
        _decode(target, draft)
    message = _srg436(exc)
    assert f"the {role}'s layer 0 attention has no {attr}" in message and "shared-KV states contract" in message


def test_moved_gemma4_classes_are_srg436_at_load(dirs, monkeypatch):
    """A release that no longer exports the Gemma 4 classes at the top level (5.25 moved the assistant into
    its own model folder and still exports it): `transformers` replaced by a module without them."""
    import sys
    import types

    class Without(types.ModuleType):
        def __getattr__(self, name):
            if name.startswith("Gemma4"):
                raise AttributeError(f"module 'transformers' has no attribute {name!r}")
            return getattr(transformers, name)

    monkeypatch.setitem(sys.modules, "transformers", Without("transformers"))
    with pytest.raises(SurgeryError) as exc:
        load_pair(*dirs)
    assert "the Gemma 4 classes moved" in _srg436(exc)


def test_moved_candidate_generator_is_srg436_for_the_assisted_counts(wired, monkeypatch):
    from surgery.hf.standalone import assisted_check

    target, draft = wired
    monkeypatch.setattr(target, "_get_candidate_generator", None)
    with pytest.raises(SurgeryError) as exc:
        assisted_check(target, draft, [bytevocab.encode("x = 1")], 4, 3)
    assert "candidate generator moved" in _srg436(exc)


def test_surgery_apply_says_srg436_not_a_traceback(monkeypatch):
    from surgery.cli import main

    monkeypatch.setattr(transformers.DynamicCache, "crop", None)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["apply", str(RECIPE), "--prompts", "1", "--max-new-tokens", "4", "--no-progress"])
    assert code != 0
    text = out.getvalue() + err.getvalue()
    assert "SRG436" in text and f"transformers {transformers.__version__}" in text
    assert "Traceback" not in text
