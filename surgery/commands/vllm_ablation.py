"""The `--ablate` rows of `surgery apply --engine vllm`: how each recipe step is removed on a live
engine (vLLM wires these pairs itself, so leaving a step out of the recipe would change nothing),
merged with the pair's field rows (surgery/data/pairs/ablations.yaml), each run on a fresh stock
engine; config edits go to a temporary copy of the draft folder, rewires to surgery/vllm/ablation.py
(performed inside the live engine; this runner builds the rows and starts the engines, so it sits
with the commands)."""
from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from ..pairs import Ablation
from ..vllm import decoding
from ..vllm.readout import brief_wiring


AUX_IDS_KEY = "eagle_aux_hidden_state_layer_ids"
# the other keys vLLM reads a draft's target-layer ids from (DFlash / DSpark numbering; surgery/facts/drafts.py)
BLOCK_ID_KEYS = ("dflash_config.target_layer_ids", "dspark_target_layer_ids", "target_layer_ids")


def _has_key(cfg: dict, dotted: str) -> bool:
    node = cfg
    for key in dotted.split("."):
        if not isinstance(node, dict) or key not in node:
            return False
        node = node[key]
    return True


def step_removals(steps: list[dict], wiring: dict | None, draft_cfg: dict | None = None) -> list[dict]:
    """How each recipe step is removed on a live vLLM engine (vLLM wires these pairs itself, so
    leaving a step out of the recipe alone would change nothing): a shared module becomes the
    draft's own, never loaded; a kept module becomes the target's; captured aux layers fall back
    to vLLM's defaults. A step whose
    effect cannot be undone after vLLM's wiring, or that wired nothing, gets a ``note`` instead."""
    shared = (wiring or {}).get("shared_roles") or {}
    rows = []
    for st in steps:
        row: dict[str, Any] = {"variant": f"without step {st['step']}: {st['label']}"}
        if st["op"] == "share_module" and shared.get(st["role"]):
            row["rewire"] = {st["role"]: "random"}
            row["because"] = f"the draft keeps its own {st['role']}, never loaded (the step left out)"
        elif st["op"] == "share_module":
            row["note"] = (f"nothing to remove: the draft's {st['role']} is its own here (the step kept it)"
                           if st["role"] in shared else f"role {st['role']} not found on the live draft")
        elif st["op"] == "keep" and st["role"] in shared and not shared[st["role"]]:
            row["rewire"] = {st["role"]: "target"}
            row["because"] = f"the draft's own {st['role']} is replaced by the target's (the step left out)"
        elif st["op"] == "capture_hidden_states":
            row["drop_config_keys"] = [AUX_IDS_KEY] + [k for k in BLOCK_ID_KEYS if _has_key(draft_cfg or {}, k)]
            row["because"] = "the head's config loses its aux layer ids: vLLM captures its defaults (2, L//2, L-3)"
        else:
            row["note"] = f"{st['op']} is not ablated in vLLM (no way to undo it after vLLM's own wiring)"
        rows.append(row)
    return rows


def ablated_draft(draft: Path, ablation, workdir: Path) -> Path:
    """A copy of the draft folder whose config.json has the ablation's edits."""
    dest = workdir / ablation.name.replace(" ", "_").replace("/", "_")[:60]
    shutil.copytree(draft, dest)
    cfg = json.loads((dest / "config.json").read_text())
    for key in ablation.drop_config_keys:
        *path, last = key.split(".")  # dotted: a nested key (dflash_config.target_layer_ids)
        node = cfg
        for part in path:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(last, None)
        if not path and isinstance(cfg.get("eagle_config"), dict):
            cfg["eagle_config"].pop(key, None)
    cfg.update(ablation.set_config)
    (dest / "config.json").write_text(json.dumps(cfg, indent=2))
    return dest


def ablation_rows(run, pair, target, draft, method, ids, reference, num_spec, max_tokens, progress,
                  spec_extra=None, guard=None, batches=None) -> list[dict]:
    """Each recipe step removed in turn, then the pair's field rows (ablations.yaml). ``guard`` /
    ``batches``: the acceptance guard on each row's stock engine and the batch sizes decoded
    (decoding.speculative_run); the row then carries the guard's record."""
    draft_cfg = json.loads((Path(draft) / "config.json").read_text())
    todo = step_removals(run["plugin"].get("steps") or [], run["inspect"], draft_cfg)

    def edit(spec):
        return (sorted(spec.get("drop_config_keys") or ()), sorted(map(repr, (spec.get("set_config") or {}).items())),
                sorted((spec.get("rewire") or {}).items()), sorted((spec.get("speculative") or {}).items()))

    for ab in (pair.ablations if pair is not None else ()):
        if ab.draft is not None and Path(target).resolve() != pair.target:
            todo.append({"variant": ab.name, "note": f"serves the built-in head {ab.draft.parent.name} on the built-in "
                         "target, not on this pair's"})  # said, never run against another target
            continue
        spec = {"variant": ab.name, "because": ab.because, "drop_config_keys": list(ab.drop_config_keys),
                "set_config": dict(ab.set_config), "rewire": dict(ab.rewire), "speculative": dict(ab.speculative),
                "draft": ab.draft}
        same = None if ab.draft else next((t for t in todo if "note" not in t and edit(t) == edit(spec)), None)
        if same is not None:  # a field row that IS a step removal: one engine, both names
            same["variant"] += f" = {ab.name}"
            same["because"] = ab.because
        else:
            todo.append(spec)
    rows = []
    for spec in todo:
        row: dict[str, Any] = {k: spec[k] for k in ("variant", "because", "note") if spec.get(k)}
        if "note" in spec:
            row["runs"] = None
            rows.append(row)
            continue
        progress(f"ablation: {spec['variant']}")
        ab = Ablation(name=spec["variant"], drop_config_keys=tuple(spec.get("drop_config_keys") or ()),
                      set_config=spec.get("set_config") or {}, rewire=spec.get("rewire") or {},
                      speculative=spec.get("speculative") or {})
        row_extra = {**(spec_extra or {}), **ab.speculative} or None
        head = spec.get("draft") or draft
        if spec.get("draft"):
            row["draft"] = str(head)
        with tempfile.TemporaryDirectory(prefix="surgery-ablate-") as tmp:
            try:
                d_folder = ablated_draft(Path(head), ab, Path(tmp)) if (ab.drop_config_keys or ab.set_config) \
                    else head
                extra = {"guard": guard, "batches": batches} if guard is not None or batches else {}
                r = decoding.speculative_run(target, d_folder, method, ids, reference, num_spec=num_spec,
                                             max_tokens=max_tokens, rewire=ab.rewire or None, spec_extra=row_extra,
                                             **extra)
                d = r["decode"]
                row.update(runs=True, acceptance_rate=d["acceptance_rate"], identical=d["identical"],
                           drafted=d["drafted"], accepted=d["accepted"],
                           accepted_per_position=d["accepted_per_position"], rewired=r["rewired"],
                           wiring=brief_wiring(r["inspect"]))
                if r.get("guard") is not None:
                    row["guard"] = r["guard"]
            except Exception as exc:  # noqa: BLE001 - a wrong wiring that cannot run is the finding
                row.update(runs=False, error=f"{type(exc).__name__}: {str(exc)[:300]}")
        rows.append(row)
    return rows
