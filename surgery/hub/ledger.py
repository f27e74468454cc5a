"""What was fetched from the hub in this process: one row per answer (redirects and errors
included), so `surgery validate --json` can say how many bytes and which files a check cost, and
the benchmarks can compare it with what a download would move."""
from __future__ import annotations

import threading
import urllib.parse
from dataclasses import dataclass, field


@dataclass
class Fetch:
    url: str
    what: str
    bytes: int
    status: int
    kind: str  # api | file | range


@dataclass
class Ledger:
    rows: list[Fetch] = field(default_factory=list)
    cache_hits: int = 0
    spent: float = 0.0  # seconds this command's requests took, together: what the total deadline bounds
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add_time(self, seconds: float) -> None:
        with self.lock:
            self.spent += seconds

    def time_left(self, total: float) -> float:
        """Seconds of the total deadline not yet spent in requests. Time between requests (parsing,
        checks) is not counted, so a library caller making requests over hours is bounded the same
        way as one command; requests in parallel count each, which only makes the bound tighter."""
        with self.lock:
            return total - self.spent

    def note(self, url: str, what: str, n: int, status: int, kind: str) -> None:
        with self.lock:
            self.rows.append(Fetch(url, what, n, status, kind))

    def hit(self) -> None:
        with self.lock:
            self.cache_hits += 1

    def reset(self) -> None:
        """A new command starts counting from zero (several commands can run in one process)."""
        with self.lock:
            self.rows.clear()
            self.cache_hits = 0
            self.spent = 0.0

    def summary(self) -> dict:
        rows = list(self.rows)
        files = {}
        for r in rows:
            if 200 <= r.status < 300:
                files.setdefault(r.what, 0)
                files[r.what] += r.bytes
        return {"requests": len(rows), "bytes": sum(r.bytes for r in rows),
                "files": [{"file": k, "bytes": v} for k, v in files.items()],
                "cache_hits": self.cache_hits,
                "hosts": sorted({urllib.parse.urlsplit(r.url).netloc for r in rows})}


LEDGER = Ledger()
