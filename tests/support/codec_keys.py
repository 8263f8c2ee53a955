"""The payload codec's keys in tests: fixed, public, test-only (the recorded encrypted
history in tests/histories/ was written with them, and the replay test reads it)."""

from __future__ import annotations

import base64

from pydantic import SecretStr

from hubjobs.settings import Settings

OLD_KEY_ID, NEW_KEY_ID = "test-2026-01", "test-2026-02"
KEYS = {
    OLD_KEY_ID: base64.b64encode(bytes(range(32))).decode(),
    NEW_KEY_ID: base64.b64encode(bytes(range(100, 132))).decode(),
}
ENTRIES = ",".join(f"{kid}:{key}" for kid, key in KEYS.items())


def with_codec(settings: Settings, current: str = NEW_KEY_ID, keys: str = ENTRIES) -> Settings:
    """``settings`` with the payload codec on, encrypting with ``current``."""
    return settings.model_copy(
        update={"payload_codec": True, "codec_keys": SecretStr(keys), "codec_key_id": current}
    )


def codec_env(current: str = NEW_KEY_ID) -> dict[str, str]:
    """The same as ``HUBJOBS_*`` variables, for processes."""
    return {
        "HUBJOBS_PAYLOAD_CODEC": "true",
        "HUBJOBS_CODEC_KEYS": ENTRIES,
        "HUBJOBS_CODEC_KEY_ID": current,
    }
