"""The operator page as the API serves it, without servers: its three files with a
Content-Security-Policy that runs no inline script, markup with no inline script or
handler, a script that never parses data as markup, the files in the package's data;
and the sign-in by link: a code good once for the profile's actor, kept hashed; no token
without one; the route absent whenever a real token key is configured, and answering
only on loopback, to the page's own origin."""

from __future__ import annotations

import json
import re
import stat
import tomllib
import uuid
from collections.abc import AsyncIterator
from html.parser import HTMLParser
from pathlib import Path

import httpx
import pytest
import pytest_asyncio
from pydantic import SecretStr

from hubjobs.devstack.login_codes import LOGIN_CODES_FILE, issue
from hubjobs.home import PROFILE_FILE
from hubjobs.settings import DEV_SECRET_FILE, Settings
from starter.api.app import create_app
from starter.api.operator_page import CONTENT_SECURITY_POLICY, FILES, page_file
from starter.api.tokens import TokenVerifier

ROOT = Path(__file__).resolve().parents[2]
ACTOR, WORKSPACE = uuid.uuid4(), uuid.uuid4()


def dev_home(tmp_path: Path) -> Path:
    """A home as `hubjobs up` and `hubjobs demo` leave it: the secret, the profile."""
    (tmp_path / DEV_SECRET_FILE).write_text("development-secret-" + "x" * 32 + "\n")
    (tmp_path / PROFILE_FILE).write_text(
        json.dumps({"actor_id": str(ACTOR), "workspace_id": str(WORKSPACE)})
    )
    return tmp_path


@pytest_asyncio.fixture
async def dev_api(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(Settings(home=dev_home(tmp_path)))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:8080"
    ) as client:
        yield client


async def test_each_file_comes_with_the_policy(dev_api: httpx.AsyncClient) -> None:
    assert "'unsafe-inline'" not in CONTENT_SECURITY_POLICY
    assert "'unsafe-eval'" not in CONTENT_SECURITY_POLICY
    assert "script-src 'self'" in CONTENT_SECURITY_POLICY
    assert "frame-ancestors 'none'" in CONTENT_SECURITY_POLICY
    for path, media in (
        ("/operator/", "text/html"),
        ("/operator/app.js", "text/javascript"),
        ("/operator/app.css", "text/css"),
        ("/operator/favicon.svg", "image/svg+xml"),
    ):
        answer = await dev_api.get(path)
        assert answer.status_code == 200, path
        assert answer.headers["content-type"].startswith(media)
        assert answer.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
        assert answer.headers["x-content-type-options"] == "nosniff"
        assert answer.headers["x-frame-options"] == "DENY"
        assert "set-cookie" not in answer.headers
    moved = await dev_api.get("/operator")
    assert (moved.status_code, moved.headers["location"]) == (308, "/operator/")
    # Not the API: none of the page's routes is in the OpenAPI document.
    paths = (await dev_api.get("/openapi.json")).json()["paths"]
    assert not [path for path in paths if path.startswith("/operator")]


async def test_a_file_unchanged_since_the_last_load_is_a_304(dev_api: httpx.AsyncClient) -> None:
    """The browser asks again each load (no-cache); a file it holds is answered 304 with
    no body, the policy still on it; one it holds an old copy of comes whole."""
    first = await dev_api.get("/operator/app.js")
    tag = first.headers["etag"]
    assert first.headers["cache-control"] == "no-cache"
    again = await dev_api.get("/operator/app.js", headers={"If-None-Match": tag})
    assert (again.status_code, again.content, again.headers["etag"]) == (304, b"", tag)
    assert again.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    stale = await dev_api.get("/operator/app.js", headers={"If-None-Match": '"an-old-copy"'})
    assert (stale.status_code, stale.content) == (200, first.content)
    other = await dev_api.get("/operator/app.css", headers={"If-None-Match": tag})
    assert other.status_code == 200 and other.headers["etag"] != tag


