"""The long-poll registry: woken from another thread, no lost wake-up, released on close."""

from __future__ import annotations

import asyncio
import threading

from raftmq.node.long_poll import LongPollRegistry


def test_waiter_woken_by_arrival_from_another_thread():
    async def main():
        reg = LongPollRegistry(asyncio.get_running_loop())
        arrived = []
        task = asyncio.ensure_future(reg.wait("T", 1, 30.0, lambda: bool(arrived)))
        await asyncio.sleep(0.05)
        assert len(reg) == 1
        arrived.append(1)
        threading.Thread(target=reg.on_arrival, args=("T", 1, 5)).start()
        assert await asyncio.wait_for(task, 10) is True
        assert len(reg) == 0

    asyncio.run(main())


def test_arrival_on_another_queue_does_not_wake():
    async def main():
        reg = LongPollRegistry(asyncio.get_running_loop())
        task = asyncio.ensure_future(reg.wait("T", 1, 0.3, lambda: False))
        await asyncio.sleep(0.05)
        reg.on_arrival("T", 2, 1)
        reg.on_arrival("U", 1, 1)
        assert await task is False  # timed out, nothing for (T, 1)

    asyncio.run(main())


def test_arrival_before_registration_is_not_lost():
    async def main():
        reg = LongPollRegistry(asyncio.get_running_loop())
        # The message arrived between the caller's read and wait(): ready() sees it, no waiting.
        assert await asyncio.wait_for(reg.wait("T", 0, 30.0, lambda: True), 5) is True
        assert len(reg) == 0

    asyncio.run(main())


def test_close_releases_waiters():
    async def main():
        reg = LongPollRegistry(asyncio.get_running_loop())
        tasks = [asyncio.ensure_future(reg.wait("T", q, 30.0, lambda: False)) for q in range(3)]
        await asyncio.sleep(0.05)
        reg.close()
        assert await asyncio.wait_for(asyncio.gather(*tasks), 5) == [True, True, True]
        assert await asyncio.wait_for(reg.wait("T", 0, 30.0, lambda: False), 5) is False  # closed: no parking

    asyncio.run(main())
