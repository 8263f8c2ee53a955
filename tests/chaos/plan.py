"""The campaign's plan, drawn from its seed before anything runs: the hub's workspaces and
courses, every fault (kind, target, start, duration, parameters), every load event (the
jobs started and their sizes, cancels, repeated keys, retries, schedules, watchers,
webhooks) and the hub writer's edits. The same seed and length give the same plan, so a
campaign is replayed by its seed (``--faults`` keeps some fault kinds only).

Times are seconds from the start of the campaign's window. Faults never overlap on one
target (a worker is not killed while it is stopped), and overlap freely across targets."""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field
from typing import Any

WORKERS = ("worker-a", "worker-b", "worker-c")
# worker-a reaches PostgreSQL through the black-hole proxy; worker-c runs under
# libfaketime, its wall clock steppable.
PROXIED_WORKER = "worker-a"
CLOCK_WORKER = "worker-c"

# Every fault kind, with what it occupies while it lasts (a fault on a busy target is
# drawn again elsewhere) and its duration's range in seconds (0: the act alone, a kill
# whose server the stack's supervisor brings back; the range is then how long the
# target is held busy after it).
FAULT_KINDS: dict[str, tuple[float, float]] = {
    "worker_kill": (2, 30),
    "worker_stop": (5, 40),
    "api_kill": (2, 20),
    "api_stop": (5, 25),
    "temporal_kill": (0, 0),
    "temporal_stop": (5, 25),
    "postgres_kill": (0, 0),
    "postgres_stop": (5, 25),
    "partition_blackhole": (10, 45),
    "partition_reset": (5, 30),
    "disk_full": (10, 40),
    "clock_step": (30, 120),
    "signal_flood": (0, 0),
    "memory_cgroup": (30, 120),
    "rolling_restart": (0, 0),
}
# How long a target stays busy after a fault of no duration of its own.
KILL_BUSY = 20.0
FLOOD_BUSY = 100.0
ROLLING_BUSY = 60.0
# The long tagging job a flood aims at starts this long before it.
FLOOD_JOB_LEAD = 8.0
# Nothing starts before the stack has warmed up; no fault starts in the last seconds.
WARMUP = 12.0


@dataclass(frozen=True)
class Profile:
    """Sizes that follow the campaign's length: a short campaign (CI) runs smaller jobs
    and a smaller flood, so that it settles in seconds."""

    courses: tuple[tuple[int, ...], ...]  # pages of each course, per workspace
    long_course: int  # the flood's target
    flood_signals: int
    flood_senders: int
    flood_queries_per_second: int
    start_every: float  # mean seconds between two starts
    edit_every: float  # mean seconds between two edits of the hub writer
    schedule_every: tuple[int, int]  # the tagging and the export schedule's interval
    max_fault_seconds: float
    faults_per_minute: float
    min_faults: int
    attachments_per_workspace: int

    @classmethod
    def for_minutes(cls, minutes: float) -> Profile:
        if minutes >= 5:
            return cls(
                courses=((25, 300, 2500), (80, 1200, 6000), (40, 600)),
                long_course=40_000,
                flood_signals=20_000,
                flood_senders=25,
                flood_queries_per_second=100,
                start_every=6.0,
                edit_every=0.4,
                schedule_every=(45, 60),
                max_fault_seconds=120,
                faults_per_minute=3.0,
                min_faults=15,
                attachments_per_workspace=5,
            )
        return cls(
            courses=((20, 150, 800), (40, 400), (30,)),
            long_course=10_000,
            flood_signals=2000,
            flood_senders=25,
            flood_queries_per_second=20,
            start_every=3.5,
            edit_every=0.4,
            schedule_every=(20, 30),
            max_fault_seconds=15,
            faults_per_minute=5.0,
            min_faults=8,
            attachments_per_workspace=2,
        )


@dataclass(frozen=True)
class Course:
    number: int
    workspace: int
    pages: int
    long: bool = False


@dataclass(frozen=True)
class Fault:
    number: int
    kind: str
    target: str
    at: float
    seconds: float
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def busy_until(self) -> float:
        return self.at + busy_seconds(self.kind, self.seconds)


