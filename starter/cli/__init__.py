"""``hubjobs``: the command line. Every command takes ``--json``; an error is one line on
stderr, ``error: <message> [<code>]``, exit 2 for what the caller got wrong (``invalid_…``,
``unknown_kind``) and 1 otherwise, its detail (codes, ids, types: never the caller's text)
in ``<HUBJOBS_HOME>/hubjobs.log`` when there is a stack. The job commands are clients of
the HTTP API (remote.py) and load no SDK, ORM or driver; the stack and operator commands
talk to the servers, importing what they use when they run."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Annotated, Any

import typer

from hubjobs.domain.text import printable
from hubjobs.errors import HubJobsError
from hubjobs.temporal.process import run_and_exit
from starter.cli import audit, jobs, ops, queue, schedules, stack
from starter.cli.output import error_line, errors_as_json, exit_code_of

APP_OPTIONS: dict[str, Any] = {
    "name": "hubjobs",
    "help": "Durable background jobs for the knowledge hub, on Temporal. Each kind's start "
    "command (tag-course, backup, export, …) comes from the API (`hubjobs up` runs one).",
    "no_args_is_help": True,
    "add_completion": True,  # --install-completion / --show-completion for bash, zsh, fish
    "pretty_exceptions_enable": False,
}
app = typer.Typer(**APP_OPTIONS)


def _print_version(asked: bool) -> None:
    if asked:
        from importlib.metadata import version

        sys.stdout.write(f"hubjobs {version('hubjobs')}\n")
        raise typer.Exit(0)


@app.callback()
def _main(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version."
        ),
    ] = False,
) -> None:
    """Durable background jobs for the knowledge hub, on Temporal."""


# One command line, the commands of each audience on it (in this order in --help).
for audience in (stack, jobs, audit, queue, ops):
    app.registered_commands.extend(audience.commands.registered_commands)
app.add_typer(schedules.schedule_app)


def app_for(args: Sequence[str]) -> typer.Typer:
    """The app that runs ``args``: one holding only the command named first, as a subcommand
    (typer builds every command's options before it runs any), else the whole app. A name
    no command of hubjobs' own has is a kind's start command, as the API serves it."""
    named = args[0] if args and not args[0].startswith("-") else None
    for info in app.registered_commands if named else ():
        if info.callback is not None and _name_of(info) == named:
            return _single(info)
    if named in _group_names() or any(a in ("--version", "--show-completion") for a in args):
        return app
    if named is not None:
        for info in _served_commands():
            if info.name == named:
                return _single(info)
        return app
    whole = typer.Typer(**APP_OPTIONS)
    whole.callback()(_main)
    # In --help: the stack's commands, the kinds' starts, the other job commands, ops'.
    after_stack = len(stack.commands.registered_commands)
    whole.registered_commands = list(app.registered_commands)
    whole.registered_commands[after_stack:after_stack] = _kinds_if_served()
    whole.registered_groups = list(app.registered_groups)
    return whole


def _name_of(info: typer.models.CommandInfo) -> str:
    assert info.callback is not None
    return info.name or typer.main.get_command_name(info.callback.__name__)


def _group_names() -> set[str]:
    return {group.name for group in app.registered_groups if group.name}


def _single(info: typer.models.CommandInfo) -> typer.Typer:
    single = typer.Typer(name="hubjobs", add_completion=False, pretty_exceptions_enable=False)
    single.registered_commands = [info]
    single.callback()(_main)
    return single


def _served_commands() -> list[typer.models.CommandInfo]:
    """Each served kind's start command (``unavailable`` when the API does not answer)."""
    from starter.cli.kinds import command_of
    from starter.cli.remote import api_url, served_kinds

    return [command_of(kind) for kind in served_kinds(api_url())]


def _kinds_if_served() -> list[typer.models.CommandInfo]:
    """The kinds' commands for the whole app's help, when the API answers; none else
    (the help then says where they come from)."""
    try:
        return _served_commands()
    except HubJobsError:
        return []


def run_cli(args: Sequence[str] | None = None) -> int:
    """Runs one command line (``sys.argv`` by default) and returns its exit code. A usage
    error (an unknown option, a value of the wrong type) is one line as well, with the
    code ``invalid_argument`` and exit code 2, its text made printable."""
    if args is None:
        args = sys.argv[1:]
    errors_as_json("--json" in args)
    try:
        chosen = app_for(args)
    except HubJobsError as error:  # the API, asked for the kinds' commands
        error_line(error.message, error.code)
        return exit_code_of(error.code)
    try:
        result = chosen(args=args, prog_name="hubjobs", standalone_mode=False)
    except typer.TyperException as usage:  # typer's click exceptions
        exit_code = int(getattr(usage, "exit_code", 2))
        if type(usage).__name__ != "NoArgsIsHelpError":  # its help is printed already
            error_line(printable(usage.format_message()), "invalid_argument")
        return exit_code
    except typer.Abort:
        error_line("aborted", "aborted")
        return 1
    return result if isinstance(result, int) else 0


def main() -> None:
    run_and_exit(lambda: sys.exit(run_cli()))


if __name__ == "__main__":
    main()
