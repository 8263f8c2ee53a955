"""axe-core in the page's own Chromium: installed once from the npm registry (its lock
file), run against what a view shows, its serious and critical violations returned."""

from __future__ import annotations

import shutil
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

from playwright.async_api import Page

AXE_DIR = Path(__file__).resolve().parent / "axe_core"
SEVERE = frozenset({"serious", "critical"})


@cache
def axe_source() -> str:
    script = AXE_DIR / "node_modules" / "axe-core" / "axe.min.js"
    if not script.exists():
        npm = shutil.which("npm")
        assert npm is not None, "Node.js and npm are needed (Debian's nodejs, or the machine's)"
        subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=AXE_DIR, check=True)
    return script.read_text()


async def severe_violations(page: Page) -> list[dict[str, Any]]:
    """The view's serious and critical violations (WCAG 2 A and AA rules and best practice):
    each rule's id, impact and the selectors of the nodes it found. The script is
    evaluated, not added as a tag, so the page's CSP need not let it in."""
    if not await page.evaluate("() => typeof window.axe === 'object'"):
        await page.evaluate(axe_source())
    found: list[dict[str, Any]] = await page.evaluate(
        """async () => {
            const results = await window.axe.run(document, {
                runOnly: {
                    type: "tag", values: ["wcag2a", "wcag2aa", "wcag21aa", "best-practice"],
                },
            });
            return results.violations.map((v) => ({
                id: v.id, impact: v.impact, nodes: v.nodes.map((n) => n.target.join(" ")),
            }));
        }"""
    )
    return [violation for violation in found if violation["impact"] in SEVERE]
