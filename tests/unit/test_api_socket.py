"""The API's own listening socket (starter/api/listen.py) gives its connections what
uvicorn's would: Nagle off. Without it, a keep-alive answer's body, written after its
headers, waited for the client's delayed ACK (40 ms a GET)."""

from __future__ import annotations

import asyncio
import socket

from starter.api.listen import listening_socket


async def test_a_connection_to_the_api_socket_has_nagle_off() -> None:
    loop = asyncio.get_running_loop()
    sock = listening_socket("127.0.0.1", 0)
    accepted: asyncio.Future[int] = loop.create_future()

    class Answer(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            conn = transport.get_extra_info("socket")
            accepted.set_result(conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            transport.close()

    server = await loop.create_server(Answer, sock=sock)
    try:
        port = sock.getsockname()[1]
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        assert await asyncio.wait_for(accepted, 5) == 1
        writer.close()
    finally:
        server.close()
        await server.wait_closed()
