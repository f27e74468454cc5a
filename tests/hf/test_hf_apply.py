"""Issue 3 acceptance through the APPLIER (`surgery.apply` / `apply_plan` on live HF models).

The loop-level checks (routing helpers, spec == greedy over many prompts and k) live in
tests/hf/test_hf_specdec.py; here everything goes through the Plan: resolve -> apply -> verify.
"""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import surgery  # noqa: E402
from surgery import Runtime, SurgeryError, load_recipe, read_facts, resolve  # noqa: E402
from surgery.applier import apply_plan, rollback, verify_plan  # noqa: E402
from surgery.applier.core import prepare_plan  # noqa: E402
from surgery.live.hf import HFContext  # noqa: E402
from surgery.live.mutations import SetAttr  # noqa: E402
from surgery.tinymodels import bytevocab  # noqa: E402
from surgery.hf.loader import load_pair  # noqa: E402
from surgery.pairs import held_out_prompts  # noqa: E402
from surgery.live.kvrouting import build_shared_kv_states, default_kv_sources  # noqa: E402

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "gemma4-mtp.yaml"
RULE_LINE = "    rule: last_unshared_of_type\n"
# Longer than the sliding window (64 tokens): sliding masks are exercised too.
PROMPT = ("import os\nimport sys\n\n\nclass Config:\n    def __init__(self, path, mode='r'):\n"
          "        self.path = path\n        self.mode = mode\n\n    def open(self):\n        return ")


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _resolve(dirs, recipe_path, engine="hf"):
    target_dir, draft_dir = dirs
    return resolve(load_recipe(str(recipe_path)), read_facts(draft_dir), read_facts(target_dir), Runtime(engine=engine))


@pytest.fixture(scope="module")
def plan(dirs):
    p = _resolve(dirs, RECIPE)
    assert p.ok and p.pairs("kv_source") == [(0, 5), (1, 5), (2, 5), (3, 4)]
    return p


def _explicit_recipe(tmp_dir: Path, pairs: dict[int, int]) -> Path:
    """gemma4-mtp with its kv_source rule replaced by an explicit table."""
    text = RECIPE.read_text()
    assert RULE_LINE in text
    table = ", ".join(f"{d}: {t}" for d, t in pairs.items())
    path = tmp_dir / "explicit.yaml"
    path.write_text(text.replace(RULE_LINE, f"    rule: explicit\n    pairs: {{{table}}}\n"))
    return path


@pytest.fixture(scope="module")
def explicit_plan(dirs, tmp_path_factory):
    """Sliding draft layers read target layers 2 / 3 instead of 5; the full layer stays on 4."""
    p = _resolve(dirs, _explicit_recipe(tmp_path_factory.mktemp("explicit"), {0: 2, 1: 3, 2: 2, 3: 4}))
    assert p.ok and p.pairs("kv_source") == [(0, 2), (1, 3), (2, 2), (3, 4)]
    return p


@pytest.fixture(scope="module")
def wrong_plan(dirs, tmp_path_factory):
    """Deliberately wrong but shape-compatible: every sliding draft layer reads target layer 0."""
    p = _resolve(dirs, _explicit_recipe(tmp_path_factory.mktemp("wrong"), {0: 0, 1: 0, 2: 0, 3: 4}))
    assert p.ok
    return p


@pytest.fixture
def fresh(dirs):
    """A freshly loaded, unwired (target, draft); ~0.2 s once transformers is imported."""
    return load_pair(*dirs)


# -- helpers ----------------------------------------------------------------------------------


def _storages(*models) -> dict[int, int]:
    """data_ptr -> bytes of every distinct storage behind the models' parameters and buffers."""
    seen = {}
    for m in models:
        for t in itertools.chain(m.parameters(), m.buffers()):
            st = t.untyped_storage()
            seen[st.data_ptr()] = st.nbytes()
    return seen


def _snapshot(target, draft) -> dict:
    snap = {}
    for side, m in (("target", target), ("draft", draft)):
        snap[side] = {
            "state": {k: v.detach().clone() for k, v in m.state_dict().items()},
            # the objects themselves (not only id()): an id could be reused once an object is freed
            "modules": dict(m.named_modules(remove_duplicate=False)),
            "params": dict(m.named_parameters(remove_duplicate=False)),
            "buffers": dict(m.named_buffers(remove_duplicate=False)),
            "layer_types": [layer.self_attn.layer_type for layer in m.model.layers],
            "publishes": [getattr(layer.self_attn, "store_full_length_kv", None) for layer in m.model.layers],
        }
    return snap


