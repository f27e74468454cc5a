"""What a draft's format means for the plan (issue 24), as coded findings from config.json alone:

- SRG652 (info): the format, the producer (format markers or --producer), the aux ids each vLLM runner
  will read and the ids the head was trained on, both in vLLM's convention, and the verifier check;
- SRG653: a speculators field vLLM does not read; several proposal methods (vLLM takes the first);
- SRG654: the speculators verifier is another model than --target (what is compared: see codes.yaml);
- SRG655: the file's k against the k the recipe / command asks for;
- SRG656: a runner will read other layers than the head was trained on (convention, nesting);
- SRG657: the legacy and v2 runners read different layers; SRG658: norm_before_residual absent;
- SRG659 (warning): explicit ids whose producers number them differently (a plain EAGLE-3 config),
  producer unknown; the nested layout's writers all number outputs, so there it is SRG656;
- SRG665: a speculators dflash / dspark file whose own target_layer_ids are not its aux ids - 1.

`misread_by_runner` is the serving side of SRG656: the one runner that will serve the head, as an
error the plugin raises at engine start (surgery/vllm/config_check.py), so a head whose ids the engine
would read in another convention is never served wrong in silence.
"""
from __future__ import annotations

import json
from pathlib import Path

from ..text.diagnostics import Diagnostic, Location, diag
from . import format_of, original_config
from .conventions import runner_reads, to_vllm, trained_on
from .recognise import DraftFormat
from .speculators import block_draft_ids
from .table import algorithm, formats

DRAFT_METHODS = ("eagle", "eagle3")


