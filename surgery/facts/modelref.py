"""One model reference, everywhere: `open_model(ref)` turns a path or a hub id into a
`surgery.modelfiles.source.ModelSource`, importing `surgery.hub` only for a hub id; and the speculators
head given alone, whose verifier names its target (`target_ref_for`)."""
from __future__ import annotations

import os
from pathlib import Path

from ..text import localfile as textfile
from ..text.diagnostics import INFO, Location, diag, fail
from ..modelfiles.source import LocalSource, ModelSource, parse_hub_ref
from ..formats import original_config


def _looks_local(text: str, what: str = "model") -> bool:
    """A missing path the user meant as a path, not a hub id: a file name (`.json`), an explicit
    path (`./x`, `/x`, `~/x`), or `dir/name` where `dir` is a local folder (`configs/nope.json`)."""
    first = text.split("/", 1)[0]
    return text.endswith((".json", ".yaml", ".yml")) or text.startswith((".", "/", "~")) or textfile.is_dir(first, what)


def open_model(ref: str | os.PathLike | ModelSource, *, what: str = "config") -> ModelSource:
    """A model by reference: the source itself, a local path, or a hub id (surgery.hub, lazily)."""
    if isinstance(ref, ModelSource):
        return ref
    text = os.fspath(ref)
    p = Path(text).expanduser()
    if textfile.exists(p, what):  # SRG781 for a path that cannot be looked up (5,000 characters, a loop)
        if textfile.is_dir(p, what) and not textfile.exists(p / "config.json", what):
            raise fail("SRG001", f"no such {what} file: {p / 'config.json'}", Location(text),
                       hint="a model folder must contain config.json")
        return LocalSource(p, ref=text)
    hub = None if _looks_local(text, what) else parse_hub_ref(text)
    if hub is None:
        raise fail("SRG001", f"no such {what} file: {text}", Location(text),
                   hint="a model is a folder with config.json, a config.json file, or a hub id `org/name[@revision]`")
    from ..hub.source import open_hub_model

    return open_hub_model(hub, ref=text)


def verifier_of(draft_facts) -> str | None:
    """The target a speculators head names (`speculators_config.verifier.name_or_path`), as vLLM
    reads it when the head is served as the model; None for any other draft."""
    spec = original_config(draft_facts.raw or {}).get("speculators_config")
    verifier = spec.get("verifier") if isinstance(spec, dict) else None
    name = verifier.get("name_or_path") if isinstance(verifier, dict) else None
    return name if isinstance(name, str) and name.strip() else None


def target_ref_for(target_ref, draft_facts) -> tuple[str | os.PathLike, bool]:
    """(the target to read, whether it was taken from the draft's verifier). SRG059 when neither
    --target nor a verifier names one."""
    if target_ref is not None:
        return target_ref, False
    name = verifier_of(draft_facts)
    if name is None:
        raise fail("SRG059", "no --target given, and the draft is no speculators head naming its verifier",
                   Location(draft_facts.source))
    return name, True


def verifier_note(draft_facts, target_facts):
    """SRG058: the info line saying the target is the draft's verifier, and where it was found."""
    pin = target_facts.pin() or {}
    where = pin.get("commit") and f"{pin.get('repo_id')}@{pin['commit']} ({pin['source']})" or pin.get("path", "")
    return diag("SRG058", f"no --target: the target is the draft's verifier {verifier_of(draft_facts)!r}, as vLLM "
                f"serves it when the head is the model; read from {where}",
                Location(draft_facts.source, key_path="speculators_config.verifier.name_or_path"), severity=INFO)


def describe_pin(pin: dict | None) -> str:
    """One line of text for a pin: `org/name@<commit> (hub)`, or the local path."""
    if not pin:
        return "?"
    if pin.get("commit"):
        asked = f", asked {pin['revision']}" if pin.get("revision") and pin["revision"] != pin["commit"] else ""
        return f"{pin['repo_id']}@{pin['commit']} ({pin['source']}{asked})"
    return pin.get("path") or pin.get("ref", "?")


def engine_model(ref) -> tuple[str, str | None]:
    """(model, revision) to hand an engine for `ref`, as vLLM / transformers accept them: a local
    folder's path (a config file stands for its folder) and no revision, or the hub id with the
    commit we pinned, so the engine loads exactly what was validated."""
    src = open_model(ref)
    if src.is_local:
        return str(src.local_folder), None
    pin = src.pin()
    return pin["repo_id"], pin["commit"]


def local_snapshot(ref, why: str, download: bool = False) -> str:
    """A folder holding the whole model (weights included), for a command that copies or loads the
    weights itself: a local folder, or the HF cache's snapshot of a hub id at its pinned commit. Not
    complete in the cache: downloaded when `download` (the command's whole point is the weights:
    apply with transformers, convert), else SRG060. The checks never come here."""
    src = open_model(ref)
    if src.is_local:
        return str(src.local_folder)
    folder = src.full_snapshot()
    if folder is None and download:
        folder = src.download()
    if folder is None:
        pin = src.pin()
        raise fail("SRG060", f"{why} needs every file of {pin['repo_id']}@{pin['commit'][:12]}, and the HF cache "
                   "does not hold them all", Location(src.location()),
                   hint=f"download it first: `hf download {pin['repo_id']} --revision {pin['commit']}`")
    return folder