def _assert_unchanged(before: dict, target, draft) -> None:
    now = _snapshot(target, draft)
    for side in ("target", "draft"):
        b, n = before[side], now[side]
        assert list(n["state"]) == list(b["state"]), side
        for k, v in b["state"].items():
            assert n["state"][k].shape == v.shape and torch.equal(n["state"][k], v), f"{side} {k}"
        for kind in ("modules", "params", "buffers"):
            assert list(n[kind]) == list(b[kind]), f"{side} {kind} names"
            changed = [name for name, obj in b[kind].items() if n[kind][name] is not obj]
            assert not changed, f"{side} {kind} replaced: {changed}"
            assert [id(o) for o in n[kind].values()] == [id(o) for o in b[kind].values()]
        assert n["layer_types"] == b["layer_types"], side
        assert n["publishes"] == b["publishes"], side


def _mtp_step_logits(target, draft, ids, shared_kv_states):
    """Draft logits for one MTP step after ``ids``: [target embedding of the bonus ; target hidden]."""
    out = target(input_ids=ids, output_hidden_states=True)
    bonus = out.logits[:, -1:].argmax(-1)
    inputs = torch.cat([target.get_input_embeddings()(bonus), out.hidden_states[-1][:, -1:]], dim=-1)
    position = torch.tensor([[ids.shape[1]]])
    return draft(inputs_embeds=inputs, position_ids=position, shared_kv_states=shared_kv_states).logits


# -- 1. identity of shared modules ------------------------------------------------------------


def test_apply_shares_modules_by_identity_without_copies(plan, fresh):
    target, draft = fresh
    own_embedding, own_head = draft.model.embed_tokens, draft.lm_head
    own_weight = own_embedding.weight
    assert own_head.weight is own_weight  # the checkpoint's tie, before surgery
    storages_before = _storages(target, draft)

    report = surgery.apply(plan, draft, target)

    shared = target.model.embed_tokens
    assert draft.model.embed_tokens is shared and draft.get_input_embeddings() is shared
    assert draft.model.embed_tokens.weight is shared.weight  # the same Parameter, not a copy
    assert draft.model.embed_tokens.weight.data_ptr() == shared.weight.data_ptr()
    # the draft's own lm_head is kept, still tied to its ORIGINAL embedding weight
    assert draft.lm_head is own_head and draft.lm_head.weight is own_weight
    assert own_weight is not shared.weight and own_weight.data_ptr() != shared.weight.data_ptr()
    assert draft.lm_head.weight.shape[1] == draft.config.get_text_config().hidden_size != shared.weight.shape[1]
    # no new storage anywhere; the only storages no longer reachable from the pair are the buffers
    # (embed_scale) of the draft's replaced placeholder module; its weight lives on as lm_head's
    storages_after = _storages(target, draft)
    assert set(storages_after) <= set(storages_before)
    assert set(storages_before) - set(storages_after) == {b.untyped_storage().data_ptr() for b in own_embedding.buffers()}
    assert own_weight.untyped_storage().data_ptr() in storages_after

    assert report.applied == [o.id for o in plan.operations] and report.not_applicable == []
    verification = surgery.verify(plan, draft, target, report=report)
    assert verification.ok, verification.failed
    names = [c.name for c in verification.checks]
    assert any("same object, no copy" in n for n in names)
    assert any("tied to the draft's own embedding" in n for n in names)
    assert sum("live target forward" in n for n in names) == len(plan.ops("share_kv")) == 4
    # the default map is transformers' own: no attention was rebound on either side
    assert [layer.self_attn.layer_type for layer in draft.model.layers] == draft.config.get_text_config().layer_types
    assert [layer.self_attn.layer_type for layer in target.model.layers] == target.config.layer_types


def test_plan_for_vllm_refuses_the_hf_adapter(dirs, fresh):
    target, draft = fresh
    vllm_plan = _resolve(dirs, RECIPE, engine="vllm")
    assert vllm_plan.ok and vllm_plan.ops("copy_attrs")
    before = _snapshot(target, draft)
    with pytest.raises(SurgeryError) as exc:
        surgery.apply(vllm_plan, draft, target, context=HFContext())
    assert [d.code for d in exc.value.diagnostics] == ["SRG402"]
    assert "'vllm'" in exc.value.diagnostics[0].message and "--engine hf" in exc.value.diagnostics[0].hint
    with pytest.raises(SurgeryError) as exc:  # no adapter given: none is guessed for vllm
        surgery.apply(vllm_plan, draft, target)
    assert [d.code for d in exc.value.diagnostics] == ["SRG011"]
    _assert_unchanged(before, target, draft)


