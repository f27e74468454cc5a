"""Bench rows that survive the run: each row appended to a JSON-lines file the moment it finishes, and each
failure written down as what it is (exception type, message, the library and the symbol that raised it).

Why: a GPU call is minutes of a small lease. A script that writes its JSON only at the end loses every
row when one family raises or the call runs past its limit (issue 58: guard_ablations.py); a row that
says only "error" or `nan` cannot be told apart from a harmless skip. No imports beyond the standard
library, no side effects: bench/gpu/common.py, bench/guard_ablations.py and bench/gpu/sglang_gpu.py use it (the
one home of a bench failure's fields: `failure` for an exception here, `failure_from_text` for another process's).
"""
from __future__ import annotations

import json
import math
import os
import re
import sys
import sysconfig
import time
import traceback
from pathlib import Path

_STDLIB = {os.path.realpath(p) for p in {sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["platstdlib"]}}


def _library(frame_globals: dict, filename: str) -> tuple[str, str] | None:
    """(library, module) of a frame; None for the standard library and the interpreter's own frames."""
    module = frame_globals.get("__name__") or ""
    real = os.path.realpath(filename)
    if not module or filename.startswith("<") or (
            any(real.startswith(p + os.sep) for p in _STDLIB) and "site-packages" not in real):
        return None
    return module.split(".")[0], module


_UNDEFINED = re.compile(r"(\S+\.so[.\d]*): undefined symbol: (\S+)")
_NO_MODULE = re.compile(r"No module named '([^']+)'")


def _loader(text: str, exc: BaseException | None = None) -> dict:
    """What the dynamic loader or the import system said, when it is why a library does not load: the
    shared object and the symbol of an "undefined symbol" (a kernel wheel built against another torch), the
    module of a "No module named" (ImportError.name where the exception is at hand). Kept apart from
    `library` / `symbol`, which name the Python frame that raised."""
    out: dict = {}
    m = _UNDEFINED.search(text or "")
    if m:
        out["undefined_symbol"] = {"library": m.group(1), "symbol": m.group(2)}
    name = getattr(exc, "name", None) if isinstance(exc, ImportError) else None
    m = _NO_MODULE.search(text or "")
    if name or m:
        out["missing_module"] = name or m.group(1)
    return out


def failure(exc: BaseException) -> dict:
    """What failed, where: `library` and `symbol` (module:function) of the innermost frame outside the
    standard library (where it was raised: vllm, pydantic, surgery, ...), `libraries`: the innermost frame
    of each library the traceback passed through, outermost first (vllm -> pydantic says vLLM's config
    layer refused through pydantic), `cause`: the same for a chained exception; `undefined_symbol` /
    `missing_module` where the loader or the import system said why a library does not load (_loader)."""
    frames = []
    for fs, _lineno in traceback.walk_tb(exc.__traceback__):
        lib = _library(fs.f_globals, fs.f_code.co_filename)
        if lib is not None:
            frames.append((lib[0], f"{lib[1]}:{fs.f_code.co_name}", f"{fs.f_code.co_filename}:{_lineno}"))
    per_library: dict[str, dict] = {}
    for lib, symbol, where in frames:
        per_library.pop(lib, None)  # keep the innermost, ordered by its last appearance
        per_library[lib] = {"library": lib, "symbol": symbol, "at": where}
    inner = frames[-1] if frames else (None, None, None)
    out = {"error": f"{type(exc).__name__}: {exc}", "type": f"{type(exc).__module__}.{type(exc).__qualname__}",
           "message": str(exc)[:4000], "library": inner[0], "symbol": inner[1], "at": inner[2],
           "libraries": list(per_library.values()),
           "traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-4000:],
           **_loader(str(exc), exc)}
    cause = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
    if cause is not None and cause is not exc:
        out["cause"] = {k: v for k, v in failure(cause).items() if k != "traceback"}
    return out


_FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+), in (\S+)')
_EXC = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning|Failure)\b[^:]*):\s*(.*)$")


def _module_of(filename: str) -> str | None:
    """`vllm.config.speculative` for .../site-packages/vllm/config/speculative.py (None: not a package file)."""
    parts = Path(filename).with_suffix("").parts
    for anchor in ("site-packages", "dist-packages"):
        if anchor in parts:
            rest = parts[parts.index(anchor) + 1:]
            return ".".join(rest[:-1] if rest[-1] == "__init__" else rest) or None
    if "surgery" in parts:  # the repository on PYTHONPATH
        rest = parts[len(parts) - 1 - parts[::-1].index("surgery"):]
        return ".".join(rest[:-1] if rest[-1] == "__init__" else rest)
    return None


def failure_from_text(text: str, error: str | None = None) -> dict:
    """rowlog.failure's fields read from a traceback printed by another process (an engine child, a
    server log): the innermost `File ...` frame of a package, the last `SomeError: message` line, and what the
    loader or the import system said (_loader)."""
    frames, exc_line = [], None
    for line in (text or "").splitlines():
        m = _FRAME.match(line)
        if m:
            module = _module_of(m.group(1))
            if module:
                frames.append((module.split(".")[0], f"{module}:{m.group(3)}", f"{m.group(1)}:{m.group(2)}"))
            continue
        e = _EXC.match(line.strip())
        if e:
            exc_line = (e.group(1), e.group(2))
    inner = frames[-1] if frames else (None, None, None)
    return {"error": error or (f"{exc_line[0]}: {exc_line[1]}" if exc_line else None),
            "type": exc_line[0] if exc_line else None, "message": exc_line[1] if exc_line else error,
            "library": inner[0], "symbol": inner[1], "at": inner[2], "from": "traceback text", **_loader(text)}


def no_nan(value, why: str):
    """A figure, or {"value": None, "why": ...} where it is missing or NaN: never a bare nan in a row."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return {"value": None, "why": why}
    return value


def _clean(value):
    """NaN / inf anywhere in a row -> a null with the reason that nothing better was given (JSON has no NaN)."""
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return no_nan(None, f"{value!r} from the measurement; the row gave no reason")
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


class Rows:
    """Append-only JSON lines: one line per finished row, flushed and synced before the next row starts
    (a run killed mid-row keeps every earlier row). `path` None: rows are kept in memory only."""

    def __init__(self, path: str | Path | None):
        self.path = Path(path) if path else None
        self.rows: list[dict] = []
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text("")

    def write(self, key: str, row, seconds: float | None = None, **extra) -> dict:
        line = {"key": key, "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **extra}
        if seconds is not None:
            line["seconds"] = round(seconds, 2)
        line["row"] = row
        self.rows.append(line)
        if self.path is not None:
            with open(self.path, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(_clean(line), default=str, allow_nan=False) + "\n")
                fh.flush()
                os.fsync(fh.fileno())
        return line

    @staticmethod
    def read(path: str | Path) -> list[dict]:
        """The rows written so far (a torn last line, from a kill mid-write, is dropped)."""
        out = []
        for text in Path(path).read_text(encoding="utf-8").splitlines():
            try:
                out.append(json.loads(text))
            except ValueError:
                break
        return out


def run_row(rows: Rows | None, key: str, fn, *args, **kwargs):
    """fn(*args) -> (its result, or failure(exc)); the row is written as soon as it finishes."""
    t = time.perf_counter()
    try:
        result, ok = fn(*args, **kwargs), True
    except Exception as exc:  # noqa: BLE001 - a failed row is a finding, written down
        result, ok = failure(exc), False
        print(time.strftime("%H:%M:%S"), f"{key} FAILED: {result['error'][:300]} "
              f"[{result['library']} {result['symbol']}]", file=sys.stderr, flush=True)
    if rows is not None:
        rows.write(key, result, time.perf_counter() - t, ok=ok)
    return result, ok
