"""Which aux hidden-state ids an engine release can capture: the card's `wiring.capturable_ids`, per release.

Why a module of its own: the range changed between releases (SGLang up to 0.5.21 captures ids 1..L-1,
from 0.5.22 0..L-1: engine card), so every reader (the plan-time SRG362 check, the live performer,
surgery/sglang/rules.py and compare.py) must judge the same release the same way. The release judged is
the one given (`--engine-version`), else the installed engine's, else the newest the card read; a
release the card has no range for is judged with the nearest older one's and says so (SRG370), never
silently with some default. No engine import: the installed version is read from its dist-info folder's name.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..resources import load_data
from ..text.diagnostics import INFO, WARNING, Diagnostic, Location, diag
from .cards import ENGINES, card
from . import releases
from .releases import version_key

#: span -> the first id it captures; every span ends at L-1 (L, the final pre-norm state, is past the loop)
FIRST_ID = {"1..L-1": 1, "0..L-1": 0}


@dataclass(frozen=True)
class Judged:
    """The capture range used for one judgement: `span` None means not checked (no data for the release)."""

    engine: str
    asked: str | None  # the release as given / installed; None: none known
    release: str | None  # the card release whose range is used
    span: str | None
    source: str | None  # the card's file:line evidence for that release
    line: Diagnostic | None  # SRG370 / SRG371, or None when the card has the release itself

    def ids(self, num_layers: int) -> range | None:
        return None if self.span is None else range(FIRST_ID[self.span], num_layers)

    def label(self) -> str:
        if self.release == self.asked:
            return f"{self.engine} {self.release}"
        if self.asked is None:
            return f"{self.engine} {self.release} (no release given)"
        return f"{self.engine} {self.asked} (range of {self.release})"


def installed_version(engine: str) -> str | None:
    """The installed engine's version, without importing it (surgery/engine/releases.py `installed_version`)."""
    return releases.installed_version(engine)


def spans(engine: str) -> dict:
    wiring = card(engine).wiring if engine in ENGINES else None
    return dict(wiring.capturable_ids) if wiring is not None else {}


def judged(engine: str, version: str | None, location: Location | None = None) -> Judged | None:
    """The range `engine` at `version` captures (None: `version` None -> the installed one, else the newest
    the card read). Returns None for an engine whose card states no capture range (vLLM: every id 0..L)."""
    table = spans(engine)
    if not table:
        return None
    known = sorted(table, key=version_key)
    asked = version or installed_version(engine)
    if asked is None:
        newest = known[-1]
        return Judged(engine, None, newest, table[newest].ids, table[newest].source,
                      diag("SRG371", f"no {engine} release given (--engine-version) and none installed: aux ids "
                           f"judged for {newest}, the newest release surgery read ({table[newest].ids}; "
                           + ", ".join(f"{v}: {table[v].ids}" for v in known) + ")",
                           location or Location(key_path="--engine-version"), severity=INFO))
    release = str(asked).split("+", 1)[0]
    if release in table:
        return Judged(engine, release, release, table[release].ids, table[release].source, None)
    key = version_key(release)
    older = [v for v in known if key and version_key(v) <= key]
    if not older:
        return Judged(engine, release, None, None, None,
                      diag("SRG370", f"{engine} {asked}: surgery read no capture range for it or any older release "
                           f"({known[0]}-{known[-1]}): the aux ids were not checked against it",
                           location or Location(key_path="--engine-version"), severity=WARNING))
    nearest = older[-1]
    return Judged(engine, release, nearest, table[nearest].ids, table[nearest].source,
                  diag("SRG370", f"{engine} {asked}: surgery read no capture range for it "
                       f"({known[0]}-{known[-1]}): judged with {nearest}'s ({table[nearest].ids}); what "
                       f"{release} captures is unknown", location or Location(key_path="--engine-version"), severity=WARNING))


