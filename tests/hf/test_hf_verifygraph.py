"""Issue 69: the target's verify step over the rewindable static cache (surgery/hf/verifygraph.py), run eagerly.

On the GPU the same ``StaticVerify.forward`` is captured as one CUDA graph per k; what the CPU checks is
everything but the capture: the cache written at a device position, the masks built from it (sliding
window and KV-shared tail included), the rewind by position instead of a crop, the padded last round, the
export of the returned cache, the per-(k, bucket) reuse, the fallbacks with their reasons, and that the
step has no host synchronisation (which a capture would refuse). Oracles: plain greedy ``generate`` for
the output, the DynamicCache path for the drafts round by round and for the K/V.
"""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import surgery  # noqa: E402
import surgery.hf  # noqa: E402
from surgery import SurgeryError  # noqa: E402
from surgery.hf import verifygraph  # noqa: E402
from surgery.pairs import DEFAULT_PROMPTS, held_out_prompts  # noqa: E402
from surgery.tinymodels import bytevocab  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SPEC = surgery.hf.speculative_decoding
LONG = "\n".join(DEFAULT_PROMPTS[:8])  # about 170 bytes: past the pair's sliding window (64)
STATIC = "static cache, eager (surgery/hf/verifygraph.py"


def _ids(text):
    return torch.tensor([bytevocab.encode(text)])


def _run(target, draft, ids, verify, max_new=24, k=3, **kw):
    out = target.generate(ids, assistant_model=draft, custom_generate=SPEC, do_sample=False, max_new_tokens=max_new,
                          num_assistant_tokens=k, verify_mode=verify, **kw)
    st = SPEC.last_stats
    return out, list(st.per_draft), st.verify_path


@pytest.mark.parametrize("k", [1, 3, 5])
@pytest.mark.parametrize("text", [DEFAULT_PROMPTS[2], held_out_prompts()[1], LONG], ids=["default", "held-out", "long"])
def test_static_verify_equals_greedy_and_drafts_what_the_dynamic_path_drafts(wired, text, k):
    target, draft = wired
    ids = _ids(text)
    assert text != LONG or ids.shape[1] > 2 * target.config.sliding_window
    greedy = target.generate(ids, max_new_tokens=24, do_sample=False)
    static, s_rounds, s_path = _run(target, draft, ids, "static", k=k)
    dynamic, d_rounds, d_path = _run(target, draft, ids, "dynamic", k=k)
    assert torch.equal(static, greedy) and torch.equal(dynamic, greedy)
    assert s_path.startswith(STATIC), s_path
    assert d_path == verifygraph.DYNAMIC
    assert s_rounds == d_rounds  # the same (drafted, accepted) round by round: same target outputs every round


@pytest.mark.parametrize("max_new", [1, 2, 7, 13])
def test_last_round_cut_by_the_length_limit_runs_the_padded_step(wired, max_new):
    """k = 5 drafts, budgets that cut the last round short: the k + 1-token step runs on padding, whose
    K/V are masked like rejected drafts'; output still greedy's, exactly max_new tokens."""
    target, draft = wired
    ids = _ids(DEFAULT_PROMPTS[1])
    greedy = target.generate(ids, max_new_tokens=max_new, do_sample=False)
    out, rounds, _path = _run(target, draft, ids, "static", max_new=max_new, k=5)
    assert torch.equal(out, greedy) and out.shape[1] == ids.shape[1] + max_new
    assert max_new < 3 or any(d < 5 for d, _a in rounds)  # a cut round was drafted


def test_rejection_rewinds_by_position_no_crop_no_new_buffers(wired, monkeypatch):
    """Rejected drafts are never cropped nor copied back: the cache's buffers are the same tensors from the
    first round to the last, and DynamicCache.crop is never called."""
    from transformers import DynamicCache

    target, draft = wired
    ids = _ids(held_out_prompts()[2])
    _run(target, draft, ids, "static", max_new=8)  # builds and checks the runner
    (runner, _), = [e for key, e in verifygraph._RUNNERS[target].items() if key[0] == 3 and not key[4]][:1]
    before = [(layer.keys.data_ptr(), layer.values.data_ptr()) for layer in runner.cache.layers if layer.is_initialized]

    def crop(*_a, **_k):
        raise AssertionError("the static path cropped a cache")

    monkeypatch.setattr(DynamicCache, "crop", crop)
    out, rounds, path = _run(target, draft, ids, "static", max_new=30)
    assert path.startswith(STATIC)
    assert any(a < d for d, a in rounds)
    after = [(layer.keys.data_ptr(), layer.values.data_ptr()) for layer in runner.cache.layers if layer.is_initialized]
    assert before == after and len(after) == target.config.num_hidden_layers - target.config.num_kv_shared_layers