# -- 2. an explicit map changes what the draft reads -------------------------------------------


@torch.no_grad()
def test_explicit_map_logits_equal_reference_from_named_target_layers(dirs, plan, explicit_plan, fresh):
    from transformers import DynamicCache

    target, draft = fresh
    report = surgery.apply(explicit_plan, draft, target)
    assert surgery.verify(explicit_plan, draft, target, report=report).ok
    assert [a.self_attn.layer_type for a in draft.model.layers] != ["sliding_attention"] * 3 + ["full_attention"]

    ids = torch.tensor([bytevocab.encode(PROMPT)])
    assert ids.shape[1] > target.config.sliding_window
    cache = DynamicCache()
    target(input_ids=ids, past_key_values=cache, use_cache=True)
    kv = {j: (cache.layers[j].keys, cache.layers[j].values) for j in (2, 3, 4, 5)}
    wired = _mtp_step_logits(target, draft, ids, build_shared_kv_states(cache, target.config, draft))

    # Reference: an UNWIRED fresh draft; its layer_type keys are set by hand to plain keys that
    # point straight at the named target layers' tensors (0 -> 2, 1 -> 3, 2 -> 2, full 3 -> 4).
    _, ref_draft = load_pair(*dirs)
    for layer, key in zip(ref_draft.model.layers, ("L2", "L3", "L2", "full_attention")):
        layer.self_attn.layer_type = key
    by_hand = {"L2": kv[2], "L3": kv[3], "full_attention": kv[4], "sliding_attention": kv[2]}
    reference = _mtp_step_logits(target, ref_draft, ids, by_hand)
    torch.testing.assert_close(wired, reference, rtol=0, atol=1e-6)

    # A uniform table needs no hand-set keys at all: plain transformers type lookup.
    _, plain = load_pair(*dirs)
    uniform = dataclasses.replace(explicit_plan, operations=tuple(
        dataclasses.replace(o, target_layer=3) if o.op == "share_kv" and o.target_layer != 4 else o
        for o in explicit_plan.operations))
    rollback(report)
    report = surgery.apply(uniform, draft, target)
    uniform_wired = _mtp_step_logits(target, draft, ids, build_shared_kv_states(cache, target.config, draft))
    plain_ref = _mtp_step_logits(target, plain, ids, {"sliding_attention": kv[3], "full_attention": kv[4]})
    torch.testing.assert_close(uniform_wired, plain_ref, rtol=0, atol=1e-6)

    # ... and both differ from what the default rule (sliding -> 5) gives.
    rollback(report)
    surgery.apply(plan, draft, target)
    default = _mtp_step_logits(target, draft, ids, build_shared_kv_states(cache, target.config, draft))
    default_ref = _mtp_step_logits(target, plain, ids, {"sliding_attention": kv[5], "full_attention": kv[4]})
    torch.testing.assert_close(default, default_ref, rtol=0, atol=1e-6)
    assert (wired - default).abs().max() > 1e-3
    assert (uniform_wired - default).abs().max() > 1e-3


# -- 3. atomicity ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def atomic_pair(dirs):
    return load_pair(*dirs)


def _mutation_sequence(plan, target, draft) -> list[str]:
    prepared, _ = prepare_plan(plan, draft, target, HFContext())
    return [p.op.id for p in prepared for _ in p.mutations]


def test_fault_before_every_mutation_rolls_everything_back(explicit_plan, atomic_pair):
    target, draft = atomic_pair
    plan = explicit_plan  # the default map needs no mutation; this one rebinds on both sides
    sequence = _mutation_sequence(plan, target, draft)
    # every mutation is a fault point: share_kv to a non-default target layer is 2 target + 1 draft
    # rebinding (0->2, 1->3, 2->2), 3->4 is transformers' default (none); keep only checks
    assert len(sequence) == 3 * 3 + 1 and sequence[-1] == "share_module:input_embeddings"
    before = _snapshot(target, draft)
    for n, failing in enumerate(sequence):
        seen = []

        def fault(op, mutation, n=n, seen=seen):
            seen.append(op.id)
            if len(seen) == n + 1:
                raise RuntimeError(f"injected fault #{n}")

        with pytest.raises(SurgeryError) as exc:
            apply_plan(plan, draft, target, fault=fault)
        (d,) = exc.value.diagnostics
        assert d.code == "SRG403", d
        assert f"operation {failing} failed" in d.message and f"injected fault #{n}" in d.message
        assert f"{n} mutation(s) rolled back" in d.message and "rollback problems" not in d.message
        assert seen == sequence[: n + 1]
        _assert_unchanged(before, target, draft)

    # the pair is still good: a clean apply verifies, and rollback() restores it exactly
    report = apply_plan(plan, draft, target)
    assert verify_plan(plan, draft, target, report=report).ok
    rollback(report)
    _assert_unchanged(before, target, draft)


