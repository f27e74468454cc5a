"""Safetensors checkpoints read from their headers only: tensor names, dtypes, shapes, and where each
tensor's bytes lie. No torch, no numpy, no safetensors package: the format is an 8-byte
little-endian header length, a JSON header, then the raw bytes (https://github.com/huggingface/safetensors).

Sharded checkpoints are read through `model.safetensors.index.json` (its `weight_map` names the shard of
every tensor). A bounded slice of a small tensor can be decoded in pure Python (`read_values`) where a
header cannot decide a check (e.g. the d2t convention); callers say so in their output.

The library contract (issue 48): a header the `safetensors` package refuses (an empty or unknown dtype,
non-string metadata, a sub-byte tensor that does not end on a byte) is refused here with SRG600, and
neither `parse_header` nor `read_values` raises anything but a coded SurgeryError. Memory: a header is
parsed with a json hook that turns each tensor entry into one row of compact columns as soon as it
is read (`TensorTable`), so a header costs a small multiple of its size (the dicts and lists json would
build cost ~10-16x), and all the shards of one model together are bounded in bytes and in tensors
(MAX_TOTAL_HEADER_BYTES, MAX_TOTAL_TENSORS, SRG025), whether they are read from disk or from the hub.
"""
from __future__ import annotations

import errno
import json
import math
import os
import stat
import struct
import threading
from array import array
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Callable, Iterator

from ..text.diagnostics import Location, SurgeryError, fail
from ..modelfiles.source import DEFER, LocalSource, ModelSource
from ..text.escape import quoted
from ..text.localfile import open_regular

INDEX_FILE = "model.safetensors.index.json"
MAX_HEADER_BYTES = 100 << 20  # the safetensors package refuses headers above 100 MB as well
MAX_INDEX_BYTES = 64 << 20
MAX_VALUES = 1 << 16  # a bounded data read decodes at most this many elements
# All the shards of one model together (local folder or hub): the largest public checkpoints (DeepSeek V3,
# Kimi K2: ~100,000 tensors with their FP8 scales) hold under 30 MB of headers, so both bounds leave a
# wide margin while keeping the memory of a hostile model bounded (SRG025).
MAX_TOTAL_HEADER_BYTES = 256 << 20
MAX_TOTAL_TENSORS = 1 << 21

# The dtypes the safetensors package (0.8) accepts, with their width in bits (its `Dtype` enum; an
# unknown or empty name is refused there: "unknown variant"). F4 / F6 are sub-byte: a tensor must end
# on a byte boundary.
SAFETENSORS_DTYPE_BITS = {"BOOL": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "U8": 8, "I8": 8, "F8_E5M2": 8,
                          "F8_E4M3": 8, "F8_E8M0": 8, "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8, "I16": 16, "U16": 16,
                          "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32, "C64": 64, "F64": 64,
                          "I64": 64, "U64": 64}
_DTYPE_NAMES = tuple(SAFETENSORS_DTYPE_BITS)
_DTYPE_CODE = {name: i for i, name in enumerate(_DTYPE_NAMES)}

# bytes per element and struct format of the dtypes a data read can decode (others: header only)
DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
               "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1, "U16": 2, "U32": 4, "U64": 8}
_STRUCT = {"F64": "d", "F32": "f", "F16": "e", "I64": "q", "I32": "i", "I16": "h", "I8": "b", "U8": "B",
           "BOOL": "?", "U16": "H", "U32": "I", "U64": "Q"}


@dataclass(frozen=True, slots=True)
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
        fd = os.open(self.file, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))  # a FIFO: no block
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):  # OSError, as a failing read is (SRG026 by the caller)
                raise OSError(errno.EINVAL, "not a regular file")
            return os.pread(fd, length, offset)
        finally:
            os.close(fd)


