"""AsyncMemoryStore: MemoryStore's calls as coroutines, on each engine."""

from __future__ import annotations

import asyncio
import inspect
import threading
import time

import pytest

import memory
from helpers import ALICE, BOB, SetClock
from memory import AsyncMemoryStore, MemoryInputError, Scope, StoreError
from model import index_problems_at, transactions_left


def test_two_hundred_tasks_remember_and_recall_exactly_their_own(target: str) -> None:
    async def one(store: AsyncMemoryStore, n: int) -> tuple[str, int, list[int]]:
        scope = Scope(f"user{n % 10}", "trip")
        memory_id = await store.remember(scope, "user", f"the code word is zeta{n}", "s")
        found = await store.recall(scope, f"zeta{n}", limit=5)
        return scope.user, memory_id, [row["id"] for row in found]

    async def run() -> tuple[list[tuple[str, int, list[int]]], list[int]]:
        async with AsyncMemoryStore(target, matching="exact", rank="idf") as store:
            done = await asyncio.wait_for(
                asyncio.gather(*(one(store, n) for n in range(200))), timeout=120)
            counts = [await store.count(Scope(f"user{u}", "trip")) for u in range(10)]
        return done, counts

    done, counts = asyncio.run(run())
    assert [found for _, memory_id, found in done] == [[memory_id] for _, memory_id, _ in done]
    assert len({memory_id for _, memory_id, _ in done}) == 200
    assert counts == [20] * 10
    assert index_problems_at(target) == []


def test_a_cancelled_call_runs_to_its_end_and_leaves_the_store_usable(target: str) -> None:
    entered, release = threading.Event(), threading.Event()
    clock = SetClock()

    def held_clock() -> str:  # the write's clock reading, inside its transaction
        if not release.is_set():
            entered.set()
            assert release.wait(30)
        return clock()

    async def run() -> tuple[int, int, list[str]]:
        async with AsyncMemoryStore(target, clock=clock) as store:
            await store.remember(ALICE, "user", "first", "s")
            store.store.clock = held_clock
            call = asyncio.create_task(store.remember(ALICE, "user", "second", "s"))
            assert await asyncio.to_thread(entered.wait, 30)
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call
            release.set()
            store.store.clock = clock
            await store.remember(BOB, "user", "after", "s")
            # The cancelled write goes on in its thread, on a connection of its own on
            # PostgreSQL: wait (bounded) for the outcome asserted below, not for luck.
            deadline = time.monotonic() + 30
            while await store.count(ALICE) < 2 and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            left = await asyncio.to_thread(transactions_left, store.store)
            texts = [row["text"] for row in await store.memories(ALICE)]
            return left, await store.count(BOB), texts

    left, bob, texts = asyncio.run(run())
    assert left == 0 and bob == 1
    assert texts == ["first", "second"]  # the cancelled write completed in its thread


def test_close_waits_for_a_cancelled_call_still_running(tmp_path: object) -> None:
    path = f"{tmp_path}/m.db"
    release = threading.Event()
    clock = SetClock()

    def held_clock() -> str:
        assert release.wait(30)
        return clock()

    async def run() -> None:
        store = await AsyncMemoryStore(path, clock=clock).open()
        store.store.clock = held_clock
        call = asyncio.create_task(store.remember(ALICE, "user", "late", "s"))
        await asyncio.sleep(0.05)
        call.cancel()
        closing = asyncio.create_task(store.close())
        await asyncio.sleep(0.05)
        assert not closing.done()  # the write still runs in its thread
        release.set()
        await asyncio.wait_for(closing, timeout=30)
        with pytest.raises(StoreError, match="closed"):
            await store.count(ALICE)

    asyncio.run(run())
    async def reopened() -> int:
        async with AsyncMemoryStore(path) as store:
            return await store.count(ALICE)
    assert asyncio.run(reopened()) == 1


def test_errors_come_through_as_the_library_raises_them(tmp_path: object) -> None:
    async def run() -> None:
        store = AsyncMemoryStore(f"{tmp_path}/m.db")
        with pytest.raises(StoreError, match="not open"):
            await store.count(ALICE)
        async with store:
            with pytest.raises(MemoryInputError, match="text must not be blank"):
                await store.remember(ALICE, "user", "  ", "s")
            assert await store.get(ALICE, 1) is None
        await store.close()  # closing again does nothing

    asyncio.run(run())


