#!/usr/bin/env python3
"""Whether compiled extensions built against one torch load against another: every symbol they
import that a torch library exports must be exported by the torch they will run with.

Why: SGLang 0.5.23 and sglang-kernel 0.4.10 pin torch==2.14.1, while the torch the GPU machine can
have is the vLLM 0.34 bundle's 2.14.0 (bench/gpu/vllm034_bundle/, unpacked in /tmp/site). A C++
extension that calls a libtorch / c10 function missing from the torch it runs with fails at load
("undefined symbol: _ZN3c10..."), which is the only way the patch release can break a prebuilt
extension short of a changed struct layout (PyTorch keeps those within a minor release). So the
check reads, with `nm -D`, the undefined dynamic symbols of each given .so and the defined ones of
the torch libraries the .so links (NEEDED: libtorch*.so, libc10*.so) taken from the torch wheel, and
lists each imported symbol that looks like torch's (c10 / at / torch / caffe2 mangled names) and is
not exported. Weak references (`w`) are ignored: the loader leaves them null.

    abi_check.py --torch-wheel torch-2.14.0-...whl EXT.so [EXT.so ...]

Exit 0 when nothing is missing, 1 otherwise (the missing symbols are printed, demangled when
c++filt is there). Needs binutils (nm, readelf) and unzip-free Python (zipfile).
"""
from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

TORCH_LIB = re.compile(r"^lib(torch[a-z_]*|c10[a-z_]*|shm)\.so$")
# mangled names in the c10 / at / torch / caffe2 namespaces, and torch's C entry points
TORCH_SYM = re.compile(r"^_Z.*?(?<![0-9])(3c10|2at|5torch|6caffe2)[A-Z0-9_]|^(THP|torch_|c10_)")


def needed(so: Path) -> list[str]:
    out = subprocess.run(["readelf", "-d", str(so)], capture_output=True, text=True, check=True).stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)


def undefined(so: Path) -> set[str]:
    out = subprocess.run(["nm", "-D", "--undefined-only", str(so)], capture_output=True, text=True, check=True).stdout
    syms = set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[-2] == "U":  # 'w' (weak) may stay unresolved
            syms.add(parts[-1].split("@", 1)[0])
    return syms


def defined(lib: Path) -> set[str]:
    out = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True, check=True).stdout
    return {line.split()[-1].split("@", 1)[0] for line in out.splitlines() if line.split()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--torch-wheel", required=True, type=Path)
    ap.add_argument("ext", nargs="+", type=Path)
    a = ap.parse_args(argv)
    libs_needed = sorted({n for so in a.ext for n in needed(so) if TORCH_LIB.match(n)})
    exported: set[str] = set()
    with tempfile.TemporaryDirectory() as tmp, zipfile.ZipFile(a.torch_wheel) as zf:
        names = {Path(n).name: n for n in zf.namelist() if n.startswith("torch/lib/")}
        for lib in libs_needed:
            if lib not in names:
                print(f"abi_check.py: {a.torch_wheel.name} has no torch/lib/{lib}")
                return 1
            exported |= defined(Path(zf.extract(names[lib], tmp)))
    bad = 0
    for so in a.ext:
        missing = sorted(s for s in undefined(so) - exported if TORCH_SYM.search(s))
        wanted = [n for n in needed(so) if TORCH_LIB.match(n)]
        print(f"abi_check.py: {so.name}: links {', '.join(wanted) or 'no torch library'}; "
              f"{len(missing)} torch symbol(s) missing from {a.torch_wheel.name}")
        if missing and shutil.which("c++filt"):
            missing = subprocess.run(["c++filt"], input="\n".join(missing), capture_output=True,
                                     text=True).stdout.splitlines()
        for s in missing[:40]:
            print(f"    {s}")
        bad += bool(missing)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
