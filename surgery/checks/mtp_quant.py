"""A quantised target's own MTP block, read from the checkpoint's safetensors headers (SRG616 / SRG617;
data: surgery/data/mtp_quant.yaml).

Why: the engine builds the MTP block with the target's quant config (vLLM 0.32: `quant_config =
vllm_config.quant_config` in every *_mtp.py), leaving out only the modules the quantiser's ignore list
names. A conversion that stores the `mtp.*` block BF16 (or in the native format while the main layers
were re-quantised) loads it into parameters of another format and the server answers with acceptance
near zero: DeepSeek-V4-Pro NVFP4, 1.82 % vs 80.56 % (vllm#43455 / #43472 / #43893; same class vllm#44087,
#47828, #49553, sglang#32325). The headers show it: which MTP tensors carry scale sidecars
(weight_scale, input_scale, weight_packed, qweight, ...) and which do not.

The rule checked, per MTP module that has a counterpart (same name after the layer index) in the main
layers: if the ignore list treats the two alike, they must be stored alike (same weight dtype, same
sidecars); if it leaves the MTP module out, the MTP module must be stored unquantised; if it leaves
only the counterpart out, the MTP module must be stored quantised. MTP-only modules (eh_proj, enorm,
shared_head, ...) have no counterpart and are counted, not judged.
"""
from __future__ import annotations

import json
import re
from fnmatch import fnmatch
from functools import lru_cache
from pathlib import Path

from ..text.diagnostics import ERROR, INFO, Diagnostic, Location, diag
from .inherit import text_part
from ..resources import load_data

LAYER = re.compile(r"^(.*?)(?:^|\.)?layers\.(\d+)\.(.+)$")
SHOWN = 3  # tensors named per finding
MAX_MTP_LAYERS = 64  # a larger count is not a config's MTP stack (bounds the prefixes built)


@lru_cache(maxsize=1)
def rules() -> dict:
    return load_data("data/mtp_quant.yaml")


def quant_config(raw: dict) -> dict | None:
    q = raw.get("quantization_config") or text_part(raw).get("quantization_config")
    return normalise(q) if isinstance(q, dict) else None


def normalise(q: dict) -> dict:
    """ModelOpt's legacy hf_quant_config.json ({"quantization": {"quant_algo", "exclude_modules"}}) as the
    config.json form vLLM's ModelOptQuantConfigBase.from_config reads it the same way."""
    inner = q.get("quantization")
    if not isinstance(inner, dict):
        return q
    return {"quant_method": "modelopt", "quant_algo": inner.get("quant_algo"),
            "exclude_modules": inner.get("exclude_modules") or []}


HF_QUANT_CONFIG = "hf_quant_config.json"
HF_QUANT_CONFIG_MAX = 1 << 20


def side_quant_config(folder) -> dict | None:
    """A local checkpoint's hf_quant_config.json, which vLLM reads when config.json has no
    quantization_config (transformers_utils/config.py: ModelOpt 0.29 and before). Hub sources: not read."""
    p = Path(str(folder)) / HF_QUANT_CONFIG
    try:
        if not p.is_file() or p.stat().st_size > HF_QUANT_CONFIG_MAX:
            return None
        q = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    return normalise(q) if isinstance(q, dict) else None


def quantiser(q: dict, model_type: str | None) -> str:
    """The vLLM quant method name a quantization_config resolves to (the overrides that matter here)."""
    method = str(q.get("quant_method") or "").lower().replace("_", "-") if q.get("quant_method") else ""
    if method == "compressed-tensors":
        return method
    method = str(q.get("quant_method") or "").lower()
    if method in ("fp8", "deepseek_v4_fp8") and model_type == "deepseek_v4":
        return "deepseek_v4_fp8"  # DeepseekV4FP8Config.override_quantization_method
    if method == "modelopt" and str(q.get("quant_algo") or "").upper() == "NVFP4":
        return "modelopt_fp4"
    return method


def ignore_list(q: dict, name: str) -> tuple[str | None, list[str]]:
    """(the key vLLM reads the ignore list from, its patterns) for quantiser `name`."""
    spec = rules()["quantisers"][name]
    for key in spec["keys"]:
        value = q.get(key)
        if key == "dynamic" and isinstance(value, dict):
            return key, [k for k in value if isinstance(k, str) and k.startswith("-:")]
        if isinstance(value, list) and value:
            return key, [v for v in value if isinstance(v, str)]
    return None, []


def _re_match(pattern: str, name: str) -> bool:
    """re.match, with a pattern that is not a regular expression matching nothing (the engine would
    refuse the config at load; this check does not guess what it meant)."""
    try:
        return re.match(pattern, name) is not None
    except (re.error, RecursionError):
        return False


