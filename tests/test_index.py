"""The word index: upgrading version-1 files, bulk writes, and recall held to the model."""

from __future__ import annotations

import importlib
import pathlib
import sqlite3
import tempfile
from typing import Any
from unittest import mock

import pytest
from hypothesis import given
from hypothesis import strategies as st

import memory
from helpers import (
    ALICE,
    BEFORE_VALIDITY,
    PG_BEFORE_VALIDITY,
    TOUCHES_MEMORY_DATA,
    WORD_RANKS,
    SetClock,
    digest,
    stamp_version,
    write_version_1,
)
from memory import MemoryInputError, MemoryStore, SchemaError, Scope, fixed_clock
from model import (
    QUERIES,
    SCOPES,
    SOURCES,
    TEXTS,
    Memory,
    Model,
    index_problems_at,
    owner_connection,
)


def layout(path: pathlib.Path) -> list[tuple[str, str, str]]:
    db = sqlite3.connect(path)
    try:
        rows = db.execute("SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL"
                          " ORDER BY name").fetchall()
        return [(kind, name, " ".join(sql.split())) for kind, name, sql in rows]
    finally:
        db.close()


def sample(count: int = 6) -> list[Memory]:
    clock = fixed_clock()
    texts = ["Alice is vegetarian.", "Book the Lisbon hotel.", "Aisle seats on flights.",
             "Bob's hotel is near the office.", "Hotel breakfast is vegetarian.",
             "Ünïcode \u212aey"]
    owners: list[tuple[str, str | None]] = [("alice", None), ("alice", "trip"), ("alice", None),
                                            ("bob", "onboarding"), ("alice", "work"), ("bob", None)]
    # Gaps in the ids, as a version-1 file could have them.
    return [Memory(3 * n + 1, user, task, texts[n], f"turn-{n}", clock())
            for n, (user, task) in enumerate(owners[:count])]


