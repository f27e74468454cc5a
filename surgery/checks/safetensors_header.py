"""Safetensors checkpoints read from their headers only: tensor names, dtypes, shapes, and where each
tensor's bytes lie. No torch, no numpy, no safetensors package: the format is an 8-byte
little-endian header length, a JSON header, then the raw bytes (https://github.com/huggingface/safetensors).

Sharded checkpoints are read through `model.safetensors.index.json` (its `weight_map` names the shard of
every tensor). A bounded slice of a small tensor can be decoded in pure Python (`read_values`) where a
header cannot decide a check (e.g. the d2t convention); callers say so in their output.
"""
from __future__ import annotations

import json
import math
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path

from ..diagnostics import Location, fail

INDEX_FILE = "model.safetensors.index.json"
MAX_HEADER_BYTES = 100 << 20  # the safetensors package refuses headers above 100 MB as well
MAX_INDEX_BYTES = 64 << 20
MAX_VALUES = 1 << 16  # a bounded data read decodes at most this many elements

# bytes per element and struct format of the dtypes a data read can decode (others: header only)
DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
               "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1, "U16": 2, "U32": 4, "U64": 8}
_STRUCT = {"F64": "d", "F32": "f", "F16": "e", "I64": "q", "I32": "i", "I16": "h", "I8": "b", "U8": "B",
           "BOOL": "?", "U16": "H", "U32": "I", "U64": "Q"}


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: str
    shape: tuple[int, ...]
    file: str  # the shard holding it
    start: int  # absolute byte offset of the data in `file`
    end: int

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


@dataclass
class Checkpoint:
    """All tensors of one model folder, by name."""

    folder: str
    files: list[str]
    tensors: dict[str, TensorInfo] = field(default_factory=dict)

    def __contains__(self, name: str) -> bool:
        return name in self.tensors

    def get(self, name: str) -> TensorInfo | None:
        return self.tensors.get(name)

    def first(self, names) -> TensorInfo | None:
        for n in names:
            if n in self.tensors:
                return self.tensors[n]
        return None

    def with_suffix(self, suffix: str) -> list[TensorInfo]:
        return [t for n, t in self.tensors.items() if n.endswith(suffix)]

    def with_prefix(self, prefix: str) -> list[TensorInfo]:
        return [t for n, t in self.tensors.items() if n.startswith(prefix)]


def read_header(path: str | os.PathLike) -> dict[str, TensorInfo]:
    """One .safetensors file's tensors, from its header (coded SRG600 for anything malformed)."""
    p = Path(path)
    where = Location(str(p))
    try:
        size = p.stat().st_size
        with open(p, "rb") as fh:
            head = fh.read(8)
            if len(head) != 8:
                raise fail("SRG600", "shorter than the 8-byte header length", where)
            (n,) = struct.unpack("<Q", head)
            if n == 0 or n > MAX_HEADER_BYTES or 8 + n > size:
                raise fail("SRG600", f"header length {n} is impossible for a {size}-byte file", where)
            raw = fh.read(n)
    except OSError as exc:
        raise fail("SRG600", f"cannot read: {exc.strerror or exc}", where) from None
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise fail("SRG600", "header is not valid JSON", where) from None
    if not isinstance(header, dict):
        raise fail("SRG600", "header is not a JSON object", where)
    base = 8 + n
    out: dict[str, TensorInfo] = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape, (lo, hi) = entry["dtype"], entry["shape"], entry["data_offsets"]
            if not (isinstance(dtype, str) and isinstance(shape, list) and all(
                    isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)
                    and isinstance(lo, int) and isinstance(hi, int) and 0 <= lo <= hi and base + hi <= size):
                raise ValueError
        except (KeyError, TypeError, ValueError):
            raise fail("SRG600", f"tensor {name!r}: malformed header entry", where) from None
        width = DTYPE_BYTES.get(dtype)
        if width is not None and (hi - lo) != math.prod(shape) * width:
            raise fail("SRG600", f"tensor {name!r}: {hi - lo} bytes for {dtype}{shape}", where)
        out[name] = TensorInfo(name, dtype, tuple(shape), str(p), base + lo, base + hi)
    return out


