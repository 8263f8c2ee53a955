"""Where a completion webhook may go: ``http``/``https`` to a host the allow-list names
(host names, or networks all its addresses must be in), loopback by default; never a
link-local (the cloud metadata service), unspecified or multicast address, whatever the
list says. Checked at the start and again at each delivery (a name may be re-pointed)."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Sequence
from urllib.parse import urlsplit

from hubjobs.errors import InvalidInput

DEFAULT_ALLOWED = ("127.0.0.0/8", "::1/128")
METADATA = (ipaddress.ip_address("169.254.169.254"), ipaddress.ip_address("fd00:ec2::254"))
MAX_URL_LENGTH = 2000

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


class InvalidNotifyUrl(InvalidInput):
    code = "invalid_notify_url"


def never(address: Address) -> bool:
    """Addresses no allow-list opens; an IPv4 address written as IPv6
    (``::ffff:169.254.169.254``, which a dual-stack socket reaches) is judged as itself."""
    mapped = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) else None
    if mapped is not None and never(mapped):
        return True
    return (
        address in METADATA
        or address.is_link_local
        or address.is_unspecified
        or address.is_multicast
    )


def _networks(allowed: Sequence[str]) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    found = []
    for entry in allowed:
        try:
            found.append(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            continue  # a host name
    return found


def resolve(host: str) -> list[Address]:
    """The addresses ``host`` names (a literal address is itself)."""
    try:
        return [ipaddress.ip_address(host)]
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except OSError:
        raise InvalidNotifyUrl("the notify_url's host does not resolve") from None
    return [ipaddress.ip_address(info[4][0]) for info in infos]


def check_notify_url(url: str, allowed: Sequence[str] = DEFAULT_ALLOWED) -> str:
    """``url`` if a delivery may go there, else ``InvalidNotifyUrl`` (which names no
    address: the caller learns it is not allowed, not what it resolved to)."""
    if len(url) > MAX_URL_LENGTH:
        raise InvalidNotifyUrl(f"the notify_url is longer than {MAX_URL_LENGTH} characters")
    try:
        parts = urlsplit(url)
        hostname = parts.hostname
        parts.port  # noqa: B018 (a port out of range raises here)
    except ValueError:  # an unbalanced or unreadable [IPv6] host, a port out of range
        raise InvalidNotifyUrl("the notify_url is not a URL") from None
    if parts.scheme not in ("http", "https") or not hostname:
        raise InvalidNotifyUrl("the notify_url must be an http or https URL with a host")
    if parts.username or parts.password:
        raise InvalidNotifyUrl("the notify_url must not carry credentials")
    host = hostname.rstrip(".").lower()
    addresses = resolve(host)
    if not addresses or any(never(address) for address in addresses):
        raise InvalidNotifyUrl("the notify_url's host is not allowed")
    if host in {entry.lower() for entry in allowed}:
        return url
    networks = _networks(allowed)
    if all(any(address in network for network in networks) for address in addresses):
        return url
    raise InvalidNotifyUrl("the notify_url's host is not allowed")
