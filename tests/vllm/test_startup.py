"""Fail fast where vLLM builds its configuration (surgery/vllm/startup.py), and the plugin's lines in
vLLM's own log. Real `EngineArgs.create_engine_config` on the exported built-in pair: it reads only
config files (about a second), no engine is started."""
from __future__ import annotations

import io
import logging
import os
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest

from surgery.text.diagnostics import SurgeryError
from surgery.vllm import config_check, live_apply, plugin, startup
from surgery.vllm.log import CHECKED, DIAGNOSTIC, get_logger

pytest.importorskip("vllm")


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    from surgery import pairs

    out = pairs.export("gemma4-mtp", tmp_path_factory.mktemp("startup") / "pair")
    return Path(out["target"]), Path(out["draft"])


def engine_args(target, draft=None, method="mtp", **extra):
    from vllm.engine.arg_utils import EngineArgs

    spec = None if draft is None else {"method": method, "model": str(draft), "num_speculative_tokens": 2}
    return EngineArgs(model=str(target), speculative_config=spec, dtype="float32", enforce_eager=True,
                      max_model_len=256, **extra)


@pytest.fixture(scope="module")
def configs(pair):
    """One VllmConfig with the MTP draft, one without speculative decoding (no recipe selected)."""
    startup.install()
    return {"spec": engine_args(*pair).create_engine_config(), "plain": engine_args(pair[0]).create_engine_config()}


@contextmanager
def surgery_lines():
    """Records of the plugin's logger (formatted messages)."""
    records: list[str] = []
    handler = logging.Handler(logging.DEBUG)
    handler.emit = lambda r: records.append(r.getMessage())
    log = get_logger()
    log.addHandler(handler)
    try:
        yield records
    finally:
        log.removeHandler(handler)


def test_wrap_point_installed(configs):
    from vllm.engine.arg_utils import AsyncEngineArgs, EngineArgs

    assert getattr(EngineArgs.__dict__["create_engine_config"], "__surgery_config_check__", False)
    assert AsyncEngineArgs.create_engine_config is EngineArgs.create_engine_config  # the server's class too
    plugin.register()
    plugin.register()  # idempotent: wrapped once
    assert EngineArgs.create_engine_config.__wrapped_original__.__name__ == "create_engine_config"
    assert not getattr(EngineArgs.create_engine_config.__wrapped_original__, "__surgery_config_check__", False)


def test_misspelled_recipe_stops_create_engine_config(pair, configs, monkeypatch):
    monkeypatch.setenv("SURGERY_RECIPE", "gemma4_mtp")
    with pytest.raises(SurgeryError) as ei:
        engine_args(*pair).create_engine_config()  # through the real wrapped method
    d = ei.value.diagnostics[0]
    assert d.code == "SRG013" and d.hint.startswith("did you mean gemma4-mtp?")


@pytest.mark.parametrize("case", ["missing", "yaml", "other_family", "schema"])
def test_bad_recipes_fail_at_config_time(case, configs, tmp_path, monkeypatch):
    want = {"missing": "SRG001", "yaml": "SRG004", "other_family": "SRG204", "schema": "SRG101"}[case]
    path = tmp_path / "r.yaml"
    if case == "yaml":
        path.write_text("recipe: x\nversion: 1\nsummary: [unclosed\n")
    elif case == "schema":
        text = (Path(startup.__file__).resolve().parents[2] / "recipes" / "gemma4-mtp.yaml").read_text()
        path.write_text(text.replace("summary:", "sumary:"))
    elif case == "other_family":
        path = "eagle3"
    monkeypatch.setenv("SURGERY_RECIPE", str(path))
    with surgery_lines() as lines, pytest.raises(SurgeryError) as ei:
        config_check.check_engine_config(configs["spec"])
    codes = [d.code for d in ei.value.diagnostics]
    assert want in codes, [d.render() for d in ei.value.diagnostics]
    d = ei.value.diagnostics[codes.index(want)]
    if case in ("yaml", "schema"):  # file:line:col
        assert d.location.file == str(path) and d.location.line and d.location.col, d.render()
    if case == "missing":
        assert "recipe" in d.hint
    if case == "other_family":  # the method table says eagle3 runs as vLLM method eagle3, not mtp
        shown = [x["diagnostic"] for x in DIAGNOSTIC.find("\n".join(lines))]
        assert any("SRG031" in d and "eagle3" in d and "'mtp'" in d for d in shown), lines


