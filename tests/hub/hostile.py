"""What every hostile-hub test checks, shared by test_hostile_hub.py (issue 48) and
test_hostile_round2.py (issue 54): a sandbox root holding HF_HOME and a "victim" file beside it, every
file under the root listed before and after (`snapshot`, `nothing_outside`), and a refusal that is
a coded error with exit 2 and no traceback (`refused`)."""
from __future__ import annotations

import os
from pathlib import Path

from hub.repos import TINY_HEAD, TINY_TARGET


def snapshot(root: Path) -> dict[str, bytes | str]:
    """Every file and link under `root`: its bytes (or its link target; a FIFO or device by its kind)."""
    out = {}
    for p in root.rglob("*"):
        if p.is_symlink():
            out[str(p)] = "-> " + os.readlink(p)
        elif p.is_fifo() or p.is_char_device() or p.is_block_device() or p.is_socket():
            out[str(p)] = "special"
        elif p.is_file():
            out[str(p)] = p.read_bytes()
    return out


def nothing_outside(root: Path, cache_root: Path, before: dict) -> None:
    after = snapshot(root)
    changed = [p for p in set(before) | set(after) if before.get(p) != after.get(p)]
    outside = [p for p in changed if not Path(p).is_relative_to(cache_root)]
    assert not outside, f"written outside the cache: {outside}"


def validate(run_cli, target=TINY_TARGET, draft=TINY_HEAD, *extra):
    return run_cli("validate", "eagle3", "--target", target, "--draft", draft, "--weights", *extra)


def refused(result, code):
    rc, out, err = result
    assert rc == 2, (rc, out, err)
    assert code in err and "Traceback" not in err, err
    return err


def half_written(home: Path) -> list[Path]:
    """Temporary files left in the cache, and snapshot links to a missing blob."""
    left = [p for p in home.rglob("*") if p.name.endswith(".incomplete")]
    return left + [p for p in home.rglob("*") if "snapshots" in p.parts and p.is_symlink() and not p.exists()]
