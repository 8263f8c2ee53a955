"""A TCP relay from an address on the test network to a port on loopback.

The Temporal dev server only works bound to loopback (its services reach each other
at 127.0.0.1 whatever ``--ip`` says), so the test hosts in network namespaces reach
it through this relay on the bridge: their traffic crosses the veth link all the
same. ``python -m tests.relay LISTEN_HOST LISTEN_PORT TARGET_PORT``.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except OSError:
        pass
    finally:
        writer.close()


async def serve(host: str, port: int, target: int) -> None:
    async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", target)
        except OSError:
            writer.close()
            return
        await asyncio.gather(_pipe(reader, upstream_writer), _pipe(upstream_reader, writer))

    server = await asyncio.start_server(relay, host, port)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
