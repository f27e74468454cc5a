"""The plugin in vLLM's real OpenAI-compatible server (CPU), driven over HTTP by the `openai` client.

One server with the plugin for the whole module (started once, its own process group, killed by
group at the end), on the built-in pair exported by `surgery pair export` (text in, text out through
the shipped byte-level tokenizer). Oracle: greedy outputs equal an in-process vLLM engine running the
target alone (plain greedy decoding of the same weights; cheaper in CI than a second server without
the plugin, and stricter: speculative decoding must not change greedy output at all). Plus one
server started with a misspelled recipe, which must stop before any engine process starts, its code
in the last 20 lines of output. The bad start runs while the in-process baseline computes, so the
module costs about one good server start (~1 min on 2 busy cores), and it runs in the default suite:
these are the only tests that see the plugin inside vLLM's real multi-process server, so they rot
when only `-m slow` runs them (issue 34: two of them had failed unnoticed). The plugin's lines are
found through their one definition in surgery/vllm/log.py (CHECKED, APPLIED, KV_BOUND), never
through copied text.
"""
from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest

import tiny_vllm_pair as tp  # noqa: F401  (tests/vllm on sys.path via conftest)
import openai  # a dependency of vLLM: present wherever these tests are collected (conftest.py)
from openai_server import Server, stat_logger_site

from surgery.vllm.log import APPLIED, CHECKED, GUARD_ON, KV_BOUND

REPO = Path(__file__).resolve().parents[2]
PROMPTS = ["def __init__(self, ", "import os\nimport sys\n\n", "    def __repr__(self):\n        return "]
MAX_TOKENS = 24
START_TIMEOUT = 300  # hard limit for one server start on a loaded 2-core machine


