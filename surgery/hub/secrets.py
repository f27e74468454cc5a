"""Our own token, never shown (issue 67).

A server may echo what it was sent: a 401 page quoting the Authorization header, a redirect address or
an ETag holding it. Every message made from a server's text is masked before it is shown: the tokens
this process sent (remembered from the Authorization header) and the ones in HF_TOKEN /
HUGGING_FACE_HUB_TOKEN become MASK. Masked before a value is cut (`surgery.text.escape`), so a cut never
leaves a token's first characters.
"""
from __future__ import annotations

import os

from ..text.diagnostics import Diagnostic, SurgeryError

# A server may echo what it was sent (a 401 page quoting the Authorization header, a redirect address
# holding it): every message made from a server's text is masked before it leaves this module.
MASK = "<your token>"
_SECRETS: set[str] = set()
_TOKEN_VARIABLES = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")
_MIN_SECRET = 6  # shorter values would mask ordinary words


def remember_secret(headers: dict[str, str]) -> None:
    """The token an Authorization header carries, masked from then on."""
    for key, value in headers.items():
        if key.lower() == "authorization" and isinstance(value, str):
            token = value.split(" ", 1)[-1].strip()
            if len(token) >= _MIN_SECRET:
                _SECRETS.add(token)


def masked(text: str | None) -> str | None:
    """`text` with every token we hold (sent, or in HF_TOKEN) replaced by MASK."""
    if not text:
        return text
    secrets = set(_SECRETS)
    secrets.update(v.strip() for v in (os.environ.get(n) for n in _TOKEN_VARIABLES) if v and len(v.strip()) >= _MIN_SECRET)
    for secret in sorted(secrets, key=len, reverse=True):
        if secret in text:
            text = text.replace(secret, MASK)
    return text


def masked_error(exc: SurgeryError) -> SurgeryError:
    """The same error with our token masked in every message and hint (the same object when none held it)."""
    diags = [Diagnostic(d.code, d.severity, masked(d.message), d.location, masked(d.hint)) for d in exc.diagnostics]
    if all(a.message == b.message and a.hint == b.hint for a, b in zip(diags, exc.diagnostics)):
        return exc
    return SurgeryError(diags)