class TensorTable(Mapping):
    """name -> TensorInfo for the tensors of one or more headers, kept as compact columns (a dtype
    code, the offsets, the dims; ~60 bytes a tensor besides its name) and turned into a TensorInfo only
    when asked for. Memory is the point: a Python dict per tensor entry costs ~10x the entry's JSON."""

    __slots__ = ("_row", "_codes", "_start", "_end", "_dims_at", "_dims", "_src", "_sources")

    def __init__(self) -> None:
        self._row: dict[str, int] = {}
        self._codes = array("B")
        self._start, self._end = array("Q"), array("Q")
        self._dims_at, self._dims = array("Q", [0]), array("Q")
        self._src = array("I")
        self._sources: list[tuple[str, Callable | None]] = []  # (file as diagnostics name it, read_at)

    def _add_source(self, shown: str, read_at) -> int:
        self._sources.append((shown, read_at))
        return len(self._sources) - 1

    def _append(self, src: int, code: int, shape, start: int, end: int) -> int:
        self._codes.append(code)
        self._start.append(start)
        self._end.append(end)
        self._dims.extend(shape)
        self._dims_at.append(len(self._dims))
        self._src.append(src)
        return len(self._codes) - 1

    def __getitem__(self, name: str) -> TensorInfo:
        i = self._row[name]
        shown, read_at = self._sources[self._src[i]]
        return TensorInfo(name, _DTYPE_NAMES[self._codes[i]], tuple(self._dims[self._dims_at[i]:self._dims_at[i + 1]]),
                          shown, self._start[i], self._end[i], read_at)

    def __contains__(self, name) -> bool:
        return name in self._row

    def first_overlap(self) -> tuple[str, str] | None:
        """Two tensors the table names whose data overlap, or None. No allocation per tensor when the
        rows come in file order (as writers lay them out); sorted row numbers otherwise."""
        starts, ends, n = self._start, self._end, len(self._codes)
        live = bytearray(n)
        for i in self._row.values():
            live[i] = 1
        in_order = all(starts[i] <= starts[i + 1] for i in range(n - 1))
        order = range(n) if in_order else array("I", sorted(range(n), key=lambda i: (starts[i], ends[i])))
        reach, holder = -1, -1
        for i in order:
            if not live[i]:
                continue
            if starts[i] < reach:
                by_row = {row: name for name, row in self._row.items() if row in (holder, i)}
                return by_row.get(holder, "?"), by_row.get(i, "?")
            if ends[i] > reach:
                reach, holder = ends[i], i
        return None

    def __iter__(self) -> Iterator[str]:
        return iter(self._row)

    def __len__(self) -> int:
        return len(self._row)

    def merge(self, other: "TensorTable") -> None:
        """Add `other`'s tensors; a name in both takes `other`'s (the later shard), as a dict update would."""
        rows, sources = len(self._codes), len(self._sources)
        self._sources.extend(other._sources)
        self._codes.extend(other._codes)
        self._start.extend(other._start)
        self._end.extend(other._end)
        base = len(self._dims)
        self._dims.extend(other._dims)
        self._dims_at.extend(base + d for d in other._dims_at[1:])
        self._src.extend(sources + s for s in other._src)
        for name, i in other._row.items():
            self._row[name] = rows + i


class HeaderBudget:
    """What the headers of one model may take together: MAX_TOTAL_HEADER_BYTES of JSON and
    MAX_TOTAL_TENSORS tensors, shared by the shards (read side by side from the hub: thread-safe)."""

    def __init__(self, max_bytes: int | None = None, max_tensors: int | None = None):
        self.max_bytes = MAX_TOTAL_HEADER_BYTES if max_bytes is None else max_bytes
        self.max_tensors = MAX_TOTAL_TENSORS if max_tensors is None else max_tensors
        self.bytes = self.tensors = 0
        self._lock = threading.Lock()

    def take_bytes(self, n: int, shown: str) -> None:
        with self._lock:
            self.bytes += n
            if self.bytes > self.max_bytes:
                raise fail("SRG025", f"the model's safetensors headers take more than the budget of "
                           f"{self.max_bytes:,} bytes (MAX_TOTAL_HEADER_BYTES) across its shards: "
                           f"{self.bytes:,} with this file's {n:,}", Location(shown))

    def take_tensors(self, n: int, shown: str) -> None:
        with self._lock:
            self.tensors += n
            if self.tensors > self.max_tensors:
                raise fail("SRG025", f"the model's safetensors headers list more than the budget of "
                           f"{self.max_tensors:,} tensors (MAX_TOTAL_TENSORS) across its shards (reached in "
                           "this file)", Location(shown))


@dataclass
class Checkpoint:
    """All tensors of one model folder, by name."""

    folder: str
    files: list[str]
    tensors: TensorTable = field(default_factory=TensorTable)

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


