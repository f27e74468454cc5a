"""The field's third catalogue, config side (SRG618-SRG623; data: surgery/data/catalogue3.yaml and the
per-release rules of surgery/data/engine_releases.yaml); the weights side is mtp_quant.py (SRG616 / 617).
docs/field-catalogue-3.md classifies every report of ../shared/FIELD.md "Catalogue 3" as one of these
checks, an audit finding or a stated limit.

- SRG618: RoPE compared with the target's for the methods whose draft is fed the target's positions:
  whole (type, factor, original length, llama3 / YaRN parameters, partial rotary factor) for a draft that
  reads the target's rotated keys, the scaling for a head with its own attention; rope_theta where both
  state it (speculators#574: a conversion dropped `rope_scaling`, the head ran plain RoPE under a
  llama3 / YaRN target);
- SRG619: the rotary layout (neox halves vs interleaved pairs) where both configs state it;
- SRG620: a block drafter (DFlash / DSpark / P-EAGLE) or EAGLE draft shorter than the serving length,
  said per runner for the release in use (vllm#57941, vllm#48894, TRT-LLM#16813);
- SRG621: DFlash 2 with a remapped (reduced) draft vocabulary (TRT-LLM#19159);
- SRG622: a block drafter's own reduced-vocabulary lm_head under the release's sharing rule
  (vllm-ascend#11374);
- SRG623: a SpecForge DSpark head conditioned on the target's KV (no vLLM reader);
- (`use_aux_hidden_state: false` per release is SRG721, checks/release_rules.py, read from the wheels.)

Why a module of its own: these read the release in use (`--engine-version`, else the installed
vLLM), which the older field checks do not.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Any

from ..text.diagnostics import ERROR, INFO, WARNING, Diagnostic, Location, diag
from ..engine.releases import known, version_key
from ..options import CheckOptions
from ..resources import load_data
from ..formats import original_config
from .inherit import derived_max_len, merge_overrides, rope_kind
from .field import normalise_method
from . import config_spelling  # installed_vllm_version read when called (tests set it)

SEVERITY_ORDER = {INFO: 0, "note": 0, WARNING: 1, ERROR: 2}
RUNNER = {"v1": "legacy runner", "v2": "V2 runner", "any": "every runner"}


@lru_cache(maxsize=1)
def data() -> dict:
    return load_data("data/catalogue3.yaml")


@lru_cache(maxsize=1)
def catalogue4_data() -> dict:
    """The fourth catalogue's data (surgery/data/catalogue4.yaml): the theta transformers fills, the reports
    this module's checks name for it. Read here, not imported from checks/catalogue4.py, which imports this one."""
    return load_data("data/catalogue4.yaml")


@lru_cache(maxsize=1)
def releases() -> dict:
    return load_data("data/engine_releases.yaml")


def known_releases() -> list[str]:
    """The vLLM releases whose wheels surgery's data was read from (surgery/data/releases/vllm.json)."""
    return known("vllm")


def release_of(version: str | None) -> str | None:
    """A version string as the known release it is (0.32.0+cpu -> 0.32.0), else None."""
    key = version_key(version)
    return next((known for known in known_releases() if key and version_key(known) == key), None)


def rows_for(rows: list[dict], *, engine: str, version: str | None, method: str | None = None,
             runner: str | None = None, rope: str | None = None) -> list[dict]:
    """The rows of a rule that hold for this engine release (and method, and runner, and the draft's RoPE
    kind where a row names one: cache_only / scaled)."""
    key = version_key(version) or None
    out = []
    for row in rows:
        if row.get("engine") != engine:
            continue
        if rope is not None and row.get("rope") not in (None, rope):
            continue
        if method is not None and "methods" in row and method not in row["methods"]:
            continue
        if runner is not None and row.get("runner") not in ("any", runner):
            continue
        if engine == "vllm" and (row.get("since") or row.get("until")):
            if key is None:
                continue
            if row.get("since") and key < version_key(row["since"]):
                continue
            if row.get("until") and key > version_key(row["until"]):
                continue
        out.append(row)
    return out


# ---------------------------------------------------------------------------------------------- RoPE

def _text(raw: dict) -> dict:
    t = raw.get("text_config")
    return t if isinstance(t, dict) else raw


