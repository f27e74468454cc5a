"""`--ablate` in vLLM without an engine: how each recipe step is removed on a live engine
(surgery/commands/vllm_ablation.step_removals), the field rows merged with identical step removals, and the
rewire itself on stand-in modules (surgery/vllm/ablation.py)."""
from __future__ import annotations

import pytest
import torch

from surgery.text.diagnostics import SurgeryError
from surgery.pairs import builtin_pair
from surgery.commands import vllm_ablation
from surgery.vllm import ablation, decoding


def steps(*rows):
    return [{"step": i, "op": op, "role": role, "label": f"{op} {role}"} for i, (op, role) in enumerate(rows)]


def test_step_removals_follow_the_live_wiring():
    rows = vllm_ablation.step_removals(
        steps(("share_module", "input_embeddings"), ("share_module", "lm_head"), ("keep", "lm_head"),
              ("capture_hidden_states", None), ("share_kv", None)),
        {"shared_roles": {"input_embeddings": True, "lm_head": False}})
    assert rows[0]["rewire"] == {"input_embeddings": "random"}
    assert "rewire" not in rows[1] and "its own here" in rows[1]["note"]  # nothing was shared: no row to run
    assert rows[2]["rewire"] == {"lm_head": "target"}  # a kept head overwritten: vllm#28549
    assert rows[3]["drop_config_keys"] == [vllm_ablation.AUX_IDS_KEY]
    assert "not ablated" in rows[4]["note"]


def test_field_row_equal_to_a_step_removal_runs_once(monkeypatch):
    """EAGLE-3's 'default aux ids' row IS the capture_hidden_states removal: one engine, both names."""
    pair = builtin_pair("eagle3")
    calls = []

    def fake_run(target, draft, method, ids, reference, **kw):
        calls.append((str(draft), kw.get("rewire")))
        return {"decode": {"acceptance_rate": 0.1, "identical": True, "drafted": 10, "accepted": 1,
                           "accepted_per_position": [1, 0, 0]}, "rewired": [], "inspect": {}}

    monkeypatch.setattr(decoding, "speculative_run", fake_run)
    main = {"plugin": {"steps": steps(("capture_hidden_states", None), ("share_module", "input_embeddings"))},
            "inspect": {"shared_roles": {"input_embeddings": True, "lm_head": False}}}
    rows = vllm_ablation.ablation_rows(main, pair, pair.target, pair.draft, "eagle3", [[2, 40]], [[1]], 3, 4, lambda m: None)
    names = [r["variant"] for r in rows]
    assert any(n.startswith("without step 0") and "default aux ids" in n for n in names), names
    assert sum("default aux ids" in n for n in names) == 1
    assert len(calls) == len(rows)  # every row ran its own engine, none twice
    assert {"lm_head": "target"} in [c[1] for c in calls]


class Head(torch.nn.Module):
    def __init__(self, rows=8):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(rows, 4), requires_grad=False)
        self.quant_method = self
        self.repacked = 0

    def process_weights_after_loading(self, layer):
        layer.repacked += 1


class Stand(torch.nn.Module):
    def __init__(self, shared_head=None):
        super().__init__()
        self.model = torch.nn.Module()
        self.model.embed_tokens = Head()
        self.lm_head = shared_head or Head()


def test_rewire_target_and_random_on_stand_ins():
    target = Stand()
    draft = Stand(shared_head=target.lm_head)
    lines = ablation.rewire(draft, target, {"input_embeddings": "target", "lm_head": "random"}, seed=3)
    assert draft.model.embed_tokens is target.model.embed_tokens
    assert draft.lm_head is not target.lm_head and not torch.equal(draft.lm_head.weight, target.lm_head.weight)
    assert draft.lm_head.repacked == 1  # CPU vLLM's packed GEMM weights rebuilt from the new weight
    assert torch.equal(target.lm_head.weight, torch.ones(8, 4))  # the target is never touched
    assert len(lines) == 2


@pytest.mark.parametrize("spec", [{"mtp_shared_head": "random"}, {"nonsense_role": "random"}, {"lm_head": "zeros"}])
def test_a_row_that_would_change_nothing_is_an_error(spec):
    with pytest.raises(SurgeryError) as e:
        ablation.rewire(Stand(), Stand(), spec)
    assert e.value.diagnostics[0].code == "SRG460"


