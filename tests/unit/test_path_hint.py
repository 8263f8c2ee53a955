"""``make run`` installs ``hubjobs`` in the project's venv: the demo's next steps say
how a shell reaches it when PATH does not, and say nothing when it does."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from starter.cli.stack import path_hint

VENV_BIN = Path(sys.executable).parent


def test_off_path_the_hint_names_the_venv_and_its_activate_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    hint = path_hint()
    assert hint is not None and str(VENV_BIN / "activate") in hint


def test_on_path_there_is_no_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    assert (VENV_BIN / "hubjobs").is_file(), "the project is installed in its venv"
    monkeypatch.setenv("PATH", f"{VENV_BIN}:/usr/bin:/bin")
    assert path_hint() is None
