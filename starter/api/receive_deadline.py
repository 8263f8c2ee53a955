"""A deadline on receiving each request, which uvicorn lacks (a client sending its headers
a byte a second held a socket for as long as it liked): uvicorn's h11 protocol, closing a
connection whose request has not arrived whole within HUBJOBS_API_RECEIVE_TIMEOUT_SECONDS
of its first byte (of the connection, for its first request). Between requests uvicorn's
keep-alive timeout applies; once a request is in, the bound is off (an answer may stream)."""

from __future__ import annotations

import asyncio
import logging
from typing import ClassVar

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger("starter.api")


class ReceiveDeadline(H11Protocol):
    """uvicorn's h11 protocol with the receive deadline (see the module)."""

    receive_seconds: ClassVar[float] = 10.0
    _receiving: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._follow()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._follow()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _follow(self) -> None:
        """Armed while a request is on its way: some of it is in, not all of it."""
        state = self.conn.their_state
        partial = state is h11.IDLE and bool(self.conn.trailing_data[0])
        if state is h11.SEND_BODY or partial:
            self._arm()
        else:
            self._disarm()

    def _arm(self) -> None:
        if self._receiving is None:
            self._receiving = self.loop.call_later(self.receive_seconds, self._too_slow)

    def _disarm(self) -> None:
        if self._receiving is not None:
            self._receiving.cancel()
            self._receiving = None

    def _too_slow(self) -> None:
        self._receiving = None
        if self.transport.is_closing():
            return
        log.info("a request did not arrive within %.0f s: connection closed", self.receive_seconds)
        self.transport.close()


def receive_deadline(seconds: float) -> type[ReceiveDeadline]:
    """The protocol class for uvicorn's ``http=``, with a deadline of ``seconds``."""
    return type("ReceiveDeadline", (ReceiveDeadline,), {"receive_seconds": seconds})
