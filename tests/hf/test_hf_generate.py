"""Issue 16: ``surgery.hf.speculative_decoding`` inside transformers' own ``generate``.

Oracle: plain greedy ``target.generate`` (transformers' own loop) on the same pair, same settings.
Everything goes through ``surgery.apply`` first, as a user would.
"""
from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import surgery  # noqa: E402
import surgery.hf  # noqa: E402
from surgery import Runtime, SurgeryError, load_recipe, read_facts, resolve  # noqa: E402
from surgery.tinymodels import bytevocab  # noqa: E402
from surgery.tinymodels import tinypair as pair  # noqa: E402
from surgery.hf.loader import load_pair  # noqa: E402
from surgery.pairs import DEFAULT_PROMPTS, held_out_prompts  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "gemma4-mtp.yaml"
RULE_LINE = "    rule: last_unshared_of_type\n"
MAX_NEW = 24
SPEC = surgery.hf.speculative_decoding


def _plan(dirs, tmp_path_factory=None, pairs=None):
    path = RECIPE
    if pairs is not None:
        text = RECIPE.read_text()
        table = ", ".join(f"{d}: {t}" for d, t in pairs.items())
        path = tmp_path_factory.mktemp("map") / "explicit.yaml"
        path.write_text(text.replace(RULE_LINE, f"    rule: explicit\n    pairs: {{{table}}}\n"))
    p = resolve(load_recipe(str(path)), read_facts(dirs[1]), read_facts(dirs[0]), Runtime(engine="hf"))
    assert p.ok
    return p


def _wired(dirs, plan):
    target, draft = load_pair(*dirs)
    report = surgery.apply(plan, draft, target)
    assert surgery.verify(plan, draft, target, report=report).ok
    return target, draft


@pytest.fixture(scope="module")
def wired(dirs):
    """This module's own wired pair, overriding tests/hf/conftest.py's: the same pair and plan, with the plan
    and ``surgery.verify`` checked as well (module scope, as there)."""
    return _wired(dirs, _plan(dirs))


@pytest.fixture(scope="module")
def wrong_wired(dirs, tmp_path_factory):
    """Every sliding draft layer reads target layer 0 (shape-compatible, deliberately wrong)."""
    return _wired(dirs, _plan(dirs, tmp_path_factory, {0: 0, 1: 0, 2: 0, 3: 4}))


def _ids(prompt):
    return torch.tensor([bytevocab.encode(prompt)])


@pytest.fixture(scope="module")
def greedy(wired):
    target, _ = wired
    prompts = DEFAULT_PROMPTS + held_out_prompts()
    return {p: target.generate(_ids(p), max_new_tokens=MAX_NEW, do_sample=False) for p in prompts}


def _ours(target, draft, ids, **kw):
    kw.setdefault("max_new_tokens", MAX_NEW)
    return target.generate(ids, assistant_model=draft, custom_generate=SPEC, do_sample=False, **kw)


def test_equals_plain_greedy_on_the_default_and_held_out_prompts(wired, greedy):
    target, draft = wired
    held_out = set(held_out_prompts())
    drafted = accepted = 0
    for prompt, ref in greedy.items():
        out = _ours(target, draft, _ids(prompt), num_assistant_tokens=3)
        assert torch.equal(out, ref), prompt
        stats = SPEC.last_stats
        assert stats.target_forwards < ref.shape[1] - _ids(prompt).shape[1]  # forwards were saved
        if prompt in held_out:  # acceptance only where the pair never trained (the bar: 50 %)
            drafted, accepted = drafted + stats.drafted, accepted + stats.accepted
    assert accepted / drafted >= 0.5, accepted / drafted  # 0.72 measured


@pytest.mark.parametrize("how", ["generation_config", "argument"])
def test_draft_token_count_from_config_or_argument(wired, greedy, how):
    target, draft = wired
    prompt = DEFAULT_PROMPTS[0]
    kw = {"num_assistant_tokens": 5} if how == "generation_config" else {"num_draft_tokens": 5}
    out = _ours(target, draft, _ids(prompt), **kw)
    assert torch.equal(out, greedy[prompt])
    stats = SPEC.last_stats
    assert stats.drafted == 5 * (stats.rounds - 1) + min(5, stats.drafted - 5 * (stats.rounds - 1))
    assert max(5, stats.drafted / stats.rounds) == 5 and stats.drafted > 5


def test_explicit_non_default_map_is_honoured(wired, wrong_wired, greedy):
    """Same output (the target verifies), but the wrong map's acceptance drops: the draft really
    reads the layers the plan names, not transformers' default ones."""
    rates = {}
    for name, (target, draft) in (("good", wired), ("wrong", wrong_wired)):
        drafted = accepted = 0
        for prompt in DEFAULT_PROMPTS[:4]:
            assert torch.equal(_ours(target, draft, _ids(prompt), num_assistant_tokens=3), greedy[prompt]), prompt
            drafted, accepted = drafted + SPEC.last_stats.drafted, accepted + SPEC.last_stats.accepted
        rates[name] = accepted / drafted
    assert rates["wrong"] < rates["good"] - 0.3, rates


