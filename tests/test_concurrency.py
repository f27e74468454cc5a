"""Concurrency: validations and plans resolved at once in threads and in processes give the same
plan JSON as a serial run, and the built-in tiny-model cache is safe when several processes
materialise it at once (all succeed, folders complete and byte-identical to the committed weights,
no temp leftovers, no reader ever sees a missing or partial file).

    python -m pytest -q tests/test_concurrency.py
"""
from __future__ import annotations

import hashlib
import json
import multiprocessing as mp
import os
import threading
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

import pytest

from surgery import Runtime, facts_from_config, folders, load_recipe, resolve
from surgery.facts import read_config

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "tests" / "data" / "configs"

# (recipe, target config, draft config): every shipped recipe on the pair it is written for
PAIRS = [
    ("gemma4-mtp", "gemma-4-E2B-it.json", "gemma-4-E2B-it-assistant.json"),
    ("eagle3", "Llama-3.1-8B-Instruct.json", "EAGLE3-LLaMA3.1-Instruct-8B.json"),
    ("eagle", "Llama-3.1-8B-Instruct.json", "EAGLE-LLaMA3.1-Instruct-8B.json"),
    ("deepseek-mtp", "DeepSeek-V3.json", "DeepSeek-V3.json"),
    ("mtp", "Qwen3-Next-80B-A3B-Instruct.json", "Qwen3-Next-80B-A3B-Instruct.json"),
    ("draft-model", "Llama-3.1-8B-Instruct.json", "Llama-3.2-1B-Instruct.json"),
]
RUNTIMES = [dict(engine="vllm"), dict(engine="hf"), dict(engine="vllm", pp_size=2), dict(engine="vllm", tp_size=2),
            dict(engine="vllm", tp_size=3, kv_cache_dtype="fp8"), dict(engine="vllm", attention_backend="TRITON_ATTN")]
CASES = [(r, t, d, rt) for (r, t, d) in PAIRS for rt in RUNTIMES]  # 36 distinct plans, some failing


def plan_json(case_index: int) -> str:
    """One full validation from files: load the recipe, read both configs, resolve, serialise."""
    recipe, target, draft, runtime = CASES[case_index % len(CASES)]
    t_cfg, t_src = read_config(CONFIGS / target)
    d_cfg, d_src = read_config(CONFIGS / draft)
    plan = resolve(load_recipe(recipe), facts_from_config(d_cfg, d_src), facts_from_config(t_cfg, t_src),
                   Runtime(**runtime))
    return plan.to_json()


def _clear_caches() -> None:
    """Make the first calls race on the lazily built tables too (schema, codes, defaults, backends)."""
    from surgery.text import diagnostics
    from surgery import facts, plan, resources

    resources.load_schema.cache_clear()
    diagnostics.catalogue.cache_clear()
    facts.fromconfig.defaults_table.cache_clear()
    plan._BACKENDS = None


@pytest.fixture(scope="module")
def reference() -> list[str]:
    return [plan_json(i) for i in range(len(CASES))]


def test_reference_covers_ok_and_failing_plans(reference):
    oks = [json.loads(r)["ok"] for r in reference]
    assert any(oks) and not all(oks)  # the corpus exercises both verdicts
    assert len(set(reference)) > len(PAIRS)


def test_threads_give_identical_plans(reference):
    n_threads, per_thread = 16, 20
    _clear_caches()
    barrier = threading.Barrier(n_threads)

    def work(k: int) -> list[tuple[int, str]]:
        barrier.wait()
        return [(i, plan_json(i)) for i in range(k * per_thread, (k + 1) * per_thread)]

    with ThreadPoolExecutor(n_threads) as pool:
        results = [r for chunk in pool.map(work, range(n_threads)) for r in chunk]
    assert len(results) == n_threads * per_thread == 320
    mismatches = [i for i, text in results if text != reference[i % len(CASES)]]
    assert not mismatches, f"{len(mismatches)} plans differ from the serial run, e.g. case {mismatches[0]}"


