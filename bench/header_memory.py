"""Peak memory of reading one large safetensors header (issue 48: a 99 MiB header cost 1.6 GiB).

Writes a synthetic checkpoint whose JSON header is just under the 100 MiB per-file cap, with entries
shaped like a real MoE checkpoint's (`model.layers.L.mlp.experts.E.{gate,up,down}_proj.weight`, BF16,
2-d), as a sparse file (the data region is a hole), then reads it in a fresh process with
`surgery.checks.safetensors_header.read_header` and prints the peak RSS growth (ru_maxrss minus the RSS
before the read) and, with --tracemalloc, the peak of Python allocations during the read.

    python bench/header_memory.py [--mib 99] [--entries moe|minimal] [--tracemalloc] [--keep FILE]

`--entries minimal` writes the most tensors a header's bytes can hold (`"1f":{"dtype":"U8","shape":[],
"data_offsets":[31,32]}`, ~60 bytes each): the worst case of memory per header byte.

The ratio to the header's size is what docs/reliability.md reports; the test suite asserts the
tracemalloc ratio on a smaller header (tests/checks/test_header_contract.py), never a time.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _write_sparse(path: Path, entries: list[str], data_bytes: int) -> int:
    """A .safetensors file of these header entries and `data_bytes` of sparse (unwritten) data; the header length."""
    header = ("{" + ",".join(entries) + "}").encode()
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(header)) + header)
        fh.truncate(8 + len(header) + data_bytes)
    return len(header)


def write_minimal_header_file(path: Path, mib: float) -> tuple[int, int]:
    limit = int(mib * (1 << 20))
    parts, size, count = [], 2, 0
    while True:
        entry = f'"{count:x}":{{"dtype":"U8","shape":[],"data_offsets":[{count},{count + 1}]}}'
        if size + len(entry) + 1 > limit:
            return _write_sparse(path, parts, count), count
        parts.append(entry)
        size += len(entry) + 1
        count += 1


def write_header_file(path: Path, mib: float) -> tuple[int, int]:
    """A sparse .safetensors file with a header of about `mib` MiB; (header bytes, tensors)."""
    limit = int(mib * (1 << 20))
    parts, size, offset, count = [], 2, 0, 0
    layer = 0
    while True:
        for expert in range(256):
            for proj, shape in (("gate_proj", [16, 8]), ("up_proj", [16, 8]), ("down_proj", [8, 16])):
                nbytes = shape[0] * shape[1] * 2
                entry = json.dumps(f"model.layers.{layer}.mlp.experts.{expert}.{proj}.weight") + ":" + json.dumps(
                    {"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + nbytes]}, separators=(",", ":"))
                if size + len(entry) + 1 > limit:
                    return _write_sparse(path, parts, offset), count
                parts.append(entry)
                size += len(entry) + 1
                offset += nbytes
                count += 1
        layer += 1


def _rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * resource.getpagesize()


def measure(path: str, use_tracemalloc: bool) -> dict:
    """Run in the child: read the header once and report memory and time."""
    import gc

    from surgery.checks.safetensors_header import read_header

    gc.collect()
    before_rss = _rss_bytes()
    if use_tracemalloc:
        import tracemalloc

        tracemalloc.start()
    t0 = time.perf_counter()
    tensors = read_header(path)
    seconds = time.perf_counter() - t0
    out = {"tensors": len(tensors), "seconds": round(seconds, 2),
           "peak_rss_growth_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before_rss}
    if use_tracemalloc:
        current, peak = tracemalloc.get_traced_memory()
        out.update(tracemalloc_peak_bytes=peak, tracemalloc_kept_bytes=current)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=float, default=99.0)
    ap.add_argument("--entries", choices=("moe", "minimal"), default="moe")
    ap.add_argument("--tracemalloc", action="store_true")
    ap.add_argument("--keep", metavar="FILE", help="write the synthetic file here (and keep it)")
    ap.add_argument("--child", metavar="FILE", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(measure(args.child, args.tracemalloc)))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(args.keep) if args.keep else Path(tmp) / "big.safetensors"
        n, count = (write_minimal_header_file if args.entries == "minimal" else write_header_file)(path, args.mib)
        env = dict(os.environ, PYTHONPATH=os.environ.get("PYTHONPATH", str(ROOT)))
        child = subprocess.run([sys.executable, __file__, "--child", str(path)] +
                               (["--tracemalloc"] if args.tracemalloc else []),
                               env=env, capture_output=True, text=True)
        if child.returncode != 0:
            print(child.stderr, file=sys.stderr)
            return 1
        result = json.loads(child.stdout)
    result.update(header_bytes=n, header_mib=round(n / (1 << 20), 1), tensors_written=count,
                  rss_ratio=round(result["peak_rss_growth_bytes"] / n, 2))
    if "tracemalloc_peak_bytes" in result:
        result["tracemalloc_ratio"] = round(result["tracemalloc_peak_bytes"] / n, 2)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