@pytest.mark.parametrize("max_new", [1, 2, 7])
def test_stops_at_max_new_tokens(wired, greedy, max_new):
    target, draft = wired
    prompt = DEFAULT_PROMPTS[1]
    out = _ours(target, draft, _ids(prompt), max_new_tokens=max_new, num_assistant_tokens=5)
    assert torch.equal(out, greedy[prompt][:, : _ids(prompt).shape[1] + max_new])


def test_stops_at_max_length(wired, greedy):
    target, draft = wired
    prompt = DEFAULT_PROMPTS[2]
    n = _ids(prompt).shape[1]
    out = target.generate(_ids(prompt), assistant_model=draft, custom_generate=SPEC, do_sample=False,
                          max_length=n + 9, num_assistant_tokens=4)
    assert torch.equal(out, greedy[prompt][:, : n + 9])


def test_stops_at_eos_inside_an_accepted_run(wired, greedy):
    """EOS = a token greedy emits mid-sequence: both stop right after its first occurrence, even
    when it lands inside a run of accepted drafts."""
    target, draft = wired
    prompt = DEFAULT_PROMPTS[0]
    n = _ids(prompt).shape[1]
    new = greedy[prompt][0, n:].tolist()
    eos = new[5]
    ref = target.generate(_ids(prompt), max_new_tokens=MAX_NEW, do_sample=False, eos_token_id=eos)
    out = _ours(target, draft, _ids(prompt), eos_token_id=eos, num_assistant_tokens=5)
    assert torch.equal(out, ref)
    assert out[0, -1].item() == eos and out.shape[1] == n + new.index(eos) + 1


def test_custom_stopping_criteria_and_logits_processor(wired):
    """Anything else transformers prepared (a user stopping criterion, a repetition penalty) is
    applied per position exactly as the greedy loop applies it."""
    from transformers import StoppingCriteria, StoppingCriteriaList

    class StopAfterNewline(StoppingCriteria):
        def __call__(self, input_ids, scores, **kwargs):
            return torch.tensor([input_ids[0, -1].item() == bytevocab.encode("\n", bos=False)[0]])

    target, draft = wired
    prompt = DEFAULT_PROMPTS[2]
    kw = dict(max_new_tokens=40, do_sample=False, repetition_penalty=1.3,
              stopping_criteria=StoppingCriteriaList([StopAfterNewline()]))
    ref = target.generate(_ids(prompt), **kw)
    out = target.generate(_ids(prompt), assistant_model=draft, custom_generate=SPEC, num_assistant_tokens=3, **kw)
    assert torch.equal(out, ref)


def test_streamer_gets_prompt_then_every_new_token_once(wired, greedy):
    from transformers.generation.streamers import BaseStreamer

    class Collect(BaseStreamer):
        def __init__(self):
            self.puts, self.ended = [], 0

        def put(self, value):
            self.puts.append(value.flatten().tolist())

        def end(self):
            self.ended += 1

    target, draft = wired
    prompt = DEFAULT_PROMPTS[3]
    streamer = Collect()
    out = _ours(target, draft, _ids(prompt), streamer=streamer, num_assistant_tokens=3)
    assert streamer.puts[0] == _ids(prompt)[0].tolist()  # generate itself puts the prompt
    assert sum(streamer.puts[1:], []) == out[0, _ids(prompt).shape[1]:].tolist() == \
        greedy[prompt][0, _ids(prompt).shape[1]:].tolist()
    assert len(streamer.puts) > 2 and streamer.ended == 1


def test_return_dict_in_generate(wired, greedy):
    target, draft = wired
    prompt = DEFAULT_PROMPTS[0]
    out = _ours(target, draft, _ids(prompt), return_dict_in_generate=True, num_assistant_tokens=3)
    assert torch.equal(out.sequences, greedy[prompt])


def _code(excinfo) -> list[str]:
    return [d.code for d in excinfo.value.diagnostics]


def test_refusals_are_coded(wired, dirs):
    target, draft = wired
    ids = _ids(DEFAULT_PROMPTS[0])
    with pytest.raises(SurgeryError) as exc:  # a batch
        _ours(target, draft, ids.repeat(2, 1))
    assert _code(exc) == ["SRG430"]
    with pytest.raises(SurgeryError) as exc:  # sampling
        target.generate(ids, assistant_model=draft, custom_generate=SPEC, do_sample=True, max_new_tokens=4)
    assert _code(exc) == ["SRG431"]
    with pytest.raises(SurgeryError) as exc:  # no assistant
        target.generate(ids, custom_generate=SPEC, max_new_tokens=4)
    assert _code(exc) == ["SRG432"]
    _, unwired = load_pair(*dirs)  # placeholder embedding still in place
    with pytest.raises(SurgeryError) as exc:
        _ours(target, unwired, ids)
    assert _code(exc) == ["SRG432"]
    layer = draft.model.layers[0].self_attn
    saved = layer.layer_type
    layer.layer_type = "surgery.kv.3"  # a key the target does not publish
    try:
        with pytest.raises(SurgeryError) as exc:
            _ours(target, draft, ids)
        assert _code(exc) == ["SRG434"]
    finally:
        layer.layer_type = saved


