"""What every benchmark shares and that knows nothing of hubjobs: figures and their
targets, the one table, statistics, processes and their CPU and memory, waiting for a
Temporal worker to poll, and how a benchmark module is run on its own.

A benchmark module (``bench_*.py``) has ``NAME``, ``TITLE``, ``add_arguments(parser)``
(its size flags, defaults bounded for ``make bench``) and ``async run(stack, args) ->
Outcome``; ``standalone.main_for(module)`` runs it alone with its own stack, and
``run_all.py`` runs them all on one.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import ModuleType
from typing import IO, Any, Literal

BENCH = Path(__file__).resolve().parent
RESULTS = BENCH / "results"


# --- figures and targets ------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """``op value`` on the ratio (``on="ratio"``) or on hubjobs' own figure."""

    op: Literal[">=", "<="]
    value: float
    on: Literal["ratio", "value"] = "ratio"
    unit: str = ""

    def met(self, hubjobs: float | None, ratio: float | None) -> bool | None:
        subject = ratio if self.on == "ratio" else hubjobs
        if subject is None or math.isnan(subject):
            return None
        return subject >= self.value if self.op == ">=" else subject <= self.value

    def __str__(self) -> str:
        sign = "≥" if self.op == ">=" else "≤"
        if self.on == "ratio":
            return f"{sign}{self.value:g}×"
        return f"{sign}{fmt(self.value)} {self.unit}".rstrip()


@dataclass
class Figure:
    """One line of the table. ``ratio`` is what the target is about: hubjobs over the
    baseline for times and rates alike, except where ``ratio_note`` says otherwise."""

    bench: str
    name: str
    unit: str
    hubjobs: float | None
    baseline: float | None
    baseline_label: str
    ratio: float | None
    target: Target | None
    note: str = ""

    @property
    def met(self) -> bool | None:
        return None if self.target is None else self.target.met(self.hubjobs, self.ratio)

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["target"] = None if self.target is None else str(self.target)
        data["met"] = self.met
        return data


