"""The secrets a worker and the API refuse to start with: the token secret, the webhooks'
signing secret (HMAC-SHA256 keys: RFC 7518 wants 32 bytes at least) and the codec's AES
keys. A placeholder or a guessable secret is refused in one line naming the setting,
never its value.
"""

from __future__ import annotations

import re

from pydantic import SecretStr

from hubjobs.errors import ConfigurationError
from hubjobs.settings import Settings
from hubjobs.temporal.codec import CodecKeys

MIN_SECRET_BYTES = 32
# A secret with fewer distinct characters than this is a pattern, not random bytes.
MIN_DISTINCT_CHARACTERS = 8
PLACEHOLDER = re.compile(
    r"change[-_ ]?me|replace[-_ ]?me|placeholder|your[-_ ]?secret|example|secret[-_ ]?here",
    re.IGNORECASE,
)
HOW_TO_MAKE_ONE = "python3 -c 'import secrets; print(secrets.token_urlsafe(32))'"


def weakness(secret: str) -> str | None:
    """Why ``secret`` will not do, or None."""
    if PLACEHOLDER.search(secret):
        return "is a placeholder"
    if len(secret.encode()) < MIN_SECRET_BYTES:
        return f"is shorter than {MIN_SECRET_BYTES} bytes"
    if len(set(secret)) < MIN_DISTINCT_CHARACTERS:
        return "is not random (too few distinct characters)"
    return None


def refuse_weak_secrets(settings: Settings) -> None:
    """Raises ConfigurationError naming the first setting whose secret will not do."""
    shared: tuple[tuple[str, SecretStr | None], ...] = (
        ("HUBJOBS_API_JWT_SECRET", settings.api_jwt_secret),
        ("HUBJOBS_WEBHOOK_SECRET", settings.webhook_secret),
    )
    for name, secret in shared:
        why = weakness(secret.get_secret_value()) if secret is not None else None
        if why is not None:
            raise ConfigurationError(
                f"{name} {why}: set it to {MIN_SECRET_BYTES} or more random bytes "
                f"(`{HOW_TO_MAKE_ONE}`)"
            )
    if settings.payload_codec or settings.codec_keys is not None:
        CodecKeys.of(settings)  # names HUBJOBS_CODEC_KEYS (or _KEY_ID) when it will not do
