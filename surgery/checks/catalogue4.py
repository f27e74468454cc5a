"""The field's fourth catalogue, config side (SRG800-SRG805; data: surgery/data/catalogue4.yaml, each
per-release row read from that release's wheel with its file:line). docs/audit.md "Catalogue 4" maps every
report of ../shared/FIELD.md "Catalogue 4" marked C to the code that names it.

- SRG800: DSpark at num_speculative_tokens past the block size it was trained for (vllm#41834);
- SRG801: a DFlash draft that states no causality (Automodel#3235: the export dropped dflash_config.causal);
- SRG802: a weight-quantised DFlash drafter on a release whose fused context-KV path bypasses the
  quantisation (vllm#51581);
- SRG803: a target class whose published EAGLE-3 heads were trained off by one from vLLM's numbering, with
  a head that states no ids (vllm#43671: MiniMax-M2);
- SRG804: DFlash / DSpark under decode context parallelism (--dcp; vllm#48381);
- SRG805: MTP under pipeline parallelism, per release (vllm#44697, #44698, #52295, #46994);
- SRG806: norm flags a speculators file sets that the release's reader does not carry (vllm#46488, #38111);
- SRG809 (`--weights`, from the draft's safetensors header): a DSpark DeepSeek-V4 drafter whose files carry
  their own embedding / head under mtp.* (SpecForge#800): per release and platform, the loader's KeyError,
  or (XPU) the tensors skipped and the target's served in their place;
- SRG807 / SRG808: SGLang's reports (sglang#32226 -> #32334, sglang#30456), in catalogue4_sglang.py;
- RoPE facts that arrive another way (--hf-overrides, the theta transformers fills, rope_parameters-only
  exports) reach the RoPE comparison of catalogue3.py (SRG618, SpecForge#742, Automodel#3267);
- the block drafter's own lm_head per release is SRG622 (catalogue3.py; vllm-ascend#9795, #11374, #9946).

Every finding here is a vLLM finding: emitted only for `--engine vllm` (SGLang's code was not read for them);
SGLang's reports of the catalogue are catalogue4_sglang.py's, emitted only for `--engine sglang`.
"""
from __future__ import annotations

import re
from functools import lru_cache

from ..text.diagnostics import ERROR, INFO, WARNING, Diagnostic, Location, diag
from .engine_start import mtp_class  # which MTP class a target's layer becomes, as SRG344 resolves it
from ..engine.releases import release
from ..formats import original_config  # the keys as the published file states them
from ..resources import load_data
from .catalogue3 import known_releases, release_of, served_method
from .release_rules import DSPARK_V4_TYPES  # the model types vLLM builds as DeepSeek-V4's DSpark drafter (SRG753)
from .catalogue4_sglang import catalogue4_sglang_findings  # SGLang's reports (SRG807-SRG808)
from . import config_spelling  # installed_vllm_version read when called (tests set it)


@lru_cache(maxsize=1)
def data() -> dict:
    return load_data("data/catalogue4.yaml")


def reports(name: str) -> str:
    return ", ".join(r.replace("vllm-project/", "").replace("NVIDIA-NeMo/", "") for r in data()["checks"][name]["reports"])


def _get(raw: dict, dotted: str):
    value = raw
    for part in dotted.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def _read(rows: dict, release: str | None) -> dict | None:
    return rows.get(release) if release else None


def _unread(version: str | None, rows: dict) -> str:
    return (f"what vLLM {version or '(none installed)'} does was not read here (rules read from the wheels of "
            f"{', '.join(rows)}: surgery/data/catalogue4.yaml)")


# ------------------------------------------------------------------------------------- SRG800: DSpark k