def read_header(path: str | os.PathLike, budget: HeaderBudget | None = None) -> TensorTable:
    """One local .safetensors file's tensors, from its header (coded SRG600 for anything malformed,
    SRG025 past the model's `budget`)."""
    p = Path(path)
    where = Location(str(p))
    try:
        fh = os.fdopen(open_regular(p, "weights"), "rb")  # a FIFO or a device: SRG780, never a blocking open
        size = os.fstat(fh.fileno()).st_size
        with fh:
            head = fh.read(8)
            if len(head) != 8:
                raise fail("SRG600", "shorter than the 8-byte header length", where)
            (n,) = struct.unpack("<Q", head)
            if n == 0 or n > MAX_HEADER_BYTES or 8 + n > size:
                raise fail("SRG600", f"header length {n} is impossible for a {size}-byte file", where)
            if budget is not None:
                budget.take_bytes(n, str(p))
            raw = fh.read(n)
    except OSError as exc:
        raise fail("SRG600", f"cannot read: {exc.strerror or exc}", where) from None
    if len(raw) != n:
        raise fail("SRG600", f"header cut short: {len(raw)} of {n} bytes", where)
    holder = [raw]
    del raw
    return parse_header(holder, n, size, str(p), None, budget)


def read_header_from(src: ModelSource, name: str, budget: HeaderBudget | None = None) -> TensorTable:
    """A weight file's header through its model source: a local file, or at most two range requests
    to the hub (the first 64 kB, then the rest of a longer header); never the tensor data. The
    `budget` (the model's, shared by its shards) is charged before the rest of a header is fetched."""
    if src.is_local:
        return read_header(src.local_path(name), budget)
    shown = src.location(name)
    where = Location(shown)
    size = src.size(name)
    keeps = getattr(src, "keeps_ranges", False)  # a source that stores ranges is told which may be kept
    head = src.read_range(name, 0, HUB_HEAD_GUESS, **(
        {"check": lambda data: _header_problem(data, src.size(name), shown)} if keeps else {}))
    size = src.size(name) if size is None else size
    if len(head) < 8:
        raise fail("SRG600", "shorter than the 8-byte header length", where)
    (n,) = struct.unpack("<Q", head[:8])
    if n == 0 or (size is not None and 8 + n > size):
        raise fail("SRG600", f"header length {n} is impossible for a {size}-byte file", where)
    if n > HUB_MAX_HEADER_BYTES:
        raise fail("SRG600", f"header length {n} is more than the {HUB_MAX_HEADER_BYTES >> 20} MiB a header read "
                   "from the hub may take", where, hint="no real checkpoint has such a header: the file is "
                   "damaged or not a safetensors file; it was not read further")
    if budget is not None:
        budget.take_bytes(n, shown)
    raw = head[8:8 + n]
    if len(raw) < n:
        raw += src.read_range(name, len(head), 8 + n - len(head), **(
            {"check": lambda rest, _h=head: _header_problem(_h + rest, src.size(name), shown)} if keeps else {}))
    if len(raw) != n:
        raise fail("SRG600", f"header cut short: {len(raw)} of {n} bytes", where)
    size = src.size(name) if size is None else size
    holder = [raw]
    del raw, head
    return parse_header(holder, n, size, shown, lambda off, length, _n=name: src.read_range(_n, off, length), budget)


def _header_problem(data: bytes, size: int | None, shown: str) -> str | None:
    """For the hub's range cache (issue 67): why the header at the start of `data` must not be stored
    (it does not parse or fails a check: what this module would refuse), DEFER when `data` holds only
    part of it, None when it passes. A range is stored only after this says None."""
    if len(data) < 8:
        return "shorter than the 8-byte header length"
    (n,) = struct.unpack("<Q", data[:8])
    if n == 0 or n > HUB_MAX_HEADER_BYTES or (size is not None and 8 + n > size):
        return f"header length {n} is impossible"
    if 8 + n > len(data):
        return DEFER
    try:
        parse_header(data[8:8 + n], n, size, shown, None)
    except SurgeryError as exc:
        return exc.diagnostics[0].message
    return None


class _Pairs:
    """A JSON object that is not a tensor entry (the header itself, `__metadata__`, a malformed entry):
    its (key, value) pairs, as json's object_pairs_hook gave them."""

    __slots__ = ("pairs",)

    def __init__(self, pairs: list) -> None:
        self.pairs = pairs


_ROW = object()  # what the hook returns for a tensor entry it has stored as a row
_BUDGET_STEP = 1 << 14  # tensors charged to the shared budget at a time while a header is parsed


def _entry_fields(pairs) -> tuple | None:
    dtype = shape = offsets = None
    for key, value in pairs:
        if key == "dtype":
            dtype = value
        elif key == "shape":
            shape = value
        elif key == "data_offsets":
            offsets = value
    if dtype is None and shape is None and offsets is None:
        return None
    return dtype, shape, offsets


