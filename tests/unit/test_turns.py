"""hubjobs.db.turns: at most ``capacity`` holders, the rest served in order (urgent ones
first), a wait past its bound fails with nothing held, and a holder asking again gets
the turn it has."""

from __future__ import annotations

import asyncio

import pytest

from hubjobs.db.engine import async_engine, capacity
from hubjobs.db.turns import NoTurn, Turns


async def _holder(
    turns: Turns,
    order: list[str],
    name: str,
    release: asyncio.Event,
    entered: asyncio.Event | None = None,
) -> None:
    async with turns.turn(5):
        order.append(name)
        if entered is not None:
            entered.set()
        await release.wait()


async def test_holders_are_bounded_and_served_in_order_urgent_first() -> None:
    turns = Turns(2)
    order: list[str] = []
    release = asyncio.Event()
    b_in = asyncio.Event()
    tasks = [
        asyncio.create_task(_holder(turns, order, n, release, b_in if n == "b" else None))
        for n in ("a", "b", "c", "d")
    ]
    async with asyncio.timeout(5):
        await b_in.wait()
    await asyncio.sleep(0)  # c and d had their chance to go in
    assert order == ["a", "b"]

    async def urgent() -> None:
        async with turns.turn(5, urgent=True):
            order.append("urgent")

    first = asyncio.create_task(urgent())
    await asyncio.sleep(0)
    release.set()
    await asyncio.gather(*tasks, first)
    assert order == ["a", "b", "urgent", "c", "d"]


async def test_a_wait_past_its_bound_fails_and_holds_nothing() -> None:
    turns = Turns(1)
    release = asyncio.Event()
    holder = asyncio.create_task(_holder(turns, [], "a", release))
    await asyncio.sleep(0)
    with pytest.raises(NoTurn):
        async with turns.turn(0.05):
            raise AssertionError("ran without a turn")
    release.set()
    await holder
    async with turns.turn(0.05):  # the timed-out waiter left nothing behind
        pass


async def test_a_cancelled_waiter_passes_its_turn_on() -> None:
    turns = Turns(1)
    release = asyncio.Event()
    order: list[str] = []
    holder = asyncio.create_task(_holder(turns, order, "a", release))
    await asyncio.sleep(0)
    cancelled = asyncio.create_task(_holder(turns, order, "cancelled", asyncio.Event()))
    after = asyncio.create_task(_holder(turns, order, "after", release))
    await asyncio.sleep(0)
    cancelled.cancel()
    release.set()
    await asyncio.gather(holder, after)
    assert order == ["a", "after"]
    assert cancelled.cancelled()


async def test_a_holder_asking_again_is_not_made_to_wait_on_itself() -> None:
    turns = Turns(1)
    async with turns.turn(0.05), turns.turn(0.05):
        pass
    other = Turns(1)
    async with turns.turn(0.05), other.turn(0.05):  # another Turns is another line
        pass


def test_a_clients_turns_are_as_many_as_its_engines_connections() -> None:
    # No connection is made: an engine connects on first use.
    assert capacity(async_engine("postgresql://nobody@127.0.0.1:1/none", pool_size=5)) == 10
    assert capacity(async_engine("postgresql://nobody@127.0.0.1:1/none", pool_size=1)) == 2
