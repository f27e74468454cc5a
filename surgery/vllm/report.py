"""`SURGERY_REPORT=path`: what the plugin did, as one JSON file, for monitoring.

Written by the process that applied the recipe (the vLLM worker) after load, again after the KV
caches are bound and again after the engine's warm-up (before the first request); each write replaces the whole file atomically (temp file in the same folder, then
`os.replace`), so a reader never sees half a report. This module is the one writer and the one
place the per-rank path is decided; the audit mode (surgery/vllm/audit.py) writes its own keys
through `write`. Keys of the apply report (stable):

    stage           "loaded" | "kv_bound" | "warmed"
    recipe, recipe_file, verified (bool: apply verification, once bound the KV-cache checks, once warmed
                    the checks after the warm-up)
    plan            the plan as `surgery plan --json` prints it
    apply           applied operation ids, seconds
    verify          every verification check
    not_applicable  operations this engine could not perform (coded), never silently dropped
    kv_binding      KV-cache identity checks (null until the caches are bound)
    warmed          every check again after the profile / warm-up forwards: ok, checks, problems (SRG510,
                    each naming the engine step that changed the value where known), kv_scales_fix (the
                    calculate_kv_scales fix, SRG517) (null until the warm-up ran)
    load            load_format and where "has own weights" came from (dummy load: every declared
                    parameter, SRG512)
    findings        audit findings (list; empty unless an auditor wrote some)
    guard           the acceptance guard's record (surgery/vllm/guard.py, written by the engine-core process
                    at each trip / episode end: configuration, trips with their numbers, each stream's last
                    window); null until the guard first trips or ends an episode; the worker's rewrites keep it

With tensor/pipeline parallelism every worker holds a part of the model: rank r > 0 writes
`path.rank<r>` next to `path` (rank 0 writes `path` itself), so no two processes race on one file.
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from . import state
from ..text.diagnostics import diag

ENV_REPORT = "SURGERY_REPORT"
KEYS = ("stage", "recipe", "recipe_file", "verified", "plan", "apply", "verify", "not_applicable", "kv_binding",
        "warmed", "load", "findings", "guard")


def report_path(rank: int | None = None) -> Path | None:
    """Where this process writes its report (None: SURGERY_REPORT unset)."""
    raw = os.environ.get(ENV_REPORT)
    if not raw:
        return None
    path = Path(raw)
    return path if not rank else path.with_name(f"{path.name}.rank{rank}")


def warmed_dict(warmed: dict | None) -> dict | None:
    """The stage `warmed` as plain data."""
    if warmed is None:
        return None
    return {"ok": bool(warmed.get("ok")), "checks": [c.to_dict() for c in warmed.get("checks") or ()],
            "problems": [d.to_dict() for d in warmed.get("problems") or ()], "skipped": warmed.get("skipped"),
            "kv_scales_fix": warmed.get("kv_scales_fix")}


def build_report(plan: Any, apply_report: Any = None, verification: Any = None, kv_checks: list | None = None,
                 findings: list | None = None, warmed: dict | None = None, load: dict | None = None) -> dict:
    """The report as plain data (no vLLM needed: the objects come from surgery.apply / surgery.plan)."""
    verified = verification is not None and verification.ok
    if kv_checks is not None:
        verified = verified and all(c.ok for c in kv_checks)
    if warmed is not None:
        verified = verified and bool(warmed.get("ok"))
    stage = "warmed" if warmed is not None else "kv_bound" if kv_checks is not None else "loaded"
    return {
        "stage": stage,
        "recipe": plan.recipe,
        "recipe_file": plan.recipe_file,
        "verified": bool(verified),
        "plan": plan.to_dict(),
        "apply": None if apply_report is None else {"applied": list(apply_report.applied),
                                                    "seconds": apply_report.seconds},
        "verify": None if verification is None else verification.to_dict(),
        "not_applicable": [] if apply_report is None else [d.to_dict() for d in apply_report.not_applicable],
        "kv_binding": None if kv_checks is None else {"ok": all(c.ok for c in kv_checks),
                                                       "checks": [c.to_dict() for c in kv_checks]},
        "warmed": warmed_dict(warmed),
        "load": None if load is None else {k: v for k, v in load.items() if k != "said"},
        "findings": list(findings or []),
        "guard": None,  # the engine core's (guard.py); write_for_proposer keeps the one in the file
    }


def write_json_atomic(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=2, sort_keys=False, default=str)
            fh.write("\n")
        os.chmod(tmp, 0o644)  # mkstemp makes it 0600; monitoring usually reads as another user
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def read_report(path: str | Path) -> dict:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def update(path: Path, **changes: Any) -> dict:
    """Read-modify-write of one report (e.g. an auditor adding `findings`); atomic like every write."""
    data = read_report(path) if path.exists() else {k: None for k in KEYS}
    data.update(changes)
    write_json_atomic(path, data)
    return data


def worker_rank() -> int | None:
    """This process's rank in vLLM's world group (None outside an initialised worker: one rank)."""
    try:
        from vllm.distributed import get_world_group

        return int(get_world_group().rank)
    except Exception:  # noqa: BLE001 - not inside an initialised vLLM worker
        return None


def write(data: dict, path: Path | None) -> Path | None:
    """Write one report atomically. A failure to write is a visible coded warning, not a stopped
    engine: the report is for monitoring, the engine it describes is fine."""
    if path is None:
        return None
    try:
        write_json_atomic(path, data)
    except OSError as exc:
        from .log import DIAGNOSTIC, get_logger

        get_logger().warning(DIAGNOSTIC.fmt, diag("SRG420", f"cannot write the report {path}: "
                                                      f"{exc.strerror or exc}").render())
        return None
    return path


def write_for_proposer(proposer: Any, rank: int | None = None) -> Path | None:
    """Write the report of the plan stored on a live proposer (by the plugin); keeps findings
    already recorded for it."""
    return write_state(state.get(proposer), rank)


def write_state(st: state.PluginState | None, rank: int | None = None) -> Path | None:
    """Write the report of a plugin state (the draft-load stage hands its own); keeps the guard's record
    already in the file."""
    path = report_path(worker_rank() if rank is None else rank)
    if path is None or st is None or st.plan is None:
        return None
    data = build_report(st.plan, st.report, st.verification, st.kv_checks, None, st.warmed, st.load_info)
    kept = _kept_guard(path)
    if kept is not None:
        data["guard"] = kept
    return write(data, path)


def _kept_guard(path: Path):
    """The guard record already in the file (written by the engine core), kept across a worker's rewrite."""
    try:
        return read_report(path).get("guard") if path.exists() else None
    except (OSError, ValueError, AttributeError):
        return None
