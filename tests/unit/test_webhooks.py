"""Completion webhooks' pure parts: the signature a receiver verifies, and the
destinations a notify_url may name."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import SecretStr

from hubjobs.settings import DEV_WEBHOOK_SECRET_FILE, Settings
from hubjobs.webhooks.destinations import InvalidNotifyUrl, check_notify_url
from hubjobs.webhooks.policy import WebhooksNotConfigured, check_start, signing_secret
from hubjobs.webhooks.signing import TOLERANCE_SECONDS, signature_header, verify

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
        "http://127.0.0.1:99999/hook",
        "http://[::1/hook",
        "http://[::ffff:169.254.169.254]/",
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


@settings(max_examples=200, deadline=None)
@given(
    secret=st.binary(min_size=1, max_size=64),
    body=st.binary(max_size=500),
    timestamp=st.integers(0, 2**40),
    skew=st.integers(-TOLERANCE_SECONDS, TOLERANCE_SECONDS),
    flip=st.integers(0, 499),
)
def test_any_signature_verifies_and_a_tampered_body_or_old_one_does_not(
    secret: bytes, body: bytes, timestamp: int, skew: int, flip: int
) -> None:
    header = signature_header(secret, timestamp, body)
    assert verify(secret, header, body, now=timestamp + skew)
    if body:
        i = flip % len(body)
        tampered = body[:i] + bytes([body[i] ^ 1]) + body[i + 1 :]
        assert not verify(secret, header, tampered, now=timestamp)
    assert not verify(secret, header, body + b"x", now=timestamp)
    assert not verify(secret, header, body, now=timestamp + TOLERANCE_SECONDS + 1)


def test_a_start_needs_a_secret_and_an_allowed_host(tmp_path: Path) -> None:
    unsigned = Settings(home=tmp_path)
    assert signing_secret(unsigned) is None
    with pytest.raises(WebhooksNotConfigured) as refused:
        check_start(unsigned, "http://127.0.0.1/hook")
    assert refused.value.code == "webhooks_not_configured"
    signed = Settings(home=tmp_path, webhook_secret=SecretStr("s"))
    assert check_start(signed, "http://127.0.0.1/hook") == "http://127.0.0.1/hook"
    with pytest.raises(InvalidNotifyUrl):
        check_start(signed, "http://10.1.2.3/hook")


def test_the_allow_list_setting_is_comma_separated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert Settings(home=tmp_path).webhook_allowed_hosts == ["127.0.0.0/8", "::1/128"]
    monkeypatch.setenv("HUBJOBS_WEBHOOK_ALLOWED_HOSTS", "hooks.example.com, 10.0.0.0/8")
    assert Settings(home=tmp_path).webhook_allowed_hosts == ["hooks.example.com", "10.0.0.0/8"]


def test_the_development_secret_is_used_only_without_a_configured_one(tmp_path: Path) -> None:
    (tmp_path / DEV_WEBHOOK_SECRET_FILE).write_text("development\n")
    assert signing_secret(Settings(home=tmp_path)) == b"development"
    production = Settings(home=tmp_path, webhook_secret=SecretStr("production"))
    assert signing_secret(production) == b"production"
