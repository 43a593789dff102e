"""The kept budget (KEPT_BYTES): a scope whose vectors do not fit it is read a block at a
time as recall scores it, and ranks as a scope within it; the copies kept count what they
hold, so that the budget bounds the process."""

from __future__ import annotations

import gc
import random
import tracemalloc
from typing import Any

import pytest
from embedders import Blurred, ConceptEmbedder

import memory
from helpers import ALICE, ALICE_WORK, BOB, SetClock
from memory import MemoryStore, Scope

pytest.importorskip("numpy")

WORDS = ["jazz", "dinner", "vegetarian", "concert", "Lisbon", "supper", "band", "plants",
         "music", "trip", "guitar", "beach"]
QUERIES = ["jazz dinner", "a vegetarian supper in Lisbon", "band music", "beach trip guitar"]


def fill(store: MemoryStore, clock: SetClock) -> list[dict[str, Any]]:
    """Alice's memories at her user level and in two tasks, interleaved by id, some without
    a vector, some of several texts, some expiring; Bob's beside them."""
    rng = random.Random(5)
    items: list[dict[str, Any]] = []
    for n in range(150):
        text = " ".join(rng.sample(WORDS, rng.randint(1, 4)))
        embed: Any = [True, True, True, False, [text, rng.choice(WORDS)]][n % 5]
        items.append({"scope": [ALICE, ALICE_WORK, BOB][n % 3],
                      "level": "user" if n % 4 else "task", "text": text,
                      "source": f"c{n % 7}/turn", "metadata": {"n": n % 4}, "embed": embed,
                      "ttl": 60 if n % 11 == 0 else None})
    store.remember_many(items)
    clock.advance(120)  # the ones with a ttl have expired
    return items


def recalled(store: MemoryStore) -> list[list[memory.Recalled]]:
    return [store.recall(scope, query, 6, rank=rank, explain=True, context=context,
                         where=where)
            for scope in (ALICE, ALICE_WORK, Scope("alice", "elsewhere"))
            for query in QUERIES for rank in ("meaning", "hybrid")
            for context in (False, True) for where in (None, {"n": {"$in": [1, 2]}})]


@pytest.mark.parametrize("embedder", [ConceptEmbedder, Blurred])
def test_recall_past_the_budget_ranks_as_within_it(
        target: str, clock: SetClock, monkeypatch: pytest.MonkeyPatch,
        embedder: type[ConceptEmbedder]) -> None:
    """Meaning and hybrid, with and without context and a filter, at the user level and in
    tasks, on vectors that tie and on vectors whose products round: the same memories,
    scores and explanations whether the scope's vectors are kept whole, read whole for the
    first time, or read three rows at a time past the budget; past it nothing is kept."""
    with MemoryStore(target, embedder=embedder(), clock=clock) as store:
        fill(store, clock)
        first = recalled(store)  # read in blocks, each scope then kept whole
        assert any(kind is memory._Vectors for kind, _ in store._planner._copies)
        assert recalled(store) == first  # from the copies kept
    monkeypatch.setattr(memory, "KEPT_BYTES", 1)
    monkeypatch.setattr(memory, "_VECTOR_BLOCK_BYTES", 3 * 4 * embedder().dimensions)
    with MemoryStore(target, embedder=embedder(), clock=clock) as store:
        assert recalled(store) == first
        assert not store._planner._copies
    assert all(found for found in first[:4])  # the queries find something


