"""Bounded HTTP for the hub: every request has a time bound (a stall timeout between reads and an
absolute deadline on every read, headers and interim answers included: `wire`), a size bound (the
caller says how many bytes it will accept), a bounded redirect chain (no loops, the token dropped
when a redirect leaves the hub's origin, as the hub's own client does for its CDN), and bounded
retries on 5xx / 429 / a dropped connection. The hub's errors (`X-Error-Code: GatedRepo`,
`RepoNotFound`, `RevisionNotFound`, `EntryNotFound`) become coded diagnostics (SRG051-SRG056), and so
does every other way an answer can break HTTP (a garbage status line, too many or too long headers,
a chunked body cut short or with a bad chunk size: http.client's exceptions are no OSError), never a
traceback. Text the server wrote (`X-Error-Message`, an error body, a redirect address) is quoted
escaped and bounded (`surgery.text.escape`).

What is read is counted in `ledger`. Nothing here writes to disk; a download's bytes go to the
caller's `sink`.
"""
from __future__ import annotations

import http.client
import re
import socket
import threading
import time
import urllib.error
import urllib.parse
from dataclasses import dataclass
from typing import BinaryIO

from ..text.diagnostics import Location, SurgeryError, fail
from ..text.escape import quoted, shown
from . import settings, wire
from .secrets import MASK, masked, masked_error, remember_secret  # noqa: F401 - MASK for callers
from .ledger import LEDGER

MAX_REDIRECTS = 5
RETRIES = 2  # after the first try: three tries in all
RETRY_STATUS = {429, 500, 502, 503, 504}
ERROR_BODY_BYTES = 16 << 10  # what is read of an error answer, for its message
CHUNK = 64 << 10
_DIGITS = re.compile(r"[0-9]{1,18}")  # an HTTP number: ASCII digits only ("²".isdigit() is True)


class EntryMissing(Exception):
    """A 404 for a file. `authoritative`: the hub's own answer for the address asked (no redirect),
    `X-Error-Code: EntryNotFound` with the commit in `X-Repo-Commit`, as huggingface_hub requires
    before it records the file as missing; anything else (a bare 404, a proxy's page, a redirect to
    some path) is not evidence enough to write a `.no_exist` marker."""

    def __init__(self, what: str, authoritative: bool = False, commit: str | None = None):
        super().__init__(what)
        self.authoritative, self.commit = authoritative, commit


@dataclass
class Response:
    status: int
    headers: dict[str, str]  # lower-cased names
    body: bytes  # empty when the bytes went to a sink
    url: str  # after redirects
    first: dict[str, str]  # the headers of the first answer (the hub's own, before any redirect)
    length: int = 0  # bytes read (into `body` or the sink)


@dataclass
class Budget:
    """A time bound given by the caller instead of the command's (a download: its own deadline,
    not charged to the checks' SURGERY_HUB_DEADLINE)."""

    until: float  # time.monotonic()
    label: str  # how messages name it
    hint: str


def _origin(url: str) -> tuple[str, str]:
    p = urllib.parse.urlsplit(url)
    return p.scheme, p.netloc


def _headers(resp) -> dict[str, str]:
    return {k.lower(): v for k, v in resp.headers.items()}


def number(value: str | None) -> int | None:
    """An HTTP header's non-negative integer (ASCII digits), else None."""
    return int(value) if value is not None and _DIGITS.fullmatch(value.strip()) else None