def block_size(draft) -> tuple[str, int] | None:
    for key in data()["dspark_k"]["block_keys"]:
        value = _get(draft.raw, key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return key, value
    return None


def dspark_k_check(draft, *, method: str, k: int | None, version: str | None) -> list[Diagnostic]:
    if method != "dspark" or k is None:
        return []
    found = block_size(draft)
    if found is None:
        return []
    key, size = found
    rule = data()["dspark_k"]
    release = release_of(version)
    row = _read(rule["releases"], release)
    where = Location(draft.source, key_path=draft.key_prefix + key)
    if k < size:
        if row and row.get("smaller_refused_key") and _get(draft.raw, row["smaller_refused_key"]) is not None:
            return [diag("SRG800", f"DSpark at num_speculative_tokens {k} under the draft's {key} {size}: vLLM {release} "
                         f"{row['smaller']} ({row['at']})", where, f"serve with --num-speculative-tokens {size}",
                         severity=ERROR)]
        return []
    if k == size:
        return []
    said = (f"vLLM {release} {row['larger']} ({row['at']})" if row else _unread(version, rule["releases"]))
    return [diag("SRG800", f"DSpark at num_speculative_tokens {k} past the draft's {key} {size}: the head drafts "
                 f"positions it was never trained for, and acceptance collapses with no error ({reports('dspark_k_past_block')}: "
                 f"{rule['measured']}); {said}", where,
                 f"serve with --num-speculative-tokens {size} (the block the head was trained for), or a head trained "
                 f"with a block of {k}", severity=WARNING)]


# ------------------------------------------------------------------------------------ SRG801: causality

def dflash_causal_check(draft, *, method: str, version: str | None) -> list[Diagnostic]:
    rule = data()["dflash_causal"]
    if method not in rule["methods"] or not isinstance(draft.raw.get("dflash_config"), dict):
        return []
    if any(_get(draft.raw, k) is not None for k in rule["keys"]):
        return []
    auto_map = draft.raw.get("auto_map") or {}
    by_design = next((p for p in rule["non_causal_by_design"] if p["auto_map"] in (auto_map.values() if
                                                                                     isinstance(auto_map, dict) else ())), None)
    layer_types = draft.raw.get("layer_types") or []
    n = draft["num_hidden_layers"] if draft.scalars.get("num_hidden_layers") is not None else len(layer_types)
    causal = [i for i, t in enumerate(layer_types) if t == "sliding_attention"]
    noncausal = [i for i in range(n or 0) if i not in causal]
    release = release_of(version)
    row = _read(rule["releases"], release)
    does = (f"vLLM {release} falls back to {row['fallback']} ({row['at']})" if row else _unread(version, rule["releases"]))
    shown = (f"layers {noncausal} run non-causal" + (f", {causal} causal" if causal else "")) if n else "layer causality by layer type"
    where = Location(draft.source, key_path="dflash_config.causal")
    if by_design:
        return [diag("SRG801", f"the {method} draft states no dflash_config.causal: {does}: {shown}; {by_design['producer']} "
                     f"({by_design['auto_map']}) trains it non-causal, which is that default ({reports('dflash_causal_absent')}: "
                     "an export that drops the key from a causal head loses acceptance only)", where, severity=INFO)]
    return [diag("SRG801", f"the {method} draft states no dflash_config.causal (nor is_causal): {does}: {shown}; a head "
                 f"trained causal whose export dropped the key runs with the wrong attention and loses acceptance, "
                 f"no error ({reports('dflash_causal_absent')})", where,
                 "write dflash_config.causal as the head was trained (true: causal; false: bidirectional block)",
                 severity=WARNING)]


# -------------------------------------------------------------------------------- SRG802: quantised DFlash

def quantised_dflash_check(draft, *, method: str, version: str | None) -> list[Diagnostic]:
    qc = draft.raw.get("quantization_config")
    if method != "dflash" or not isinstance(qc, dict):
        return []
    scheme = qc.get("quant_method") or "?"
    rows = data()["quantised_dflash"]["releases"]
    release = release_of(version)
    row = _read(rows, release)
    where = Location(draft.source, key_path="quantization_config.quant_method")
    head = f"weight-quantised DFlash drafter (quantization_config quant_method {scheme!r})"
    if row is None:
        return [diag("SRG802", f"{head}: {_unread(version, rows)}; 0.26 {rows['0.26.0']['outcome']} "
                     f"({reports('quantised_dflash')})", where, severity=INFO)]
    if not row["severity"]:
        return []
    return [diag("SRG802", f"{head}: vLLM {release} {row['outcome']} ({row['at']}; {reports('quantised_dflash')})", where,
                 "serve an unquantised (bf16) DFlash drafter on this release, or a release that runs quantised "
                 "projections through their quant method (0.31 and later)", severity=row["severity"])]


# ------------------------------------------------------------------------- SRG803: capture per target class

def class_convention_check(draft, target, *, method: str, version: str | None) -> list[Diagnostic]:
    if method != "eagle3":
        return []
    conv = next((c for a, c in data()["class_conventions"].items() if a in target.architectures), None)
    if conv is None:
        return []
    own = original_config(draft.raw or {})
    stated = [own.get("eagle_aux_hidden_state_layer_ids"), _get(own, "eagle_config.eagle_aux_hidden_state_layer_ids"),
              _get(own, "speculators_config.eagle_aux_hidden_state_layer_ids"), own.get("aux_hidden_state_layer_ids")]
    if any(v for v in stated):
        return []
    L = target["num_hidden_layers"]
    if not isinstance(L, int):
        return []
    default = (2, L // 2, L - 3)
    shifted = tuple(i + conv["shift"] for i in default)
    release = release_of(version)
    at = conv["at"].get(release) if release else None
    capture = (f"vLLM {release}'s class records id idx + 1 after layer idx ({at}), so its ids are the inputs of "
               "those layers" if at else "vLLM's ids are layer inputs (id i = the input of layer i)")
    return [diag("SRG803", f"EAGLE-3 head with no aux layer ids on a {', '.join(target.architectures)} target: vLLM uses "
                 f"its default {default}; the published heads of this class were trained on {conv['trained_as']} "
                 f"(vLLM ids {shifted}); {capture}: the default is off by one ({', '.join(conv['reports'])}: "
                 f"{conv['measured']})", Location(draft.source, key_path="eagle_aux_hidden_state_layer_ids"),
                 f"state eagle_aux_hidden_state_layer_ids {list(shifted)} in the head's config (or the ids it was "
                 "trained on, in vLLM's numbering)", severity=WARNING)]


# ------------------------------------------------------------------------------------------ SRG804: DCP

def _is_mla(raw: dict) -> bool:
    text = raw.get("text_config") if isinstance(raw.get("text_config"), dict) else raw
    return isinstance(text.get("kv_lora_rank"), int)


def dcp_check(*, method: str, dcp: int | None, version: str | None, draft, target=None, tp: int = 1) -> list[Diagnostic]:
    rule = data()["decode_context_parallel"]
    if not dcp or dcp <= 1 or method not in rule["methods"]:
        return []
    release = release_of(version)
    row = _read(rule["releases"], release)
    where = Location(draft.source)
    head = f"{method} under decode context parallelism (decode_context_parallel_size {dcp})"
    kv = target.scalars.get("num_kv_heads") if target is not None else None
    if target is not None and not _is_mla(target.raw) and isinstance(kv, int) and kv > 0 and (tp <= kv or dcp > tp // kv):
        gqa = rule["target_gqa"]
        at = gqa["at"].get(release, "vllm/config/model.py verify_with_parallel_config") if release else \
            "vllm/config/model.py verify_with_parallel_config"
        return [diag("SRG804", f"{head}: the target is GQA with {kv} KV heads at tensor-parallel size {tp}: vLLM "
                     f"{release or version or ''} refuses at start, before the draft matters: \"{gqa['says']}\" ({at}); "
                     f"where it starts, {reports('decode_context_parallel')} applies to the block drafter",
                     Location(target.source, key_path="num_key_value_heads"),
                     "serve with --decode-context-parallel-size 1, or a tensor-parallel size above the KV heads",
                     severity=ERROR)]
    if row is None:
        return [diag("SRG804", f"{head}: {_unread(version, rule['releases'])}; on 0.26 it gives ~0 % "
                     f"({reports('decode_context_parallel')})", where, severity=WARNING)]
    return [diag("SRG804", f"{head}: vLLM {release} {row['outcome']} ({row['at']}; {reports('decode_context_parallel')})",
                 where, None if row["severity"] != ERROR else "serve the block drafter with --decode-context-parallel-size 1, "
                 "or on a release that gives the draft its own DCP (0.34)", severity=row["severity"])]


# ------------------------------------------------------------------------------------- SRG805: MTP and PP

def mtp_pp_check(draft, target, *, method: str, pp: int, version: str | None) -> list[Diagnostic]:
    if pp <= 1 or method != "mtp":
        return []
    rel = release("vllm", version)[0] if version else None
    if rel is None:
        return []
    classes = rel.facts.get("classes") or {}
    served = mtp_class(rel, target if draft.source == target.source or draft.raw == target.raw else draft)
    rule = data()["mtp_pipeline"]
    where = Location(draft.source, key_path="architectures")
    names = reports("mtp_pipeline_parallel")
    if classes.get("draft_pp") == "target":
        if served is None or served not in (classes.get("draft_architectures_with_pp") or []):
            return []  # refused at start: SRG344 says it
        at = rule["target_pp"]["at"].get(rel.version, "vllm/config/speculative.py create_draft_parallel_config")
        return [diag("SRG805", f"MTP at pipeline size {pp} on {rel.label()}, the draft served as {served}: "
                     f"{rule['target_pp']['outcome']} "
                     f"({at}; {names})", where, "serve the MTP draft with --pp 1 on this release, or on 0.30 or later "
                     "(the draft runs at pipeline size 1 on the last stage)", severity=ERROR)]
    at = rule["own_pp"]["at"].get(rel.version)
    return [diag("SRG805", f"MTP at pipeline size {pp} on {rel.label()}: it {rule['own_pp']['outcome']}"
                 + (f" ({at})" if at else " (release data: classes.draft_pp 1)") + f"; the divergence of {names} was "
                 "measured on 0.25.2.dev-0.26.1rc1, where the draft took the target's pipeline size", where,
                 severity=INFO)]


# ------------------------------------------------------------- SRG806: speculators norm flags per release

def speculators_norm_check(draft, *, version: str | None) -> list[Diagnostic]:
    own = original_config(draft.raw or {})
    algo = own.get("speculators_model_type")
    if not algo or "speculators_config" not in own:
        return []
    rule = data()["speculators_norm_flags"]
    set_true = [f for f in rule["flags"] if own.get(f) is True]
    if not set_true:
        return []
    release = release_of(version)
    row = (_read(rule["releases"], release) or {}).get(algo)
    if row is None or row.get("refused"):
        return []  # unread release or algorithm, or the reader refuses the file at start (said by the format checks)
    dropped = [f for f in set_true if f not in row["carries"]]
    if not dropped:
        return []
    return [diag("SRG806", f"{', '.join(f + '=true' for f in dropped)} in the speculators file ({algo}): vLLM {release}'s "
                 f"reader does not carry {'it' if len(dropped) == 1 else 'them'} into the head's config ({row['at']}: it "
                 f"carries {', '.join(row['carries'])}), so the head runs without that norm and loses acceptance, no error "
                 f"({reports('speculators_norm_flags')})", Location(draft.source, key_path=dropped[0]),
                 "serve on a release whose reader carries the flag, or re-export the head in a format whose reader does",
                 severity=ERROR)]


# ------------------------------------------------- SRG809: DSpark-V4's own embed / head (SpecForge#800)

# --device as the per-platform rows name it (models/deepseek_v4/__init__.py branches on current_platform)
PLATFORMS = {"cuda": "cuda", "rocm": "rocm", "hip": "rocm", "xpu": "xpu", "cpu": "cpu"}
PLATFORM_NAMES = {"cuda": "CUDA", "rocm": "ROCm", "xpu": "XPU", "cpu": "CPU"}


def dspark_v4_drafter_type(draft, method: str | None) -> str | None:
    """The model type of a draft vLLM builds as DeepSeek-V4's DSpark drafter (DSparkDeepseekV4ForCausalLM:
    method dspark, model type deepseek_v4 / deepseek_v41, as SRG753 reads it), else None."""
    own = original_config(draft.raw or {})
    model_type = own.get("model_type") if isinstance(own, dict) else None
    return model_type if method == "dspark" and model_type in DSPARK_V4_TYPES else None


def own_vocab_tensors(ckpt) -> list[tuple[str, str, str]]:
    """(role, tensor name, the name vLLM's DSpark loader makes of it) for each tensor of the draft's header that
    is a DSpark stage's own embedding or head (catalogue4.yaml `dspark_v4_own_vocab.tensors`)."""
    rule = data()["dspark_v4_own_vocab"]
    out = []
    for name in ckpt.tensors:
        if not name.startswith("mtp."):
            continue
        for role, patterns in rule["tensors"].items():
            m = next((m for m in (re.match(p, name) for p in patterns) if m), None)
            if m:
                rest = name[len(f"mtp.{m.group(1)}."):]
                out.append((role, name, rule["maps_to"].format(stage=m.group(1), rest=rest)))
                break
    return out


def _span(versions: list[str]) -> str:
    return versions[0] if len(versions) == 1 else f"{versions[0]}-{versions[-1]}" if versions else "none"


def _compare(own, theirs) -> str | None:
    """How the drafter's own tensor differs from the target's (None: identical in the bytes read): shape or
    dtype from the headers, else the first and last 64 KiB of each, as SRG613 compares them."""
    from .weights import EQUAL_READ_BYTES, read_raw  # --weights only (the header reader, as weights.py reads it)

    if own.shape != theirs.shape or own.dtype != theirs.dtype:
        return f"{own.name} {own.dtype}{list(own.shape)} vs the target's {theirs.name} {theirs.dtype}{list(theirs.shape)}"
    size = own.end - own.start
    tail = max(0, size - EQUAL_READ_BYTES)
    if read_raw(own, 0, EQUAL_READ_BYTES) == read_raw(theirs, 0, EQUAL_READ_BYTES) and \
            read_raw(own, tail, EQUAL_READ_BYTES) == read_raw(theirs, tail, EQUAL_READ_BYTES):
        return None
    return f"{own.name} vs the target's {theirs.name}, {min(size, 2 * EQUAL_READ_BYTES)} of {size} bytes read"


def dspark_v4_own_vocab_check(draft, dckpt, *, method: str, version: str | None, device: str | None,
                              target=None, target_ckpt=None) -> list[Diagnostic]:
    """SRG809: `dckpt` is the draft's checkpoint (headers); `target_ckpt` a callable giving the target's, read
    only where a release loads the drafter and ignores its own pair (the values are then compared)."""
    rule = data()["dspark_v4_own_vocab"]
    model_type = dspark_v4_drafter_type(draft, method)
    if model_type is None:
        return []
    found = own_vocab_tensors(dckpt)
    if not found:
        return []
    platform = PLATFORMS.get(str(device).lower()) if device else "cuda"
    if platform is None or platform == "cpu":
        return []  # a platform no row was read for (a plugin's own loader); DSpark runs on the GPU runner only
    target_type = (original_config(target.raw or {}) or {}).get("model_type") if target is not None else None
    package = "deepseek_v41" if "deepseek_v41" in (model_type, target_type) else "deepseek_v4"
    names = ", ".join(n for _, n, _ in found)
    first = dckpt.tensors[found[0][1]]
    where = Location(first.file, key_path=first.name)
    head = (f"the DSpark DeepSeek-V4 drafter's files carry their own embedding / head under mtp.* ({names}; "
            f"{reports('dspark_v4_own_vocab')}: the official drafter's differ from the target's, {rule['measured']})")
    hint = ("drop the mtp.* embed / head tensors (and their index entries) from the drafter's files: vLLM's DSpark "
            "DeepSeek-V4 drafter serves the target's embedding and head whatever the files carry")
    rows = rule["releases"]
    release = release_of(version)
    if release is None:
        raising = [v for v, r in rows.items() if ((r.get(package) or {}).get(platform) or {}).get("loads") == "raises"]
        return [diag("SRG809", f"{head}: {_unread(version, rows)}; on {PLATFORM_NAMES[platform]} every release read "
                     f"that has the class ({_span(raising)}) raises KeyError on them at load", where, hint,
                     severity=INFO)]
    row = (rows[release].get(package) or {}).get(platform)
    if row is None or row["loads"] in ("absent", "refused"):
        return []  # no such class on this release / platform, or it refuses before any weight (said elsewhere)
    file = row["file"]
    on = PLATFORM_NAMES[platform]
    if device is None:
        alike = [PLATFORM_NAMES[p] for p, r in rows[release][package].items()
                 if p not in ("cuda", "cpu") and r["loads"] == "raises"]
        skips = [PLATFORM_NAMES[p] for p, r in rows[release][package].items() if r["loads"] == "skips"]
        on = ("CUDA (no --device: vLLM's default build" + (f"; {', '.join(alike)} alike" if alike else "")
              + (f"; {', '.join(skips)} skips them" if skips else "") + ")")
    aliased = (f"the class never serves a drafter's own embedding or head: has_own_embed_tokens = has_own_lm_head = "
               f"False ({file}:{row['aliases']}), so the target's are installed")
    if row["loads"] == "raises":
        mapped = "; ".join(f"{n} -> {m}" for _, n, m in found)
        return [diag("SRG809", f"{head}: vLLM {release} on {on} builds the drafter as DSparkDeepseekV4ForCausalLM "
                     f"({file}), which registers no parameter for them: _remap_dspark_name ({file}:{row['remap']}) "
                     f"maps {mapped}, and load_weights looks the name up unguarded (params_dict[name], "
                     f"{file}:{row['lookup']}): KeyError, the drafter does not load; {aliased}", where, hint,
                     severity=ERROR)]
    # loads: skips: loaded, the own pair ignored, the target's served. Whether that loses anything is in the values.
    said = (f"{head}: vLLM {release} on {on} loads the drafter ({file}: load_weights skips names the model does not "
            f"register, {file}:{row['lookup']}) and ignores them; {aliased}")
    tckpt = target_ckpt() if target_ckpt is not None else None
    differs, compared = [], 0
    for role, name, _ in found:
        theirs = tckpt.first(rule["target_tensors"][role]) if tckpt is not None else None
        if theirs is None:
            continue
        compared += 1
        detail = _compare(dckpt.tensors[name], theirs)
        if detail:
            differs.append(detail)
    if differs:
        return [diag("SRG809", f"{said}; the drafter's own differ from the target's ({'; '.join(differs)}): it runs "
                     "with an embedding / head it was not trained with, acceptance falls while the output stays the "
                     "target's", where, "if the drafter was trained with these tensors, no release read serves them; "
                     "if it was trained with the target's, drop them from its files", severity=WARNING)]
    if compared == len(found):
        return [diag("SRG809", f"{said}: nothing is lost, they equal the target's in the bytes read", where,
                     severity=INFO)]
    return [diag("SRG809", f"{said}; whether they differ from the target's was not read (the target's headers hold "
                 f"no {' / '.join(sorted({n for ns in rule['target_tensors'].values() for n in ns}))} to compare "
                 f"{'all of them ' if compared else ''}with)", where, severity=INFO)]


def cli_dspark_v4_own_vocab(options, plan, recipe, draft, target) -> list[Diagnostic]:
    """`validate --weights`: the draft's headers, read again (local files; hub ranges from their cache), and the
    target's only where the release loads the drafter and ignores its own pair."""
    method, _ = served_method(options, recipe)
    if dspark_v4_drafter_type(draft, method) is None:
        return []  # not read at all: the headers are read again only for the drafter this check judges
    from .weights import checkpoint_of  # --weights only: the safetensors reader stays out of validate

    dckpt = checkpoint_of(draft, options.draft)
    if options.target is None:
        theirs = None
    elif str(options.draft) == str(options.target):
        theirs = lambda: dckpt  # noqa: E731 - the official layout: the drafter ships in the target's checkpoint
    else:
        theirs = lambda: checkpoint_of(target, options.target)  # noqa: E731
    return dspark_v4_own_vocab_check(
        draft, dckpt, method=method, version=options.engine_version or config_spelling.installed_vllm_version(),
        device=plan.runtime.device, target=target, target_ckpt=theirs)


# ----------------------------------------------------------------------------------------------- entry

def catalogue4_findings(draft, target, *, engine: str, method: str, version: str | None, k: int | None,
                        pp: int = 1, tp: int = 1, dcp: int | None = None) -> list[Diagnostic]:
    if engine != "vllm":
        return []
    out = dspark_k_check(draft, method=method, k=k, version=version)
    out += dflash_causal_check(draft, method=method, version=version)
    out += quantised_dflash_check(draft, method=method, version=version)
    out += class_convention_check(draft, target, method=method, version=version)
    out += dcp_check(method=method, dcp=dcp, version=version, draft=draft, target=target, tp=tp)
    out += mtp_pp_check(draft, target, method=method, pp=pp, version=version)
    out += speculators_norm_check(draft, version=version)
    return out


def cli_catalogue4(options, plan, recipe, draft, target) -> list[Diagnostic]:
    """`surgery validate/plan`: against `--engine-version`, else the installed vLLM; for `--engine sglang`,
    SGLang's own reports against the release sglang_start.py judges (catalogue4_sglang.py). With `--weights`,
    the draft's safetensors header too (SRG809)."""
    if options.engine == "sglang":
        # check_options judges a release for vLLM only: SGLang's --engine-version is the plan's runtime's
        return catalogue4_sglang_findings(draft, target, version=options.engine_version or plan.runtime.engine_version,
                                          algorithm=options.algorithm)
    method, _ = served_method(options, recipe)
    version = options.engine_version or config_spelling.installed_vllm_version()
    out = catalogue4_findings(draft, target, engine=options.engine, method=method, version=version,
                              k=options.num_speculative_tokens, pp=plan.runtime.pp_size, tp=plan.runtime.tp_size,
                              dcp=getattr(options, "decode_context_parallel_size", None))
    if options.weights and options.engine == "vllm":  # from the headers: what the draft's files carry (SRG809)
        out += cli_dspark_v4_own_vocab(options, plan, recipe, draft, target)
    return out


__all__ = ["catalogue4_findings", "cli_catalogue4", "known_releases"]