def theta_default(raw: dict) -> float:
    """The rope_theta transformers 5 fills when config.json states none (its class's `default_theta`,
    surgery/data/catalogue4.yaml `rope_theta_default`; Automodel#3267: a draft without the key loads 10000)."""
    rule = catalogue4_data()["rope_theta_default"]
    text = _text(raw)
    for mt in (text.get("model_type"), raw.get("model_type")):
        if mt in rule["by_model_type"]:
            return float(rule["by_model_type"][mt])
    return float(rule["default"])


def rope_specs(raw: dict, fill_theta: bool = False) -> dict[str, dict]:
    """{layer kind: the RoPE a config states}: one entry (`all`) or one per layer type where the
    config nests rope_parameters by layer type (Gemma 4: full_attention / sliding_attention; DeepSeek
    V4: main / compress). `fill_theta`: an absent rope_theta is the one transformers fills (marked
    `_theta_filled`)."""
    text = _text(raw)
    rs = text.get("rope_scaling")
    rp = text.get("rope_parameters")
    base = rs if isinstance(rs, dict) else rp if isinstance(rp, dict) else {}
    nested = {k: v for k, v in base.items() if isinstance(v, dict)}
    kinds = nested if nested and len(nested) == len(base) else {"all": base}
    out = {}
    for kind, sub in kinds.items():
        spec = dict(sub)
        spec.setdefault("rope_type", spec.get("type") or "default")
        if "rope_theta" not in spec and isinstance(text.get("rope_theta"), (int, float)):
            spec["rope_theta"] = text["rope_theta"]
        if "partial_rotary_factor" not in spec and isinstance(text.get("partial_rotary_factor"), (int, float)):
            spec["partial_rotary_factor"] = text["partial_rotary_factor"]
        if fill_theta and "rope_theta" not in spec:
            spec["rope_theta"], spec["_theta_filled"] = theta_default(raw), True
        out[kind] = spec
    return out


def _num(v: Any) -> Any:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v


def rope_differences(draft_raw: dict, target_raw: dict, scope: str = "all",
                     fill_theta: bool = False) -> list[tuple[str, str, Any, Any]]:
    """[(layer kind, field, draft value, target value)] where the draft's RoPE is not the target's
    (`scope` scaling: without the fields that are the draft's own architecture). `fill_theta`: an absent
    rope_theta is compared as the value transformers fills for it."""
    rules = data()["rope"]
    skip = set(rules["scaling_only_skips"]) if scope == "scaling" else set()
    d_specs, t_specs = rope_specs(draft_raw, fill_theta), rope_specs(target_raw, fill_theta)
    if set(d_specs) != set(t_specs):  # nested on one side only: compare the full-attention / main entry
        pick = lambda s: s.get("all") or s.get("full_attention") or s.get("main") or next(iter(s.values()))  # noqa: E731
        d_specs, t_specs = {"all": pick(d_specs)}, {"all": pick(t_specs)}
    out = []
    for kind in sorted(d_specs):
        d, t = d_specs[kind], t_specs[kind]
        for name, spec in rules["fields"].items():
            if name in skip or (name not in d and name not in t):
                continue
            dv, tv = _num(d.get(name, spec["default"])), _num(t.get(name, spec["default"]))
            if dv != tv:
                out.append((kind, name, dv, tv))
        for name in rules["both_stated"]:
            if name in d and name in t and _num(d[name]) != _num(t[name]):
                out.append((kind, name, _num(d[name]), _num(t[name])))
    return out


def layout(raw: dict) -> tuple[str, str] | None:
    """(key, 'interleaved' | 'neox') where a config states its rotary layout."""
    text = _text(raw)
    for key, meaning in data()["rope"]["layout_keys"].items():
        value = text.get(key, raw.get(key))
        if isinstance(value, bool):
            if meaning == "interleaved":
                return key, "interleaved" if value else "neox"
            return key, "neox" if value else "interleaved"
    return None


def _rope_severity(scope: str, raw: dict, method: str | None = None, theta_filled: bool = False) -> str:
    """A KV-sharing draft (scope `all`) must rotate as the target: a warning. A head that rotates with its
    own config and states no scaling at all was most likely trained that way (the published EAGLE-3
    Llama 3.1 head: 2048 positions, plain RoPE), so it is a note; it is a warning when the head states
    another scaling, or is a speculators file, where a conversion dropping rope_scaling is the named
    failure (speculators#574)."""
    if scope == "all" or theta_filled:
        return WARNING  # a theta the export dropped (Automodel#3267) rotates every position otherwise
    own = original_config(raw or {})
    states_scaling = any(k in own for k in ("rope_scaling", "rope_parameters"))
    return WARNING if states_scaling or "speculators_config" in own else INFO


