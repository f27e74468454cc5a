"""`surgery convert DRAFT_DIR --to FORMAT OUT_DIR`: the folder side of a conversion. The config is
translated by `convert.py`; every other file (the safetensors, tokenizer files) is copied byte for
byte, tensor names unchanged: vLLM's llama_eagle3 loader reads the same names in every format
(`midlayer.*` or `layers.0.*`, `d2t`, `t2d` skipped). The result is written in a temporary folder next
to OUT_DIR and renamed into place (surgery/folders.py), so a refusal leaves OUT_DIR untouched.
`surgery-provenance.json` records the source digests, the tool version and every field written, and why.

Atomic on every OS error (issue 48): an OUT_DIR that cannot be replaced atomically (`.`, `..`, a
mount point, a parent of the source or of the current folder) is refused before anything is touched
(SRG017), a path through a regular file before anything is written (SRG016); a read-only or full file
system (SRG014, SRG015) or any other OSError (SRG018) during the write is coded with the path and the
errno's meaning, after the staging folder and the parent folders this command created are removed.
SIGTERM / SIGHUP clean up as Ctrl-C does (SRG019). An OUT_DIR under a symlink loop is SRG018 (ELOOP)
before anything is written (issue 54: a RuntimeError traceback from Path.resolve).

A hub head (`org/name`) is fetched whole first, through surgery.hub's bounded download (every file
at most its listed size, its content hash checked, within SURGERY_HUB_DOWNLOAD_DEADLINE)."""
from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
from pathlib import Path

from ..text.diagnostics import Diagnostic, Location, SurgeryError, diag, fail
from ..facts import read_config, read_facts
from ..folders import Interrupted, signals_raise, staged_dir
from ..formats.convert import converted
from ..formats.findings import format_findings
from ..formats.recognise import recognise
from ..facts.modelref import local_snapshot
from ..modelfiles.source import is_hub_ref
from ..version import __version__

PROVENANCE = "surgery-provenance.json"
# files that hold a head's weights (SafeAILab's EAGLE heads ship pytorch_model.bin)
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
READ_ONLY = {errno.EROFS, errno.EACCES, errno.EPERM}
NO_SPACE = {errno.ENOSPC, errno.EFBIG, *((errno.EDQUOT,) if hasattr(errno, "EDQUOT") else ())}


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def os_error(exc: OSError, fallback: Path, doing: str) -> SurgeryError:
    """A coded error for an OSError: the path, what was being done, and the errno's meaning."""
    path = exc.filename if exc.filename is not None else fallback
    name = errno.errorcode.get(exc.errno, "") if exc.errno is not None else ""
    meaning = os.strerror(exc.errno) if exc.errno is not None else str(exc)
    if exc.errno == errno.ENOSPC:
        meaning += " (the disk is full, or has no free inode left for a new file or folder: df -h, df -i)"
    code = "SRG014" if exc.errno in READ_ONLY else "SRG015" if exc.errno in NO_SPACE else \
        "SRG016" if exc.errno == errno.ENOTDIR else "SRG018"
    return fail(code, f"{doing} {os.fspath(path)}: {meaning}{f' ({name})' if name else ''}",
                Location(os.fspath(path)))


def _resolved(path: Path) -> Path:
    """`path.resolve()`, with a symlink loop (RuntimeError before Python 3.13, OSError ELOOP after) or
    another OS error coded (SRG018 with the errno) instead of a traceback."""
    try:
        return path.resolve()
    except RuntimeError:
        raise os_error(OSError(errno.ELOOP, os.strerror(errno.ELOOP), os.fspath(path)), path, "resolving") from None
    except OSError as exc:
        raise os_error(exc, path, "resolving") from None


def _is_within(inner: Path, outer: Path) -> bool:
    return inner == outer or outer in inner.parents