def _env(*paths, **extra) -> dict:
    # the worker processes import this checkout's `surgery` (an installed copy would do as well)
    path = os.pathsep.join([*map(str, paths), str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return {"PYTHONPATH": path, "SURGERY_REPORT": None, "SURGERY_RECIPE": None, **extra}


def _tail(text: str, n: int) -> list[str]:
    return [line for line in text.splitlines() if line.strip()][-n:]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    from surgery import pairs

    out = pairs.export("gemma4-mtp", tmp_path_factory.mktemp("served") / "pair")
    return Path(out["target"]), Path(out["draft"])


def _greedy_baseline(target: Path) -> list[str]:
    """Plain greedy decoding of the target alone, in this process (no draft, no plugin)."""
    from vllm import LLM, SamplingParams

    llm = LLM(model=str(target), dtype="float32", enforce_eager=True, max_model_len=512, max_num_seqs=4,
              kv_cache_memory_bytes=32 * 1024 * 1024, seed=0)
    try:
        outs = llm.generate(PROMPTS, SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS), use_tqdm=False)
        return [o.outputs[0].text for o in outs]
    finally:
        tp.shutdown(llm)


@pytest.fixture(scope="module")
def runs(exported, tmp_path_factory):
    target, draft = exported
    logs = tmp_path_factory.mktemp("server_logs")
    bad = Server(target, draft, log_path=logs / "bad.log", env=_env(SURGERY_RECIPE="gemma4_mtp")).start()
    try:
        baseline = _greedy_baseline(target)
        bad_rc = bad.wait_exit(START_TIMEOUT)
    finally:
        bad.stop()
    report = logs / "report.json"
    # a default server (no PROMETHEUS_MULTIPROC_DIR): the guard's series reach /metrics through the
    # stat-logger plugin in the API server (surgery/vllm/statlogger.py); a small window so that 3 x 24
    # tokens are judged (docs/vllm.md "The acceptance guard")
    site = stat_logger_site(tmp_path_factory.mktemp("site"))
    # and the start-up canary (surgery/vllm/canary.py) in the engine-core process: 12 built-in prompts x 8 tokens
    guard = {"surgery": {"guard": {"min_drafts": 10, "window": 20, "check_every": 5, "drift_points": 60,
                                   "canary": {"prompts": "builtin", "tokens": 8}}}}
    server = Server(target, draft, log_path=logs / "good.log", extra_args=("--additional-config", json.dumps(guard)),
                    env=_env(site, SURGERY_RECIPE="gemma4-mtp", SURGERY_REPORT=str(report),
                             PROMETHEUS_MULTIPROC_DIR=None))
    server.start()
    try:
        if not server.wait_ready(START_TIMEOUT):
            pytest.fail("server did not start:\n" + "\n".join(_tail(server.log_text(), 40)))
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", timeout=120, max_retries=0)
        resp = client.completions.create(model=str(target), prompt=PROMPTS, max_tokens=MAX_TOKENS, temperature=0)
        texts = [c.text for c in sorted(resp.choices, key=lambda c: c.index)]
        metrics = server.metrics()
        guard_metrics = server.metrics(prefixes=("surgery_guard",))
        import urllib.request

        with urllib.request.urlopen(server.url + "/metrics", timeout=10) as r:
            metrics_text = r.read().decode()
        yield {"baseline": baseline, "texts": texts, "usage": resp.usage, "metrics": metrics, "guard_metrics": guard_metrics,
               "metrics_text": metrics_text,
               "log": server.log_text(), "report": report, "bad_rc": bad_rc, "bad_log": bad.log_text()}
    finally:
        server.stop()


def test_text_completions_equal_plain_greedy(runs):
    assert runs["texts"] == runs["baseline"]
    assert len(set("".join(runs["texts"]))) > 5  # real text, not one repeated character
    assert runs["usage"].completion_tokens == MAX_TOKENS * len(PROMPTS)


def test_acceptance_from_metrics(runs):
    m = runs["metrics"]
    drafted, accepted = m["vllm:spec_decode_num_draft_tokens_total"], m["vllm:spec_decode_num_accepted_tokens_total"]
    assert drafted > 0 and 0 < accepted <= drafted, m
    # per-position counters add up to the total: the draft proposed k tokens per step
    per_pos = [v for k, v in m.items() if k.startswith("vllm:spec_decode_num_accepted_tokens_per_pos_total")]
    assert len(per_pos) == 3 and sum(per_pos) == accepted


def test_guard_gauges_on_metrics(runs):
    """The guard's window on a default server's /metrics (no Prometheus multiprocess mode): per-position
    acceptance and mean accepted length, consistent with each other; the break-even under it; the trip
    counter of every kind present, at 0 on the healthy pair."""
    g, m = runs["guard_metrics"], runs["metrics"]
    rates = [g[f'surgery_guard_acceptance{{position="{i}"}}'] for i in range(3)]
    assert 0 < rates[0] <= 1 and rates[0] >= rates[1] >= rates[2] >= 0, g
    assert g["surgery_guard_mean_accepted_length"] == pytest.approx(1 + sum(rates)), g
    assert g["surgery_guard_break_even"] == pytest.approx(1 + 0.05 + 3 * 0.05), g  # mtp's default cost, k=3
    assert g["surgery_guard_mean_accepted_length"] > g["surgery_guard_break_even"], g
    from surgery.guard.keys import KINDS

    trips = {line.rpartition(" ")[0]: float(line.rpartition(" ")[2]) for line in runs["metrics_text"].splitlines()
             if line.startswith("surgery_guard_trips_total{")}
    assert {f'surgery_guard_trips_total{{kind="{k}",stream="all"}}' for k in KINDS} <= set(trips), trips
    assert not any(trips.values()), trips
    assert m["vllm:spec_decode_num_drafts_total"] > 0, m


def test_plugin_lines_in_server_log(runs):
    log = runs["log"]
    checked, applied, bound = CHECKED.find(log), APPLIED.find(log), KV_BOUND.find(log)
    # one of each, from the process vLLM runs it in, with vLLM's own format and prefix
    assert len(checked) == 1 and checked[0]["line"].startswith("(APIServer pid="), checked
    assert len(applied) == 1 and applied[0]["line"].startswith("(Worker pid="), applied
    assert len(bound) == 1 and bound[0]["line"].startswith("(Worker pid="), bound
    checked, applied, bound = checked[0], applied[0], bound[0]
    assert checked["recipe"] == applied["recipe"] == "gemma4-mtp"
    assert applied["operations"] == checked["operations"] and applied["skipped"] == "0", (checked, applied)
    assert applied["verification"] == "PASS" and applied["failed"] == applied["hint_problems"] == "", applied
    assert applied["layer_maps"] == "kv_source: 0->5,1->5,2->5,3->4", applied
    # every KV check holds, and the line counts the checks the report file lists
    report = json.loads(Path(runs["report"]).read_text())
    assert bound["held"] == bound["checks"] == str(len(report["kv_binding"]["checks"])), bound
    # no warning of ours on a correct set-up (no guard trip either); the canary's one SRG478 (info) line: it ran in
    # the engine core, after the warm-up and before the first request, and no rule held
    [silent] = [line for line in log.splitlines() if "SRG" in line]
    assert "SRG478: guard canary silent: 12 prompts x 8 tokens gave" in silent and silent.startswith("(EngineCore"), silent
    canary = json.loads(Path(runs["report"]).read_text())["guard"]["canary"]
    assert canary["ran"] and canary["trips"] == [] and canary["drafts"] > 0 and canary["where"], canary
    # the acceptance guard is on from the recipe's selection, in the engine core (where the scheduler runs)
    [guard] = GUARD_ON.find(log)
    assert guard["line"].startswith("(EngineCore") and (guard["method"], guard["num_spec"]) == ("mtp", "3"), guard


def test_report_file(runs):
    data = json.loads(Path(runs["report"]).read_text())
    # the last stage written: after the engine's warm-up forwards, before the first request (issue 37)
    assert data["stage"] == "warmed" and data["verified"] is True
    assert data["warmed"]["ok"] is True and data["warmed"]["checks"] and not data["warmed"]["problems"]
    assert all(c["ok"] for c in data["warmed"]["checks"])
    assert data["recipe"] == "gemma4-mtp" and data["plan"]["ok"] is True
    assert data["plan"]["layer_maps"]["kv_source"] == [{"draft": d, "target": t} for d, t in
                                                       ((0, 5), (1, 5), (2, 5), (3, 4))]
    assert data["verify"]["ok"] and len(data["verify"]["checks"]) > 0
    assert sorted(data["apply"]["applied"]) == sorted(o["id"] for o in data["plan"]["operations"])
    assert data["kv_binding"] == {"ok": True, "checks": data["kv_binding"]["checks"]}
    # per shared layer: its cache tensor is the target's, and it sits in the target layer's KV-cache
    # group (live_apply.kv_cache_checks); gemma4-mtp captures no hidden states
    share_kv = [o["id"] for o in data["plan"]["operations"] if o["op"] == "share_kv"]
    checks = data["kv_binding"]["checks"]
    assert len(share_kv) == 4 and len(checks) == 2 * len(share_kv), checks
    assert sorted(c["op"] for c in checks) == sorted(share_kv * 2) and all(c["ok"] for c in checks), checks
    assert len({c["check"] for c in checks}) == 2, checks
    assert data["not_applicable"] == [] and data["findings"] == []


def test_bad_recipe_stops_start_before_any_engine_process(runs):
    log = runs["bad_log"]
    assert runs["bad_rc"] not in (None, 0), runs["bad_rc"]
    last = "\n".join(_tail(log, 20))
    assert "SRG013" in last and "did you mean gemma4-mtp?" in last, last
    assert "Traceback" not in log  # one coded block, not a traceback
    # nothing was loaded: the engine-core process (which starts workers and loads weights) never ran
    assert not re.search(r"EngineCore|Starting to load model|Worker pid=", log), log[-2000:]
