"""Where a command finds its stack: the state folder (HUBJOBS_HOME, else the nearest
``.hubjobs/`` up the tree) and the files in it. Plain Python: the CLI's job commands
read these without loading the settings' validation."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from hubjobs.errors import NoStack

STACK_FILE = "stack.json"
# The demo's workspace, actor and course (`hubjobs demo` writes it): the CLI's defaults
# when neither a flag nor HUBJOBS_WORKSPACE / HUBJOBS_ACTOR names them.
PROFILE_FILE = "profile.json"
# The embedded stack's token secret (`hubjobs up` writes it): `hubjobs token` and
# `hubjobs api` use it only while no token key of any kind is configured.
DEV_SECRET_FILE = "dev-token-secret"
# The embedded stack's completion-webhook signing secret (`hubjobs up` writes it): used
# only while HUBJOBS_WEBHOOK_SECRET is not set.
DEV_WEBHOOK_SECRET_FILE = "dev-webhook-secret"


HOME_FOLDER = ".hubjobs"


def holds_stack(folder: Path) -> bool:
    """Whether ``folder`` is a stack's home: it holds a stack's record or a profile."""
    return (folder / STACK_FILE).is_file() or (folder / PROFILE_FILE).is_file()


def nearest_home(start: Path | None = None) -> Path:
    """The nearest ``.hubjobs/`` holding a stack or a profile, from the working directory
    up as git finds its repository; none found, ``.hubjobs`` here."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        candidate = folder / HOME_FOLDER
        if holds_stack(candidate):
            return candidate
    return Path(HOME_FOLDER)


def no_stack(home: Path, *, named: bool, instead: str = "") -> NoStack:
    """The one line of a command that needs a stack and found none: where it looked, and
    what settings would do instead (``instead``)."""
    if named:
        where = f"no stack in HUBJOBS_HOME ({home.resolve()})"
    else:
        where = (
            f"no stack found: no {HOME_FOLDER}/ in {Path.cwd().resolve()} or a folder above "
            "it, and HUBJOBS_HOME is unset"
        )
    other = f", or set {instead}" if instead else ""
    return NoStack(f"{where}: run `hubjobs up`, set HUBJOBS_HOME to a stack's folder{other}")


# The embedded stack's API (`hubjobs up` starts it): its address, for the CLI.
API_FILE = "api.json"


def home_now() -> Path:
    """HUBJOBS_HOME when set (and not empty), else the nearest home."""
    return Path(os.environ.get("HUBJOBS_HOME") or nearest_home())


def home_named() -> bool:
    """Whether HUBJOBS_HOME names the state folder (rather than the search up the tree)."""
    return bool(os.environ.get("HUBJOBS_HOME"))


def stack_home(instead: str = "") -> Path:
    """The state folder of a command that needs a stack's; ``NoStack`` when it holds
    none (see ``no_stack``)."""
    home = home_now()
    if not holds_stack(home):
        raise no_stack(home, named=home_named(), instead=instead)
    return home


def recorded(home: Path, name: str) -> dict[str, Any]:
    """A JSON file of the state folder (empty when there is none)."""
    path = home / name
    if not path.is_file():
        return {}
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def update_profile(home: Path, values: dict[str, Any]) -> Path:
    """Sets ``values`` in the profile, keeping what else it holds; readable by its owner
    only (it may hold an API token), written whole or not at all."""
    home.mkdir(parents=True, exist_ok=True)
    profile = recorded(home, PROFILE_FILE) | values
    write_private(home / PROFILE_FILE, json.dumps(profile, indent=2) + "\n")
    return home / PROFILE_FILE


def write_private(path: Path, text: str) -> None:
    """``text`` into ``path``, readable by this user only, replacing it in one step."""
    partial = path.with_name(f".{path.name}.partial")
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as out:
        out.write(text)
    os.replace(partial, path)
