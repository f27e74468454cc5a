"""Issue 56: the draft round over static K/V buffers (surgery/hf/draftgraph.py), run eagerly here.

On the GPU the same ``StaticDraft.body`` is captured as one CUDA graph; what the CPU can check is
everything but the capture: the buffers, the in-graph masks (sliding window included), the copy of
only newly committed positions, the per-(k, length bucket) reuse, and the fallbacks. Oracles: plain
greedy ``generate`` for the output, and the hoisted per-step path (issue 47) for the drafts
themselves (same drafted / accepted counts, same tokens).
"""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import surgery  # noqa: E402
import surgery.hf  # noqa: E402
from surgery import SurgeryError  # noqa: E402
from surgery.tinymodels import bytevocab  # noqa: E402
from surgery.hf import draftgraph, fastdraft  # noqa: E402
from surgery.pairs import DEFAULT_PROMPTS, held_out_prompts  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SPEC = surgery.hf.speculative_decoding


def _ids(text):
    return torch.tensor([bytevocab.encode(text)])


def _run(target, draft, ids, mode, max_new=24, k=3):
    out = target.generate(ids, assistant_model=draft, custom_generate=SPEC, do_sample=False, max_new_tokens=max_new,
                          num_assistant_tokens=k, draft_mode=mode)
    st = SPEC.last_stats
    return out, (st.drafted, st.accepted, st.rounds), st.draft_path


# a prompt longer than the pair's sliding window (64): the window mask decides which K/V a sliding
# draft layer reads, so a wrong window would change the drafts (caught against the hoisted path)
LONG = "\n".join(DEFAULT_PROMPTS[:8])  # about 170 bytes


@pytest.mark.parametrize("text", [DEFAULT_PROMPTS[2], held_out_prompts()[1], LONG], ids=["default", "held-out", "long"])
def test_static_buffers_draft_exactly_what_the_hoisted_steps_draft(wired, text):
    target, draft = wired
    ids = _ids(text)
    assert text != LONG or ids.shape[1] > 2 * draft.model.config.sliding_window
    greedy = target.generate(ids, max_new_tokens=24, do_sample=False)
    hoisted, h_counts, h_path = _run(target, draft, ids, "hoisted")
    static, s_counts, s_path = _run(target, draft, ids, "static")
    assert torch.equal(static, greedy) and torch.equal(hoisted, greedy)
    assert h_path == surgery.hf.generate.HOISTED
    assert s_path.startswith("static buffers, eager")
    assert s_counts == h_counts  # same drafts round by round: same drafted, accepted and rounds
    assert s_counts[1] > 0


@torch.no_grad()
def test_window_mask_and_buffers_match_the_assistants_forward_past_the_window(wired):
    """One round on a long context: the static runner's k tokens equal k hoisted steps on the
    sliced K/V (and its first step equals ``draft(...)``), for several draft positions."""
    target, draft = wired
    ids = _ids(LONG)
    out = target(input_ids=ids, output_hidden_states=True, return_shared_kv_states=True)
    kv_all = out.shared_kv_states
    embed = draft.get_input_embeddings()
    g = torch.Generator().manual_seed(0)
    runner = draftgraph.StaticDraft(draft, embed, kv_all, 3, draftgraph.bucket(ids.shape[1] + 1),
                                    torch.cat([embed(ids[:, :1]), out.hidden_states[-1][:, :1]], dim=-1))
    assert runner.windows["full_attention"] == float("inf")
    assert runner.windows["sliding_attention"] < ids.shape[1]  # the window is finite and matters here
    for committed in (5, 70, ids.shape[1]):
        runner.reset()
        runner.sync(kv_all, committed)
        kv = {n: (a[:, :, :committed], b[:, :, :committed]) for n, (a, b) in kv_all.items()}
        bonus = torch.randint(3, 200, (1, 1), generator=g)
        hidden = torch.randn(1, 1, draft.config.backbone_hidden_size, generator=g)
        position = torch.tensor([[committed]])
        got = runner.run(bonus, hidden, committed)
        tok, h = bonus, hidden
        first = torch.cat([embed(tok), h], dim=-1)
        masks, rope = fastdraft.prepare_round(draft, kv, position, first)
        want = []
        for i in range(3):
            inputs = first if i == 0 else torch.cat([embed(tok), h], dim=-1)
            tok, h = fastdraft.step(draft, inputs, kv, position, masks, rope)
            want.append(tok)
        assert torch.equal(got, torch.cat(want, dim=1)), committed
        ref_tok, _ = fastdraft.reference_step(draft, first, kv, position)
        assert torch.equal(got[:, :1], ref_tok)


