"""Bounded HTTP for the hub: every request has a time bound (a stall timeout between reads and a
deadline for the whole request), a size bound (the caller says how many bytes it will accept), a
bounded redirect chain (no loops, the token dropped when a redirect leaves the hub's origin, as the
hub's own client does for its CDN), and bounded retries on 5xx / 429 / a dropped connection. The
hub's errors (`X-Error-Code: GatedRepo`, `RepoNotFound`, `RevisionNotFound`, `EntryNotFound`) become
coded diagnostics (SRG051-SRG056), never a traceback.

The standard library's urllib does the transport (proxies from the environment honoured); what is
read is counted in `ledger`. Nothing here writes to disk.
"""
from __future__ import annotations

import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass

from ..diagnostics import Location, SurgeryError, fail
from . import settings
from .ledger import LEDGER

MAX_REDIRECTS = 5
RETRIES = 2  # after the first try: three tries in all
RETRY_STATUS = {429, 500, 502, 503, 504}
ERROR_BODY_BYTES = 16 << 10  # what is read of an error answer, for its message
CHUNK = 64 << 10


class EntryMissing(Exception):
    """The repo exists at that revision but has no such file (404 EntryNotFound)."""


@dataclass
class Response:
    status: int
    headers: dict[str, str]  # lower-cased names
    body: bytes
    url: str  # after redirects


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Redirects are followed by `request` itself: it bounds the chain and decides about the token."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: D401
        return None


_OPENER = None


def _opener():
    global _OPENER
    if _OPENER is None:
        _OPENER = urllib.request.build_opener(_NoRedirect)
    return _OPENER


def _origin(url: str) -> tuple[str, str]:
    p = urllib.parse.urlsplit(url)
    return p.scheme, p.netloc


def _headers(resp) -> dict[str, str]:
    return {k.lower(): v for k, v in resp.headers.items()}


def hub_error(status: int, headers: dict[str, str], body: bytes, what: str, where: str, *, token: bool):
    """The coded error (or EntryMissing) for a hub answer that is not a success."""
    code = headers.get("x-error-code", "")
    message = headers.get("x-error-message") or body[:300].decode("utf-8", "replace").strip()
    loc = Location(where)
    if code == "GatedRepo" or (status == 403 and code != "RepoNotFound"):
        return fail("SRG053", f"{what}: the repo is gated and {'this token has no access' if token else 'no token was given'}"
                    f" (HTTP {status}{': ' + message if message else ''})", loc,
                    hint=("accept the licence on the repo's hub page with the account of this token" if token else
                          "set HF_TOKEN or run `hf auth login`, and accept the licence on the repo's hub page"))
    if status == 401 and not code and token and "credential" in message.lower():
        return fail("SRG053", f"{what}: the hub refused the token (HTTP 401: {message[:200]})", loc,
                    hint="HF_TOKEN (or the stored login) is invalid or expired: `hf auth login` again")
    if code == "RepoNotFound" or (status == 401 and not code):
        return fail("SRG051", f"{what}: no such repo on {settings.endpoint()} (HTTP {status})", loc,
                    hint="check the id (`org/name`)" + ("" if token else "; a private repo needs HF_TOKEN or "
                                                        "`hf auth login`") + "; a local folder of that name does not exist either")
    if code == "RevisionNotFound":
        return fail("SRG052", f"{what}: no such revision (HTTP {status})", loc,
                    hint="a revision is a branch, a tag or a commit sha of the repo (`org/name@main`)")
    if code == "EntryNotFound" or status == 404:
        return EntryMissing(what)
    return fail("SRG055", f"{what}: the hub answered HTTP {status}{': ' + message[:200] if message else ''}", loc)


def request(url: str, *, what: str, where: str, max_bytes: int, headers: dict[str, str] | None = None,
            byte_range: tuple[int, int] | None = None, method: str = "GET", kind: str = "file") -> Response:
    """One bounded request. `byte_range` = (start, length): answered 206 with exactly those bytes
    (fewer only at the end of the file), or 200 from byte 0 of which only `length` are read."""
    if settings.offline():  # callers check first; this is the guarantee that offline means no request
        raise fail("SRG050", f"{what}: HF_HUB_OFFLINE is set and this is not in the cache", Location(where))
    base = dict(headers or {})
    if byte_range is not None:
        start, length = byte_range
        if length <= 0:
            return Response(206, {}, b"", url)
        base["Range"] = f"bytes={start}-{start + length - 1}"
        max_bytes = min(max_bytes, length)
    attempt = 0
    while True:
        _check_total(what, where)
        began = time.monotonic()
        try:
            if kind == "range":
                return _range_via_known_redirect(url, base, what, where, max_bytes, byte_range, method, kind)
            return _follow(url, base, what, where, max_bytes, byte_range, method, kind)
        except _Retryable as exc:
            attempt += 1
            if attempt > RETRIES:
                raise fail("SRG055", f"{what}: {exc} (after {RETRIES + 1} tries)", Location(where),
                           hint="the hub or HF_ENDPOINT server is failing; try again later") from None
            pause = min(exc.retry_after, 2.0) if exc.retry_after else 0.25 * 2 ** attempt
            time.sleep(max(0.0, min(pause, LEDGER.time_left(settings.total_deadline()))))
        finally:
            LEDGER.add_time(time.monotonic() - began)


