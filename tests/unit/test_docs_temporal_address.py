"""The docs' Temporal commands reach the stack they are about: the Temporal CLI and the
SDKs try localhost:7233 when given no address, where another server may answer (another
checkout's stack; `hubjobs up` takes another port when 7233 is taken), silently. So each
example of the pages that show them takes its address from ``TEMPORAL_ADDRESS``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHOWING_COMMANDS = ("README.md", "docs/other-services.md")
FENCED = re.compile(r"^```\w*\n(.*?)^```", re.MULTILINE | re.DOTALL)
# What reaches a Temporal server: the CLI's commands, an SDK's connection.
REACHING = re.compile(r"^\s*temporal (workflow|schedule|batch)|Connection\.connect", re.MULTILINE)


@pytest.mark.parametrize("page", SHOWING_COMMANDS)
def test_each_example_reaching_temporal_takes_the_stacks_address(page: str) -> None:
    blocks = [b for b in FENCED.findall((ROOT / page).read_text()) if REACHING.search(b)]
    assert blocks, f"{page} shows no Temporal command any more: drop it from this test"
    for block in blocks:
        assert "TEMPORAL_ADDRESS" in block, block
        assert "'localhost:7233'" not in block, block
