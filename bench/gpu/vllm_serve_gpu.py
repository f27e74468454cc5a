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
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from common import OUT, ROOT, log, readable_pair, save

# third-party modules vllm/entrypoints/ imports (0.26.0); which of them import here is recorded first,
# so a server that cannot start says which wheel to carry (bench/gpu/server_wheels.sh)
SERVER_MODULES = ("uvicorn", "h11", "click", "fastapi", "starlette", "prometheus_client",
                  "prometheus_fastapi_instrumentator", "multipart", "aiohttp", "uvloop", "watchfiles", "PIL",
                  "psutil", "jinja2", "regex", "openai", "model_hosting_container_standards",
                  "vllm.entrypoints.openai.api_server")  # the last: whatever else the server imports
PROMPTS = ["def __init__(self, ", "import os\n", "    def __repr__(self):\n        return "]
MAX_TOKENS = 24
PORT = 8011
START_TIMEOUT = 480  # 2026-12-03 on vLLM 0.25 (compiled, CUDA graphs): up at 240 s, just as the first run gave up


def versions() -> dict:
    import torch
    import transformers
    import vllm

    return {"vllm": vllm.__version__, "torch": torch.__version__, "transformers": transformers.__version__,
            "python": sys.version.split()[0], "device": torch.cuda.get_device_name(0)}


def server_modules() -> dict[str, str]:
    """module -> "ok" or the import error, each in a fresh interpreter (an import may poison this one)."""
    out = {}
    for name in SERVER_MODULES:
        r = subprocess.run([sys.executable, "-c", f"import {name}"], capture_output=True, text=True, timeout=60)
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


def _complete(prompt: str, model: str) -> str:
    try:
        from openai import OpenAI
    except ImportError:
        body = json.dumps({"model": model, "prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{PORT}/v1/completions", body,
                                     {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            return json.loads(r.read())["choices"][0]["text"]
    c = OpenAI(base_url=f"http://127.0.0.1:{PORT}/v1", api_key="-")
    return c.completions.create(model=model, prompt=prompt, max_tokens=MAX_TOKENS, temperature=0).choices[0].text


def main() -> None:
    from surgery import pairs

    res: dict = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    try:
        res["versions"] = versions()
    except Exception as exc:  # noqa: BLE001 - recorded, the run goes on
        res["versions"] = {"error": repr(exc)}
    res["server_modules"] = server_modules()
    log("server modules", res["server_modules"])
    out = pairs.export("gemma4-mtp", Path("/tmp/serve-pair"))
    target, draft = readable_pair(Path(out["target"]), Path(out["draft"]))
    report_path = Path("/tmp/serve-pair/report.json")
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(target),
           "--host", "127.0.0.1", "--port", str(PORT),
           "--speculative-config", json.dumps({"method": "mtp", "model": str(draft), "num_speculative_tokens": 3}),
           "--dtype", "bfloat16", "--max-model-len", "512", "--gpu-memory-utilization", "0.2", "--seed", "0",
           "--enforce-eager"]  # as every other GPU row: Inductor + CUDA-graph capture took ~4 min of the budget
    res["command"] = " ".join(cmd)
    res["plugin_entry_point"], shim = plugin_entry_point(Path("/tmp/serve-pair/entry-point"))
    env = {**os.environ, "SURGERY_RECIPE": "gemma4-mtp", "SURGERY_REPORT": str(report_path),
           "PYTHONPATH": os.pathsep.join([str(ROOT)] + ([str(shim)] if shim else []) + [os.environ.get("PYTHONPATH", "")])}
    env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)
    log_path = OUT / "vllm_serve_server.log"
    t0 = time.perf_counter()
    with open(log_path, "wb") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        ready = False
        while time.perf_counter() - t0 < START_TIMEOUT and proc.poll() is None:
            try:
                ready = _get(f"http://127.0.0.1:{PORT}/health")[0] == 200
            except OSError:
                ready = False
            if ready:
                break
            time.sleep(0.5)
        res["ready"], res["start_s"] = ready, round(time.perf_counter() - t0, 1)
        res["exit_code_if_exited"] = proc.poll()
        if ready:
            res["client"] = "openai" if _has_openai() else "urllib"
            res["completions"] = {p: _complete(p, str(target)) for p in PROMPTS}
            metrics = _get(f"http://127.0.0.1:{PORT}/metrics")[1]
            res["spec_decode_metrics"] = [ln for ln in metrics.splitlines()
                                          if re.match(r"^vllm:spec_decode_num_(draft|accepted)_tokens_total", ln)]
            res["plugin_report_written"] = report_path.exists()  # False: the plugin never ran in the server
            if report_path.exists():
                rep = json.loads(report_path.read_text())
                res["plugin_report"] = {"stage": rep.get("stage"), "verified": rep.get("verified"),
                                        "not_applicable": rep.get("not_applicable"), "findings": rep.get("findings")}
    finally:
        _stop(proc)
    text = log_path.read_text(errors="replace")
    res["server_log_tail"] = [ln for ln in text.splitlines() if ln.strip()][-25:]
    res["plugin_log_lines"] = [ln for ln in text.splitlines() if "spec-surgery" in ln][:10]
    save("gpu_vllm_serve", res)
    log("ready", res.get("ready"), "verified", (res.get("plugin_report") or {}).get("verified"))


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
    main()