def test_good_recipe_checked_and_logged(configs, monkeypatch):
    monkeypatch.setenv("SURGERY_RECIPE", "gemma4-mtp")
    with surgery_lines() as lines:
        plan = config_check.check_engine_config(configs["spec"])
    assert plan.ok and plan.pairs("kv_source") == [(0, 5), (1, 5), (2, 5), (3, 4)]
    [checked] = CHECKED.find("\n".join(lines))
    assert checked["recipe"] == "gemma4-mtp" and int(checked["operations"]) == len(plan.operations), checked
    assert (checked["pp"], checked["tp"], checked["kv_cache_dtype"]) == ("1", "1", "auto"), checked
    assert not any("SRG" in l for l in lines), lines  # gemma4-mtp names vLLM's method: no SRG031 / SRG032


def test_recipe_without_speculative_config_warns(configs, monkeypatch):
    monkeypatch.setenv("SURGERY_RECIPE", "gemma4-mtp")
    with surgery_lines() as lines:
        assert config_check.check_engine_config(configs["plain"]) is None
    shown = [x["diagnostic"] for x in DIAGNOSTIC.find("\n".join(lines))]
    assert any("SRG030" in d and "no speculative config" in d for d in shown), lines


def test_no_recipe_no_lines(configs, monkeypatch):
    monkeypatch.delenv("SURGERY_RECIPE", raising=False)
    with surgery_lines() as lines:
        assert config_check.check_engine_config(configs["spec"]) is None
    assert lines == []


def test_method_table_covers_every_shipped_recipe():
    from surgery.recipe import load_recipe
    from surgery.resources import shipped_recipes

    table = config_check.accepted_methods()
    for path in shipped_recipes():
        r = load_recipe(path)
        hint = r.engine["vllm"]["method"]
        assert hint in table, (r.name, hint)
        assert config_check.method_diagnostic(r, table[hint][0]) is None
        assert config_check.method_diagnostic(r, "ngram").code == "SRG031"


def test_method_hint_missing_is_an_info_line():
    from types import SimpleNamespace

    recipe = SimpleNamespace(name="mine", engine={"vllm": {}})
    d = config_check.method_diagnostic(recipe, "mtp")
    assert d.code == "SRG032" and d.severity == "info"


def test_missing_wrap_point_is_a_coded_line(monkeypatch):
    monkeypatch.setattr(startup, "WRAP_TARGET", ("vllm.engine.arg_utils", "NoSuchEngineArgs", "create_engine_config"))
    with surgery_lines() as lines:
        assert startup.install() is False
    shown = [x["diagnostic"] for x in DIAGNOSTIC.find("\n".join(lines))]
    assert any("SRG033" in d and "NoSuchEngineArgs" in d for d in shown), lines


def test_uncaught_startup_error_prints_only_the_coded_block(configs, monkeypatch):
    monkeypatch.setenv("SURGERY_RECIPE", "gemma4_mtp")
    monkeypatch.setattr(sys, "excepthook", sys.__excepthook__)
    with pytest.raises(SurgeryError) as ei:
        config_check.check_engine_config(configs["spec"])
    hook = sys.excepthook
    assert hook is not sys.__excepthook__
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    hook(SurgeryError, ei.value, ei.value.__traceback__)
    text = err.getvalue()
    assert "SRG013" in text and "hint: did you mean gemma4-mtp?" in text and "Traceback" not in text
    err.truncate(0)
    monkeypatch.setenv(config_check.ENV_TRACEBACK, "1")  # asked for: the normal traceback
    hook(SurgeryError, ei.value, ei.value.__traceback__)
    assert "Traceback" in err.getvalue()
    err.truncate(0)
    monkeypatch.delenv(config_check.ENV_TRACEBACK)
    try:
        raise ValueError("not ours")
    except ValueError as exc:
        hook(ValueError, exc, exc.__traceback__)
    assert "Traceback" in err.getvalue() and "not ours" in err.getvalue()  # other errors: the previous hook