def _process_batch(args) -> list[tuple[int, str]]:
    start, count = args
    return [(i, plan_json(i)) for i in range(start, start + count)]


def test_processes_give_identical_plans(reference):
    n_procs, per_proc = 4, 20
    ctx = mp.get_context("spawn")  # fresh interpreters: nothing inherited from this one
    with ProcessPoolExecutor(n_procs, mp_context=ctx) as pool:
        results = [r for chunk in pool.map(_process_batch, [(k * per_proc, per_proc) for k in range(n_procs)])
                   for r in chunk]
    assert len(results) == n_procs * per_proc == 80
    assert all(text == reference[i % len(CASES)] for i, text in results)


def _cli_batch(indices: list[int]) -> list[tuple[int, int, str]]:
    import contextlib
    import io

    from surgery import cli

    out = []
    for i in indices:
        recipe, target, draft, runtime = CASES[i % len(CASES)]
        argv = ["validate", recipe, "--target", str(CONFIGS / target), "--draft", str(CONFIGS / draft), "--json",
                "--engine", runtime.get("engine", "vllm"), "--pp", str(runtime.get("pp_size", 1)),
                "--tp", str(runtime.get("tp_size", 1)), "--kv-cache-dtype", runtime.get("kv_cache_dtype", "auto")]
        if runtime.get("attention_backend"):
            argv += ["--attention-backend", runtime["attention_backend"]]
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):  # process-local here: each worker is its own interpreter
            rc = cli.main(argv)
        out.append((i, rc, buf.getvalue()))
    return out


def test_cli_validate_in_processes_is_deterministic():
    """`surgery validate --json` in 4 processes at once, 10 calls each: same exit code and output
    as a serial run in this process."""
    batches = [list(range(k, k + 10)) for k in range(0, 40, 10)]
    serial = {i: (rc, out) for i, rc, out in _cli_batch(list(range(len(CASES))))}
    with ProcessPoolExecutor(4, mp_context=mp.get_context("spawn")) as pool:
        results = [r for chunk in pool.map(_cli_batch, batches) for r in chunk]
    assert len(results) == 40
    for i, rc, out in results:
        assert (rc, out) == serial[i % len(CASES)], i
    assert {rc for rc, _ in serial.values()} >= {0, 1}  # both verdicts among the 36 cases


# -- the tiny-model cache ----------------------------------------------------------------------------

def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _cache_worker(cache: str, barrier, queue, rounds: int) -> None:
    os.environ["SURGERY_CACHE"] = cache
    from surgery.tinymodels import tinypair as pair

    errors: list[str] = []
    reads = 0
    try:
        barrier.wait(timeout=120)
        for _ in range(rounds):
            target_dir, draft_dir = pair.ensure_tiny_pair()
            for folder, name in ((target_dir, "target"), (draft_dir, "draft")):
                for f in ("config.json", "model.safetensors"):
                    got = (folder / f).read_bytes()  # a reader right after another writer's install
                    reads += 1
                    if got != (pair.WEIGHTS_DIR / name / f).read_bytes():
                        errors.append(f"{folder / f}: {len(got)} bytes, differs from the committed file")
    except Exception as exc:  # noqa: BLE001 - reported to the parent
        errors.append(f"{type(exc).__name__}: {exc}")
    queue.put((errors, reads))


