"""Work bounds in the default suite are counts, not seconds (issue 48): a CPU- or wall-time bound
fails a landing on a loaded machine for no fault of the code (1.168 s against 1 s, a fresh clone's
`pytest -q`; 0.77 s against 0.5 s, 2026-12-04). What such a bound guards against is an input that
makes the code do far too much work (difflib once per key of a 4000-key mapping; a document composed
in full before a node limit fired): the number of function calls (Python and C, counted by cProfile)
says that the same way on every machine, and is the same on every run of one input.

    result, calls, cpu_s = counted(fn, *args)           # calls: deterministic; cpu_s: a statistic

CALL_LIMIT is about one second of this code's CPU time on the 2-core machine it was measured on
(2.5 M calls/s for the loader, 2026-12-05), with the heaviest legitimate input of the suites well
under it: the 200,000-item document refused before composing, 0.92 M calls. Timings are measured
and reported by bench/ (bench/fuzz_long.py: the slowest input per target against its CPU-time
limit), never asserted here."""
from __future__ import annotations

import cProfile
import os
import time

CALL_LIMIT = int(os.environ.get("SURGERY_CALL_LIMIT", "2000000"))


def counted(fn, *args, allowed: tuple = ()):
    """Call fn(*args) under a call counter: (its value or one of the `allowed` exceptions, the number
    of function calls it made, the CPU seconds it took, counter included: a statistic, never a bound)."""
    prof = cProfile.Profile()
    start = time.process_time()
    prof.enable()
    try:
        result = fn(*args)
    except allowed as exc:
        result = exc
    finally:
        prof.disable()
        cpu_s = time.process_time() - start
    return result, sum(entry.callcount for entry in prof.getstats()), cpu_s


def timed(fn, *args, allowed: tuple = ()):
    """Call fn(*args) uncounted: (its value or one of the `allowed` exceptions, its CPU seconds). For
    bench/ (bench/fuzz_long.py), which reports times; a test file never asserts on them
    (tests/test_no_timed_assertions.py)."""
    start = time.process_time()
    try:
        result = fn(*args)
    except allowed as exc:
        result = exc
    return result, time.process_time() - start
