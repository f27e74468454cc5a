"""bench/gpu/rowlog.py: GPU bench rows written as they finish, failures recorded with their library and
symbol, no bare NaN (issue 58). Standard library plus yaml; runs in milliseconds."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench" / "gpu"))
import rowlog  # noqa: E402


def _yaml_error():
    import yaml

    yaml.safe_load("a: [unclosed")


def test_failure_names_the_library_and_symbol_that_raised():
    rec = None
    try:
        _yaml_error()
    except Exception as exc:  # noqa: BLE001
        rec = rowlog.failure(exc)
    assert rec["type"].startswith("yaml.") and rec["library"] == "yaml", rec
    assert rec["symbol"].startswith("yaml.") and ":" in rec["symbol"] and rec["message"]
    libs = [x["library"] for x in rec["libraries"]]
    assert libs[-1] == "yaml" and libs[0] != "yaml" and "yaml" not in libs[:-1], libs  # outermost first


def test_chained_cause_is_recorded():
    try:
        try:
            _yaml_error()
        except Exception as inner:
            raise RuntimeError("engine start failed") from inner
    except RuntimeError as exc:
        rec = rowlog.failure(exc)
    assert rec["type"] == "builtins.RuntimeError" and rec["cause"]["library"] == "yaml"


def test_rows_are_on_disk_as_each_finishes_and_a_failure_does_not_stop_the_next(tmp_path):
    rows = rowlog.Rows(tmp_path / "r.rows.jsonl")
    seen = []

    def ok(i):
        seen.append(rowlog.Rows.read(rows.path))  # the earlier rows are already on disk
        return {"acceptance_rate": float("nan") if i == 2 else 0.5}

    rowlog.run_row(rows, "a", ok, 1)
    res, good = rowlog.run_row(rows, "b", _yaml_error)
    assert not good and res["library"] == "yaml"
    rowlog.run_row(rows, "c", ok, 2)
    assert [len(s) for s in seen] == [0, 2]
    back = rowlog.Rows.read(rows.path)
    assert [r["key"] for r in back] == ["a", "b", "c"] and [r["ok"] for r in back] == [True, False, True]
    assert back[1]["row"]["symbol"].startswith("yaml.")
    nan = back[2]["row"]["acceptance_rate"]
    assert nan["value"] is None and "nan" in nan["why"]  # JSON has no NaN: a null with its reason
    with open(rows.path, "a") as fh:
        fh.write('{"key": "torn')  # a kill mid-write
    assert len(rowlog.Rows.read(rows.path)) == 3


@pytest.mark.parametrize("value,why", [(None, "no drafts"), (float("nan"), "no drafts")])
def test_no_nan_gives_the_reason(value, why):
    assert rowlog.no_nan(value, why) == {"value": None, "why": why}
    assert rowlog.no_nan(0.25, why) == 0.25


def test_guard_ablations_keeps_rows_past_a_failing_family_and_says_why_there_is_no_acceptance(tmp_path, monkeypatch,
                                                                                                capsys):
    """bench/guard_ablations.py with its engine runs replaced: a family that raises is a row with its library
    and symbol, the next family still runs, and a row without acceptance says why (no bare nan)."""
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "bench" / "guard_ablations.py"
    spec = importlib.util.spec_from_file_location("guard_ablations_under_test", path)
    ga = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ga)

    def healthy_run(recipe, progress):
        if recipe == "bad":
            _yaml_error()
        return {"acceptance_rate": 0.8, "drafts": 10, "accepted_per_position": [8], "trips": [], "streams": []}, {}

    monkeypatch.setattr(ga, "healthy_run", healthy_run)
    monkeypatch.setattr(ga, "ablations", lambda ctx, progress: [ga.ablation_row(r) for r in (
        {"variant": "without capture_hidden_states", "runs": False, "error": "ValueError: no aux layers"},
        {"variant": "drafted nothing", "runs": True, "acceptance_rate": float("nan"), "drafted": 0},
        {"variant": "fine", "runs": True, "acceptance_rate": 0.5, "drafted": 4})])
    monkeypatch.setattr(ga.plugin, "register", lambda: None)
    assert ga.main(["--recipes", "bad", "good", "--out-dir", str(tmp_path)]) == 0
    back = rowlog.Rows.read(tmp_path / "guard_ablations.rows.jsonl")
    assert [r["key"] for r in back] == ["bad: healthy", "good: healthy", "good: ablation: without capture_hidden_states",
                                        "good: ablation: drafted nothing", "good: ablation: fine"]
    assert back[0]["ok"] is False and back[0]["row"]["library"] == "yaml"
    whys = [r["row"]["acceptance_rate"] for r in back[2:4]]
    assert "did not run: ValueError" in whys[0]["why"] and "0 drafts" in whys[1]["why"], whys
    summary = json.loads((tmp_path / "guard_ablations.json").read_text())
    assert summary["failed_families"] == ["bad"] and summary["results"]["good"]["healthy"]["acceptance_rate"] == 0.8
    assert "nan" not in capsys.readouterr().out


def test_failure_read_from_a_child_processes_traceback_text():
    tail = """Traceback (most recent call last):
  File "/work/wt/surgery/sglang/engine.py", line 40, in child
    engine = Engine(**kw)
  File "/tmp/site/lib/python3.12/site-packages/sglang/srt/entrypoints/engine.py", line 120, in __init__
    self._launch()
  File "/tmp/site/lib/python3.12/site-packages/vllm/v1/attention/backends/mla/prefill/selector.py", line 9, in pick
    raise ValueError("No valid MLA prefill backend found")
