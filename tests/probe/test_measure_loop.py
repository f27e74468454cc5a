"""The per-prompt loop both engines' measurers share (surgery/probe/measure.py): each prompt's result
recorded in order, `keep_going` asked after each, the early stop marked only when prompts were left.
No engine: `decode_one` is a stand-in; milliseconds."""
from __future__ import annotations

from surgery.probe.measure import decode_prompts, error_text, release
from surgery.probe.stats import Measured, PromptResult


def decoder(seen):
    def decode_one(ids):
        seen.append(list(ids))
        return PromptResult(drafted=3 * len(ids), accepted=len(ids), rounds=len(ids))
    return decode_one


def test_every_prompt_in_order_when_kept_going():
    seen, asked = [], []
    out = decode_prompts(Measured(), [[1], [2, 3], [4, 5, 6]], decoder(seen),
                         lambda m: asked.append(len(m.prompts)) or True)
    assert seen == [[1], [2, 3], [4, 5, 6]] and asked == [1, 2, 3]
    assert [p.drafted for p in out.prompts] == [3, 6, 9] and not out.stopped_early


def test_stop_after_the_prompt_keep_going_refuses():
    seen = []
    out = decode_prompts(Measured(), [[1], [2], [3], [4]], decoder(seen), lambda m: len(m.prompts) < 2)
    assert seen == [[1], [2]] and len(out.prompts) == 2 and out.stopped_early


def test_a_refusal_on_the_last_prompt_is_no_early_stop():
    out = decode_prompts(Measured(), [[1], [2]], decoder([]), lambda m: len(m.prompts) < 2)
    assert len(out.prompts) == 2 and not out.stopped_early


def test_error_text_and_release():
    # the engine's own message kept up to 400 characters (escaped), the cut said (issue 66)
    assert error_text(ValueError("x" * 400)) == "ValueError: " + "x" * 388 + "... (412 characters in all)"
    assert error_text(ValueError("short")) == "ValueError: short"
    assert release("surgery-no-such-distribution") is None
    assert release("pytest")  # installed: its version string
