"""What the engine's code reaches of a draft head's config (codes SRG648, SRG649, SRG670; the per-class
data is surgery/data/engine_rules.yaml, read from vLLM 0.32's model classes):

- SRG648: EAGLE-3 aux ids outside what the target model class's capture loop reaches;
- SRG649: a norm flag in the head's config that the head class vLLM builds never reads;
- SRG670: an MTP stack of n layers drafting k > 1 tokens: which layer serves which step.
"""
from __future__ import annotations

from ..facts.drafts import BLOCK_DRAFT_ID_KEYS
from ..text.diagnostics import INFO, WARNING, Diagnostic, Location, diag
from ..text.words import a_count
from .inherit import engine_rules, served_module, text_part


def capture_module(target) -> str | None:
    targets = engine_rules()["capture"]["targets"]
    return next((targets[a] for a in target.architectures if a in targets), None)


def reach_bound(expr, L: int) -> int:
    """A reach bound of the data: an integer, `L` or `L-<n>` (L the target's layer count)."""
    if isinstance(expr, int):
        return expr
    text = str(expr).replace(" ", "")
    if text == "L":
        return L
    if text.startswith("L-"):
        return L - int(text[2:])
    return int(text)


def capture_check(plan, draft, target) -> list[Diagnostic]:
    ops = plan.ops("capture_hidden_states")
    if not ops:
        return []
    rules = engine_rules()["capture"]
    module = capture_module(target)
    L = target.num_layers
    version = engine_rules()["vllm_version"]
    if module is None or module not in rules["vllm"]["modules"]:
        # a gap in surgery's knowledge, not a risk this pair is known to carry: a note that says so
        return [diag("SRG648", f"target {list(target.architectures)}: surgery has not read this class's EAGLE-3 "
                     f"capture loop (its data covers vLLM {version}'s classes in surgery/data/engine_rules.yaml), "
                     "so which aux ids it reaches was not checked",
                     Location(target.source, key_path="architectures"), severity=INFO)]
    reach = rules["vllm"]["reach"]
    lo, hi = reach_bound(reach["lo"], L), reach_bound(reach["hi"], L)
    out = []
    key, written = ids_key(draft)
    for op in ops:
        bad = [i for i in (op.layers or ()) if not lo <= i <= hi]
        if bad:
            said = "aux ids" if key.endswith(IDS) else f"captured layers (`{key}` {written} + 1)"
            out.append(diag("SRG648", f"{said} {bad} are outside {lo}..{hi}, what vLLM {version}'s {module} capture "
                            f"loop reaches for {a_count(L, 'layer')} target: those slots are never filled",
                            Location(draft.source, key_path=key)))
    history = [h for h in rules["history"] if h["module"] == module]
    for h in history:
        hlo, hhi = reach_bound(h["reach"]["lo"], L), reach_bound(h["reach"]["hi"], L)
        bad = sorted({i for op in ops for i in (op.layers or ()) if not hlo <= i <= hhi})
        if bad:
            out.append(diag("SRG648", f"aux ids {bad}: {h['engine']} builds before {h['until']} reach only "
                            f"{hlo}..{hhi} with {module}" + (f" ({h['note']})" if h.get("note") else ""),
                            Location(draft.source, key_path=key), severity=INFO))
    return out


IDS = "eagle_aux_hidden_state_layer_ids"


def ids_key(draft) -> tuple[str, list | None]:
    """(the key the head's layer ids are read from, as vLLM reads them, and the ids written there): the EAGLE-3
    key (top level, then eagle_config), else a DFlash / DSpark draft's own numbering (captured at id + 1).
    SRG648 names it: a DFlash config has no eagle_aux_hidden_state_layer_ids (issue 66)."""
    raw = draft.raw if isinstance(draft.raw, dict) else {}
    nested = raw.get("eagle_config") if isinstance(raw.get("eagle_config"), dict) else {}
    if raw.get(IDS):
        return IDS, raw[IDS]
    if nested.get(IDS):
        return f"eagle_config.{IDS}", nested[IDS]
    for key in BLOCK_DRAFT_ID_KEYS:
        node = raw
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if node:
            return key, node
    return IDS, None


def norm_flags(raw: dict) -> dict[str, object]:
    """Boolean keys naming a norm, top level and eagle_config (eagle_config wins, as vLLM reads it)."""
    skip = set(engine_rules()["norm_flags"]["not_norm_flags"])
    found = {}
    for cfg in (raw, raw.get("eagle_config") if isinstance(raw.get("eagle_config"), dict) else {}):
        for key, value in cfg.items():
            if "norm" in key.lower() and isinstance(value, bool) and key not in skip:
                found[key] = value
    return found


