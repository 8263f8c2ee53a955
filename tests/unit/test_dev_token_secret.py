"""The embedded stack's development token secret (HUBJOBS_HOME/dev-token-secret, which
`hubjobs up` writes) signs and verifies only while no token key is configured."""

from __future__ import annotations

from pathlib import Path

from pydantic import SecretStr

from hubjobs.settings import DEV_SECRET_FILE, Settings


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