def _check_total(what: str, where: str) -> None:
    """SRG056 once the command's hub requests have used the whole SURGERY_HUB_DEADLINE."""
    if LEDGER.time_left(settings.total_deadline()) <= 0:
        raise fail("SRG056", f"{what}: the hub requests of this command have taken the whole "
                   f"{settings.total_deadline():g} s allowed (SURGERY_HUB_DEADLINE, total)", Location(where),
                   hint="a slow server: SURGERY_HUB_DEADLINE sets the total for one command (default 120 s), "
                        "SURGERY_HUB_REQUEST_DEADLINE one request's share")


def _silence_bound(left: float) -> tuple[str, str]:
    """How the bound on a silent connection is named: the stall timeout, or what is left of the total."""
    if left < settings.stall_timeout():
        return (f"what is left of the command's total of {settings.total_deadline():g} s (SURGERY_HUB_DEADLINE)",
                "a slow server: SURGERY_HUB_DEADLINE sets the total for one command (default 120 s)")
    return (f"{settings.stall_timeout():g} s", "a slow or stalled server: HF_HUB_DOWNLOAD_TIMEOUT sets the limit")


def _deadline(started: float) -> tuple[float, str]:
    """When this request must be complete, and what that bound is called: its own share
    (SURGERY_HUB_REQUEST_DEADLINE) or what is left of the command's total (SURGERY_HUB_DEADLINE)."""
    own = started + settings.request_deadline()
    total = started + LEDGER.time_left(settings.total_deadline())
    if total <= own:
        return total, f"the command's total of {settings.total_deadline():g} s (SURGERY_HUB_DEADLINE)"
    return own, f"{settings.request_deadline():g} s (SURGERY_HUB_REQUEST_DEADLINE, one request)"


# A weight file's resolve URL -> where its last range request was answered (the hub redirects LFS files
# to its CDN; every range of the same file is redirected the same way). Later ranges of that file go
# there directly: one round trip instead of two. Kept for this process only; a cached address that
# is refused (an expired signed URL: 403 / 404 / 410) is forgotten and the hub is asked again.
_REDIRECTED: dict[str, str] = {}
_REDIRECTED_LOCK = threading.Lock()


def _range_via_known_redirect(url, base, what, where, max_bytes, byte_range, method, kind) -> Response:
    with _REDIRECTED_LOCK:
        known = _REDIRECTED.get(url)
    if known is not None:
        try:
            return _follow(known, base, what, where, max_bytes, byte_range, method, kind)
        except (SurgeryError, EntryMissing) as exc:  # only a refused address is asked again at the hub
            refused = isinstance(exc, EntryMissing) or exc.diagnostics[0].code in ("SRG051", "SRG053")
            if not refused:
                raise
            with _REDIRECTED_LOCK:
                _REDIRECTED.pop(url, None)
    resp = _follow(url, base, what, where, max_bytes, byte_range, method, kind)
    if resp.url != url and _origin(resp.url) != _origin(settings.endpoint()):
        with _REDIRECTED_LOCK:
            _REDIRECTED[url] = resp.url
    return resp


class _Retryable(Exception):
    def __init__(self, text: str, retry_after: float | None = None):
        super().__init__(text)
        self.retry_after = retry_after