def test_failure_inside_a_mutation_is_rolled_back_too(explicit_plan, atomic_pair, monkeypatch):
    """A mutation that raises after it has already rebound its attribute is undone as well."""
    target, draft = atomic_pair
    plan = explicit_plan
    sequence = _mutation_sequence(plan, target, draft)
    before = _snapshot(target, draft)
    real_apply = SetAttr.apply
    for n, failing in enumerate(sequence):
        calls = []

        def half_apply(self, n=n, calls=calls):
            real_apply(self)  # the rebind happened ...
            calls.append(self.label)
            if len(calls) == n + 1:
                raise RuntimeError(f"failed after rebinding #{n}")  # ... then it fails

        monkeypatch.setattr(SetAttr, "apply", half_apply)
        with pytest.raises(SurgeryError) as exc:
            apply_plan(plan, draft, target)
        monkeypatch.setattr(SetAttr, "apply", real_apply)
        (d,) = exc.value.diagnostics
        assert d.code == "SRG403" and f"operation {failing} failed" in d.message
        _assert_unchanged(before, target, draft)


def test_phase_one_failure_touches_nothing(plan, atomic_pair):
    target, draft = atomic_pair
    before = _snapshot(target, draft)
    last_kv = plan.ops("share_kv")[-1]  # draft 3 (full) -> target 4; earlier ops are all valid
    assert last_kv.target_layer == 4
    first_shared = target.config.num_hidden_layers - target.config.num_kv_shared_layers
    assert target.config.layer_types[9] == "full_attention" and 9 >= first_shared

    def with_target_layer(j):
        return dataclasses.replace(plan, operations=tuple(
            dataclasses.replace(o, target_layer=j) if o is last_kv else o for o in plan.operations))

    with pytest.raises(SurgeryError) as exc:  # KV-shared target layer: holds no K/V of its own
        apply_plan(with_target_layer(9), draft, target)
    assert [d.code for d in exc.value.diagnostics] == ["SRG307"]
    assert "KV-shared" in exc.value.diagnostics[0].message
    _assert_unchanged(before, target, draft)

    with pytest.raises(SurgeryError) as exc:  # a layer the live target does not have: coded, no IndexError
        apply_plan(with_target_layer(42), draft, target)
    assert [d.code for d in exc.value.diagnostics] == ["SRG402"]
    _assert_unchanged(before, target, draft)


# -- 5. a wrong KV map lowers acceptance, never the output --------------------------------------


def test_wrong_kv_map_through_the_applier_lowers_acceptance_only(plan, wrong_plan, fresh):
    from surgery.hf.specdec import decode_check

    target, draft = fresh
    assert default_kv_sources(target.config)["sliding_attention"] == 5
    prompts = [bytevocab.encode(p) for p in held_out_prompts()[:2]]  # text the pair never trained on

    report = surgery.apply(plan, draft, target)
    good = decode_check(target, draft, prompts, 16, 3)
    rollback(report)
    report = surgery.apply(wrong_plan, draft, target)
    assert surgery.verify(wrong_plan, draft, target, report=report).ok  # wired as told: the map is what is wrong
    bad = decode_check(target, draft, prompts, 16, 3)

    assert good["identical"] and bad["identical"], (good["mismatched_prompts"], bad["mismatched_prompts"])
    assert good["acceptance_rate"] >= 0.5, good  # the bar at 3 draft tokens; 0.70 measured here
    assert bad["acceptance_rate"] <= good["acceptance_rate"] - 0.3, (good["acceptance_rate"], bad["acceptance_rate"])
    assert bad["target_forwards"] > good["target_forwards"]


# -- 6. issue 12 item 4: wiring under transformers' own shared_kv_states contract ----------------


def _share_kv_checks(plan, draft, target, report):
    checks = surgery.verify(plan, draft, target, report=report).checks
    return {c.op_id: c.ok for c in checks if c.op_id.startswith("share_kv")}