def hub_error(status: int, headers: dict[str, str], body: bytes, what: str, where: str, *, token: bool,
              redirected: bool = False):
    """The coded error (or EntryMissing) for a hub answer that is not a success."""
    code = headers.get("x-error-code", "")
    message = masked(headers.get("x-error-message") or body[:300].decode("utf-8", "replace").strip())
    said = f": {shown(message)}" if message else ""
    loc = Location(where)
    if code == "GatedRepo" or (status == 403 and code != "RepoNotFound"):
        return fail("SRG053", f"{what}: the repo is gated and {'this token has no access' if token else 'no token was given'}"
                    f" (HTTP {status}{said})", loc,
                    hint=("accept the licence on the repo's hub page with the account of this token" if token else
                          "set HF_TOKEN or run `hf auth login`, and accept the licence on the repo's hub page"))
    if status == 401 and not code and token and "credential" in message.lower():
        return fail("SRG053", f"{what}: the hub refused the token (HTTP 401{said})", loc,
                    hint="HF_TOKEN (or the stored login) is invalid or expired: `hf auth login` again")
    if code == "RepoNotFound" or (status == 401 and not code):
        return fail("SRG051", f"{what}: no such repo on {settings.endpoint()} (HTTP {status})", loc,
                    hint="check the id (`org/name`)" + ("" if token else "; a private repo needs HF_TOKEN or "
                                                        "`hf auth login`") + "; a local folder of that name does not exist either")
    if code == "RevisionNotFound":
        return fail("SRG052", f"{what}: no such revision (HTTP {status})", loc,
                    hint="a revision is a branch, a tag or a commit sha of the repo (`org/name@main`)")
    if code == "EntryNotFound" or status == 404:
        return EntryMissing(what, authoritative=code == "EntryNotFound" and not redirected,
                            commit=headers.get("x-repo-commit"))
    return fail("SRG055", f"{what}: the hub answered HTTP {status}{said}", loc)


def request(url: str, *, what: str, where: str, max_bytes: int, headers: dict[str, str] | None = None,
            byte_range: tuple[int, int] | None = None, method: str = "GET", kind: str = "file",
            sink: BinaryIO | None = None, budget: Budget | None = None) -> Response:
    """One bounded request. `byte_range` = (start, length): answered 206 with exactly those bytes
    (fewer only at the end of the file), or 200 from byte 0 of which only `length` are read. `sink`:
    the body is written there (a retry starts it again: the caller's file is truncated) instead of
    kept. `budget`: the caller's own deadline, not charged to the command's total."""
    if settings.offline():  # callers check first; this is the guarantee that offline means no request
        raise fail("SRG050", f"{what}: HF_HUB_OFFLINE is set and this is not in the cache", Location(where))
    base = dict(headers or {})
    if byte_range is not None:
        start, length = byte_range
        if length <= 0:
            return Response(206, {}, b"", url, {})
        base["Range"] = f"bytes={start}-{start + length - 1}"
        max_bytes = min(max_bytes, length)
    remember_secret(base)
    try:
        return _request(url, base, what, where, max_bytes, byte_range, method, kind, sink, budget)
    except SurgeryError as exc:
        masked_exc = masked_error(exc)
        if masked_exc is exc:
            raise
        raise masked_exc from None


def _request(url, base, what, where, max_bytes, byte_range, method, kind, sink, budget) -> Response:
    attempt = 0
    while True:
        if budget is None:
            _check_total(what, where)
        elif time.monotonic() >= budget.until:
            raise fail("SRG056", f"{what}: not complete within {budget.label}", Location(where), hint=budget.hint)
        began = time.monotonic()
        if sink is not None:
            sink.seek(0)
            sink.truncate()
        try:
            if kind == "range":
                return _range_via_known_redirect(url, base, what, where, max_bytes, byte_range, method, kind, sink,
                                                 budget)
            return _follow(url, base, what, where, max_bytes, byte_range, method, kind, sink, budget)
        except _Retryable as exc:
            attempt += 1
            if attempt > RETRIES:
                raise fail("SRG055", f"{what}: {exc} (after {RETRIES + 1} tries)", Location(where),
                           hint="the hub or HF_ENDPOINT server is failing; try again later") from None
            pause = min(exc.retry_after, 2.0) if exc.retry_after is not None else 0.25 * 2 ** attempt
            left = (budget.until - time.monotonic()) if budget else LEDGER.time_left(settings.total_deadline())
            time.sleep(max(0.0, min(pause, left)))
        finally:
            if budget is None:
                LEDGER.add_time(time.monotonic() - began)