class Markup(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.scripts: list[dict[str, str | None]] = []
        self.inline: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "script":
            self.scripts.append(dict(attrs))
        self.inline += [name for name, _ in attrs if name.startswith("on") or name == "style"]

    def handle_data(self, data: str) -> None:
        if self.scripts and self.scripts[-1].get("src") is None and data.strip():
            self.inline.append("script body")


def test_the_markup_has_no_inline_script_and_the_script_no_markup_parsing() -> None:
    markup = Markup()
    markup.feed(page_file("index.html").decode())
    assert markup.scripts == [{"type": "module", "src": "app.js"}]
    assert markup.inline == []
    script = page_file("app.js").decode()
    for sink in (
        "innerHTML",
        "outerHTML",
        "insertAdjacentHTML",
        "document.write",
        "eval(",
        "new Function",
        "document.cookie",
    ):
        assert sink not in script, sink
    # localStorage outlives the tab: it holds the theme chosen, nothing else.
    kept = re.findall(r"localStorage\.\w+\([^,)]*", script)
    assert kept and set(kept) <= {"localStorage.getItem(THEME", "localStorage.setItem(THEME"}
    # The token lives in the tab's sessionStorage and goes as a header.
    assert "sessionStorage" in script and "Authorization: `Bearer ${token()}`" in script
    assert 'credentials: "omit"' in script


def test_the_files_are_package_data() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["starter"]
    for name, _ in FILES.values():  # every file the page serves, the vendored ones too
        assert any(Path("api/page", name).match(pattern) for pattern in patterns), name


async def test_a_sign_in_code_gives_the_profiles_actor_once(
    dev_api: httpx.AsyncClient, tmp_path: Path
) -> None:
    config = (await dev_api.get("/operator/config")).json()
    assert config["login_links"] is True
    code = issue(tmp_path)
    # Kept hashed, its owner's alone.
    codes = tmp_path / LOGIN_CODES_FILE
    assert stat.S_IMODE(codes.stat().st_mode) == 0o600 and code not in codes.read_text()
    origin = {"Origin": "http://127.0.0.1:8080"}
    given = await dev_api.post("/operator/login", json={"code": code}, headers=origin)
    assert given.status_code == 200, given.text
    body = given.json()
    assert body["workspace_id"] == str(WORKSPACE)
    assert TokenVerifier(Settings(home=tmp_path)).actor_of(f"Bearer {body['token']}") == ACTOR
    assert given.headers["cache-control"] == "no-store"
    again = await dev_api.post("/operator/login", json={"code": code}, headers=origin)
    assert again.status_code == 401 and again.json()["error"]["code"] == "unauthorized"
    assert "token" not in again.json()


async def test_no_token_without_a_live_code(dev_api: httpx.AsyncClient, tmp_path: Path) -> None:
    """The old route that gave a token to whoever asked is gone; a made-up, malformed or
    expired code gets nothing, and neither does a request without one."""
    assert (await dev_api.post("/operator/dev-token")).status_code == 404
    expired = issue(tmp_path)
    codes = tmp_path / LOGIN_CODES_FILE
    codes.write_text(json.dumps([{**c, "expires": 0} for c in json.loads(codes.read_text())]))
    for body in ({"code": "x" * 43}, {"code": expired}, {"code": "<script>"}):
        refused = await dev_api.post("/operator/login", json=body)
        assert refused.status_code == 401, body
        assert refused.json()["error"]["code"] == "unauthorized"
    for body in ({}, {"code": ""}, {"code": "y" * 500}):
        refused = await dev_api.post("/operator/login", json=body)
        assert refused.status_code == 422, body
    assert "token" not in refused.text


@pytest.mark.parametrize(
    ("client", "base", "origin"),
    [
        (("10.1.2.3", 5000), "http://127.0.0.1:8080", None),  # not on loopback
        (("127.0.0.1", 5000), "http://hub.example:8080", None),  # a rebound name
        (("127.0.0.1", 5000), "http://127.0.0.1:8080", "http://evil.example"),  # a third site
    ],
)
async def test_a_sign_in_is_refused_off_loopback_or_to_another_site(
    tmp_path: Path, client: tuple[str, int], base: str, origin: str | None
) -> None:
    app = create_app(Settings(home=dev_home(tmp_path)))
    code = issue(tmp_path)
    transport = httpx.ASGITransport(app=app, client=client)
    async with httpx.AsyncClient(transport=transport, base_url=base) as api:
        headers = {} if origin is None else {"Origin": origin}
        refused = await api.post("/operator/login", json={"code": code}, headers=headers)
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "forbidden"
    assert "token" not in refused.json()


@pytest.mark.parametrize(
    "configured",
    [
        {"api_jwt_secret": SecretStr("production-secret-" + "y" * 32)},
        {"api_jwt_public_key": "-----BEGIN PUBLIC KEY-----"},
        {"api_jwks_url": "https://idp.example/jwks"},
    ],
)
async def test_no_sign_in_route_with_a_real_key(
    tmp_path: Path, configured: dict[str, object]
) -> None:
    settings = Settings(home=dev_home(tmp_path), **configured)  # type: ignore[arg-type]
    assert not settings.uses_dev_token_secret
    app = create_app(settings)
    code = issue(tmp_path)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:8080"
    ) as api:
        assert (await api.get("/operator/config")).json()["login_links"] is False
        absent = await api.post("/operator/login", json={"code": code})
        assert absent.status_code == 404
        assert absent.json()["error"]["code"] == "not_found"


def test_the_ui_link_is_the_configured_one_else_the_stacks(tmp_path: Path) -> None:
    (tmp_path / "stack.json").write_text(json.dumps({"ui_url": "http://127.0.0.1:8233"}))
    assert Settings(home=tmp_path).resolved_ui_url() == "http://127.0.0.1:8233"
    set_one = Settings(home=tmp_path, temporal_ui_url="https://temporal.example")
    assert set_one.resolved_ui_url() == "https://temporal.example"
