"""`surgery apply --ablate` on the HF path: each recipe step removed in turn (and all of them), plus
a share_kv map wrong on purpose, each rerun through the decoding check and restored. A command
runner (it loops over the rows), so it sits with the commands, not in surgery/hf/."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from ..applier import apply_plan, rollback, verify_plan
from ..live.kvrouting import default_kv_sources, first_kv_shared_layer, text_config
from ..ops.registry import UNITS
from ..options import ApplyOptions
from ..pairs import load_ablations


WRONG_MAP_VARIANT = "share_kv with a wrong map (first of each type)"
FIELD_ROWS = Path(__file__).resolve().parent.parent / "data" / "pairs" / "ablations_hf.yaml"
ROLES = {"lm_head": "get_output_embeddings"}  # role -> the transformers accessor of the draft's module


def field_rows(recipe: str | None) -> list[dict]:
    """The recipe's HF field rows (surgery/data/pairs/ablations_hf.yaml)."""
    return list(load_ablations(FIELD_ROWS).get(recipe) or ()) if recipe else []


class _Randomised:
    """A field row's `rewire: {role: random}` on the live draft: seeded random weights of the module's own
    shape, dtype and scale in place, the draft's own weights put back on exit (a tied embedding shares
    the weight: it is restored with it)."""

    def __init__(self, draft, rewire: dict, seed: int = 0):
        self.draft, self.rewire, self.seed, self.saved = draft, rewire, seed, []

    def __enter__(self):
        import torch

        gen = torch.Generator().manual_seed(self.seed)
        for role, kind in self.rewire.items():
            if role not in ROLES or kind != "random":
                raise ValueError(f"HF ablation rewire {role}: {kind!r} (HF rows know {sorted(ROLES)} -> random)")
            weight = getattr(self.draft, ROLES[role])().weight
            self.saved.append((weight, weight.detach().clone()))
            noise = torch.randn(weight.shape, generator=gen, dtype=torch.float32) * float(weight.detach().float().std())
            with torch.no_grad():
                weight.copy_(noise.to(weight.dtype))
        return self

    def __exit__(self, *exc):
        import torch

        with torch.no_grad():
            for weight, original in self.saved:
                weight.copy_(original)
        return False


def ablation(plan, draft, target, report, prompts, options: ApplyOptions, progress, check=None,
             guard=None) -> list[dict]:
    """Remove each recipe step in turn (and all of them), rerun the decoding check, restore.

    Besides the removals, one variant keeps share_kv but with a deliberately wrong map (the first
    unshared target layer of each type instead of the last): in HF an unwired draft layer reads
    ``shared_kv_states[layer_type]``, which transformers fills from the same layers as the
    gemma4-mtp rule, so removing share_kv alone changes nothing there; the wrong map shows what
    the map is worth. Then the recipe's field rows (ablations_hf.yaml), on the whole wiring. Rows may
    carry a ``note`` saying why a removal changes nothing. ``guard``: check result -> the acceptance
    guard's verdict (surgery/hf/guard.py), carried by each row that ran."""
    from ..hf.specdec import decode_check  # imports torch

    rows = []
    steps = sorted({o.step for o in plan.operations})
    mutations_per_step: dict[int, int] = {}
    for p in report.prepared:
        mutations_per_step[p.op.step] = mutations_per_step.get(p.op.step, 0) + len(p.mutations)
    variants = [(f"without step {s}: " + _step_label(plan, s), plan.without_step(s),
                 _removal_note(plan, s, target, draft, mutations_per_step)) for s in steps]
    wrong = _wrong_map_variant(plan, target)
    if wrong is not None:
        variants.append((WRONG_MAP_VARIANT, wrong[0], wrong[1]))
    variants.append(("without any wiring", None, None))
    fields = [(r["name"], plan, r.get("because") or None, r.get("rewire") or {}) for r in field_rows(plan.recipe)]
    rollback(report)
    try:
        for label, variant, note, rewire in [v + ({},) for v in variants] + fields:
            progress(f"ablation: {label}")
            row: dict[str, Any] = {"variant": label}
            sub = None
            try:
                if variant is not None:
                    sub = apply_plan(variant, draft, target, strict=options.strict)
                    row["verified"] = verify_plan(variant, draft, target, report=sub).ok
                with _Randomised(draft, rewire):
                    d = (check or decode_check)(target, draft, prompts, options.max_new_tokens,
                                                options.num_draft_tokens)
                row.update({"runs": True, "acceptance_rate": d["acceptance_rate"], "identical": d["identical"],
                            "drafted": d["drafted"], "accepted": d["accepted"]})
                if guard is not None:
                    row["guard"] = guard(d)
            except Exception as exc:  # a removed step can make the draft unrunnable: that is the finding
                row.update({"runs": False, "error": f"{type(exc).__name__}: {str(exc)[:200]}"})
            finally:
                if sub is not None:
                    rollback(sub)
            if note:
                row["note"] = note
            rows.append(row)
    finally:
        # leave the pair wired as the main report says
        apply_plan(plan, draft, target, strict=options.strict)
    return rows


