"""Issue 48: two operations of a plan that decide the same thing differently are SRG125, an exact
repeat SRG126, both at plan time with both steps' file:line (resolver.check_contradictions, read
from each op kind's `DECIDES`). The broken-recipe corpus (tests/corpus, `contradiction-*`,
`duplicate-*`) covers the recipe shapes with exact locations; this file covers what the corpus'
Gemma pair cannot: a per-layer role without `layers:` against one with, steps whose `when:` exclude
each other, every shipped recipe at pp 1 and pp 2, and that a plan lists no operation twice."""
from __future__ import annotations

from pathlib import Path

import pytest

from surgery import Runtime, facts_from_config, parse_recipe, resolve
from surgery.facts import read_config
from surgery.ops.registry import UNITS
from surgery.resources import shipped_recipes

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "tests" / "data" / "configs"
DSV3 = facts_from_config(read_config(CONFIGS / "DeepSeek-V3.json")[0], "DeepSeek-V3.json")
DEEPSEEK_MTP = (ROOT / "recipes" / "deepseek-mtp.yaml").read_text(encoding="utf-8")


def plan_of(text: str, name: str = "r.yaml", **runtime):
    return resolve(parse_recipe(text, name), DSV3, DSV3, Runtime(**runtime))


def codes(plan, *wanted):
    return [d for d in plan.diagnostics if d.code in wanted]


def with_step(step: str, text: str = DEEPSEEK_MTP) -> str:
    assert text.count("\nengine:\n") == 1
    return text.replace("\nengine:\n", "\n" + step + "\nengine:\n")


def line_of(text: str, marker: str) -> int:
    (n,) = [i + 1 for i, line in enumerate(text.splitlines()) if marker in line]
    return n


def test_the_shipped_deepseek_recipe_has_no_contradiction():
    plan = plan_of(DEEPSEEK_MTP)
    assert plan.ok and not codes(plan, "SRG125", "SRG126")


def test_a_per_layer_role_without_layers_covers_every_layer():
    """`keep: {role: mtp_shared_head}` (no `layers:`: the role at every layer) against the recipe's
    share of each MTP layer's shared_head: one contradiction, both places named."""
    text = with_step("  - keep: {role: mtp_shared_head}")
    (d,) = codes(plan_of(text), "SRG125")
    share_line = line_of(text, "      role: mtp_shared_head") - 1  # the step's `- share_module:` line
    assert f"r.yaml:{share_line}" in d.message and f"r.yaml:{line_of(text, '- keep: {role: mtp_shared_head}')}" in d.message
    assert "share_module" in d.message and "keep" in d.message
    assert d.location.line == line_of(text, "- keep: {role: mtp_shared_head}") and d.location.key_path == "ops[4]"


def test_conditions_that_exclude_each_other_never_meet():
    """share under pp 1, keep under pp > 1 (the shipped EAGLE recipes' shape): valid at both."""
    text = with_step("  - keep: {role: input_embeddings, when: pp_size > 1, otherwise: skip}")
    for pp in (1, 2):
        assert not codes(plan_of(text, pp_size=pp), "SRG125", "SRG126"), pp


def test_a_false_when_is_not_a_duplicate_but_a_true_one_is():
    step = "  - share_module: {role: lm_head, from: target, if_draft_has_own: share, when: pp_size > 1, otherwise: skip}"
    text = with_step(step)
    assert not codes(plan_of(text), "SRG126")
    (d,) = codes(plan_of(text, pp_size=2), "SRG126")
    assert d.severity == "error" and "both give share_module" in d.message


@pytest.mark.parametrize("path", shipped_recipes(), ids=lambda p: p.name)
@pytest.mark.parametrize("pp", [1, 2])
def test_no_shipped_recipe_contradicts_itself_on_any_runtime(path, pp):
    """The shipped recipes rely on no duplicate (so refusing them breaks none): each resolves with no
    SRG125 / SRG126 on its own test pair (the DeepSeek-V3 config where it applies, else whatever
    diagnostics the mismatch gives: only these two codes are looked at), at pp 1 and pp 2."""
    plan = resolve(parse_recipe(path.read_text(encoding="utf-8"), path.name), DSV3, DSV3, Runtime(pp_size=pp))
    assert not codes(plan, "SRG125", "SRG126"), [d.render() for d in codes(plan, "SRG125", "SRG126")]


def test_every_op_kind_declares_what_it_decides():
    """The check is generic: each kind's spec names its subject and key fields (the registry refuses
    a kind without; tests/ops/test_registry.py). keep and share_module decide the same thing."""
    decides = {kind: unit.spec.DECIDES for kind, unit in UNITS.items()}
    assert all(subject for subject, _ in decides.values()), decides
    assert decides["keep"] == decides["share_module"]
    assert len({subject for subject, _ in decides.values()}) == len(decides) - 1