def _target_names(target) -> list[str]:
    """Names the target is known by: its folder / file name, and the `_name_or_path` / `_hf_repo`
    its config.json records (read again: the facts drop `_` annotations)."""
    src = Path(target.source)
    pin = target.pin() if hasattr(target, "pin") else None
    if pin and pin.get("repo_id"):  # a hub model: its id is its name (the path is `org/name@sha/config.json`)
        return [pin["repo_id"]]
    names = [src.parent.name if src.name == "config.json" else src.stem]
    try:
        raw = json.loads(src.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raw = {}
    names += [raw[k] for k in ("_name_or_path", "_hf_repo") if isinstance(raw.get(k), str)]
    return [n for n in names if n]


def _last(name: str) -> str:
    return name.rstrip("/").rsplit("/", 1)[-1].lower()


def verifier_findings(fmt: DraftFormat, draft, target) -> tuple[list[Diagnostic], str]:
    s = fmt.speculators
    where = Location(draft.source, key_path="speculators_config.verifier")
    names = _target_names(target)
    by_path = Path(s.verifier).expanduser().resolve() == Path(target.source).resolve().parent \
        if Path(s.verifier).expanduser().exists() else False
    by_name = by_path or any(_last(s.verifier) == _last(n) for n in names)
    compared = f"verifier {s.verifier!r} vs target {', '.join(repr(n) for n in names)}"
    archs = set(s.verifier_architectures)
    if archs and target.architectures and not archs & set(target.architectures):
        return [diag("SRG654", f"{compared}: the verifier's architectures {sorted(archs)} are not the target's "
                     f"{list(target.architectures)}", where)], "verifier differs"
    if not by_name:
        return [diag("SRG654", f"{compared}: no name matches (compared by path and last path component"
                     f"{'; architectures agree' if archs else ''}); vLLM serves the verifier when the head "
                     "folder is given as the model", where, severity="warning")], "verifier name differs"
    return [], f"verifier {s.verifier} = target ({'path' if by_path else 'name'}" + \
        (", architectures" if archs else "") + ")"


# where a block-drafter file may also write the draft's own target-layer ids (vLLM overwrites or ignores them)
NATIVE_ID_KEYS = ("target_layer_ids", "dspark_target_layer_ids", "dflash_config.target_layer_ids",
                  "transformer_layer_config.target_layer_ids", "transformer_layer_config.dspark_target_layer_ids",
                  "transformer_layer_config.dflash_config.target_layer_ids")


def _lookup(cfg: dict, dotted: str):
    for part in dotted.split("."):
        cfg = cfg.get(part) if isinstance(cfg, dict) else None
    return cfg


def block_draft_findings(fmt: DraftFormat, draft, target, k: int | None) -> list[Diagnostic]:
    """SRG652 for a speculators dflash / dspark file: the ids the engine captures (the file's
    aux_hidden_state_layer_ids) and the draft's own numbering vLLM derives (minus one); SRG665 for
    each target_layer_ids the file also writes that is not that derived numbering."""
    s = fmt.speculators
    algo = algorithm(s.algorithm)
    cfg = original_config(draft.raw)
    capture, native = block_draft_ids(cfg, algo, draft.source)
    rule = algo["aux_ids"]
    parts = [f"draft format speculators {s.algorithm} ({formats()['speculators']['writer']})",
             f"vLLM ({algo['source']}) captures {capture} ({rule['key']} -> {rule['to']}, capture numbering: "
             f"id i = input of target layer i) and gives the draft {rule['to_native']} {native} (id {rule['shift']:+d}: "
             "the target layer whose output it reads)"]
    found, verdict = verifier_findings(fmt, draft, target)
    parts += [verdict, f"method {s.method}, k {s.num_speculative_tokens} (proposal_methods[0])"]
    out = [diag("SRG652", "; ".join(parts), Location(draft.source))] + found
    return out + _speculators_findings(fmt, draft, k) + shifted_own_ids(fmt, draft)


def shifted_own_ids(fmt: DraftFormat, draft) -> list[Diagnostic]:
    """SRG665 for each draft-numbering `target_layer_ids` a speculators dflash / dspark file writes
    that is not its aux ids - 1 (what vLLM gives the draft); empty for any other file."""
    algo = algorithm(fmt.speculators.algorithm) if fmt.speculators is not None else None
    if not (algo or {}).get("aux_ids"):
        return []
    cfg = original_config(draft.raw)
    capture, native = block_draft_ids(cfg, algo, draft.source)
    rule = algo["aux_ids"]
    out = []
    for key in NATIVE_ID_KEYS:
        written = _lookup(cfg, key)
        if written and list(written) != native:
            shifted = "; they equal the aux ids unshifted: DFlash's own numbering written as capture ids, " \
                "every feature read one layer early" if list(written) == capture else ""
            out.append(diag("SRG665", f"`{key}` {list(written)} is not {native}, the {rule['key']} {capture} minus "
                            f"one that vLLM gives the draft (it captures {capture}){shifted}",
                            Location(draft.source, key_path=key)))
    return out


def format_findings(draft, target, producer: str | None = None, num_speculative_tokens: int | None = None,
                    method: str | None = None, runners: dict | None = None, engine: str = "vllm") -> list[Diagnostic]:
    """`runners`: the judged release's runners (releases/vllm.json `runners`: legacy / v2 present); a runner
    the release does not have reads nothing (0.34 has only the V2 runner). None: both, as before.
    `engine`: what the runners read is vLLM's (SRG656 / SRG657 / SRG659, the speculators reader); for another
    engine only the format itself is said (SGLang's capture: checks/sglang_start.py SRG779)."""
    fmt = format_of(draft, producer)
    if engine != "vllm":
        return _format_line(fmt, draft, target)
    if fmt.speculators is not None and (algorithm(fmt.speculators.algorithm) or {}).get("aux_ids"):
        return block_draft_findings(fmt, draft, target, num_speculative_tokens)
    if method not in (None, *DRAFT_METHODS):
        return []
    if fmt.name == "hf" and not fmt.ids_written:
        return []
    out: list[Diagnostic] = []
    where = Location(draft.source, key_path=fmt.where_written or "eagle_aux_hidden_state_layer_ids")
    L = target.num_layers
    reads = runner_reads(fmt, L)
    if runners is not None:
        reads = {r: v for r, v in reads.items() if runners.get(r)} or reads
    trained = trained_on(fmt, L)
    parts = _format_parts(fmt)
    parts.append("vLLM reads (its convention: id i = input of layer i) " +
                 ", ".join(f"{r} runner {list(ids)} ({why})" for r, (ids, why) in reads.items()))
    if trained is not None:
        parts.append(f"trained on {list(trained[0])} ({trained[1]})")
    s = fmt.speculators
    if s is not None:
        found, verdict = verifier_findings(fmt, draft, target)
        out += found
        parts.append(verdict)
        parts.append(f"method {s.method}, k {s.num_speculative_tokens} (proposal_methods[0])")
        out += _speculators_findings(fmt, draft, num_speculative_tokens)
    out.insert(0, diag("SRG652", "; ".join(parts), Location(draft.source)))
    if trained is None:
        what = "a plain EAGLE-3 config" if fmt.name not in ("modelopt", "nested") else \
            "the nested eagle_config layout without a producer's marker" if fmt.producer_from == "unknown" else \
            f"the nested eagle_config layout ({fmt.producer_from})"
        readings = "; ".join(f"as {w}'s: trained on {list(to_vllm(fmt.ids_written, w))}" for w in fmt.writers)
        misread = [r for r, (ids, _) in reads.items()
                   if any(tuple(ids) != to_vllm(fmt.ids_written, w) for w in fmt.writers)]
        out.append(diag("SRG659", f"ids {list(fmt.ids_written)} in {what}: the producers that write it number them "
                        f"differently ({readings}; vLLM's convention: id i = input of layer i); the "
                        f"{' and '.join(misread) or list(reads)[0]} runner{'s read' if len(misread) > 1 else ' reads'} "
                        f"{list(reads[(misread or list(reads))[0]][0])}: "
                        "under one of these readings the head drafts from layers one off, acceptance drops with "
                        "nothing logged (-22.4 points on the miniature)", where, severity="warning"))
    else:
        for runner, (ids, why) in reads.items():
            if tuple(ids) != tuple(trained[0]):
                out.append(diag("SRG656", f"the {runner} runner captures target layers {list(ids)} ({why}), the head "
                                f"was trained on {list(trained[0])} ({trained[1]}), both in vLLM's convention", where))
    if "legacy" in reads and "v2" in reads and reads["legacy"][0] != reads["v2"][0]:
        out.append(diag("SRG657", f"legacy runner reads {list(reads['legacy'][0])}, v2 runner "
                        f"{list(reads['v2'][0])} ({reads['v2'][1]})", where))
    return out


def _speculators_findings(fmt: DraftFormat, draft, k: int | None) -> list[Diagnostic]:
    s = fmt.speculators
    out = []
    for key in s.unread:
        out.append(diag("SRG653", f"`{key}` is not read by vLLM's speculators reader", Location(draft.source, key_path=key)))
    if s.proposal_methods > 1 and s.default_proposal_method not in (None, s.first_proposal_type):
        out.append(diag("SRG653", f"{s.proposal_methods} proposal methods, default_proposal_method "
                        f"{s.default_proposal_method!r}: vLLM 0.32 uses proposal_methods[0] "
                        f"({s.first_proposal_type!r}, k {s.num_speculative_tokens})",
                        Location(draft.source, key_path="speculators_config.proposal_methods")))
    if k is not None and k != s.num_speculative_tokens:
        out.append(diag("SRG655", f"the file's k is {s.num_speculative_tokens}, the command asks for {k}",
                        Location(draft.source, key_path="speculators_config.proposal_methods[0].speculative_tokens")))
    for key, value in s.norm_vllm.items():
        if key not in s.norm_written and value != s.norm_speculators[key]:
            out.append(diag("SRG658", f"`{key}` is absent: vLLM builds {value}, the speculators config class "
                            f"{s.norm_speculators[key]}", Location(draft.source, key_path=key)))
    return out


def misread_by_runner(draft, target, runner: str, producer: str | None = None) -> list[Diagnostic]:
    """SRG656 (error) when the vLLM model runner `runner` ("legacy" or "v2") would capture other
    target layers than the head was trained on; empty when it reads them right or the producer's
    convention is unknown (SRG659 says that in the plan). A speculators dflash / dspark file whose own
    target_layer_ids are not its aux ids - 1 is SRG665 here as well: served, it drafts from shifted layers."""
    fmt = format_of(draft, producer)
    if fmt.name == "hf" and not fmt.ids_written:
        return []
    shifted = shifted_own_ids(fmt, draft)
    if shifted:  # a block drafter whose two numberings disagree: refused at engine start too
        return shifted
    trained = trained_on(fmt, target.num_layers)
    reads = runner_reads(fmt, target.num_layers)
    if trained is None or runner not in reads or tuple(reads[runner][0]) == tuple(trained[0]):
        return []
    ids, why = reads[runner]
    folder = Path(draft.source).parent if Path(draft.source).name == "config.json" else Path(draft.source)
    return [diag("SRG656", f"vLLM's {runner} model runner would capture target layers {list(ids)} ({why}); the "
                 f"{fmt.name}-format head was trained on {list(trained[0])} ({trained[1]}), both in vLLM's "
                 "convention: served as it is, it drafts from the wrong layers",
                 Location(draft.source, key_path=fmt.where_written or "eagle_aux_hidden_state_layer_ids"),
                 hint=f"write the ids in vLLM's convention at the top level, where every runner reads them: "
                      f"`surgery convert {folder} --to speculators OUT --target TARGET` (or --to eagle), then "
                      "serve OUT")]


def _format_line(fmt: DraftFormat, draft, target) -> list[Diagnostic]:
    """SRG652 without vLLM's readings: the format, its producer and the ids written (for an engine other than
    vLLM, whose own reading its own checks say)."""
    if fmt.name == "hf" and not fmt.ids_written:
        return []
    parts = _format_parts(fmt)
    trained = trained_on(fmt, target.num_layers)
    if trained is not None:
        parts.append(f"trained on {list(trained[0])} ({trained[1]}; vLLM's convention: id i = input of layer i)")
    return [diag("SRG652", "; ".join(parts), Location(draft.source))]


def _format_parts(fmt: DraftFormat) -> list[str]:
    """SRG652's opening, for every engine: the format and its writer, the producer and how it was told, the
    ids as written."""
    parts = [f"draft format {fmt.name} ({formats()[fmt.name]['writer']})" if fmt.name in formats()
             else f"draft format {fmt.name}",
             f"producer {fmt.producer} ({fmt.producer_from})" if fmt.producer else
             f"producer one of {', '.join(fmt.writers)} (no mark; the writers of this layout)" if fmt.writers else
             f"producer unknown ({fmt.producer_from})"]
    if fmt.ids_written:
        parts.append(f"ids written {list(fmt.ids_written)} at {fmt.where_written}")
    return parts
