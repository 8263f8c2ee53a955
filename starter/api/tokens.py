"""Bearer tokens for the HTTP API: a JWT whose subject is the acting user's id, checked
against the first key configured: an identity provider's key set (HUBJOBS_API_JWKS_URL;
asymmetric keys only, cached, an unknown ``kid`` re-read at most every
HUBJOBS_API_JWKS_REFRESH_SECONDS so that made-up ids cannot flood the provider; unreadable,
503), a PEM public key, or a shared secret (HS256, what ``mint`` signs with). A token
names an ``aud`` and ``iss`` (``hubjobs`` each unless configured), lives at most
HUBJOBS_API_JWT_MAX_LIFETIME_SECONDS, and its times are read with a leeway. A token checked
against a configured key is remembered until its ``exp`` (that key cannot change, and
PyJWT re-parses it every time); against a JWKS, never: a withdrawn key must stop working."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import jwt
from jwt.types import Options

from hubjobs.errors import ConfigurationError, HubJobsError, InvalidInput, Unavailable
from hubjobs.settings import Settings

# The audience and issuer of a token when none is configured.
AUDIENCE = "hubjobs"
ISSUER = "hubjobs"
PEM_ALGORITHMS = ["RS256", "ES256"]
# What a key from a JWKS may sign with: asymmetric algorithms only.
JWKS_ALGORITHMS = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
)
JWKS_CACHE_SECONDS = 300.0
JWKS_TIMEOUT_SECONDS = 5.0
# Tokens remembered as verified (configured keys only); the oldest goes first.
VERIFIED_TOKENS = 1024


class Unauthorized(HubJobsError):
    code = "unauthorized"


def _refused() -> Unauthorized:
    return Unauthorized("the bearer token is not valid")


class _FetchTracking(jwt.PyJWKClient):
    """PyJWT's JWKS client, noting when it last fetched the set."""

    fetched_at = float("-inf")

    def fetch_data(self) -> Any:
        data = super().fetch_data()
        self.fetched_at = time.monotonic()
        return data


class KeySet:
    """An identity provider's signing keys, by key id (``kid``)."""

    def __init__(self, url: str, *, refresh_seconds: float) -> None:
        try:
            self._client = _FetchTracking(
                url,
                cache_jwk_set=True,
                lifespan=JWKS_CACHE_SECONDS,
                timeout=JWKS_TIMEOUT_SECONDS,
                cooldown_duration=0,  # our own rule below: at most one refresh a period
            )
        except jwt.PyJWKClientError:
            raise ConfigurationError("HUBJOBS_API_JWKS_URL must be an http(s) URL") from None
        self._refresh_seconds = refresh_seconds
        self._lock = threading.Lock()

    def _signing_keys(self, *, refresh: bool) -> list[jwt.PyJWK]:
        try:
            return self._client.get_signing_keys(refresh=refresh)
        except jwt.PyJWKClientConnectionError:
            raise Unavailable("the identity provider's keys could not be fetched") from None
        except (jwt.PyJWKClientError, jwt.PyJWKSetError, ValueError):
            # Not JSON, not a key set, or no signing key in it: the provider's trouble.
            raise Unavailable("the identity provider's key set could not be read") from None

    def key_for(self, kid: str) -> jwt.PyJWK:
        """The signing key ``kid`` names; ``Unauthorized`` when the provider has none."""
        with self._lock:
            key = self._client.match_kid(self._signing_keys(refresh=False), kid)
            recently = time.monotonic() - self._client.fetched_at < self._refresh_seconds
            if key is None and not recently:
                key = self._client.match_kid(self._signing_keys(refresh=True), kid)
        if key is None or key.algorithm_name not in JWKS_ALGORITHMS:
            raise _refused()
        return key


