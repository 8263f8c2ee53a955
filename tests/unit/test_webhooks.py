"""Completion webhooks' pure parts: the signature a receiver verifies, and the
destinations a notify_url may name."""

from __future__ import annotations

import pytest

from hubjobs.webhooks.destinations import InvalidNotifyUrl, check_notify_url
from hubjobs.webhooks.signing import signature_header, verify

SECRET = b"s3cret"
BODY = b'{"job_id": "j", "status": "succeeded"}'


def test_a_signature_verifies_and_nothing_else_does() -> None:
    header = signature_header(SECRET, 1_700_000_000, BODY)
    assert header.startswith("t=1700000000,v1=")
    assert verify(SECRET, header, BODY, now=1_700_000_010)
    assert not verify(b"other", header, BODY, now=1_700_000_010)
    assert not verify(SECRET, header, BODY + b" ", now=1_700_000_010)
    # Too old (a replay), and a forged timestamp on the old signature.
    assert not verify(SECRET, header, BODY, now=1_700_000_000 + 301)
    forged = header.replace("t=1700000000", "t=1700000300")
    assert not verify(SECRET, forged, BODY, now=1_700_000_300)
    assert not verify(SECRET, "garbage", BODY, now=1_700_000_000)


def test_loopback_is_allowed_by_default() -> None:
    for url in ("http://127.0.0.1:9000/hook", "http://[::1]/hook", "https://localhost/x"):
        assert check_notify_url(url) == url


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data/",
        "http://[fd00:ec2::254]/",
        "http://169.254.1.1/",
        "http://0.0.0.0/",
        "http://10.0.0.5/hook",
        "ftp://127.0.0.1/hook",
        "http://user:pw@127.0.0.1/hook",
        "not a url",
        "http://no-such-host.invalid/hook",
    ],
)
def test_what_is_refused_by_default(url: str) -> None:
    with pytest.raises(InvalidNotifyUrl) as refused:
        check_notify_url(url)
    assert refused.value.code == "invalid_notify_url"


def test_the_allow_list_opens_networks_and_hosts_but_never_link_local() -> None:
    assert check_notify_url("http://10.0.0.5/hook", ["10.0.0.0/8"])
    with pytest.raises(InvalidNotifyUrl):
        check_notify_url("http://10.1.0.5/hook", ["10.0.0.0/16"])
    with pytest.raises(InvalidNotifyUrl):
        check_notify_url("http://169.254.169.254/", ["0.0.0.0/0", "169.254.169.254"])
