"""The hub's environment, read when a request is made (not at import, so a process that sets
HF_ENDPOINT or HF_HUB_OFFLINE after importing huggingface_hub is still honoured). The rules are
huggingface_hub's own (`huggingface_hub.constants`); tests/hub/test_settings_oracle.py compares them
with that module, imported fresh under each environment."""
from __future__ import annotations

import os
from pathlib import Path

DEFAULT_ENDPOINT = "https://huggingface.co"
TRUE_VALUES = {"1", "ON", "YES", "TRUE"}  # huggingface_hub.constants.ENV_VARS_TRUE_VALUES


def _is_true(value: str | None) -> bool:
    return value is not None and value.upper() in TRUE_VALUES


def endpoint() -> str:
    return os.environ.get("HF_ENDPOINT", DEFAULT_ENDPOINT).rstrip("/")


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


def _seconds(name: str, default: float) -> float:
    try:
        value = float(os.environ.get(name, ""))
    except ValueError:
        return default
    return value if value > 0 else default


def stall_timeout() -> float:
    """Seconds a connection may stay silent (connect or between two reads): huggingface_hub's
    HF_HUB_DOWNLOAD_TIMEOUT (default 10)."""
    return _seconds("HF_HUB_DOWNLOAD_TIMEOUT", 10.0)


def total_deadline() -> float:
    """Seconds all of a command's hub requests may take together, however the bytes trickle in
    (SURGERY_HUB_DEADLINE, default 120). Bodies that each arrive within the per-request bounds
    could otherwise add up without limit: a `--weights` run makes about 25 requests."""
    return _seconds("SURGERY_HUB_DEADLINE", 120.0)


def request_deadline() -> float:
    """Seconds one request may take, its share of the total (SURGERY_HUB_REQUEST_DEADLINE, default
    half of SURGERY_HUB_DEADLINE); never past what is left of the total (surgery.hub.http)."""
    return min(_seconds("SURGERY_HUB_REQUEST_DEADLINE", total_deadline() / 2), total_deadline())


def download_deadline(declared_bytes: int) -> float:
    """Seconds a whole-model download (`convert`, `apply --engine hf` from a hub id) may take:
    SURGERY_HUB_DOWNLOAD_DEADLINE, default SURGERY_HUB_DEADLINE plus one second per MiB the listing
    declares (a transfer slower than 1 MiB/s is cut). Not charged to the checks' total: a download
    of gigabytes would use it up."""
    return _seconds("SURGERY_HUB_DOWNLOAD_DEADLINE", total_deadline() + declared_bytes / (1 << 20))


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
    from huggingface_hub import get_token

    return get_token()