def _entry_problem(fields, base: int, size: int | None) -> str | None:
    """Why a tensor entry is refused (the safetensors package refuses the same), or None."""
    if fields is None:
        return "malformed header entry (no dtype, shape, data_offsets)"
    dtype, shape, offsets = fields
    if not isinstance(dtype, str) or dtype not in SAFETENSORS_DTYPE_BITS:
        shown = repr(dtype) if isinstance(dtype, str) and len(dtype) <= 40 else f"of type {type(dtype).__name__}" \
            if not isinstance(dtype, str) else repr(dtype[:40] + "...")
        return f"dtype {shown} is not a safetensors dtype (the safetensors package refuses it: one of " \
               f"{', '.join(_DTYPE_NAMES)})"
    if not (isinstance(shape, list) and all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d < 1 << 63
                                            for d in shape)):
        return "malformed header entry (shape must be a list of non-negative integers)"
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(
            isinstance(o, int) and not isinstance(o, bool) for o in offsets)):
        return "malformed header entry (data_offsets must be two integers)"
    lo, hi = offsets
    if not (0 <= lo <= hi < 1 << 63) or (size is not None and base + hi > size):
        return "malformed header entry (data_offsets outside the file)"
    bits = math.prod(shape) * SAFETENSORS_DTYPE_BITS[dtype]
    if bits % 8:
        return f"{math.prod(shape)} {dtype} elements do not end on a byte boundary"
    if hi - lo != bits // 8:
        return f"{hi - lo} bytes for {dtype}{shape}"
    return None


def parse_header(raw, n: int, size: int | None, shown: str, read_at,
                 budget: HeaderBudget | None = None) -> TensorTable:
    """The tensors of a header's JSON (`raw`, `n` bytes after the 8-byte length; or a one-item list
    holding them, which is emptied so the bytes are freed once decoded). Each tensor entry becomes a row
    of the table as soon as json has read it; anything the safetensors package refuses is SRG600."""
    where = Location(shown)
    if isinstance(raw, list):
        data, raw[:] = raw[0], []
    else:
        data = raw
    del raw
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise fail("SRG600", "header is not valid JSON (not UTF-8)", where) from None
    del data
    base = 8 + n
    table = TensorTable()
    src = table._add_source(shown, read_at)
    charged = [0]

    def hook(pairs):
        fields = _entry_fields(pairs) if len(pairs) >= 3 else None
        if fields is None or _entry_problem(fields, base, size) is not None:
            return _Pairs(pairs)
        dtype, shape, (lo, hi) = fields
        rows = table._append(src, _DTYPE_CODE[dtype], shape, base + lo, base + hi) + 1
        if budget is not None and rows - charged[0] >= _BUDGET_STEP:
            budget.take_tensors(rows - charged[0], shown)
            charged[0] = rows
        elif budget is None and rows > MAX_TOTAL_TENSORS:
            raise fail("SRG025", f"the header lists more than the budget of {MAX_TOTAL_TENSORS:,} tensors "
                       "(MAX_TOTAL_TENSORS)", where)
        return _ROW

    try:
        header = json.loads(text, object_pairs_hook=hook)
    except (ValueError, RecursionError):
        raise fail("SRG600", "header is not valid JSON", where) from None
    del text
    if header is _ROW:
        raise fail("SRG600", "header is a single tensor entry, not an object of named tensors", where)
    if not isinstance(header, _Pairs):
        raise fail("SRG600", "header is not a JSON object", where)
    rows = len(table._codes)
    if budget is not None and rows > charged[0]:
        budget.take_tensors(rows - charged[0], shown)
    seen = 0
    index = table._row
    for name, value in header.pairs:
        if name == "__metadata__":
            if not (isinstance(value, _Pairs) and all(isinstance(v, str) for _, v in value.pairs)):
                raise fail("SRG600", "__metadata__ must map strings to strings (the safetensors package refuses "
                           "other metadata)", where)
        elif value is _ROW:
            index[name] = seen  # a repeated name: the later entry wins, as json's dict would
            seen += 1
        else:
            problem = _entry_problem(_entry_fields(value.pairs) if isinstance(value, _Pairs) else None, base, size)
            raise fail("SRG600", f"tensor {quoted(name)}: {problem or 'malformed header entry'}", where)
    if seen != rows:
        raise fail("SRG600", f"{rows - seen} tensor entr{'y' if rows - seen == 1 else 'ies'} nested where no tensor "
                   "may be (inside another entry, a list or __metadata__)", where)
    overlap = table.first_overlap()  # the safetensors package refuses these; they stuck in the range cache (issue 67)
    if overlap is not None:
        raise fail("SRG600", f"tensors {quoted(overlap[0])} and {quoted(overlap[1])} have overlapping data_offsets "
                   "(the safetensors package refuses it)", where)
    return table


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
                raise fail("SRG602", f"shard {quoted(shard)} named by the index is not in the folder",
                           Location(src.location(INDEX_FILE), key_path=f"weight_map -> {shard}"))
            shards.append(shard)
        return shards, weight_map
    return sorted(n for n in src.names() if n.endswith(".safetensors") and "/" not in n), None


