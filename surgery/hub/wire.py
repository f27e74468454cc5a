"""The transport under `http`: urllib, with one absolute deadline on every read from the socket.

A socket timeout bounds one silent wait, not a request. A server that answers `100 Continue` every
second, or trickles its status line and headers one byte every 2 s, never leaves the socket silent
for the stall timeout, and http.client reads the status line and headers (and skips interim 1xx
answers) before our code sees a byte: the first hostile-hub campaign kept a command 150 s under
SURGERY_HUB_DEADLINE=20 that way (issue 54). So the connection urllib opens is given a socket whose every read

- first checks the request's absolute deadline (`Clock.until`), raising `DeadlinePassed` once it is
  past, and
- waits at most the stall timeout or what is left of the deadline, whichever is less (`Stalled`
  when the stall timeout is what ran out).

The status line, the headers, every interim answer and the body all come through those reads, so
the deadline holds from the first byte to the last. And before the first byte (issue 67: an HTTPS
proxy that answered CONNECT and then trickled its headers held a run past any deadline), every step
of opening the connection shares the same clock:

- name resolution runs in a helper thread the request waits for at most what is left (the system
  resolver has no timeout of its own; a resolver that never answers leaves only that thread behind);
- the TCP connect waits at most what is left (and the stall timeout);
- a proxy's answer to CONNECT (its status line and every header line) is read through the bounded
  socket;
- the TLS handshake runs non-blocking, each wait for the peer bounded by what is left.

Proxies come from the environment (urllib's ProxyHandler), read again whenever they change.
"""
from __future__ import annotations

import http.client
import io
import select
import socket
import ssl
import threading
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


def _resolve(host: str, port: int, clock: Clock) -> list:
    """getaddrinfo, waited for at most what is left of the clock (the resolver has no timeout)."""
    found: list = []

    def run():
        try:
            found.append(socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM))
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting request
            found.append(exc)

    worker = threading.Thread(target=run, name="surgery-resolve", daemon=True)
    worker.start()
    worker.join(clock.wait())
    if not found:
        if time.monotonic() >= clock.until:
            raise DeadlinePassed("deadline passed while resolving the host name")
        raise Stalled("the host name did not resolve within the stall timeout")
    if isinstance(found[0], BaseException):
        raise found[0]
    return found[0]


def _connect(address, clock: Clock, source_address=None) -> socket.socket:
    """socket.create_connection, with the name resolution and every connect under the clock."""
    host, port = address
    last: BaseException | None = None
    for family, kind, proto, _, sockaddr in _resolve(host, port, clock):
        sock = socket.socket(family, kind, proto)
        try:
            sock.settimeout(clock.wait())
            if source_address:
                sock.bind(source_address)
            sock.connect(sockaddr)
            return sock
        except socket.timeout:
            sock.close()
            if time.monotonic() >= clock.until:
                raise DeadlinePassed("deadline passed while connecting") from None
            last = Stalled("no answer to connect")
        except OSError as exc:
            sock.close()
            last = exc
    raise last if last is not None else OSError("getaddrinfo returned nothing")


def _handshake(context, sock: socket.socket, server_hostname: str, clock: Clock):
    """The TLS handshake, non-blocking, every wait for the peer bounded by the clock."""
    tls = context.wrap_socket(sock, server_hostname=server_hostname, do_handshake_on_connect=False)
    tls.setblocking(False)
    try:
        while True:
            try:
                tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                ready = select.select([tls], [], [], clock.wait())[0]
            except ssl.SSLWantWriteError:
                ready = select.select([], [tls], [], clock.wait())[1]
            if not ready:
                if time.monotonic() >= clock.until:
                    raise DeadlinePassed("deadline passed during the TLS handshake")
                raise Stalled("the TLS handshake stalled")
    except BaseException:
        tls.close()
        raise
    tls.setblocking(True)
    return tls


def _bound(base: type, clock: Clock) -> type:
    class Bound(base):
        def connect(self):
            raw = _connect((self.host, self.port), clock, self.source_address)
            try:
                try:
                    raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                except OSError:
                    pass
                if self._tunnel_host:  # a proxy's CONNECT: its answer read under the deadline
                    self.sock = _BoundSocket(raw, clock)
                    self._tunnel()
                if isinstance(self, http.client.HTTPSConnection):
                    raw = _handshake(self._context, raw, self._tunnel_host or self.host, clock)
            except BaseException:
                raw.close()
                raise
            self.sock = _BoundSocket(raw, clock)

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


_OPENER: tuple | None = None  # (the proxies it was built with, the opener)
_OPENER_LOCK = threading.Lock()


def opener():
    """urllib's opener with our handlers; built again when the proxies in the environment change
    (urllib's ProxyHandler reads them once, when it is made)."""
    global _OPENER
    proxies = urllib.request.getproxies()
    with _OPENER_LOCK:
        if _OPENER is None or _OPENER[0] != proxies:
            _OPENER = (proxies, urllib.request.build_opener(urllib.request.ProxyHandler(proxies), _Handler,
                                                             _HTTPSHandler, _NoRedirect))
        return _OPENER[1]


def open_bounded(url: str, headers: dict[str, str], method: str, clock: Clock):
    """urllib's `open`, every read of the answer bounded by `clock` (urllib's HTTPError included)."""
    req = urllib.request.Request(url, headers=headers, method=method)
    req.clock = clock
    return opener().open(req, timeout=clock.wait())
