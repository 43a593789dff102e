"""Seeing, forgetting and erasing: scoped, all-or-nothing, and leaving no trace."""

from __future__ import annotations

import gc
import pathlib
import random
import re
import sqlite3
import warnings
from collections.abc import Iterator
from typing import Any, cast

import pytest

import memory
from helpers import ALICE, ALICE_WORK, BOB, TOUCHES_MEMORY_DATA, file_bytes, write_version_1
from memory import (
    MemoryInputError,
    MemoryStore,
    Scope,
    StoreError,
    StoreNotFound,
    fixed_clock,
)
from model import Memory, index_problems_at, owner_connection


@pytest.fixture
def store(target: str) -> Iterator[MemoryStore]:
    """A store on each engine."""
    with MemoryStore(target, clock=fixed_clock()) as opened:
        yield opened
        # Whatever the test did, the word index still holds exactly the memories' words.
        assert index_problems_at(target) == []


@pytest.fixture
def sqlite_store(tmp_path: pathlib.Path) -> Iterator[MemoryStore]:
    """A store on an SQLite file, for what only SQLite has."""
    with MemoryStore(tmp_path / "memory.db", clock=fixed_clock()) as opened:
        yield opened


def seed(store: MemoryStore) -> dict[str, int]:
    ids = {}
    ids["a-user"] = store.remember(ALICE, "user", "Alice is vegetarian.", "trip/turn-1")
    ids["a-trip"] = store.remember(ALICE, "task", "Book the Lisbon hotel.", "trip/turn-1")
    ids["a-work"] = store.remember(ALICE_WORK, "task", "Quarterly report hotel.", "trip/turn-1")
    ids["a-other"] = store.remember(ALICE, "user", "Alice likes jazz.", "trip/turn-2")
    ids["b-user"] = store.remember(BOB, "user", "Bob is vegetarian.", "trip/turn-1")
    ids["b-trip"] = store.remember(BOB, "task", "Bob's Lisbon hotel.", "trip/turn-1")
    return ids


def snapshot(store: MemoryStore) -> list[tuple[Any, ...]]:
    """Every row of the store's memories and word index."""
    with owner_connection(store.path) as db:
        memories: list[tuple[Any, ...]] = db.execute(
            "SELECT * FROM memories ORDER BY id").fetchall()
        postings: list[tuple[Any, ...]] = db.execute(
            "SELECT * FROM memory_words ORDER BY 1, 2, 3").fetchall()
    return [tuple(row) for row in memories + postings]


def test_memories_lists_the_scope_oldest_first(store: MemoryStore) -> None:
    ids = seed(store)
    listed = store.memories(ALICE)
    assert [m["id"] for m in listed] == [ids["a-user"], ids["a-trip"], ids["a-other"]]
    assert listed[1] == {"id": ids["a-trip"], "level": "task", "text": "Book the Lisbon hotel.",
                         "source": "trip/turn-1", "created_at": "2026-10-20T09:01:00+00:00",
                         "expires_at": None}
    assert [m["id"] for m in store.memories(ALICE_WORK)] == [ids["a-user"], ids["a-work"],
                                                              ids["a-other"]]
    assert store.memories(Scope("carol", "trip")) == []


def test_forget_own_memory(store: MemoryStore) -> None:
    ids = seed(store)
    assert store.forget(ALICE, ids["a-trip"]) is True
    assert index_problems_at(store.path) == []
    assert store.recall(ALICE, "lisbon hotel") == []
    assert [m["id"] for m in store.recall(BOB, "lisbon hotel")] == [ids["b-trip"]]
    assert store.forget(ALICE, ids["a-trip"]) is False
    assert store.count(ALICE) == 2


def test_forget_answers_alike_for_everything_out_of_scope(store: MemoryStore) -> None:
    ids = seed(store)
    before = snapshot(store)
    for memory_id in (ids["b-user"], ids["b-trip"], ids["a-work"], 999, 2**63 - 1):
        assert store.forget(ALICE, memory_id) is False
    assert snapshot(store) == before


