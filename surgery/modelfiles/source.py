"""The files of one model, however it was named: `ModelSource` (read a file by name with a size
bound, a byte range of a weight file, the pin), `LocalSource` (a folder), and the hub id syntax
(`org/name[@revision]`, `HubRef`). `surgery.facts.modelref.open_model` picks the source; the hub's own
source is `surgery.hub.source.HubSource`.

Resolution order (issue 33): an existing local path wins; then a string of the hub's repo-id shape
(`org/name`, optionally `@branch|tag|sha`) is looked up in the HF cache / on the hub; anything else
is a missing path (SRG001), as before.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from ..text import localfile as textfile
from ..text.localfile import read_file_bytes

# the hub's repo-id rules (huggingface_hub.utils.validate_repo_id): [\w.-] parts, at most 96 chars
# each, no `--` / `..`, not starting or ending with `-` / `.`; we ask for the `org/name` form
_PART = r"[A-Za-z0-9_](?:[\w.-]{0,94}[A-Za-z0-9_])?"
HUB_REF = re.compile(rf"(?P<repo>{_PART}/{_PART})(?:@(?P<revision>[^\s@]{{1,255}}))?")  # fullmatch: no `$`


@dataclass(frozen=True)
class HubRef:
    repo_id: str
    revision: str | None  # None: the default branch

    def __str__(self) -> str:
        return self.repo_id + (f"@{self.revision}" if self.revision else "")


def parse_hub_ref(text: str) -> HubRef | None:
    """`org/name` or `org/name@revision` -> HubRef; None for anything else (paths)."""
    m = HUB_REF.fullmatch(text)
    if not m or "--" in m.group("repo") or ".." in m.group("repo") or m.group("repo").endswith(".git"):
        return None
    return HubRef(m.group("repo"), m.group("revision"))


def is_hub_ref(ref: str | os.PathLike) -> bool:
    """True when `ref` names a hub repo (it is no existing local path and has the repo-id shape)."""
    text = os.fspath(ref)
    return parse_hub_ref(text) is not None and not textfile.exists(text, "model")


#: what a range `check` answers for bytes it cannot judge alone (a header longer than the first range)
DEFER = "defer"


class ModelSource:
    """The files of one model. Subclasses: `LocalSource` (a folder) and `surgery.hub.source.HubSource`.

    Names are paths inside the model (`config.json`, `model-00001-of-00004.safetensors`)."""

    ref: str  # as the user wrote it
    config_name: str = "config.json"
    is_config_file: bool = False  # the user named a config file, not a model folder
    #: the files are on this machine (a folder the user named), not fetched: callers ask this instead of
    #: testing the subclass, so a new kind of source answers for itself
    is_local: bool = False
    #: the source keeps the ranges it reads (the hub's range cache): `read_range` takes `check`
    keeps_ranges: bool = False

    @property
    def local_folder(self) -> Path | None:
        """The folder on disk that holds the model's files, for a local source; None otherwise."""
        return None

    def local_path(self, name: str) -> Path | None:
        """The file `name` on disk, for a local source (read it directly); None when it must be fetched."""
        folder = self.local_folder
        return None if folder is None else folder / name

    def location(self, name: str | None = None) -> str:
        """How a file of this model is named in diagnostics."""
        raise NotImplementedError

    def has(self, name: str) -> bool:
        raise NotImplementedError

    def names(self) -> list[str]:
        """Every file of the model (top level and nested, `/`-separated) that this source knows of."""
        raise NotImplementedError

    def size(self, name: str) -> int | None:
        raise NotImplementedError

    def read_bytes(self, name: str, max_bytes: int, what: str) -> bytes:
        """The whole file, at most `max_bytes` (SRG008 beyond), coded errors when missing/unreadable."""
        raise NotImplementedError

    def read_range(self, name: str, start: int, length: int, check=None) -> bytes:
        """`length` bytes from `start` (fewer only at the end of the file). `check(bytes)`: for bytes a
        source keeps (the hub's range cache), whether they may be kept: None yes, DEFER not yet (a
        header's first range, judged with the rest of it), a string why not (never stored; a stored
        copy that fails is removed). A safetensors header range is stored only once it parses."""
        raise NotImplementedError

    def blob_id(self, name: str) -> str | None:
        """A content hash of the file where the source knows one without reading it (hub: the LFS
        sha256 or git blob id): two files with the same id are byte-identical."""
        return None

    def pin(self) -> dict:
        """Where the model came from, enough to repeat a run exactly (hub: the commit sha)."""
        raise NotImplementedError

    def same_model(self, other: "ModelSource") -> bool:
        return self.pin() == other.pin()


class LocalSource(ModelSource):
    """A model folder, or a config file (then its folder holds the other files, if any)."""

    is_local = True

    def __init__(self, path: str | os.PathLike, ref: str | None = None):
        p = Path(path)
        self.ref = ref if ref is not None else os.fspath(path)
        if textfile.is_dir(p, "model"):
            self.folder, self.config_name, self.is_config_file = p, "config.json", False
        else:
            self.folder, self.config_name, self.is_config_file = p.parent, p.name, True

    def path(self, name: str) -> Path:
        return self.folder / name

    @property
    def local_folder(self) -> Path:
        return self.folder

    def location(self, name: str | None = None) -> str:
        if name is None:
            return str(self.folder)
        if name == self.config_name and self.is_config_file:
            return self.ref
        return str(self.folder / name)

    def has(self, name: str) -> bool:
        try:
            return (self.folder / name).is_file()
        except (OSError, ValueError):  # a name too long for the file system: no such file
            return False

    def names(self) -> list[str]:
        try:
            return sorted(str(p.relative_to(self.folder)).replace(os.sep, "/") for p in self.folder.rglob("*")
                          if p.is_file() and ".git" not in p.parts)
        except OSError:
            return []

    def size(self, name: str) -> int | None:
        try:
            return (self.folder / name).stat().st_size
        except (OSError, ValueError):
            return None

    def read_bytes(self, name: str, max_bytes: int, what: str) -> bytes:
        shown = self.location(name)
        return read_file_bytes(self.folder / name, max_bytes, what, shown=shown, named=shown)

    def read_range(self, name: str, start: int, length: int, check=None) -> bytes:
        return textfile.read_span(self.folder / name, start, length, "weights", shown=self.location(name))

    def pin(self) -> dict:
        return {"ref": self.ref, "source": "local", "path": str(Path(self.ref).expanduser().resolve())}

    def same_model(self, other: ModelSource) -> bool:
        return isinstance(other, LocalSource) and self.folder.resolve() == other.folder.resolve()


