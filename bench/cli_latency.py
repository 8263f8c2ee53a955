"""Wall time of the CLI commands a person runs while a job runs, each as a process
against the stack in HUBJOBS_HOME (after `make run`: the demo's profile gives the
workspace and actor): `tag-course` and `cancel` (targets: 600 ms on a quiet machine),
`status` and `list` (250 ms), as JSON, as the plain text printed off a terminal, and
as the table printed on one (a pseudo-terminal of 120 × 40, TERM=xterm-256color).
Prints each command's median and best of N runs, and the machine's load, which a figure
means nothing without. Not a test: the numbers are the machine's.

    .venv/bin/python bench/cli_latency.py [--runs 7] [--hubjobs PATH]

With the embedded stack's background worker running (`make run`, `hubjobs demo`, `hubjobs
up --worker`) a start and a cancel go through it (starter/warm); without, the CLI
makes them itself (`hubjobs down` then `hubjobs up` to measure that path); a one-shot
`status` and `list` are quick reads, printed by the worker (starter/warm/quick.py).
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
TARGETS_MS = {
    "tag-course": 600,
    "cancel": 600,
    "status": 250,
    "list": 250,
    "status text": 250,
    "list text": 250,
    "status tty": 250,
    "list tty": 250,
}
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
    parser.add_argument("--runs", type=int, default=7)
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
    times: dict[str, list[float]] = {name: [] for name in TARGETS_MS}
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
        if n:
            for name, value in rounds.items():
                times[name].append(value)
    load = os.getloadavg()[0]
    print(f"load average {load:.2f} on {os.cpu_count()} cores, {args.runs} runs each")
    for name, values in times.items():
        median = statistics.median(values)
        verdict = "ok" if median <= TARGETS_MS[name] else "over"
        print(
            f"  {name:11} median {median:5.0f} ms  best {min(values):5.0f} ms  "
            f"(target {TARGETS_MS[name]} ms: {verdict})"
        )


if __name__ == "__main__":
    main()