def test_it_opens_with_every_setting_a_memory_store_takes(tmp_path: object) -> None:
    settings = inspect.signature(memory.MemoryStore).parameters
    assert inspect.signature(AsyncMemoryStore).parameters == settings

    async def run() -> None:
        async with AsyncMemoryStore(f"{tmp_path}/m.db", max_text=5_000) as store:
            memory_id = await store.remember(ALICE, "user", "x" * 5_000, "s")
            kept = await store.get(ALICE, memory_id)
            assert kept is not None and kept["text"] == "x" * 5_000
            with pytest.raises(MemoryInputError, match="text"):
                await store.remember(ALICE, "user", "x" * 5_001, "s")

    asyncio.run(run())


def recording(store: AsyncMemoryStore, entered: threading.Event | None = None,
              before: threading.Event | None = None) -> list[memory.MemoryStore]:
    """The MemoryStores `store` opens, as it opens them (once its thread has said it has
    `entered`, after `before` is set, where given)."""
    opened: list[memory.MemoryStore] = []
    real = store._opening

    def opening() -> memory.MemoryStore:
        if entered is not None and before is not None:
            entered.set()
            assert before.wait(30)
        opened.append(real())
        return opened[-1]
    store._opening = opening  # type: ignore[assignment]
    return opened


def is_closed(store: memory.MemoryStore) -> bool:
    with pytest.raises(StoreError, match="closed"):
        store.count(ALICE)
    return True


def test_opens_at_once_open_one_store_and_close_closes_it(target: str) -> None:
    store = AsyncMemoryStore(target)
    opened = recording(store)

    async def run() -> None:
        await asyncio.wait_for(asyncio.gather(*(store.open() for _ in range(8))), 60)
        await store.close()

    asyncio.run(run())
    assert len(opened) == 1 and is_closed(opened[0])


def test_a_cancelled_open_is_closed_by_close(target: str) -> None:
    entered, release = threading.Event(), threading.Event()
    store = AsyncMemoryStore(target)
    opened = recording(store, entered, release)

    async def run() -> None:
        task = asyncio.create_task(store.open())
        assert await asyncio.to_thread(entered.wait, 30)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        release.set()
        await asyncio.wait_for(store.close(), 60)

    asyncio.run(run())
    assert len(opened) == 1 and is_closed(opened[0])


def test_close_from_another_event_loop_waits_for_a_call_in_flight(target: str) -> None:
    """The store belongs to no loop: a second loop's close() waits for the first loop's
    call, which is stored, and then closes the store."""
    entered, release = threading.Event(), threading.Event()
    clock = SetClock()

    def held_clock() -> str:
        entered.set()
        assert release.wait(30)
        return clock()

    store = AsyncMemoryStore(target, clock=clock)
    asyncio.run(store.open())
    store.store.clock = held_clock
    results: list[object] = []
    closed: list[object] = []

    def first_loop() -> None:
        results.append(asyncio.run(store.remember(ALICE, "user", "in flight", "s")))

    def second_loop() -> None:
        try:
            asyncio.run(store.close())
            closed.append(True)
        except BaseException as exc:  # the test reports what came instead
            closed.append(exc)

    writer = threading.Thread(target=first_loop)
    writer.start()
    assert entered.wait(30)
    closer = threading.Thread(target=second_loop)
    closer.start()
    closer.join(0.5)
    waited = closer.is_alive()
    release.set()
    for thread in (writer, closer):
        thread.join(60)
        assert not thread.is_alive()
    assert waited and closed == [True] and results == [1]
    with pytest.raises(StoreError, match="closed"):
        asyncio.run(store.count(ALICE))
    with memory.MemoryStore(target) as reopened:
        assert reopened.count(ALICE) == 1


def test_every_call_of_a_memory_store_is_a_coroutine_here() -> None:
    calls = [name for name, value in vars(memory.MemoryStore).items()
             if not name.startswith("_") and callable(value)]
    assert {"rename", "operation", "remember", "close"} <= set(calls)
    assert [name for name in calls
            if not inspect.iscoroutinefunction(getattr(AsyncMemoryStore, name, None))] == []
