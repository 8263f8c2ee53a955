"""The AES-GCM payload codec with no server: round trips, rotation by key id, payloads
that are not encrypted passing through, tampering refused, and key settings refused
without ever quoting a key."""

from __future__ import annotations

import base64

import pytest
from temporalio.api.common.v1 import Payload

from hubjobs.errors import ConfigurationError
from hubjobs.settings import Settings
from hubjobs.temporal.client import data_converter
from hubjobs.temporal.codec import (
    ENCODING,
    KEY_ID,
    AesGcmCodec,
    CodecError,
    CodecKeys,
    new_key_entry,
)
from tests.support.codec_keys import ENTRIES, KEYS, NEW_KEY_ID, OLD_KEY_ID, with_codec

SECRET_WORD = "Quillonwort"


async def test_a_value_round_trips_and_its_payload_holds_nothing_plain() -> None:
    converter = data_converter(with_codec(Settings()))
    [payload] = await converter.encode([{"tag": SECRET_WORD}])
    assert payload.metadata["encoding"] == ENCODING
    assert payload.metadata[KEY_ID] == NEW_KEY_ID.encode()
    assert SECRET_WORD.encode() not in payload.SerializeToString()
    assert await converter.decode([payload], [dict]) == [{"tag": SECRET_WORD}]
    # The same value twice: two different ciphertexts (a fresh nonce each time).
    [again] = await converter.encode([{"tag": SECRET_WORD}])
    assert again.data != payload.data


async def test_rotation_an_old_key_ids_payload_decodes_after_a_new_key_becomes_current() -> None:
    old = data_converter(with_codec(Settings(), current=OLD_KEY_ID))
    new = data_converter(with_codec(Settings(), current=NEW_KEY_ID))
    [written_before] = await old.encode([{"tag": SECRET_WORD}])
    assert written_before.metadata[KEY_ID] == OLD_KEY_ID.encode()
    assert await new.decode([written_before], [dict]) == [{"tag": SECRET_WORD}]
    [written_after] = await new.encode([{"tag": SECRET_WORD}])
    assert written_after.metadata[KEY_ID] == NEW_KEY_ID.encode()
    # Once the old key is dropped, what it encrypted no longer decodes: keep it while
    # histories written with it may be read.
    only_new = with_codec(Settings(), keys=f"{NEW_KEY_ID}:{KEYS[NEW_KEY_ID]}")
    with pytest.raises(CodecError, match="key this process does not have"):
        await data_converter(only_new).decode([written_before], [dict])


async def test_plain_payloads_pass_and_tampered_ones_are_refused() -> None:
    codec = AesGcmCodec(CodecKeys.parse(ENTRIES, NEW_KEY_ID))
    plain = Payload(metadata={"encoding": b"json/plain"}, data=b'{"tag": "x"}')
    assert await codec.decode([plain]) == [plain]
    [sealed] = await codec.encode([plain])
    flipped = bytearray(sealed.data)
    flipped[-1] ^= 1
    tampered = Payload(metadata=dict(sealed.metadata), data=bytes(flipped))
    with pytest.raises(CodecError, match="does not decrypt"):
        await codec.decode([tampered])
    # The key id is bound to the ciphertext: relabelled as the other key's, it fails.
    relabelled = Payload(
        metadata={**sealed.metadata, KEY_ID: OLD_KEY_ID.encode()}, data=sealed.data
    )
    with pytest.raises(CodecError):
        await codec.decode([relabelled])
    short = Payload(metadata=dict(sealed.metadata), data=b"\x00" * 4)
    with pytest.raises(CodecError):
        await codec.decode([short])


@pytest.mark.parametrize(
    ("keys", "current", "problem"),
    [
        ("", None, "empty"),
        ("k1", None, "kid:base64key"),
        ("bad id:AAAA", None, "kid:base64key"),
        ("k1:not-base64!", None, "not base64"),
        (f"k1:{base64.b64encode(b'short').decode()}", None, "16, 24 or 32 bytes"),
        (f"{ENTRIES},{ENTRIES}", NEW_KEY_ID, "listed twice"),
        (ENTRIES, None, "must name the key"),
        (ENTRIES, "k9", "names no key"),
    ],
)
def test_key_settings_are_refused_without_quoting_a_key(
    keys: str, current: str | None, problem: str
) -> None:
    with pytest.raises(ConfigurationError, match=problem) as refused:
        CodecKeys.parse(keys, current)
    for key in KEYS.values():
        assert key not in refused.value.message


def test_a_new_key_entry_parses_and_a_codec_on_without_keys_is_refused() -> None:
    entry = new_key_entry("2026-05")
    keys = CodecKeys.parse(entry, None)
    assert keys.current == "2026-05"
    assert len(base64.b64decode(entry.split(":", 1)[1])) == 32
    with pytest.raises(ConfigurationError, match="HUBJOBS_CODEC_KEYS is unset"):
        data_converter(Settings(payload_codec=True))
