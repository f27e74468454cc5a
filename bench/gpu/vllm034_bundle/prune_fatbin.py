"""prune_fatbin.py: zero the GPU code a Hopper card (sm_90) can never load, so the bundle compresses small.

    python3 prune_fatbin.py [--keep 90] [--dry] LIB.so ...

Why: the PyPI builds of torch 2.14 (cu130), NCCL 2.30.7 and vLLM 0.34 carry device code for every
architecture from sm_75 to sm_120; the H200 runs only sm_90 cubins (sm_90 / sm_90a) or PTX of
compute capability <= 9.0. Everything else in the `.nv_fatbin` section is dead weight on that machine
(an sm_80 cubin cannot run on sm_90; an sm_100 cubin or compute_100 PTX is never chosen there), and it
is most of these libraries' bytes. Each fatbin entry keeps its header (arch, kind, sizes: the driver
picks by those) and only its payload bytes become zeros, so the ELF layout and every offset stay as
they were; xz then packs the zeros to almost nothing. Writes in place; prints what it zeroed.
"""
from __future__ import annotations

import struct
import sys

MAGIC = 0xBA55ED50


def sections(buf: bytes) -> dict[str, tuple[int, int]]:
    assert buf[:4] == b"\x7fELF" and buf[4] == 2, "ELF64 only"
    shoff, = struct.unpack_from("<Q", buf, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", buf, 0x3A)
    hdrs = [struct.unpack_from("<IIQQQQ", buf, shoff + i * shentsize) for i in range(shnum)]
    stroff = hdrs[shstrndx][4]
    out = {}
    for name, _type, _flags, _addr, off, size in hdrs:
        end = buf.index(b"\0", stroff + name)
        out[buf[stroff + name:end].decode()] = (off, size)
    return out


def keep_entry(kind: int, arch: int, keep: int) -> bool:
    if kind == 2:  # cubin (ELF): only the exact major.minor family of the card (90 and 90a)
        return arch == keep
    if kind == 1:  # PTX: the driver can JIT any compute capability <= the card's
        return arch <= keep
    return True  # unknown kind: keep


def prune(path: str, keep: int = 90, dry: bool = False) -> dict:
    with open(path, "rb") as f:
        buf = bytearray(f.read())
    secs = sections(buf)
    stats = {"path": path, "fatbins": 0, "entries": 0, "zeroed_entries": 0, "zeroed_bytes": 0,
             "kept_bytes": 0, "archs": {}}
    # .nv_fatbin: the code registered at load; __nv_relfatbin: relocatable device code (NCCL's)
    for name in (".nv_fatbin", "__nv_relfatbin"):
        if name in secs:
            off, size = secs[name]
            _walk(buf, off, off + size, keep, dry, stats)
    if not dry and stats["zeroed_entries"]:
        with open(path, "wb") as f:
            f.write(buf)
    return stats


def _walk(buf: bytearray, pos: int, end: int, keep: int, dry: bool, stats: dict) -> None:
    while pos + 16 <= end:
        magic, _ver, hsize, fsize = struct.unpack_from("<IHHQ", buf, pos)
        if magic != MAGIC:
            pos += 8  # alignment padding between fatbins
            continue
        stats["fatbins"] += 1
        e, fend = pos + hsize, pos + hsize + fsize
        assert fend <= end, f"fatbin at {pos:#x} runs past the section"
        while e < fend:
            kind, _u, ehsize, psize = struct.unpack_from("<HHIQ", buf, e)
            arch, = struct.unpack_from("<I", buf, e + 28)
            assert ehsize >= 64 and e + ehsize + psize <= fend, f"bad entry at {e:#x}"
            stats["entries"] += 1
            k = f"{'ptx' if kind == 1 else 'sm' if kind == 2 else kind}_{arch}"
            stats["archs"][k] = stats["archs"].get(k, 0) + psize
            p0 = e + ehsize
            if keep_entry(kind, arch, keep):
                stats["kept_bytes"] += psize
            else:
                stats["zeroed_entries"] += 1
                stats["zeroed_bytes"] += psize
                if not dry:
                    buf[p0:p0 + psize] = bytes(psize)
            e = p0 + psize
        pos = fend


if __name__ == "__main__":
    args = sys.argv[1:]
    keep, dry = 90, False
    if "--keep" in args:
        i = args.index("--keep")
        keep = int(args[i + 1])
        del args[i:i + 2]
    if "--dry" in args:
        args.remove("--dry")
        dry = True
    for p in args:
        s = prune(p, keep, dry)
        mb = lambda n: f"{n / 2**20:.1f} MiB"  # noqa: E731
        print(f"{p}: {s.get('fatbins', 0)} fatbins, {s.get('entries', 0)} entries; zeroed "
              f"{s.get('zeroed_entries', 0)} ({mb(s.get('zeroed_bytes', 0))}), kept {mb(s.get('kept_bytes', 0))}; "
              + ", ".join(f"{k}={mb(v)}" for k, v in sorted(s.get("archs", {}).items())))