def _unshared_layer_types(target) -> list[str]:
    cfg = text_config(target.config)
    return list(cfg.layer_types[: first_kv_shared_layer(cfg)])


def _removal_note(plan, step: int, target, draft, mutations_per_step: dict[int, int]) -> str | None:
    """Why removing this step cannot change the decoding check in HF, when that is known up front."""
    ops = [o for o in plan.operations if o.step == step]
    if ops and all(o.op == "share_kv" for o in ops):
        try:
            defaults = default_kv_sources(target.config)
            draft_types = text_config(draft.config).layer_types
            same = all(defaults.get(draft_types[o.draft_layer]) == o.target_layer for o in ops)
        except (AttributeError, IndexError, TypeError, ValueError):
            return None
        if same:
            pairs = ", ".join(f"{t} -> {j}" for t, j in sorted(defaults.items()))
            return ("acceptance cannot change: without share_kv an HF draft layer reads "
                    f"shared_kv_states[layer_type], which transformers fills from the same target layers as this "
                    f"map ({pairs}); see the wrong-map row for what the map is worth")
    if ops and mutations_per_step.get(step, 0) == 0:
        return "this step only checks (no mutation): removing it changes what verify proves, not what runs"
    return None


def _wrong_map_variant(plan, target):
    """(plan, note) with every share_kv op pointed at the FIRST unshared target layer of its type
    instead of the mapped one, or None when that changes nothing (one unshared layer per type)."""
    try:
        unshared = _unshared_layer_types(target)
    except (AttributeError, TypeError, ValueError):
        return None
    first = {}
    for j, t in enumerate(unshared):
        first.setdefault(t, j)
    ops, moved = [], {}
    for o in plan.operations:
        if o.op == "share_kv" and o.target_layer is not None and o.target_layer < len(unshared):
            t = unshared[o.target_layer]
            j = first[t]
            if j != o.target_layer:
                moved[t] = (o.target_layer, j)
                o = replace(o, target_layer=j, id=f"share_kv:{o.map}:{o.draft_layer}->{j}")
        ops.append(o)
    if not moved:
        return None
    note = ("wrong on purpose: the first unshared target layer of each type instead of the mapped one; "
            + "; ".join(f"{t}: target {j} instead of {old}" for t, (old, j) in sorted(moved.items())))
    unchanged = sorted({unshared[o.target_layer] for o in plan.operations if o.op == "share_kv"
                        and o.target_layer is not None and o.target_layer < len(unshared)} - set(moved))
    if unchanged:
        note += f" ({', '.join(unchanged)} unchanged: the target has only one unshared layer of that type)"
    return replace(plan, operations=tuple(ops)), note


def _step_label(plan, step: int) -> str:
    first = next(o for o in plan.operations if o.step == step)
    return UNITS[first.op].label(first)