def test_only_committed_positions_are_copied(wired):
    """After a call the buffers hold exactly the target's K/V of the committed positions (the
    returned cache, cropped on every rejection) and nothing past them: rejected drafts' K/V are
    never copied, so nothing is undone."""
    from transformers import GenerationConfig

    target, draft = wired
    draftgraph._RUNNERS.pop(draft, None)
    ids = _ids(held_out_prompts()[2])
    out = SPEC(target, ids, assistant_model=draft, num_draft_tokens=3, draft_mode="static",
               generation_config=GenerationConfig(max_new_tokens=30, do_sample=False, return_dict_in_generate=True))
    st = SPEC.last_stats
    assert st.drafted > st.accepted > 0  # there were rejections
    (runner, _), = draftgraph._RUNNERS[draft].values()
    committed = runner.synced
    assert ids.shape[1] < committed <= out.sequences.shape[1]
    cache = out.past_key_values
    publisher = {layer.self_attn.layer_type: i for i, layer in enumerate(target.model.layers)
                 if getattr(layer.self_attn, "store_full_length_kv", False)}
    assert sorted(publisher) == sorted(runner.kv)
    for key, (kb, vb) in runner.kv.items():
        layer = publisher[key]
        assert torch.equal(kb[:, :, :committed], cache.layers[layer].keys[:, :, :committed])
        assert torch.equal(vb[:, :, :committed], cache.layers[layer].values[:, :, :committed])
        assert not kb[:, :, committed:].any() and not vb[:, :, committed:].any()


def test_runner_is_reused_per_k_and_length_bucket(wired):
    target, draft = wired
    draftgraph._RUNNERS.pop(draft, None)
    _run(target, draft, _ids(DEFAULT_PROMPTS[3]), "static", max_new=10)
    _run(target, draft, _ids(DEFAULT_PROMPTS[4]), "static", max_new=12)  # same bucket: same runner
    assert len(draftgraph._RUNNERS[draft]) == 1
    _run(target, draft, _ids(DEFAULT_PROMPTS[4]), "static", max_new=12, k=2)
    _run(target, draft, _ids(LONG), "static", max_new=12)  # a longer bucket
    assert len(draftgraph._RUNNERS[draft]) == 3
    assert draftgraph.bucket(1) == draftgraph.bucket(draftgraph.BUCKET) < draftgraph.bucket(draftgraph.BUCKET + 1)


def test_refusals_fall_back_to_the_per_step_path_and_say_why(wired, monkeypatch):
    target, draft = wired
    ids = _ids(DEFAULT_PROMPTS[5])
    greedy = target.generate(ids, max_new_tokens=24, do_sample=False)
    out, _, path = _run(target, draft, ids, "graph")  # no CUDA here
    assert torch.equal(out, greedy)
    assert path.startswith(surgery.hf.generate.HOISTED) and "CUDA graph needs a CUDA device" in path
    draftgraph._RUNNERS.pop(draft, None)
    monkeypatch.setattr(draft.config, "_attn_implementation", "eager")
    out, _, path = _run(target, draft, ids, "static")
    assert torch.equal(out, greedy)
    assert "sdpa only" in path
    draftgraph._RUNNERS.pop(draft, None)


def test_auto_keeps_the_per_step_path_on_the_cpu_and_bad_modes_are_coded(wired):
    target, draft = wired
    _, _, path = _run(target, draft, _ids(DEFAULT_PROMPTS[0]), None, max_new=6)
    assert path == surgery.hf.generate.HOISTED
    with pytest.raises(SurgeryError, match="SRG431.*draft_mode"):
        _run(target, draft, _ids(DEFAULT_PROMPTS[0]), "fast", max_new=6)


class _ReplayOnCpu:
    """Stands in for ``torch.cuda.CUDAGraph`` here: replay reruns the captured body into the same
    output tensor, as a replay overwrites the graph's output in place."""

    def __init__(self, runner):
        self.runner = runner

    def replay(self):
        self.runner.out.copy_(self.runner.body())


def test_graph_branch_plumbing_with_a_stand_in_replay(wired, monkeypatch):
    """What the CPU can check of the graph branch: capture is called once per runner, every round
    replays into the same output (so each round's drafts are copied out before the next replay), the
    replay is checked against the eager run, and the output is greedy's with the same drafts."""
    target, draft = wired
    captures = []

    def capture(self):
        captures.append(self)
        self.out = self.body()
        self.graph = _ReplayOnCpu(self)

    monkeypatch.setattr(draftgraph, "can_capture", lambda device: True)
    monkeypatch.setattr(draftgraph.StaticDraft, "capture", capture)
    draftgraph._RUNNERS.pop(draft, None)
    ids = _ids(held_out_prompts()[3])
    greedy = target.generate(ids, max_new_tokens=24, do_sample=False)
    _, h_counts, _ = _run(target, draft, ids, "hoisted")
    out, g_counts, path = _run(target, draft, ids, "graph")
    out2, _, _ = _run(target, draft, ids, "graph")
    assert path.startswith("cuda graph")
    assert torch.equal(out, greedy) and torch.equal(out2, greedy)
    assert g_counts == h_counts
    assert len(captures) == 1
    draftgraph._RUNNERS.pop(draft, None)
