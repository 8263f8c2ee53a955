"""The embedded stack's development token secret (HUBJOBS_HOME/dev-token-secret, which
`hubjobs up` writes) signs and verifies only while no token key is configured."""

from __future__ import annotations

from pathlib import Path

from pydantic import SecretStr

from hubjobs.settings import DEV_SECRET_FILE, DEV_WEBHOOK_SECRET_FILE, Settings
from starter.cli.stack import write_dev_webhook_secret


def test_used_only_without_a_configured_key(tmp_path: Path) -> None:
    assert Settings(home=tmp_path).api_jwt_secret is None  # no file: no secret
    (tmp_path / DEV_SECRET_FILE).write_text("development\n")
    secret = Settings(home=tmp_path).api_jwt_secret
    assert secret is not None and secret.get_secret_value() == "development"
    production = Settings(home=tmp_path, api_jwt_secret=SecretStr("production"))
    assert production.api_jwt_secret is not None
    assert production.api_jwt_secret.get_secret_value() == "production"
    assert Settings(home=tmp_path, api_jwt_public_key="PEM").api_jwt_secret is None
    assert Settings(home=tmp_path, api_jwks_url="https://idp.example/jwks").api_jwt_secret is None


def test_the_webhook_secret_is_written_private_and_only_without_a_configured_one(
    tmp_path: Path,
) -> None:
    configured = tmp_path / "configured"
    configured.mkdir()
    write_dev_webhook_secret(Settings(home=configured, webhook_secret=SecretStr("production")))
    assert not (configured / DEV_WEBHOOK_SECRET_FILE).exists()
    write_dev_webhook_secret(Settings(home=tmp_path))
    written = tmp_path / DEV_WEBHOOK_SECRET_FILE
    assert written.stat().st_mode & 0o777 == 0o600
    secret = Settings(home=tmp_path).webhook_secret
    assert secret is not None and secret.get_secret_value() == written.read_text().strip()
    # A second `up` finds it and keeps it.
    write_dev_webhook_secret(Settings(home=tmp_path))
    assert Settings(home=tmp_path).webhook_secret == secret
