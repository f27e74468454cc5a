"""DSpark's block layout, per vLLM release (issue 58): which config key the release reads to choose it.

A DSpark draft is trained in one of two block layouts, and served in the other it still runs, still gives
the target's greedy output, and accepts a fraction of what it should:

- anchor-first (DeepSeek's own drafts): N query slots `[anchor, mask, ...]`, every slot a prediction, slot i
  predicts the token after its position;
- fill-in (DFlash's block; speculators files, our miniature): 1 + N slots, the anchor is the bonus token
  and the N masks are the drafts.

vLLM's DSparkSpeculator picks it from one key of the draft's config.json, and the key changed: 0.25-0.26
read `dspark_bonus_anchor` (default False: anchor-first); 0.27 renamed it `sample_from_anchor` (default True:
anchor-first) and no longer reads the old key. A config that states the fill-in layout with the old key only
is served anchor-first by 0.27-0.34: draft 0 comes from the anchor's slot (never trained), draft i from the
mask that was trained for draft i-1. The miniature pair did exactly this: 80.8 % on 0.26, 25.3 % on 0.34.

Which key and default each release reads, and what its speculators reader writes into it, are facts read
from each wheel (tools/releasefacts.py `vllm_dspark_facts`, surgery/data/releases/vllm.json `dspark`).

- SRG740 (error) `surgery validate --engine-version V`: the layout the config states is not the one release
  V will run (a key V does not read, keys that disagree, or a speculators file V's reader overrides).
- SRG741 (error) live: the running engine's DSpark speculator runs another layout than the draft's config
  states (the start check reads the config vLLM built; `surgery audit` reads the speculator's own
  `sample_from_anchor`).
"""
from __future__ import annotations

from typing import Any

from ..text.diagnostics import ERROR, Diagnostic, Location, diag
from ..engine.releases import release
from ..formats import original_config

LAYOUT_KEYS = {"sample_from_anchor": False, "dspark_bonus_anchor": True}  # key -> negated (True: fill-in)
HINT = ('state the layout with both keys, so every release reads it: for a draft trained with the anchor as '
        'the bonus token (DFlash\'s 1 + N block), "sample_from_anchor": false and "dspark_bonus_anchor": true at '
        'the top level of config.json; for an anchor-first draft, true and false')


def layout_name(anchor_first: bool) -> str:
    return ("anchor-first (N slots, the anchor's own output is draft 0)" if anchor_first
            else "fill-in (1 + N slots, the anchor is the bonus token)")


def is_dspark(method: str | None, architectures) -> bool:
    """Whether vLLM runs the draft through its DSparkSpeculator: method dspark, or (no method given) a DSpark
    draft architecture (the method vLLM would infer)."""
    if method:
        return method == "dspark"
    return any(isinstance(a, str) and "DSpark" in a for a in architectures or ())


def stated_layout(raw: dict) -> tuple[dict[str, bool], bool | None]:
    """({key: anchor_first} for each layout key the config states at its top level, the layout they agree on
    or None when they disagree or none is stated)."""
    said = {k: bool(raw[k]) != neg for k, neg in LAYOUT_KEYS.items() if isinstance(raw, dict) and raw.get(k) is not None}
    values = set(said.values())
    return said, (values.pop() if len(values) == 1 else None)


def flag_of(rel) -> dict | None:
    return ((rel.facts.get("dspark") or {}) if rel is not None else {}).get("layout_flag")


def runs_anchor_first(flag: dict, config: Any) -> bool:
    """The release's own expression (`[not] getattr(hf_config, key, default)`) on a config (dict or object)."""
    value = config.get(flag["key"], flag["default"]) if isinstance(config, dict) else \
        getattr(config, flag["key"], flag["default"])
    return bool(value) != bool(flag["negated"])


def _speculators_layout(rel, original: dict) -> tuple[bool | None, str]:
    """(the layout the release's speculators reader gives a `dspark` file, where), or (None, '') unknown."""
    spec = ((rel.facts.get("dspark") or {}).get("speculators")) or {}
    flag = flag_of(rel)
    if "constant" in spec and spec["constant"] is not None:
        return bool(spec["constant"]) != bool(flag["negated"]), spec.get("at") or ""
    if "file_key" in spec:
        value = original.get(spec["file_key"], spec["file_default"])
        return (bool(value) != bool(spec.get("negated"))) != bool(flag["negated"]), spec.get("at") or ""
    return None, ""