def test_returned_cache_holds_the_sequence_k_v(wired):
    """``return_dict_in_generate``: the static path returns copies of the valid positions' K/V, equal to a
    DynamicCache forward over the same tokens (never the runner's own buffers, which the next call reuses)."""
    from transformers import DynamicCache, GenerationConfig

    target, draft = wired
    ids = _ids(DEFAULT_PROMPTS[4])
    out = SPEC(target, ids, assistant_model=draft, num_draft_tokens=3, verify_mode="static",
               generation_config=GenerationConfig(max_new_tokens=20, do_sample=False, return_dict_in_generate=True))
    cache = out.past_key_values
    valid = cache.layers[0].keys.shape[2]
    assert ids.shape[1] < valid <= out.sequences.shape[1]
    ref = DynamicCache()
    target(input_ids=out.sequences[:, :valid], past_key_values=ref, use_cache=True)
    runner_buffers = {layer.keys.data_ptr() for e in verifygraph._RUNNERS[target].values() if e[0] is not None
                      for layer in e[0].cache.layers if layer.is_initialized}
    for i, layer in enumerate(cache.layers):
        if layer.keys is None or ref.layers[i].keys is None:
            continue
        assert layer.keys.data_ptr() not in runner_buffers
        torch.testing.assert_close(layer.keys, ref.layers[i].keys, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(layer.values, ref.layers[i].values, rtol=1e-4, atol=1e-5)


def test_runner_is_built_and_checked_once_per_k_and_bucket(wired, monkeypatch):
    target, draft = wired
    verifygraph._RUNNERS.pop(target, None)
    checks = []
    real = verifygraph._check_against_dynamic
    monkeypatch.setattr(verifygraph, "_check_against_dynamic", lambda *a: checks.append(a[2]) or real(*a))
    ids = _ids(DEFAULT_PROMPTS[0])
    for k in (3, 3, 2, 3):
        _run(target, draft, ids, "static", max_new=10, k=k)
    assert checks == [3, 2]
    runners = {id(e[0]) for e in verifygraph._RUNNERS[target].values()}
    assert len(runners) == 1  # one cache serves both k (same length bucket)
    _run(target, draft, ids, "static", max_new=verifygraph.BUCKET + 10, k=3)  # a longer call: the next bucket
    assert checks == [3, 2, 3]


def test_failed_check_falls_back_to_the_dynamic_path_and_says_why(wired, monkeypatch):
    target, draft = wired
    verifygraph._RUNNERS.pop(target, None)
    monkeypatch.setattr(verifygraph, "_check_against_dynamic", lambda *a: "verify logits differ by 0.5")
    ids = _ids(DEFAULT_PROMPTS[3])
    out, _rounds, path = _run(target, draft, ids, "static")
    assert torch.equal(out, target.generate(ids, max_new_tokens=24, do_sample=False))
    assert path.startswith(verifygraph.DYNAMIC) and "verify logits differ by 0.5" in path
    verifygraph._RUNNERS.pop(target, None)


@pytest.mark.parametrize("case", ["graph on the cpu", "eager attention", "other layer type"])
def test_unsupported_targets_fall_back_with_the_reason(wired, monkeypatch, case):
    target, draft = wired
    verifygraph._RUNNERS.pop(target, None)
    mode, want = "graph", "a CUDA graph needs a CUDA device, the target is on cpu"
    if case == "eager attention":
        monkeypatch.setattr(target.config, "_attn_implementation", "eager", raising=False)
        mode, want = "static", "attention implementation 'eager'"
    elif case == "other layer type":
        monkeypatch.setattr(target.config, "layer_types", ["chunked_attention"] * target.config.num_hidden_layers)
        mode, want = "static", "layer types ['chunked_attention']"
    path = verifygraph.runner_for(target, 3, 40, "cpu", torch.float32, mode)[1]
    assert path.startswith(verifygraph.DYNAMIC) and want in path, path
    verifygraph._RUNNERS.pop(target, None)


def test_auto_on_the_cpu_is_the_dynamic_path(wired):
    target, draft = wired
    _out, _rounds, path = _run(target, draft, _ids(DEFAULT_PROMPTS[0]), None, max_new=6)
    assert verifygraph.CPU_AUTO == "dynamic" and path == verifygraph.DYNAMIC


def test_unknown_verify_mode_is_srg431(wired):
    target, draft = wired
    with pytest.raises(SurgeryError) as exc:
        _run(target, draft, _ids(DEFAULT_PROMPTS[0]), "compiled")
    assert [d.code for d in exc.value.diagnostics] == ["SRG431"]


def test_masks_follow_the_position_and_the_window(wired):
    """query i at start + i attends j <= start + i; a sliding layer only the last `sliding_window` of
    them (transformers' count, held against its own forward by the runner's check)."""
    target, _draft = wired
    window = target.config.sliding_window
    runner = verifygraph.StaticVerify(target, 256, "cpu", verifygraph._windows(target))
    runner.start.fill_(150)
    masks = runner.masks(4)
    for i in range(4):
        q = 150 + i
        full = masks["full_attention"][0, 0, i]
        sliding = masks["sliding_attention"][0, 0, i]
        assert full.nonzero().flatten().tolist() == list(range(q + 1))
        assert sliding.nonzero().flatten().tolist() == list(range(q - window + 1, q + 1))


def test_the_verify_step_has_no_host_synchronisation(wired):
    """A CUDA graph capture refuses a host sync (``.item()``, ``nonzero``, a data-dependent branch): the
    step the graph records must have none. Every aten op of one eager step is recorded here."""
    from torch.utils._python_dispatch import TorchDispatchMode

    target, _draft = wired
    runner, path = verifygraph.runner_for(target, 3, 60, "cpu", torch.float32, "static")
    assert runner is not None, path
    runner.prefill(_ids(LONG)[:, :40])
    seen = []

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(str(func.overloadpacket))
            return func(*args, **(kwargs or {}))

    with torch.no_grad(), Record():
        runner.verify(_ids("abcd"), 40, 3)
    syncing = {"aten._local_scalar_dense", "aten.nonzero", "aten.is_nonzero", "aten.item", "aten.equal",
               "aten.masked_select", "aten._assert_async", "aten.unique", "aten.repeat_interleave"}
    assert seen and not syncing & set(seen), sorted(syncing & set(seen))