def _check_total(what: str, where: str) -> None:
    """SRG056 once the command's hub requests have used the whole SURGERY_HUB_DEADLINE."""
    if LEDGER.time_left(settings.total_deadline()) <= 0:
        raise fail("SRG056", f"{what}: the hub requests of this command have taken the whole "
                   f"{settings.total_deadline():g} s allowed (SURGERY_HUB_DEADLINE, total)", Location(where),
                   hint="a slow server: SURGERY_HUB_DEADLINE sets the total for one command (default 120 s), "
                        "SURGERY_HUB_REQUEST_DEADLINE one request's share")


_DEADLINE_HINT = ("a slow server: SURGERY_HUB_DEADLINE sets the total for one command (default 120 s), "
                  "SURGERY_HUB_REQUEST_DEADLINE one request's share (default half of it)")


def _deadline(started: float, budget: Budget | None) -> tuple[float, str, str]:
    """When this request must be complete, what that bound is called, and the hint: the caller's
    budget, or the request's own share (SURGERY_HUB_REQUEST_DEADLINE) or what is left of the
    command's total (SURGERY_HUB_DEADLINE), whichever comes first."""
    if budget is not None:
        return budget.until, budget.label, budget.hint
    own = started + settings.request_deadline()
    total = started + LEDGER.time_left(settings.total_deadline())
    if total <= own:
        return total, f"the command's total of {settings.total_deadline():g} s (SURGERY_HUB_DEADLINE)", _DEADLINE_HINT
    return own, f"{settings.request_deadline():g} s (SURGERY_HUB_REQUEST_DEADLINE, one request)", _DEADLINE_HINT


# A weight file's resolve URL -> where its last range request was answered (the hub redirects LFS files
# to its CDN; every range of the same file is redirected the same way). Later ranges of that file go
# there directly: one round trip instead of two. Kept for this process only; a cached address that
# is refused (an expired signed URL: 403 / 404 / 410) is forgotten and the hub is asked again.
_REDIRECTED: dict[str, str] = {}
_REDIRECTED_LOCK = threading.Lock()


def _range_via_known_redirect(url, base, what, where, max_bytes, byte_range, method, kind, sink, budget) -> Response:
    with _REDIRECTED_LOCK:
        known = _REDIRECTED.get(url)
    if known is not None:
        try:
            return _follow(known, base, what, where, max_bytes, byte_range, method, kind, sink, budget)
        except (SurgeryError, EntryMissing) as exc:  # only a refused address is asked again at the hub
            refused = isinstance(exc, EntryMissing) or exc.diagnostics[0].code in ("SRG051", "SRG053")
            if not refused:
                raise
            with _REDIRECTED_LOCK:
                _REDIRECTED.pop(url, None)
    resp = _follow(url, base, what, where, max_bytes, byte_range, method, kind, sink, budget)
    if resp.url != url and _origin(resp.url) != _origin(settings.endpoint()):
        with _REDIRECTED_LOCK:
            _REDIRECTED[url] = resp.url
    return resp


class _Retryable(Exception):
    def __init__(self, text: str, retry_after: float | None = None):
        super().__init__(text)
        self.retry_after = retry_after


def _broken(exc: BaseException) -> str:
    """How an http.client exception is named in a message: its kind and what it quotes, bounded."""
    text = masked(str(exc))
    return type(exc).__name__ + (f" {quoted(text, 120)}" if text else "")


class _Timing:
    """The bounds of one hop: its clock, and how a deadline or a stall is reported."""

    def __init__(self, what: str, where: str, started: float, budget: Budget | None):
        self.what, self.where = what, where
        self.until, self.bound, self.hint = _deadline(started, budget)
        self.clock = wire.Clock(self.until, settings.stall_timeout())

    def timeout(self, exc: BaseException, reading_body: bool) -> SurgeryError:
        if isinstance(exc, wire.DeadlinePassed) or time.monotonic() >= self.until:
            return fail("SRG056", f"{self.what}: not complete within {self.bound}", Location(self.where),
                        hint=self.hint)
        stall = settings.stall_timeout()
        if reading_body:
            return fail("SRG056", f"{self.what}: the answer stalled (no byte for {stall:g} s)", Location(self.where),
                        hint="a slow or stalled server: HF_HUB_DOWNLOAD_TIMEOUT sets the limit")
        return fail("SRG056", f"{self.what}: no answer within {stall:g} s", Location(self.where),
                    hint="a slow or stalled server: HF_HUB_DOWNLOAD_TIMEOUT sets the limit")