ValueError: No valid MLA prefill backend found
"""
    rec = rowlog.failure_from_text(tail, "engine exited rc 1")
    assert (rec["library"], rec["symbol"], rec["type"]) == (
        "vllm", "vllm.v1.attention.backends.mla.prefill.selector:pick", "ValueError"), rec
    assert rec["message"] == "No valid MLA prefill backend found" and rec["error"] == "engine exited rc 1"


def test_serve_bench_finds_the_plugins_report_and_guard_lines_and_the_metric_series():
    """bench/gpu/vllm_serve_gpu.py reads its row off the server's log and /metrics with the plugin's own
    line definitions (surgery/vllm/log.py): a line renamed there is still found here."""
    import importlib.util

    from surgery.vllm import log as L

    path = Path(__file__).resolve().parents[1] / "bench" / "gpu" / "vllm_serve_gpu.py"
    spec = importlib.util.spec_from_file_location("vllm_serve_gpu_under_test", path)
    sv = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sv)
    on = L.GUARD_ON.fmt % ("mtp", 3, "0.100", 50, "1.20", "measured", 200, 25, "warn")
    text = "\n".join([
        "(APIServer pid=1) INFO [config_check.py:90] " + L.CHECKED.fmt % ("gemma4-mtp", 5, 1, 1, "auto"),
        "(EngineCore pid=2) INFO [guard.py:88] " + on,
        "(EngineCore pid=2) WARNING [guard.py:92] " + L.DIAGNOSTIC.fmt % "SRG477 guard: the break-even rule is off",
        "(EngineCore pid=2) INFO unrelated line"])
    lines = sv.report_lines(text)
    assert len(lines["checked"]) == 1 and len(lines["guard_on"]) == 1 and lines["guard"] == lines["guard_on"]
    assert [ln.split("] ")[1] for ln in lines["diagnostics"]] == ["spec-surgery: SRG477 guard: the break-even rule is off"]
    metrics = "\n".join(["# HELP vllm:spec_decode_num_drafts_total x", "vllm:spec_decode_num_drafts_total 12.0",
                         'surgery_guard_acceptance{position="0"} 0.8', "vllm:num_requests_running 0.0"])
    assert sv.metric_series(metrics) == ["vllm:spec_decode_num_drafts_total 12.0", 'surgery_guard_acceptance{position="0"} 0.8']
    cmd = sv.server_command(Path("t"), Path("d"), "mtp", cpu=False, port=1)
    assert json.loads(cmd[cmd.index("--additional-config") + 1]) == {"surgery": {"guard": sv.GUARD}}


def _kernel_import():
    raise ImportError("/site/sgl_kernel/common_ops.abi3.so: undefined symbol: _ZN3c104cuda9SetDeviceEa",
                      name="sgl_kernel.common_ops")


def test_failure_keeps_what_the_loader_and_the_import_system_said():
    """The one home of bench/gpu/sglang_gpu.py's former failure_of: a kernel that does not load names its
    shared object and symbol, and the module that is missing, apart from the frame that raised."""
    try:
        _kernel_import()
    except ImportError as exc:
        rec = rowlog.failure(exc)
    assert rec["undefined_symbol"] == {"library": "/site/sgl_kernel/common_ops.abi3.so",
                                       "symbol": "_ZN3c104cuda9SetDeviceEa"}
    assert rec["missing_module"] == "sgl_kernel.common_ops" and rec["symbol"].endswith(":_kernel_import")
    try:
        import surgery_no_such_module  # noqa: F401
    except ImportError as exc:
        rec = rowlog.failure(exc)
    assert rec["missing_module"] == "surgery_no_such_module" and "undefined_symbol" not in rec
    try:
        _yaml_error()
    except Exception as exc:  # noqa: BLE001
        rec = rowlog.failure(exc)
    assert "undefined_symbol" not in rec and "missing_module" not in rec


def test_failure_from_text_keeps_what_the_loader_and_the_import_system_said():
    """sglang_gpu.py's former tail_failure: an engine child's output."""
    tail = """  File "/tmp/site/lib/python3.12/site-packages/sgl_kernel/__init__.py", line 5, in <module>
    from sgl_kernel import common_ops
ImportError: /tmp/site/sgl_kernel/common_ops.abi3.so: undefined symbol: _ZN3c10foo
"""
    rec = rowlog.failure_from_text(tail)
    assert rec["type"] == "ImportError" and rec["library"] == "sgl_kernel"
    loader = rec["undefined_symbol"]
    assert loader["symbol"] == "_ZN3c10foo" and loader["library"].endswith("sgl_kernel/common_ops.abi3.so")
    rec = rowlog.failure_from_text("ModuleNotFoundError: No module named 'flashinfer'\n")
    assert rec["missing_module"] == "flashinfer" and rec["type"] == "ModuleNotFoundError"
    empty = rowlog.failure_from_text("")
    assert "undefined_symbol" not in empty and "missing_module" not in empty
