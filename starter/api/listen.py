"""The API's listening socket, bound before uvicorn starts: a port another process
holds is the CLI's error (``port_taken``, naming the holder, exit 1), where uvicorn
would print its own text and exit 3."""

from __future__ import annotations

import errno
import socket

from hubjobs.devstack.embedded import describe_holder
from hubjobs.errors import InvalidInput, PortTaken


def listening_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host``:``port`` (as uvicorn binds its own: address
    reuse on, for a restart over connections in TIME_WAIT); uvicorn listens on it."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # Named TCP: asyncio turns Nagle off (TCP_NODELAY) only on connections whose socket
    # says IPPROTO_TCP; with proto 0, each keep-alive answer's body waited for the
    # client's delayed ACK of its headers.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as err:
        sock.close()
        if err.errno == errno.EADDRINUSE:
            raise PortTaken(
                f"the API's port {port} is held by {describe_holder(port)}: "
                "free it, or serve on another (--port, HUBJOBS_API_PORT)"
            ) from None
        raise InvalidInput(
            f"the API cannot listen on {host}:{port} ({err.strerror})", code="invalid_argument"
        ) from None
    sock.set_inheritable(True)
    return sock