def norm_check(draft, *, method: str) -> list[Diagnostic]:
    """Each boolean norm flag compared by what it means for the head class vLLM builds: a flag the class
    reads is fine; a flag naming a norm the class always builds (`always_built`) is fine when it says
    so and SRG649 when it says the head has no such norm; any other true flag is a norm never built."""
    if method not in ("eagle", "eagle3"):
        return []
    module = served_module(draft, method)
    rules = engine_rules()["norm_flags"]
    table = rules["vllm"]
    built = (rules.get("always_built") or {}).get(module) or {}
    found = norm_flags(draft.raw)
    flags = {k: v for k, v in found.items() if v and k not in built}
    version = engine_rules()["vllm_version"]
    out = []
    for key, value in sorted(found.items()):
        if key in built and value != built[key]:
            out.append(diag("SRG649", f"{key}={str(value).lower()} in the head's config: vLLM {version}'s {module} always "
                            f"builds that norm ({key}={str(built[key]).lower()}), so the head runs with a norm it was "
                            "trained without", Location(draft.source, key_path=key),
                            "re-export the head with the norm, or serve it with an engine whose head class reads the flag"))
    if not flags:
        return out
    if module not in table:
        return out + [diag("SRG649", f"head norm flags {sorted(flags)} are set, and which of them vLLM {version}'s head "
                           f"class ({module or 'unknown'}) reads is not in surgery/data/engine_rules.yaml",
                           Location(draft.source), severity=WARNING)]
    unread = sorted(k for k in flags if k not in table[module])
    if not unread:
        return out
    return out + [diag("SRG649", f"{', '.join(f'{k}=true' for k in unread)} in the head's config: vLLM {version}'s {module} "
                       f"never reads {'it' if len(unread) == 1 else 'them'}, so the head runs without that norm "
                       "(vllm#38111: norm_before_fc dropped; sglang#32334: input norms ignored)",
                       Location(draft.source, key_path=unread[0]),
                       "serve with an engine build whose head class reads the flag, or retrain / re-export the head without it")]


def mtp_steps(draft, k: int) -> tuple[list[int], list[int]]:
    """(layer per step on vLLM's legacy runner, on the V2 runner) for k draft steps."""
    n = int(draft.scalars.get("num_mtp_layers") or 1)
    rules = engine_rules()["mtp_steps"]
    own = draft.model_type in rules["own_proposer"] or draft.text_model_type in rules["own_proposer"]
    key = rules["count_key"]
    declared = text_part(draft.raw).get(key, draft.raw.get(key, 1))
    multi = isinstance(declared, int) and min(declared, k) > 1
    legacy = [s % n for s in range(k)] if own else [0] * k
    v2 = [s % n for s in range(k)] if (multi or own) else [0] * k
    return legacy, v2


def mtp_check(draft, *, method: str, num_speculative_tokens: int | None) -> list[Diagnostic]:
    n = draft.scalars.get("num_mtp_layers")
    k = num_speculative_tokens
    if method != "mtp" or not isinstance(n, int) or n < 2 or not k or k < 2:
        return []
    legacy, v2 = mtp_steps(draft, k)
    idle_legacy = sorted(set(range(n)) - set(legacy))
    idle_v2 = sorted(set(range(n)) - set(v2))
    text = (f"{n} MTP layers, {k} draft steps: vLLM {engine_rules()['vllm_version']} runs step->layer "
            f"{dict(enumerate(legacy))} on the legacy (V1) runner and {dict(enumerate(v2))} on the V2 runner")
    if not idle_legacy and not idle_v2:
        return [diag("SRG670", text, Location(draft.source), severity=INFO)]
    idle = f"; layers {idle_v2} never run on V2" if idle_v2 else "; every layer runs on V2"
    return [diag("SRG670", text + f"{idle}, layers {idle_legacy} never run on V1 (spec_step_idx is not passed; "
                 "vllm#35606 / #35607): later steps draft with layer 0, acceptance falls with depth",
                 Location(draft.source, key_path=draft.key_prefix + "num_nextn_predict_layers"),
                 "serve with k <= 1 per trained layer, or on a runner that passes spec_step_idx")]


def head_checks(plan, recipe, draft, target, *, method: str, num_speculative_tokens: int | None = None) -> list[Diagnostic]:
    if plan.runtime.engine != "vllm":
        return []
    return (capture_check(plan, draft, target) + norm_check(draft, method=method)
            + mtp_check(draft, method=method, num_speculative_tokens=num_speculative_tokens))