# -- the hoisted draft step (surgery/hf/fastdraft.py) against the assistant's own forward ----------


def _ordered_draft(dirs, seed=0):
    """The tiny assistant with its centroid head switched on (as in the E2B assistant), random
    centroids and a random token ordering (a permutation)."""
    from transformers import Gemma4AssistantForCausalLM

    target, _ = load_pair(*dirs)
    _, draft_cfg = pair.make_configs()
    draft_cfg.use_ordered_embeddings = True
    torch.manual_seed(seed)
    draft = Gemma4AssistantForCausalLM(draft_cfg).eval()
    draft.masked_embedding.token_ordering.copy_(torch.randperm(draft_cfg.get_text_config().vocab_size))
    draft.set_input_embeddings(target.get_input_embeddings())
    return target, draft


@torch.no_grad()
@pytest.mark.parametrize("head", ["lm_head", "centroids"])
def test_hoisted_step_equals_the_assistants_forward(wired, dirs, head):
    from surgery.hf import fastdraft

    target, draft = wired if head == "lm_head" else _ordered_draft(dirs)
    ids = _ids(DEFAULT_PROMPTS[4])
    out = target(input_ids=ids, output_hidden_states=True, return_shared_kv_states=True)
    kv, position = out.shared_kv_states, torch.tensor([[ids.shape[1]]])
    g = torch.Generator().manual_seed(1)
    width = 2 * draft.config.backbone_hidden_size
    inputs = [torch.randn(1, 1, width, generator=g) for _ in range(6)]
    masks, rope = fastdraft.prepare_round(draft, kv, position, inputs[0])
    for x in inputs:
        tok, h = fastdraft.step(draft, x, kv, position, masks, rope)
        ref_tok, ref_h = fastdraft.reference_step(draft, x, kv, position)
        assert torch.equal(tok, ref_tok)
        torch.testing.assert_close(h, ref_h, rtol=1e-5, atol=1e-6)
    assert fastdraft.self_check(draft, inputs[0], kv, position) is None


@torch.no_grad()
def test_centroid_head_ties_resolve_like_argmax(dirs):
    """Two candidate tokens with identical head rows tie exactly: the hoisted argmax must pick the
    same (smallest) id as argmax over the assistant's scattered full-vocabulary logits."""
    from surgery.hf import fastdraft

    target, draft = _ordered_draft(dirs, seed=3)
    ids = _ids(DEFAULT_PROMPTS[5])
    out = target(input_ids=ids, output_hidden_states=True, return_shared_kv_states=True)
    kv, position = out.shared_kv_states, torch.tensor([[ids.shape[1]]])
    x = torch.randn(1, 1, 2 * draft.config.backbone_hidden_size, generator=torch.Generator().manual_seed(2))
    ref_tok, _ = fastdraft.reference_step(draft, x, kv, position)
    winner = ref_tok.item()
    # copy the winner's head row to a smaller id in one of the selected clusters, then to a larger one
    masks, rope = fastdraft.prepare_round(draft, kv, position, x)
    ordering = draft.masked_embedding.token_ordering.view(draft.config.num_centroids, -1)
    cluster = next(row for row in ordering.tolist() if winner in row)
    for other in (min(cluster), max(cluster)):
        if other == winner:
            continue
        saved = draft.lm_head.weight[other].clone()
        draft.lm_head.weight[other] = draft.lm_head.weight[winner]
        try:
            tok, _ = fastdraft.step(draft, x, kv, position, masks, rope)
            ref, _ = fastdraft.reference_step(draft, x, kv, position)
            assert tok.item() == ref.item() == min(winner, other)
        finally:
            draft.lm_head.weight[other] = saved


def test_a_hoisted_step_that_disagrees_falls_back_aloud(dirs, greedy, monkeypatch):
    """If transformers changes what the assistant's forward does, the self-check sees it: the loop
    warns, runs the assistant's own forward, and the output is still greedy's."""
    from surgery.hf import fastdraft

    target, draft = _wired(dirs, _plan(dirs))
    real_step = fastdraft.step
    monkeypatch.setattr(fastdraft, "step", lambda *a: (real_step(*a)[0] + 1, real_step(*a)[1]))
    prompt = DEFAULT_PROMPTS[0]
    with pytest.warns(UserWarning, match="assistant's own forward"):
        out = _ours(target, draft, _ids(prompt), num_assistant_tokens=3)
    assert torch.equal(out, greedy[prompt])
    assert SPEC.last_stats.draft_path.startswith("transformers forward: token")
    assert SPEC.last_stats.accepted / SPEC.last_stats.drafted > 0.7  # the real forward drafted


def test_direct_call_without_generate(wired, greedy):
    from transformers import GenerationConfig

    target, draft = wired
    prompt = DEFAULT_PROMPTS[1]
    n = _ids(prompt).shape[1]
    out = SPEC(target, _ids(prompt), assistant_model=draft, num_draft_tokens=3,
               generation_config=GenerationConfig(max_new_tokens=10, do_sample=False))
    assert torch.equal(out, greedy[prompt][:, : n + 10])