def _fills_theta(draft_raw: dict, scope: str, method: str) -> bool:
    """Whether an absent rope_theta of the draft is compared as the value transformers fills (Automodel#3267):
    for a draft that must rotate as the target (scope `all`), a block drafter (built from the target's config:
    its theta is the target's), or a head that states a RoPE key of its own. A head that states no RoPE key
    at all (the published EAGLE-3 Llama 3.1 head) was most likely trained with the class default: not filled."""
    own = original_config(draft_raw or {})
    return scope == "all" or method in ("dflash", "dspark") or any(
        k in own or k in _text(own) for k in ("rope_scaling", "rope_parameters"))


def rope_check(draft, target, *, method: str, hf_overrides: dict | None = None) -> list[Diagnostic]:
    scope = data()["rope"]["methods"].get(method)
    if scope is None:
        return []
    if draft.source == target.source or draft.raw == target.raw:
        return []  # the target's own MTP block: one config
    out = []
    # RoPE facts that arrive another way (issue 68): the target's --hf-overrides (dict overrides reach the
    # target only), the theta transformers fills for an absent key, rope_parameters as well as rope_scaling
    target_raw = merge_overrides(target.raw, hf_overrides) if hf_overrides else target.raw
    fill = _fills_theta(draft.raw, scope, method)
    diffs = rope_differences(draft.raw, target_raw, scope, fill_theta=fill)
    if diffs:
        d_specs = rope_specs(draft.raw, fill)
        filled = any(v.get("_theta_filled") for v in d_specs.values())
        shown = "; ".join(f"{f}{'' if k == 'all' else f' ({k})'}: draft {dv!r}"
                          + (" (no key: transformers fills it, Automodel#3267)" if f == "rope_theta" and filled else "")
                          + f", target {tv!r}" for k, f, dv, tv in diffs)
        # the target's facts already carry the overrides (facts.fromconfig.with_overrides): the note goes with
        # any RoPE key the overrides set
        rope_keys = {"rope_scaling", "rope_parameters", "rope_theta", "rope_type"}
        set_by_overrides = set(hf_overrides or {}) | set((hf_overrides or {}).get("text_config") or {}) \
            if isinstance((hf_overrides or {}).get("text_config", {}), dict) else set(hf_overrides or {})
        if hf_overrides and set_by_overrides & rope_keys:
            shown += (" (the target's RoPE as --hf-overrides sets it; dict overrides do not reach the draft, which "
                      "then runs without the target's YaRN: SpecForge#742)")
        own = original_config(draft.raw or {})
        text_own = _text(own)
        if "rope_parameters" in text_own and "rope_scaling" not in text_own and any(f != "rope_theta" for _, f, _, _ in diffs):
            shown += ("; the draft states rope_parameters only, as transformers 5 save_pretrained writes it "
                      "(SpecForge#742: an export that kept rope_parameters and dropped rope_scaling lost the target's YaRN)")
        key = "rope_scaling" if any(f != "rope_theta" for _, f, _, _ in diffs) else "rope_theta"
        why = ("the draft reads keys the target rotated (or is the target's own block), so it must rotate as the "
               "target does" if scope == "all" else
               "the head rotates the target's positions with its own config; a head trained for the target's "
               "context carries the target's scaling, so unless it was trained without, it runs with another RoPE "
               "than it learned")
        out.append(diag("SRG618", f"the draft's RoPE is not the target's ({shown}); with method {method} {why}",
                        Location(draft.source, key_path=draft.key_prefix + key),
                        "copy the target's rope_scaling / rope_parameters (type, factor, original length, theta, "
                        "partial rotary factor) into the draft's config (speculators#574: a conversion dropped "
                        "rope_scaling)", severity=_rope_severity(scope, draft.raw, method,
                                                                 theta_filled=filled and any(f == "rope_theta" for _, f, _, _ in diffs))))
    dl, tl = layout(draft.raw), layout(target.raw)
    if dl and tl and dl[1] != tl[1]:
        out.append(diag("SRG619", f"rotary layout: the draft states {dl[0]}={_text(draft.raw).get(dl[0], draft.raw.get(dl[0]))!r} "
                        f"({dl[1]}), the target {tl[0]}={_text(target.raw).get(tl[0], target.raw.get(tl[0]))!r} ({tl[1]}): "
                        f"with method {method} the draft rotates the target's positions in another pairing",
                        Location(draft.source, key_path=draft.key_prefix + dl[0]),
                        severity=ERROR if scope == "all" else WARNING))
    return out


