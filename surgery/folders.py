"""Model folders written so that no reader ever sees a partial one.

A folder is written in a temporary sibling (``.<name>-xxxx``) and renamed into place; the
temporary names are what the tiny-pair cache cleans up after a writer that died mid-copy
(surgery/tinymodels/tinypair.py). Used by the cache, `surgery pair export` (surgery/pairs.py) and the pair
builders in tools/.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import threading
from pathlib import Path


def is_complete(folder: Path) -> bool:
    """A model folder with both of the files every loader needs."""
    return (folder / "config.json").is_file() and (folder / "model.safetensors").is_file()


def replace_dir(src: Path, dest: Path) -> None:
    """Move ``src`` onto ``dest``; an existing (stale or partial) ``dest`` is moved aside first
    because ``os.replace`` cannot overwrite a non-empty directory."""
    src.chmod(0o755)  # mkdtemp creates 0700
    for f in src.iterdir():
        f.chmod(0o644)
    if not dest.exists():
        os.replace(src, dest)
        return
    stale = Path(tempfile.mkdtemp(prefix=f".{dest.name}-old-", dir=dest.parent))
    try:
        os.replace(dest, stale / dest.name)
    except BaseException:
        shutil.rmtree(stale, ignore_errors=True)
        raise
    try:
        os.replace(src, dest)
    except BaseException:  # the old folder goes back where it was: never no folder at all
        try:
            os.replace(stale / dest.name, dest)
        except OSError:
            pass  # it stays whole in `stale`, which is then kept, not removed
        else:
            shutil.rmtree(stale, ignore_errors=True)
        raise
    shutil.rmtree(stale, ignore_errors=True)


@contextlib.contextmanager
def staged_dir(dest: Path):
    """Yield an empty temporary folder next to ``dest``; when the block ends without an error it
    replaces ``dest`` (:func:`replace_dir`). The temporary folder is removed either way."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}-", dir=dest.parent))
    try:
        yield tmp
        replace_dir(tmp, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


class Interrupted(KeyboardInterrupt):
    """SIGTERM (or SIGINT, SIGHUP) while a folder was being staged: raised in the main thread so that
    the `finally` blocks (staged_dir's removal of its temporary folder) run, as they do on Ctrl-C."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextlib.contextmanager
def signals_raise():
    """While the block runs, SIGTERM / SIGHUP / SIGINT raise :class:`Interrupted` (the default SIGTERM
    action kills the process with no cleanup, leaving a hidden staging folder behind). After the
    first signal the others are ignored until the block ends, so a second one cannot interrupt the
    cleanup. Outside the main thread (where Python cannot set handlers) it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    names = ("SIGTERM", "SIGINT", "SIGHUP")
    # a signal the process was told to ignore (nohup) stays ignored
    nums = [getattr(signal, n) for n in names
            if hasattr(signal, n) and signal.getsignal(getattr(signal, n)) is not signal.SIG_IGN]

    def handler(signum, _frame):
        for n in nums:
            signal.signal(n, signal.SIG_IGN)
        raise Interrupted(signum)

    old = {n: signal.signal(n, handler) for n in nums}
    try:
        yield
    finally:
        for n, h in old.items():
            signal.signal(n, h if h is not None else signal.SIG_DFL)