def sglang_aux_ids_read(draft_config: dict) -> list[int] | None:
    """The aux ids SGLang reads from a draft config: the nested `eagle_config` ones only
    (spec_aux_hidden_state.py `_resolve_eagle_aux_hidden_state`; card `aux_ids_read_from`); None -> its
    default. Here, below the checks, so plan-time checks (SRG779) and surgery/sglang/rules.py share it."""
    *parents, key = card("sglang").wiring.aux_ids_read_from.split(".")
    nested = draft_config
    for part in parents:
        nested = nested.get(part) if isinstance(nested, dict) else None
    if not isinstance(nested, dict) or key not in nested:
        return None
    return nested[key]


def sglang_layers_to_capture(target_model_type: str, num_layers: int, layer_ids: list[int] | None) -> list[int]:
    """What the target's `set_eagle3_layers_to_capture(layer_ids)` stores in `layers_to_capture` (SGLang
    captures the input of each of those layers: vLLM's id convention)."""
    if layer_ids is None:
        return [2, num_layers // 2, num_layers - 3]
    wiring = card("sglang").wiring
    rule = wiring.aux_shift.get(target_model_type, wiring.aux_shift["default"])
    if rule == "first_id_is_1":
        return [v + 1 for v in layer_ids] if layer_ids and layer_ids[0] == 1 else list(layer_ids)
    return [v + 1 for v in layer_ids]


def sglang_final_boundary(release: str | None, target_model_type: str | None) -> str | None:
    """Where SGLang `release`'s target class keeps EAGLE-3 ids stated as hidden-state boundaries (largest id =
    L, the final state, captured after the last layer: gpt_oss.py from 0.5.17, sglang#32334), as file:line read
    from its wheel (releases/sglang.json start.catalogue4, surgery/data/catalogue4.yaml); None where it does not."""
    rule = (load_data("data/catalogue4.yaml").get("sglang") or {}).get("eagle_config_boundaries") or {}
    if not release or target_model_type not in (rule.get("target_model_types") or ()):
        return None
    facts = releases.release_data("sglang")["releases"].get(release) or {}
    return (((facts.get("start") or {}).get("catalogue4") or {}).get("eagle_config_boundaries") or {}).get("final_boundary")


def _dspark_v4_rule(name: str) -> dict:
    return (load_data("data/sglang_limits.yaml").get("rules") or {}).get(name) or {}


def sglang_builds_dspark_v4(draft_raw: dict | None) -> bool:
    """Whether SGLang builds a DSPARK draft of this config as DeepSeek-V4's own DSpark drafter,
    DeepseekV4ForCausalLMDSpark: architectures[0] DeepseekV4ForCausalLM and a dspark_* bundle key set
    (configs/model_config.py _config_draft_model, every wheel 0.5.16-0.5.23; sglang_limits.yaml
    `dspark_v4_markov_rank`)."""
    rule = _dspark_v4_rule("dspark_v4_markov_rank")
    if not isinstance(draft_raw, dict) or not rule:
        return False
    archs = draft_raw.get("architectures") or []
    return bool(archs) and archs[0] == rule["architecture"] and \
        any(draft_raw.get(k) is not None for k in rule["bundle_keys"])


def sglang_dspark_v4_capture(release: str | None, draft_raw: dict | None, recipe_method: str | None) -> str | None:
    """Where SGLang `release`'s DeepseekV4ForCausalLM captures DeepSeek-V4's DSpark drafter's features itself
    (set_dspark_layers_to_capture: layer i's output, i in 0..L-1, ids 1..L in the plan's numbering for a
    deepseek_v4 drafter), as file:line read from its wheel (releases/sglang.json start.limits.dspark_v4_capture);
    None where the plan is not that drafter's (a dspark plan of such a config, model type deepseek_v4) or the
    release has no such code."""
    if recipe_method != "dspark" or not release or not sglang_builds_dspark_v4(draft_raw) \
            or draft_raw.get("model_type") != "deepseek_v4":
        return None
    facts = releases.release_data("sglang")["releases"].get(release) or {}
    return ((facts.get("start") or {}).get("limits") or {}).get("dspark_v4_capture")
