"""``hubjobs``: the command line over the starter client, plus the embedded stack.

Every command takes ``--json``. Errors are one plain line on stderr,
``error: <message> [<code>]``, and a non-zero exit: 2 for what the caller got wrong
(codes ``invalid_…``, ``unknown_kind``; a usage error is ``invalid_argument``), 1
otherwise. The detail goes to ``<HUBJOBS_HOME>/hubjobs.log``: codes, ids and error
types, never the text a caller passed. Text that is not valid UTF-8 (argv bytes Python
decodes with surrogateescape) is refused as ``invalid_encoding`` before anything runs.

The job commands (start, status, list, items, retry, cancel, watch, schedules) are
clients of the HTTP API (remote.py), as any other service is: they import neither the
Temporal SDK, SQLAlchemy nor psycopg, and start in about the time of importing httpx
and typer. The stack and operator commands (up, down, worker, api, migrate, restore,
seed-demo, demo) talk to the servers themselves, importing what they use when they run.

The commands live by audience: jobs (starter/cli/jobs.py), schedules (schedules.py),
the embedded stack and the demo (stack.py), operators' (ops.py); what they print and
how they fail in output.py and common.py."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Annotated

import typer

from hubjobs.domain.text import printable
from hubjobs.temporal.process import run_and_exit
from starter.cli import jobs, ops, schedules, stack
from starter.cli.output import error_line, errors_as_json

app = typer.Typer(
    name="hubjobs",
    help="Durable background jobs for the knowledge hub, on Temporal.",
    no_args_is_help=True,
    add_completion=True,  # --install-completion / --show-completion for bash, zsh, fish
    pretty_exceptions_enable=False,
)


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
for audience in (stack, jobs, ops):
    app.registered_commands.extend(audience.commands.registered_commands)
app.add_typer(schedules.schedule_app)


def _group() -> None:
    """Durable background jobs for the knowledge hub, on Temporal."""


def app_for(args: Sequence[str]) -> typer.Typer:
    """The app that runs ``args``: one holding only the command named first, when one
    is (typer builds the options of every command an app holds, before it runs any:
    ~20 ms a command line), else the whole app (help, an unknown command, a group such
    as ``schedule``). The one command stays a subcommand, so its usage, help and errors
    read the same."""
    for info in app.registered_commands if args else ():
        if info.callback is None:
            continue
        if (info.name or typer.main.get_command_name(info.callback.__name__)) == args[0]:
            single = typer.Typer(
                name="hubjobs", add_completion=False, pretty_exceptions_enable=False
            )
            single.registered_commands = [info]
            single.callback()(_group)
            return single
    return app


def run_cli(args: Sequence[str] | None = None) -> int:
    """Runs one command line (``sys.argv`` by default) and returns its exit code. A usage
    error (an unknown option, a value of the wrong type) is one line as well, with the
    code ``invalid_argument`` and exit code 2, its text made printable."""
    if args is None:
        args = sys.argv[1:]
    errors_as_json("--json" in args)
    try:
        result = app_for(args)(args=args, prog_name="hubjobs", standalone_mode=False)
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
