"""The API's /docs and /redoc render with no network route out: `hubjobs api` and
headless Chromium both run in a network namespace of the test's own that has only a
loopback interface, so a script from a CDN could not load. The rendered Swagger page
is kept as test-artifacts/api-docs-swagger.png."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from playwright.async_api import async_playwright, expect

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
HUBJOBS = str(Path(sys.executable).parent / "hubjobs")
PORT = 8080
REDOCLY_LOGO = "https://cdn.redoc.ly/redoc/logo-mini.svg"


@contextmanager
def loopback_only_namespace() -> Iterator[str]:
    """A network namespace with only ``lo`` (up), held by a sleeping process; yields its
    path for nsenter."""
    holder = subprocess.Popen(
        ["unshare", "--net", "sh", "-c", "ip link set lo up && echo ready && exec sleep 3600"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        yield f"/proc/{holder.pid}/ns/net"
    finally:
        holder.kill()
        holder.wait()


def in_namespace(namespace: str, *command: str) -> list[str]:
    return ["nsenter", f"--net={namespace}", *command]


def wait_until_serving(namespace: str, timeout: float = 60) -> None:
    probe = (
        "import socket,sys\n"
        f"s=socket.socket(); s.settimeout(1); sys.exit(s.connect_ex(('127.0.0.1', {PORT})))"
    )
    deadline = time.monotonic() + timeout
    while subprocess.run(in_namespace(namespace, sys.executable, "-c", probe)).returncode:
        assert time.monotonic() < deadline, "the API never listened"
        time.sleep(0.2)


@contextmanager
def api_in(namespace: str, env: dict[str, str], log_path: Path) -> Iterator[None]:
    """``hubjobs api`` inside the namespace, serving once this enters."""
    with open(log_path, "wb") as log:
        api = subprocess.Popen(
            in_namespace(namespace, HUBJOBS, "api"), env=env, stdout=log, stderr=log
        )
    try:
        wait_until_serving(namespace)
        yield
    finally:
        api.terminate()
        api.wait(timeout=20)


async def test_swagger_ui_and_redoc_render_with_no_route_out(
    chromium: Path, tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HUBJOBS_")} | {
        "HUBJOBS_HOME": str(tmp_path),
        "HUBJOBS_API_PORT": str(PORT),
        "HUBJOBS_API_JWT_SECRET": "docs-test-secret-of-32-bytes-or-more-0123456789",
        # Never reached: the docs need no server.
        "HUBJOBS_DATABASE_URL": "postgresql://hubjobs@127.0.0.1:1/none",
        "HUBJOBS_TEMPORAL_ADDRESS": "127.0.0.1:2",
    }
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "api-docs-swagger.png"
    shot.unlink(missing_ok=True)
    with loopback_only_namespace() as namespace:
        # Playwright drives Chromium over a pipe: started through nsenter, it browses
        # from inside the namespace.
        browser_in_namespace = tmp_path / "chromium"
        browser_in_namespace.write_text(
            f'#!/bin/sh\nexec nsenter --net={namespace} {chromium} "$@"\n'
        )
        browser_in_namespace.chmod(0o755)
        with api_in(namespace, env, tmp_path / "api.log"):
            async with async_playwright() as p:
                browser = await p.chromium.launch(
                    executable_path=str(browser_in_namespace),
                    args=["--no-sandbox", "--disable-gpu", "--no-first-run"],
                )
                try:
                    page = await browser.new_page(viewport={"width": 1300, "height": 1400})
                    failed: list[str] = []
                    page.on("requestfailed", lambda request: failed.append(request.url))
                    await page.goto(f"http://127.0.0.1:{PORT}/docs")
                    await expect(page.locator(".swagger-ui .info .title")).to_contain_text(
                        "hubjobs", timeout=30_000
                    )
                    await expect(page.locator("#operations-jobs-start_job")).to_be_visible()
                    await page.screenshot(path=str(shot), full_page=False)
                    assert failed == [], failed

                    await page.goto(f"http://127.0.0.1:{PORT}/redoc")
                    await expect(page.locator("h1").first).to_contain_text(
                        "hubjobs", timeout=30_000
                    )
                    # Only ReDoc's "API docs by Redocly" attribution logo is fetched from
                    # outside (built into its script; it hides itself when it fails).
                    assert set(failed) <= {REDOCLY_LOGO}, failed
                finally:
                    await browser.close()
    data = shot.read_bytes()
    assert len(data) > 10_000 and data.startswith(b"\x89PNG\r\n\x1a\n")