def test_capture_removal_drops_a_dflash_drafts_own_ids_too(tmp_path):
    """A DFlash draft names its layers in dflash_config.target_layer_ids: removing the capture step
    drops those as well (else vLLM would still read them and the row would change nothing), and
    ablated_draft removes the nested key."""
    cfg = {"dflash_config": {"mask_token_id": 3, "target_layer_ids": [0, 6, 7]}}
    (row,) = vllm_ablation.step_removals(steps(("capture_hidden_states", None)), {}, cfg)
    assert row["drop_config_keys"] == [vllm_ablation.AUX_IDS_KEY, "dflash_config.target_layer_ids"]
    import json

    from surgery.pairs import Ablation

    src = tmp_path / "draft"
    src.mkdir()
    (src / "config.json").write_text(json.dumps(cfg))
    out = vllm_ablation.ablated_draft(src, Ablation(name="x", drop_config_keys=tuple(row["drop_config_keys"])), tmp_path)
    assert json.loads((out / "config.json").read_text()) == {"dflash_config": {"mask_token_id": 3}}


def test_peagle_rows_serve_the_head_without_parallel_drafting(monkeypatch):
    """The P-EAGLE pair's field row replaces the pair's speculative_config keys (parallel_drafting
    off); every other row keeps them."""
    pair = builtin_pair("peagle")
    calls = []

    def fake_run(target, draft, method, ids, reference, **kw):
        calls.append(kw.get("spec_extra"))
        return {"decode": {"acceptance_rate": 0.1, "identical": True, "drafted": 10, "accepted": 1,
                           "accepted_per_position": [1, 0, 0]}, "rewired": [], "inspect": {}}

    monkeypatch.setattr(decoding, "speculative_run", fake_run)
    main = {"plugin": {"steps": steps(("capture_hidden_states", None))}, "inspect": {}}
    rows = vllm_ablation.ablation_rows(main, pair, pair.target, pair.draft, "eagle3", [[2, 40]], [[1]], 3, 4,
                                       lambda m: None, spec_extra={"parallel_drafting": True})
    assert {"parallel_drafting": False} in calls and {"parallel_drafting": True} in calls
    assert any("no parallel drafting" in r["variant"] for r in rows)


def test_rows_of_another_built_in_head_run_only_on_the_built_in_target(monkeypatch, tmp_path):
    """The aux-id convention rows serve the second built-in head (ablations.yaml `draft:`): on the
    built-in target they run on that head; on a user's target they are listed, not run."""
    pair = builtin_pair("eagle3")
    calls = []

    def fake_run(target, draft, method, ids, reference, **kw):
        calls.append(str(draft))
        return {"decode": {"acceptance_rate": 0.1, "identical": True, "drafted": 10, "accepted": 1,
                           "accepted_per_position": [1, 0, 0]}, "rewired": [], "inspect": {}}

    monkeypatch.setattr(decoding, "speculative_run", fake_run)
    main = {"plugin": {"steps": []}, "inspect": {}}
    own = [a for a in pair.ablations if a.draft is not None]
    assert own and all(a.draft.is_dir() for a in own)
    rows = vllm_ablation.ablation_rows(main, pair, pair.target, pair.draft, "eagle3", [[2, 40]], [[1]], 3, 4,
                                       lambda m: None)
    by_name = {r["variant"]: r for r in rows}
    assert all(by_name[a.name]["runs"] and by_name[a.name]["draft"] == str(a.draft) for a in own)
    assert len(calls) == len(pair.ablations) and str(own[0].draft) in calls  # the reference row: the head itself
    calls.clear()
    other = tmp_path / "target"
    other.mkdir()
    rows = vllm_ablation.ablation_rows(main, pair, other, pair.draft, "eagle3", [[2, 40]], [[1]], 3, 4, lambda m: None)
    by_name = {r["variant"]: r for r in rows}
    assert all(by_name[a.name]["runs"] is None and "not on this pair" in by_name[a.name]["note"] for a in own)
    assert len(calls) == len(pair.ablations) - len(own)