def test_version_1_file_is_upgraded_in_place(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "old.db"
    old = sample()
    write_version_1(path, old)
    model = Model()
    model.memories = list(old)
    with MemoryStore(path) as store:
        assert store.db.execute("PRAGMA user_version").fetchone()[0] == memory.SCHEMA_VERSION
        rows = store.db.execute("SELECT id, user_id, task_id, text, source, created_at"
                                " FROM memories ORDER BY id").fetchall()
        assert rows == [(m.id, m.user, m.task, m.text, m.source, m.created_at) for m in old]
        for scope in [ALICE, Scope("alice", "work"), Scope("bob", "onboarding"), Scope("x", "y")]:
            for query in ["hotel vegetarian", "seats flights", "key", "office hotel"]:
                assert store.recall(scope, query, 20) == model.recall(scope, query, 20)
            assert store.count(scope) == model.count(scope)
        new_id = store.remember(ALICE, "user", "After the upgrade.", "s")
        assert new_id > max(m.id for m in old)
    fresh = tmp_path / "fresh.db"
    MemoryStore(fresh).close()
    assert layout(path) == layout(fresh)


def test_empty_version_1_file_is_upgraded(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "old.db"
    write_version_1(path, [])
    with MemoryStore(path) as store:
        assert store.count(ALICE) == 0
        assert store.remember(ALICE, "user", "first", "s") == 1


def test_failed_upgrade_leaves_the_file_exactly_as_it_was(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "old.db"
    write_version_1(path, sample())
    before = digest(path)
    *earlier, step = memory.MIGRATIONS

    def broken_step(db: memory._SqliteEngine) -> None:
        step(db)  # every statement of every real step runs, then the last step fails
        raise sqlite3.OperationalError("disk I/O error (simulated)")

    with mock.patch.object(memory, "MIGRATIONS", [*earlier, broken_step]):
        with pytest.raises(sqlite3.OperationalError, match="simulated"):
            MemoryStore(path)
    assert digest(path) == before
    assert not pathlib.Path(f"{path}-journal").exists()
    with MemoryStore(path) as store:
        assert store.count(ALICE) == 3


def test_code_knowing_only_version_1_would_refuse_the_new_file(tmp_path: pathlib.Path) -> None:
    assert memory.SCHEMA_VERSION > 1
    # A step for each layout a release wrote, in the order of their versions.
    assert len(memory.MIGRATIONS) == len(memory.SQLITE_LAYOUTS)
    versions = [layout.version for layout in memory.SQLITE_LAYOUTS]
    assert versions == sorted(versions) and versions[-1] == memory.SCHEMA_VERSION
    MemoryStore(tmp_path / "new.db").close()
    db = sqlite3.connect(tmp_path / "new.db")
    assert db.execute("PRAGMA user_version").fetchone()[0] == memory.SCHEMA_VERSION
    db.close()


def test_newer_versions_are_still_refused(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "new.db"
    MemoryStore(path).close()
    stamp_version(path, memory.SCHEMA_VERSION + 1)
    with pytest.raises(SchemaError, match=f"database schema version {memory.SCHEMA_VERSION + 1}"):
        MemoryStore(path)


@given(st.lists(st.tuples(SCOPES, st.sampled_from(["user", "task"]), TEXTS, SOURCES),
                max_size=12),
       st.lists(st.tuples(SCOPES, QUERIES), min_size=1, max_size=6))
def test_upgraded_file_recalls_like_the_model(
        items: list[tuple[Scope, str, str, str]], asks: list[tuple[Scope, str]]) -> None:
    clock = fixed_clock()
    model = Model()
    model.memories = [Memory(n + 1, scope.user, scope.task if level == "task" else None,
                             text, source, clock()) for n, (scope, level, text, source)
                      in enumerate(items)]
    with tempfile.TemporaryDirectory() as name:
        path = pathlib.Path(name) / "old.db"
        write_version_1(path, model.memories)
        with MemoryStore(path) as store:
            for scope, query in asks:
                assert store.recall(scope, query, 20) == model.recall(scope, query, 20)
                assert store.count(scope) == model.count(scope)


def test_remember_many_writes_all_in_order(tmp_path: pathlib.Path) -> None:
    with MemoryStore(tmp_path / "m.db", clock=fixed_clock()) as store:
        first = store.remember(ALICE, "user", "before", "s")
        ids = store.remember_many([(ALICE, "user", "Alice is vegetarian.", "import"),
                                   (ALICE, "task", "Hotel in Lisbon.", "import"),
                                   (Scope("bob", "x"), "user", "Bob likes hotels.", "import")])
        assert ids == [first + 1, first + 2, first + 3]
        assert [r["id"] for r in store.recall(ALICE, "vegetarian hotel lisbon", 20)] == ids[1::-1]
        assert store.remember_many([]) == []
        assert store.count(ALICE) == 3


def test_remember_many_is_one_transaction(tmp_path: pathlib.Path) -> None:
    with MemoryStore(tmp_path / "m.db") as store:
        statements: list[str] = []
        store.db.set_trace_callback(statements.append)
        store.remember_many([(ALICE, "user", f"note {n}", "s") for n in range(5)])
        store.db.set_trace_callback(None)
    assert [s for s in statements if s in ("BEGIN IMMEDIATE", "COMMIT")] == ["BEGIN IMMEDIATE",
                                                                              "COMMIT"]


@pytest.mark.parametrize("bad, position", [
    ((ALICE, "global", "text", "s"), 2),
    ((ALICE, "user", "   ", "s"), 2),
    ((ALICE, "user", "text"), 2),
    ("not a tuple", 2),
    (None, 2),
    (("alice/trip", "user", "text", "s"), 2),
])
def test_one_bad_item_rejects_the_whole_call(tmp_path: pathlib.Path, bad: Any,
                                             position: int) -> None:
    with MemoryStore(tmp_path / "m.db") as store:
        items = [(ALICE, "user", "good one", "s"), (ALICE, "task", "good two", "s"), bad,
                 (ALICE, "user", "good three", "s")]
        with pytest.raises(MemoryInputError, match=f"item {position}"):
            store.remember_many(items)
        assert store.count(ALICE) == 0
        assert store.db.execute("SELECT count(*) FROM memory_words").fetchone()[0] == 0


@pytest.mark.parametrize("items", [None, 5, "abc", b"abc"])
def test_remember_many_needs_an_iterable_of_items(tmp_path: pathlib.Path, items: Any) -> None:
    with MemoryStore(tmp_path / "m.db") as store:
        with pytest.raises(MemoryInputError):
            store.remember_many(items)


def test_count_is_point_lookups_in_the_counts_table(tmp_path: pathlib.Path) -> None:
    with MemoryStore(tmp_path / "m.db", clock=fixed_clock()) as store:
        store.remember_many([(ALICE, "user", f"note {n}", "s") for n in range(50)])
        store.remember_many([(ALICE, "task", f"note {n}", "s", 60) for n in range(7)])
        store.clock()  # one tick: the seven with a ttl of 60 s are due
        statements: list[str] = []
        store.db.set_trace_callback(statements.append)
        assert store.count(ALICE) == 50
        store.db.set_trace_callback(None)
        scoped = (ALICE.user, ALICE.task)
        counts_plan = plan(store, memory._SQL_COUNT, scoped)
        expired_plan = plan(store, memory._SQL_EXPIRED_COUNT, (*scoped, "2026-10-20T09:02"))
    reads = [s for s in statements if TOUCHES_MEMORY_DATA.search(s)]
    assert len(reads) == 2 and all("WHERE user_id = " in s for s in reads)
    assert "SEARCH memory_counts USING PRIMARY KEY (user_id=? AND task_key=?)" in counts_plan
    assert "SEARCH memories USING COVERING INDEX memories_expiry (user_id=? AND expires_at<?)" \
        in expired_plan


def plan(store: MemoryStore, sql: str, arguments: tuple[Any, ...]) -> str:
    rows = store.db.execute("EXPLAIN QUERY PLAN " + sql, arguments).fetchall()
    return " | ".join(row[3] for row in rows)


def test_recall_reads_only_postings_of_the_query_words(tmp_path: pathlib.Path) -> None:
    with MemoryStore(tmp_path / "m.db") as store:
        store.remember_many([(ALICE, "user", f"filler{n} words here", "s") for n in range(300)])
        target = store.remember(ALICE, "user", "needle in the haystack", "s")
        assert [r["id"] for r in store.recall(ALICE, "needle")] == [target]
        postings = plan(store, memory._SQL_POSTINGS_MAP, ('["needle"]', "alice", "trip"))
        postings += plan(store, memory._SQL_POSTINGS_ROWS, ('[["needle", 1]]', "alice", "trip"))
        rows = plan(store, memory._SQL_RECALLED, ("alice", "trip", f"[{target}]"))
    assert "SEARCH memory_words USING PRIMARY KEY (user_id=? AND word=?)" in postings
    assert "SEARCH memory_words USING PRIMARY KEY (user_id=? AND word=? AND first_id=?)" \
        in postings
    assert "SEARCH memories USING INTEGER PRIMARY KEY (rowid=?)" in rows
    assert "SCAN memor" not in postings + rows


def test_forgetting_a_memory_s_metadata_reads_its_terms_alone(tmp_path: pathlib.Path) -> None:
    # A keyed replace forgets the old memory's terms: by the index of ids, not a walk of
    # every term the user's memories hold.
    with MemoryStore(tmp_path / "m.db") as store:
        ids = store.remember_many([{"scope": ALICE, "level": "task", "text": f"note {n}",
                                    "source": "s", "metadata": {"n": n, "tag": "x"}}
                                   for n in range(50)])
        fields = plan(store, memory._SQL_FORGET_FIELDS, ("alice", "trip", f"[{ids[0]}]"))
        assert store.forget(ALICE, ids[0])
        assert [m["id"] for m in store.memories(ALICE, where={"tag": "x"})] == ids[1:]
    assert "USING INDEX memory_fields_id (user_id=? AND id=?)" in fields


def test_single_writes_share_posting_rows(tmp_path: pathlib.Path) -> None:
    with MemoryStore(tmp_path / "m.db") as store:
        for n in range(2 * memory.POSTINGS_PER_ROW + 1):
            store.remember(ALICE, "user", f"hotel note{n}", "s")
        for n in range(memory.INDEX_FROM):
            store.remember(ALICE, "task", f"hotel in the task {n}", "s")
        sizes = store.db.execute("SELECT task_id, length(ids) / 8 FROM memory_words"
                                 " WHERE word = 'hotel' ORDER BY first_id").fetchall()
    per_row = memory.POSTINGS_PER_ROW
    assert sizes == [(None, per_row), (None, per_row), (None, 1), ("trip", memory.INDEX_FROM)]


def test_single_writes_share_posting_rows_whichever_owner_wrote_last(target: str) -> None:
    """Durable writes alternating between the user level and a task, each with the same
    word: each owner's id joins its own newest row of the word, though the word's newest
    row of all is the other owner's (PostgreSQL looks that one up first)."""
    with MemoryStore(target) as store:
        for n in range(memory.INDEX_FROM):
            store.remember(ALICE, "user", f"hotel note{n}", "s")
            store.remember(ALICE, "task", f"hotel in the task {n}", "s")
        for n in range(20):
            store.remember(ALICE, "user", f"hotel later{n}", "s")
            store.remember(ALICE, "task", f"hotel later in the task {n}", "s")
        with store._snapshot({"alice"}) as db:
            rows = dict(db.execute(memory._sql(
                "SELECT task_id, count(*) FROM memory_words WHERE user_id = ? AND word = ?"
                " GROUP BY task_id"), ("alice", "hotel")).fetchall())
        assert len(store.recall(ALICE, "hotel", 20)) == 20
    assert rows == {None: 1, "trip": 1}


def test_a_deletion_that_empties_some_rows_of_its_words_keeps_their_others(target: str) -> None:
    """Forgetting the oldest memories of two words, past their first row: each word's
    first row is dropped, its second rewritten with the ids left, its third untouched
    (on PostgreSQL the drops, the rewrites and the asks for the rows are one statement
    each for every word), and recall finds the memories left in each."""
    per_row = memory.POSTINGS_PER_ROW
    with MemoryStore(target) as store:
        ids = store.remember_many([(ALICE, "user", f"hotel river note{n}",
                                    "old" if n < per_row + 3 else "new")
                                   for n in range(3 * per_row)])
        assert store.forget_source(ALICE, "old") == per_row + 3
        with store._snapshot({"alice"}) as db:
            rows = {word: db.execute(memory._sql(
                "SELECT first_id, length(ids) / 8 FROM memory_words WHERE user_id = ?"
                " AND word = ? ORDER BY first_id"), ("alice", word)).fetchall()
                for word in ("hotel", "river", "note0", f"note{3 * per_row - 1}")}
        for n in (per_row + 3, 2 * per_row - 1, 2 * per_row, 3 * per_row - 1):
            assert store.recall(ALICE, f"hotel river note{n}", 1)[0]["id"] == ids[n]
    left = [(ids[per_row + 3], per_row - 3), (ids[2 * per_row], per_row)]
    assert rows == {"hotel": left, "river": left, "note0": [],
                    f"note{3 * per_row - 1}": [(ids[-1], 1)]}


# A skewed vocabulary, as real text is: a few words in most memories, most words in few.
SKEWED = st.sampled_from("sun sun sun sun sun sun sea sea sea sea sky sky sky owl owl elk"
                         " fig yak".split())


def skewed_text(parts: list[str]) -> str:
    return " ".join(parts)


@given(
    batches=st.lists(st.lists(st.tuples(
        st.sampled_from([Scope("alice", "trip"), Scope("alice", "work"), Scope("bob", "trip")]),
        st.sampled_from(["user", "task"]),
        st.lists(SKEWED, min_size=1, max_size=6).map(skewed_text),
        st.sampled_from([None, None, None, None, 30.0])), min_size=1, max_size=40),
        min_size=1, max_size=8),
    query=st.lists(SKEWED, min_size=1, max_size=5).map(skewed_text),
    limit=st.integers(min_value=1, max_value=memory.MAX_LIMIT),
    per_row=st.integers(min_value=1, max_value=6),
    rank=st.sampled_from(WORD_RANKS),
    read_all_up_to=st.sampled_from([0, 0, 40, memory._READ_ALL_UP_TO]),
    skip_common=st.booleans(),
    index_from=st.sampled_from([1, 8, memory.INDEX_FROM]),
)
def test_top_k_reads_less_and_agrees_with_the_model(
        batches: list[list[tuple[Scope, str, str, float | None]]], query: str, limit: int,
        per_row: int, rank: memory.Rank, read_all_up_to: int, skip_common: bool,
        index_from: int) -> None:
    """Recall stops reading once nothing unread can win; with rows of a few ids and
    skewed words it crosses many row boundaries, stops early and probes, with the common
    words skipped (SQLite) or read (PostgreSQL), and must still give the model's answer
    (ids, scores to the bit, order), expired memories left out; also where one owner of
    the scope is indexed and the other, below the threshold, is read whole."""
    clock, created = fixed_clock(), fixed_clock()
    model = Model()
    with tempfile.TemporaryDirectory() as folder, \
            mock.patch.object(memory, "POSTINGS_PER_ROW", per_row), \
            mock.patch.object(memory, "_READ_ALL_UP_TO", read_all_up_to), \
            mock.patch.object(memory, "INDEX_FROM", index_from), \
            MemoryStore(pathlib.Path(folder) / "m.db", clock=clock) as store:
        store.db.skips_common_words = skip_common
        for batch in batches:
            items = [(scope, level, text, "s", ttl) for scope, level, text, ttl in batch]
            model.remembered(store.remember_many(items), items, created)
            clock()  # one minute passes: what had a ttl of 30 s has expired
            model.now = created()
        for scope in (Scope("alice", "trip"), Scope("alice", "work"), Scope("bob", "none")):
            assert store.recall(scope, query, limit, rank=rank) == \
                model.recall(scope, query, limit, rank)


@pytest.mark.parametrize("rank", WORD_RANKS)
def test_top_k_probes_old_rare_matches_instead_of_reading_a_common_word(
        tmp_path: pathlib.Path, rank: memory.Rank) -> None:
    """Three old memories hold a rare word; 20,000 newer ones only a common word. Recall
    gives up reading every posting once there are more than _READ_ALL_UP_TO, then reads
    the rare word, the newest rows of the common one, and only the rows of the common
    word that can hold the three, not its other rows."""
    with MemoryStore(tmp_path / "m.db") as store:
        old = store.remember_many([(ALICE, "user", f"sun owl {n}", "s") for n in range(3)])
        store.remember_many([(ALICE, "user", f"sun day {n}", "s") for n in range(20_000)])
        unpacked: list[int] = []
        real_unpack = memory._unpack

        def counting_unpack(blob: object) -> Any:
            ids = real_unpack(blob)
            unpacked.append(len(ids))
            return ids

        with mock.patch.object(memory, "_unpack", counting_unpack):
            found = store.recall(ALICE, "owl sun", limit=3, rank=rank)
    assert [r["id"] for r in found] == old[::-1]
    assert len({r["score"] for r in found}) == 1 and found[0]["score"] > 1
    per_row = memory.POSTINGS_PER_ROW
    assert sum(unpacked) <= memory._READ_ALL_UP_TO + per_row + 3 + 2 * per_row + per_row
    assert sum(unpacked) < 20_000 / 3


@pytest.mark.parametrize("rank", WORD_RANKS)
def test_top_k_finds_an_old_memory_of_common_words_only(tmp_path: pathlib.Path,
                                                        rank: memory.Rank) -> None:
    """Once the limit-th best is known, the most common words stop being read, but only
    those that together cannot beat it: an old memory holding just two common words
    still outscores the newer ones holding one word each."""
    clock, created = fixed_clock(), fixed_clock()
    model = Model()
    items: list[tuple[Scope, str, str, str, float | None]] = [
        (ALICE, "user", "sun sea", "s", None)]
    items += [(ALICE, "user", f"{word} note{n}", "s", None)
              for n in range(60) for word in ("sun", "sun", "sea")]
    items += [(ALICE, "user", "owl", "s", None)]
    with mock.patch.object(memory, "POSTINGS_PER_ROW", 4), \
            mock.patch.object(memory, "_READ_ALL_UP_TO", 0), \
            MemoryStore(tmp_path / "m.db", clock=clock) as store:
        model.remembered(store.remember_many(items), items, created)
        found = store.recall(ALICE, "owl sea sun", 1, rank=rank)
        assert found == model.recall(ALICE, "owl sea sun", 1, rank)
    if rank == "shared":
        assert [(r["id"], r["score"]) for r in found] == [(1, 2)]


def test_a_batch_for_more_users_than_a_group_holds(target: str) -> None:
    """A write for many users goes in groups of users (on PostgreSQL each group's
    statements see only its users): across the groups each user's expired memories are
    purged, its new words extend its own index rows (asked again once a purge rewrote
    them), and the ids and the counts come out as for one group."""
    clock = SetClock("2026-10-20T09:00:00+00:00")
    users = [f"user-{n}" for n in range(7)]
    session = (importlib.import_module("memory_postgres")._PostgresSession
               if target.startswith("postgresql://") else memory._SqliteEngine)
    with mock.patch.object(session, "users_per_batch", 2), \
            mock.patch.object(memory, "INDEX_FROM", 1), \
            MemoryStore(target, clock=clock) as store:
        for user in users:
            store.remember(Scope(user, "trip"), "user", "likes the hotel", "s")
            store.remember(Scope(user, "trip"), "task", "hotel for one hour", "s", ttl=3600)
        clock.at = "2026-10-20T11:00:00+00:00"  # each user's task memory has expired
        items = [(Scope(user, task), level, f"hotel {user} {task} {level}", "s")
                 for task in ("trip", "work") for user in reversed(users)
                 for level in ("task", "user")]
        ids = store.remember_many(items)
        assert ids == sorted(ids) and len(set(ids)) == len(items)
        for user in users:
            trip = store.memories(Scope(user, "trip"))
            assert [m["text"] for m in trip] == [
                "likes the hotel", f"hotel {user} trip task", f"hotel {user} trip user",
                f"hotel {user} work user"]
            assert store.count(Scope(user, "work")) == 4
            found = store.recall(Scope(user, "trip"), f"hotel {user}", 10)
            assert {m["id"] for m in found} == {m["id"] for m in trip}
    with owner_connection(target) as db:
        assert db.execute("SELECT count(*) FROM memories WHERE text = 'hotel for one hour'"
                          ).fetchone()[0] == 0
    assert index_problems_at(target) == []


def index_rows(target: str, task: str | None) -> int:
    """How many index rows alice's user level (None) or task holds."""
    with owner_connection(target) as db:
        if task is None:
            found = db.execute("SELECT count(*) FROM memory_words WHERE user_id = 'alice'"
                               " AND task_id IS NULL").fetchone()
        else:
            found = db.execute("SELECT count(*) FROM memory_words WHERE user_id = 'alice'"
                               f" AND task_id = '{task}'").fetchone()
    return int(found[0])


@pytest.mark.parametrize("rank", WORD_RANKS)
def test_an_owner_is_indexed_from_index_from_memories_on(target: str,
                                                         rank: memory.Rank) -> None:
    """Below INDEX_FROM memories an owner (a user's level, or one task) has no index rows
    and recall reads its memories; the write that takes it to INDEX_FROM indexes all of
    them, a forget that takes it below drops them all; recall gives the model's answer
    throughout, on a scope of two owners on either side of the threshold too."""
    clock, created = fixed_clock(), fixed_clock()
    model = Model()
    trip = Scope("alice", "trip")

    def remember(level: str, text: str) -> int:
        items: list[tuple[Scope, str, str, str, float | None]] = [(trip, level, text, "s", None)]
        ids = store.remember_many(items)
        model.remembered(ids, items, created)
        return ids[0]

    def recalls_as_the_model() -> bool:
        return all(store.recall(trip, query, 5, rank=rank) == model.recall(trip, query, 5, rank)
                   for query in ("hotel", "hotel note3 task", "note1 note2"))

    with MemoryStore(target, clock=clock) as store:
        first = remember("user", "hotel note0")
        for n in range(1, memory.INDEX_FROM - 1):
            remember("user", f"hotel note{n}")
        remember("task", "hotel in the task")
        assert index_rows(target, None) == index_rows(target, "trip") == 0
        assert recalls_as_the_model()
        remember("user", f"hotel note{memory.INDEX_FROM - 1}")  # the owner reaches it
        assert index_rows(target, None) == memory.INDEX_FROM + 1  # hotel, and each note
        assert index_rows(target, "trip") == 0
        assert index_problems_at(target) == []
        assert recalls_as_the_model()
        assert store.forget(trip, first)  # below it again
        model.memories = [m for m in model.memories if m.id != first]
        assert index_rows(target, None) == 0
        assert index_problems_at(target) == []
        assert recalls_as_the_model()


def test_a_file_that_records_no_threshold_indexes_every_owner_until_reindexed(
        target: str) -> None:
    """A store made before the threshold records its rule alone and indexes every owner:
    it goes on doing so, read-only or not, until a reindex records the threshold and
    drops the rows of the owners below it."""
    with mock.patch.object(memory, "INDEX_FROM", 1):  # every owner indexed, as then
        with MemoryStore(target) as store:
            store.remember(ALICE, "user", "hotel by the river", "s")
    with owner_connection(target) as db:
        db.execute("UPDATE store_settings SET value = 'exact' WHERE name = 'matching'")
        if not target.startswith("postgresql://"):
            db.execute("COMMIT")  # sqlite3 began one before the update
    with MemoryStore(target) as store:
        store.remember(ALICE, "user", "hotel with a pool", "s")
        assert index_rows(target, None) == 3  # hotel, river, pool: one memory apiece
        assert index_problems_at(target) == []
        found = store.recall(ALICE, "hotel river", 5)
    with MemoryStore(target, read_only=True) as store:
        assert store.recall(ALICE, "hotel river", 5) == found
    with MemoryStore(target) as store:
        store.reindex("exact")
        assert store.recall(ALICE, "hotel river", 5) == found
    assert index_rows(target, None) == 0
    assert index_problems_at(target) == []


@pytest.mark.parametrize("recorded", ["exact;index-from=abc", "exact;index-from=-3",
                                      "exact;index-from=016", "exact;index-from=",
                                      "stems-9;index-from=16", "exact;index-from=0",
                                      "exact;index-from=1", "exact;index-from=5",
                                      "exact;index-from=15", "exact;index-from=17",
                                      f"exact;index-from={10**30}", "exact;index-from=١٦"])
def test_a_threshold_this_code_never_wrote_is_refused(target: str, recorded: str) -> None:
    """The one threshold this code writes is INDEX_FROM: another (hand-edited, or damaged)
    would have recall count memories twice or miss them, so the store refuses it, on
    either engine, read-only or not, and leaves the file as it was."""
    with MemoryStore(target) as store:
        store.remember(ALICE, "user", "hotel", "s")
    with owner_connection(target) as db:
        db.execute("UPDATE store_settings SET value = %s WHERE name = 'matching'"
                   if target.startswith("postgresql://") else
                   "UPDATE store_settings SET value = ? WHERE name = 'matching'", (recorded,))
        if not target.startswith("postgresql://"):
            db.execute("COMMIT")  # sqlite3 began one before the update
    before = None if target.startswith("postgresql://") else digest(pathlib.Path(target))
    for read_only in (False, True):
        with pytest.raises(SchemaError, match="matching rule this code does not know"):
            MemoryStore(target, read_only=read_only)
    if before is not None:
        assert digest(pathlib.Path(target)) == before
    with owner_connection(target) as db:
        assert db.execute("SELECT value FROM store_settings WHERE name = 'matching'"
                          ).fetchall() == [(recorded,)]


LONG = memory._WEIGHED_BY * memory.INDEX_FROM  # characters: one such text weighs INDEX_FROM


def long_text(words: str, length: int = LONG) -> str:
    """`words`, then filler words, to `length` characters."""
    filler = " ".join(f"filler{n}" for n in range(length // 8))
    return f"{words} {filler}"[:length].rstrip()


@pytest.mark.parametrize("rank", WORD_RANKS)
def test_a_long_text_takes_its_owner_to_the_index_at_once(target: str,
                                                           rank: memory.Rank) -> None:
    """An owner is indexed once its memories weigh INDEX_FROM, one for each _WEIGHED_BY
    characters of a text begun: one long text is enough, recall then reads no text to
    split into words, and the forget of that text takes the owner back below."""
    clock, created = fixed_clock(), fixed_clock()
    model = Model()
    trip = Scope("alice", "trip")
    statements: list[str] = []

    def remember(text: str) -> int:
        items: list[tuple[Scope, str, str, str, float | None]] = [(trip, "user", text, "s",
                                                                    None)]
        ids = store.remember_many(items)
        model.remembered(ids, items, created)
        return ids[0]

    with MemoryStore(target, clock=clock, max_text=memory._LONGEST_TEXT) as store:
        remember("hotel by the river")
        just_below = remember(long_text("hotel with a pool", LONG - 2 * memory._WEIGHED_BY))
        assert index_rows(target, None) == 0  # weighing INDEX_FROM - 1
        store.forget(trip, just_below)
        model.memories = [m for m in model.memories if m.id != just_below]
        long = remember(long_text("quiet hotel near the station"))
        assert index_rows(target, None) > 0 and index_problems_at(target) == []
        store.db.set_trace_callback(statements.append)
        for query in ("hotel", "quiet station", "river"):
            assert store.recall(trip, query, 5, rank=rank) == model.recall(trip, query, 5,
                                                                             rank)
        store.db.set_trace_callback(None)
        # No text read to be split: only the results' rows, by id.
        assert not [s for s in statements if "SELECT id, text, created_at FROM memories"
                    in s or "text, created_at FROM memories WHERE user_id" in s]
        store.forget(trip, long)
        model.memories = [m for m in model.memories if m.id != long]
        assert index_rows(target, None) == 0 and index_problems_at(target) == []
        assert store.recall(trip, "hotel", 5, rank=rank) == model.recall(trip, "hotel", 5,
                                                                           rank)


def test_an_upgrade_weighs_every_owner_and_indexes_those_its_weight_takes_over(
        target: str) -> None:
    """A file from before the weights (SQLite's layout 9, PostgreSQL's version 8) holds no
    postings for a small owner of long texts: the upgrade weighs every owner and indexes
    that one, in the upgrade's transaction; recall finds the same before and after."""
    trip = Scope("alice", "trip")
    with MemoryStore(target, clock=fixed_clock(), max_text=memory._LONGEST_TEXT) as store:
        store.remember(trip, "user", long_text("quiet hotel near the station"), "s")
        store.remember(trip, "task", "hotel booked for two nights", "s")
        store.remember(Scope("bob", "trip"), "user", "Bob likes the station hotel", "s")
        found = store.recall(trip, "quiet station hotel", 5)
    postgres = target.startswith("postgresql://")
    with owner_connection(target) as db:  # as the release before the weights left it
        db.execute("DELETE FROM memory_words WHERE user_id = 'alice' AND task_id IS NULL")
        for statement in PG_BEFORE_VALIDITY if postgres else BEFORE_VALIDITY:
            db.execute(statement)
        db.execute("DROP TABLE memory_history")
        db.execute("DROP TABLE memory_receipts")
        db.execute("ALTER TABLE memories DROP COLUMN version")
        db.execute("ALTER TABLE memory_counts DROP COLUMN weight")
        db.execute("UPDATE store_settings SET value = '8' WHERE name = 'schema_version'"
                   if postgres else "PRAGMA user_version = 9")
        if not postgres:
            db.execute("COMMIT")  # sqlite3 began one before the delete
    if not postgres:
        with MemoryStore(target, read_only=True, max_text=memory._LONGEST_TEXT) as reader:
            assert reader.recall(trip, "quiet station hotel", 5) == found  # as it is
    assert index_rows(target, None) == 0  # her long text was not indexed then
    with MemoryStore(target, max_text=memory._LONGEST_TEXT) as store:
        assert index_problems_at(target) == []
        assert index_rows(target, None) > 0
        assert store.recall(trip, "quiet station hotel", 5) == found


def test_a_long_text_does_not_hold_up_another_user_s_recall(tmp_path: pathlib.Path) -> None:
    """Recall of a small owner holding long texts reads postings, not the texts, under
    the store's lock, which another user's recall waits for (traced: the one owner whose
    texts are read is the other user's, of one short memory)."""
    with MemoryStore(tmp_path / "m.db", max_text=memory._LONGEST_TEXT) as store:
        store.remember_many([(ALICE, "user", long_text(f"hotel {n}", 200_000), "s")
                             for n in range(3)])
        store.remember(Scope("bob", "trip"), "user", "Bob likes the station hotel", "s")
        statements: list[str] = []
        store.db.set_trace_callback(statements.append)
        assert len(store.recall(ALICE, "hotel", 3)) == 3
        assert store.recall(Scope("bob", "trip"), "hotel", 3)[0]["text"].startswith("Bob")
        store.db.set_trace_callback(None)
        read = [s for s in statements if "text, created_at FROM memories" in s]
        assert read and all("user_id = 'bob'" in s for s in read)  # his short one alone


def test_a_page_oldest_first_reads_each_owner_s_range_not_the_user_s_rows_sorted(
        tmp_path: pathlib.Path) -> None:
    """A page of the oldest from an id read the scope's two owners together: every row of
    the user through another index, then sorted (15 ms a page of 20 at 100,000 memories);
    each owner's is a range of the scope index, in order, the two merged."""
    with MemoryStore(tmp_path / "m.db", clock=fixed_clock()) as store:
        store.remember_many([(ALICE, "user" if n % 2 else "task", f"note {n}", "s")
                             for n in range(400)])
        for statement, owner in ((memory._SQL_OWNER_UP, ("alice",)),
                                 (memory._SQL_TASK_UP, ("alice", "trip"))):
            plan = " ".join(row[3] for row in store.db.execute(
                f"EXPLAIN QUERY PLAN {statement}", (*owner, 10, memory._MAX_ID, 20)))
            assert "memories_scope" in plan and "TEMP B-TREE" not in plan, plan
        page = store.memories(ALICE, after=10, limit=20)
        assert [m["id"] for m in page] == list(range(11, 31))
