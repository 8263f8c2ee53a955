"""API tokens on the real servers: an audience and an issuer always (the configured
ones, else hubjobs' own), a bounded lifetime (a token until the year 5138 refused, by a
`hubjobs api` process too), and an identity provider's rotating keys (JWKS) served by
a small HTTP server on loopback inside the test: a key set that rotates from key A to
key B, a key never published, made-up key ids that must not turn into a flood of
fetches, a symmetric key slipped into the set, and a provider that is down or serves
garbage (503, not 401 or 500)."""

from __future__ import annotations

import hashlib
import hmac
import json
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
import pytest_asyncio
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from pydantic import SecretStr
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client

from hubjobs.devstack import embedded
from hubjobs.devstack.demo_data import DemoCourse
from hubjobs.errors import ConfigurationError, InvalidInput
from hubjobs.settings import Settings
from starter.api import create_app
from starter.api.tokens import mint
from starter.client import HubJobsClient
from tests.support.faketime import skewed
from tests.support.hostile import SAMPLES
from tests.support.processes import api_process, hubjobs_env

SECRET = "token-test-secret-" + "x" * 32
# The audience and issuer the identity provider's tokens carry, as the API is told.
IDP_SCOPE = {"aud": "hubjobs-api", "iss": "https://id.example.test/"}