def matching_pattern(module_names: list[str], patterns: list[str], modes: list[str]) -> str | None:
    """The first pattern that leaves any of the module's names out, as vLLM's quantiser matches it."""
    for pattern in patterns:
        for name in module_names:
            if "exact" in modes and pattern == name:
                return pattern
            if "regex" in modes and pattern.startswith("re:") and _re_match(pattern[3:], name):
                return pattern
            if "negative_regex" in modes and pattern.startswith("-:") and _re_match(pattern[2:], name):
                return pattern
            if "substring" in modes and not pattern.startswith(("re:", "-:")) and pattern in name:
                return pattern
            if "fnmatch" in modes and fnmatch(name, pattern):
                return pattern
    return None


@lru_cache(maxsize=1)
def _suffixes() -> tuple[tuple[str, str], ...]:
    """(".suffix", role), longest first: `weight_scale_2` before `weight_scale`, `weight_scale` before `scale`."""
    r = rules()
    return tuple(("." + s, "weight" if s in r["weights"] else s)
                 for s in sorted(r["weights"] + r["sidecars"], key=len, reverse=True))


def split(name: str) -> tuple[str, str] | None:
    """A tensor name -> (module, role): role is `weight` for the values or the sidecar's name."""
    for dotted, role in _suffixes():
        if name.endswith(dotted):
            return name[: -len(dotted)], role
    return None


class Module:
    __slots__ = ("name", "weight", "sidecars")

    def __init__(self, name: str):
        self.name, self.weight, self.sidecars = name, None, {}

    @property
    def quantised(self) -> bool:
        return bool(self.sidecars) or (self.weight is not None and self.weight.dtype in rules()["quantised_dtypes"])

    def signature(self) -> tuple:
        return (self.weight.dtype if self.weight is not None else None, tuple(sorted(self.sidecars)))

    def describe(self) -> str:
        w = self.weight
        stored = f"{w.name} {w.dtype}" if w is not None else f"{self.name} (no weight)"
        return stored + (f" + {', '.join(sorted(self.sidecars))}" if self.sidecars else ", no scale sidecars")


def modules(tensors, prefix: str | None = None) -> dict[str, Module]:
    out: dict[str, Module] = {}
    for name, info in tensors.items():
        if prefix is not None and not name.startswith(prefix):
            continue
        parts = split(name)
        if parts is None:
            continue
        mod, role = parts
        m = out.setdefault(mod, Module(mod))
        if role == "weight":
            if m.weight is None or name.endswith((".weight_packed", ".qweight")):
                m.weight = info
        else:
            m.sidecars[role] = info
    return {k: m for k, m in out.items() if m.weight is not None and len(m.weight.shape) >= 2 or m.sidecars}


def mtp_prefixes(target) -> list[tuple[str, str]]:
    """[(checkpoint prefix, engine prefix)] of the target's own MTP layers (empty: none declared)."""
    spec = rules()["mtp_layers"].get(target.model_type) or rules()["mtp_layers"].get(target.text_model_type)
    if not spec:
        return []
    text = text_part(target.raw)
    count = text.get(spec["count_key"], target.raw.get(spec["count_key"], spec.get("default_count", 0)))
    L = target.num_layers
    if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= MAX_MTP_LAYERS or not isinstance(L, int):
        return []

    def fill(pattern: str, i: int) -> str:
        return pattern.replace("{L+i}", str(L + i)).replace("{i}", str(i))

    return [(fill(spec["checkpoint"], i), fill(spec.get("engine", spec["checkpoint"]), i)) for i in range(count)]


def _counterparts(tensors, mtp: tuple[str, ...]) -> dict[str, list[tuple[int, Module]]]:
    """Main-layer modules by their name after the layer index (`self_attn.q_a_proj`, `ffn.experts.0.w1`)."""
    main: dict[str, list[tuple[int, Module]]] = {}
    for mod_name, m in modules({n: t for n, t in tensors.items() if not n.startswith(mtp)}).items():
        hit = LAYER.match(mod_name)
        if hit:
            main.setdefault(hit.group(3), []).append((int(hit.group(2)), m))
    return main


def _shown(items: list[str]) -> str:
    more = len(items) - SHOWN
    return "; ".join(items[:SHOWN]) + (f"; and {more} more" if more > 0 else "")


def _compare_mtp_block(tckpt, prefixes, patterns, modes):
    """Each MTP module against the last main layer that has it: (stored unlike its counterpart, left out by the
    ignore list but stored quantised, quantised by the config but stored plain, the patterns that matched,
    modules compared, MTP-only modules not judged)."""
    main = _counterparts(tckpt.tensors, tuple(p for p, _ in prefixes))
    unlike: list[str] = []      # stored unlike the counterpart the engine builds it like
    stored_q: list[str] = []    # left out by the ignore list, stored quantised
    stored_plain: list[str] = []  # quantised by the config (counterpart left out), stored unquantised
    pattern_seen: set[str] = set()
    compared = skipped = 0
    for ck, eng in prefixes:
        for mod_name, m in sorted(modules(tckpt.tensors, ck).items()):
            rest = mod_name[len(ck):]
            names = [mod_name, eng + rest]
            pairs = main.get(rest)
            if not pairs:
                skipped += 1
                continue
            compared += 1
            _, c = max(pairs, key=lambda p: p[0])  # the last main layer that has the module
            hit_m = matching_pattern(names, patterns, modes)
            hit_c = matching_pattern([c.name, re.sub(r"^.*?layers\.", "model.layers.", c.name)], patterns, modes)
            if bool(hit_m) == bool(hit_c):
                if m.signature() != c.signature():
                    unlike.append(f"{m.describe()} vs {c.describe()}")
                    pattern_seen.add(hit_m or "")
            elif hit_m and m.quantised:
                stored_q.append(m.describe())
                pattern_seen.add(hit_m)
            elif hit_c and not m.quantised:
                stored_plain.append(f"{m.describe()} ({c.name} is left out by {hit_c!r}, this module is not)")
    return unlike, stored_q, stored_plain, pattern_seen, compared, skipped