def read_checkpoint(folder) -> Checkpoint:
    """Every tensor of a model (folder or ModelSource), from the headers only. SRG601 when there are
    no weights."""
    src = folder if isinstance(folder, ModelSource) else None
    if src is None:
        d = Path(folder)
        if not d.is_dir():
            raise fail("SRG601", "weights checks need the model folder (config.json and *.safetensors), "
                       "not a config file", Location(str(folder)))
        src = LocalSource(d)
    elif src.is_local and src.is_config_file:
        raise fail("SRG601", "weights checks need the model folder (config.json and *.safetensors), "
                   "not a config file", Location(src.ref))
    files, weight_map = find_weight_files(src)
    if not files:
        raise fail("SRG601", "no *.safetensors files in the folder", Location(src.location()),
                   "weights checks read safetensors headers; convert .bin checkpoints first")
    ckpt = Checkpoint(src.location(), [src.location(f) for f in files])
    budget = HeaderBudget()  # the shards together, local or hub (SRG025)
    if src.is_local or len(files) == 1:
        headers = (read_header_from(src, f, budget) for f in files)  # one at a time: merged, then dropped
    else:  # over the network the shards' headers are read side by side: one round trip, not one per shard
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=min(8, len(files))) as pool:
            headers = list(pool.map(lambda f: read_header_from(src, f, budget), files))
    for i, header in enumerate(headers):
        if i == 0:
            ckpt.tensors = header
        else:
            ckpt.tensors.merge(header)
    headers = None
    if weight_map is not None:
        missing = sorted(n for n in weight_map if n not in ckpt.tensors)
        if missing:
            raise fail("SRG602", f"{len(missing)} tensor(s) listed in the index are in no shard (first: "
                       f"{quoted(missing[0])})", Location(src.location(INDEX_FILE)))
    return ckpt


def _bf16(raw: bytes) -> list[float]:
    return [struct.unpack("<f", b"\x00\x00" + raw[i:i + 2])[0] for i in range(0, len(raw), 2)]


def read_values(info: TensorInfo, start: int = 0, count: int | None = None) -> list:
    """Decode elements [start, start+count) of a tensor (flattened, row-major) in pure Python.

    Bounded: at most MAX_VALUES elements. Only coded errors: SRG026 for a dtype this reader cannot
    decode (FP8, FP4, FP6, complex), a start outside the tensor, or a file that returns fewer bytes
    than its header promises (or cannot be read)."""
    where = Location(info.file, key_path=info.name)
    n = info.numel
    if not isinstance(start, int) or isinstance(start, bool) or not 0 <= start <= n:
        raise fail("SRG026", f"start {start!r} is outside the tensor's {n} elements", where)
    count = n - start if count is None else count
    if not isinstance(count, int) or isinstance(count, bool):
        raise fail("SRG026", f"count {count!r} is not an integer", where)
    count = max(0, min(count, n - start, MAX_VALUES))
    width = DTYPE_BYTES.get(info.dtype)
    if width is None or (info.dtype != "BF16" and info.dtype not in _STRUCT):
        raise fail("SRG026", f"cannot decode dtype {info.dtype}", where)
    try:
        raw = info.read(info.start + start * width, count * width)
    except OSError as exc:
        raise fail("SRG026", f"cannot read the tensor's data: {exc.strerror or exc}", where) from None
    if not isinstance(raw, (bytes, bytearray)) or len(raw) != count * width:
        raise fail("SRG026", "file shorter than its header says", where)
    if info.dtype == "BF16":
        return _bf16(raw)
    return list(struct.unpack(f"<{count}{_STRUCT[info.dtype]}", raw))


def read_raw(info: TensorInfo, start_byte: int, count_bytes: int) -> bytes:
    """Raw bytes of a tensor's data (bounded by MAX_VALUES * 8), for equality checks of any dtype."""
    count_bytes = max(0, min(count_bytes, info.end - info.start - start_byte, MAX_VALUES * 8))
    try:
        return info.read(info.start + start_byte, count_bytes)
    except OSError as exc:  # coded, as read_values
        raise fail("SRG026", f"cannot read the tensor's data: {exc.strerror or exc}",
                   Location(info.file, key_path=info.name)) from None