def _open(url: str, hdrs: dict[str, str], method: str, timing: _Timing):
    """The answer to one hop (HTTPError for a non-2xx); every failure to get one coded or _Retryable."""
    try:
        return wire.open_bounded(url, hdrs, method, timing.clock)
    except urllib.error.HTTPError:
        raise
    except (socket.timeout, TimeoutError) as exc:
        raise timing.timeout(exc, reading_body=False) from None
    except http.client.RemoteDisconnected:
        raise _Retryable("the server closed the connection without an answer") from None
    except http.client.HTTPException as exc:  # a garbage status line, > 100 headers, a line over 64 kB
        raise fail("SRG055", f"{timing.what}: the answer is not HTTP ({_broken(exc)})", Location(timing.where),
                   hint="a misbehaving server at HF_ENDPOINT (or a proxy in between)") from None
    except (ValueError, UnicodeError) as exc:  # an address http.client cannot send (a redirect's)
        raise fail("SRG055", f"{timing.what}: cannot request {quoted(masked(url), 120)} ({_broken(exc)})",
                   Location(timing.where)) from None
    except (urllib.error.URLError, ConnectionError, OSError) as err:
        reason = getattr(err, "reason", err)
        if isinstance(reason, (socket.timeout, TimeoutError)):
            raise timing.timeout(reason, reading_body=False) from None
        if isinstance(reason, ConnectionResetError):
            raise _Retryable(f"connection reset ({shown(masked(str(reason)), 120)})") from None
        raise fail("SRG054", f"{timing.what}: cannot reach {settings.endpoint()} ({shown(masked(str(reason)), 200)})",
                   Location(timing.where),
                   hint="check the network or HF_ENDPOINT; with the files in the HF cache, HF_HUB_OFFLINE=1 "
                        "reads them without asking the hub") from None


def _follow(url, base, what, where, max_bytes, byte_range, method, kind, sink, budget) -> Response:
    hub_origin = _origin(settings.endpoint())
    seen = set()
    first: dict[str, str] | None = None
    for hop in range(MAX_REDIRECTS + 1):
        if url in seen:
            raise fail("SRG055", f"{what}: redirect loop at {quoted(masked(url), 120)}", Location(where))
        seen.add(url)
        hdrs = dict(base)
        if _origin(url) != hub_origin:
            hdrs.pop("authorization", None)
            hdrs.pop("Authorization", None)
        started = time.monotonic()
        timing = _Timing(what, where, started, budget)
        try:
            resp = _open(url, hdrs, method, timing)
        except urllib.error.HTTPError as err:
            try:
                status, rh = err.code, _headers(err)
                if first is None:
                    first = rh
                if status in (301, 302, 303, 307, 308) and rh.get("location"):
                    LEDGER.note(url, what, 0, status, kind)
                    url = urllib.parse.urljoin(url, rh["location"])
                    if urllib.parse.urlsplit(url).scheme not in ("http", "https"):  # urllib would open file:// too
                        raise fail("SRG055", f"{what}: a redirect to {quoted(masked(url), 120)}, not an http(s) address",
                                   Location(where)) from None
                    continue
                body = _read_body(err, ERROR_BODY_BYTES, timing, truncate=True)
            finally:
                err.close()
            LEDGER.note(url, what, len(body), status, kind)
            if status in RETRY_STATUS:
                raise _Retryable(f"HTTP {status}", number(rh.get("retry-after"))) from None
            raise hub_error(status, rh, body, what, where, token=any(k.lower() == "authorization" for k in hdrs),
                            redirected=hop > 0) from None
        with resp:
            rh = _headers(resp)
            status = resp.status
            if first is None:
                first = rh
            if byte_range is not None and status == 200 and byte_range[0] != 0:
                LEDGER.note(url, what, 0, status, kind)
                raise fail("SRG055", f"{what}: the server ignored the Range header (HTTP 200 for bytes "
                           f"{byte_range[0]}-)", Location(where))
            encoding = rh.get("content-encoding", "identity").strip().lower()
            if encoding not in ("", "identity"):  # asked for identity: a compressed body is never unpacked
                LEDGER.note(url, what, 0, status, kind)
                raise fail("SRG055", f"{what}: the body is {quoted(encoding, 40)}-encoded where identity was asked "
                           "(a compressed body is not unpacked)", Location(where))
            try:
                if sink is not None:
                    n = _stream_body(resp, max_bytes, timing, sink)
                    body = b""
                else:
                    body = _read_body(resp, max_bytes, timing, truncate=byte_range is not None and status == 200)
                    n = len(body)
            except _Dropped as exc:
                raise _Retryable(f"connection dropped mid-answer ({exc})") from None
            LEDGER.note(url, what, n, status, kind)
            if byte_range is not None:
                _check_range(rh, status, body, byte_range, what, where)
            else:
                announced = number(rh.get("content-length"))
                if announced is not None and announced != n:
                    raise fail("SRG055", f"{what}: {n} bytes received of the {announced} announced",
                               Location(where))
            return Response(status, rh, body, url, first, n)
    raise fail("SRG055", f"{what}: more than {MAX_REDIRECTS} redirects", Location(where))


