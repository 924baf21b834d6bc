"""Which socket peers are trusted front proxies (`trusted_proxies`): one check for the throttle's
forwarded header, `X-Forwarded-Proto` and the drift identity header."""

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


@functools.lru_cache(maxsize=8)
def _networks(proxies: tuple[str, ...]) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    return tuple(ipaddress.ip_network(p, strict=False) for p in proxies)
