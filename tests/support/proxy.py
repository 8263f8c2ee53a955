"""A TCP proxy whose mode a test switches: between one worker process and PostgreSQL,
it is the network partition of issue 19.

- ``pass``: bytes go both ways.
- ``blackhole``: nothing goes anywhere, and nothing says so: connections stay open, what
  either side sends is read and dropped (its kernel acknowledges it, as a black-holing
  router's silence looks to the last hop), new connections are taken and never served.
  TCP keepalives and ``tcp_user_timeout`` cannot notice this one; only a client's own
  deadline can.
- ``reset``: every connection is reset (RST), and every new one is reset at once, as a
  server whose host refuses connections.

Leaving ``blackhole`` or ``reset`` resets the connections it held (a partition that
heals finds no state left on the path). It runs on the test's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from enum import StrEnum


class Mode(StrEnum):
    PASS = "pass"
    BLACKHOLE = "blackhole"
    RESET = "reset"


def _reset(writer: asyncio.StreamWriter) -> None:
    """Closes with an RST rather than a FIN (SO_LINGER 0)."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class Proxy:
    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self.mode = Mode.PASS
        self.port = 0
        self.accepted = 0
        self._server: asyncio.Server | None = None
        self._pairs: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter | None]] = set()

    async def start(self) -> Proxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    async def close(self) -> None:
        self._reset_all()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    def switch(self, mode: Mode) -> None:
        """The new mode, for what is open and what comes: a black hole keeps the open
        connections (silent); a reset, and the healing of either, resets them."""
        previous, self.mode = self.mode, mode
        if mode == Mode.RESET or (previous != Mode.PASS and mode != previous):
            self._reset_all()

    def _reset_all(self) -> None:
        for client, upstream in list(self._pairs):
            _reset(client)
            if upstream is not None:
                _reset(upstream)
        self._pairs.clear()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        if self.mode == Mode.RESET:
            _reset(writer)
            return
        if self.mode == Mode.BLACKHOLE:
            pair: tuple[asyncio.StreamWriter, asyncio.StreamWriter | None] = (writer, None)
            self._pairs.add(pair)
            await self._drop(reader, pair)
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            _reset(writer)
            return
        pair = (writer, up_writer)
        self._pairs.add(pair)
        await asyncio.gather(
            self._pipe(reader, up_writer, pair), self._pipe(up_reader, writer, pair)
        )

    async def _drop(
        self,
        reader: asyncio.StreamReader,
        pair: tuple[asyncio.StreamWriter, asyncio.StreamWriter | None],
    ) -> None:
        """Reads and forgets, until the connection goes."""
        with contextlib.suppress(OSError):
            while pair in self._pairs and await reader.read(65536):
                pass

    async def _pipe(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        pair: tuple[asyncio.StreamWriter, asyncio.StreamWriter | None],
    ) -> None:
        try:
            while data := await reader.read(65536):
                if self.mode == Mode.BLACKHOLE:
                    continue  # swallowed
                if pair not in self._pairs:
                    return
                writer.write(data)
                await writer.drain()
        except OSError:
            pass
        finally:
            if pair in self._pairs and self.mode == Mode.PASS:
                self._pairs.discard(pair)
                for side in pair:
                    if side is not None:
                        side.close()