class KeyServer:
    """A JWKS endpoint on 127.0.0.1: serves whatever ``document`` holds (or answers
    ``status``), and counts the fetches."""

    def __init__(self) -> None:
        self.document: Any = {"keys": []}
        self.status = 200
        self.fetches = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                server.fetches += 1
                body = (
                    server.document
                    if isinstance(server.document, bytes)
                    else json.dumps(server.document).encode()
                )
                self.send_response(server.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/.well-known/jwks.json"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def publish(self, *keys: dict[str, Any]) -> None:
        self.document = {"keys": list(keys)}

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class SigningKey:
    def __init__(self, kid: str, kind: str = "ec") -> None:
        self.kid = kid
        if kind == "rsa":
            self.private: Any = rsa.generate_private_key(public_exponent=65537, key_size=2048)
            self.algorithm = "RS256"
            jwk_json = jwt.algorithms.RSAAlgorithm.to_jwk(self.private.public_key())
        else:
            self.private = ec.generate_private_key(ec.SECP256R1())
            self.algorithm = "ES256"
            jwk_json = jwt.algorithms.ECAlgorithm.to_jwk(self.private.public_key())
        self.jwk: dict[str, Any] = {**json.loads(jwk_json), "kid": kid, "use": "sig"}

    def token(self, actor: uuid.UUID, **claims: Any) -> str:
        now = int(time.time())
        body = {"sub": str(actor), "iat": now, "exp": now + 300, **IDP_SCOPE, **claims}
        return jwt.encode(body, self.private, algorithm=self.algorithm, headers={"kid": self.kid})


@pytest.fixture
def key_server() -> Iterator[KeyServer]:
    server = KeyServer()
    yield server
    server.close()


def _app_client(settings: Settings, temporal: Client, engine: AsyncEngine) -> httpx.AsyncClient:
    app = create_app(settings, client=HubJobsClient(temporal, engine, settings))
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://hubjobs")


@pytest_asyncio.fixture
async def jwks_api(
    settings: Settings, temporal: Client, engine: AsyncEngine, key_server: KeyServer
) -> AsyncIterator[httpx.AsyncClient]:
    configured = settings.model_copy(
        update={
            "api_jwks_url": key_server.url,
            "api_jwks_refresh_seconds": 0.0,
            "api_jwt_audience": IDP_SCOPE["aud"],
            "api_jwt_issuer": IDP_SCOPE["iss"],
        }
    )
    async with _app_client(configured, temporal, engine) as client:
        yield client


async def _status(http: httpx.AsyncClient, course: DemoCourse, token: str) -> tuple[int, str]:
    answer = await http.get(
        f"/workspaces/{course.workspace_id}/jobs", headers={"Authorization": f"Bearer {token}"}
    )
    code = answer.json()["error"]["code"] if answer.status_code >= 400 else ""
    return answer.status_code, code


async def test_a_rotated_key_verifies_and_an_unpublished_one_never_does(
    jwks_api: httpx.AsyncClient, key_server: KeyServer, course: DemoCourse
) -> None:
    a, b, never = SigningKey("key-a", "rsa"), SigningKey("key-b"), SigningKey("key-never")
    key_server.publish(a.jwk)
    assert await _status(jwks_api, course, a.token(course.actor_id)) == (200, "")
    assert key_server.fetches == 1
    assert await _status(jwks_api, course, a.token(course.actor_id)) == (200, "")
    assert key_server.fetches == 1  # cached

    # The provider rotates: B is published, A withdrawn. B's first token finds no B in
    # the cached set and re-reads it once.
    key_server.publish(b.jwk)
    assert await _status(jwks_api, course, b.token(course.actor_id)) == (200, "")
    assert key_server.fetches == 2
    assert await _status(jwks_api, course, b.token(course.actor_id)) == (200, "")
    assert key_server.fetches == 2
    # A is gone from the set; a key never published never verifies, nor does a token
    # naming B's key id but signed by another key.
    assert await _status(jwks_api, course, a.token(course.actor_id)) == (401, "unauthorized")
    assert await _status(jwks_api, course, never.token(course.actor_id)) == (401, "unauthorized")
    forged = jwt.encode(
        {"sub": str(course.actor_id), "exp": int(time.time()) + 60, **IDP_SCOPE},
        never.private,
        algorithm="ES256",
        headers={"kid": "key-b"},
    )
    assert await _status(jwks_api, course, forged) == (401, "unauthorized")
    no_kid = jwt.encode(
        {"sub": str(course.actor_id), "exp": int(time.time()) + 60, **IDP_SCOPE},
        b.private,
        algorithm="ES256",
    )
    assert await _status(jwks_api, course, no_kid) == (401, "unauthorized")


async def test_made_up_key_ids_do_not_flood_the_provider(
    settings: Settings,
    temporal: Client,
    engine: AsyncEngine,
    key_server: KeyServer,
    course: DemoCourse,
) -> None:
    a = SigningKey("key-a")
    key_server.publish(a.jwk)
    configured = settings.model_copy(
        update={
            "api_jwks_url": key_server.url,
            "api_jwks_refresh_seconds": 60.0,
            "api_jwt_audience": IDP_SCOPE["aud"],
            "api_jwt_issuer": IDP_SCOPE["iss"],
        }
    )
    async with _app_client(configured, temporal, engine) as http:
        assert await _status(http, course, a.token(course.actor_id)) == (200, "")
        for n in range(20):
            made_up = SigningKey(f"made-up-{n}")
            assert await _status(http, course, made_up.token(course.actor_id)) == (
                401,
                "unauthorized",
            )
    assert key_server.fetches == 1  # at most one refresh a minute, and none was due


async def test_a_symmetric_key_in_the_set_is_never_used(
    jwks_api: httpx.AsyncClient, key_server: KeyServer, course: DemoCourse
) -> None:
    """Algorithm confusion: an HS256 token 'signed' with a key the provider published."""
    secret = b"published-to-everyone-" + b"x" * 32
    key_server.publish(
        SigningKey("key-a").jwk,
        {"kty": "oct", "kid": "shared", "k": jwt.utils.base64url_encode(secret).decode()},
    )
    token = jwt.encode(
        {"sub": str(course.actor_id), "exp": int(time.time()) + 60, **IDP_SCOPE},
        secret,
        algorithm="HS256",
        headers={"kid": "shared"},
    )
    assert await _status(jwks_api, course, token) == (401, "unauthorized")


@pytest.mark.parametrize("trouble", ["http_500", "not_json", "no_keys", "not_an_object", "down"])
async def test_a_provider_in_trouble_is_unavailable_not_unauthorized(
    jwks_api: httpx.AsyncClient, key_server: KeyServer, course: DemoCourse, trouble: str
) -> None:
    a = SigningKey("key-a")
    if trouble == "http_500":
        key_server.status = 500
    elif trouble == "not_json":
        key_server.document = b"<html>maintenance</html>"
    elif trouble == "no_keys":
        key_server.publish()
    elif trouble == "not_an_object":
        key_server.document = [a.jwk]
    else:
        key_server.close()
    answer = await jwks_api.get(
        f"/workspaces/{course.workspace_id}/jobs",
        headers={"Authorization": f"Bearer {a.token(course.actor_id)}"},
    )
    assert answer.status_code == 503, answer.text
    assert answer.json()["error"]["code"] == "unavailable"


async def test_audience_and_issuer_are_checked_when_set(
    settings: Settings, temporal: Client, engine: AsyncEngine, course: DemoCourse
) -> None:
    configured = settings.model_copy(
        update={
            "api_jwt_secret": SecretStr(SECRET),
            "api_jwt_audience": "hubjobs-api",
            "api_jwt_issuer": "https://id.example.test/",
        }
    )
    actor = course.actor_id

    def token(**claims: Any) -> str:
        body = {"sub": str(actor), "exp": int(time.time()) + 60, **claims}
        return jwt.encode({k: v for k, v in body.items() if v is not None}, SECRET)

    good = {"aud": "hubjobs-api", "iss": "https://id.example.test/"}
    async with _app_client(configured, temporal, engine) as http:
        assert await _status(http, course, mint(actor, configured)) == (200, "")
        assert await _status(http, course, token(**good)) == (200, "")
        assert await _status(http, course, token(**{**good, "aud": ["other", "hubjobs-api"]})) == (
            200,
            "",
        )
        for bad in (
            {**good, "aud": None},
            {**good, "aud": "another-api"},
            {**good, "iss": None},
            {**good, "iss": "https://evil.example.test/"},
        ):
            assert await _status(http, course, token(**bad)) == (401, "unauthorized"), bad

    # Unset, each must be hubjobs' own (what `hubjobs token` mints): a token for another
    # service, from another issuer, or with neither, is refused.
    plain = settings.model_copy(update={"api_jwt_secret": SecretStr(SECRET)})
    async with _app_client(plain, temporal, engine) as http:
        assert await _status(http, course, mint(actor, plain)) == (200, "")
        assert await _status(http, course, token(aud="hubjobs", iss="hubjobs")) == (200, "")
        for bad in (
            {"aud": "other-service", "iss": "evil"},
            {"aud": "other-service", "iss": "hubjobs"},
            {"aud": "hubjobs", "iss": "evil"},
            {},
        ):
            assert await _status(http, course, token(**bad)) == (401, "unauthorized"), bad
    # Unless told to take tokens without them: then an unset one is not checked.
    unscoped = plain.model_copy(update={"api_jwt_allow_unscoped": True})
    async with _app_client(unscoped, temporal, engine) as http:
        assert await _status(http, course, token(aud="anything", iss="anyone")) == (200, "")
        assert await _status(http, course, token()) == (200, "")


async def test_a_token_good_for_longer_than_the_bound_is_refused(
    settings: Settings, temporal: Client, engine: AsyncEngine, course: DemoCourse
) -> None:
    """exp - iat (or exp - now without iat) over HUBJOBS_API_JWT_MAX_LIFETIME_SECONDS
    (24 h): refused however it is signed; `hubjobs token` will not mint one."""
    configured = settings.model_copy(update={"api_jwt_secret": SecretStr(SECRET)})
    now = int(time.time())
    year_5138 = 99_999_999_999

    def token(**claims: Any) -> str:
        body = {"sub": str(course.actor_id), "aud": "hubjobs", "iss": "hubjobs", **claims}
        return jwt.encode(body, SECRET)

    day = 24 * 3600
    async with _app_client(configured, temporal, engine) as http:
        for good in ({"iat": now, "exp": now + day}, {"exp": now + day - 120}):
            assert await _status(http, course, token(**good)) == (200, ""), good
        for endless in (
            {"iat": now, "exp": year_5138},
            {"exp": year_5138},
            {"iat": now, "exp": now + day + 1},
            {"iat": now - 30 * day, "exp": now + 60},  # issued long ago, for a month
            {"exp": now + day + 120},
        ):
            assert await _status(http, course, token(**endless)) == (401, "unauthorized"), endless
    # A bound of an hour: a token of two hours is refused, minting one too.
    hour = configured.model_copy(update={"api_jwt_max_lifetime_seconds": 3600})
    async with _app_client(hour, temporal, engine) as http:
        assert await _status(http, course, token(iat=now, exp=now + 7200)) == (401, "unauthorized")
        assert await _status(http, course, mint(course.actor_id, hour)) == (200, "")
    with pytest.raises(InvalidInput) as refused:
        mint(course.actor_id, hour, ttl_seconds=7200)
    assert refused.value.code == "invalid_ttl"


async def test_a_production_api_refuses_foreign_and_endless_tokens(
    settings: Settings, course: DemoCourse, tmp_path: Path
) -> None:
    """`hubjobs api` as production runs it (a process, HUBJOBS_API_JWT_SECRET and nothing
    else): its own tokens pass; one for another service from another issuer, one with
    neither, and one good until the year 5138 are refused, whoever signed them with
    the secret. Before: all three taken, 200."""
    port = embedded.choose_port(0)
    env = hubjobs_env(settings, tmp_path, api_jwt_secret=SECRET, api_port=port)
    now = int(time.time())
    actor = str(course.actor_id)
    foreign = {"sub": actor, "iat": now, "exp": now + 60, "aud": "other-service", "iss": "evil"}
    bare = {"sub": actor, "iat": now, "exp": now + 60}
    endless = {"sub": actor, "iat": now, "exp": 99_999_999_999, "aud": "hubjobs", "iss": "hubjobs"}
    own = mint(course.actor_id, settings.model_copy(update={"api_jwt_secret": SecretStr(SECRET)}))
    with api_process(env, tmp_path / "api.log"):
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            assert await _status(http, course, own) == (200, "")
            for claims in (foreign, bare, endless):
                refused = await _status(http, course, jwt.encode(claims, SECRET))
                assert refused == (401, "unauthorized"), claims


def test_hubjobs_token_mints_with_the_configured_audience_and_issuer(
    settings: Settings, tmp_path: Path
) -> None:
    actor = uuid.uuid4()
    env = hubjobs_env(
        settings,
        tmp_path,
        api_jwt_secret=SECRET,
        api_jwt_audience="hubjobs-api",
        api_jwt_issuer="https://id.example.test/",
    )
    done = subprocess.run(
        [str(Path(sys.executable).parent / "hubjobs"), "token", "--actor", str(actor), "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    token = json.loads(done.stdout)["token"]
    assert jwt.get_unverified_header(token)["alg"] == "HS256"
    claims = jwt.decode(
        token,
        SECRET,
        algorithms=["HS256"],
        audience="hubjobs-api",
        issuer="https://id.example.test/",
    )
    assert claims["sub"] == str(actor)


def test_a_jwks_url_that_is_not_http_is_a_configuration_error(settings: Settings) -> None:

    for url in ("file:///etc/passwd", "ftp://example.test/keys"):
        with pytest.raises(ConfigurationError):
            create_app(settings.model_copy(update={"api_jwks_url": url}))


async def test_hostile_tokens_are_refused_without_fetching_for_each(
    jwks_api: httpx.AsyncClient, key_server: KeyServer, course: DemoCourse
) -> None:
    """Garbage, hostile key ids, ``alg: none``, and the classic confusion (HS256 keyed
    with the provider's public key): 401 each, never 5xx, and no token that cannot
    name a key makes the API fetch anything."""

    a = SigningKey("key-a", "rsa")
    key_server.publish(a.jwk)
    assert await _status(jwks_api, course, a.token(course.actor_id)) == (200, "")
    public_pem = a.private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    now = int(time.time())
    claims = {"sub": str(course.actor_id), "exp": now + 60}

    def unsigned(header: dict[str, Any]) -> str:
        def part(data: dict[str, Any]) -> str:
            return jwt.utils.base64url_encode(json.dumps(data).encode()).decode()

        return f"{part(header)}.{part(claims)}."

    def hmac_keyed_with(secret: bytes, header: dict[str, Any]) -> str:
        """What an attacker builds by hand (PyJWT itself refuses a PEM as HMAC key)."""
        signing_input = unsigned(header)[:-1]
        digest = hmac.new(secret, signing_input.encode(), hashlib.sha256).digest()
        return f"{signing_input}.{jwt.utils.base64url_encode(digest).decode()}"

    hostile = [
        *SAMPLES[:12],
        "a.b.c",
        "....",
        unsigned({"alg": "none", "kid": "key-a"}),
        unsigned({"alg": "RS256", "kid": {"nested": 1}}),
        unsigned({"alg": "RS256", "kid": 123}),
        unsigned({"alg": "RS256", "kid": "key-a\u202e"}),
        unsigned({"alg": "RS256", "kid": "../../etc/passwd"}),
        hmac_keyed_with(public_pem, {"alg": "HS256", "typ": "JWT", "kid": "key-a"}),
    ]
    fetches = key_server.fetches
    for token in hostile:
        header = ("Bearer " + token).encode("utf-8", "surrogatepass")
        for forbidden in (b"\r", b"\n", b"\x00"):
            header = header.replace(forbidden, b"")
        answer = await jwks_api.get(
            f"/workspaces/{course.workspace_id}/jobs", headers=[(b"Authorization", header)]
        )
        assert answer.status_code == 401, (token[:40], answer.text)
    # Key ids that name nothing may re-read the set (refresh period 0 here), but a token
    # that names no key id at all never does.
    assert key_server.fetches - fetches <= 4


def _minted_at(settings: Settings, home: Path, actor: uuid.UUID, offset: str) -> str:
    """A token minted by ``hubjobs token`` on a host whose clock is ``offset`` off."""
    env = skewed(hubjobs_env(settings, home, api_jwt_secret=SECRET), offset)
    done = subprocess.run(
        [str(Path(sys.executable).parent / "hubjobs"), "token", "--actor", str(actor), "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return str(json.loads(done.stdout)["token"])


async def test_a_token_from_a_clock_seconds_off_is_accepted_one_past_the_leeway_is_not(
    settings: Settings, course: DemoCourse, tmp_path: Path
) -> None:
    """``hubjobs token`` run under libfaketime, its clock 5 s or 30 s ahead (``iat`` in
    the API's future), or an hour and 5 s behind (its hour-long token expired 5 s ago):
    the API, a process of its own with the default leeway of 60 s, takes each, twice
    (the second time from its memory of verified tokens); 90 s either way is refused.
    Each token is minted just before it is used. Before: all refused, 401."""
    port = embedded.choose_port(0)
    env = hubjobs_env(settings, tmp_path, api_jwt_secret=SECRET, api_port=port)
    offsets = {"+5s": 200, "+30s": 200, "-3605s": 200, "+90s": 401, "-3690s": 401}
    answers: dict[str, list[int]] = {}
    with api_process(env, tmp_path / "api.log"):
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            for offset in offsets:
                token = _minted_at(settings, tmp_path, course.actor_id, offset)
                answers[offset] = [(await _status(http, course, token))[0] for _ in range(2)]
    assert answers == {offset: [status, status] for offset, status in offsets.items()}


async def test_a_key_sets_tokens_get_the_same_leeway(
    jwks_api: httpx.AsyncClient, key_server: KeyServer, course: DemoCourse
) -> None:
    """The same leeway for a token an identity provider signed: ``iat`` and ``nbf`` 5 s
    ahead and ``exp`` 5 s past pass, 75 s do not."""
    key = SigningKey("key-skew")
    key_server.publish(key.jwk)
    now = int(time.time())
    actor = course.actor_id
    within = [
        key.token(actor, iat=now + 5),
        key.token(actor, nbf=now + 5),
        key.token(actor, iat=now - 300, exp=now - 5),
    ]
    past = [
        key.token(actor, iat=now + 75),
        key.token(actor, nbf=now + 75),
        key.token(actor, iat=now - 300, exp=now - 75),
    ]
    assert [(await _status(jwks_api, course, t))[0] for t in within] == [200, 200, 200]
    assert [(await _status(jwks_api, course, t))[0] for t in past] == [401, 401, 401]