def test_past_the_budget_a_recall_reads_one_block_at_a_time(
        target: str, clock: SetClock, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each read past the budget asks for a block's rows of one owner, under the scope;
    no statement reads the scope's vectors at once."""
    with MemoryStore(target, embedder=ConceptEmbedder(), clock=clock) as store:
        items = fill(store, clock)
    monkeypatch.setattr(memory, "KEPT_BYTES", 1)
    monkeypatch.setattr(memory, "_VECTOR_BLOCK_BYTES", 5 * 4 * 16)
    read: list[int] = []
    real = memory._vector_blocks

    def counted(db: memory._Session, key: memory._ScopeKey, dimensions: int) -> Any:
        for rows in real(db, key, dimensions):
            read.append(len(rows))
            yield rows
    monkeypatch.setattr(memory, "_vector_blocks", counted)
    with MemoryStore(target, embedder=ConceptEmbedder(), clock=clock) as store:
        store.recall(ALICE, "jazz", 3, rank="meaning")
    assert max(read) == 5 and len(read) >= 6
    # Every vector row of the scope once, the expired ones' too.
    assert sum(read) == sum(item["scope"].user == ALICE.user and item["embed"] is not False
                            and (item["level"] == "user" or item["scope"] == ALICE)
                            for item in items)


def held_after(call: Any) -> int:
    """The bytes that stay allocated after `call`, as tracemalloc counts them."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        call()
        gc.collect()
        return tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("users, each", [(400, 3), (4, 3_000)])
@pytest.mark.parametrize("kind", ["meaning", "context"])
def test_the_kept_copies_count_what_they_hold(tmp_path: Any, users: int, each: int,
                                              kind: str) -> None:
    """Many small copies and a few large ones: the running total of the kept copies is
    within a quarter of what keeping them holds in memory (tracemalloc), and is the sum
    of what each copy counts."""
    path = str(tmp_path / "memory.db")
    with MemoryStore(path, embedder=ConceptEmbedder()) as store:
        for user in range(users):
            store.remember_many([(Scope(f"u{user}", "t"), "user", f"jazz dinner {n}",
                                  f"c{n % 3}/turn") for n in range(each)])
    with MemoryStore(path, embedder=ConceptEmbedder()) as store:
        planner = store._planner

        def ask(user: str) -> None:
            store.recall(Scope(user, "t"), "jazz", 3, rank="meaning" if kind == "meaning"
                         else "idf", context=kind == "context")
        ask("nobody")  # what any first recall makes once (statements, caches)
        counted_before = planner._kept_bytes
        def ask_each() -> None:
            for user in range(users):
                ask(f"u{user}")
        held = held_after(ask_each)
        counted = planner._kept_bytes - counted_before
        assert 0.75 <= held / counted <= 1.25, (held, counted)
        assert planner._kept_bytes == sum(memory._COPY_BYTES + copy.size
                                          for _, copy in planner._copies.values())


def test_the_budget_drops_the_oldest_read_and_keeps_its_total(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """With room for a few copies, each new one drops the least recently read, and the
    running total stays the sum of those kept, never above the budget."""
    path = str(tmp_path / "memory.db")
    with MemoryStore(path, embedder=ConceptEmbedder()) as store:
        for user in range(12):
            store.remember_many([(Scope(f"u{user}", "t"), "user", f"jazz {n}", "s")
                                 for n in range(20)])
    with MemoryStore(path, embedder=ConceptEmbedder()) as store:
        planner = store._planner
        store.recall(Scope("u0", "t"), "jazz", 3, rank="meaning")
        (one,) = planner._copies.values()
        monkeypatch.setattr(memory, "KEPT_BYTES", 3 * (memory._COPY_BYTES + one[1].size))
        for user in [1, 2, 0, 3, 4, 0, 5]:
            store.recall(Scope(f"u{user}", "t"), "jazz", 3, rank="meaning")
            assert planner._kept_bytes == sum(memory._COPY_BYTES + copy.size
                                              for _, copy in planner._copies.values())
            assert planner._kept_bytes <= memory.KEPT_BYTES
        assert [key.user for _, key in planner._copies] == ["u4", "u0", "u5"]
        # A copy made again (after a write, and after a deletion) takes its old one's place.
        for change in ("write", "forget"):
            if change == "write":
                store.remember(Scope("u0", "t"), "user", "jazz again", "s")
            else:
                store.forget(Scope("u0", "t"), 1)
            store.recall(Scope("u0", "t"), "jazz", 3, rank="meaning")
            assert [key.user for _, key in planner._copies][-2:] == ["u5", "u0"]
            assert planner._kept_bytes == sum(memory._COPY_BYTES + copy.size
                                              for _, copy in planner._copies.values())


def test_past_the_budget_a_recall_holds_a_block_not_the_scope(
        target: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A meaning recall over 2 MiB of vectors, with a budget of 64 KiB and blocks of 16 KiB,
    allocates at its peak less than half of them (tracemalloc)."""
    embedder = ConceptEmbedder(dimensions=64)
    with MemoryStore(target, embedder=embedder) as store:
        for start in range(0, 8_000, 2_000):
            store.remember_many([(ALICE, "user", f"jazz dinner {n} {n % 97}", "s")
                                 for n in range(start, start + 2_000)])
    monkeypatch.setattr(memory, "KEPT_BYTES", 64 * 2**10)
    monkeypatch.setattr(memory, "_VECTOR_BLOCK_BYTES", 16 * 2**10)
    with MemoryStore(target, embedder=embedder) as store:
        store.recall(ALICE, "jazz", 3, rank="meaning")  # what any first recall makes once
        gc.collect()
        tracemalloc.start()
        try:
            found = store.recall(ALICE, "jazz dinner 5", 3, rank="meaning")
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert found and peak < 2**20, peak


def test_a_first_recall_with_context_holds_a_block_of_rows_not_the_scope(
        target: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Reading a scope's conversations into the kept copy fetches its rows a block at a
    time: the recall's peak stays within three times the copy it keeps (all the rows at
    once, as tuples, took more than four)."""
    with MemoryStore(target) as store:
        for start in range(0, 20_000, 5_000):
            store.remember_many([(ALICE, "user", f"jazz dinner {n}", f"talk-{n // 20}/turn")
                                 for n in range(start, start + 5_000)])
    monkeypatch.setattr(memory, "_ROWS_PER_READ", 1_000)
    with MemoryStore(target) as store:
        store.recall(BOB, "jazz", 3, context=True)  # what any first recall makes once
        gc.collect()
        tracemalloc.start()
        try:
            store.recall(ALICE, "jazz dinner", 3, context=True)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        _, copy = store._planner._copies[memory._Conversations,
                                         memory._ScopeKey(ALICE.user, ALICE.task)]
    assert peak < 3 * copy.size, (peak, copy.size)