class TokenVerifier:
    """Checks bearer tokens against the configured keys, audience and issuer."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        scoped = not settings.api_jwt_allow_unscoped
        self.audience = settings.api_jwt_audience or (AUDIENCE if scoped else None)
        self.issuer = settings.api_jwt_issuer or (ISSUER if scoped else None)
        self.leeway = settings.api_jwt_leeway_seconds
        self.max_lifetime = settings.api_jwt_max_lifetime_seconds
        self.key_set = (
            KeySet(settings.api_jwks_url, refresh_seconds=settings.api_jwks_refresh_seconds)
            if settings.api_jwks_url
            else None
        )
        # token -> (actor, the time its exp ends it); configured keys only (see above).
        self._verified: dict[str, tuple[uuid.UUID, float]] = {}
        self._verified_lock = threading.Lock()

    def _key_and_algorithms(self, token: str) -> tuple[Any, list[str]]:
        if self.key_set is not None:
            try:
                kid = jwt.get_unverified_header(token).get("kid")
            except jwt.PyJWTError:
                raise _refused() from None
            if not isinstance(kid, str) or not kid:
                raise _refused()
            key = self.key_set.key_for(kid)
            return key.key, [str(key.algorithm_name)]
        if self.settings.api_jwt_public_key:
            return self.settings.api_jwt_public_key, PEM_ALGORITHMS
        if self.settings.api_jwt_secret:
            return self.settings.api_jwt_secret.get_secret_value(), ["HS256"]
        raise ConfigurationError(
            "the API has no token key: set HUBJOBS_API_JWKS_URL, HUBJOBS_API_JWT_PUBLIC_KEY "
            "or HUBJOBS_API_JWT_SECRET"
        )

    def actor_of(self, authorization: str | None) -> uuid.UUID:
        """The actor a ``Bearer`` header names, once its signature, expiry, and (when
        configured) audience and issuer check out; its times (``iat``, ``nbf``,
        ``exp``) within HUBJOBS_API_JWT_LEEWAY_SECONDS of this host's clock."""
        if not authorization or not authorization.lower().startswith("bearer "):
            raise Unauthorized("a bearer token is required")
        token = authorization[7:].strip()
        remembered = self._verified.get(token)
        if remembered is not None and time.time() < remembered[1] + self.leeway:
            return remembered[0]
        key, algorithms = self._key_and_algorithms(token)
        required = ["sub", "exp"]
        if self.audience is not None:
            required.append("aud")
        if self.issuer is not None:
            required.append("iss")
        options: Options = {"require": required, "verify_aud": self.audience is not None}
        try:
            claims = jwt.decode(
                token,
                key,
                algorithms=algorithms,
                options=options,
                audience=self.audience,
                issuer=self.issuer,
                leeway=self.leeway,
            )
            actor = uuid.UUID(str(claims["sub"]))
        except (jwt.PyJWTError, ValueError, TypeError):
            raise _refused() from None
        if self._lifetime(claims) > self.max_lifetime:
            raise _refused()
        if self.key_set is None:
            self._remember(token, actor, float(claims["exp"]))
        return actor

    def _lifetime(self, claims: dict[str, Any]) -> float:
        """How long the token is good for: from its ``iat``, or from now (less the
        leeway: its ``exp`` is another clock) without one. PyJWT checked both are
        numbers."""
        if "iat" in claims:
            return float(claims["exp"]) - float(claims["iat"])
        return float(claims["exp"]) - time.time() - self.leeway

    def _remember(self, token: str, actor: uuid.UUID, expires: float) -> None:
        """Until ``expires`` and the leeway (PyJWT refuses a token from then on)."""
        with self._verified_lock:
            while len(self._verified) >= VERIFIED_TOKENS:
                del self._verified[next(iter(self._verified))]
            self._verified[token] = (actor, expires)


def mint(actor_id: uuid.UUID, settings: Settings, *, ttl_seconds: int = 3600) -> str:
    """A token for ``actor_id`` signed with the configured secret (for tools and tests),
    with the configured audience and issuer (``hubjobs`` for each unset); one good for
    longer than the API takes is refused."""
    if settings.api_jwt_secret is None:
        raise ConfigurationError("minting tokens needs HUBJOBS_API_JWT_SECRET")
    if ttl_seconds > settings.api_jwt_max_lifetime_seconds:
        raise InvalidInput(
            f"a token may be good for {settings.api_jwt_max_lifetime_seconds:.0f} s at most "
            "(HUBJOBS_API_JWT_MAX_LIFETIME_SECONDS)",
            code="invalid_ttl",
        )
    now = int(time.time())
    claims: dict[str, Any] = {
        "sub": str(actor_id),
        "iat": now,
        "exp": now + ttl_seconds,
        "iss": settings.api_jwt_issuer or ISSUER,
        "aud": settings.api_jwt_audience or AUDIENCE,
    }
    return jwt.encode(claims, settings.api_jwt_secret.get_secret_value(), algorithm="HS256")
