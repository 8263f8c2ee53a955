"""A command finds its stack from any folder below it, as git finds its repository:
the nearest ``.hubjobs/`` holding a stack record or a profile, else ``.hubjobs`` here."""

from __future__ import annotations

from pathlib import Path

import pytest

from hubjobs.settings import PROFILE_FILE, STACK_FILE, Settings, nearest_home


def test_the_nearest_home_with_a_stack_or_a_profile_is_found_from_below(tmp_path: Path) -> None:
    top = tmp_path / "project"
    (top / ".hubjobs").mkdir(parents=True)
    (top / ".hubjobs" / STACK_FILE).write_text("{}")
    deep = top / "docs" / "guides"
    deep.mkdir(parents=True)
    # An empty .hubjobs on the way (a folder someone made) is not a stack.
    (top / "docs" / ".hubjobs").mkdir()
    assert nearest_home(deep) == top / ".hubjobs"
    assert nearest_home(top) == top / ".hubjobs"

    inner = deep / ".hubjobs"
    inner.mkdir()
    (inner / PROFILE_FILE).write_text("{}")
    assert nearest_home(deep) == inner  # the nearest wins


def test_without_one_the_home_is_dot_hubjobs_here(tmp_path: Path) -> None:
    assert nearest_home(tmp_path) == Path(".hubjobs")


def test_settings_take_it_unless_hubjobs_home_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / ".hubjobs").mkdir()
    (tmp_path / ".hubjobs" / PROFILE_FILE).write_text("{}")
    below = tmp_path / "a" / "b"
    below.mkdir(parents=True)
    monkeypatch.chdir(below)
    monkeypatch.delenv("HUBJOBS_HOME", raising=False)
    assert Settings().home == tmp_path.resolve() / ".hubjobs"
    monkeypatch.setenv("HUBJOBS_HOME", str(tmp_path / "elsewhere"))
    assert Settings().home == tmp_path / "elsewhere"
