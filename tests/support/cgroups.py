"""A memory cgroup (v1: ``/sys/fs/cgroup/memory/<name>/``) for a test's process: the
kernel OOM-kills a process that outgrows its limit, so a memory bound is tested for
real. As root; the group is removed afterwards."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

MEMORY = Path("/sys/fs/cgroup/memory")


@dataclass(frozen=True)
class MemoryCgroup:
    path: Path

    def prefix(self) -> list[str]:
        """A command prefix that runs the command in the group from its first
        instruction (the shell joins it, then becomes the command)."""
        return ["sh", "-c", f'echo $$ > {self.path / "cgroup.procs"} && exec "$@"', "sh"]

    def _read(self, name: str) -> str:
        return (self.path / name).read_text()

    @property
    def limit_bytes(self) -> int:
        return int(self._read("memory.limit_in_bytes"))

    def max_usage_bytes(self) -> int:
        """The group's peak charge: its processes' memory and the page cache they
        filled (reclaimed under the limit, so near it whenever files were written)."""
        return int(self._read("memory.max_usage_in_bytes"))

    def oom_kills(self) -> int:
        for line in self._read("memory.oom_control").splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return 0

    def pids(self) -> list[int]:
        return [int(pid) for pid in self._read("cgroup.procs").split()]


@contextmanager
def memory_cgroup(name: str, limit_bytes: int) -> Iterator[MemoryCgroup]:
    """A memory cgroup of ``limit_bytes`` (no swap here: memory is the whole bound) for
    the block; its processes must have ended when it closes."""
    if not (MEMORY / "cgroup.procs").is_file():
        pytest.skip("no cgroup v1 memory controller at /sys/fs/cgroup/memory")
    path = MEMORY / name
    path.mkdir()
    try:
        (path / "memory.limit_in_bytes").write_text(str(limit_bytes))
        yield MemoryCgroup(path)
    finally:
        group = MemoryCgroup(path)
        deadline = time.monotonic() + 15
        while group.pids() and time.monotonic() < deadline:
            time.sleep(0.05)  # a killed process leaves its group once it is reaped
        path.rmdir()