@dataclass(frozen=True)
class Start:
    """A job started by the load: by the HTTP API or the Python client."""

    number: int
    at: float
    kind: str  # course_tagging, page_export, backup
    workspace: int
    course: int | None
    method: str  # api, client
    key: str | None
    notify: bool
    watch: bool
    tag: str | None = None
    pages_per_file: int | None = None
    flood: bool = False


@dataclass(frozen=True)
class Cancel:
    number: int
    at: float
    start: int
    method: str  # api, client, bare (`temporal workflow signal --name cancel`)


@dataclass(frozen=True)
class Repeat:
    """A start sent again with an earlier start's idempotency key: the same payload
    (the same job expected), or another (a conflict: 409 expected)."""

    number: int
    at: float
    start: int
    method: str
    conflict: bool


@dataclass(frozen=True)
class Retry:
    number: int
    at: float
    start: int
    method: str


@dataclass(frozen=True)
class Schedule:
    number: int
    workspace: int
    kind: str
    course: int
    every_seconds: int
    create_at: float
    delete_at: float
    tag: str | None = None


@dataclass(frozen=True)
class Edit:
    """The hub writer's change of a page (never a course's root): a new title, to the
    trash, or out of it."""

    at: float
    course: int
    ordinal: int
    action: str  # edit, trash, restore


@dataclass(frozen=True)
class Plan:
    seed: int
    minutes: float
    profile: Profile
    courses: list[Course]
    faults: list[Fault]
    starts: list[Start]
    cancels: list[Cancel]
    repeats: list[Repeat]
    retries: list[Retry]
    schedules: list[Schedule]
    edits: list[Edit]

    @property
    def window(self) -> float:
        return self.minutes * 60

    @property
    def starts_by_number(self) -> dict[int, Start]:
        return {start.number: start for start in self.starts}

    def keep_faults(self, kinds: set[str]) -> Plan:
        """The same plan with only these fault kinds (a replay of what matters)."""
        kept = [f for f in self.faults if f.kind in kinds]
        return Plan(**{**self.__dict__, "faults": kept})

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def busy_seconds(kind: str, seconds: float) -> float:
    if kind == "signal_flood":
        return FLOOD_BUSY
    if kind == "rolling_restart":
        return ROLLING_BUSY
    return seconds if seconds > 0 else KILL_BUSY


def resources(kind: str, target: str) -> set[str]:
    """What a fault occupies: its target, all workers for a rolling restart."""
    if kind == "rolling_restart":
        return set(WORKERS)
    return {target}


def targets(kind: str) -> list[str]:
    if kind in ("worker_kill", "worker_stop", "memory_cgroup"):
        return list(WORKERS)
    if kind.startswith("partition_"):
        return [f"link:{PROXIED_WORKER}"]
    if kind == "clock_step":
        return [f"clock:{CLOCK_WORKER}"]
    if kind.startswith("api_"):
        return ["api"]
    if kind.startswith("temporal_"):
        return ["temporal"]
    if kind.startswith("postgres_"):
        return ["postgres"]
    if kind == "disk_full":
        return ["postgres-disk"]
    if kind == "signal_flood":
        return ["flood"]
    return ["workers"]


def make_plan(seed: int, minutes: float) -> Plan:
    profile = Profile.for_minutes(minutes)
    window = minutes * 60
    courses = _courses(profile)
    faults = _faults(random.Random(f"{seed}:faults"), profile, window)
    load = _Load(random.Random(f"{seed}:load"), profile, courses, window, seed)
    load.draw()
    for fault in faults:
        if fault.kind == "signal_flood":
            load.flood_job(fault)
    edits = _edits(random.Random(f"{seed}:edits"), profile, courses, window)
    return Plan(
        seed=seed,
        minutes=minutes,
        profile=profile,
        courses=courses,
        faults=faults,
        starts=sorted(load.starts, key=lambda s: s.at),
        cancels=load.cancels,
        repeats=load.repeats,
        retries=load.retries,
        schedules=load.schedules(),
        edits=edits,
    )


