"""The warm starter: the embedded stack's background worker makes the CLI's starts,
cancels and one-shot reads (``status``, ``list``), over a unix socket in HUBJOBS_HOME
(``starts.sock``, its owner's only).

Why: a start or a cancel needs the Temporal SDK and SQLAlchemy, whose imports alone
take longer than the whole command may (600 ms), and a read needs psycopg (a fifth of
its 250 ms); the worker has them loaded and connected already. The CLI sends the call
it would have made (a ``WorkspaceJobs`` method and its arguments) and the worker makes
it through the same client: one implementation of every start, with its checks and
options, wherever it runs. When no worker serves the socket, or it runs with other
settings, the CLI makes the call itself, as before.

A one-shot ``status`` or ``list`` goes further: the ``hubjobs`` command asks the worker
for what it prints before the CLI is loaded at all (quick.py: no pydantic, typer or rich).

The protocol (protocol.py), the worker's side (server.py), the CLI's (relay.py, quick.py)."""