def layout_finding(rel, draft, method: str | None) -> Diagnostic | None:
    """SRG740 for `surgery validate --engine-version`: the config's stated layout against the release's reading."""
    flag = flag_of(rel)
    raw = draft.raw or {}
    if flag is None or not is_dspark(method, draft.architectures):
        return None
    original = original_config(raw)
    source = draft.source
    if isinstance(original, dict) and original.get("speculators_model_type") == "dspark" \
            and "speculators_config" in original:
        if original.get("sample_from_anchor") is None:
            return None  # the file states nothing; the reader's default is what every release of it gives
        wanted = bool(original["sample_from_anchor"])
        got, at = _speculators_layout(rel, original)
        if got is None or got == wanted:
            return None
        return diag("SRG740", f"the speculators file says sample_from_anchor: {str(wanted).lower()} "
                    f"({layout_name(wanted)}), but {rel.label()}'s speculators reader writes the "
                    f"{layout_name(got)} layout whatever the file says ({at}): its DSpark speculator drafts in the "
                    "layout the head was not trained for; outputs stay the target's, acceptance collapses",
                    Location(source, key_path="sample_from_anchor"),
                    hint="serve on vLLM 0.27 or later, whose reader copies the file's sample_from_anchor",
                    severity=ERROR)
    said, wanted = stated_layout(raw)
    if not said:
        return None  # nothing stated: every release defaults to anchor-first
    got = runs_anchor_first(flag, raw)
    reads = f"{flag['key']} (default {flag['default']}, {flag['at']})"
    if wanted is None:
        shown = ", ".join(f"{k}: {str(raw[k]).lower()}" for k in said)
        return diag("SRG740", f"the DSpark layout keys disagree ({shown}): {rel.label()} reads {reads} only, "
                    f"so it drafts in the {layout_name(got)} layout; another release reads the other key",
                    Location(source, key_path=flag["key"]), hint=HINT, severity=ERROR)
    if got == wanted:
        return None
    stated = next(iter(said))
    return diag("SRG740", f"{stated}: {str(raw[stated]).lower()} states the {layout_name(wanted)} layout, but "
                f"{rel.label()} reads {reads} and never {stated}: its DSpark speculator drafts this head in the "
                f"{layout_name(got)} layout. Outputs stay the target's and acceptance collapses, with no error "
                "(issue 58: the miniature pair 80.8 % on vLLM 0.26, 25.3 % on 0.34)",
                Location(source, key_path=stated), hint=HINT, severity=ERROR)


def live_layout_finding(anchor_first: bool, draft, where: str, how: str) -> Diagnostic | None:
    """SRG741: the layout the running engine uses (`anchor_first`, read from vLLM's own objects, `how`)
    against the one the draft's config.json states."""
    said, wanted = stated_layout(original_config(draft.raw or {}) if draft is not None else {})
    if wanted is None or bool(anchor_first) == wanted:
        return None
    shown = ", ".join(f"{k}: {str((original_config(draft.raw or {}))[k]).lower()}" for k in said)
    return diag("SRG741", f"live engine: the DSpark speculator runs the {layout_name(bool(anchor_first))} layout "
                f"({how}), but the draft's config states the {layout_name(wanted)} layout ({shown}): outputs stay "
                "the target's, acceptance collapses", Location(where), hint=HINT, severity=ERROR)


def start_finding(vllm_config: Any, draft, version: str | None) -> Diagnostic | None:
    """SRG741 at engine start: the running release's reading (its facts) of the draft config vLLM built,
    the very object its DSparkSpeculator reads (`draft_model_config.hf_config`)."""
    spec = getattr(vllm_config, "speculative_config", None)
    if spec is None or not version or not is_dspark(getattr(spec, "method", None), ()):
        return None
    rel, _ = release("vllm", version)
    flag = flag_of(rel)
    hf_config = getattr(getattr(spec, "draft_model_config", None), "hf_config", None)
    if flag is None or hf_config is None:
        return None
    return live_layout_finding(runs_anchor_first(flag, hf_config), draft, "speculative_config.draft_model_config",
                               f"vLLM {version} reads {flag['key']} from the draft config it built, {flag['at']}")


def audit_finding(proposer: Any, draft) -> Diagnostic | None:
    """SRG741 in `surgery audit`: the speculator's own `sample_from_anchor` (DSparkSpeculator.__init__)."""
    value = getattr(proposer, "sample_from_anchor", None)
    method = getattr(getattr(proposer, "speculative_config", None), "method", None)
    if not isinstance(value, bool):
        return None
    if type(proposer).__name__ != "DSparkSpeculator" and not is_dspark(method, ()):
        return None  # DFlash's speculators also carry the attribute (always False there)
    return live_layout_finding(value, draft, "DSparkSpeculator.sample_from_anchor",
                               f"its sample_from_anchor is {value}")