def refuse_out_dir(out: str, out_dir: Path, src_dir: Path) -> None:
    """SRG017 / SRG016 before anything is touched: OUT_DIR must be a folder that can be renamed into
    place and replaced without moving the source or the folder the command runs in."""
    if out_dir.name in ("", ".", "..") or Path(out).name in ("", ".", ".."):
        raise fail("SRG017", f"OUT_DIR {out!r} names a folder by `.` / `..`, not a new folder", Location(out))
    resolved, cwd = _resolved(out_dir), _resolved(Path.cwd())
    if resolved.parent == resolved or (out_dir.exists() and os.path.ismount(out_dir)):
        raise fail("SRG017", f"OUT_DIR {out} is {'the root' if resolved.parent == resolved else 'a mount point'}: "
                   "it cannot be replaced by a rename", Location(out))
    if _is_within(cwd, resolved):
        raise fail("SRG017", f"OUT_DIR {out} is the current folder or one of its parents", Location(out))
    if _is_within(_resolved(src_dir), resolved):
        raise fail("SRG017", f"OUT_DIR {out} is DRAFT_DIR or one of its parents: replacing it would move the "
                   "source away", Location(out))
    for parent in out_dir.absolute().parents:  # the nearest existing ancestor must be a folder
        if parent.exists() or parent.is_symlink():
            if not parent.is_dir():
                raise fail("SRG016", f"{parent} is not a folder: OUT_DIR {out} cannot be created under it "
                           f"({os.strerror(errno.ENOTDIR)})", Location(str(parent)))
            break


def _missing_parents(out_dir: Path) -> list[Path]:
    """OUT_DIR's ancestors that do not exist yet, nearest first (removed again after a failure)."""
    missing = []
    for parent in out_dir.absolute().parents:
        if parent.exists():
            break
        missing.append(parent)
    return missing


def _remove_created(parents: list[Path]) -> None:
    for parent in parents:
        try:
            parent.rmdir()  # only while empty: another writer's files are never removed
        except OSError:
            break


def _verifier_for(target: str | None, target_facts) -> tuple[str | None, dict | None]:
    """What a speculators file names as its verifier for --target, and the pin behind it: the hub id
    (its commit in the provenance) for a hub target, else the absolute folder path (a relative path
    works only from the folder the command ran in)."""
    if target is None or target_facts is None:
        return None, None
    pin = target_facts.pin() or {}
    if pin.get("repo_id"):
        return pin["repo_id"], pin
    p = Path(target).expanduser()
    folder = p if p.is_dir() else p.parent
    return str(_resolved(folder)), pin


def _write(out_dir: Path, files: list[Path], written: dict, provenance: dict) -> None:
    created = _missing_parents(out_dir)
    doing = "creating"  # the parent folders and the staging folder (staged_dir)
    try:
        with signals_raise(), staged_dir(out_dir) as tmp:
            doing = "copying to"
            for p in files:
                shutil.copyfile(p, tmp / p.name)
            doing = "writing"
            # written as transformers' save_pretrained writes config.json (sorted keys, indent 2): a round
            # trip of a head saved by transformers gives back its config.json byte for byte
            (tmp / "config.json").write_text(json.dumps(written, indent=2, sort_keys=True) + "\n", encoding="utf-8")
            (tmp / PROVENANCE).write_text(json.dumps(provenance, indent=2) + "\n", encoding="utf-8")
            doing = "renaming into place"
    except OSError as exc:
        _remove_created(created)
        raise os_error(exc, out_dir, doing) from None
    except Interrupted as exc:
        _remove_created(created)
        raise fail("SRG019", f"{exc.args[0]} while writing {out_dir}: nothing was written under its name and the "
                   "staging folder was removed", Location(str(out_dir))) from None
    except KeyboardInterrupt:
        _remove_created(created)
        raise


def misread_findings(out_dir: Path, target_facts, producer: str | None) -> list[Diagnostic]:
    """SRG023: what `surgery validate --engine vllm` says against this target about the folder just
    written, as write-time warnings, each naming validate's own code (formats/findings.py)."""
    if target_facts is None:
        return []
    out = []
    for d in format_findings(read_facts(str(out_dir)), target_facts, producer=None, method="eagle3"):
        if d.severity in ("error", "warning"):
            out.append(diag("SRG023", f"`surgery validate --engine vllm` would report {d.code} ({d.severity}): "
                            f"{d.message}", d.location))
    return out


