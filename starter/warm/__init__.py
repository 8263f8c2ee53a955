"""The warm starter: the embedded stack's background worker starts and cancels jobs for
the CLI, over a unix socket in HUBJOBS_HOME (``starts.sock``).

Why: a start or a cancel needs the Temporal SDK and SQLAlchemy, whose imports alone
take longer than the whole command may (600 ms); the worker has both loaded and
connected already. The CLI sends the call it would have made (``WorkspaceJobs``' method
and arguments) and the worker makes it through the same client: one implementation of
every start, with its checks and options, wherever it runs. When no worker serves the
socket, or it runs with other settings, the CLI makes the call itself, as before.

The protocol (protocol.py), the worker's side (server.py), the CLI's (relay.py)."""