def _follow(url, base, what, where, max_bytes, byte_range, method, kind) -> Response:
    hub_origin = _origin(settings.endpoint())
    seen = set()
    for _ in range(MAX_REDIRECTS + 1):
        if url in seen:
            raise fail("SRG055", f"{what}: redirect loop at {url}", Location(where))
        seen.add(url)
        hdrs = dict(base)
        if _origin(url) != hub_origin:
            hdrs.pop("authorization", None)
            hdrs.pop("Authorization", None)
        req = urllib.request.Request(url, headers=hdrs, method=method)
        started = time.monotonic()
        left = LEDGER.time_left(settings.total_deadline())
        silent = _silence_bound(left)
        try:
            resp = _opener().open(req, timeout=max(0.05, min(settings.stall_timeout(), left)))
        except urllib.error.HTTPError as err:
            status, rh = err.code, _headers(err)
            if status in (301, 302, 303, 307, 308) and rh.get("location"):
                LEDGER.note(url, what, 0, status, kind)
                url = urllib.parse.urljoin(url, rh["location"])
                err.close()
                if urllib.parse.urlsplit(url).scheme not in ("http", "https"):  # urllib would open file:// too
                    raise fail("SRG055", f"{what}: a redirect to {url[:120]!r}, not an http(s) address",
                               Location(where)) from None
                continue
            body = _read_bounded(err, ERROR_BODY_BYTES, what, where, started, truncate=True)
            LEDGER.note(url, what, len(body), status, kind)
            if status in RETRY_STATUS:
                retry = rh.get("retry-after")
                raise _Retryable(f"HTTP {status}", float(retry) if retry and retry.isdigit() else None) from None
            raise hub_error(status, rh, body, what, where,
                            token=any(k.lower() == "authorization" for k in hdrs)) from None
        except (socket.timeout, TimeoutError):
            raise fail("SRG056", f"{what}: no answer within {silent[0]}", Location(where), hint=silent[1]) from None
        except (urllib.error.URLError, ConnectionError, OSError) as err:
            reason = getattr(err, "reason", err)
            if isinstance(reason, (socket.timeout, TimeoutError)):
                raise fail("SRG056", f"{what}: no answer within {silent[0]}", Location(where), hint=silent[1]) from None
            if isinstance(reason, ConnectionResetError):
                raise _Retryable(f"connection reset ({reason})") from None
            raise fail("SRG054", f"{what}: cannot reach {settings.endpoint()} ({reason})", Location(where),
                       hint="check the network or HF_ENDPOINT; with the files in the HF cache, HF_HUB_OFFLINE=1 "
                            "reads them without asking the hub") from None
        with resp:
            rh = _headers(resp)
            status = resp.status
            if byte_range is not None and status == 200 and byte_range[0] != 0:
                LEDGER.note(url, what, 0, status, kind)
                raise fail("SRG055", f"{what}: the server ignored the Range header (HTTP 200 for bytes "
                           f"{byte_range[0]}-)", Location(where))
            try:
                body = _read_bounded(resp, max_bytes, what, where, started,
                                     truncate=byte_range is not None and status == 200)
            except (ConnectionError, OSError) as err:
                if isinstance(err, (socket.timeout, TimeoutError)):
                    raise fail("SRG056", f"{what}: the answer stalled (no byte for {settings.stall_timeout():g} s)",
                               Location(where), hint="HF_HUB_DOWNLOAD_TIMEOUT sets the limit") from None
                raise _Retryable(f"connection dropped mid-answer ({err})") from None
            LEDGER.note(url, what, len(body), status, kind)
            if byte_range is not None:
                _check_range(rh, status, body, byte_range, what, where)
            elif "content-length" in rh and rh["content-length"].isdigit() and int(rh["content-length"]) != len(body):
                raise fail("SRG055", f"{what}: {len(body)} bytes received of the {rh['content-length']} announced",
                           Location(where))
            return Response(status, rh, body, url)
    raise fail("SRG055", f"{what}: more than {MAX_REDIRECTS} redirects", Location(where))


def _read_bounded(resp, max_bytes: int, what: str, where: str, started: float, truncate: bool = False) -> bytes:
    """Read at most `max_bytes` (more: SRG056, or stop there when `truncate`), within the deadline:
    the request's own share or what is left of the command's total, whichever comes first."""
    deadline, bound = _deadline(started)
    chunks, total = [], 0
    while True:
        if time.monotonic() > deadline:
            raise fail("SRG056", f"{what}: not complete within {bound}", Location(where),
                       hint="a slow server: SURGERY_HUB_DEADLINE sets the total for one command (default 120 s), "
                            "SURGERY_HUB_REQUEST_DEADLINE one request's share (default half of it)")
        want = min(CHUNK, max_bytes - total + 1)
        if want <= 0:
            want = 1
        chunk = resp.read1(want) if hasattr(resp, "read1") else resp.read(want)  # what has arrived: the deadline is checked between pieces
        if not chunk:
            return b"".join(chunks)
        total += len(chunk)
        if total > max_bytes:
            if truncate:
                chunks.append(chunk[: len(chunk) - (total - max_bytes)])
                return b"".join(chunks)
            raise fail("SRG056", f"{what}: larger than the {max_bytes} bytes this read allows", Location(where),
                       hint="the hub serves this file larger than any such file should be; it was not read further")
        chunks.append(chunk)


def content_range(headers: dict[str, str]) -> tuple[int, int, int] | None:
    """(first, last, total) of a `Content-Range: bytes a-b/total` header, or None."""
    value = headers.get("content-range", "")
    try:
        unit, rest = value.split(" ", 1)
        span, total = rest.split("/", 1)
        first, last = span.split("-", 1)
        if unit.strip() != "bytes":
            return None
        return int(first), int(last), int(total)
    except ValueError:
        return None


def _check_range(rh: dict[str, str], status: int, body: bytes, byte_range: tuple[int, int], what: str, where: str) -> None:
    start, length = byte_range
    if status == 200:  # the server sent the file from byte 0; we kept the first `length` bytes
        return
    cr = content_range(rh)
    if status != 206 or cr is None:
        raise fail("SRG055", f"{what}: expected 206 with a Content-Range for bytes {start}-{start + length - 1}, "
                   f"got HTTP {status}", Location(where))
    first, last, total = cr
    expected_last = min(start + length, total) - 1
    if first != start or last != expected_last or len(body) != last - first + 1:
        raise fail("SRG055", f"{what}: asked for bytes {start}-{start + length - 1}, got Content-Range "
                   f"{first}-{last}/{total} with {len(body)} bytes (truncated or misplaced range)", Location(where))
