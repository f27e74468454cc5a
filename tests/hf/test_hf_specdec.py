"""HF side of the demo: the tiny Gemma 4 pair, KV routing by ``layer_type`` key, and our greedy
speculative decoding loop (output must equal plain greedy whatever the draft or its KV map)."""

from __future__ import annotations

import contextlib

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from surgery.tinymodels import bytevocab  # noqa: E402
from surgery.hf.loader import load_pair  # noqa: E402
from surgery.pairs import DEFAULT_PROMPTS, GEMMA_PAIR, held_out_prompts  # noqa: E402
from surgery.live.kvrouting import build_shared_kv_states, default_kv_sources, kv_key, publisher_key  # noqa: E402
from surgery.hf.specdec import greedy_generate, speculative_generate  # noqa: E402

# Prompts longer than the sliding window (64) exercise the full-length cache + sliding masks.
LONG_PROMPTS = (
    "import os\nimport sys\n\n\nclass Config:\n    def __init__(self, path, mode='r'):\n"
    "        self.path = path\n        self.mode = mode\n\n    def open(self):\n        return ",
    "def parse(args):\n    result = []\n    for arg in args:\n        if arg.startswith('-'):\n"
    "            result.append(arg[1:])\n        else:\n            raise ValueError(",
)
PROMPTS = DEFAULT_PROMPTS[:6] + LONG_PROMPTS
MAX_NEW = 32
pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def models(dirs):
    target, draft = load_pair(*dirs)  # dirs: the tiny pair's folders (tests/conftest.py)
    # What the applier's share_module(input_embeddings) does: the draft reads the target's table.
    draft.set_input_embeddings(target.get_input_embeddings())
    return target, draft


def correct_map(target, draft) -> dict[int, int]:
    """Draft layer -> last unshared target layer of the same type (the gemma4-mtp rule)."""
    sources = default_kv_sources(target.config)
    return {i: sources[t] for i, t in enumerate(draft.config.get_text_config().layer_types)}


def wrong_map(target, draft) -> dict[int, int]:
    """Shape-compatible but wrong: sliding draft layers read target layer 0 instead of 5."""
    return {i: (0 if j == default_kv_sources(target.config)["sliding_attention"] else j) for i, j in correct_map(target, draft).items()}


@contextlib.contextmanager
def routed(draft, mapping: dict[int, int], target=None):
    """Wire draft layer i to target layer j as the applier does (surgery/live/kvrouting.py): the draft
    reads ``kv_key(j)`` and, when ``target`` is given, target layer j publishes under that key."""
    attns = [layer.self_attn for layer in draft.model.layers]
    t_attns = [layer.self_attn for layer in target.model.layers] if target is not None else []
    saved = [a.layer_type for a in attns]
    t_saved = [(a.layer_type, a.store_full_length_kv) for a in t_attns]
    try:
        for i, j in mapping.items():
            key = publisher_key(t_attns[j]) if target is not None else None
            if key is None:  # not a layer transformers publishes by default
                key = kv_key(j)
                if target is not None:
                    t_attns[j].layer_type, t_attns[j].store_full_length_kv = key, True
            attns[i].layer_type = key
        yield draft
    finally:
        for a, t in zip(attns, saved):
            a.layer_type = t
        for a, (t, store) in zip(t_attns, t_saved):
            a.layer_type, a.store_full_length_kv = t, store


@pytest.fixture(scope="module")
def greedy_ref(models):
    target, _ = models
    return {p: greedy_generate(target, bytevocab.encode(p), MAX_NEW) for p in PROMPTS}


def _spec(models, mapping, k, prompts=PROMPTS, max_new=MAX_NEW):
    target, draft = models
    with routed(draft, mapping, target):
        return {p: speculative_generate(target, draft, bytevocab.encode(p), max_new, k) for p in prompts}


def _rate(results) -> float:
    return sum(r.accepted for r in results.values()) / sum(r.drafted for r in results.values())


def test_tokenizer_roundtrip():
    text = "def f(x):\n    return 'é' + x\n"
    ids = bytevocab.encode(text)
    assert ids[0] == bytevocab.BOS_ID and max(ids) < bytevocab.VOCAB_SIZE
    assert bytevocab.decode(ids) == text


def test_pair_shapes_mimic_gemma4(models):
    target, draft = models
    tc, dc = target.config, draft.config.get_text_config()
    assert tc.model_type == "gemma4_text" and draft.config.model_type == "gemma4_assistant"
    assert set(tc.layer_types) == {"sliding_attention", "full_attention"} and tc.layer_types[-1] == "full_attention"
    assert 0 < tc.num_kv_shared_layers < tc.num_hidden_layers
    assert tc.hidden_size_per_layer_input > 0 and tc.vocab_size_per_layer_input == tc.vocab_size
    assert dc.num_kv_shared_layers == dc.num_hidden_layers
    assert draft.config.backbone_hidden_size == tc.hidden_size > dc.hidden_size
    full = tc.layer_types.index("full_attention")
    assert target.model.layers[full].self_attn.head_dim != target.model.layers[0].self_attn.head_dim
    assert default_kv_sources(tc) == {"sliding_attention": 5, "full_attention": 4}