def _courses(profile: Profile) -> list[Course]:
    courses: list[Course] = []
    for workspace, sizes in enumerate(profile.courses):
        for pages in sizes:
            courses.append(Course(len(courses), workspace, pages))
    last_workspace = len(profile.courses) - 1
    return [*courses, Course(len(courses), last_workspace, profile.long_course, long=True)]


def _faults(rng: random.Random, profile: Profile, window: float) -> list[Fault]:
    """Every kind once (in a drawn order) while the count allows, then kinds drawn at
    random; each placed at a random time where its targets are free."""
    count = max(profile.min_faults, round(profile.faults_per_minute * window / 60))
    kinds = list(FAULT_KINDS)
    rng.shuffle(kinds)
    wanted = kinds[:count] + [rng.choice(list(FAULT_KINDS)) for _ in range(count - len(kinds))]
    busy: dict[str, list[tuple[float, float]]] = {}
    faults: list[Fault] = []
    for kind in wanted:
        fault = _place(rng, profile, window, kind, busy, len(faults))
        if fault is not None:
            faults.append(fault)
            for resource in resources(fault.kind, fault.target):
                busy.setdefault(resource, []).append((fault.at, fault.busy_until))
    faults.sort(key=lambda f: f.at)
    return [Fault(i, f.kind, f.target, f.at, f.seconds, f.params) for i, f in enumerate(faults)]


def _place(
    rng: random.Random,
    profile: Profile,
    window: float,
    kind: str,
    busy: dict[str, list[tuple[float, float]]],
    number: int,
) -> Fault | None:
    low, high = FAULT_KINDS[kind]
    for _ in range(60):
        target = rng.choice(targets(kind))
        seconds = round(rng.uniform(low, min(high, profile.max_fault_seconds)), 1) if high else 0.0
        span = busy_seconds(kind, seconds)
        earliest = WARMUP + (FLOOD_JOB_LEAD + 10 if kind == "signal_flood" else 0)
        # A flood's long job must finish inside the window and the settle bound.
        latest = window * 0.6 if kind == "signal_flood" else window - min(span, window / 3)
        if latest <= earliest:
            return None
        at = round(rng.uniform(earliest, latest), 1)
        if all(
            end + 2 <= at or at + span + 2 <= start
            for resource in resources(kind, target)
            for start, end in busy.get(resource, [])
        ):
            return Fault(number, kind, target, at, seconds, _params(rng, kind, profile))
    return None


def _params(rng: random.Random, kind: str, profile: Profile) -> dict[str, Any]:
    if kind == "clock_step":
        return {"offset": rng.choice(["+2h", "-2h"])}
    if kind == "memory_cgroup":
        return {"limit_mb": rng.choice([192, 256, 320])}
    if kind == "signal_flood":
        return {
            "signals": profile.flood_signals,
            "senders": profile.flood_senders,
            "queries_per_second": profile.flood_queries_per_second,
        }
    return {}