# ------------------------------------------------------------------------------ draft length, per release

def draft_length_check(draft, target, *, method: str, parallel: bool, version: str | None,
                       max_model_len: int | None) -> list[Diagnostic]:
    if method not in ("eagle", "eagle3", "dflash", "dspark") or draft.source == target.source:
        return []
    serving = max_model_len or derived_max_len(target.raw)
    dlen = derived_max_len(draft.raw)
    if not isinstance(serving, int) or not isinstance(dlen, int) or dlen >= serving:
        return []
    kind = {"dflash": "DFlash", "dspark": "DSpark"}.get(method, "P-EAGLE" if parallel else method.upper().replace("3", "-3"))
    where = Location(draft.source, key_path=draft.key_prefix + "max_position_embeddings")
    head = f"{kind} draft: its position table covers {dlen} positions, the serving length is {serving}"
    release = release_of(version)
    rows = releases()["draft_length"]
    if release is None:
        known = ", ".join(known_releases())
        return [diag("SRG620", f"{head}; what vLLM {version or '(none installed)'} does past it is not known here (rules for "
                     f"{known} in surgery/data/engine_releases.yaml)", where, severity=INFO)]
    hits = rows_for(rows, engine="vllm", version=release, method=method, rope=rope_kind(draft.raw))
    if not hits:
        return [diag("SRG620", f"{head}; no rule for vLLM {release} and method {method} in "
                     "surgery/data/engine_releases.yaml", where, severity=INFO)]
    parts = []
    for row in hits:
        parts.append(f"{RUNNER[row['runner']]}: {row['outcome']} ({row['source']}; {', '.join(row['reports'])})")
    worst = max((r["severity"] for r in hits), key=lambda s: SEVERITY_ORDER.get(s, 0))
    others = [r for r in rows if r["engine"] != "vllm" and method in r.get("methods", ())]
    tail = "".join(f"; {r['engine']}: {r['outcome']} ({', '.join(r['reports'])})" for r in others)
    return [diag("SRG620", f"{head}. vLLM {release}: " + "; ".join(parts) + tail, where,
                 "give the draft the serving length (max_position_embeddings, with the target's rope scaling), "
                 "or serve with --max-model-len at most the draft's", severity=worst)]


# -------------------------------------------------------------------------- block drafters' vocabularies

def is_dflash2(draft) -> bool:
    return bool(set(draft.architectures) & set(releases()["dflash2_d2t"]["architectures"]))


def dflash2_check(draft, *, engine: str = "vllm", has_d2t: bool | None = None) -> list[Diagnostic]:
    if not is_dflash2(draft):
        return []
    reduced = draft["output_vocab_size"] != draft["vocab_size"]
    if not reduced and not has_d2t:
        return []
    rules = releases()["dflash2_d2t"]["rules"]
    rule = rows_for(rules, engine=engine, version=None) + \
        [r for r in rules if r["engine"] != engine and r["engine"] == "tensorrt-llm"]
    why = "; ".join(f"{r['engine']}: {r['outcome']}" for r in rule)
    what = (f"draft_vocab_size {draft['output_vocab_size']} < vocab_size {draft['vocab_size']}" if reduced
            else "the checkpoint carries a d2t map")
    return [diag("SRG621", f"DFlash 2 draft ({', '.join(draft.architectures)}) with a remapped vocabulary ({what}): its "
                 f"candidate selector indexes full-vocabulary codebooks by draft token id, so a d2t remap scores the "
                 f"wrong tokens ({why})", Location(draft.source, key_path=draft.key_prefix + "draft_vocab_size"),
                 "train / export the DFlash 2 draft on the target's full vocabulary (no draft_vocab_size, no d2t)",
                 severity=ERROR)]


