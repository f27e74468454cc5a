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
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Callable

from ..diagnostics import Location, fail

if TYPE_CHECKING:
    from ..modelsource import ModelSource

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
    file: str  # the shard holding it, as diagnostics name it
    start: int  # absolute byte offset of the data in `file`
    end: int
    # reads (offset, length) bytes of the shard: a local file, or a range request to the hub
    read_at: Callable[[int, int], bytes] | None = field(default=None, compare=False, repr=False)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    def read(self, offset: int, length: int) -> bytes:
        if self.read_at is not None:
            return self.read_at(offset, length)
        with open(self.file, "rb") as fh:
            fh.seek(offset)
            return fh.read(length)


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


HUB_HEAD_GUESS = 64 << 10  # first range read of a hub file: most shards' whole header (8B: ~30 kB each)
HUB_MAX_HEADER_BYTES = 16 << 20  # a header read over the network: the largest real ones are a few MB


def read_header(path: str | os.PathLike) -> dict[str, TensorInfo]:
    """One local .safetensors file's tensors, from its header (coded SRG600 for anything malformed)."""
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
    return parse_header(raw, n, size, str(p), None)


def read_header_from(src: ModelSource, name: str) -> dict[str, TensorInfo]:
    """A weight file's header through its model source: a local file, or at most two range requests
    to the hub (the first 64 kB, then the rest of a longer header); never the tensor data."""
    from ..modelsource import LocalSource

    if isinstance(src, LocalSource):
        return read_header(src.path(name))
    shown = src.location(name)
    where = Location(shown)
    head = src.read_range(name, 0, HUB_HEAD_GUESS)
    size = src.size(name)
    if len(head) < 8:
        raise fail("SRG600", "shorter than the 8-byte header length", where)
    (n,) = struct.unpack("<Q", head[:8])
    if n == 0 or (size is not None and 8 + n > size):
        raise fail("SRG600", f"header length {n} is impossible for a {size}-byte file", where)
    if n > HUB_MAX_HEADER_BYTES:
        raise fail("SRG600", f"header length {n} is more than the {HUB_MAX_HEADER_BYTES >> 20} MiB a header read "
                   "from the hub may take", where, hint="no real checkpoint has such a header: the file is "
                   "damaged or not a safetensors file; it was not read further")
    raw = head[8:8 + n]
    if len(raw) < n:
        raw += src.read_range(name, len(head), 8 + n - len(head))
    if len(raw) != n:
        raise fail("SRG600", f"header cut short: {len(raw)} of {n} bytes", where)
    size = src.size(name) if size is None else size
    return parse_header(raw, n, size, shown, lambda off, length, _n=name: src.read_range(_n, off, length))


def parse_header(raw: bytes, n: int, size: int | None, shown: str, read_at) -> dict[str, TensorInfo]:
    """The tensors of a header's JSON (`raw`, `n` bytes after the 8-byte length)."""
    where = Location(shown)
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
                    and isinstance(lo, int) and isinstance(hi, int) and 0 <= lo <= hi
                    and (size is None or base + hi <= size)):
                raise ValueError
        except (KeyError, TypeError, ValueError):
            raise fail("SRG600", f"tensor {name!r}: malformed header entry", where) from None
        width = DTYPE_BYTES.get(dtype)
        if width is not None and (hi - lo) != math.prod(shape) * width:
            raise fail("SRG600", f"tensor {name!r}: {hi - lo} bytes for {dtype}{shape}", where)
        out[name] = TensorInfo(name, dtype, tuple(shape), shown, base + lo, base + hi, read_at)
    return out


def _index_weight_map(src: ModelSource) -> dict:
    where = Location(src.location(INDEX_FILE))
    data = src.read_bytes(INDEX_FILE, MAX_INDEX_BYTES, "safetensors index")
    try:
        weight_map = json.loads(data.decode("utf-8"))["weight_map"]
        if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
            raise ValueError
    except (UnicodeDecodeError, ValueError, KeyError, TypeError, RecursionError):
        raise fail("SRG600", "not a safetensors index (needs a `weight_map` of tensor -> file)", where) from None
    return weight_map