class _Load:
    """Draws the load's events: starts at random intervals, and for some of them a
    cancel, a repeat of their key, a conflicting key, a retry of their failed pages."""

    def __init__(
        self,
        rng: random.Random,
        profile: Profile,
        courses: list[Course],
        window: float,
        seed: int,
    ) -> None:
        self.rng = rng
        self.profile = profile
        self.courses = courses
        self.window = window
        self.seed = seed
        self.starts: list[Start] = []
        self.cancels: list[Cancel] = []
        self.repeats: list[Repeat] = []
        self.retries: list[Retry] = []

    def draw(self) -> None:
        at = 4.0
        while True:
            at += self.rng.expovariate(1 / self.profile.start_every)
            if at > self.window - 10:
                return
            self.starts.append(self._start(len(self.starts), round(at, 1)))
            self._follow_ups(self.starts[-1])

    def _start(self, number: int, at: float) -> Start:
        rng = self.rng
        kind = rng.choices(["course_tagging", "page_export", "backup"], [0.68, 0.18, 0.14])[0]
        ordinary = [c for c in self.courses if not c.long]
        course = rng.choice(ordinary)
        keyed = rng.random() < 0.3
        common: dict[str, Any] = {
            "number": number,
            "at": at,
            "kind": kind,
            "workspace": course.workspace,
            "method": rng.choices(["api", "client"], [0.6, 0.4])[0],
            "key": f"chaos-{self.seed}-{number}" if keyed else None,
            "notify": rng.random() < 0.35,
            "watch": rng.random() < 0.25,
        }
        if kind == "course_tagging":
            return Start(**common, course=course.number, tag=f"chaos-{number}")
        if kind == "page_export":
            whole = rng.random() < 0.3
            per_file = rng.choice([50, 500, 2000])
            return Start(**common, course=None if whole else course.number, pages_per_file=per_file)
        return Start(**common, course=None)

    def _follow_ups(self, start: Start) -> None:
        rng = self.rng
        if rng.random() < 0.25:
            self._add_cancel(start, start.at + rng.uniform(0.5, 25))
        if start.key is not None:
            method = rng.choice(["api", "client"])
            self._add_repeat(start, start.at + rng.uniform(0, 40), method, conflict=False)
            # A backup's payload is empty: there is no other payload to send its key with.
            if start.kind != "backup" and rng.random() < 0.3:
                method = rng.choice(["api", "client"])
                self._add_repeat(start, start.at + rng.uniform(0, 40), method, conflict=True)
        if start.kind == "course_tagging" and rng.random() < 0.25:
            at = start.at + rng.uniform(40, 120)
            if at < self.window:
                method = rng.choice(["api", "client"])
                self.retries.append(Retry(len(self.retries), round(at, 1), start.number, method))

    def _add_cancel(self, start: Start, at: float) -> None:
        if at < self.window:
            method = self.rng.choices(["api", "client", "bare"], [0.4, 0.3, 0.3])[0]
            self.cancels.append(Cancel(len(self.cancels), round(at, 1), start.number, method))

    def _add_repeat(self, start: Start, at: float, method: str, *, conflict: bool) -> None:
        if at < self.window:
            self.repeats.append(
                Repeat(len(self.repeats), round(at, 1), start.number, method, conflict)
            )

    def flood_job(self, fault: Fault) -> None:
        """The long tagging job a flood aims at, started just before it."""
        long = next(c for c in self.courses if c.long)
        number = len(self.starts)
        self.starts.append(
            Start(
                number=number,
                at=round(fault.at - FLOOD_JOB_LEAD, 1),
                kind="course_tagging",
                workspace=long.workspace,
                course=long.number,
                method="client",
                # Keyed: a start that meets an outage is sent again (the flood needs it).
                key=f"chaos-{self.seed}-flood-{number}",
                notify=False,
                watch=True,
                tag=f"chaos-{number}",
                flood=True,
            )
        )
        fault.params["job"] = number

    def schedules(self) -> list[Schedule]:
        small = min((c for c in self.courses if not c.long), key=lambda c: c.pages)
        export = next(c for c in self.courses if c.workspace != small.workspace)
        tagging_every, export_every = self.profile.schedule_every
        end = self.window - 5
        return [
            Schedule(
                0,
                small.workspace,
                "course_tagging",
                small.number,
                tagging_every,
                6.0,
                end,
                tag=f"scheduled-{self.seed}",
            ),
            Schedule(1, export.workspace, "page_export", export.number, export_every, 7.0, end),
        ]


def _edits(
    rng: random.Random, profile: Profile, courses: list[Course], window: float
) -> list[Edit]:
    trashed: dict[int, list[int]] = {}
    edits: list[Edit] = []
    # Bigger courses are edited more, though not in proportion (the long one would
    # take nearly every edit).
    weights = [c.pages**0.5 for c in courses]
    at = WARMUP / 2
    while True:
        at += rng.expovariate(1 / profile.edit_every)
        if at > window:
            return edits
        course = rng.choices(courses, weights)[0]
        action = rng.choices(["edit", "trash", "restore"], [0.75, 0.12, 0.13])[0]
        in_trash = trashed.setdefault(course.number, [])
        if action == "restore" and in_trash:
            ordinal = in_trash.pop(rng.randrange(len(in_trash)))
        else:
            action = "edit" if action == "restore" else action
            ordinal = rng.randrange(1, course.pages)
            if action == "trash":
                in_trash.append(ordinal)
        edits.append(Edit(round(at, 2), course.number, ordinal, action))