def test_plugin_lines_reach_vllms_handler(configs):
    """vLLM configured its logging while building the config above; a plugin line must go through
    vLLM's own handler (the one that prints the server log), with vLLM's default settings."""
    vllm_logger = logging.getLogger("vllm")
    assert vllm_logger.handlers, "vLLM configured no handler"
    handler = vllm_logger.handlers[0]
    seen = []
    orig = handler.emit
    handler.emit = lambda r: seen.append(handler.format(r))
    try:
        get_logger().info(DIAGNOSTIC.fmt, "probe line")
    finally:
        handler.emit = orig
    assert len(seen) == 1 and [x["diagnostic"] for x in DIAGNOSTIC.find(seen[0])] == ["probe line"], seen
    assert "INFO" in seen[0], seen
    assert get_logger().name.startswith("vllm.")


@pytest.mark.slow  # opt-in (-m slow) to keep CI within 10 minutes; run before touching the plugin's failure paths
def test_hooks_wait_for_a_model_runner_import(tmp_path):
    """register() in a process that never loads a model (the API server, the engine core) imports no
    runner module; importing one (as the worker does) installs the hooks right after it."""
    import subprocess

    code = (
        "import sys\n"
        "import vllm.engine.arg_utils\n"
        "from surgery.vllm import hooks, live_apply, plugin\n"
        "runners = plugin.runner_modules()\n"
        "plugin.register()\n"
        "assert not [m for m in runners if m in sys.modules], [m for m in runners if m in sys.modules]\n"
        "assert live_apply.after_draft_loaded not in hooks._callbacks['after']\n"
        "import vllm.v1.worker.cpu_model_runner as r\n"
        "assert live_apply.after_draft_loaded in hooks._callbacks['after']\n"
        "assert live_apply.after_kv_cache_bound in hooks._callbacks['kv']\n"
        "assert getattr(r.CPUModelRunner.__dict__['initialize_kv_cache'], '__surgery_hook__', None)\n"
        "from vllm.v1.spec_decode.gemma4 import Gemma4Proposer\n"
        "assert getattr(Gemma4Proposer.__dict__['load_model'], '__surgery_hook__', None)\n"
        "print('ok')\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[2]),
                                                        os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-3000:]


def test_when_imported_runs_after_the_module_body(tmp_path, monkeypatch):
    from surgery.vllm import lazy

    pkg = tmp_path / "lazyprobe_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "mod.py").write_text("VALUE = 42\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []

    def cb(name):
        mod = sys.modules.get("lazyprobe_pkg.mod")
        seen.append((name, getattr(mod, "VALUE", None)))

    assert lazy.when_imported(["lazyprobe_pkg.mod"], cb) is False and seen == []  # deferred
    import lazyprobe_pkg.mod  # noqa: F401

    assert seen == [("lazyprobe_pkg.mod", 42)]  # after the body ran
    assert lazy.when_imported(["lazyprobe_pkg.mod"], cb) is True  # already imported: called at once
    assert seen[-1] == ("", 42) and len(seen) == 2
    for name in ("lazyprobe_pkg.mod", "lazyprobe_pkg"):
        sys.modules.pop(name, None)
    lazy._watch.pop("lazyprobe_pkg.mod", None)


def test_an_engine_gives_torch_its_thread_setter_back(pair):
    """vLLM's CPU worker replaces torch.set_num_threads for the whole process with a function that only logs, and
    never puts it back: after an in-process engine, apply's one thread, --threads and an HF probe run after a vLLM
    one would set nothing. engine.shutdown restores torch's own function and the process's count."""
    import torch

    from surgery.probe.measure_vllm import cpu_build
    from surgery.vllm import engine

    own = torch._C.set_num_threads  # torch's own (an engine of an earlier test may have replaced torch.set_num_threads)
    llm = engine.start_engine(**engine.engine_kwargs(str(pair[0])))
    count = engine.TORCH_THREADS[id(llm)]
    replaced = torch.set_num_threads is not own
    engine.shutdown(llm)
    assert torch.set_num_threads is own and torch.get_num_threads() == count
    if cpu_build():  # the reason for the restore: on the CPU build the engine did replace it
        assert replaced
    torch.set_num_threads(1)
    assert torch.get_num_threads() == 1
    torch.set_num_threads(count)