def test_verification_fails_on_an_untouched_pair_when_the_map_differs(explicit_plan, plan, fresh, monkeypatch):
    """The share_kv check runs the real target forward and looks at what it publishes under the key
    each draft layer reads: it fails wherever the live pair would read another layer than the plan's."""
    import surgery.live.kvrouting as kvrouting

    target, draft = fresh
    # the check must not go through our own routing code
    monkeypatch.setattr(kvrouting, "build_shared_kv_states", lambda *a, **k: pytest.fail("routing code used"))
    report = surgery.apply(explicit_plan, draft, target)
    assert all(_share_kv_checks(explicit_plan, draft, target, report).values())
    rollback(report)  # untouched again: transformers' default map (sliding -> 5, full -> 4)
    assert _share_kv_checks(explicit_plan, draft, target, report) == {
        "share_kv:kv_source:0->2": False, "share_kv:kv_source:1->3": False, "share_kv:kv_source:2->2": False,
        "share_kv:kv_source:3->4": True}  # 3 -> 4 IS transformers' default
    # half-wired: draft rebound but the target does not publish (and the reverse) fails too
    report = surgery.apply(explicit_plan, draft, target)
    target.model.layers[2].self_attn.store_full_length_kv = False
    assert _share_kv_checks(explicit_plan, draft, target, report)["share_kv:kv_source:0->2"] is False
    rollback(report)
    report = surgery.apply(explicit_plan, draft, target)
    draft.model.layers[1].self_attn.layer_type = "sliding_attention"
    assert _share_kv_checks(explicit_plan, draft, target, report)["share_kv:kv_source:1->3"] is False
    rollback(report)
    # the default plan on the untouched pair: transformers' own wiring is the plan's, the check says so
    default_report = surgery.apply(plan, draft, target)
    rollback(default_report)
    assert all(_share_kv_checks(plan, draft, target, default_report).values())


@torch.no_grad()
@pytest.mark.filterwarnings("ignore::FutureWarning")  # 5.19 requires input_ids / model_kwargs and deprecates them
def test_wired_draft_runs_in_transformers_own_mtp_drafting(dirs, explicit_plan, fresh):
    """transformers' own MTP candidate generator (SinglePositionMultiTokenCandidateGenerator), fed the
    target's own outputs, drafts with the explicit map: its draft logits equal a reference computed
    from the named target layers' K/V on an unwired draft."""
    from transformers import DynamicCache, GenerationConfig
    from transformers.generation.candidate_generator import SinglePositionMultiTokenCandidateGenerator

    target, draft = fresh
    surgery.apply(explicit_plan, draft, target)
    ids = torch.tensor([bytevocab.encode(PROMPT)])
    cache = DynamicCache(config=target.config)  # what transformers' generate uses (sliding layers windowed)
    out = target(input_ids=ids, past_key_values=cache, use_cache=True, output_hidden_states=True,
                 return_shared_kv_states=True)
    assert {"surgery.kv.2", "surgery.kv.3"} <= set(out.shared_kv_states)
    bonus = out.logits[:, -1:].argmax(-1)
    draft.generation_config.num_assistant_tokens = 1
    gen = SinglePositionMultiTokenCandidateGenerator(
        input_ids=ids, assistant_model=draft, target_model_input_embeddings=target.get_input_embeddings(),
        generation_config=GenerationConfig(max_length=ids.shape[1] + 8), model_kwargs={})
    _, logits = gen.get_candidates(torch.cat([ids, bonus], 1), model_kwargs={}, model_outputs=out,
                                   is_first_iteration=False, n_last_matches=0)

    full = DynamicCache()
    target(input_ids=ids, past_key_values=full, use_cache=True)
    kv = {j: (full.layers[j].keys, full.layers[j].values) for j in (2, 3, 4, 5)}
    _, ref_draft = load_pair(*dirs)
    for layer, key in zip(ref_draft.model.layers, ("L2", "L3", "L2", "full_attention")):
        layer.self_attn.layer_type = key
    reference = _mtp_step_logits(target, ref_draft, ids, {"L2": kv[2], "L3": kv[3], "full_attention": kv[4],
                                                          "sliding_attention": kv[5]})
    torch.testing.assert_close(logits[:, :1], reference, rtol=0, atol=1e-5)
    default = _mtp_step_logits(target, ref_draft, ids, {"L2": kv[5], "L3": kv[5], "full_attention": kv[4],
                                                        "sliding_attention": kv[5]})
    assert (logits[:, :1] - default).abs().max() > 1e-3
