"""Run a callback when a module has finished importing (now, if it already has).

Why: vLLM calls the plugin's `register()` in every process it starts: the API server, the engine
core and each worker. Only the process that builds models imports the model runners and proposers
the hooks wrap; importing them just to wrap them cost the API server and the engine core seconds of
start-up each (torch / kernel modules they never use otherwise). So the hooks are installed when a
runner module is imported by vLLM itself, i.e. only where models are loaded.

Mechanism: a `sys.meta_path` finder that, for the watched names only, asks the other finders for the
module spec and wraps its loader's `exec_module`, calling the callbacks after the module body ran.
The callback may see sibling modules still half-imported (a runner importing another runner); it
must be idempotent, and it runs again after each watched module completes, so every class is handled
once its module is complete.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading
from collections.abc import Callable, Iterable

_lock = threading.RLock()
_watch: dict[str, list[Callable[[str], None]]] = {}


def _fully_imported(name: str) -> bool:
    mod = sys.modules.get(name)
    spec = getattr(mod, "__spec__", None)
    return mod is not None and not getattr(spec, "_initializing", False)


def any_initializing(names: Iterable[str]) -> bool:
    """True while one of `names` is half-imported (its module body is still running)."""
    for name in names:
        spec = getattr(sys.modules.get(name), "__spec__", None)
        if getattr(spec, "_initializing", False):
            return True
    return False


class _Loader(importlib.abc.Loader):
    def __init__(self, inner, name: str):
        self.inner, self.name = inner, name

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module):
        # importlib still marks the module as initializing until this returns; callbacks get its name
        self.inner.exec_module(module)
        for cb in list(_watch.get(self.name, ())):
            cb(self.name)

    def __getattr__(self, item):  # get_code, get_source, is_package, ... of the real loader
        return getattr(self.inner, item)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname not in _watch:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _Loader(spec.loader, fullname)
                return spec
        return None


_finder = _Finder()


def when_imported(modules: Iterable[str], callback: Callable[[str], None]) -> bool:
    """Call `callback(module_name)` after each of `modules` finishes importing. If one of them is
    already imported, call it once now and return True (False: deferred until an import)."""
    now = False
    with _lock:
        for name in modules:
            cbs = _watch.setdefault(name, [])
            if callback not in cbs:
                cbs.append(callback)
            now = now or _fully_imported(name)
        if _finder not in sys.meta_path:
            sys.meta_path.insert(0, _finder)
    if now:
        callback("")
    return now