@pytest.mark.parametrize("bad", [None, "1", 1.0, True, 0, -1, 2**63, 2**200, [1]])
def test_forget_rejects_what_is_not_an_id(store: MemoryStore, bad: Any) -> None:
    seed(store)
    before = snapshot(store)
    with pytest.raises(MemoryInputError):
        store.forget(ALICE, bad)
    assert snapshot(store) == before


def test_forget_source_stays_in_scope(store: MemoryStore) -> None:
    ids = seed(store)
    assert store.forget_source(ALICE, "trip/turn-1") == 2
    assert index_problems_at(store.path) == []
    assert [m["id"] for m in store.memories(ALICE)] == [ids["a-other"]]
    assert [m["id"] for m in store.memories(ALICE_WORK)] == [ids["a-work"], ids["a-other"]]
    assert store.count(BOB) == 2
    assert store.recall(ALICE_WORK, "vegetarian") == []
    assert store.forget_source(ALICE, "trip/turn-1") == 0
    assert store.forget_source(ALICE, "no such source") == 0
    with pytest.raises(MemoryInputError):
        store.forget_source(ALICE, " ")


def test_forget_conversation_forgets_its_turns_in_scope_and_nothing_else(
        store: MemoryStore) -> None:
    mine = [store.remember(ALICE, "user", "Alice is vegetarian.", "chat-42/turn-1"),
            store.remember(ALICE, "task", "Book the Lisbon hotel.", "chat-42/turn-2")]
    kept = {
        "another task's": store.remember(ALICE_WORK, "task", "Quarterly report.",
                                         "chat-42/turn-3"),
        "another user's": store.remember(BOB, "user", "Bob is vegetarian.", "chat-42/turn-1"),
        "another conversation's": store.remember(ALICE, "user", "Alice likes jazz.",
                                                 "chat-421/turn-1"),
        "a nested one's": store.remember(ALICE, "user", "Alice hikes.", "chat-42/a/turn-1"),
        "a source without /": store.remember(ALICE, "user", "Alice reads.", "chat-42"),
    }
    listed = store.memories(ALICE, conversation="chat-42")
    assert [m["id"] for m in listed] == mine
    assert store.memories(ALICE, conversation="chat-42/") == listed  # the same conversation
    assert [m["id"] for m in store.memories(ALICE, conversation="chat-42", after=mine[0],
                                            limit=5)] == mine[1:]
    assert store.memories(BOB, conversation="chat-42")[0]["id"] == kept["another user's"]
    assert store.forget_conversation(ALICE, "chat-42/") == 2
    assert store.memories(ALICE, conversation="chat-42") == []
    assert store.forget_conversation(ALICE, "chat-42") == 0
    left = {m["id"] for scope in (ALICE, ALICE_WORK, BOB) for m in store.memories(scope)}
    assert set(kept.values()) <= left and not set(mine) & left
    assert store.recall(ALICE, "vegetarian lisbon hotel") == []
    for bad in ("", " ", "/", None, 5, "x" * (memory.MAX_TEXT + 1)):
        with pytest.raises(MemoryInputError, match="conversation"):
            store.forget_conversation(ALICE, bad)  # type: ignore[arg-type]
        if bad is not None:  # None: every conversation
            with pytest.raises(MemoryInputError, match="conversation"):
                store.memories(ALICE, conversation=bad)  # type: ignore[arg-type]


def test_erase_user_removes_every_level_and_task(store: MemoryStore) -> None:
    seed(store)
    assert store.erase_user("alice") == 4
    for scope in (ALICE, ALICE_WORK, Scope("alice", "new")):
        assert store.count(scope) == 0
        assert store.recall(scope, "vegetarian lisbon hotel jazz report") == []
    assert store.export_user("alice") == []
    assert store.count(BOB) == 2
    with owner_connection(store.path) as db:
        assert db.execute("SELECT count(*) FROM memory_words WHERE user_id = 'alice'"
                          ).fetchone()[0] == 0
    assert store.erase_user("alice") == 0
    for bad in ("", "Alice", None, 7):
        with pytest.raises(MemoryInputError):
            store.erase_user(bad)  # type: ignore[arg-type]


