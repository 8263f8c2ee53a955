"""Every setting from the environment (prefix ``HUBJOBS_``).

Where the database or Temporal address is not given, they are read from the
state file that ``hubjobs up`` writes for the embedded stack, so every command
of one checkout finds the same servers.
"""

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
    # An empty variable (``HUBJOBS_LOG_JSON=``, as a compose file's ``${VAR:-}`` gives)
    # means unset: the default, never a value that does not parse.
    # An unknown field given in code is refused (``forbid``), never silently dropped; the
    # environment's other HUBJOBS_* variables (a kind's own settings) are not read here.
    model_config = SettingsConfigDict(env_prefix="HUBJOBS_", extra="forbid", env_ignore_empty=True)

    home: Path = Field(
        default_factory=nearest_home, description="State folder of the embedded stack"
    )
    database_url: str | None = None
    temporal_address: str | None = None
    temporal_namespace: str = "default"
    task_queue: str = "hubjobs"

    # The embedded stack's supervisor (`hubjobs up` starts it, `hubjobs down` stops it):
    # a server that died is started again, on its address, trying again at most this
    # far apart (hubjobs/devstack/supervisor.py). Off: a dead server stays down until
    # the next `hubjobs up`.
    stack_supervisor: bool = True
    stack_restart_max_seconds: float = Field(default=30.0, gt=0)
    # Ports the embedded stack prefers; taken ports fall back to free ones.
    postgres_port: int = 55432
    temporal_port: int = 7233
    temporal_ui_port: int = 8233
    # The embedded dev server's SQLite store (``--sqlite-pragma``; why these:
    # hubjobs/devstack/embedded.py). An empty variable is the default; SQLite's own
    # defaults are ``journal_mode=DELETE,synchronous=FULL``.
    temporal_sqlite_pragmas: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: list(DEV_STORE_PRAGMAS)
    )

    # Where attachment files live (their rows hold paths relative to it). Default: inside
    # the state folder.
    attachments_dir: Path | None = None
    # The most bytes a restore lets an archive expand to (tables and attachment files
    # together); unset, 100 times the archive's size and at least 1 GiB. A larger
    # archive is refused (archive_too_large) before anything is written.
    restore_max_bytes: int | None = Field(default=None, ge=0)
    # Connections a restore loads through at once (`hubjobs restore --connections`);
    # unset, one per core, at most 4 (hubjobs/ops/restore.py).
    restore_connections: int | None = Field(default=None, ge=1, le=32)
    # For the fault tests only: a restore that reaches this phase waits there until
    # it is killed (hubjobs/ops/restore_phases.py).
    restore_pause_at: str | None = None

    # The worker's Prometheus endpoint (0 turns it off): the SDK's metrics and ours.
    metrics_port: int = 9464
    metrics_host: str = "127.0.0.1"
    # Traces go to this OTLP/HTTP endpoint when set (e.g. http://collector:4318/v1/traces).
    otlp_endpoint: str | None = None
    # Trace starts, workflows and activities (the SDK's OpenTelemetry interceptor, with
    # the correlation id as baggage). On whenever traces have somewhere to go; off, it
    # costs nothing (on, it costs a worker CPU whether traces are sent or not).
    tracing: bool | None = None
    service_name: str = "hubjobs"
    # One JSON object a line (for log shippers) instead of plain text.
    log_json: bool = False
    log_level: str = "INFO"

    # The HTTP API: tokens are JWTs verified with an identity provider's rotating keys
    # (a JWKS URL), or with this PEM public key (RS256/ES256), or signed with this secret
    # (HS256; `hubjobs token` mints these). None is ever committed.
    api_jwt_secret: SecretStr | None = None
    api_jwt_public_key: str | None = None
    api_jwks_url: str | None = None
    # A token whose key id the cached key set lacks re-reads the set at most this often.
    api_jwks_refresh_seconds: float = Field(default=10.0, ge=0)
    # A token must carry this audience (`aud`) and this issuer (`iss`); unset, "hubjobs"
    # for each (what `hubjobs token` and the embedded stack mint): a token meant for
    # another service, or from another issuer, is refused. Set both to an identity
    # provider's values; allow_unscoped accepts a token without either (a provider
    # whose tokens carry none), checking only the one that is set.
    api_jwt_audience: str | None = None
    api_jwt_issuer: str | None = None
    api_jwt_allow_unscoped: bool = False
    # The longest a token may be good for (exp - iat; without iat, exp - now): a longer
    # one is refused, as a leaked token would otherwise open the API for good.
    api_jwt_max_lifetime_seconds: float = Field(default=24 * 3600.0, gt=0)
    # A token's iat, nbf and exp are another host's clock (the identity provider's):
    # read with this leeway either way, so that a skew of seconds is no refusal.
    api_jwt_leeway_seconds: float = Field(default=60.0, ge=0, le=3600)
    api_host: str = "127.0.0.1"
    api_port: int = 8080
    # The API's public base URL (e.g. https://hub.example/jobs-api), when it knows it:
    # a result that lists files (FHIR bulk data's manifest) then gives absolute URLs under
    # it; unset, URLs relative to the API's root.
    api_base_url: str | None = Field(default=None, pattern=r"^https?://[^\s]+$")
    # GET …/jobs/{id}/events: a comment this often keeps proxies from closing a quiet
    # stream.
    api_events_heartbeat_seconds: float = Field(default=15.0, gt=0)
    # The Temporal UI people open, for the operator page's link to a job's run; unset,
    # the embedded stack's (as `hubjobs up` recorded it), else no link.
    temporal_ui_url: str | None = Field(default=None, pattern=r"^https?://[^\s]+$")

    # Worker Deployment versioning (see hubjobs/temporal/deployment.py): a worker serves one
    # version, its deployment name and build id; a job workflow stays on the build that
    # started it. The build id names the code: production images bake theirs in
    # (Dockerfile), the embedded stack's workers are all "dev".
    worker_versioning: bool = True
    deployment_name: str = Field(default="hubjobs", max_length=200, pattern=r"^[A-Za-z0-9_-]+$")
    build_id: str = Field(default="dev", max_length=200, pattern=r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
    # When a starting worker makes its build the deployment's current version (the one
    # new workflows go to): "if_unset" only while the deployment has none (a fresh stack,
    # a first deploy), "always" (a developer's latest build takes over), "never" (an
    # operator sets it: `temporal worker deployment set-current-version`).
    deployment_set_current: Literal["if_unset", "always", "never"] = "if_unset"

    # The payload codec (see hubjobs/temporal/codec.py): every payload hubjobs sends
    # through Temporal is encrypted with AES-GCM. Keys as "kid:base64key,kid2:…"
    # (16, 24 or 32 bytes each); the one named by codec_key_id encrypts, any listed one
    # decrypts (a payload names its key id), so a key is rotated by adding a new one,
    # making it current, and dropping the old one once no history needs it.
    payload_codec: bool = False
    codec_keys: SecretStr | None = None
    codec_key_id: str | None = None
    # The API's codec endpoint (/codec/encode, /codec/decode) answers browsers from these
    # origins (CORS), besides the embedded stack's own Temporal UI. Comma-separated.
    codec_cors_origins: Annotated[list[str], NoDecode] = Field(default_factory=list)
    # Only these actors may use the codec endpoint (comma-separated ids); empty: any
    # actor with a valid token.
    codec_actors: Annotated[list[uuid.UUID], NoDecode] = Field(default_factory=list)
    # Hub operators: the accounts (comma-separated ids, a token's ``sub``) that may act
    # on the whole hub (a job of the whole hub, its schedule), a role above every
    # workspace. A setting, not a column: the role is the deployment's, so no archive,
    # restore or workspace administrator can grant it. Set alike on API and workers.
    hub_operators: Annotated[list[uuid.UUID], NoDecode] = Field(default_factory=list)
    # The embedded dev server's UI sends no token: with this on, a codec request from an
    # allowed origin needs none. Refused unless the API listens on loopback only, where
    # whoever can reach it can reach the (unauthenticated) dev server anyway.
    codec_trust_ui_origin: bool = False

    # Completion webhooks (hubjobs/webhooks/): the deployment's signing secret (HMAC-SHA256;
    # unset, a start with a notify_url is refused `webhooks_not_configured`), the hosts
    # and networks a notify_url may name (comma-separated host names or CIDR networks;
    # link-local and the metadata address are never allowed, whatever this says), and
    # the retry schedule of a delivery: the first wait, the longest, and how long a
    # delivery is tried in all before it is recorded failed.
    webhook_secret: SecretStr | None = None
    webhook_allowed_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["127.0.0.0/8", "::1/128"]
    )
    webhook_retry_initial_seconds: float = Field(default=1.0, gt=0, le=3600)
    webhook_retry_max_seconds: float = Field(default=3600.0, gt=0, le=86400)
    webhook_deadline_hours: float = Field(default=24.0, gt=0, le=24 * 30)

    # Modules declaring kinds beyond hubjobs' own (a kind another package or the tests
    # ship): the worker, the API and the client each import them before serving.
    kind_modules: Annotated[list[str], NoDecode] = Field(default_factory=list)
    # Each kind's own settings (hubjobs/kinds/base.py ``own_settings``) are read from the
    # environment; these values, by kind name, take their place (tests, an embedding).
    kind_settings: dict[str, dict[str, Any]] = Field(default_factory=dict)

    max_concurrent_activities: int = 8
    max_concurrent_workflow_tasks: int = 8
    # A workflow's next task waits this long for the worker that ran its last one (it has
    # the workflow cached) before any worker takes it: after a worker dies, its jobs wait
    # this on top of the heartbeat timeout. Short, since a job's history is small to
    # replay elsewhere.
    sticky_queue_timeout_seconds: float = 3.0
    # The "lease": a worker that stops heartbeating for this long loses its activity.
    heartbeat_timeout_seconds: float = 15.0
    # An attempt of a job's work gives its slot back after this long and carries on in
    # a new one, so that other jobs (and other workspaces) waiting for a slot get it.
    work_slice_seconds: float = 5.0
    # Start each job's workflow with its workspace as Temporal fairness key, so a
    # workspace's backlog of jobs does not hold up another workspace's job. Off only to
    # show what it prevents; the kinds' priorities apply either way.
    fairness: bool = True
    # Attempts in a row without progress before a job fails (an attempt that committed
    # work, or that handed over because its worker was shutting down, does not count),
    # and the waits between them: 2 s, 10 s, 30 s, 30 s… (seed 000).
    max_activity_attempts: int = 5
    retry_initial_seconds: float = 2.0
    retry_coefficient: float = 5.0
    retry_max_seconds: float = 30.0
    # A database outage never fails a job by itself: work waits (retrying at most this
    # far apart) and only an outage longer than max_outage_seconds fails it, as
    # `unavailable`, with the work done kept.
    max_outage_seconds: float = 3600.0
    outage_retry_max_seconds: float = 30.0
    # How often at most a running attempt tells its workflow its progress (the progress
    # query and the UI's details): a signal, so an event in the history.
    progress_report_seconds: float = Field(default=1.0, gt=0)
    # A run continues as new once it took this many signals, its progress reports and
    # anyone's others (Temporal refuses a run's signals past 10,000): at one report a
    # second, every ~8 minutes of work, at the cost of one handover.
    run_signal_budget: int = Field(default=500, ge=10, le=5000)
    # A job run's workflow task may take this long on a worker before Temporal retries
    # it elsewhere: room for a loaded worker to replay the fullest run of the budget (and
    # the few thousand signals a flood lands past it) from its start.
    workflow_task_timeout_seconds: float = Field(default=30.0, gt=0, le=120)
    retention_hours: float = 24.0
    # The maintenance workflow (retention sweep and reconciler, workflows/maintenance.py),
    # started or updated by a worker as it starts.
    maintenance: bool = True
    retention_sweep_seconds: float = 60.0
    reconcile_seconds: float = 60.0
    # Unfinished rows younger than this are not reconciled (their start may be under way).
    reconcile_grace_seconds: float = 30.0

    # The CLI's workspace and actor when a command is given neither flag (then the
    # demo's profile in HUBJOBS_HOME is asked).
    workspace: uuid.UUID | None = None
    actor: uuid.UUID | None = None

    # --- deadlines: every call that can hang has one (hubjobs/db/limits.py) ---------
    # Connecting to PostgreSQL (libpq connect_timeout, whole seconds, 2 at least), and
    # TCP that notices a peer gone silent: keepalives after this much idle time, and
    # tcp_user_timeout for data sent but never acknowledged (0: the kernel's default).
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
    # A call waiting in line in its process (a burst of starts from one client:
    # hubjobs/db/turns.py) for one of its starts in flight and one of its engine's
    # connections; past it, `unavailable` and nothing done. Starts in flight: how many
    # one client sends Temporal at once.
    db_queue_timeout_seconds: float = Field(default=120.0, gt=0)
    starts_in_flight: int = Field(default=20, ge=1)
    # Starting a job (its row and snapshot), opening, finishing, cancelling it:
    db_lifecycle_timeout_seconds: float = Field(default=15.0, gt=0)
    db_lifecycle_lock_timeout_seconds: float = Field(default=5.0, gt=0)
    # A whole-database snapshot and a restore's load (one statement may copy a whole
    # table; 0: no bound): generous. Such a stream must also not stall for longer than a
    # batch's bound.
    db_bulk_timeout_seconds: float = Field(default=3600.0, ge=0)
    db_bulk_lock_timeout_seconds: float = Field(default=60.0, ge=0)
    # A worker that cannot reach the database hands its job over: an attempt that has
    # waited this long for it gives its slot back, at no cost, and the next attempt
    # starts after handover_pause_seconds, on whichever worker polls (never dispatched
    # eagerly to the same one). A lifecycle step the workflow runs as a local activity
    # goes to any worker after lifecycle_local_seconds.
    outage_handover_seconds: float = Field(default=20.0, gt=0)
    handover_pause_seconds: float = Field(default=2.0, ge=0)
    lifecycle_local_seconds: float = Field(default=30.0, gt=0)
    # How long what a process found about the database's writes holds (a write probe,
    # or a refusal its own writes met: hubjobs/db/writes.py): a health check or a start
    # probes again only past it.
    write_probe_seconds: float = Field(default=5.0, gt=0)
    # Temporal: connecting, and every call the client, the CLI and the API make.
    temporal_connect_timeout_seconds: float = Field(default=5.0, gt=0)
    temporal_rpc_timeout_seconds: float = Field(default=5.0, gt=0)
    # The API's whole-request budget (to the start of its answer): 503 `unavailable`
    # past it. Above the sum of a start's own bounds (Temporal's connect and call, a
    # lifecycle write, a read), which answer first (0: none); a start still waiting in
    # line in the API's process (db_queue_timeout_seconds) is cut off by it, nothing
    # written, and one cut off after its row still settles it (starter/client.py).
    api_request_timeout_seconds: float = Field(default=30.0, ge=0)
    # A request's headers and body must arrive within this long of its first byte (of
    # the connection, for its first request), or the connection is closed: a client
    # sending a byte a second holds no socket for longer (starter/api/receive_deadline.py).
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
        """``HUBJOBS_API_JWT_AUDIENCE=`` (as a compose file's ``${VAR:-}`` gives) means
        unset, never "the audience must be the empty string"."""
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
        """The embedded stack's development secret, when no production key (a JWKS URL,
        a public key or a secret) is configured and ``hubjobs up`` wrote one here."""
        if self.api_jwt_secret or self.api_jwt_public_key or self.api_jwks_url:
            return self
        path = self.home / DEV_SECRET_FILE
        if path.is_file():
            self.api_jwt_secret = SecretStr(path.read_text().strip())
        return self

    @model_validator(mode="after")
    def _dev_webhook_secret(self) -> Settings:
        """The embedded stack's development webhook secret, when none is configured and
        ``hubjobs up`` wrote one here."""
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
        path = self.home / STACK_FILE
        if not path.exists():
            return {}
        data: dict[str, str] = json.loads(path.read_text())
        return data

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
        """The Temporal UI people open: HUBJOBS_TEMPORAL_UI_URL, else the embedded
        stack's."""
        return self.temporal_ui_url or self.recorded_ui_url()

    @property
    def uses_dev_token_secret(self) -> bool:
        """Whether tokens are checked with the embedded stack's development secret
        (HUBJOBS_HOME/dev-token-secret) and nothing else: no configured key of any kind
        (a HUBJOBS_API_JWT_SECRET that differs from the file is a configured one)."""
        if self.api_jwt_public_key or self.api_jwks_url or self.api_jwt_secret is None:
            return False
        path = self.home / DEV_SECRET_FILE
        return path.is_file() and path.read_text().strip() == self.api_jwt_secret.get_secret_value()

    def resolved_temporal_address(self) -> str:
        address = self.temporal_address or self._stack.get("temporal_address")
        if not address:
            raise self._no_stack("HUBJOBS_TEMPORAL_ADDRESS")
        return address
