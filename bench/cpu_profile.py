"""A worker's CPU profile as shares of its active samples, for the benchmarks page.

The input is py-spy's ``--format raw``: one line a distinct stack, its frames outermost
first as ``function (file:line)`` joined by ``;``, then a space and how many samples
had it. Samples whose innermost frame is a thread waiting (the event loop's select, an
idle thread-pool worker), or with no Python frame at all, are not active: left out. A
function's share is inclusive (the samples with it anywhere in their stack, once however
deep it recurses); a layer's share is that of the samples whose innermost frame of a
known layer is its (a call into the standard library counts for its caller's layer).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

# The innermost frames of a thread with nothing to do.
IDLE_LEAVES = ("select (selectors.py", "_worker (concurrent/futures/thread.py")

# The process's entry, the event loop and threads' start (files as py-spy names them,
# from their sys.path entry): in nearly every stack, so their inclusive share says
# nothing; they belong to no layer either.
ENTRY = (
    "asyncio/",
    "threading.py",
    "concurrent/futures/",
    "typer/",
    "click/",
    "<frozen runpy>",
    "starter/cli/",
    "hubjobs/temporal/process.py",
)

# Checked in this order for each frame: the sandbox lives inside the Temporal SDK.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("the workflow sandbox", ("temporalio/worker/workflow_sandbox/",)),
    ("Temporal SDK", ("temporalio/",)),
    ("SQLAlchemy", ("sqlalchemy/",)),
    ("psycopg", ("psycopg/", "psycopg_pool/")),
    ("pydantic", ("pydantic/", "pydantic_core/", "pydantic_settings/")),
    ("ours", ("hubjobs/", "activities/", "workflows/", "starter/", "worker.py")),
)
OTHER = "the rest (event loop, standard library)"

FRAME = re.compile(r"^(?P<function>.*) \((?P<file>[^()]*?)(?::\d+)?\)$")


@dataclass
class Profile:
    """Sample counts: active and left out (idle), the active ones by function and layer."""

    active: int = 0
    idle: int = 0
    inclusive: Counter[str] = field(default_factory=Counter)
    own: Counter[str] = field(default_factory=Counter)
    layers: Counter[str] = field(default_factory=Counter)

    def share(self, count: int) -> float:
        return count / self.active if self.active else 0.0


def function_of(frame: str) -> tuple[str, str]:
    """``function (file:line)`` as the function's name and its file."""
    found = FRAME.match(frame.strip())
    return (found["function"], found["file"]) if found else (frame.strip(), "")


def is_entry(file: str) -> bool:
    """An entry frame, or a console script's (a file without a suffix, ``hubjobs``)."""
    return file.startswith(ENTRY) or (not file.startswith("<") and "." not in file)


def layer_of(file: str) -> str | None:
    if is_entry(file):
        return None
    return next((name for name, prefixes in LAYERS if file.startswith(prefixes)), None)


def parse(text: str) -> Profile:
    profile = Profile()
    for line in text.splitlines():
        stack, _, count = line.strip().rpartition(" ")
        if not count.isdigit():
            continue
        samples = int(count)
        frames = stack.split(";")
        if not stack or any(idle in frames[-1] for idle in IDLE_LEAVES):
            profile.idle += samples
            continue
        profile.active += samples
        functions = [function_of(frame) for frame in frames]
        for function, file in set(functions):
            if not is_entry(file):
                profile.inclusive[f"{function} ({file})"] += samples
        profile.own["{} ({})".format(*functions[-1])] += samples
        layers = (layer_of(file) for _, file in reversed(functions))
        profile.layers[next((layer for layer in layers if layer), OTHER)] += samples
    return profile


def percent(profile: Profile | None, count: int) -> str:
    return "-" if profile is None or not profile.active else f"{100 * profile.share(count):.1f} %"


def top_functions(profiles: Sequence[Profile], top: int) -> list[str]:
    """The functions with the highest inclusive share in any of the profiles."""
    best: Counter[str] = Counter()
    for profile in profiles:
        for function, count in profile.inclusive.items():
            best[function] = max(best[function], round(1_000_000 * profile.share(count)))
    # By share, then by name: the same profiles give the same page.
    return sorted(best, key=lambda function: (-best[function], function))[:top]


def section(
    before: tuple[str, Profile] | None, after: tuple[str, Profile] | None, top: int = 15
) -> str:
    """The benchmarks page's section: the top functions and the layers, before and after
    (each a file's name and its profile; either may be missing)."""
    named = [(label, pair) for label, pair in (("before", before), ("after", after)) if pair]
    if not named:
        return ""
    profiles = [before[1] if before else None, after[1] if after else None]
    sampled = "; ".join(
        f"{label} `{name}`, {profile.active:,} active samples ({profile.idle:,} idle left out)"
        for label, (name, profile) in named
    )
    lines = [
        "## Worker CPU in a burst, by function",
        "",
        f"The worker process sampled by py-spy (`--format raw`) through a burst of one-page "
        f"jobs: {sampled}. A function's share counts the samples with it anywhere in their "
        "stack (the process's entry and the event loop, in nearly all, are left out); self "
        "counts those where it was the innermost frame.",
        "",
        "| function | file | before (self) | after (self) |",
        "| --- | --- | --- | --- |",
    ]
    for key in top_functions([profile for _, (_, profile) in named], top):
        function, file = function_of(key)
        cells = [
            f"{percent(p, p.inclusive[key])} ({percent(p, p.own[key])})" if p else "-"
            for p in profiles
        ]
        lines.append(f"| `{function}` | `{file}` | {cells[0]} | {cells[1]} |")
    lines += [
        "",
        "By layer, each sample counted once: for the innermost frame of one of these (a "
        "call into the standard library counts for its caller's layer).",
        "",
        "| layer | before | after |",
        "| --- | --- | --- |",
    ]
    for layer in [*(name for name, _ in LAYERS), OTHER]:
        cells = [percent(p, p.layers[layer]) if p else "-" for p in profiles]
        lines.append(f"| {layer} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines) + "\n"
