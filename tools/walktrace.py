"""Follow one command through the package as it runs: which modules of `surgery/` it enters, in
order, how often a call climbs to a higher layer than its caller's, and how often the recipe is
resolved. The numbers issue 43 asks for ("modules per walk"), measured on the running code rather
than read from its text, so a callback or an import made by importlib counts like any other call.

    python tools/walktrace.py validate-hub            # a hub id to `validate`, until config facts exist
    python tools/walktrace.py validate-hub-weights    # the same with --weights, to the end
    python tools/walktrace.py apply-vllm              # `surgery apply --engine vllm` on the built-in pair
    python tools/walktrace.py -- validate recipes/eagle3.yaml --target T --draft D   # any command

A *room* is a module under surgery/ (one file); a *climb* is a call from a function of one module
into a module of a higher layer (surgery/data/layers.yaml, the table tests/test_architecture.py
enforces): with no upward import left, what remains are callbacks and hooks. The hub walks run
against the local hub of the test suite (tests/hub/hubserver.py) with its real-size repos and an
empty cache, so they fetch what a first run fetches.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PKG = str(ROOT / "surgery") + os.sep
sys.path[:0] = [str(ROOT), str(ROOT / "tools"), str(ROOT / "tests")]

import layermap  # noqa: E402  (tools/layermap.py: the one reader of the layer table)

CO_OPTIMIZED = 0x1  # set on function code objects, not on module or class bodies
# the function whose first return means "config facts exist" for the --until stop
FACTS_BUILT = ("facts/fromconfig.py", "facts_from_config")


class Walk:
    """A profile hook that records, for each call into surgery/, the module and the caller's module."""

    def __init__(self, until: tuple[str, str] | None):
        self.layers = {rel: entry["layer"] for rel, entry in layermap.placement().items()}
        self.rooms: list[str] = []
        self.seen: set[str] = set()
        self.calls = self.climbs = self.resolves = 0
        self.climb_examples: dict[tuple[str, str], int] = {}
        self.until, self.stopped = until, False

    @staticmethod
    def module_of(frame) -> str | None:
        name = frame.f_code.co_filename
        return name[len(PKG):].replace(os.sep, "/") if name.startswith(PKG) else None

    def caller_module(self, frame) -> str | None:
        """The module of the nearest surgery/ frame that called this one, None when the import system did."""
        f = frame.f_back
        while f is not None:
            if f.f_code.co_filename.startswith("<frozen importlib"):
                return None  # called by the import system (an import hook, a package's __getattr__): no call of ours
            rel = self.module_of(f)
            if rel is not None:
                return rel
            f = f.f_back
        return None

    def __call__(self, frame, event, arg):
        if self.stopped:
            return
        rel = self.module_of(frame)
        if rel is None:
            return
        if event == "return":
            if self.until and (rel, frame.f_code.co_name) == self.until:
                self.stopped = True
            return
        if event != "call" or not frame.f_code.co_flags & CO_OPTIMIZED:
            return  # a module or class body running at import time is no call
        self.calls += 1
        if rel not in self.seen:
            self.seen.add(rel)
            self.rooms.append(rel)
        if (rel, frame.f_code.co_name) in (("resolver.py", "resolve"),):
            self.resolves += 1
        caller = self.caller_module(frame)
        if caller and caller != rel and self.layers.get(rel, -1) > self.layers.get(caller, -1):
            self.climbs += 1
            key = (caller, rel)
            self.climb_examples[key] = self.climb_examples.get(key, 0) + 1

    def summary(self) -> dict:
        return {"rooms": len(self.rooms), "order": self.rooms, "calls": self.calls, "climbs": self.climbs,
                "climbs_by_pair": {f"{a} -> {b}": n for (a, b), n in sorted(self.climb_examples.items())},
                "resolves": self.resolves, "stopped_at_until": self.stopped}


def run_cli(argv: list[str], until) -> tuple[dict, int]:
    from surgery.cli import main

    walk = Walk(until)
    threading.setprofile(walk)  # the hub side-by-side reads the two models on threads
    sys.setprofile(walk)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            code = main(argv)
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    return walk.summary(), code


@contextlib.contextmanager
def local_hub():
    from hub.hubserver import HubServer
    from hub.repos import all_repos, tiny_repos

    token = "hf_test_token"
    with HubServer(all_repos() + tiny_repos(), token=token) as server, tempfile.TemporaryDirectory() as home:
        env = {"HF_ENDPOINT": server.endpoint, "HF_HOME": home, "HF_TOKEN": token}
        old = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            yield
        finally:
            for k, v in old.items():
                os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)


def preset(name: str) -> tuple[list[str], tuple[str, str] | None, bool]:
    from hub.repos import EAGLE3, LLAMA

    hub_args = ["validate", "recipes/eagle3.yaml", "--target", LLAMA, "--draft", EAGLE3, "--engine", "vllm"]
    return {
        "validate-hub": (hub_args, FACTS_BUILT, True),
        "validate-hub-weights": (hub_args + ["--weights"], None, True),
        "apply-vllm": (["apply", "recipes/gemma4-mtp.yaml", "--engine", "vllm"], None, False),
    }[name]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("preset", nargs="?", choices=["validate-hub", "validate-hub-weights", "apply-vllm"])
    ap.add_argument("argv", nargs="*", help="a surgery command line, after --")
    ap.add_argument("--until", help="stop at the first return of MODULE:FUNCTION (module path under surgery/)")
    ap.add_argument("--json", action="store_true", help="the whole record, rooms in order")
    a = ap.parse_args()
    os.chdir(ROOT)
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    if a.preset:
        argv, until, hub = preset(a.preset)
    else:
        argv, until, hub = a.argv, None, False
    if a.until:
        until = tuple(a.until.split(":", 1))
    with local_hub() if hub else contextlib.nullcontext():
        record, code = run_cli(argv, until)
    record["exit_code"] = code
    if a.json:
        print(json.dumps(record, indent=1))
    else:
        print(f"{' '.join(argv)}\n  rooms {record['rooms']}, climbs {record['climbs']}, recipe resolved "
              f"{record['resolves']} time(s), exit {code}" + (f", stopped at {until[0]}:{until[1]}" if record["stopped_at_until"] else ""))
        for pair, n in record["climbs_by_pair"].items():
            print(f"  climb {pair} x{n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