class _Dropped(Exception):
    """The connection broke mid-body (reset, cut short, a bad chunk): worth another try."""


def _pieces(resp, max_bytes: int, timing: _Timing, truncate: bool):
    """The body in the pieces that arrive, at most `max_bytes` (more: SRG056, or stop there when
    `truncate`), every read within the clock (`wire`), the deadline also checked between pieces."""
    total = 0
    while True:
        if time.monotonic() > timing.until:
            raise timing.timeout(wire.DeadlinePassed(), reading_body=True)
        want = max(1, min(CHUNK, max_bytes - total + 1))
        try:
            chunk = resp.read1(want) if hasattr(resp, "read1") else resp.read(want)
        except (socket.timeout, TimeoutError) as exc:
            raise timing.timeout(exc, reading_body=True) from None
        except http.client.IncompleteRead as exc:  # cut short, or a chunk size that is not hex
            raise _Dropped(f"{type(exc).__name__}: {exc.partial and len(exc.partial) or 0} bytes of a piece") from None
        except http.client.HTTPException as exc:  # a chunk-size line over 64 kB, ...
            raise fail("SRG055", f"{timing.what}: the body breaks HTTP ({_broken(exc)})",
                       Location(timing.where)) from None
        except (ConnectionError, OSError, ValueError) as exc:
            raise _Dropped(shown(f"{type(exc).__name__}: {exc}", 120)) from None
        if not chunk:
            return
        total += len(chunk)
        if total > max_bytes:
            allowed = chunk[: len(chunk) - (total - max_bytes)]
            if truncate:
                yield allowed
                return
            if allowed:  # the sink sees every byte it may have (a download's header check), however they came
                yield allowed
            raise fail("SRG056", f"{timing.what}: larger than the {max_bytes} bytes this read allows",
                       Location(timing.where),
                       hint="the hub serves this file larger than any such file should be; it was not read further")
        yield chunk


def _read_body(resp, max_bytes: int, timing: _Timing, truncate: bool = False) -> bytes:
    return b"".join(_pieces(resp, max_bytes, timing, truncate))


def _stream_body(resp, max_bytes: int, timing: _Timing, sink: BinaryIO) -> int:
    n = 0
    for chunk in _pieces(resp, max_bytes, timing, truncate=False):
        sink.write(chunk)
        n += len(chunk)
    return n


def content_range(headers: dict[str, str]) -> tuple[int, int, int] | None:
    """(first, last, total) of a `Content-Range: bytes a-b/total` header, or None."""
    m = re.fullmatch(r"\s*bytes\s+([0-9]{1,19})-([0-9]{1,19})/([0-9]{1,19})\s*", headers.get("content-range", ""))
    return (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else None


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
