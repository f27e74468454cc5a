"""The guard's vocabulary: its rule kinds and their codes, the keys of a `guard:` mapping with their bounds, and
the one maker of SRG475 (a bad key, located under `additional_config.surgery.guard`).

Why a module of its own: the settings (settings.py), the expectation (expectation.py) and the judging (judge.py)
all name these keys and codes; kept here, below all three, each reads them without importing another."""
from __future__ import annotations

from ..text.diagnostics import Location, SurgeryError, diag


KINDS = ("collapse", "break_even", "shape", "drift", "expectation")


CODES = {"collapse": "SRG470", "break_even": "SRG471", "shape": "SRG472", "drift": "SRG473",
         "expectation": "SRG474"}


ACTIONS = ("warn", "fail")


EXPECT_KEYS = ("mean_length", "acceptance", "per_position")


# where an expectation comes from (docs: fmt of issue 55): a measured run (release, card), the head's model
# card, or the user's own figure; the SRG474 line names it, so a release regression reads as one
SOURCE_KINDS = ("measured", "model_card", "user")


WHERE = "additional_config.surgery.guard"


NUMBERS = {  # key -> (type, lowest, highest, lowest included)
    "floor": (float, 0.0, 1.0, True), "min_drafts": (int, 1, None, True), "window": (int, 1, None, True),
    "check_every": (int, 1, None, True), "shape_margin": (float, 0.0, 1.0, True),
    "cliff_ratio": (float, 0.0, 1.0, True), "min_support": (int, 1, None, True),
    "drift_points": (float, 0.0, 100.0, True), "expect_tolerance": (float, 0.0, 1.0, True),
    "expect_z": (float, 0.0, 10.0, True),
    "clear_after": (int, 1, None, True),
    "verify_cost": (float, 0.0, None, True), "round_cost": (float, 1.0, None, True),
    "draft_cost": (float, 0.0, None, True),
}


KEYS = ("enabled", "action", "expect", "bands", "canary") + tuple(NUMBERS)


CANARY_KEYS = ("prompts", "tokens")


def invalid(key: str, message: str, hint: str | None = None) -> SurgeryError:
    return SurgeryError(diag("SRG475", message, Location(key_path=f"{WHERE}.{key}" if key else WHERE), hint))
