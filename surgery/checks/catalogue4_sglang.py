"""The field's fourth catalogue, SGLang's reports (SRG807-SRG808): where a release of SGLang fails a head or an
MTP draft silently, read per release from the wheels (surgery/data/catalogue4.yaml `sglang:`: a fragment of
each fix's own code; surgery/data/releases/sglang.json `start.catalogue4`: where each release holds it, or
null). A release whose wheel lacks a fix has its bug; one the data does not cover is SRG047's.

- SRG807 (sglang#32226 -> #32334): a gpt-oss EAGLE-3 head that states its ids as hidden-state boundaries
  (the last one L, the final pre-norm state) and `norm_before_fc` in `eagle_config`, as
  nvidia/gpt-oss-120b-Eagle3-v3 does. Before the fix SGLang adds 1 to every id and captures only the
  inputs of layers below L (an error: fewer states than the fc takes, the warm-up crash, and hand-edited
  ids draft from other layers than trained), and builds no norm before the fc (a warning: acceptance).
- SRG808 (sglang#30456): a NemotronH MTP draft on a release whose load filter keeps only `mtp` names: the
  shared embed_tokens / lm_head are never loaded into the draft (accept rate 0.00).

Why a module apart from catalogue4.py: those are vLLM's findings (emitted for `--engine vllm` only);
these speak for SGLang only, against the release sglang_start.py judges.
"""
from __future__ import annotations

from ..engine.capture import sglang_aux_ids_read
from ..engine.releases import Release
from ..text.diagnostics import ERROR, WARNING, Diagnostic, Location, diag
from .catalogue3 import catalogue4_data as data  # catalogue4.py imports this module: the data read apart
from .sglang_start import judged


def reports(name: str) -> str:
    return ", ".join(r.replace("sgl-project/", "") for r in data()["checks"][name]["reports"])


def _text(raw: dict) -> dict:
    text = raw.get("text_config")
    return text if isinstance(text, dict) else raw


def _fixes(rel: Release, rule: str) -> dict:
    """{fix: "file:line" or None} for this release (None: the wheel lacks the fix)."""
    return (((rel.facts.get("start") or {}).get("catalogue4") or {}).get(rule)) or {}


def _label(rel: Release) -> str:
    return f"SGLang {rel.asked}" + ("" if rel.exact else f" (data of {rel.version})")


def _fixed_in(rule: str) -> str:
    """The first release the data holds the fix in (what the hint names)."""
    from ..engine.releases import known, release

    for version in known("sglang"):
        row = _fixes(release("sglang", version)[0], rule)
        if row and all(row.values()):
            return version
    return "a later release"


# ------------------------------------------------------------------- SRG807: eagle_config boundaries

def _norm_before_fc(raw: dict) -> str | None:
    """Where the head states norm_before_fc true: the key path, or None."""
    nested = raw.get("eagle_config")
    if isinstance(nested, dict) and nested.get("norm_before_fc") is True:
        return "eagle_config.norm_before_fc"
    return "norm_before_fc" if raw.get("norm_before_fc") is True else None


def eagle_config_boundaries_check(rel: Release, draft, target, algorithm: str | None) -> list[Diagnostic]:
    if algorithm != "EAGLE3" or draft is None or draft.source == target.source:
        return []
    rule = data()["sglang"]["eagle_config_boundaries"]
    text = _text(target.raw)
    if str(text.get("model_type") or target.raw.get("model_type") or "") not in rule["target_model_types"]:
        return []
    fixes = _fixes(rel, "eagle_config_boundaries")
    if not fixes:
        return []  # the release data holds no row for it (older data): nothing said, not guessed
    names = reports("sglang_eagle_config_boundaries")
    L = target.num_layers
    out = []
    ids = sglang_aux_ids_read(draft.raw)
    if fixes.get("final_boundary") is None and isinstance(L, int) and isinstance(ids, list) and ids \
            and all(isinstance(i, int) for i in ids) and max(ids) == L:
        captured = [i + 1 for i in ids]
        missing = [i for i in captured if i >= L]
        out.append(diag("SRG807", f"{_label(rel)} reads the head's eagle_config ids {ids} as layer outputs and adds 1 "
                        f"(models/gpt_oss.py set_eagle3_layers_to_capture): it captures the inputs of layers "
                        f"{captured}, and {missing} {'is' if len(missing) == 1 else 'are'} past the last of the "
                        f"target's {L} layers, so it hands the fc {len(captured) - len(missing)} of {len(ids)} states; "
                        f"the ids are hidden-state boundaries (the last, {L}, the final pre-norm state): "
                        f"{rule['measured']} ({names})",
                        Location(draft.source, key_path="eagle_config.eagle_aux_hidden_state_layer_ids"),
                        f"serve on SGLang {_fixed_in('eagle_config_boundaries')} or later (it takes ids whose largest "
                        "is L as boundaries), or with vLLM; editing the ids only moves the head to other layers "
                        "than it was trained on", severity=ERROR))
    key = _norm_before_fc(draft.raw)
    if key and fixes.get("norm_before_fc") is None:
        out.append(diag("SRG807", f"{_label(rel)} builds no norm before the head's fc (models/llama_eagle3.py reads no "
                        f"norm_before_fc; the checkpoint's input_norm weight is skipped at load): the head states "
                        f"{key} true and runs without the norm it was trained with, so acceptance drops with no "
                        f"error ({names})", Location(draft.source, key_path=key),
                        f"serve on SGLang {_fixed_in('eagle_config_boundaries')} or later (it reads "
                        "eagle_config.norm_before_fc, then the top-level key), or with vLLM", severity=WARNING))
    return out


# ---------------------------------------------------------------- SRG808: NemotronH MTP shared weights

def nemotron_h_mtp_check(rel: Release, draft, target, algorithm: str | None) -> list[Diagnostic]:
    if algorithm not in ("EAGLE", "NEXTN") or draft is None:
        return []
    rule = data()["sglang"]["nemotron_h_mtp_shared"]
    served = draft if draft.source != target.source else target
    archs = set(served.architectures or []) | set(target.architectures or [])
    if not archs & set(rule["architectures"]):
        return []
    fixes = _fixes(rel, "nemotron_h_mtp_shared")
    if not fixes or fixes.get("keeps_shared") is not None:
        return []
    return [diag("SRG808", f"{_label(rel)}'s NemotronH load filter for the MTP draft keeps only names holding "
                 "\"mtp\" (models/nemotron_h.py load_weights, is_mtp): the embed_tokens / lm_head the MTP layers "
                 f"share with the target are never loaded into the draft: {rule['measured']} "
                 f"({reports('sglang_nemotron_h_mtp_shared')})", Location(served.source, key_path="architectures"),
                 f"serve on SGLang {_fixed_in('nemotron_h_mtp_shared')} or later (its filter keeps embed_tokens / "
                 "lm_head), or with vLLM", severity=ERROR)]


# ----------------------------------------------------------------------------------------------- entry

def catalogue4_sglang_findings(draft, target, *, version: str | None, algorithm: str | None) -> list[Diagnostic]:
    """SGLang's catalogue-4 findings for the release sglang_start.py judges (its SRG047 line is said there)."""
    rel, _ = judged(version)
    if rel is None:
        return []
    return eagle_config_boundaries_check(rel, draft, target, algorithm) + nemotron_h_mtp_check(rel, draft, target,
                                                                                                algorithm)