def lm_head_rule_check(draft, target, *, method: str, engine: str, version: str | None) -> list[Diagnostic]:
    if method not in ("dflash", "dspark") or draft["output_vocab_size"] in (None, target["vocab_size"]):
        return []
    release = release_of(version) if engine == "vllm" else None
    hits = rows_for(releases()["block_drafter_lm_head"], engine=engine, version=release)
    where = Location(draft.source, key_path=draft.key_prefix + "draft_vocab_size")
    head = (f"{method} draft with its own {draft['output_vocab_size']}-row lm_head (target vocabulary "
            f"{target['vocab_size']}): it must keep it")
    if not hits:
        return [diag("SRG622", f"{head}; whether {engine} {version or ''} keeps it is not known here "
                     "(surgery/data/engine_releases.yaml block_drafter_lm_head); `surgery audit` sees it live (SRG704)",
                     where, severity=INFO)]
    row = hits[0]
    label = f"{engine} {release}" if release else engine
    ascend = next((r for r in releases()["block_drafter_lm_head"] if r["engine"] == "vllm-ascend"), None)
    named = (f"; vllm-ascend forces the target's head over it "
             f"({', '.join(r.replace('vllm-project/', '') for r in catalogue4_data()['checks']['block_drafter_own_head']['reports'])}: "
             "~25 % -> 1-1.7 %)" if ascend and row["keeps"] else "")
    return [diag("SRG622", f"{head}; {label} {row['outcome']} ({row['source']}){named}", where,
                 None if row["keeps"] else "serve on a release that keeps the draft's own lm_head; `surgery audit` "
                 "checks the live head (SRG704)", severity=row["severity"])]


def conditioning_check(draft) -> list[Diagnostic]:
    """SpecForge DSpark conditioned on the target's KV cache (`dflash_config.conditioning_source: target_kv`,
    `target_kv_*` keys): vLLM 0.32 has no reader for either (qwen3_dspark.py projects captured hidden
    states through its fc), so it would build a hidden-state DSpark that drafts from inputs the head never saw."""
    rule = data()["conditioning"]
    for container in rule["containers"]:
        cfg = draft.raw.get(container) if container else draft.raw
        if not isinstance(cfg, dict):
            continue
        source = cfg.get("conditioning_source")
        keys = sorted(k for k in cfg if isinstance(k, str) and k.startswith(rule["key_prefix"]))
        if source in rule["unread_sources"] or keys:
            where = f"{container}.conditioning_source" if container else "conditioning_source"
            return [diag("SRG623", f"the draft is conditioned on the target's KV cache ({where}: {source!r}"
                         + (f"; {', '.join(keys[:4])}{' ...' if len(keys) > 4 else ''}" if keys else "")
                         + f"): {rule['why']}", Location(draft.source, key_path=where),
                         "serve a DSpark head trained on target hidden states (conditioning_source absent or "
                         "hidden_states), or an engine build that reads target_kv conditioning", severity=ERROR)]
    return []


# ----------------------------------------------------------------------------------------------- entry

def catalogue3_findings(plan, recipe, draft, target, *, method: str, parallel: bool, version: str | None,
                        max_model_len: int | None, hf_overrides: dict | None = None) -> list[Diagnostic]:
    engine = plan.runtime.engine
    out = rope_check(draft, target, method=method, hf_overrides=hf_overrides if engine == "vllm" else None)
    if engine == "vllm":
        out += draft_length_check(draft, target, method=method, parallel=parallel, version=version,
                                  max_model_len=max_model_len)
        out += lm_head_rule_check(draft, target, method=method, engine=engine, version=version)
    out += dflash2_check(draft, engine=engine)
    out += conditioning_check(draft)
    return out


def served_method(options: CheckOptions, recipe) -> tuple[str, bool]:
    hints = (getattr(recipe, "engine", None) or {}).get("vllm") or {}
    given = options.method
    method = normalise_method(given) if given else (hints.get("method") or "draft_model")
    return method, bool(hints.get("parallel_drafting"))


def cli_catalogue3(options: CheckOptions, plan, recipe, draft, target) -> list[Diagnostic]:
    """`surgery validate/plan`: against `--engine-version`, else the installed vLLM."""
    method, parallel = served_method(options, recipe)
    version = options.engine_version or config_spelling.installed_vllm_version()
    return catalogue3_findings(plan, recipe, draft, target, method=method, parallel=parallel, version=version,
                               max_model_len=options.max_model_len, hf_overrides=options.hf_overrides)
