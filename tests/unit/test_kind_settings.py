"""Each kind's settings are its own, under the environment names they always had: read
from HUBJOBS_TAGGING_*, HUBJOBS_BACKUP_* and HUBJOBS_EXPORT_DIR, their folders under the
state folder as before, replaced by the deployment's ``kind_settings`` (tests, an
embedding), and refused at once when wrong; the deployment's Settings knows none of
them and refuses them by name."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

import worker
from hubjobs.errors import INVALID_SETTINGS, InvalidInput
from hubjobs.kinds.backup import BackupSettings, backup_folder
from hubjobs.kinds.course_tagging import CourseTaggingSettings
from hubjobs.kinds.page_export import PageExportSettings, export_folder
from hubjobs.settings import Settings

KIND_VARIABLES = (
    "HUBJOBS_TAGGING_BATCH_SIZE",
    "HUBJOBS_TAGGING_LANES",
    "HUBJOBS_TAGGING_BATCH_PAUSE_SECONDS",
    "HUBJOBS_BACKUP_DIR",
    "HUBJOBS_BACKUP_MAX_BYTES_PER_SECOND",
    "HUBJOBS_EXPORT_DIR",
    "HUBJOBS_HOME",
    "HUBJOBS_KIND_SETTINGS",
)
JOB = uuid.UUID(int=1)


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in KIND_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)


def test_the_environment_names_are_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HUBJOBS_TAGGING_BATCH_SIZE", "7")
    monkeypatch.setenv("HUBJOBS_TAGGING_LANES", "3")
    monkeypatch.setenv("HUBJOBS_TAGGING_BATCH_PAUSE_SECONDS", "0.5")
    monkeypatch.setenv("HUBJOBS_BACKUP_MAX_BYTES_PER_SECOND", "1000")
    settings = Settings()
    tagging = CourseTaggingSettings.of(settings)
    assert (tagging.tagging_batch_size, tagging.tagging_lanes) == (7, 3)
    assert tagging.tagging_batch_pause_seconds == 0.5
    assert BackupSettings.of(settings).backup_max_bytes_per_second == 1000
    assert worker.connections_per_attempt(settings) == 3


def test_the_defaults_are_unchanged() -> None:
    settings = Settings()
    tagging = CourseTaggingSettings.of(settings)
    assert (tagging.tagging_batch_size, tagging.tagging_lanes) == (4000, 2)
    assert tagging.tagging_batch_pause_seconds == 0.0
    assert BackupSettings.of(settings).backup_max_bytes_per_second is None
    assert worker.connections_per_attempt(settings) == 2


@pytest.mark.parametrize("home", [None, "state"])
@pytest.mark.parametrize("folder", [None, "", "relative", "/absolute"])
def test_the_folders_resolve_as_before(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, home: str | None, folder: str | None
) -> None:
    """As Settings resolved them: the variable's folder (a relative one against the
    working directory), else under the state folder; an empty variable is unset."""
    if home is not None:
        monkeypatch.setenv("HUBJOBS_HOME", str(tmp_path / home))
    settings_home = Settings().home
    for variable, default, resolved in (
        ("HUBJOBS_BACKUP_DIR", "backups", backup_folder),
        ("HUBJOBS_EXPORT_DIR", "exports", lambda s: export_folder(s, JOB).parent),
    ):
        if folder is None:
            monkeypatch.delenv(variable, raising=False)
        else:
            monkeypatch.setenv(variable, folder.replace("/absolute", str(tmp_path / "abs")))
        if not folder:
            expected = (settings_home / default).resolve()
        elif folder == "relative":
            expected = tmp_path.resolve() / "relative"
        else:
            expected = (tmp_path / "abs").resolve()
        assert resolved(Settings()) == expected, variable
    if home is not None:
        assert settings_home == tmp_path / home


def test_kind_settings_replace_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HUBJOBS_TAGGING_BATCH_SIZE", "7")
    monkeypatch.setenv("HUBJOBS_EXPORT_DIR", str(tmp_path / "from-env"))
    settings = Settings(
        kind_settings={
            "course_tagging": {"tagging_batch_size": 50, "tagging_lanes": 5},
            "page_export": {"export_dir": tmp_path / "given"},
        }
    )
    tagging = CourseTaggingSettings.of(settings)
    assert (tagging.tagging_batch_size, tagging.tagging_lanes) == (50, 5)
    assert PageExportSettings.of(settings).export_dir == tmp_path / "given"
    assert worker.connections_per_attempt(settings) == 5
    # Another kind's values are not this kind's.
    assert BackupSettings.of(settings).backup_dir is None


@pytest.mark.parametrize(
    ("given", "named"),
    [
        ({"course_tagging": {"tagging_lanes": 9}}, "tagging_lanes"),
        ({"course_tagging": {"tagging_lane": 1}}, "tagging_lane"),
        ({"backup": {"backup_max_bytes_per_second": 0}}, "backup_max_bytes_per_second"),
    ],
)
def test_a_wrong_value_or_name_stops_the_worker_before_it_serves(
    given: dict[str, dict[str, object]], named: str
) -> None:
    with pytest.raises(InvalidInput) as refused:
        worker.connections_per_attempt(Settings(kind_settings=given))
    assert refused.value.code == INVALID_SETTINGS
    assert named in refused.value.message
    kind = next(iter(given))
    assert refused.value.message.startswith(f"invalid HUBJOBS_* setting of kind {kind}: ")


def test_a_wrong_variable_stops_the_worker_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HUBJOBS_TAGGING_BATCH_SIZE", "0")
    with pytest.raises(InvalidInput, match="tagging_batch_size"):
        worker.connections_per_attempt(Settings())


@pytest.mark.parametrize("name", ["tagging_batch_size", "backup_dir", "export_dir"])
def test_the_deployment_settings_refuse_a_kinds_field(name: str) -> None:
    """Given in code, a kind's field is refused, never silently dropped."""
    given: dict[str, Any] = {name: 1}
    with pytest.raises(ValidationError, match=name):
        Settings(**given)