def ratio_of(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return a / b


@dataclass
class Outcome:
    """What a benchmark hands back: its lines for the table, and data for its plot. The
    runner adds its time and ``load``, the 1-minute load average at its start and end."""

    figures: list[Figure]
    series: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    load: tuple[float, float] | None = None


def load_now() -> float:
    """The machine's 1-minute load average: on a shared machine, what a figure ran beside."""
    return os.getloadavg()[0]


def load_range(load: Sequence[float] | None) -> str:
    return "-" if not load else f"{load[0]:.1f}–{load[1]:.1f}"


def machine() -> str:
    """This machine as the benchmarks page states it: cores, memory, system."""
    with open("/proc/meminfo") as meminfo:
        kib = int(meminfo.readline().split()[1])  # MemTotal comes first
    return (
        f"{os.cpu_count()} cores, {kib / 2**20:.0f} GiB, {platform.system()} {platform.machine()}"
    )


def revision() -> str:
    """The checkout's commit, ``+`` when it has uncommitted changes: what was measured."""
    git = ["git", "-C", str(BENCH.parent)]
    head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(
        [*git, "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True
    )
    return head.stdout.strip() + ("+" if dirty.stdout.strip() else "") or "unknown"


def fmt(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    magnitude = abs(value)
    if magnitude >= 100_000:
        return f"{value:,.0f}"
    if magnitude >= 100:
        return f"{value:,.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    if magnitude >= 1:
        return f"{value:.2f}"
    return f"{value:.3f}"


def table(
    figures: Sequence[Figure], loads: Mapping[str, tuple[float, float] | None] | None = None
) -> str:
    """The one table: figure, hubjobs, baseline/floor, ratio, target, and the load
    average over its benchmark (``loads``, by benchmark name)."""
    header = ("figure", "hubjobs", "baseline / floor", "ratio", "target", "load", "")
    rows = [header]
    for f in figures:
        unit = f" {f.unit}" if f.unit else ""
        base = "-" if f.baseline is None else f"{fmt(f.baseline)}{unit} ({f.baseline_label})"
        verdict = {True: "ok", False: "MISS", None: ""}[f.met]
        rows.append(
            (
                f.name,
                "-" if f.hubjobs is None else f"{fmt(f.hubjobs)}{unit}",
                base,
                "-" if f.ratio is None else f"{f.ratio:.2f}×",
                "-" if f.target is None else str(f.target),
                load_range((loads or {}).get(f.bench)),
                verdict,
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = []
    for n, row in enumerate(rows):
        cells = [
            row[i].ljust(widths[i]) if i in (0, 2, 6) else row[i].rjust(widths[i])
            for i in range(len(row))
        ]
        lines.append("  ".join(cells).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def write_json(
    path: Path,
    outcomes: dict[str, Outcome],
    extra: dict[str, Any],
    plots: Mapping[str, Path] | None = None,
) -> None:
    """Every figure, note, series and plot's file name (beside ``path``) by benchmark."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {
        **extra,
        "benchmarks": {
            name: {
                "seconds": o.seconds,
                "load": o.load,
                "plot": (plots or {}).get(name, Path()).name or None,
                "figures": [f.as_dict() for f in o.figures],
                "notes": o.notes,
                "series": o.series,
            }
            for name, o in outcomes.items()
        },
    }
    path.write_text(json.dumps(data, indent=2, default=str))


# --- statistics ---------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    k = (len(ordered) - 1) * q / 100
    lo, hi = math.floor(k), math.ceil(k)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else math.nan


def rotate(items: Sequence[Any], n: int) -> list[Any]:
    """The n-th rotation: alternating rounds give each contender each position."""
    k = n % len(items)
    return [*items[k:], *items[:k]]


class Clock:
    def __init__(self) -> None:
        self.started = time.perf_counter()

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.started


def say(message: str) -> None:
    """Progress on stderr (the table goes to stdout)."""
    sys.stderr.write(f"[{time.strftime('%H:%M:%S')}] {message}\n")
    sys.stderr.flush()


def phases(t0: float, returned: float, seen: float, job: Any) -> dict[str, float]:
    """Where a job's time went, in seconds, from wall-clock marks taken around the start
    call (``time.time()``) and the timestamps of its read-model row (the database's clock,
    the same machine's): the start call, until the row turned running (the workflow's
    first task and activity), until it turned final, and until this process saw it."""
    started, finished = job.started_at.timestamp(), job.finished_at.timestamp()
    return {
        "start call": returned - t0,
        "start → running": started - returned,
        "running → final": finished - started,
        "final write → seen": seen - finished,
    }


def median_phases(runs: Sequence[dict[str, float]]) -> dict[str, float]:
    return {key: median([r[key] for r in runs]) for key in runs[0]} if runs else {}


def describe_phases(found: dict[str, float], unit: str = "ms") -> str:
    scale, digits = (1000, 0) if unit == "ms" else (1, 2)
    return ", ".join(f"{k} {v * scale:.{digits}f} {unit}" for k, v in found.items())


async def poll_until(
    check: Callable[[], Awaitable[bool]], *, interval: float, timeout: float, what: str
) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} within {timeout:.0f} s")
        await asyncio.sleep(interval)


# --- processes ----------------------------------------------------------------------


class Process:
    """A child process with its output in a log file; stopped with SIGTERM, then SIGKILL."""

    def __init__(
        self,
        name: str,
        args: Sequence[str],
        *,
        env: dict[str, str] | None = None,
        logs: Path,
        cwd: Path | None = None,
    ) -> None:
        self.name = name
        logs.mkdir(parents=True, exist_ok=True)
        self.log_path = logs / f"{name}.log"
        self._log: IO[bytes] = open(self.log_path, "wb")
        self.popen = subprocess.Popen(
            list(args),
            env=env,
            cwd=cwd,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def require_alive(self) -> None:
        if not self.alive():
            raise RuntimeError(f"{self.name} exited ({self.popen.returncode}):\n{self.tail()}")

    def tail(self, lines: int = 30) -> str:
        text = self.log_path.read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, timeout: float = 20) -> None:
        if self.alive():
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout=10)
        self._log.close()


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process (all its threads), from /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(") ", 1)[1].split()
    # After the command: state is field 3, utime 14 and stime 15 (1-based, man proc).
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def memory_mb(pid: int) -> dict[str, float]:
    """VmRSS (now) and VmHWM (peak since the process started), in MB."""
    found: dict[str, float] = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                found[key] = int(value.split()[0]) / 1024
    return found


def timed_run(args: Sequence[str], *, env: dict[str, str] | None = None) -> tuple[float, str]:
    """Runs a command to its end; returns its wall time and its stdout. Fails loudly."""
    started = time.perf_counter()
    done = subprocess.run(list(args), env=env, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(
            f"{' '.join(args[:3])}… exited {done.returncode}:\n{done.stdout[-2000:]}\n"
            f"{done.stderr[-2000:]}"
        )
    return seconds, done.stdout


async def wait_for_poller(client: Any, task_queue: str, timeout: float = 60) -> None:
    """Until a worker polls ``task_queue`` for workflow tasks and for activity tasks."""
    from temporalio.api.enums.v1 import TaskQueueType
    from temporalio.api.taskqueue.v1 import TaskQueue
    from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest

    async def polled() -> bool:
        for kind in (
            TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
            TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY,
        ):
            answer = await client.workflow_service.describe_task_queue(
                DescribeTaskQueueRequest(
                    namespace=client.namespace,
                    task_queue=TaskQueue(name=task_queue),
                    task_queue_type=kind,
                )
            )
            if not answer.pollers:
                return False
        return True

    await poll_until(polled, interval=0.2, timeout=timeout, what=f"no poller on {task_queue}")


# --- running a benchmark module -----------------------------------------------------


def parser_for(module: ModuleType) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=f"bench/{Path(module.__file__ or module.NAME).name}",
        description=module.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    module.add_arguments(parser)
    parser.add_argument(
        "--pg-setting",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a PostgreSQL setting for the benchmark's server (repeatable), e.g. "
        "shared_buffers=4GB: the defaults size it for a laptop",
    )
    return parser


def pg_settings(pairs: Sequence[str]) -> dict[str, str]:
    """``NAME=VALUE`` pairs as settings; a pair without ``=`` is refused."""
    settings: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise SystemExit(f"--pg-setting wants NAME=VALUE, not {pair!r}")
        settings[name.strip()] = value.strip()
    return settings


def exit_now(code: int) -> None:
    """Leave without interpreter finalization: Temporal's runtime threads may abort it
    (the reason hubjobs' own commands leave this way too)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
