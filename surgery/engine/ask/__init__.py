"""Ask the engine where the rules run out (issue 65): the driver that runs an engine's own runner script
in an environment that has that engine, bounded in time and memory, and reads its answer.

    ask("vllm", "/path/to/venv/bin/python", cases, timeout_s=300) -> [verdict per case]

Protocol (every runner, every engine):
- the runner is a standalone script run BY PATH, `[python, runner]` (RUNNERS below; it imports nothing of
  surgery, so what it reports is the engine's own answer), in its own process group, with the engine's
  environment (ENVS: no GPU, no multiprocessing engine) and no PYTHONPATH;
- stdin: a JSON list of cases {"id", "target": folder with config.json, "draft": folder, "method", "k",
  "tp", "pp", "max_model_len", "kv_cache_dtype", "hf_overrides", "spec_extra", "full_shapes"};
- stdout: anything, then ONE JSON object on the LAST line: {"engine", "version", "peak_rss_kb", "verdicts":
  [{"id", "stage": null | "config" | "construct" | "unjudged", "type", "message", "where": "file:line of the
  raising frame inside the engine package", "frames", "shapes": {"target": {param: [dims]}, "draft":
  {...}}, "shapes_at": {"tp", "pp"}, "unconstructed": [what could not be built, and why], "seconds"}]}.

A crash, a timeout, a run past the memory bound or output that is not that object is a coded result
(`Run.failure`: "no-python", "timeout", "memory", "crash", "garbage"; each case then answers stage
"unasked" with that code), never a traceback. Memory: the child's resident set is watched (VmRSS, every
WATCH_S) and the process group killed past `max_rss_mb`; an address-space limit (RLIMIT_AS) is not used,
because CUDA builds of torch reserve tens of GB of virtual memory they never touch. The child's peak RSS
is its own rusage (os.wait4), reported with the wall time.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
#: engine -> its runner script (the SGLang runner plugs in here)
RUNNERS: dict[str, Path] = {"vllm": HERE / "vllm_runner.py", "sglang": HERE / "sglang_runner.py"}
#: engine -> the environment its runner needs: the engine's CPU platform, no GPU, one process
ENVS: dict[str, dict[str, str]] = {
    # SGLang: its CPU platform for the model classes (sglang_runner.py resolves the arguments for an H100
    # through SGLang's own override_platform), no GPU
    "sglang": {"SGLANG_USE_CPU_ENGINE": "1", "CUDA_VISIBLE_DEVICES": "", "TOKENIZERS_PARALLELISM": "false",
               "OMP_NUM_THREADS": "1"},
    "vllm": {"VLLM_TARGET_DEVICE": "cpu", "CUDA_VISIBLE_DEVICES": "", "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
             "TOKENIZERS_PARALLELISM": "false", "VLLM_LOGGING_LEVEL": "ERROR", "OMP_NUM_THREADS": "1"},
}
#: engine -> the module whose presence says an interpreter can ask it
MODULES: dict[str, str] = {"vllm": "vllm", "sglang": "sglang"}
TIMEOUT_S = 600.0
MAX_RSS_MB = 8192
WATCH_S = 0.1
FAILURES = ("no-python", "timeout", "memory", "crash", "garbage")


@dataclass
class Run:
    """One runner process: what it answered, or why not (`failure`, one of FAILURES, and `detail`)."""
    engine: str
    version: str | None = None
    verdicts: list[dict] = field(default_factory=list)
    failure: str | None = None
    detail: str = ""
    seconds: float = 0.0
    peak_rss_kb: int = 0  # the child's own peak resident set (rusage), else the watchdog's highest reading
    exit_code: int | None = None
    facts: dict = field(default_factory=dict)  # a runner's own lists, when asked for them (sglang_runner facts())


def can_ask(engine: str, python: str) -> tuple[bool, str]:
    """(whether `python` can import the engine, why not): a quick `import` probe without loading it
    (importlib.util.find_spec), bounded to 60 s."""
    module = MODULES.get(engine)
    if module is None:
        return False, f"no runner for engine {engine!r} (known: {', '.join(sorted(RUNNERS))})"
    if not python or not Path(python).exists():
        return False, f"{python!r} is not an interpreter on this machine"
    probe = f"import importlib.util, sys; sys.exit(0 if importlib.util.find_spec({module!r}) else 3)"
    try:
        code = subprocess.run([python, "-c", probe], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, timeout=60, env=_env(engine)).returncode
    except (OSError, subprocess.SubprocessError) as exc:
        return False, f"{python} could not be run ({type(exc).__name__}: {exc})"
    return (True, "") if code == 0 else (False, f"{python} cannot import {module}")


def _env(engine: str) -> dict[str, str]:
    env = {**os.environ, **ENVS.get(engine, {})}
    env.pop("PYTHONPATH", None)  # the runner sees only the engine's own environment
    return env


def _rss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _wait(proc: subprocess.Popen, run: Run, timeout_s: float, max_rss_mb: float) -> None:
    """Reap the child with its own rusage (os.wait4), watching its time and resident set meanwhile."""
    start, peak, status, usage = time.monotonic(), 0, 0, None
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        peak = max(peak, _rss_kb(proc.pid))
        if time.monotonic() - start > timeout_s:
            run.failure, run.detail = "timeout", f"the runner ran past {timeout_s:g} s and was killed"
        elif peak > max_rss_mb * 1024:
            run.failure, run.detail = "memory", (f"the runner's resident set reached {peak // 1024} MiB, over the "
                                                 f"bound of {max_rss_mb:g} MiB, and it was killed")
        if run.failure:
            _kill_group(proc.pid)
            _, status, usage = os.wait4(proc.pid, 0)
            break
        time.sleep(WATCH_S)
    proc.returncode = os.waitstatus_to_exitcode(status)
    run.exit_code = proc.returncode
    run.seconds = round(time.monotonic() - start, 3)
    run.peak_rss_kb = max(int(usage.ru_maxrss) if usage is not None else 0, peak)
    _kill_group(proc.pid)  # anything the runner left behind in its group


def _read(run: Run, out: str, err: str) -> None:
    if run.failure:
        return
    lines = out.strip().splitlines()
    try:
        answer = json.loads(lines[-1]) if lines else None
    except ValueError:
        answer = None
    if not isinstance(answer, dict) or not isinstance(answer.get("verdicts"), list):
        tail = (err.strip() or out.strip())[-1500:]
        run.failure = "crash" if run.exit_code else "garbage"
        run.detail = (f"the runner exited {run.exit_code}" if run.exit_code else
                      "the runner's last line is not its JSON answer") + (f": {tail}" if tail else "")
        return
    run.version = answer.get("version")
    run.verdicts = [v for v in answer["verdicts"] if isinstance(v, dict)]
    run.facts = answer.get("facts") if isinstance(answer.get("facts"), dict) else {}
    run.peak_rss_kb = max(run.peak_rss_kb, int(answer.get("peak_rss_kb") or 0))


def ask_run(engine: str, python: str, cases: list[dict], *, timeout_s: float = TIMEOUT_S,
            max_rss_mb: float = MAX_RSS_MB, runner: str | os.PathLike | None = None,
            env: dict[str, str] | None = None) -> Run:
    """Run `engine`'s runner on `cases` with `python`; the whole run, answered or failed (never raises for
    what the child did)."""
    run = Run(engine=engine)
    script = Path(runner) if runner is not None else RUNNERS.get(engine)
    if script is None or not script.is_file():
        run.failure, run.detail = "no-python", f"no runner for engine {engine!r}"
        return run
    if os.sep in python:  # the child runs in its own folder: a relative path is made absolute (links kept)
        python = os.path.abspath(python)
    folder = Path(tempfile.mkdtemp(prefix=f"surgery-ask-{engine}-"))
    try:
        (folder / "in.json").write_text(json.dumps(cases), encoding="utf-8")
        with open(folder / "in.json", "rb") as stdin, open(folder / "out", "wb") as out, \
                open(folder / "err", "wb") as err:
            try:
                proc = subprocess.Popen([python, str(script)], stdin=stdin, stdout=out, stderr=err,
                                        env={**_env(engine), **(env or {})}, cwd=str(folder), start_new_session=True)
            except OSError as exc:
                run.failure, run.detail = "no-python", f"{python} could not be started ({exc})"
                return run
            _wait(proc, run, timeout_s, max_rss_mb)
        _read(run, (folder / "out").read_text(encoding="utf-8", errors="replace"),
              (folder / "err").read_text(encoding="utf-8", errors="replace"))
    finally:  # the whole folder: a runner may leave files of its own in its working folder
        shutil.rmtree(folder, ignore_errors=True)
    return run


def ask(engine: str, python: str, cases: list[dict], *, timeout_s: float = TIMEOUT_S,
        max_rss_mb: float = MAX_RSS_MB, **kw) -> list[dict]:
    """One verdict per case, in the cases' order: the runner's, or {"id", "stage": "unasked", "code": the
    run's failure, "message"} where the run failed or left the case out."""
    run = ask_run(engine, python, cases, timeout_s=timeout_s, max_rss_mb=max_rss_mb, **kw)
    return verdicts_of(run, cases)


def verdicts_of(run: Run, cases: list[dict]) -> list[dict]:
    got = {v.get("id"): v for v in run.verdicts}
    out = []
    for case in cases:
        v = got.get(case.get("id"))
        if v is None:
            code = run.failure or "garbage"
            v = {"id": case.get("id"), "stage": "unasked", "code": code,
                 "message": run.detail or "the runner gave no verdict for this case"}
        out.append(v)
    return out


def default_python(engine: str) -> str | None:
    """The current interpreter when it can import the engine, else None."""
    return sys.executable if can_ask(engine, sys.executable)[0] else None
