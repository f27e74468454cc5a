"""No timed assertion in the test suite (issue 48): a bound in seconds fails a landing on a loaded
machine for no fault of the code (`test_flat_mapping_of_thousands_of_unknown_keys_has_headroom`,
1.168 s CPU against 1 s on a fresh clone). Work bounds are counts (tests/callcount.py: function
calls; look-ups; requests); timings are measured and reported by bench/.

The check: no test module (`test_*.py`) reads a clock. Helpers may, where they wait for something
or measure for a report, never to assert (tests/callcount.py, the hub test server's settle, the vLLM
server's start-up wait, the distributed worker's timing record): they are listed here with why.
Subprocess and queue `timeout=` arguments are hang guards (minutes, against a hang), not bounds."""
from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
CLOCKS = {"time", "monotonic", "perf_counter", "process_time", "monotonic_ns", "perf_counter_ns", "process_time_ns",
          "time_ns", "thread_time", "thread_time_ns"}
HELPERS_THAT_READ_A_CLOCK = {
    "callcount.py": "`counted` reports CPU seconds beside the call count, `timed` times for bench/fuzz_long.py",
    "hub/hubserver.py": "settle() waits for the server threads to write their log rows",
    "vllm/openai_server.py": "waits for the server to start, and records how long it took",
    "vllm/dist_worker_ext.py": "waits for the other ranks' files, and records hook timings for a report",
    "release_oracle/venvs.py": "OracleRun.seconds: each oracle's own wall time, printed beside its verdicts",
}


def clock_reads(path: Path) -> list[str]:
    """`time.<clock>()` calls and `from time import <clock>` in one file."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    where = path.relative_to(TESTS) if path.is_relative_to(TESTS) else path.name
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and node.attr in CLOCKS and isinstance(node.value, ast.Name)
                and node.value.id == "time"):
            found.append(f"{where}:{node.lineno} time.{node.attr}")
        if isinstance(node, ast.ImportFrom) and node.module == "time":
            found += [f"{where}:{node.lineno} from time import {a.name}" for a in node.names
                      if a.name in CLOCKS]
    return found


def test_no_test_module_reads_a_clock():
    reads = [r for p in sorted(TESTS.rglob("test_*.py")) for r in clock_reads(p)]
    assert not reads, "timed assertions belong in bench/, bounds in tests are counts:\n" + "\n".join(reads)


def test_the_helpers_that_read_a_clock_are_the_listed_ones():
    """A new helper reading a clock is added to the list with why (and never asserts on it)."""
    readers = {str(p.relative_to(TESTS)) for p in TESTS.rglob("*.py")
               if not p.name.startswith("test_") and clock_reads(p)}
    assert readers == set(HELPERS_THAT_READ_A_CLOCK), readers


def test_the_check_sees_a_timed_assertion(tmp_path):
    """The shape issue 48 found, in a scratch file: found."""
    path = tmp_path / "test_scratch_timed.py"
    path.write_text("import time\nfrom time import perf_counter\nstart = time.process_time()\n"
                    "assert time.process_time() - start < 1.0\n")
    assert len(clock_reads(path)) == 3
