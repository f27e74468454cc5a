"""The hub's environment as data: every variable surgery or huggingface_hub reads, parsed by one
parser with a range (issue 67), read when a request is made (not at import, so a process that sets
HF_ENDPOINT or HF_HUB_OFFLINE after importing huggingface_hub is still honoured).

- Numbers (`NUMBERS`): a value that is no number, not finite, below or past its range is SRG782
  naming the variable: `SURGERY_HUB_DEADLINE=1e300` would overflow the socket's time_t, a negative
  timeout would make every read fail. Unset or empty is the default.
- huggingface_hub parses HF_HUB_DOWNLOAD_TIMEOUT and HF_HUB_ETAG_TIMEOUT with `int()` when it is
  imported, so `2.5` crashed the import (a traceback from `token()`). `library_environment()` runs
  before it is imported: an out-of-range value is SRG782, and a value we take that `int()` does not
  (`2.5`, ` 7 `) is written back as the integer it rounds up to, so the library's own copy parses.
- HF_ENDPOINT: an http(s) address with a host, nothing else (`file://`, a query, credentials, a
  control character: SRG783).

The rules for the rest are huggingface_hub's own (`huggingface_hub.constants`);
tests/hub/test_settings_oracle.py compares them with that module, imported fresh under each
environment."""
from __future__ import annotations

import math
import os
import re
import urllib.parse
from pathlib import Path

from ..text.diagnostics import Location, fail
from ..text.escape import quoted

DEFAULT_ENDPOINT = "https://huggingface.co"
TRUE_VALUES = {"1", "ON", "YES", "TRUE"}  # huggingface_hub.constants.ENV_VARS_TRUE_VALUES


def _is_true(value: str | None) -> bool:
    return value is not None and value.upper() in TRUE_VALUES


def endpoint() -> str:
    """HF_ENDPOINT (default https://huggingface.co), without a trailing `/`; SRG783 for anything that
    is not an http(s) address with a host."""
    raw = os.environ.get("HF_ENDPOINT")
    if raw is None or raw == "":
        return DEFAULT_ENDPOINT
    value = raw.strip().rstrip("/")
    problem = _endpoint_problem(value)
    if problem:
        raise fail("SRG783", f"HF_ENDPOINT={quoted(raw, 120)} {problem}", Location("HF_ENDPOINT"))
    return value


def _endpoint_problem(value: str) -> str | None:
    if re.search(r"[\x00-\x20\x7f-\x9f\\\\]", value):
        return "holds a space, a control character or a backslash"
    try:
        p = urllib.parse.urlsplit(value)
        port = p.port
    except ValueError:
        return "is not an address (a bad port or host)"
    if p.scheme not in ("http", "https"):
        return f"is not an http(s) address (scheme {quoted(p.scheme or '', 20)})"
    if not p.hostname:
        return "names no host"
    if p.username is not None or p.password is not None:
        return "holds credentials (the token goes in HF_TOKEN)"
    if p.query or p.fragment or "?" in value or "#" in value:
        return "holds a query or a fragment"
    if port is not None and not 0 < port < 65536:
        return "has a port out of range"
    return None


def hf_home() -> Path:
    default = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.join(os.path.expanduser("~"), ".cache")),
                           "huggingface")
    return Path(os.path.expandvars(os.path.expanduser(os.environ.get("HF_HOME", default))))


def hub_cache() -> Path:
    legacy = os.environ.get("HUGGINGFACE_HUB_CACHE", str(hf_home() / "hub"))
    return Path(os.path.expandvars(os.path.expanduser(os.environ.get("HF_HUB_CACHE", legacy))))


def offline() -> bool:
    return _is_true(os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE"))


def ranges_cache() -> Path:
    """Our store of byte ranges read from weight files (headers, the d2t slice): beside the HF cache,
    under HF_HOME, so clearing HF_HOME clears it too. SURGERY_HUB_CACHE overrides."""
    return Path(os.environ.get("SURGERY_HUB_CACHE") or hf_home() / "spec-surgery")


# name -> (lowest, highest, default, what it is); every number surgery or huggingface_hub reads
DAY = 86400.0
NUMBERS = {
    "HF_HUB_DOWNLOAD_TIMEOUT": (0.001, DAY, 10.0, "seconds a connection may stay silent"),
    "HF_HUB_ETAG_TIMEOUT": (0.001, DAY, 10.0, "seconds huggingface_hub waits for a file's metadata"),
    "SURGERY_HUB_DEADLINE": (0.001, 7 * DAY, 120.0, "seconds all of a command's hub requests may take"),
    "SURGERY_HUB_REQUEST_DEADLINE": (0.001, 7 * DAY, None, "seconds one hub request may take"),
    "SURGERY_HUB_DOWNLOAD_DEADLINE": (0.001, 30 * DAY, None, "seconds a whole-model download may take"),
    "SURGERY_HUB_DOWNLOAD_MAX_BYTES": (1, float(1 << 44), float(64 << 30),
                                       "bytes one downloaded file may have when nothing smaller bounds it"),
}
# huggingface_hub reads these with int() at import, and `0` as unset (`int(v) or default`)
LIBRARY_INTS = ("HF_HUB_DOWNLOAD_TIMEOUT", "HF_HUB_ETAG_TIMEOUT")
_REWRITTEN: dict[str, tuple[str, str]] = {}  # name -> (what we wrote for the library, the user's value)


def number(name: str) -> float | None:
    """The value of one of `NUMBERS` (its default when unset or empty); SRG782 when it is no finite
    number in its range. huggingface_hub's `0` (= unset) is kept for its two variables."""
    lo, hi, default, what = NUMBERS[name]
    raw = os.environ.get(name)
    if raw is not None and _REWRITTEN.get(name, (None,))[0] == raw:
        raw = _REWRITTEN[name][1]  # our own rounding for huggingface_hub: the user's value is the one meant
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw.strip())
    except ValueError:
        value = math.nan
    if name in LIBRARY_INTS and value == 0:
        return default
    if not (math.isfinite(value) and lo <= value <= hi):
        raise fail("SRG782", f"{name}={quoted(raw, 60)} is not a number from {lo:g} to {hi:g} ({what})",
                   Location(name), hint=f"unset {name} (default {default:g})" if default is not None else
                   f"unset {name}, or give it a number from {lo:g} to {hi:g}")
    return value


