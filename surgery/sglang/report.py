"""`SURGERY_REPORT=path` for SGLang: what the hook did in SGLang's scheduler, as JSON lines.

SGLang's scheduler is a process of its own (spawned by the Engine), so what the hook did cannot be
returned to the launcher: it is appended to the file, one JSON object a line, by the scheduler
(several drafts, several events: one file with lines, never a file rewritten). Events (stable keys):

    installed   recipe, wrapped (the methods wrapped), sglang (version), pid
    applied     recipe, algorithm, applied, verified, checks, not_applicable, sglang_wiring, after_recipe, pid
    failed      recipe, algorithm, diagnostics ([{code, message}]), pid: the apply refused (SRG362, SRG501...)
    capture     sglang (SGLang's layers_to_capture), planned, held, pid
    gap         recipe, algorithm, worker: a speculative target set up with no draft applied (SRG363)
    guard       the acceptance guard's record (surgery/guard/judge.py Guard.to_dict: trips, last numbers), at
                each trip or episode end (surgery/sglang/guard.py)

Unset: nothing is written. A write that fails is logged, never raised into SGLang."""
from __future__ import annotations

import json
import os
from pathlib import Path

from .log import get_logger

ENV_REPORT = "SURGERY_REPORT"


def report_path() -> Path | None:
    raw = os.environ.get(ENV_REPORT)
    return Path(raw) if raw else None


def write(event: str, **fields) -> None:
    path = report_path()
    if path is None:
        return
    line = json.dumps({"event": event, **fields, "pid": os.getpid()}, default=str)
    try:
        with open(path, "a", encoding="utf-8") as f:
            f.write(line + "\n")
    except OSError as exc:
        get_logger().error("spec-surgery: SURGERY_REPORT=%s not written: %s", path, exc)


def verified(events: list[dict]) -> tuple[bool, list[dict]]:
    """(verified, problems) of one engine's events: at least one `applied`, every one verified, and no
    `failed`, `gap` or unheld `capture` event (the problems)."""
    applied = [e for e in events if e["event"] == "applied"]
    bad = [e for e in events if e["event"] in ("failed", "gap") or (e["event"] == "capture" and not e.get("held"))]
    return bool(applied) and all(e.get("verified") for e in applied) and not bad, bad


def read(path) -> list[dict]:
    """The events of a report file (the launcher's side); [] when there is none."""
    p = Path(path)
    if not p.is_file():
        return []
    return [json.loads(x) for x in p.read_text(encoding="utf-8").splitlines() if x.strip()]
