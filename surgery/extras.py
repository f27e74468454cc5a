"""Missing optional dependencies as coded errors (SRG070 / SRG071), never a traceback (issue 42 class 6).

`pip install spec-surgery` installs the config-only core (validate, plan, new, convert, explain, recipes,
doctor); applying to live models needs torch / transformers (the `apply` extra), vLLM (`vllm`), SGLang
(its own venv). Which extra provides which module, and which command needs which module, is data
(`surgery/data/extras.yaml`). Two guards use it:

- `require(command)`: before a command reads or loads anything, every module it needs is looked up
  with `importlib.util.find_spec` (no import, so the check costs nothing); the missing ones are one
  SRG070 that names them and the pip line that installs them.
- `from_import_error(exc)`: the CLI's net for an import deeper down (a path `require` does not list):
  a ModuleNotFoundError of a listed module is the same SRG070; an ImportError inside a listed package
  (an installed transformers without a class we need, a vLLM whose own dependency is missing) is SRG071,
  naming the package and the extra that pins a working version.

Config-only (level 0)."""
from __future__ import annotations

import importlib.util
from functools import lru_cache

from .text.diagnostics import Diagnostic, SurgeryError, diag
from .resources import load_data


@lru_cache(maxsize=1)
def _data() -> dict:
    return load_data("data/extras.yaml")


def modules() -> dict[str, dict]:
    return _data()["modules"]


def needs(command: str) -> list[str]:
    return list(_data()["commands"][command])


def install_line(names: list[str]) -> str:
    """The pip line(s) that install these modules: one extra each, or the module's own note."""
    parts: list[str] = []
    for name in names:
        entry = modules()[name]
        extra = entry.get("extra")
        said = f"pip install 'spec-surgery[{extra}]'" if extra else entry.get("note", f"pip install {entry['package']}")
        if extra and entry.get("note"):
            said += f" ({entry['note']})"
        if said not in parts:
            parts.append(said)
    return "; ".join(parts)


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ValueError, ImportError):  # a module whose __spec__ is unset, or a broken parent package
        return False


def missing_diagnostic(command: str, names: list[str]) -> Diagnostic:
    return diag("SRG070", f"`surgery {command}` needs {', '.join(names)}, which "
                f"{'is' if len(names) == 1 else 'are'} not installed in this Python",
                hint=install_line(names))


def require(command: str) -> None:
    """Raise SRG070 when a module the command needs (extras.yaml `commands`) is not importable."""
    missing = [m for m in needs(command) if not _installed(m)]
    if missing:
        raise SurgeryError(missing_diagnostic(command, missing))


def from_import_error(exc: ImportError, command: str) -> Diagnostic | None:
    """The coded form of an ImportError raised under a command, or None when it is none of the listed
    modules' (a bug of ours: the traceback is then the right report)."""
    name = getattr(exc, "name", None) or ""
    top = name.split(".")[0]
    if top in modules():
        if isinstance(exc, ModuleNotFoundError) and (name == top or not _installed(top)):
            return missing_diagnostic(command, [top])
        entry = modules()[top]
        return diag("SRG071", f"the installed {entry['package']} cannot be used by `surgery {command}`: {exc}",
                    hint=install_line([top]) + " installs a version spec-surgery runs with")
    # a module missing from inside an installed listed package: that package's own install is broken
    tb = exc.__traceback__
    inside = None
    while tb is not None:
        module = tb.tb_frame.f_globals.get("__name__", "")
        if module.split(".")[0] in modules():
            inside = module.split(".")[0]
        tb = tb.tb_next
    if inside is not None and isinstance(exc, ModuleNotFoundError):
        return diag("SRG071", f"the installed {modules()[inside]['package']} cannot be imported: it needs {name}, "
                    f"which is not installed ({exc})", hint=install_line([inside]) + " installs it with its "
                    "dependencies")
    return None
