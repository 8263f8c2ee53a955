"""The payload codec: every payload hubjobs sends through Temporal is encrypted with
AES-GCM before it leaves the process, so Temporal's history holds ciphertext.

A payload becomes ``nonce + AES-GCM(serialized payload)``, its key id in the metadata and
in the associated data (it cannot be passed off as another key's). HUBJOBS_CODEC_KEY_ID
encrypts, every key of HUBJOBS_CODEC_KEYS decrypts: rotation keeps old keys as long as
histories written with them may be read. A plain payload decodes as itself.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from temporalio.api.common.v1 import Payload
from temporalio.converter import PayloadCodec

from hubjobs.errors import ConfigurationError, InvalidInput
from hubjobs.settings import Settings

ENCODING = b"binary/encrypted"
KEY_ID = "encryption-key-id"
NONCE_BYTES = 12
KEY_SIZES = (16, 24, 32)
KEY_ID_PATTERN = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


class CodecError(InvalidInput):
    """A payload that cannot be decrypted: an unknown key id, or data that is not what
    the key encrypted. The message names neither the key nor the data."""

    code = "undecodable_payload"


@dataclass(frozen=True)
class CodecKeys:
    current: str
    keys: Mapping[str, AESGCM]

    @classmethod
    def parse(cls, text: str, current: str | None) -> CodecKeys:
        """``kid:base64key,kid2:base64key`` and the key id that encrypts (may be omitted
        when there is one key). Refusals name key ids only, never a key."""
        keys: dict[str, AESGCM] = {}
        for entry in (part.strip() for part in text.split(",")):
            if not entry:
                continue
            kid, sep, encoded = entry.partition(":")
            kid = kid.strip()
            if not sep or not KEY_ID_PATTERN.match(kid):
                raise ConfigurationError(
                    "HUBJOBS_CODEC_KEYS must be comma-separated kid:base64key entries, each "
                    "key id 1 to 64 of A-Z a-z 0-9 . _ -"
                )
            try:
                key = base64.b64decode(encoded.strip(), validate=True)
            except (binascii.Error, ValueError):
                raise ConfigurationError(
                    f"HUBJOBS_CODEC_KEYS: the key of {kid} is not base64"
                ) from None
            if len(key) not in KEY_SIZES:
                raise ConfigurationError(
                    f"HUBJOBS_CODEC_KEYS: the key of {kid} must be 16, 24 or 32 bytes"
                )
            if kid in keys:
                raise ConfigurationError(f"HUBJOBS_CODEC_KEYS: key id {kid} is listed twice")
            keys[kid] = AESGCM(key)
        if not keys:
            raise ConfigurationError("the payload codec is on but HUBJOBS_CODEC_KEYS is empty")
        if current is None:
            if len(keys) != 1:
                raise ConfigurationError(
                    "HUBJOBS_CODEC_KEY_ID must name the key that encrypts (several are listed)"
                )
            current = next(iter(keys))
        if current not in keys:
            raise ConfigurationError("HUBJOBS_CODEC_KEY_ID names no key of HUBJOBS_CODEC_KEYS")
        return cls(current, keys)

    @classmethod
    def of(cls, settings: Settings) -> CodecKeys:
        if settings.codec_keys is None:
            raise ConfigurationError("the payload codec is on but HUBJOBS_CODEC_KEYS is unset")
        return cls.parse(settings.codec_keys.get_secret_value(), settings.codec_key_id)


def new_key_entry(key_id: str, size: int = 32) -> str:
    """A fresh ``kid:base64key`` entry for HUBJOBS_CODEC_KEYS (AES-256 by default)."""
    if not KEY_ID_PATTERN.match(key_id):
        raise InvalidInput("a key id is 1 to 64 of A-Z a-z 0-9 . _ -", code="invalid_key_id")
    return f"{key_id}:{base64.b64encode(os.urandom(size)).decode()}"


class AesGcmCodec(PayloadCodec):
    def __init__(self, keys: CodecKeys) -> None:
        self.keys = keys

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self.encrypt(payload) for payload in payloads]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self.decrypt(payload) for payload in payloads]

    def encrypt(self, payload: Payload) -> Payload:
        kid = self.keys.current
        nonce = os.urandom(NONCE_BYTES)
        sealed = self.keys.keys[kid].encrypt(nonce, payload.SerializeToString(), kid.encode())
        return Payload(metadata={"encoding": ENCODING, KEY_ID: kid.encode()}, data=nonce + sealed)

    def decrypt(self, payload: Payload) -> Payload:
        if payload.metadata.get("encoding") != ENCODING:
            return payload
        kid = payload.metadata.get(KEY_ID, b"").decode(errors="replace")
        key = self.keys.keys.get(kid)
        if key is None:
            raise CodecError("the payload was encrypted with a key this process does not have")
        data = payload.data
        try:
            plain = key.decrypt(data[:NONCE_BYTES], data[NONCE_BYTES:], kid.encode())
        except (InvalidTag, ValueError):  # ValueError: too short to hold a nonce
            raise CodecError("the payload does not decrypt with its key") from None
        decoded = Payload()
        try:
            decoded.ParseFromString(plain)
        except Exception:  # protobuf's DecodeError: not a payload under a valid tag
            raise CodecError("the payload does not decrypt to a payload") from None
        return decoded