def test_export_user_has_every_task(store: MemoryStore) -> None:
    ids = seed(store)
    exported = store.export_user("alice")
    assert [(m["id"], m["task"], m["level"]) for m in exported] == [
        (ids["a-user"], None, "user"), (ids["a-trip"], "trip", "task"),
        (ids["a-work"], "work", "task"), (ids["a-other"], None, "user")]
    assert list(exported[0]) == list(memory.RECORD_KEYS)
    assert {m["user"] for m in exported} == {"alice"}
    assert [m["text"] for m in store.export_user("bob")] == ["Bob is vegetarian.",
                                                            "Bob's Lisbon hotel."]


def test_ids_are_never_reused(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "memory.db"
    with MemoryStore(path) as store:
        first = store.remember(ALICE, "user", "one", "s")
        newest = store.remember(ALICE, "user", "two", "s")
        assert store.forget(ALICE, newest)
        third = store.remember(ALICE, "user", "three", "s")
        assert third > newest > first
        store.erase_user("alice")
    with MemoryStore(path) as store:
        assert store.remember(ALICE, "user", "four", "s") > third
        assert store.remember_many([(ALICE, "user", "five", "s")])[0] > third + 1


def test_upgraded_file_never_reuses_ids(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "old.db"
    write_version_1(path, [Memory(n, "alice", None, f"old {n}", "s", "t") for n in (1, 2, 7)])
    with MemoryStore(path) as store:
        assert store.forget(ALICE, 7)
        assert store.remember(ALICE, "user", "new", "s") == 8


def deny_deleting_memories(action: int, table: str | None, *_: Any) -> int:
    if action == sqlite3.SQLITE_DELETE and table == "memories":
        return sqlite3.SQLITE_DENY
    return sqlite3.SQLITE_OK


@pytest.mark.parametrize("delete", [
    lambda s, ids: s.forget(ALICE, ids["a-trip"]),
    lambda s, ids: s.forget_source(ALICE, "trip/turn-1"),
    lambda s, ids: s.erase_user("alice"),
])
def test_a_deletion_failing_part_way_changes_nothing(sqlite_store: MemoryStore,
                                                    delete: Any) -> None:
    store = sqlite_store
    ids = seed(store)
    before = snapshot(store)
    # The postings are changed first; the memories' own DELETE is refused after them.
    store.db.connection.set_authorizer(deny_deleting_memories)
    with pytest.raises(StoreError):
        delete(store, ids)
    store.db.connection.set_authorizer(None)
    assert snapshot(store) == before
    assert len(store.recall(ALICE, "lisbon hotel vegetarian jazz", limit=20)) == 3


# -- leaving no trace ---------------------------------------------------------------------

SECRET = "Alice's passport number is XK-4471-zebra-quokka."
SECRET_SOURCE = "secret/turn-9"


def filled_with_secret(path: pathlib.Path) -> MemoryStore:
    store = MemoryStore(path)
    store.remember_many([(ALICE, "user", f"filler memory number {n} about hotels", "s")
                         for n in range(400)])
    store.remember(ALICE, "task", SECRET, SECRET_SOURCE)
    store.remember(ALICE, "user", "Alice keeps this one about hotels.", "keep")
    store.remember_many([(ALICE, "user", f"later memory {n}", "s") for n in range(50)])
    return store


@pytest.mark.parametrize("forget", [
    lambda s: s.forget(ALICE, s.recall(ALICE, "passport")[0]["id"]),
    lambda s: s.forget_source(ALICE, SECRET_SOURCE),
    lambda s: s.erase_user("alice"),
])
def test_forgotten_text_is_gone_from_the_file_and_wal(tmp_path: pathlib.Path, forget: Any) -> None:
    path = tmp_path / "memory.db"
    store = filled_with_secret(path)
    try:
        assert SECRET.encode() in file_bytes(path)  # the search can find it while kept
        assert forget(store)
        assert SECRET.encode() not in file_bytes(path)
        assert b"XK-4471" not in file_bytes(path)
        if store.count(ALICE):
            assert store.recall(ALICE, "keeps") != []
    finally:
        store.close()
    assert SECRET.encode() not in file_bytes(path)


def test_secure_delete_is_what_scrubs_the_file(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "memory.db"
    store = filled_with_secret(path)
    try:
        assert store.db.execute("PRAGMA secure_delete").fetchone()[0] == 1
        # The control: with it off, the same forget leaves the text in the file's bytes.
        store.db.execute("PRAGMA secure_delete = OFF")
        assert store.forget_source(ALICE, SECRET_SOURCE) == 1
        assert SECRET.encode() in file_bytes(path)
    finally:
        store.close()


DELETIONS = [
    lambda s: s.forget(ALICE, s.recall(ALICE, "passport")[0]["id"]),
    lambda s: s.forget_source(ALICE, SECRET_SOURCE),
    lambda s: s.erase_user("alice"),
]


@pytest.mark.parametrize("forget", DELETIONS)
def test_after_compact_no_byte_of_a_deleted_memory_remains(tmp_path: pathlib.Path,
                                                           forget: Any) -> None:
    path = tmp_path / "memory.db"
    store = filled_with_secret(path)
    try:
        # However the deletion went: here with secure_delete off, as on an SQLite build
        # whose default is off, so that the deletion alone leaves the text behind.
        store.db.execute("PRAGMA secure_delete = OFF")
        assert forget(store)
        assert SECRET.encode() in file_bytes(path)
        store.compact()
        for needle in (SECRET, SECRET_SOURCE, "quokka"):  # its text, source, a word of its own
            assert needle.encode() not in file_bytes(path)
        if store.count(ALICE):
            assert store.recall(ALICE, "keeps") != []
        assert store.check()["ok"]
    finally:
        store.close()
    assert SECRET.encode() not in file_bytes(path)


def test_compact_after_many_shuffled_deletions(tmp_path: pathlib.Path) -> None:
    rng = random.Random(600)
    path = tmp_path / "memory.db"
    texts = [f"memory {n} keeps codeword zq{n:04d}x " + " ".join(
        f"w{rng.randrange(10**6)}" for _ in range(rng.randint(5, 120))) for n in range(600)]
    with MemoryStore(path) as store:
        ids = store.remember_many([(ALICE, "user", text, f"turn-{n:04d}q")
                                   for n, text in enumerate(texts)])
        order = list(range(600))
        rng.shuffle(order)
        gone, kept = order[:300], order[300:]
        for n in gone:
            assert store.forget(ALICE, ids[n])
        store.compact()
        data = file_bytes(path)
        assert [n for n in gone if f"zq{n:04d}x".encode() in data] == []
        assert [n for n in gone if f"turn-{n:04d}q".encode() in data] == []
        assert all(texts[n].encode() in data for n in kept)  # the search finds what is kept
        assert store.count(ALICE) == 300


def test_compact_says_so_when_a_reader_keeps_the_old_wal(tmp_path: pathlib.Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memory, "BUSY_TIMEOUT_SECONDS", 0.2)  # how long compact waits
    path = tmp_path / "memory.db"
    store = filled_with_secret(path)
    reader = sqlite3.connect(path, isolation_level=None)
    try:
        assert store.forget_source(ALICE, SECRET_SOURCE) == 1
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM memories").fetchone()  # holds its snapshot
        with pytest.raises(StoreError, match="run compact again"):
            store.compact()
        reader.execute("COMMIT")
        store.compact()
        assert SECRET.encode() not in file_bytes(path)
    finally:
        reader.close()
        store.close()


def test_secure_delete_is_on_before_an_upgrade_drops_the_old_table(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "v1.db"
    write_version_1(path, [Memory(1, "alice", None, SECRET, SECRET_SOURCE,
                                  "2026-10-20T09:00:00+00:00"),
                           Memory(2, "alice", None, "Alice keeps this one.", "keep",
                                  "2026-10-20T09:01:00+00:00")])
    connect = sqlite3.connect

    def default_off(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        db: sqlite3.Connection = connect(*args, **kwargs)  # as a build with it off
        db.execute("PRAGMA secure_delete = OFF")
        return db

    monkeypatch.setattr(sqlite3, "connect", default_off)
    with MemoryStore(path) as store:  # the upgrade copies the rows, drops the old table
        assert store.forget(ALICE, 1)
    assert SECRET.encode() not in file_bytes(path)


def test_everything_not_forgotten_recalls_as_before(store: MemoryStore) -> None:
    ids = seed(store)
    asks = [(scope, query) for scope in (ALICE, ALICE_WORK, BOB)
            for query in ("vegetarian", "lisbon hotel", "jazz report hotel")]
    before = {(s, q): store.recall(s, q, 20) for s, q in asks}
    store.forget(ALICE, ids["a-other"])
    for (scope, query), results in before.items():
        kept = [r for r in results if r["id"] != ids["a-other"]]
        assert store.recall(scope, query, 20) == kept


def test_trace_of_lifecycle_calls_carries_the_scope(store: MemoryStore) -> None:
    ids = seed(store)
    statements: list[str] = []
    store.db.set_trace_callback(statements.append)
    store.memories(ALICE)
    store.recall(ALICE, "vegetarian lisbon hotel", context=True)
    store.remember(ALICE, "user", "A hotel by the river.", "trip/turn-9")
    store.recall(ALICE, "vegetarian lisbon hotel", context=True)  # the kept copy grows
    store.forget(ALICE, ids["a-trip"])
    store.forget(ALICE, ids["b-user"])
    store.forget_source(ALICE_WORK, "trip/turn-1")
    store.memories(ALICE, conversation="trip")
    store.memories(ALICE, conversation="trip", newest_first=True, limit=1)
    store.renew(ALICE, [ids["a-trip"], ids["b-user"]], 60)
    store.forget_conversation(ALICE, "trip")
    # The records frameworks keep: keys, metadata and their filters.
    store.remember(ALICE, "user", "Alice sits by the aisle.", "s", key="seat",
                   metadata={"kind": "preference", "n": 2})
    store.remember(ALICE, "task", "Alice sits by the window.", "s", key="seat",
                   metadata={"kind": "preference", "n": 3})
    store.remember(ALICE, "user", "Alice sits up front.", "s", key="seat",
                   metadata={"kind": "preference", "n": 4})
    store.get(ALICE, key="seat")
    store.recall(ALICE, "sits", where={"kind": "preference"}, offset=1)
    store.recall(ALICE, "sits", where={"n": {"$gte": 3}, "kind": {"$ne": "x"}}, context=True)
    store.memories(ALICE, where={"n": {"$lt": 4}}, newest_first=True, before=10**6)
    store.memories(ALICE, newest_first=True, limit=2)
    store.count(ALICE, where={"kind": {"$in": ["preference"]}})
    store.forget(ALICE, key="seat")
    store.forget_where(ALICE, {"kind": "preference"})
    scoped = len(statements)
    store.export_user("bob")
    store.erase_user("bob")
    store.db.set_trace_callback(None)
    touching = memory_statements(statements)
    assert len(touching) >= 8
    grown = {s.split(" FROM ")[0] for s in touching
             if "AND id > " in s and "conversation = " not in s and "AND id < " not in s}
    assert grown == {"SELECT (SELECT count(*)", "SELECT id, conversation"}
    assert sum("AND conversation = " in s for s in touching) == 3
    assert sum(s.startswith("UPDATE memories SET expires_at") for s in touching) == 1
    for statement in touching:
        assert "WHERE user_id = " in statement
    for statement in memory_statements(statements[:scoped]):
        assert re.search(r"WHERE user_id = .*\btask_(id|key) (IS|=|IN) ", statement), statement


def memory_statements(statements: list[str]) -> list[str]:
    return [s for s in statements if TOUCHES_MEMORY_DATA.search(s)]


def test_forget_in_a_read_only_store_is_refused(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "memory.db"
    with MemoryStore(path) as store:
        kept = store.remember(ALICE, "user", "kept", "s")
    with MemoryStore(path, read_only=True) as store:
        with pytest.raises(StoreError):
            store.forget(ALICE, kept)
        assert store.count(ALICE) == 1
    assert memory.SCHEMA_VERSION >= 2


# -- calls a user reaches for: get, min_score, the store's rank --------------------------

def test_get_returns_one_memory_the_scope_sees_and_none_otherwise(store: MemoryStore) -> None:
    ids = seed(store)
    assert store.get(ALICE, ids["a-trip"]) == store.memories(ALICE)[1]
    assert store.get(ALICE, ids["a-user"])["level"] == "user"  # type: ignore[index]
    for memory_id in (ids["b-user"], ids["a-work"], 999, 2**63 - 1):
        assert store.get(ALICE, memory_id) is None  # another user's, task's, or none: alike
    expiring = store.remember(ALICE, "user", "Alice's pass.", "s", ttl=30)
    assert store.get(ALICE, expiring) is not None
    store.clock()  # a minute passes: it has expired
    assert store.get(ALICE, expiring) is None
    for bad in (0, -1, True, "1", None):
        with pytest.raises(MemoryInputError, match="memory_id"):
            store.get(ALICE, bad)  # type: ignore[arg-type]


def test_min_score_leaves_out_weak_matches(store: MemoryStore) -> None:
    seed(store)
    found = store.recall(ALICE, "lisbon hotel vegetarian", limit=10)
    assert [r["score"] for r in found] == [2, 1]
    assert store.recall(ALICE, "lisbon hotel vegetarian", limit=10, min_score=2) == found[:1]
    assert store.recall(ALICE, "lisbon hotel vegetarian", limit=10, min_score=3) == []
    weighed = store.recall(ALICE, "lisbon hotel vegetarian", limit=10, rank="idf")
    cut = (weighed[0]["score"] + weighed[1]["score"]) / 2
    assert store.recall(ALICE, "lisbon hotel vegetarian", limit=10, rank="idf",
                        min_score=cut) == weighed[:1]
    for bad in (-1, float("nan"), float("inf"), True, "2", 10**400):
        with pytest.raises(MemoryInputError, match="min_score must be"):
            store.recall(ALICE, "hotel", min_score=bad)  # type: ignore[arg-type]


def test_a_store_recalls_by_its_own_rank_unless_a_call_names_one(target: str) -> None:
    with MemoryStore(target, rank="idf") as opened:
        seed(opened)
        assert opened.rank == "idf"
        by_default = opened.recall(ALICE, "lisbon hotel vegetarian")
        assert by_default == opened.recall(ALICE, "lisbon hotel vegetarian", rank="idf")
        assert all(isinstance(r["score"], float) for r in by_default)
        assert [r["score"] for r in opened.recall(ALICE, "lisbon hotel", rank="shared")] == [2]
    with pytest.raises(MemoryInputError, match="rank must be one of"):
        MemoryStore(target, rank=cast(Any, "bm25"))
    with MemoryStore(target) as plain:
        assert plain.rank == "shared"


def test_a_store_dropped_open_says_so_and_is_closed(tmp_path: pathlib.Path) -> None:
    store = MemoryStore(tmp_path / "m.db")
    engine = store._db
    assert isinstance(engine, memory._SqliteEngine)
    with pytest.warns(ResourceWarning, match="dropped without close"):
        del store
        gc.collect()
    with pytest.raises(sqlite3.ProgrammingError):  # its connection is closed
        engine.connection.execute("SELECT 1")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        MemoryStore(tmp_path / "m.db").close()  # a closed one says nothing, nor one that
        with pytest.raises(MemoryInputError):  # never opened
            MemoryStore(tmp_path / "m.db", rank="no-such")  # type: ignore[arg-type]


@pytest.mark.parametrize("options", [{"create": False}, {"read_only": True},
                                     {"read_only": True, "create": False}])
def test_an_empty_or_missing_file_is_no_store_unless_one_is_made(
        tmp_path: pathlib.Path, options: dict[str, Any]) -> None:
    empty, missing = tmp_path / "empty.db", tmp_path / "missing.db"
    empty.touch()
    for path in (empty, missing):
        with pytest.raises(StoreNotFound, match="no such memory store"):
            MemoryStore(path, **options)
    assert empty.stat().st_size == 0 and not missing.exists()
    with MemoryStore(empty) as made:  # creating is what makes a store of an empty file
        made.remember(ALICE, "user", "Alice is vegetarian.", "trip/turn-1")
    with MemoryStore(empty, **options) as opened:
        assert opened.count(ALICE) == 1
