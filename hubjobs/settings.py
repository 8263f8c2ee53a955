"""Every setting from the environment (prefix ``HUBJOBS_``).

Where the database or Temporal address is not given, they are read from the
state file that ``hubjobs up`` writes for the embedded stack, so every command
of one checkout finds the same servers.
"""

from __future__ import annotations

import json
from datetime import timedelta
from functools import cached_property
from pathlib import Path

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from hubjobs.errors import ConfigurationError

STACK_FILE = "stack.json"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="HUBJOBS_", extra="ignore")

    home: Path = Field(default=Path(".hubjobs"), description="State folder of the embedded stack")
    database_url: str | None = None
    temporal_address: str | None = None
    temporal_namespace: str = "default"
    task_queue: str = "hubjobs"

    # Ports the embedded stack prefers; taken ports fall back to free ones.
    postgres_port: int = 55432
    temporal_port: int = 7233
    temporal_ui_port: int = 8233

    # Where backups are written, and where attachment files live (their rows hold paths
    # relative to it). Default: inside the state folder.
    backup_dir: Path | None = None
    attachments_dir: Path | None = None
    # The most bytes a restore lets an archive expand to (tables and attachment files
    # together); unset, 100 times the archive's size and at least 1 GiB. A larger
    # archive is refused (archive_too_large) before anything is written.
    restore_max_bytes: int | None = Field(default=None, ge=0)
    # A backup reads (tables and files together) no faster than this, so that it need not
    # saturate the disk or the database; unset, as fast as it goes.
    backup_max_bytes_per_second: float | None = Field(default=None, gt=0)

    # The worker's Prometheus endpoint (0 turns it off): the SDK's metrics and ours.
    metrics_port: int = 9464
    metrics_host: str = "127.0.0.1"
    # Traces go to this OTLP/HTTP endpoint when set (e.g. http://collector:4318/v1/traces).
    otlp_endpoint: str | None = None
    service_name: str = "hubjobs"
    # One JSON object a line (for log shippers) instead of plain text.
    log_json: bool = False
    log_level: str = "INFO"

    # The HTTP API: tokens are JWTs signed with this secret (HS256), or verified with
    # this PEM public key (RS256/ES256). Neither is ever committed.
    api_jwt_secret: SecretStr | None = None
    api_jwt_public_key: str | None = None
    api_host: str = "127.0.0.1"
    api_port: int = 8080

    max_concurrent_activities: int = 8
    max_concurrent_workflow_tasks: int = 8
    # The "lease": a worker that stops heartbeating for this long loses its activity.
    heartbeat_timeout_seconds: float = 15.0
    # Pages read and written per database round trip.
    tagging_batch_size: int = 200
    # Pages one activity call handles before reporting back to the workflow.
    tagging_chunk_size: int = 2000
    # Breathing room between batches, so a huge course does not hog the database.
    tagging_batch_pause_seconds: float = 0.0
    max_activity_attempts: int = 5
    # How often a long activity (a backup) reports its progress to its workflow, for
    # the progress query and the UI's details; each report is a signal in the history.
    progress_report_seconds: float = 10.0
    retention_hours: float = 24.0
    # The maintenance Schedules (hubjobs-retention, hubjobs-reconciler), created when a
    # worker starts unless turned off.
    maintenance_schedules: bool = True
    retention_sweep_seconds: float = 60.0
    reconcile_seconds: float = 60.0
    # Unfinished rows younger than this are not reconciled (their start may be under way).
    reconcile_grace_seconds: float = 30.0

    @property
    def resolved_backup_dir(self) -> Path:
        return (self.backup_dir or self.home / "backups").resolve()

    @property
    def resolved_attachments_dir(self) -> Path:
        return (self.attachments_dir or self.home / "attachments").resolve()

    @property
    def heartbeat_timeout(self) -> timedelta:
        return timedelta(seconds=self.heartbeat_timeout_seconds)

    @cached_property
    def _stack(self) -> dict[str, str]:
        path = self.home / STACK_FILE
        if not path.exists():
            return {}
        data: dict[str, str] = json.loads(path.read_text())
        return data

    def resolved_database_url(self) -> str:
        url = self.database_url or self._stack.get("database_url")
        if not url:
            raise ConfigurationError(
                "no database configured: run `hubjobs up` or set HUBJOBS_DATABASE_URL"
            )
        return url

    def resolved_temporal_address(self) -> str:
        address = self.temporal_address or self._stack.get("temporal_address")
        if not address:
            raise ConfigurationError(
                "no Temporal server configured: run `hubjobs up` or set HUBJOBS_TEMPORAL_ADDRESS"
            )
        return address
