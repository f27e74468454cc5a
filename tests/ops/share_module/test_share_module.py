"""share_module on its own: the plan-time fit checks (from the two configs) and the load-time
`if_draft_has_own` decision (on live weights), both from surgery/ops/share_module/."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from surgery import Runtime, load_recipe, read_facts, resolve  # noqa: E402
from surgery.facts import facts_from_config  # noqa: E402
from surgery.ops.share_module.decide import decide_share  # noqa: E402
from testpaths import E2B, E2B_ASSISTANT  # noqa: E402


def _assistant(**changes):
    import json

    cfg = json.loads((E2B_ASSISTANT / "config.json").read_text() if E2B_ASSISTANT.is_dir()
                     else E2B_ASSISTANT.read_text())
    text = cfg.get("text_config", cfg)
    text.update(changes)
    return facts_from_config(cfg, "assistant")


def test_fit_checks_refuse_a_vocabulary_the_target_does_not_have():
    plan = resolve(load_recipe("gemma4-mtp"), _assistant(vocab_size=1000), read_facts(E2B), Runtime(engine="hf"))
    codes = [d.code for d in plan.errors]
    assert "SRG313" in codes
    assert not plan.ops("share_module")  # the step expands to nothing once refused


def test_fit_checks_pass_on_the_real_pair():
    plan = resolve(load_recipe("gemma4-mtp"), read_facts(E2B_ASSISTANT), read_facts(E2B), Runtime(engine="hf"))
    assert not [d for d in plan.errors if d.code in ("SRG313", "SRG314")]
    assert [o.role for o in plan.ops("share_module")] == ["input_embeddings"]


def test_decision_follows_the_policy_and_the_live_weights():
    a, b = torch.nn.Linear(4, 6, bias=False), torch.nn.Linear(4, 6, bias=False)
    same = torch.nn.Linear(4, 6, bias=False)
    same.weight.data.copy_(b.weight.data)
    assert decide_share("share", a, b, True).share
    assert not decide_share("share_if_identical", a, b, True).share  # own, different weights: never overwritten
    assert decide_share("share_if_identical", same, b, True).share  # identical values
    assert decide_share("share_if_identical", a, b, False).share  # the checkpoint brought none
    assert not decide_share("keep", a, b, None).share  # cannot tell: kept
    assert decide_share("keep", a, b, False).share
