"""Every setting from the environment (prefix ``HUBJOBS_``). An address not given is read
from the embedded stack's state file, so every command of a checkout finds the same
servers."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from hubjobs.errors import ConfigurationError
from hubjobs.home import (
    DEV_SECRET_FILE,
    DEV_WEBHOOK_SECRET_FILE,
    HOME_FOLDER,
    PROFILE_FILE,
    STACK_FILE,
    nearest_home,
    no_stack,
    recorded,
)

__all__ = [
    "DEV_SECRET_FILE",
    "DEV_WEBHOOK_SECRET_FILE",
    "HOME_FOLDER",
    "PROFILE_FILE",
    "STACK_FILE",
    "Settings",
    "nearest_home",
]

# The embedded dev server's SQLite settings; why: hubjobs/devstack/embedded.py.
DEV_STORE_PRAGMAS = ("journal_mode=WAL", "synchronous=NORMAL")


class Settings(BaseSettings):
    # An empty variable (a compose file's ``${VAR:-}``) is unset; an unknown field given
    # in code is refused; other HUBJOBS_* variables (a kind's own) are not read here.
    model_config = SettingsConfigDict(env_prefix="HUBJOBS_", extra="forbid", env_ignore_empty=True)

    home: Path = Field(
        default_factory=nearest_home, description="State folder of the embedded stack"
    )
    database_url: str | None = None
    temporal_address: str | None = None
    temporal_namespace: str = "default"
    task_queue: str = "hubjobs"

    # The embedded stack's supervisor starts a dead server again on its address, at most
    # this far apart; off, it stays down until the next `hubjobs up`.
    stack_supervisor: bool = True
    stack_restart_max_seconds: float = Field(default=30.0, gt=0)
    # Ports the embedded stack prefers; taken ports fall back to free ones.
    postgres_port: int = 55432
    temporal_port: int = 7233
    temporal_ui_port: int = 8233
    # The embedded dev server's SQLite pragmas (why these: hubjobs/devstack/embedded.py).
    temporal_sqlite_pragmas: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: list(DEV_STORE_PRAGMAS)
    )

    # Where attachment files live (rows hold paths relative to it); default: in home.
    attachments_dir: Path | None = None
    # The most bytes a restore lets an archive expand to (unset: 100 times its size, at
    # least 1 GiB); a larger one is refused before anything is written.
    restore_max_bytes: int | None = Field(default=None, ge=0)
    # Connections a restore loads through at once; unset, one per core, at most 4.
    restore_connections: int | None = Field(default=None, ge=1, le=32)
    # For fault tests only: a restore that reaches this phase waits there to be killed.
    restore_pause_at: str | None = None

    # The worker's Prometheus endpoint (0 turns it off): the SDK's metrics and ours.
    metrics_port: int = 9464
    metrics_host: str = "127.0.0.1"
    # Traces go to this OTLP/HTTP endpoint when set (e.g. http://collector:4318/v1/traces).
    otlp_endpoint: str | None = None
    # Trace starts, workflows and activities; by default on when traces have somewhere to
    # go (on, it costs a worker CPU whether they are sent or not).
    tracing: bool | None = None
    service_name: str = "hubjobs"
    # One JSON object a line (for log shippers) instead of plain text.
    log_json: bool = False
    log_level: str = "INFO"

    # The API's JWTs: verified with a JWKS URL's keys, a PEM public key, or this HS256
    # secret (`hubjobs token` mints these).
    api_jwt_secret: SecretStr | None = None
    api_jwt_public_key: str | None = None
    api_jwks_url: str | None = None
    # A token whose key id the cached key set lacks re-reads the set at most this often.
    api_jwks_refresh_seconds: float = Field(default=10.0, ge=0)
    # A token must carry this `aud` and `iss` (unset: "hubjobs" for each), so one meant
    # for another service is refused; allow_unscoped accepts one without either (a
    # provider whose tokens carry none), checking only the one that is set.
    api_jwt_audience: str | None = None
    api_jwt_issuer: str | None = None
    api_jwt_allow_unscoped: bool = False
    # The longest a token may be good for (exp - iat): a leaked one must not last.
    api_jwt_max_lifetime_seconds: float = Field(default=24 * 3600.0, gt=0)
    # Leeway for a token's times, which are another host's clock.
    api_jwt_leeway_seconds: float = Field(default=60.0, ge=0, le=3600)
    api_host: str = "127.0.0.1"
    api_port: int = 8080
    # The API's public base URL: a result listing files then gives absolute URLs.
    api_base_url: str | None = Field(default=None, pattern=r"^https?://[^\s]+$")
    # A comment this often keeps proxies from closing a quiet event stream.
    api_events_heartbeat_seconds: float = Field(default=15.0, gt=0)
    # The workers view: a worker unseen this long is gone. Past a worker's heartbeat
    # interval (the SDK's 60 s) and a poll's wait, so that an idle worker stays live.
    workers_gone_seconds: float = Field(default=180.0, gt=0)
    # A worker tells the server its state and slots in use this often (the workers view).
    worker_heartbeat_seconds: float = Field(default=10.0, gt=0)
    # The workers view tells which worker runs a job for at most this many running jobs.
    workers_running_jobs: int = Field(default=50, ge=0, le=1000)
    # The Temporal UI the operator page links to; unset, the embedded stack's, if any.
    temporal_ui_url: str | None = Field(default=None, pattern=r"^https?://[^\s]+$")

    # Worker Deployment versioning: a worker serves one build of its deployment, and a
    # job stays on the build that started it. Images bake their build id in.
    worker_versioning: bool = True
    deployment_name: str = Field(default="hubjobs", max_length=200, pattern=r"^[A-Za-z0-9_-]+$")
    build_id: str = Field(default="dev", max_length=200, pattern=r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
    # When a starting worker makes its build current: "if_unset" (none is), "always" (a
    # developer's latest takes over), "never" (an operator sets it).
    deployment_set_current: Literal["if_unset", "always", "never"] = "if_unset"

    # The payload codec (AES-GCM). Keys as "kid:base64key,kid2:…"; codec_key_id's
    # encrypts, any listed one decrypts, so a key rotates by adding one, making it
    # current, and dropping the old once no history needs it.
    payload_codec: bool = False
    codec_keys: SecretStr | None = None
    codec_key_id: str | None = None
    # Browser origins (CORS) the API's codec endpoint answers, besides the embedded UI.
    codec_cors_origins: Annotated[list[str], NoDecode] = Field(default_factory=list)
    # Only these actors may use the codec endpoint; empty: any with a valid token.
    codec_actors: Annotated[list[uuid.UUID], NoDecode] = Field(default_factory=list)
    # Hub operators (token ``sub`` ids) may act on the whole hub. A setting, not a
    # column, so no archive, restore or administrator can grant it; set alike everywhere.
    hub_operators: Annotated[list[uuid.UUID], NoDecode] = Field(default_factory=list)
    # The dev server's UI sends no token: on, an allowed origin's codec request needs
    # none. Refused unless the API listens on loopback only.
    codec_trust_ui_origin: bool = False

    # Completion webhooks: the signing secret (unset: a notify_url is refused), the hosts
    # or CIDR networks a notify_url may name (never link-local nor metadata), and a
    # delivery's first wait, longest wait and deadline.
    webhook_secret: SecretStr | None = None
    webhook_allowed_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["127.0.0.0/8", "::1/128"]
    )
    webhook_retry_initial_seconds: float = Field(default=1.0, gt=0, le=3600)
    webhook_retry_max_seconds: float = Field(default=3600.0, gt=0, le=86400)
    webhook_deadline_hours: float = Field(default=24.0, gt=0, le=24 * 30)

    # Modules declaring kinds beyond hubjobs' own, imported before serving.
    kind_modules: Annotated[list[str], NoDecode] = Field(default_factory=list)
    # Values of kinds' own settings, by kind name, in place of the environment's.
    kind_settings: dict[str, dict[str, Any]] = Field(default_factory=dict)

    max_concurrent_activities: int = 8
    max_concurrent_workflow_tasks: int = 8
    # How long a workflow's next task waits for the worker that cached it: short, as a
    # dead worker's jobs wait this on top of the heartbeat timeout.
    sticky_queue_timeout_seconds: float = 3.0
    # The "lease": a worker that stops heartbeating for this long loses its activity.
    heartbeat_timeout_seconds: float = 15.0
    # An attempt gives its slot back after this long, so waiting jobs get one.
    work_slice_seconds: float = 5.0
    # The workspace as Temporal fairness key, so one backlog does not hold up another
    # workspace's job. Off only to show what it prevents.
    fairness: bool = True
    # Attempts in a row without progress before a job fails, and the waits between them.
    max_activity_attempts: int = 5
    retry_initial_seconds: float = 2.0
    retry_coefficient: float = 5.0
    retry_max_seconds: float = 30.0
    # Only an outage longer than max_outage_seconds fails a job (`unavailable`); work
    # retries at most outage_retry_max_seconds apart.
    max_outage_seconds: float = 3600.0
    outage_retry_max_seconds: float = 30.0
    # How often at most an attempt signals its progress (an event in the history).
    progress_report_seconds: float = Field(default=1.0, gt=0)
    # A run continues as new past this many signals (Temporal refuses them past 10,000).
    run_signal_budget: int = Field(default=500, ge=10, le=5000)
    # Room for a loaded worker to replay the fullest run of the budget, flood included.
    workflow_task_timeout_seconds: float = Field(default=30.0, gt=0, le=120)
    retention_hours: float = 24.0
    # The maintenance workflow, started or updated by each worker as it starts.
    maintenance: bool = True
    retention_sweep_seconds: float = 60.0
    reconcile_seconds: float = 60.0
    # Unfinished rows younger than this are not reconciled (their start may be under way).
    reconcile_grace_seconds: float = 30.0

    # The CLI's workspace and actor without flags (else the demo's profile's).
    workspace: uuid.UUID | None = None
    actor: uuid.UUID | None = None

    # --- deadlines: every call that can hang has one (hubjobs/db/limits.py) ---------
    # Connecting (whole seconds), and TCP noticing a silent peer: keepalives, and
    # tcp_user_timeout for data never acknowledged (0: the kernel's default).
    db_connect_timeout_seconds: int = Field(default=5, ge=2)
    db_keepalive_seconds: int = Field(default=10, ge=1)
    db_tcp_user_timeout_seconds: float = Field(default=20.0, ge=0)
    # Each purpose's bound on a unit of work (also each statement's statement_timeout)
    # and on a lock wait in it (lock_timeout); past it, the call is `unavailable`.
    # What the CLI and the API wait on (a status, a listing, a health check):
    db_read_timeout_seconds: float = Field(default=5.0, gt=0)
    db_read_lock_timeout_seconds: float = Field(default=2.0, gt=0)
    # A kind's unit of work (a batch of items, a file written): below the heartbeat
    # timeout, so that an attempt whose database went silent heartbeats again in time.
    db_batch_timeout_seconds: float = Field(default=10.0, gt=0)
    db_batch_lock_timeout_seconds: float = Field(default=5.0, gt=0)
    # A call waiting in line in its process (a burst of starts) is `unavailable` past
    # this, nothing done; starts_in_flight: how many one client sends Temporal at once.
    db_queue_timeout_seconds: float = Field(default=120.0, gt=0)
    starts_in_flight: int = Field(default=20, ge=1)
    # Starting a job (its row and snapshot), opening, finishing, cancelling it:
    db_lifecycle_timeout_seconds: float = Field(default=15.0, gt=0)
    db_lifecycle_lock_timeout_seconds: float = Field(default=5.0, gt=0)
    # A whole-database snapshot and a restore's load (0: no bound); a stream must still
    # not stall past a batch's bound.
    db_bulk_timeout_seconds: float = Field(default=3600.0, ge=0)
    db_bulk_lock_timeout_seconds: float = Field(default=60.0, ge=0)
    # A worker that cannot reach the database hands its job over after this wait; the
    # next attempt starts after the pause, on any worker. A local lifecycle step goes to
    # any worker after lifecycle_local_seconds.
    outage_handover_seconds: float = Field(default=20.0, gt=0)
    handover_pause_seconds: float = Field(default=2.0, ge=0)
    lifecycle_local_seconds: float = Field(default=30.0, gt=0)
    # How long a finding about the database's writes holds before it is probed again.
    write_probe_seconds: float = Field(default=5.0, gt=0)
    # Temporal: connecting, and every call the client, the CLI and the API make.
    temporal_connect_timeout_seconds: float = Field(default=5.0, gt=0)
    temporal_rpc_timeout_seconds: float = Field(default=5.0, gt=0)
    # The API's whole-request budget (0: none), above the sum of a start's own bounds;
    # past it, 503 `unavailable`, and a start cut off after its row still settles it.
    api_request_timeout_seconds: float = Field(default=30.0, ge=0)
    # A request must arrive whole within this long of its first byte, or the connection
    # closes: a byte-a-second client holds no socket for longer.
    api_receive_timeout_seconds: float = Field(default=10.0, gt=0, le=3600)

    @field_validator(
        "api_jwks_url",
        "api_jwt_audience",
        "api_jwt_issuer",
        "codec_keys",
        "codec_key_id",
        "webhook_secret",
        mode="before",
    )
    @classmethod
    def _empty_is_unset(cls, value: object) -> object:
        """An empty value is unset, never "the audience must be the empty string"."""
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator(
        "codec_cors_origins",
        "codec_actors",
        "hub_operators",
        "webhook_allowed_hosts",
        "temporal_sqlite_pragmas",
        "kind_modules",
        mode="before",
    )
    @classmethod
    def _comma_separated(cls, value: object) -> object:
        """``a,b`` in the environment (a JSON list is taken too)."""
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                return json.loads(text)
            return [part.strip() for part in text.split(",") if part.strip()]
        return value

    @model_validator(mode="after")
    def _dev_token_secret(self) -> Settings:
        """The embedded stack's development secret, when no key is configured."""
        if self.api_jwt_secret or self.api_jwt_public_key or self.api_jwks_url:
            return self
        path = self.home / DEV_SECRET_FILE
        if path.is_file():
            self.api_jwt_secret = SecretStr(path.read_text().strip())
        return self

    @model_validator(mode="after")
    def _dev_webhook_secret(self) -> Settings:
        """The embedded stack's development webhook secret, when none is configured."""
        if self.webhook_secret is not None:
            return self
        path = self.home / DEV_WEBHOOK_SECRET_FILE
        if path.is_file():
            self.webhook_secret = SecretStr(path.read_text().strip())
        return self

    @property
    def tracing_on(self) -> bool:
        return self.tracing if self.tracing is not None else bool(self.otlp_endpoint)

    @property
    def resolved_attachments_dir(self) -> Path:
        return (self.attachments_dir or self.home / "attachments").resolve()

    @property
    def heartbeat_timeout(self) -> timedelta:
        return timedelta(seconds=self.heartbeat_timeout_seconds)

    @cached_property
    def _stack(self) -> dict[str, str]:
        return recorded(self.home, STACK_FILE)

    def resolved_database_url(self) -> str:
        url = self.database_url or self._stack.get("database_url")
        if not url:
            raise self._no_stack("HUBJOBS_DATABASE_URL")
        return url

    def _no_stack(self, instead: str) -> ConfigurationError:
        """Neither the setting nor a stack's record names a server: where it looked."""
        if self._stack:
            return ConfigurationError(f"{instead} is unset and the stack records none")
        return no_stack(self.home, named="home" in self.model_fields_set, instead=instead)

    def recorded_ui_url(self) -> str | None:
        """The embedded stack's Temporal UI, as `hubjobs up` recorded it."""
        return self._stack.get("ui_url")

    def resolved_ui_url(self) -> str | None:
        """HUBJOBS_TEMPORAL_UI_URL, else the embedded stack's."""
        return self.temporal_ui_url or self.recorded_ui_url()

    @property
    def uses_dev_token_secret(self) -> bool:
        """Whether the embedded stack's development secret is the only key (a different
        HUBJOBS_API_JWT_SECRET is a configured one)."""
        if self.api_jwt_public_key or self.api_jwks_url or self.api_jwt_secret is None:
            return False
        path = self.home / DEV_SECRET_FILE
        return path.is_file() and path.read_text().strip() == self.api_jwt_secret.get_secret_value()

    def resolved_temporal_address(self) -> str:
        address = self.temporal_address or self._stack.get("temporal_address")
        if not address:
            raise self._no_stack("HUBJOBS_TEMPORAL_ADDRESS")
        return address
