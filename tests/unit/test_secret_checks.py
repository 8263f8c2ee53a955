"""The secrets a worker and the API refuse at start (hubjobs/secret_checks.py), without
servers: placeholders, short and patterned values refused for each shared secret with a
message naming the setting and never the value; random ones, the embedded stack's
development secrets and the tests' own accepted; the codec's keys by the codec's rules."""

from __future__ import annotations

import base64
import secrets
from pathlib import Path

import pytest
from pydantic import SecretStr

from hubjobs.errors import ConfigurationError
from hubjobs.secret_checks import refuse_weak_secrets, weakness
from hubjobs.settings import Settings
from tests.support.servers import API_SECRET
from tests.support.webhooks import WEBHOOK_SECRET

WEAK = [
    "change-me-to-32-or-more-random-bytes",
    "CHANGEME-please-0123456789abcdefghij",
    "replace_me_with_a_long_random_value_0123",
    "s3cr3t!",
    "x" * 31,
    "ab" * 32,
]


@pytest.mark.parametrize("value", WEAK)
@pytest.mark.parametrize("field", ["api_jwt_secret", "webhook_secret"])
def test_a_weak_secret_is_refused_by_name(tmp_path: Path, field: str, value: str) -> None:
    settings = Settings(home=tmp_path, **{field: SecretStr(value)})  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError) as refused:
        refuse_weak_secrets(settings)
    assert f"HUBJOBS_{field.upper()}" in refused.value.message
    assert value not in refused.value.message


def test_random_and_known_good_secrets_pass(tmp_path: Path) -> None:
    for value in (secrets.token_urlsafe(32), secrets.token_hex(32), API_SECRET, WEBHOOK_SECRET):
        assert weakness(value) is None, value
        refuse_weak_secrets(
            Settings(
                home=tmp_path, api_jwt_secret=SecretStr(value), webhook_secret=SecretStr(value)
            )
        )
    refuse_weak_secrets(Settings(home=tmp_path))  # nothing configured: nothing to refuse


def test_the_codec_keys_are_refused_by_the_codecs_rules(tmp_path: Path) -> None:
    good = "k1:" + base64.b64encode(secrets.token_bytes(32)).decode()
    refuse_weak_secrets(Settings(home=tmp_path, payload_codec=True, codec_keys=SecretStr(good)))
    for keys in ("2026-11:change-me-to-the-base64-of-32-random-bytes", "k1:" + "QUJD" * 2):
        with pytest.raises(ConfigurationError) as refused:
            refuse_weak_secrets(Settings(home=tmp_path, codec_keys=SecretStr(keys)))
        assert "HUBJOBS_CODEC_KEYS" in refused.value.message
    with pytest.raises(ConfigurationError, match="HUBJOBS_CODEC_KEYS"):
        refuse_weak_secrets(Settings(home=tmp_path, payload_codec=True))