def mtp_quant_check(target, tckpt, *, same_checkpoint: bool) -> list[Diagnostic]:
    """Findings for a target whose checkpoint carries its own MTP block (`same_checkpoint`: the draft
    is read from it, as for the mtp / deepseek-mtp recipes)."""
    if not same_checkpoint:
        return []
    q = quant_config(target.raw)
    where = Location(target.source, key_path="quantization_config")
    if q is None:
        q = side_quant_config(tckpt.folder)
        where = Location(f"{tckpt.folder}/{HF_QUANT_CONFIG}", key_path="quantization")
    if q is None:
        return []
    prefixes = mtp_prefixes(target)
    if not prefixes:
        return []
    name = quantiser(q, target.model_type)
    present = [p for p, _ in prefixes if any(n.startswith(p) for n in tckpt.tensors)]
    if not present:
        return [diag("SRG617", f"quantised target: its checkpoint holds no MTP tensors under "
                     f"{', '.join(p for p, _ in prefixes)}; nothing to compare (SRG610 says whether the plan needs them)",
                     where, severity=INFO)]
    if name not in rules()["quantisers"]:
        return [diag("SRG617", f"quantised target (quant_method {q.get('quant_method')!r}): how vLLM's quantiser "
                     "reads its ignore list is not in surgery/data/mtp_quant.yaml; the MTP block's storage was not "
                     "compared", where, severity=INFO)]
    key, patterns = ignore_list(q, name)
    modes = rules()["quantisers"][name]["match"]
    unread = [k for k in rules()["ignore_spellings"] if k in q and k != key and k not in rules()["quantisers"][name]["keys"]]
    unlike, stored_q, stored_plain, pattern_seen, compared, skipped = _compare_mtp_block(tckpt, prefixes, patterns, modes)
    qm = q.get("quant_method")
    spell = f"{key} {patterns[:4]}{' ...' if len(patterns) > 4 else ''}" if key else "no ignore list"
    also = (f"; {', '.join(repr(k) for k in unread)} {'is' if len(unread) == 1 else 'are'} present but vLLM's "
            f"{name} config does not read {'it' if len(unread) == 1 else 'them'} (it reads "
            f"{' / '.join(rules()['quantisers'][name]['keys'])})") if unread else ""
    out: list[Diagnostic] = []
    def at(items: list[str]) -> Location:
        """The first tensor named: its shard file and name."""
        name = items[0].split(" ")[0]
        info = tckpt.tensors.get(name)
        return Location(info.file if info is not None else tckpt.folder, key_path=name)

    if unlike:
        pats = sorted(p for p in pattern_seen if p)
        why = (f"both left out by {pats}" if pats else "no ignore pattern matches either")
        out.append(diag("SRG616", f"{len(unlike)} MTP module(s) of the quantised target are stored unlike the main "
                        f"layers the engine builds them like ({why}; quantization_config quant_method {qm!r}, {spell}"
                        f"{also}): {_shown(unlike)}", at(unlike),
                        "store the MTP block as the main layers are, or add its modules to the ignore list vLLM reads "
                        "(vllm#43455: an NVFP4 conversion with a BF16 mtp.* block, MTP acceptance 1.82 % vs 80.56 %)",
                        severity=ERROR))
    if stored_q:
        out.append(diag("SRG616", f"{len(stored_q)} MTP module(s) are left out of quantisation by the config "
                        f"(quant_method {qm!r}, {key}: {sorted(pattern_seen - {''})}) but stored quantised: the engine "
                        f"builds them unquantised and their scales have nowhere to go: {_shown(stored_q)}",
                        at(stored_q),
                        "drop the MTP modules from the ignore list, or store them unquantised", severity=ERROR))
    if stored_plain:
        out.append(diag("SRG616", f"{len(stored_plain)} MTP module(s) are quantised by the config (quant_method {qm!r}, "
                        f"{spell}{also}) but stored without quantisation: {_shown(stored_plain)}",
                        at(stored_plain),
                        "add the MTP modules to the ignore list vLLM reads, or quantise them", severity=ERROR))
    if not out:
        out.append(diag("SRG617", f"quantised target (quant_method {qm!r}, {spell}{also}): {compared} MTP module(s) "
                        f"stored as the config implies" + (f"; {skipped} MTP-only module(s) with no main-layer "
                                                          "counterpart not judged" if skipped else ""),
                        where, severity=INFO))
    return out