def convert_folder(src: str, to: str, out: str, target: str | None = None, producer: str | None = None,
                   k: int | None = None, force: bool = False, config_only: bool = False) -> dict:
    if is_hub_ref(src):  # a hub head: its files are copied byte for byte, so they are fetched whole
        src = local_snapshot(src, "convert", download=True)
    src_dir, out_dir = Path(src), Path(out)
    if not src_dir.is_dir():
        raise fail("SRG001", f"{src} is not a model folder", Location(src))
    cfg, source = read_config(src_dir)
    cfg = {k2: v for k2, v in cfg.items() if not k2.startswith("_") or k2 == "_name_or_path"}
    target_facts = read_facts(target) if target else None
    layers = target_facts.num_layers if target_facts else None
    verifier, verifier_pin = _verifier_for(target, target_facts)
    written, why = converted(cfg, to, layers, producer=producer, verifier=verifier, k=k,
                             verifier_architectures=tuple(target_facts.architectures) if target_facts else ())
    refuse_out_dir(out, out_dir, src_dir)
    if (out_dir.exists() or out_dir.is_symlink()) and not force:
        raise fail("SRG661", f"{out} exists", Location(out))
    try:
        files = sorted(p for p in src_dir.iterdir() if p.is_file() and p.name not in ("config.json", PROVENANCE))
    except OSError as exc:
        raise os_error(exc, src_dir, "listing") from None
    weights = [p for p in files if p.name.endswith(WEIGHT_SUFFIXES)]
    if not weights and not config_only:
        raise fail("SRG022", f"{src} holds no weight file ({', '.join('*' + s for s in WEIGHT_SUFFIXES)}): the "
                   "converted folder would be a config with no head", Location(src))
    if config_only:
        files = []
    fmt = recognise(cfg, source, producer)
    diagnostics: list[Diagnostic] = []
    spec_verifier = (written.get("speculators_config") or {}).get("verifier", {}).get("name_or_path") \
        if to == "speculators" else None
    if spec_verifier and Path(spec_verifier).is_absolute():
        diagnostics.append(diag("SRG024", f"speculators_config.verifier.name_or_path is the local path {spec_verifier}: "
                                "vLLM 0.32 serves it; vLLM 0.33 and later refuse local verifiers in speculators "
                                "files (\"Speculators verifier must name a remote model repository\")",
                                Location(str(out_dir / "config.json"), key_path="speculators_config.verifier.name_or_path")))
    if verifier_pin and verifier_pin.get("repo_id") and spec_verifier == verifier_pin["repo_id"]:
        why["speculators_config.verifier.name_or_path"] = f"--target's hub id (commit {verifier_pin['commit']}, " \
            "recorded as provenance target_pin)"
    elif spec_verifier and spec_verifier == verifier:
        why["speculators_config.verifier.name_or_path"] = "--target's folder, as an absolute path"
    try:
        digests = {p.name: sha256(p) for p in [src_dir / "config.json", *files]}
    except OSError as exc:
        raise os_error(exc, src_dir, "reading") from None
    provenance = {
        "tool": f"spec-surgery {__version__}", "command": "surgery convert",
        "source": {"folder": str(src_dir), "format": fmt.name, "producer": fmt.producer,
                   "producer_from": fmt.producer_from, "sha256": digests},
        "to": to, "target": target, **({"target_pin": verifier_pin} if verifier_pin else {}),
        "fields": why,
        "files": {p.name: "copied byte for byte (tensor names unchanged)" for p in files},
        **({"config_only": "--config-only: no weight file written"} if config_only else {}),
    }
    _write(out_dir, files, written, provenance)
    diagnostics += misread_findings(out_dir, target_facts, producer)
    return {"ok": True, "out": str(out_dir), "format": to, "from": fmt.name, "fields": why,
            "files": sorted(provenance["files"]), "config_only": config_only,
            "verifier": spec_verifier, "diagnostics": [d.to_dict() for d in diagnostics]}
