"""Wall time of the CLI commands a person runs while a job runs, each as a process
calling the API of the stack in HUBJOBS_HOME (after `make run`: the demo's profile
gives the workspace and actor; HUBJOBS_API_URL another API, as compose runs it):
`tag-course`, `cancel`, `status` and `list`, as JSON, as the plain text printed off a
terminal, and as the table printed on one (a pseudo-terminal of 120 × 40), each beside
the floor timed in the same rounds, `python -c "import httpx, typer"`: the ratio of
medians against its target (status and list ≤2×, a start and a cancel ≤3×). Prints the
machine's load, which a figure means nothing without. Not a test.

    .venv/bin/python bench/cli_latency.py [--runs 10] [--hubjobs PATH]

``--hubjobs`` times another checkout's CLI (a baseline), against the same stack.
"""

from __future__ import annotations

import argparse
import errno
import fcntl
import json
import os
import pty
import statistics
import struct
import subprocess
import sys
import termios
import time
import uuid
from pathlib import Path

HUBJOBS = str(Path(sys.executable).parent / "hubjobs")
REPO = Path(__file__).resolve().parents[1]
# Each command's target, as a ratio of its median to the floor's.
TARGETS = {
    "tag-course": 3.0,
    "cancel": 3.0,
    "status": 2.0,
    "list": 2.0,
    "status text": 2.0,
    "list text": 2.0,
    "status tty": 2.0,
    "list tty": 2.0,
}
FLOOR = [sys.executable, "-c", "import httpx, typer"]
# The terminal the "tty" rows print on: its size, and what rich reads for its colours.
TTY_SIZE = (120, 40)
TTY_ENV = {"TERM": "xterm-256color"}


def timed(hubjobs: str, args: list[str], *, as_json: bool = True) -> tuple[float, str]:
    """One command's wall time (stdout a pipe: the plain text is the off-terminal one)."""
    started = time.perf_counter()
    done = subprocess.run(
        [hubjobs, *args, *(["--json"] if as_json else [])], capture_output=True, text=True
    )
    took = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"hubjobs {' '.join(args)} failed: {done.stderr.strip()}")
    return took * 1000, done.stdout


def timed_on_terminal(hubjobs: str, args: list[str]) -> float:
    """One command's wall time with stdout and stderr on a pseudo-terminal, until it
    exits and its output is read."""
    master, slave = pty.openpty()
    columns, lines = TTY_SIZE
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", lines, columns, 0, 0))
    started = time.perf_counter()
    try:
        done = subprocess.Popen(
            [hubjobs, *args],
            env=os.environ | TTY_ENV,
            stdin=subprocess.DEVNULL,
            stdout=slave,
            stderr=slave,
        )
    finally:
        os.close(slave)
    written = _drained(master)
    code = done.wait()
    took = time.perf_counter() - started
    if code != 0:
        raise SystemExit(f"hubjobs {' '.join(args)} failed on a terminal: {written!r}")
    return took * 1000


def _drained(master: int) -> bytes:
    """What was written to the terminal, read until no one holds it (EIO on Linux)."""
    chunks = []
    try:
        while chunk := os.read(master, 65536):
            chunks.append(chunk)
    except OSError as err:
        if err.errno != errno.EIO:
            raise
    finally:
        os.close(master)
    return b"".join(chunks)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--hubjobs", default=HUBJOBS, help="The CLI to time (default: ours).")
    args = parser.parse_args()
    home = Path(os.environ.get("HUBJOBS_HOME", REPO / ".hubjobs"))
    profile = json.loads((home / "profile.json").read_text())
    # Bytecode for hubjobs' own modules, as an install writes it.
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", "hubjobs", "starter", "activities"],
        cwd=REPO,
        check=True,
    )
    times: dict[str, list[float]] = {name: [] for name in TARGETS}
    floor: list[float] = []
    for n in range(args.runs + 1):  # the first round warms the page cache
        tag = f"bench-{uuid.uuid4().hex[:8]}"
        took, out = timed(
            args.hubjobs, ["tag-course", "--root-page", profile["root_page_id"], "--tag", tag]
        )
        job = json.loads(out)["id"]
        rounds = {
            "tag-course": took,
            "status": timed(args.hubjobs, ["status", job])[0],
            "list": timed(args.hubjobs, ["list", "--limit", "20"])[0],
            "status text": timed(args.hubjobs, ["status", job], as_json=False)[0],
            "list text": timed(args.hubjobs, ["list", "--limit", "20"], as_json=False)[0],
            "status tty": timed_on_terminal(args.hubjobs, ["status", job]),
            "list tty": timed_on_terminal(args.hubjobs, ["list", "--limit", "20"]),
            "cancel": timed(args.hubjobs, ["cancel", job])[0],
        }
        started = time.perf_counter()
        subprocess.run(FLOOR, check=True)
        floor_ms = (time.perf_counter() - started) * 1000
        if n:
            floor.append(floor_ms)
            for name, value in rounds.items():
                times[name].append(value)
    load = os.getloadavg()[0]
    print(f"load average {load:.2f} on {os.cpu_count()} cores, {args.runs} runs each")
    base = statistics.median(floor)
    print(f"  {'floor':11} median {base:5.0f} ms  best {min(floor):5.0f} ms  (import httpx, typer)")
    for name, values in times.items():
        median = statistics.median(values)
        ratio = median / base
        verdict = "ok" if ratio <= TARGETS[name] else "over"
        print(
            f"  {name:11} median {median:5.0f} ms  best {min(values):5.0f} ms  "
            f"{ratio:4.2f}× the floor (target ≤{TARGETS[name]:.0f}×: {verdict})"
        )


if __name__ == "__main__":
    main()