def find_weight_files(folder: str | os.PathLike) -> tuple[list[Path], Path | None]:
    """The checkpoint's .safetensors files (through the index when there is one) and the index."""
    d = Path(folder)
    index = d / INDEX_FILE
    if index.is_file():
        if index.stat().st_size > MAX_INDEX_BYTES:
            raise fail("SRG600", "index file too large", Location(str(index)))
        try:
            data = json.loads(index.read_text(encoding="utf-8"))
            weight_map = data["weight_map"]
            if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
                raise ValueError
        except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, RecursionError):
            raise fail("SRG600", "not a safetensors index (needs a `weight_map` of tensor -> file)",
                       Location(str(index))) from None
        shards = []
        for shard in dict.fromkeys(weight_map.values()):
            # names inside the folder only; the file itself may be a symlink (the HF hub cache links
            # snapshots/<rev>/*.safetensors to ../../blobs/<hash>)
            rel = Path(shard)
            sp = d / rel
            if rel.is_absolute() or ".." in rel.parts or not sp.is_file():
                raise fail("SRG602", f"shard {shard!r} named by the index is not in the folder",
                           Location(str(index), key_path=f"weight_map -> {shard}"))
            shards.append(sp)
        return shards, index
    return sorted(d.glob("*.safetensors")), None


def read_checkpoint(folder: str | os.PathLike) -> Checkpoint:
    """Every tensor of a model folder, from the headers only. SRG601 when there are no weights."""
    d = Path(folder)
    if not d.is_dir():
        raise fail("SRG601", "weights checks need the model folder (config.json and *.safetensors), "
                   "not a config file", Location(str(folder)))
    files, index = find_weight_files(d)
    if not files:
        raise fail("SRG601", "no *.safetensors files in the folder", Location(str(folder)),
                   "weights checks read safetensors headers; convert .bin checkpoints first")
    ckpt = Checkpoint(str(d), [str(f) for f in files])
    for f in files:
        for name, info in read_header(f).items():
            ckpt.tensors[name] = info
    if index is not None:
        weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        missing = sorted(n for n in weight_map if n not in ckpt.tensors)
        if missing:
            raise fail("SRG602", f"{len(missing)} tensor(s) listed in the index are in no shard (first: "
                       f"{missing[0]!r})", Location(str(index)))
    return ckpt


def _bf16(raw: bytes) -> list[float]:
    return [struct.unpack("<f", b"\x00\x00" + raw[i:i + 2])[0] for i in range(0, len(raw), 2)]


def read_values(info: TensorInfo, start: int = 0, count: int | None = None) -> list:
    """Decode elements [start, start+count) of a tensor (flattened, row-major) in pure Python.

    Bounded: at most MAX_VALUES elements; ValueError for a dtype this reader cannot decode (FP8)."""
    n = info.numel
    count = n - start if count is None else count
    count = max(0, min(count, n - start, MAX_VALUES))
    width = DTYPE_BYTES.get(info.dtype)
    if width is None or (info.dtype != "BF16" and info.dtype not in _STRUCT):
        raise ValueError(f"cannot decode dtype {info.dtype}")
    with open(info.file, "rb") as fh:
        fh.seek(info.start + start * width)
        raw = fh.read(count * width)
    if len(raw) != count * width:
        raise ValueError("file shorter than its header says")
    if info.dtype == "BF16":
        return _bf16(raw)
    return list(struct.unpack(f"<{count}{_STRUCT[info.dtype]}", raw))


def read_raw(info: TensorInfo, start_byte: int, count_bytes: int) -> bytes:
    """Raw bytes of a tensor's data (bounded by MAX_VALUES * 8), for equality checks of any dtype."""
    count_bytes = max(0, min(count_bytes, info.end - info.start - start_byte, MAX_VALUES * 8))
    with open(info.file, "rb") as fh:
        fh.seek(info.start + start_byte)
        return fh.read(count_bytes)
