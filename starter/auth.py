"""Bearer tokens for the HTTP API: a JWT whose subject is the acting user's id, signed
with the configured secret (HS256) or verified with the configured public key (RS256 /
ES256, for tokens minted by an identity provider)."""

from __future__ import annotations

import time
import uuid

import jwt

from hubjobs.errors import ConfigurationError, HubJobsError
from hubjobs.settings import Settings

ISSUER = "hubjobs"


class Unauthorized(HubJobsError):
    code = "unauthorized"


def _key_and_algorithms(settings: Settings) -> tuple[str, list[str]]:
    if settings.api_jwt_public_key:
        return settings.api_jwt_public_key, ["RS256", "ES256"]
    if settings.api_jwt_secret:
        return settings.api_jwt_secret.get_secret_value(), ["HS256"]
    raise ConfigurationError(
        "the API has no token key: set HUBJOBS_API_JWT_SECRET or HUBJOBS_API_JWT_PUBLIC_KEY"
    )


def actor_of(authorization: str | None, settings: Settings) -> uuid.UUID:
    """The actor a ``Bearer`` header names, once its signature and expiry check out."""
    if not authorization or not authorization.lower().startswith("bearer "):
        raise Unauthorized("a bearer token is required")
    key, algorithms = _key_and_algorithms(settings)
    try:
        claims = jwt.decode(
            authorization[7:].strip(),
            key,
            algorithms=algorithms,
            options={"require": ["sub", "exp"]},
        )
        return uuid.UUID(str(claims["sub"]))
    except (jwt.PyJWTError, ValueError):
        raise Unauthorized("the bearer token is not valid") from None


def mint(actor_id: uuid.UUID, settings: Settings, *, ttl_seconds: int = 3600) -> str:
    """A token for ``actor_id`` signed with the configured secret (for tools and tests)."""
    if settings.api_jwt_secret is None:
        raise ConfigurationError("minting tokens needs HUBJOBS_API_JWT_SECRET")
    now = int(time.time())
    return jwt.encode(
        {"sub": str(actor_id), "iat": now, "exp": now + ttl_seconds, "iss": ISSUER},
        settings.api_jwt_secret.get_secret_value(),
        algorithm="HS256",
    )