def find_weight_files(folder) -> tuple[list[str], dict | None]:
    """The checkpoint's .safetensors file names (through the index when there is one) and the
    index's weight map. `folder`: a model folder or a ModelSource."""
    from ..modelsource import LocalSource, ModelSource

    src = folder if isinstance(folder, ModelSource) else LocalSource(folder)
    if src.has(INDEX_FILE):
        if (src.size(INDEX_FILE) or 0) > MAX_INDEX_BYTES:
            raise fail("SRG600", "index file too large", Location(src.location(INDEX_FILE)))
        weight_map = _index_weight_map(src)
        shards = []
        for shard in dict.fromkeys(weight_map.values()):
            # names inside the folder only; the file itself may be a symlink (the HF hub cache links
            # snapshots/<rev>/*.safetensors to ../../blobs/<hash>)
            rel = PurePosixPath(shard)
            if rel.is_absolute() or ".." in rel.parts or not src.has(shard):
                raise fail("SRG602", f"shard {shard!r} named by the index is not in the folder",
                           Location(src.location(INDEX_FILE), key_path=f"weight_map -> {shard}"))
            shards.append(shard)
        return shards, weight_map
    return sorted(n for n in src.names() if n.endswith(".safetensors") and "/" not in n), None


def read_checkpoint(folder) -> Checkpoint:
    """Every tensor of a model (folder or ModelSource), from the headers only. SRG601 when there are
    no weights."""
    from ..modelsource import LocalSource, ModelSource

    src = folder if isinstance(folder, ModelSource) else None
    if src is None:
        d = Path(folder)
        if not d.is_dir():
            raise fail("SRG601", "weights checks need the model folder (config.json and *.safetensors), "
                       "not a config file", Location(str(folder)))
        src = LocalSource(d)
    elif isinstance(src, LocalSource) and src.is_config_file:
        raise fail("SRG601", "weights checks need the model folder (config.json and *.safetensors), "
                   "not a config file", Location(src.ref))
    files, weight_map = find_weight_files(src)
    if not files:
        raise fail("SRG601", "no *.safetensors files in the folder", Location(src.location()),
                   "weights checks read safetensors headers; convert .bin checkpoints first")
    ckpt = Checkpoint(src.location(), [src.location(f) for f in files])
    if isinstance(src, LocalSource) or len(files) == 1:
        headers = [read_header_from(src, f) for f in files]
    else:  # over the network the shards' headers are read side by side: one round trip, not one per shard
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=min(8, len(files))) as pool:
            headers = list(pool.map(lambda f: read_header_from(src, f), files))
    for header in headers:
        for name, info in header.items():
            ckpt.tensors[name] = info
    if weight_map is not None:
        missing = sorted(n for n in weight_map if n not in ckpt.tensors)
        if missing:
            raise fail("SRG602", f"{len(missing)} tensor(s) listed in the index are in no shard (first: "
                       f"{missing[0]!r})", Location(src.location(INDEX_FILE)))
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
    raw = info.read(info.start + start * width, count * width)
    if len(raw) != count * width:
        raise ValueError("file shorter than its header says")
    if info.dtype == "BF16":
        return _bf16(raw)
    return list(struct.unpack(f"<{count}{_STRUCT[info.dtype]}", raw))


def read_raw(info: TensorInfo, start_byte: int, count_bytes: int) -> bytes:
    """Raw bytes of a tensor's data (bounded by MAX_VALUES * 8), for equality checks of any dtype."""
    count_bytes = max(0, min(count_bytes, info.end - info.start - start_byte, MAX_VALUES * 8))
    return info.read(info.start + start_byte, count_bytes)
