"""The notify_url check on any input (hypothesis): it answers the URL or refuses it with
``invalid_notify_url``, never anything else; and a host that resolves to a link-local
address (the cloud metadata service's among them) is refused whatever the allow-list
opens. Name resolution is the test's: each drawn host resolves to drawn addresses."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest.mock import patch

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from hubjobs.webhooks import destinations
from hubjobs.webhooks.destinations import InvalidNotifyUrl, check_notify_url

EVERYTHING = ["0.0.0.0/0", "::/0"]

ipv4 = st.ip_addresses(v=4)
ipv6 = st.ip_addresses(v=6)
link_local = st.one_of(
    st.just(ipaddress.ip_address("169.254.169.254")),
    st.just(ipaddress.ip_address("fd00:ec2::254")),
    st.integers(0, 2**16 - 1).map(lambda n: ipaddress.IPv4Address((169 << 24) | (254 << 16) | n)),
    st.integers(0, 2**64 - 1).map(lambda n: ipaddress.IPv6Address((0xFE80 << 112) | n)),
    # IPv4 link-local written as IPv6 (a dual-stack socket reaches it).
    st.integers(0, 2**16 - 1).map(
        lambda n: ipaddress.IPv6Address((0xFFFF << 32) | (169 << 24) | (254 << 16) | n)
    ),
)
names = st.from_regex(r"\A[a-z][a-z0-9-]{0,20}(\.[a-z][a-z0-9-]{0,10}){0,3}\Z")


def _literal(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str:
    return f"[{address}]" if address.version == 6 else str(address)


@contextmanager
def resolving(table: dict[str, list[str]]) -> Iterator[None]:
    """Host name -> the addresses it resolves to (a name not in it does not resolve)."""

    def getaddrinfo(host: str, *_: Any, **__: Any) -> list[Any]:
        if host not in table:
            raise socket.gaierror("no such host")
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, 0)) for a in table[host]]

    with patch("hubjobs.webhooks.destinations.socket.getaddrinfo", getaddrinfo):
        yield


@settings(max_examples=300, deadline=None)
@given(url=st.text(max_size=200), allowed=st.lists(st.text(max_size=30), max_size=3))
@example(url="http://[::1", allowed=[])
@example(url="http://[zz]/", allowed=[])
@example(url="http://[fe80::1%25eth0]/", allowed=["::/0"])
@example(url="http://[::ffff:169.254.169.254]/", allowed=["::/0"])
@example(url="http://127.0.0.1:99999/", allowed=[])
@example(url="http:///hook", allowed=[])
@example(url="http://\u0000/", allowed=[])
def test_any_text_is_answered_or_refused_never_a_crash(url: str, allowed: list[str]) -> None:
    with resolving({}):
        try:
            assert check_notify_url(url, allowed) == url
        except InvalidNotifyUrl as refused:
            assert refused.code == "invalid_notify_url"


@settings(max_examples=300, deadline=None)
@given(
    scheme=st.sampled_from(["http", "https", "HTTP", "ftp", "file", "gopher", ""]),
    host=st.one_of(ipv4.map(_literal), ipv6.map(_literal), names),
    port=st.one_of(st.none(), st.integers(-5, 70000)),
    path=st.text(max_size=40),
    userinfo=st.one_of(st.none(), st.just("user:pw@"), st.just("@")),
)
def test_any_shaped_url_is_answered_or_refused(
    scheme: str,
    host: str,
    port: int | None,
    path: str,
    userinfo: str | None,
) -> None:
    url = f"{scheme}://{userinfo or ''}{host}{'' if port is None else f':{port}'}/{path}"
    with resolving({host: ["127.0.0.1"]}):
        try:
            check_notify_url(url, EVERYTHING)
        except InvalidNotifyUrl:
            pass


@settings(max_examples=300, deadline=None)
@given(
    bad=link_local,
    others=st.lists(st.one_of(ipv4, ipv6), max_size=3),
    name=names,
    literal=st.booleans(),
)
def test_link_local_is_never_allowed_whatever_the_list(
    bad: ipaddress.IPv4Address | ipaddress.IPv6Address,
    others: list[ipaddress.IPv4Address | ipaddress.IPv6Address],
    name: str,
    literal: bool,
) -> None:
    """By its address, or by a name that resolves to it among other addresses, even
    with every network and the name itself on the list."""
    host = _literal(bad) if literal else name
    addresses = [str(a) for a in [*others, bad]]
    with resolving({name: addresses}), pytest.raises(InvalidNotifyUrl) as refused:
        check_notify_url(f"http://{host}/hook", [*EVERYTHING, name, str(bad)])
    # The refusal names no address.
    assert str(bad) not in refused.value.message


@settings(max_examples=200, deadline=None)
@given(address=ipv4.filter(lambda a: not destinations.never(a)), name=names)
def test_a_name_is_allowed_only_when_every_address_is(
    address: ipaddress.IPv4Address, name: str
) -> None:
    url = f"http://{name}/hook"
    with resolving({name: ["127.0.0.1", str(address)]}):
        if address.is_loopback:
            assert check_notify_url(url) == url
        else:
            with pytest.raises(InvalidNotifyUrl):
                check_notify_url(url)