def check_environment() -> None:
    """Every variable of `NUMBERS` and HF_ENDPOINT parsed at once: the first bad one is SRG782 /
    SRG783, before any request or any import of huggingface_hub."""
    for name in NUMBERS:
        number(name)
    endpoint()


def library_environment() -> None:
    """Before huggingface_hub is imported: our checks, then its own copies made parseable (it reads
    HF_HUB_DOWNLOAD_TIMEOUT / HF_HUB_ETAG_TIMEOUT with int(): `2.5` is written back as `3`)."""
    check_environment()
    for name in LIBRARY_INTS:
        raw = os.environ.get(name)
        if raw is None or raw.strip() == "":
            continue
        try:
            int(raw)
        except ValueError:
            written = str(max(1, math.ceil(number(name))))
            _REWRITTEN[name] = (written, raw)
            os.environ[name] = written


def stall_timeout() -> float:
    """Seconds a connection may stay silent (connect or between two reads): huggingface_hub's
    HF_HUB_DOWNLOAD_TIMEOUT (default 10)."""
    return number("HF_HUB_DOWNLOAD_TIMEOUT")


def total_deadline() -> float:
    """Seconds all of a command's hub requests may take together, however the bytes trickle in
    (SURGERY_HUB_DEADLINE, default 120). Bodies that each arrive within the per-request bounds
    could otherwise add up without limit: a `--weights` run makes about 25 requests."""
    return number("SURGERY_HUB_DEADLINE")


def request_deadline() -> float:
    """Seconds one request may take, its share of the total (SURGERY_HUB_REQUEST_DEADLINE, default
    half of SURGERY_HUB_DEADLINE); never past what is left of the total (surgery.hub.http)."""
    own = number("SURGERY_HUB_REQUEST_DEADLINE")
    return min(total_deadline() / 2 if own is None else own, total_deadline())


def download_max_bytes() -> int:
    """The largest file a download accepts when nothing smaller bounds it (its own header for a
    safetensors file, its kind's limit for a config or tokenizer file): SURGERY_HUB_DOWNLOAD_MAX_BYTES,
    default 64 GiB. Never the listing alone (issue 67: 1 TiB declared for a 134 kB file)."""
    return int(number("SURGERY_HUB_DOWNLOAD_MAX_BYTES"))


def download_deadline(bounded_bytes: int) -> float:
    """Seconds a whole-model download (`convert`, `apply --engine hf` from a hub id) may take:
    SURGERY_HUB_DOWNLOAD_DEADLINE, default SURGERY_HUB_DEADLINE plus one second per MiB of what our
    own bounds allow (`download`: never the listing's word alone), a transfer slower than 1 MiB/s cut.
    Not charged to the checks' total: a download of gigabytes would use it up."""
    own = number("SURGERY_HUB_DOWNLOAD_DEADLINE")
    if own is not None:
        return own
    return min(total_deadline() + bounded_bytes / (1 << 20), NUMBERS["SURGERY_HUB_DOWNLOAD_DEADLINE"][1])


_REFRESH = False


def refresh() -> bool:
    """Re-fetch instead of reading the cache (`--refresh`, huggingface_hub's force_download;
    SURGERY_HUB_REFRESH=1): what the cache holds for a revision is asked again and overwritten."""
    return _REFRESH or _is_true(os.environ.get("SURGERY_HUB_REFRESH"))


def set_refresh(value: bool) -> None:
    global _REFRESH
    _REFRESH = bool(value)


def token() -> str | None:
    """HF_TOKEN, else the stored login (`hf auth login`), through huggingface_hub's own lookup."""
    library_environment()  # its constants parse the environment on import
    from huggingface_hub import get_token

    return get_token()