@pytest.mark.parametrize("k", [1, 2, 3, 5])
def test_speculative_equals_greedy(models, greedy_ref, k):
    for prompt, res in _spec(models, correct_map(*models), k).items():
        assert res.tokens == greedy_ref[prompt], prompt
        assert res.drafted > 0 and res.target_forwards < MAX_NEW


def test_speculative_equals_greedy_with_wrong_map(models, greedy_ref):
    results = _spec(models, wrong_map(*models), 3)
    for prompt, res in results.items():
        assert res.tokens == greedy_ref[prompt], prompt


@pytest.mark.parametrize("max_new", [1, 2, 7])
def test_stops_exactly_at_max_new_tokens(models, max_new):
    target, draft = models
    prompt = bytevocab.encode(PROMPTS[0])
    with routed(draft, correct_map(target, draft), target):
        res = speculative_generate(target, draft, prompt, max_new, 5)
    assert res.tokens == greedy_generate(target, prompt, max_new)
    assert len(res.tokens) == max_new and res.target_forwards <= max_new


def _distinct_4gram_ratio(tokens) -> float:
    grams = [tuple(tokens[i : i + 4]) for i in range(len(tokens) - 3)]
    return len(set(grams)) / len(grams)


def test_target_greedy_on_held_out_prompts_does_not_loop(models):
    """The shipped target is trained long enough: its 48-token greedy continuations of the held-out
    prompts mostly do not loop (an undertrained target repeats "____" and hands any draft a high
    acceptance for free), and the pair index records exactly these figures."""
    from surgery.pairs import builtin_pair

    target, _ = models
    texts = held_out_prompts()
    conts = [greedy_generate(target, bytevocab.encode(t), 48) for t in texts]
    grams = [_distinct_4gram_ratio(c) for c in conts]
    tokens = [len(set(c)) / len(c) for c in conts]
    assert sum(grams) / len(grams) >= 0.5 and sorted(grams)[len(grams) // 2] >= 0.5, grams
    recorded = builtin_pair(GEMMA_PAIR).info["target_greedy"]
    assert recorded["distinct_4gram_ratio"] == pytest.approx(sum(grams) / len(grams), abs=6e-4)
    assert recorded["distinct_token_ratio"] == pytest.approx(sum(tokens) / len(tokens), abs=6e-4)


def test_distilled_acceptance_and_wrong_map_drop(models):
    """On the held-out prompts (text the pair never trained on), as `surgery apply` measures:
    >= 50 % at 3 draft tokens; a shape-compatible wrong KV map loses acceptance."""
    prompts = held_out_prompts()
    good = _rate(_spec(models, correct_map(*models), 3, prompts, 48))
    bad = _rate(_spec(models, wrong_map(*models), 3, prompts, 48))
    assert good >= 0.5, good
    assert bad < good - 0.15, (good, bad)


def _draft_logits(target, draft, ids, shared_kv_states):
    """One MTP step from the end of ``ids`` with the given K/V dict."""
    out = target(input_ids=ids, output_hidden_states=True)
    bonus = out.logits[:, -1:].argmax(-1)
    inp = torch.cat([draft.get_input_embeddings()(bonus), out.hidden_states[-1][:, -1:]], -1)
    pos = torch.tensor([[ids.shape[1]]])
    return draft(inputs_embeds=inp, position_ids=pos, shared_kv_states=shared_kv_states).logits


@torch.no_grad()
def test_explicit_map_reads_that_target_layer(models):
    from transformers import DynamicCache

    target, draft = models
    ids = torch.tensor([bytevocab.encode(LONG_PROMPTS[0])])
    cache = DynamicCache()
    target(input_ids=ids, past_key_values=cache, use_cache=True)
    kv = {j: (cache.layers[j].keys, cache.layers[j].values) for j in range(len(cache.layers))}
    sliding = [i for i, t in enumerate(draft.config.get_text_config().layer_types) if t == "sliding_attention"]

    def routed_logits(j):
        with routed(draft, {i: j for i in sliding}):
            return _draft_logits(target, draft, ids, build_shared_kv_states(cache, target.config, draft))

    # Reference: no routing, the type keys filled by hand with target layer 2 (sliding) / 4 (full).
    reference = _draft_logits(target, draft, ids, {"sliding_attention": kv[2], "full_attention": kv[4]})
    torch.testing.assert_close(routed_logits(2), reference, rtol=0, atol=1e-6)
    assert (routed_logits(3) - reference).abs().max() > 1e-3


def test_routing_to_kv_shared_target_layer_is_refused(models):
    from transformers import DynamicCache

    target, draft = models
    cache = DynamicCache()
    target(input_ids=torch.tensor([bytevocab.encode("x = 1")]), past_key_values=cache, use_cache=True)
    with routed(draft, {0: 7}), pytest.raises(ValueError, match="not a non-KV-shared"):
        build_shared_kv_states(cache, target.config, draft)


def test_unwired_draft_embedding_is_a_clear_error(models, dirs):
    target, _ = models
    _, fresh = load_pair(*dirs)
    with pytest.raises(ValueError, match="placeholder embedding"):
        speculative_generate(target, fresh, bytevocab.encode("def f("), 8, 3)
