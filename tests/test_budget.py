"""The kept budget (KEPT_BYTES): a scope whose vectors do not fit it is read a block at a
time as recall scores it, and ranks as a scope within it; the copies kept count what they
hold, so that the budget bounds the process."""

from __future__ import annotations

import gc
import importlib
import json
import random
import re
import shutil
import sqlite3
import struct
import tracemalloc
from typing import Any

import pytest
from embedders import Blurred, ConceptEmbedder
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import memory
from helpers import (
    ALICE,
    ALICE_WORK,
    BOB,
    FIXTURES,
    PG_BEFORE_VALIDITY,
    TOUCHES_MEMORY_DATA,
    SetClock,
    served_answers,
)
from memory import MemoryStore, Scope
from model import owner_connection

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
    first time, or read past the budget in sealed blocks of four and three rows at a time
    between and after them; past it nothing is kept."""
    sealed_every(monkeypatch, 4, embedder().dimensions)
    with MemoryStore(target, embedder=embedder(), clock=clock) as store:
        fill(store, clock)
        store.forget(ALICE, store.memories(ALICE)[9]["id"])  # a block's rows, between
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

    def counted(db: memory._Session, key: memory._ScopeKey, dimensions: int,
                *reuse: Any, **past: Any) -> Any:
        for block in real(db, key, dimensions, *reuse, **past):
            read.append(len(block.ids))
            yield block
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
    """A meaning recall over 2 MiB of vectors, with a budget of 64 KiB and blocks of 16 KiB
    (read and sealed), allocates at its peak less than half of them (tracemalloc)."""
    embedder = ConceptEmbedder(dimensions=64)
    monkeypatch.setattr(memory, "_SEALED_BLOCK_BYTES", 16 * 2**10)
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


# -- sealed blocks (SQLite from layout 9) ------------------------------------------------

def sealed_every(monkeypatch: pytest.MonkeyPatch, memories: int, dimensions: int) -> None:
    """Writes seal a block for each `memories` vectors of an owner past its newest block."""
    monkeypatch.setattr(memory, "_SEALED_BLOCK_BYTES", memories * 4 * dimensions)


def blocks_agree(target: str, dimensions: int, written: bool = True) -> int:
    """Every sealed block holds exactly what memory_vectors holds for its owner's memories
    from its first id to its last, and each owner's blocks are disjoint; after a write
    (`written`), no owner has a block's worth of vectors past its newest block (a deletion
    leaves that to the owner's next write); how many blocks there are."""
    postgres = target.startswith("postgresql://")

    def rows(sql: str, *parameters: Any) -> list[tuple[Any, ...]]:
        if postgres:
            sql = sql.replace(" IS ?", " IS NOT DISTINCT FROM ?").replace("?", "%s")
        return [tuple(bytes(v) if isinstance(v, memoryview) else v for v in row)
                for row in db.execute(sql, parameters).fetchall()]

    with owner_connection(target) as db:
        blocks = rows("SELECT user_id, task_id, first_id, last_id, after_id, ids, vectors"
                      " FROM memory_vector_blocks ORDER BY user_id, task_id, first_id")
        per_block = memory._SEALED_BLOCK_BYTES // (4 * dimensions)
        ends: dict[tuple[str, str | None], int] = {}
        for user, task, first, last, after, ids, vectors in blocks:
            assert first > after >= ends.get((user, task), 0)
            assert rows("SELECT count(*) FROM memory_vectors WHERE user_id = ? AND"
                        " task_id IS ? AND id > ? AND id < ?", user, task, after, first
                        ) == [(0,)]
            held = rows("SELECT id, vector FROM memory_vectors WHERE user_id = ? AND"
                        " task_id IS ? AND id BETWEEN ? AND ? ORDER BY id",
                        user, task, first, last)
            assert len(held) == per_block and held[0][0] == first and held[-1][0] == last
            each = [i for i, vector in held for _ in range(len(vector) // (4 * dimensions))]
            assert ids == struct.pack(f"<{len(each)}q", *each)
            assert vectors == b"".join(vector for _, vector in held)
            ends[user, task] = last
        owners = rows("SELECT DISTINCT user_id, task_id FROM memory_vectors") if written else []
        for user, task in owners:
            assert rows("SELECT count(*) FROM memory_vectors WHERE user_id = ? AND"
                        " task_id IS ? AND id > ?", user, task, ends.get((user, task), 0)
                        )[0][0] < per_block
        return len(blocks)


def test_every_change_leaves_the_blocks_holding_what_the_vectors_hold(
        target: str, clock: SetClock, monkeypatch: pytest.MonkeyPatch) -> None:
    """Writes one at a time and in bulk, forgets of every kind, keyed replaces, expiry,
    a new embedder and erasure: after each, every block holds its memories' vectors as
    memory_vectors does, and every owner's full blocks are sealed."""
    path = target
    sealed_every(monkeypatch, 4, 16)
    with MemoryStore(path, embedder=ConceptEmbedder(), clock=clock) as store:
        items = fill(store, clock)
        assert blocks_agree(path, 16) >= 10
        store.purge_expired()
        assert blocks_agree(path, 16, written=False) >= 10
        alice = [m["id"] for m in store.memories(ALICE)]
        store.forget(ALICE, alice[5])
        for memory_id in alice[len(alice) // 2 : len(alice) // 2 + 6]:
            store.forget(ALICE, memory_id)
        blocks_agree(path, 16, written=False)
        before = blocks_agree(path, 16, written=False)
        for n in range(9):
            store.remember(ALICE, "user" if n % 3 else "task", f"jazz band {n}", "talk/turn")
            blocks_agree(path, 16, written=False)  # the owners not written to wait
        assert blocks_agree(path, 16, written=False) > before
        store.remember(ALICE, "user", "Alice sits by the aisle.", "s", key="seat")
        store.remember(ALICE, "user", "Alice sits by the window.", "s", key="seat")
        store.forget_source(ALICE, "talk/turn")
        blocks_agree(path, 16, written=False)
        store.forget_conversation(ALICE_WORK, "c3")
        blocks_agree(path, 16, written=False)
        store.forget_where(ALICE, {"n": 2})
        blocks_agree(path, 16, written=False)
        store.revise(ALICE, store.memories(ALICE)[0]["id"], "Alice plays the guitar.", "s")
        assert blocks_agree(path, 16, written=False) >= 5
        store.reindex(embedder=ConceptEmbedder("concepts-2", dimensions=24))
        assert blocks_agree(path, 24) >= 5
        store.erase_user("bob")
        blocks_agree(path, 24, written=False)
        assert store.count(BOB) == 0 and len(items) == 150


@pytest.mark.parametrize("embedder", [ConceptEmbedder, Blurred])
def test_sealed_blocks_rank_as_rows(tmp_path: Any, monkeypatch: pytest.MonkeyPatch,
                                    embedder: type[ConceptEmbedder]) -> None:
    """Two files of the same memories, one with sealed blocks of three memories (forgets
    leaving gaps between them) and one without any, recall the same past the budget."""
    found = []
    dimensions = embedder().dimensions
    for memories in (3, 10**6):
        sealed_every(monkeypatch, memories, dimensions)
        clock = SetClock()
        path = str(tmp_path / f"{memories}.db")
        with MemoryStore(path, embedder=embedder(), clock=clock) as store:
            fill(store, clock)
            alice = [m["id"] for m in store.memories(ALICE)]
            for memory_id in alice[4 : len(alice) : 9]:
                store.forget(ALICE, memory_id)
            assert (blocks_agree(path, dimensions, written=False) > 10) == (memories == 3)
        monkeypatch.setattr(memory, "KEPT_BYTES", 1)
        with MemoryStore(path, embedder=embedder(), clock=clock) as store:
            found.append(recalled(store))
        monkeypatch.undo()
    assert found[0] == found[1]
    assert all(found[0][:4])


def test_a_forgotten_memory_is_never_recalled_from_its_block(
        target: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A memory forgotten by another store on the same file, read past the budget from the
    block that held it: gone from every recall, and another user's blocks never seen."""
    path = target
    sealed_every(monkeypatch, 4, 16)
    monkeypatch.setattr(memory, "KEPT_BYTES", 1)
    with MemoryStore(path, embedder=ConceptEmbedder()) as reader, \
            MemoryStore(path, embedder=ConceptEmbedder()) as writer:
        ids = writer.remember_many([(scope, "user", f"jazz concert {n}", "s")
                                    for n in range(12) for scope in (ALICE, BOB)])
        assert blocks_agree(path, 16) == 6
        alice, bob = ids[::2], ids[1::2]
        assert sorted(r["id"] for r in reader.recall(ALICE, "jazz", 20, rank="meaning")) == alice
        writer.forget(ALICE, alice[5])
        writer.forget(BOB, alice[6])  # not Bob's: nothing
        found = [r["id"] for r in reader.recall(ALICE, "jazz", 20, rank="meaning")]
        assert sorted(found) == [i for i in alice if i != alice[5]]
        assert sorted(r["id"] for r in reader.recall(BOB, "jazz", 20, rank="meaning")) == bob
        assert blocks_agree(path, 16, written=False) == 5
        # A memory past the owner's blocks (and one in the dropped block's place): no block
        # holds it, so none is dropped.
        writer.forget(ALICE, writer.remember(ALICE, "user", "jazz again", "s"))
        writer.forget(ALICE, alice[4])
        assert blocks_agree(path, 16, written=False) == 5


def test_a_version_8_file_seals_its_vectors_as_it_upgrades(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Read as it is, a version-8 file recalls from its rows; upgraded, from the blocks its
    upgrade sealed, the same memories its release recalled."""
    path = str(tmp_path / "v8.db")
    shutil.copy(FIXTURES / "version-8-055a6a4.sqlite3", path)
    recorded = json.loads((FIXTURES / "version-8-055a6a4.json").read_text())
    sealed_every(monkeypatch, 1, 16)
    monkeypatch.setattr(memory, "KEPT_BYTES", 1)
    for read_only in (True, False):
        with MemoryStore(path, read_only=read_only, embedder=ConceptEmbedder()) as store:
            for scoped, expected in recorded["meaning"].items():
                found = store.recall(Scope(*scoped.split("/")), recorded["query"],
                                     recorded["limit"], rank="meaning")
                assert [r["id"] for r in found] == expected
    assert blocks_agree(path, 16) == len(recorded["rows"])


def test_every_statement_of_the_blocks_carries_the_scope(
        tmp_path: Any, clock: SetClock, monkeypatch: pytest.MonkeyPatch) -> None:
    path = str(tmp_path / "memory.db")
    sealed_every(monkeypatch, 3, 16)
    monkeypatch.setattr(memory, "KEPT_BYTES", 1)
    with MemoryStore(path, embedder=ConceptEmbedder(), clock=clock) as store:
        statements: list[str] = []
        store.db.set_trace_callback(statements.append)
        fill(store, clock)
        recalled(store)
        alice = [m["id"] for m in store.memories(ALICE)]
        for memory_id in alice[::7]:
            store.forget(ALICE, memory_id)
        store.remember(ALICE, "task", "jazz", "s")
        scoped = len(statements)
        store.purge_expired()  # an operator's call, user by user
        store.db.set_trace_callback(None)
    blocks = [s for s in statements if "memory_vector_blocks" in s]
    assert {s.split(" ")[0] for s in blocks} == {"SELECT", "INSERT", "DELETE"}
    # The blocks' ids, and each block's vectors where the vectors file holds none yet.
    assert any(s.startswith("SELECT first_id, last_id, after_id, ids FROM") for s in blocks)
    assert any(s.startswith("SELECT vectors FROM memory_vector_blocks") for s in blocks)
    assert any(s.startswith("DELETE FROM memory_vector_blocks") for s in statements[scoped:])
    for statement in memory_statements(statements[scoped:]):
        # Which users have something expired: an operator's look across users, by time.
        if not statement.startswith(tuple(f"SELECT DISTINCT user_id FROM {table} WHERE"
                                          " expires_at" for table in ("memories",
                                                                      "memory_receipts"))):
            assert "WHERE user_id = " in statement  # but the users', ids alone
    for statement in memory_statements(statements[:scoped]):
        assert re.search(r"WHERE user_id = .*\btask_(id|key) (IS|=|IN) ", statement), statement


def memory_statements(statements: list[str]) -> list[str]:
    return [s for s in statements if TOUCHES_MEMORY_DATA.search(s)]


def test_a_block_that_does_not_hold_the_embedder_s_dimensions_is_refused(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    path = str(tmp_path / "memory.db")
    sealed_every(monkeypatch, 2, 16)
    with MemoryStore(path, embedder=ConceptEmbedder()) as store:
        store.remember_many([(ALICE, "user", f"jazz {n}", "s") for n in range(4)])
    db = sqlite3.connect(path)
    with db:
        db.execute("UPDATE memory_vector_blocks SET vectors = substr(vectors, 5)"
                   " WHERE first_id = (SELECT max(first_id) FROM memory_vector_blocks)")
    db.close()
    with MemoryStore(path, embedder=ConceptEmbedder()) as store:
        with pytest.raises(memory.SchemaError, match="dimensions"):
            store.recall(ALICE, "jazz", 3, rank="meaning")


def test_a_version_6_postgres_database_seals_its_vectors_as_it_upgrades(
        url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A database back at version 6 (no blocks) upgrades to blocks of every owner's
    vectors, and recalls past the budget as it did before."""
    sealed_every(monkeypatch, 3, 16)
    monkeypatch.setattr(memory, "KEPT_BYTES", 1)
    with MemoryStore(url, embedder=ConceptEmbedder()) as store:
        store.remember_many([(scope, level, f"jazz concert {n}", "s") for n in range(10)
                             for scope in (ALICE, BOB) for level in ("user", "task")])
        before = [store.recall(scope, "jazz", 20, rank="meaning") for scope in (ALICE, BOB)]
    with owner_connection(url) as db:  # version 6, as its release made it
        for statement in PG_BEFORE_VALIDITY:
            db.execute(statement)
        db.execute("DROP TABLE memory_history")
        db.execute("DROP TABLE memory_receipts")
        db.execute("ALTER TABLE memories DROP COLUMN version")
        db.execute("ALTER TABLE memory_counts DROP COLUMN weight")
        db.execute("DROP TABLE memory_vector_blocks")
        db.execute("UPDATE store_settings SET value = '6' WHERE name = 'schema_version'")
    with MemoryStore(url, embedder=ConceptEmbedder()) as store:
        assert blocks_agree(url, 16) == 12
        assert [store.recall(scope, "jazz", 20, rank="meaning") for scope in (ALICE, BOB)
                ] == before


def test_without_numpy_sealed_blocks_score_as_numpy_s(
        target: str, clock: SetClock, monkeypatch: pytest.MonkeyPatch) -> None:
    """A store without numpy reads the same sealed blocks (memories of several vectors
    among them) and ranks as numpy does, scores within float32's rounding."""
    sealed_every(monkeypatch, 4, 16)
    with MemoryStore(target, embedder=ConceptEmbedder(), clock=clock) as store:
        fill(store, clock)
        assert blocks_agree(target, 16) >= 10
        asks = [(scope, query) for scope in (ALICE, ALICE_WORK) for query in QUERIES]
        with monkeypatch.context() as bare:
            bare.setattr(memory, "_numpy", lambda: None)
            without = [store.recall(s, q, 8, rank="meaning") for s, q in asks]
        with_numpy = [store.recall(s, q, 8, rank="meaning") for s, q in asks]
    assert [[r["id"] for r in found] for found in without] == [
        [r["id"] for r in found] for found in with_numpy]
    assert [r["score"] for found in without for r in found] == pytest.approx(
        [r["score"] for found in with_numpy for r in found])
    assert all(with_numpy)


STEPS = st.lists(st.one_of(
    st.tuples(st.just("write"), st.integers(0, 5), st.integers(1, 7)),
    st.tuples(st.just("forget"), st.integers(0, 5), st.integers(0, 10**6)),
    st.tuples(st.just("source"), st.integers(0, 5), st.integers(0, 3))), max_size=14)


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=STEPS)
def test_any_writes_and_forgets_leave_blocks_that_recall_as_rows(
        tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[str, int, int]]) -> None:
    """Writes of any size for owners at random, forgets of single memories and of sources,
    with blocks of three: after each, the blocks hold what the vectors hold, and a recall
    past the budget (from the blocks) finds what one from the rows does."""
    path = str(tmp_path_factory.mktemp("blocks") / "memory.db")
    scopes = [(ALICE, "user"), (ALICE, "task"), (ALICE_WORK, "task"), (BOB, "user"),
              (BOB, "task"), (ALICE_WORK, "user")]
    with pytest.MonkeyPatch.context() as patch, \
            MemoryStore(path, embedder=ConceptEmbedder()) as store:
        sealed_every(patch, 3, 16)
        patch.setattr(memory, "KEPT_BYTES", 1)
        written = 0
        for kind, which, n in steps:
            scope, level = scopes[which]
            if kind == "write":
                store.remember_many([(scope, level, " ".join(WORDS[(written + i) % 12 : ][:3]),
                                      f"c{(written + i) % 4}/turn") for i in range(n)])
                written += n
            elif kind == "forget":
                held = [m["id"] for m in store.memories(scope)]
                if held:
                    store.forget(scope, held[n % len(held)])
            else:
                store.forget_source(scope, f"c{n}/turn")
            blocks_agree(path, 16, written=False)
        asked = [store.recall(s, q, 10, rank="meaning") for s in (ALICE, ALICE_WORK, BOB)
                 for q in QUERIES[:2]]
        patch.setattr(memory._Session, "has_vector_blocks", False)
        assert [store.recall(s, q, 10, rank="meaning") for s in (ALICE, ALICE_WORK, BOB)
                for q in QUERIES[:2]] == asked


@pytest.mark.parametrize("embedder", [ConceptEmbedder, Blurred])
def test_recall_past_the_budget_ranks_alike_where_pgvector_scores_it(
        vector_url: str, clock: SetClock, monkeypatch: pytest.MonkeyPatch,
        embedder: type[ConceptEmbedder]) -> None:
    """On a database with pgvector, a scope past the budget is scored on the server: the
    same memories, scores and explanations as the store's own reading of it."""
    sealed_every(monkeypatch, 4, embedder().dimensions)
    with MemoryStore(vector_url, embedder=embedder(), clock=clock) as store:
        fill(store, clock)
        store.forget(ALICE, store.memories(ALICE)[9]["id"])
        first = recalled(store)
    monkeypatch.setattr(memory, "KEPT_BYTES", 1)
    served = served_answers(monkeypatch)
    with MemoryStore(vector_url, embedder=embedder(), clock=clock) as store:
        assert recalled(store) == first
    assert served and all(isinstance(each, importlib.import_module(
        "memory_postgres")._ServedVectors) for each in served)
