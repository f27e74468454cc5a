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

DeepSeek-V4's own DSpark drafter (its stages ship in the target checkpoint under mtp.*, the draft config is
the target's) is laid out by other keys than the dense Qwen3 form's: with method dspark, every release's
SpeculativeConfig rewrites a draft whose class it does not keep (Qwen3DSparkModel, ...) to model_type
deepseek_v4 and `DSparkDraftModel` (0.30+: `DSparkV41DraftModel` / deepseek_v41 for a V4.1 target), built
by `DSparkDeepseekV4ForCausalLM`, which reads `config.dspark_markov_rank` and `config.dspark_target_layer_ids`
with no default (never Qwen3DSparkModel's `markov_rank` / `target_layer_ids`). `V4_DRAFTER` says where,
per release (tests/checks/test_dspark_v4_layout.py derives it again from each wheel):

- SRG674 (error): a DeepSeek-V4 DSpark drafter config without a positive integer `dspark_markov_rank`
  (the class cannot build its Markov head: AttributeError at model build).
- SRG672 (error): one without `dspark_target_layer_ids` though it names target layers another way (the
  recipe's SRG672 holds, vLLM's class still reads this key alone).
- SRG675 (error, `--device rocm` / `xpu`): a release that has no such class on that platform (0.25.x:
  models/deepseek_v4/__init__.py sets DSparkDeepseekV4ForCausalLM = None there, "DSpark is NVIDIA-only for now";
  surgery/data/catalogue4.yaml `dspark_v4_own_vocab` rows `loads: absent`) refuses the draft when its
  SpeculativeConfig inspects the rewritten DSparkDraftModel (`V4_NO_CLASS`).
"""
from __future__ import annotations

import json
from typing import Any

from ..text.diagnostics import ERROR, Diagnostic, Location, diag
from ..engine.releases import release
from ..formats import original_config
from ..resources import load_data

LAYOUT_KEYS = {"sample_from_anchor": False, "dspark_bonus_anchor": True}  # key -> negated (True: fill-in)
HINT = ('state the layout with both keys, so every release reads it: for a draft trained with the anchor as '
        'the bonus token (DFlash\'s 1 + N block), "sample_from_anchor": false and "dspark_bonus_anchor": true at '
        'the top level of config.json; for an anchor-first draft, true and false')


# the model types vLLM builds as DeepSeek-V4's DSpark drafter under method dspark (as release_rules.py
# DSPARK_V4_TYPES, SRG753; not imported: release_rules imports this module)
V4_TYPES = ("deepseek_v4", "deepseek_v41")
# release -> the model type SpeculativeConfig gives the draft -> (the registry name it sets, vLLM's module, the
# line of `config.dspark_markov_rank`, the line of `config.dspark_target_layer_ids` in <module>/nvidia/dspark.py;
# amd / xpu read the same keys). 0.25-0.29 rewrite every such draft to deepseek_v4 (no V4.1 class, and no
# deepseek_v41 anywhere in those wheels); 0.30+ give a deepseek_v41 target's draft DSparkV41DraftModel.
_V4 = "vllm/models/deepseek_v4/nvidia/dspark.py"
_V41 = "vllm/models/deepseek_v41/nvidia/dspark.py"
V4_DRAFTER: dict[str, dict[str, tuple[str, str, int, int]]] = {
    "0.25.0": {"deepseek_v4": ("DSparkDraftModel", _V4, 119, 67)},
    "0.25.1": {"deepseek_v4": ("DSparkDraftModel", _V4, 119, 67)},
    "0.26.0": {"deepseek_v4": ("DSparkDraftModel", _V4, 119, 67)},
    "0.27.0": {"deepseek_v4": ("DSparkDraftModel", _V4, 136, 76)},
    "0.27.1": {"deepseek_v4": ("DSparkDraftModel", _V4, 136, 76)},
    "0.28.0": {"deepseek_v4": ("DSparkDraftModel", _V4, 137, 77)},
    "0.29.0": {"deepseek_v4": ("DSparkDraftModel", _V4, 137, 77)},
    "0.30.0": {"deepseek_v4": ("DSparkDraftModel", _V4, 137, 77), "deepseek_v41": ("DSparkV41DraftModel", _V41, 135, 79)},
    "0.31.0": {"deepseek_v4": ("DSparkDraftModel", _V4, 171, 101), "deepseek_v41": ("DSparkV41DraftModel", _V41, 146, 83)},
    "0.32.0": {"deepseek_v4": ("DSparkDraftModel", _V4, 176, 104), "deepseek_v41": ("DSparkV41DraftModel", _V41, 148, 83)},
    "0.33.0": {"deepseek_v4": ("DSparkDraftModel", _V4, 172, 100), "deepseek_v41": ("DSparkV41DraftModel", _V41, 144, 79)},
    "0.34.0": {"deepseek_v4": ("DSparkDraftModel", _V4, 172, 100), "deepseek_v41": ("DSparkV41DraftModel", _V41, 158, 84)},
}
V4_RANK_HINT = ('write "dspark_markov_rank" (the Markov head\'s rank; DeepSeek-V4-Flash-DSpark publishes 256) at the '
                'top level of config.json, as the checkpoint\'s mtp.*.markov_head tensors have it')


# --device as vLLM's platform branches name it (models/deepseek_v4/__init__.py: current_platform.is_rocm() / is_xpu();
# cuda and cpu take other branches, SRG675's recipe rule says cpu)
V4_PLATFORMS = {"rocm": "rocm", "hip": "rocm", "xpu": "xpu"}
V4_PLATFORM_NAMES = {"rocm": "ROCm", "xpu": "XPU"}
# release -> where it refuses a DeepSeek-V4 DSpark draft on a platform that has no class (catalogue4.yaml
# `dspark_v4_own_vocab` rows `loads: absent`): SpeculativeConfig.__post_init__ rewrites the draft to DSparkDraftModel
# and calls update_arch_, whose registry.inspect_model_cls (`inspect`) imports vllm.models.deepseek_v4 in a
# subprocess and reads the class's __name__ (`name`: None has none, AttributeError); the inspection returns nothing,
# and the registry raises ValueError (`raise`): V4_REFUSAL. Derived again from each wheel by
# tests/checks/test_dspark_v4_device.py.
V4_NO_CLASS: dict[str, dict[str, str]] = {
    "0.25.0": {"rewrite": "vllm/config/speculative.py:899-908", "inspect": "vllm/config/speculative.py:1093",
               "name": "vllm/model_executor/models/registry.py:777", "load": "vllm/model_executor/models/registry.py:973",
               "raise": "vllm/model_executor/models/registry.py:1061-1064"},
    "0.25.1": {"rewrite": "vllm/config/speculative.py:899-908", "inspect": "vllm/config/speculative.py:1093",
               "name": "vllm/model_executor/models/registry.py:777", "load": "vllm/model_executor/models/registry.py:973",
               "raise": "vllm/model_executor/models/registry.py:1061-1064"},
}
V4_REFUSAL = "Model architectures ['DSparkDraftModel'] failed to be inspected. Please check the logs for more details."


def is_v4_drafter(draft, method: str | None) -> bool:
    """Whether vLLM builds this draft as DeepSeek-V4's own DSpark drafter: method dspark and a DeepSeek-V4 /
    V4.1 config (not a self-contained DSpark class such as Qwen3DSparkModel, which vLLM keeps)."""
    raw = original_config(draft.raw or {}) if draft is not None else {}
    if method != "dspark" or not isinstance(raw, dict) or raw.get("model_type") not in V4_TYPES:
        return False
    archs = [a for a in draft.architectures or () if isinstance(a, str)]
    return not any("DSpark" in a and a not in ("DSparkDraftModel", "DSparkV41DraftModel") for a in archs)


def v4_device_finding(rel, draft, method: str | None, device: str | None) -> Diagnostic | None:
    """SRG675: `--device rocm` / `xpu` on a release whose DeepSeek-V4 package has no DSpark class there (0.25.x)."""
    platform = V4_PLATFORMS.get(str(device or "").lower())
    if rel is None or platform is None or not is_v4_drafter(draft, method):
        return None
    row = V4_DRAFTER.get(rel.version) or {}
    raw = original_config(draft.raw or {})
    _, where, _, _ = row.get(raw.get("model_type")) or row.get("deepseek_v4") or (None, "", 0, 0)
    package = where.split("/")[2] if where.count("/") >= 2 else "deepseek_v4"  # vllm/models/<package>/...
    rows = ((load_data("data/catalogue4.yaml").get("dspark_v4_own_vocab") or {}).get("releases") or {})
    facts = ((rows.get(rel.version) or {}).get(package) or {}).get(platform) or {}
    at = V4_NO_CLASS.get(rel.version)
    if facts.get("loads") != "absent" or at is None:
        return None
    on = V4_PLATFORM_NAMES[platform]
    return diag("SRG675", f"{rel.label().replace('vllm ', 'vLLM ', 1)} has no DeepSeek-V4 DSpark class on {on}: "
                f"vllm/{facts.get('dispatch', 'models/deepseek_v4/__init__.py')} sets DSparkDeepseekV4ForCausalLM = None there "
                "(\"DSpark is NVIDIA-only for now\"). Its SpeculativeConfig still rewrites this method-dspark draft to "
                f"DSparkDraftModel and inspects it ({at['rewrite']}, {at['inspect']}); the registry's inspection loads the "
                f"class, None ({at['load']}), and reads its __name__ ({at['name']}: AttributeError: 'NoneType' object "
                "has no attribute '__name__', "
                f"logged as \"Error in inspecting model architecture 'DSparkDraftModel'\"), and the release refuses at "
                f"start: ValueError \"{V4_REFUSAL}\" ({at['raise']})",
                Location(draft.source, key_path="--device"),
                hint="serve DeepSeek-V4's DSpark drafter on ROCm / XPU with vLLM 0.26.0 or later (their amd/ and xpu/ "
                     "packages have the class), or on CUDA", severity=ERROR)


def v4_drafter_finding(rel, draft, method: str | None) -> Diagnostic | None:
    """SRG674 / SRG672 for DeepSeek-V4's own DSpark drafter: the keys its class reads with no default."""
    if rel is None or not is_v4_drafter(draft, method):
        return None
    raw = original_config(draft.raw or {})
    row = V4_DRAFTER.get(rel.version)
    if row is None:
        return None
    model_type = raw.get("model_type")
    name, where, rank_line, ids_line = row.get(model_type) or row["deepseek_v4"]
    built = (f"{rel.label().replace('vllm ', 'vLLM ', 1)} builds this {model_type} config under method dspark as {name} "
             f"(DSparkDeepseekV4ForCausalLM, {where.rsplit('/nvidia/', 1)[0].replace('/', '.')})")
    rank = raw.get("dspark_markov_rank")
    if not (isinstance(rank, int) and not isinstance(rank, bool) and rank > 0):
        said = "has none" if "dspark_markov_rank" not in raw else f"has dspark_markov_rank: {json.dumps(rank)}"
        also = (f" (its markov_rank: {json.dumps(raw['markov_rank'])} is Qwen3DSparkModel's key, which this class never "
                "reads)" if raw.get("markov_rank") is not None else "")
        return diag("SRG674", f"{built}, which builds its Markov head from config.dspark_markov_rank with no default "
                    f"({where}:{rank_line}); the config {said}{also}: the release refuses the draft at model build",
                    Location(draft.source, key_path="dspark_markov_rank"), hint=V4_RANK_HINT, severity=ERROR)
    ids = raw.get("dspark_target_layer_ids")
    if not (isinstance(ids, list) and ids):
        other = [k for k in ("eagle_aux_hidden_state_layer_ids", "target_layer_ids") if raw.get(k)]
        if other:  # with none at all, the recipe's SRG672 says so
            return diag("SRG672", f"{built}, which reads the target layers from config.dspark_target_layer_ids alone, "
                        f"with no default ({where}:{ids_line}); the config names them only as {', '.join(other)}: "
                        "the release refuses the draft at model build",
                        Location(draft.source, key_path="dspark_target_layer_ids"),
                        hint="write the target layers as dspark_target_layer_ids (the layer whose output each "
                             "reads; DeepSeek-V4-Flash-DSpark: [40, 41, 42])", severity=ERROR)
    return None


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


def layout_finding(rel, draft, method: str | None, device: str | None = None) -> Diagnostic | None:
    """SRG740 for `surgery validate --engine-version`: the config's stated layout against the release's reading.
    A DeepSeek-V4 DSpark drafter the release cannot build on `device` (no class there: SRG675) or at all (a key its
    class reads with no default is missing: SRG674 / SRG672) is said first: the layout of a draft that never runs
    does not matter. The platform refusal comes first: SpeculativeConfig raises it before any model is built."""
    refused = v4_device_finding(rel, draft, method, device) or v4_drafter_finding(rel, draft, method)
    if refused is not None:
        return refused
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
