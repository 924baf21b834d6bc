"""Who is on the other end: which socket peers are trusted front proxies (`trusted_proxies`: one
check for the throttle's forwarded header, `X-Forwarded-Proto` and the drift identity header), and
the credential a client presents."""

from __future__ import annotations

import functools
import ipaddress


def is_trusted(peer: str, proxies: tuple[str, ...]) -> bool:
    """True when `peer` (an IP address) lies in one of the `proxies` networks; not an IP: False."""
    try:
        address = ipaddress.ip_address(peer)
    except ValueError:
        return False
    return any(address in network for network in _networks(proxies))


def bearer_form(authorization: str) -> bytes:
    """The header as `Bearer <token>` bytes whatever the scheme's case (RFC 9110: schemes are
    case-insensitive, `bearer k3y` is the same credential), to compare with an expected key."""
    scheme, space, token = authorization.partition(" ")
    canonical = f"Bearer {token}" if space and scheme.lower() == "bearer" else authorization
    return canonical.encode("latin-1", "replace")


@functools.lru_cache(maxsize=8)
def _networks(proxies: tuple[str, ...]) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    return tuple(ipaddress.ip_network(p, strict=False) for p in proxies)
