"""Another user of the machine: a command run as ``nobody`` (setpriv drops root's user,
group and supplementary groups, and clears the environment), to show what a stack's
servers and files give someone who is not their owner. The tests run as root, as this
machine's CI does: only root can become another user."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping

OTHER_USER = "nobody"
OTHER_GROUP = "nogroup"


def as_other_user(
    *args: str, env: Mapping[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """``args`` run as ``nobody`` with a fresh environment (plus ``env``), whatever its
    exit code."""
    assert os.geteuid() == 0, "becoming another user needs root"
    command = [
        "setpriv",
        f"--reuid={OTHER_USER}",
        f"--regid={OTHER_GROUP}",
        "--clear-groups",
        "--reset-env",
    ]
    if env:
        command += ["env", *(f"{name}={value}" for name, value in env.items())]
    return subprocess.run(
        [*command, *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def readable_by_other_user(path: os.PathLike[str] | str) -> bool:
    """Whether ``nobody`` can read the file (``cat`` as that user succeeds)."""
    return as_other_user("cat", os.fspath(path)).returncode == 0
