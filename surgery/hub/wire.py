"""The transport under `http`: urllib, with one absolute deadline on every read from the socket.

A socket timeout bounds one silent wait, not a request. A server that answers `100 Continue` every
second, or trickles its status line and headers one byte every 2 s, never leaves the socket silent
for the stall timeout, and http.client reads the status line and headers (and skips interim 1xx
answers) before our code sees a byte: the first hostile-hub campaign kept a command 150 s under
SURGERY_HUB_DEADLINE=20 that way (issue 54). So the connection urllib opens is given a socket whose
every read

- first checks the request's absolute deadline (`Clock.until`), raising `DeadlinePassed` once it is
  past, and
- waits at most the stall timeout or what is left of the deadline, whichever is less (`Stalled`
  when the stall timeout is what ran out).

The status line, the headers, every interim answer and the body all come through those reads, so
the deadline holds from the first byte to the last. Connecting is bounded by the socket timeout
given to `open` (at most what is left). Name resolution is the system resolver's and is not bounded
here. Proxies from the environment still apply (urllib's ProxyHandler); the tunnel's answer and the
TLS handshake are read before the bound socket is in place, each read bounded by the stall timeout.
"""
from __future__ import annotations

import http.client
import io
import socket
import time
import urllib.request
from dataclasses import dataclass


class DeadlinePassed(TimeoutError):
    """The request's absolute deadline passed while waiting for (or between) bytes."""


class Stalled(TimeoutError):
    """No byte came for the stall timeout."""


@dataclass
class Clock:
    until: float  # time.monotonic() by which the whole answer must have been read
    stall: float  # seconds one read may wait for its first byte

    def wait(self) -> float:
        """How long the next read may wait; DeadlinePassed when no time is left."""
        left = self.until - time.monotonic()
        if left <= 0:
            raise DeadlinePassed("deadline passed")
        return min(self.stall, left)


class _BoundRaw(io.RawIOBase):
    """The socket as a raw stream whose every read is bounded by the clock."""

    def __init__(self, sock: socket.socket, clock: Clock):
        self._sock, self._clock = sock, clock
        sock._io_refs += 1  # as socket.makefile does: the socket stays open until this stream closes

    def readable(self) -> bool:
        return True

    def close(self) -> None:
        if not self.closed:
            super().close()
            self._sock._decref_socketios()

    def readinto(self, buffer) -> int:
        self._sock.settimeout(self._clock.wait())
        try:
            return self._sock.recv_into(buffer)
        except socket.timeout:
            if time.monotonic() >= self._clock.until:
                raise DeadlinePassed("deadline passed") from None
            raise Stalled("stalled") from None


class _BoundSocket:
    """What http.client holds as its socket: reads through `_BoundRaw`, the rest passed through."""

    def __init__(self, sock: socket.socket, clock: Clock):
        self._sock, self._clock = sock, clock

    def makefile(self, mode: str = "rb", *args, **kwargs):
        return io.BufferedReader(_BoundRaw(self._sock, self._clock))

    def sendall(self, data) -> None:
        self._sock.settimeout(self._clock.wait())
        self._sock.sendall(data)

    def __getattr__(self, name):
        return getattr(self._sock, name)


def _bound(base: type, clock: Clock) -> type:
    class Bound(base):
        def connect(self):
            super().connect()
            self.sock = _BoundSocket(self.sock, clock)

    return Bound


class _Handler(urllib.request.HTTPHandler):
    def http_open(self, req):
        return self.do_open(_bound(http.client.HTTPConnection, req.clock), req)


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def https_open(self, req):
        return self.do_open(_bound(http.client.HTTPSConnection, req.clock), req, context=self._context)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Redirects are followed by `http` itself: it bounds the chain and decides about the token."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: D401
        return None


_OPENER = None


def opener():
    global _OPENER
    if _OPENER is None:
        _OPENER = urllib.request.build_opener(_Handler, _HTTPSHandler, _NoRedirect)
    return _OPENER


def open_bounded(url: str, headers: dict[str, str], method: str, clock: Clock):
    """urllib's `open`, every read of the answer bounded by `clock` (urllib's HTTPError included)."""
    req = urllib.request.Request(url, headers=headers, method=method)
    req.clock = clock
    return opener().open(req, timeout=clock.wait())
