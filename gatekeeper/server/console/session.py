"""Console sign-in: signed session tokens, CSRF tokens, the same-origin check. Pure, no I/O.

The cookie carries `expiry.nonce.signature`, an HMAC over the first two parts with a secret
derived from the admin key: the key itself never leaves the sign-in form, changing the key
signs everyone out, and replicas sharing the key accept each other's sessions. The CSRF token
is a second HMAC over the session's nonce, so a page can only act for the session that
rendered it. A signed-out session is recorded in the profile store by its `Session.id`
(`SessionRevocations`), so it stays out on every replica and after a restart.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

SESSION_TTL_S = 12 * 3600
COOKIE = "gatekeeper_console"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@dataclass(frozen=True)
class Session:
    nonce: str
    expires: int

    @property
    def id(self) -> str:
        """The name a sign-out is recorded under: a hash, so the store holds nothing of the cookie."""
        return hashlib.sha256(b"gatekeeper console session id:" + self.nonce.encode()).hexdigest()[:32]


class Signer:
    """Issues and checks session and CSRF tokens for one admin key."""

    def __init__(self, admin_key: str, ttl_s: int = SESSION_TTL_S) -> None:
        # A derived secret: a leaked session token reveals nothing usable to sign in with the key.
        self._secret = hmac.new(admin_key.encode(), b"gatekeeper console session v1", hashlib.sha256).digest()
        self._key_digest = hashlib.sha256(admin_key.encode()).digest()
        self._ttl_s = ttl_s

    def key_matches(self, candidate: str) -> bool:
        """Constant-time comparison of a typed key with the admin key; digests of equal length,
        so not even the key's length shows in the timing."""
        return hmac.compare_digest(hashlib.sha256(candidate.encode()).digest(), self._key_digest)

    def issue(self, now: float | None = None) -> str:
        expires = int((now or time.time()) + self._ttl_s)
        body = f"{expires}.{secrets.token_urlsafe(18)}"
        return f"{body}.{self._sign(b'session:' + body.encode())}"

    def verify(self, token: str | None, now: float | None = None) -> Session | None:
        """The session a cookie value stands for; None when absent, forged or expired (whether it
        was signed out is the store's to say: routes.py asks it)."""
        if not token or len(token) > 256:
            return None
        body, _, signature = token.rpartition(".")
        if not hmac.compare_digest(signature.encode(), self._sign(b"session:" + body.encode()).encode()):
            return None
        expiry, _, nonce = body.partition(".")
        if not expiry.isdigit() or int(expiry) < (now or time.time()):
            return None
        return Session(nonce, int(expiry))

    def csrf_token(self, session: Session) -> str:
        return self._sign(b"csrf:" + session.nonce.encode())

    def csrf_ok(self, session: Session, token: str | None) -> bool:
        if not token:
            return False
        return hmac.compare_digest(token.encode(), self.csrf_token(session).encode())

    def _sign(self, message: bytes) -> str:
        return _b64(hmac.new(self._secret, message, hashlib.sha256).digest())


def same_origin(origin: str | None, referer: str | None, scheme: str, host: str | None) -> bool:
    """True when a state-changing request comes from a page of this very server.

    Browsers send `Origin` on every POST; `Referer` is the fallback for the few that strip it.
    A request with neither is refused: the console's forms are only ever posted by a browser.
    """
    if not host:
        return False
    expected = f"{scheme}://{host}".lower()
    if origin and origin != "null":
        return origin.lower() == expected
    if referer:
        parts = urlsplit(referer)
        return f"{parts.scheme}://{parts.netloc}".lower() == expected
    return False