def _run_cache_race(cache: Path, n_procs: int, rounds: int) -> tuple[list[str], int]:
    ctx = mp.get_context("spawn")
    barrier, queue = ctx.Barrier(n_procs), ctx.Queue()
    procs = [ctx.Process(target=_cache_worker, args=(str(cache), barrier, queue, rounds)) for _ in range(n_procs)]
    for p in procs:
        p.start()
    results = [queue.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    return [e for errs, _ in results for e in errs], sum(r for _, r in results)


def _assert_cache_clean(cache: Path) -> None:
    from surgery.tinymodels import tinypair as pair

    root = cache / "tiny-gemma4"
    assert sorted(p.name for p in root.iterdir()) == [".lock", "draft", "target"]  # no temp folders left
    for name in ("target", "draft"):
        assert sorted(p.name for p in (root / name).iterdir()) == ["config.json", "model.safetensors"]
        for f in ("config.json", "model.safetensors"):
            assert _digest(root / name / f) == _digest(pair.WEIGHTS_DIR / name / f)


@pytest.mark.parametrize("n_procs", [2, 4])
def test_cache_built_by_several_processes_at_once(tmp_path, n_procs):
    from surgery.tinymodels import tinypair as pair

    if not folders.is_complete(pair.WEIGHTS_DIR / "target"):
        pytest.skip("no committed tiny weights in this checkout")
    errors, reads = _run_cache_race(tmp_path, n_procs, rounds=3)
    assert not errors, errors[:5]
    assert reads == n_procs * 3 * 4
    _assert_cache_clean(tmp_path)


def test_cache_repaired_concurrently_after_a_crash(tmp_path):
    """A writer killed mid-copy leaves a temp folder and a partial target; the next concurrent
    writers clean the leftover up and install complete folders."""
    from surgery.tinymodels import tinypair as pair

    if not folders.is_complete(pair.WEIGHTS_DIR / "target"):
        pytest.skip("no committed tiny weights in this checkout")
    root = tmp_path / "tiny-gemma4"
    (root / ".target-deadbeef").mkdir(parents=True)
    (root / ".target-deadbeef" / "model.safetensors").write_bytes(b"half")
    (root / "target").mkdir()
    (root / "target" / "config.json").write_text("{}")  # no weights: incomplete
    errors, _ = _run_cache_race(tmp_path, 3, rounds=2)
    assert not errors, errors[:5]
    _assert_cache_clean(tmp_path)


def test_stale_cache_replaced_while_others_read(tmp_path):
    """Cached weights that differ from the committed ones (a rebuilt pair) are replaced under the
    lock; concurrent callers all end with the committed bytes."""
    from surgery.tinymodels import tinypair as pair

    if not folders.is_complete(pair.WEIGHTS_DIR / "target"):
        pytest.skip("no committed tiny weights in this checkout")
    root = tmp_path / "tiny-gemma4"
    for name in ("target", "draft"):
        (root / name).mkdir(parents=True)
        (root / name / "config.json").write_bytes((pair.WEIGHTS_DIR / name / "config.json").read_bytes())
        (root / name / "model.safetensors").write_bytes(b"stale weights")
    errors, _ = _run_cache_race(tmp_path, 3, rounds=2)
    assert not errors, errors[:5]
    _assert_cache_clean(tmp_path)


def test_folder_writes_go_through_a_temp_dir_and_rename(tmp_path, monkeypatch):
    """No torn file: the destination only ever appears by os.replace of a complete temp folder."""
    from surgery.tinymodels import tinypair as pair

    if not folders.is_complete(pair.WEIGHTS_DIR / "target"):
        pytest.skip("no committed tiny weights in this checkout")
    monkeypatch.setenv("SURGERY_CACHE", str(tmp_path))
    seen = []
    real_replace = os.replace

    def spy_replace(src, dst):
        src, dst = Path(src), Path(dst)
        if dst.name in ("target", "draft"):
            assert src.parent == dst.parent and src.name.startswith(f".{dst.name}-")
            seen.append((dst.name, sorted(p.name for p in src.iterdir())))
        real_replace(src, dst)

    monkeypatch.setattr(pair.os, "replace", spy_replace)
    pair.ensure_tiny_pair()
    assert seen == [("target", ["config.json", "model.safetensors"]), ("draft", ["config.json", "model.safetensors"])]
