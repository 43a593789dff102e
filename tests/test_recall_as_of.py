"""A recall as of a time by words alone ranks where the memories are: the index's postings
of the memories unchanged since, the versions live then in place of the others. Its
oracle is the ranking of a copy of the scope as it read then (what every other recall as
of a time still reads): the same results, scores and explanations, for each rank, filter,
page and window, over a scope's life of keyed writes, revisions, renames, forgets,
expiry and windows. Both engines."""

from __future__ import annotations

import random
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import memory
from helpers import ALICE, ALICE_WORK, PG_BEFORE_CHANGES_INDEXED, SetClock
from memory import MemoryInputError, MemoryStore
from model import owner_connection

T0 = "2026-10-20T09:00:00+00:00"
WORDS = ["vegan", "dinner", "jazz", "river", "hotel", "seat"]
# Recalls by words: each rank, explain, pages, filters of the metadata, the level and the
# key, and windows.
ASKS: list[dict[str, Any]] = [
    {"rank": "idf", "limit": 20}, {"rank": "shared", "limit": 4, "offset": 1},
    {"rank": "idf", "explain": True}, {"rank": "hybrid", "limit": 20, "explain": True},
    {"rank": "idf", "where": {"n": {"$gte": 2}}, "limit": 20},
    {"rank": "shared", "where": {"n": {"$ne": 1}}, "explain": True, "limit": 20},
    {"rank": "idf", "where": {"$level": "task"}, "limit": 20},
    {"rank": "idf", "where": {"$key": {"$in": ["a", "b"]}}},
    {"rank": "idf", "valid_at": "any", "limit": 20},
    {"rank": "idf", "valid_at": "2026-10-20T09:04:00+00:00", "limit": 20}]
# Steps of a scope's life: (what, key, other key, seconds on, words, ttl, n).
STEPS = st.lists(st.tuples(
    st.sampled_from(["write", "shared", "note", "revise", "rename", "forget", "end"]),
    st.sampled_from("abc"), st.sampled_from("abcd"), st.sampled_from([60, 60, 0.5]),
    st.lists(st.sampled_from(WORDS), min_size=1, max_size=4), st.sampled_from([None, None, 150]),
    st.integers(0, 3)), min_size=1, max_size=16)


@contextmanager
def copied_only(store: MemoryStore) -> Iterator[None]:
    """Every recall as of a time ranks in a copy of the scope as it read, as before."""
    real = store._planner.recalled_then
    store._planner.recalled_then = lambda asked: None  # type: ignore[method-assign]
    try:
        yield
    finally:
        store._planner.recalled_then = real  # type: ignore[method-assign]


def live_through(location: str, steps: list[Any]) -> tuple[MemoryStore, SetClock, list[str]]:
    """A store that keeps history after the steps, its clock and each step's time."""
    clock = SetClock(T0)
    store = MemoryStore(location, clock=clock, history=True)
    times = []
    for what, key, other, seconds, words, ttl, n in steps:
        clock.advance(seconds)
        text = " ".join(words)
        held = store.get(ALICE, key=key)
        if what in ("write", "shared"):
            store.remember(ALICE, "task" if what == "write" else "user", text, "talk/1",
                           key=key, ttl=ttl, metadata={"n": n})
        elif what == "note":
            store.remember(ALICE, "user", text, "talk/2", ttl=ttl, metadata={"n": n})
        elif held is None:
            pass
        elif what == "revise":
            store.revise(ALICE, held["id"], text, "talk/1", metadata={"n": n})
        elif what == "rename" and store.get(ALICE, key=other, valid_at="any") is None:
            store.rename(ALICE, key, other)
        elif what == "forget":
            store.forget(ALICE, key=key)
        elif what == "end":
            store.revise(ALICE, held["id"], held["text"], "talk/1", valid_to=clock.at)
        times.append(clock.at)
    clock.advance(60)
    return store, clock, times


def recalls_as_of_rank_as_their_copies(location: str, steps: list[Any]) -> None:
    store, _, times = live_through(location, steps)
    with store:
        for at_ in times:
            for scope in (ALICE, ALICE_WORK):
                for ask in ASKS:
                    query = " ".join(WORDS[:3]) if ask["rank"] != "shared" else "jazz river"
                    found = store.recall(scope, query, as_of=at_, **ask)
                    with copied_only(store):
                        assert found == store.recall(scope, query, as_of=at_, **ask), ask


@settings(max_examples=30, deadline=None)
@given(steps=STEPS)
def test_a_recall_as_of_a_time_ranks_as_its_copy_of_the_scope(steps: list[Any]) -> None:
    recalls_as_of_rank_as_their_copies(":memory:", steps)


def test_a_recall_as_of_a_time_ranks_as_its_copy_on_each_engine(target: str) -> None:
    draw = random.Random(7)
    steps = [(draw.choice(["write", "write", "shared", "note", "revise", "rename", "forget",
                           "end"]),
              draw.choice("abc"), draw.choice("abcd"), draw.choice([60, 60, 0.5]),
              draw.sample(WORDS, draw.randint(1, 4)), draw.choice([None, None, 150]),
              draw.randint(0, 3)) for _ in range(30)]
    recalls_as_of_rank_as_their_copies(target, steps)


def test_a_recall_as_of_a_time_by_words_writes_no_copy(target: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """By words, with a filter, explain and a window, it reads the store alone."""
    store, _, times = live_through(target, [
        ("write", "a", "b", 60, ["vegan", "jazz"], None, 1),
        ("revise", "a", "b", 60, ["jazz", "river"], None, 2),
        ("note", "a", "b", 60, ["jazz"], 150, 3)])

    def refused(*args: Any) -> Any:
        raise AssertionError("copied the scope")
    monkeypatch.setattr(memory._Time, "_as_it_read", refused)
    with store:
        assert [m["text"] for m in store.recall(ALICE, "jazz", 5, as_of=times[0])] == [
            "vegan jazz"]
        assert [m["text"] for m in store.recall(ALICE, "jazz", 5, as_of=times[2], explain=True,
                                                where={"n": {"$gte": 2}})] == [
            "jazz", "jazz river"]
        with pytest.raises(AssertionError, match="copied"):
            store.recall(ALICE, "jazz", 5, as_of=times[0], context=True)


def test_a_recall_as_of_a_time_after_the_clock_s_reads_its_copy(target: str) -> None:
    """A time after the clock's (memories expiring between the two are live now and not
    then) is ranked in a copy: the same as the copy's."""
    store, clock, _ = live_through(target, [
        ("note", "a", "b", 60, ["jazz"], 150, 0), ("note", "a", "b", 60, ["jazz"], None, 1)])
    with store:
        later = SetClock(clock.at)
        later.advance(600)
        found = store.recall(ALICE, "jazz", 5, as_of=later.at)
        assert [m["text"] for m in found] == ["jazz"] and found[0]["id"] == 2
        with copied_only(store):
            assert store.recall(ALICE, "jazz", 5, as_of=later.at) == found


def test_a_naive_time_of_a_memory_is_refused_as_before(target: str) -> None:
    """A memory written by a clock without an offset cannot be told live then or not."""
    clock = SetClock("2026-10-20T09:00:00")
    with MemoryStore(target, clock=clock, history=True) as store:
        store.remember(ALICE, "user", "jazz", "s")
        with pytest.raises(MemoryInputError, match="as_of"):
            store.recall(ALICE, "jazz", as_of=T0)



def test_a_version_live_beside_its_memory_is_ranked_in_a_copy(target: str) -> None:
    """A clock set back gives a renamed memory a version live beside the memory itself:
    the two share an id, which only the copy tells apart."""
    clock = SetClock(T0)
    with MemoryStore(target, clock=clock, history=True) as store:
        store.remember(ALICE, "task", "jazz one", "s", key="a")
        clock.advance(300)
        store.rename(ALICE, "a", "b")
        clock.advance(-120)  # live from 09:03, the version before it until 09:05
        store.rename(ALICE, "b", "c")
        clock.advance(600)
        found = store.recall(ALICE, "jazz", 5, as_of="2026-10-20T09:04:00+00:00")
        assert [(m["id"], m["key"]) for m in found] == [(1, "a"), (1, "c")]
        with copied_only(store):
            assert store.recall(ALICE, "jazz", 5, as_of="2026-10-20T09:04:00+00:00") == found


def test_a_version_imported_live_beside_its_memory_is_ranked_beside_it(target: str) -> None:
    """An import may give a memory's version a time live beside the memory itself (times
    out of order): the two are ranked side by side, as in the copy."""
    with MemoryStore(target, clock=SetClock(T0), history=True) as store:
        store.import_memories([{
            "user": "alice", "task": "trip", "level": "task", "text": "jazz two",
            "source": "s", "created_at": T0, "updated_at": "2026-10-20T09:00:30+00:00",
            "expires_at": None, "key": "b", "metadata": None, "version": 2,
            "history": [{"id": 1, "text": "jazz one", "source": "s", "created_at": T0,
                         "updated_at": T0, "expires_at": None, "key": "a", "metadata": None,
                         "superseded_at": "2026-10-20T09:01:00+00:00", "version": 1}]}])
        found = store.recall(ALICE, "jazz", 5, as_of="2026-10-20T09:00:45+00:00")
        assert [m["text"] for m in found] == ["jazz two", "jazz one"]
        with copied_only(store):
            assert store.recall(ALICE, "jazz", 5, as_of="2026-10-20T09:00:45+00:00") == found


def test_a_postgres_database_of_version_14_gains_its_indexes_of_changes_in_one_transaction(
        url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    postgres = pytest.importorskip("memory_postgres")
    store, _, times = live_through(url, [("write", "a", "b", 60, ["jazz"], None, 1),
                                         ("revise", "a", "b", 60, ["jazz", "river"], None, 2)])
    with store:
        before = store.recall(ALICE, "jazz river", 5, as_of=times[0])
    with owner_connection(url) as db:  # version 14, as its release made it
        for statement in PG_BEFORE_CHANGES_INDEXED:
            db.execute(statement)
        db.execute("UPDATE store_settings SET value = '14' WHERE name = 'schema_version'")

    def failing(db: Any) -> None:
        postgres._index_changes(db)
        raise memory.StoreError("disk full (simulated)")

    monkeypatch.setattr(postgres, "POSTGRES_MIGRATIONS", [
        (target, failing if target == 15 else step)
        for target, step in postgres.POSTGRES_MIGRATIONS])
    with pytest.raises(memory.StoreError, match="simulated"):
        MemoryStore(url)
    monkeypatch.undo()
    indexes = ("SELECT count(*) FROM pg_indexes WHERE indexname IN ('memories_updated',"
               " 'memories_created', 'memories_written_otherwise', 'memory_history_superseded',"
               " 'memory_history_superseded_otherwise')")
    with owner_connection(url) as db:  # the step's indexes rolled back with it
        assert db.execute(indexes).fetchone() == (0,)
    with MemoryStore(url, history=True) as store:
        assert store.stats()["schema_version"] == postgres.POSTGRES_SCHEMA_VERSION == 16
        assert store.recall(ALICE, "jazz river", 5, as_of=times[0]) == before
    with owner_connection(url) as db:
        assert db.execute(indexes).fetchone() == (5,)


def test_what_changed_since_a_time_is_read_from_its_indexes_before_statistics(
        url: str) -> None:
    """What changed since a time is read from the indexes of changes, a range of times of
    the system clock's form and the others' index, before the server has statistics of
    the tables (as a bulk load leaves them) and after: no scan of the scope (with
    statistics, the others' index was a NOT LIKE the planner guessed held for every row,
    and it read the scope whole)."""
    clock = SetClock()
    with MemoryStore(url, clock=clock, history=True) as opened:
        for again in ("", " again"):  # 3,000 memories, each with a version
            opened.remember_many([{"scope": ALICE, "level": "task", "text": f"note {n}{again}",
                                   "source": "s", "key": f"k{n}"} for n in range(3_000)])
            clock.advance(60)
        instant = memory._as_of_instant(clock.at)
        clock.advance(60)
        opened.remember_many([{"scope": ALICE, "level": "task", "text": f"note {n} later",
                               "source": "s", "key": f"k{n}"} for n in range(30)])
        key, after = ("alice", "trip"), f"{instant[:19]}+00:00"
        reads = [(memory._SQL_WRITTEN_AFTER, (*key, after, *key, after, *key)),
                 (memory._SQL_LIVE_THROUGH, (*key, after, instant, instant[:19], *key, *key,
                                             instant, instant[:19]))]
        plans = []
        for analyzed in (False, True):
            if analyzed:
                with owner_connection(url) as owner:
                    owner.execute("ANALYZE")
            with opened._snapshot({"alice"}) as db:
                plans += ["\n".join(row[0] for row in db.execute(memory._sql(
                    "", postgresql=f"EXPLAIN (ANALYZE) {statement.form('postgresql')}"),
                    arguments)) for statement, arguments in reads]
                assert len(db.execute(*reads[0]).fetchall()) == 30
                assert len(db.execute(*reads[1]).fetchall()) == 30
    for plan, bounded in zip(plans, ("updated_at", "superseded_at") * 2, strict=True):
        assert "Seq Scan" not in plan and "_otherwise" in plan, plan
        assert f"Index Cond: ((user_id = 'alice'::text) AND ({bounded} > " in plan, plan
        # What the ranges pass over: the 30 rows written since, none before.
        assert all(int(n) == 0 for n in re.findall(r"Rows Removed by \w+: (\d+)", plan)), plan


def test_two_versions_of_one_id_live_at_a_time_are_ranked_in_a_copy(target: str) -> None:
    """A clock set back twice gives a renamed memory two versions live at one time, both
    of its id: only the copy tells them apart."""
    clock = SetClock(T0)
    with MemoryStore(target, clock=clock, history=True) as store:
        store.remember(ALICE, "task", "jazz one", "s", key="a")
        for seconds, key in ((300, "b"), (-240, "c"), (300, "d")):  # 09:05, 09:01, 09:06
            clock.advance(seconds)
            store.rename(ALICE, chr(ord(key) - 1), key)
        clock.advance(600)
        found = store.recall(ALICE, "jazz", 5, as_of="2026-10-20T09:03:00+00:00")
        assert sorted(str(m["key"]) for m in found) == ["a", "c"]
        with copied_only(store):
            assert store.recall(ALICE, "jazz", 5, as_of="2026-10-20T09:03:00+00:00") == found


def test_a_version_of_a_memory_expired_since_or_out_of_its_window_is_not_ranked(
        target: str) -> None:
    """A memory expired since has no past; a version whose window leaves out the time
    asked (valid_at) is not ranked, as the copy ranks neither."""
    clock = SetClock(T0)
    with MemoryStore(target, clock=clock, history=True) as store:
        store.remember(ALICE, "task", "jazz one", "s", key="a")
        store.remember(ALICE, "task", "jazz band", "s", key="b",
                       valid_to="2026-10-20T09:10:00+00:00")
        clock.advance(60)
        store.remember(ALICE, "task", "jazz two", "s", key="a", ttl=60)
        store.remember(ALICE, "task", "jazz band again", "s", key="b")
        clock.advance(120)  # "jazz two" has expired
        asks: list[dict[str, Any]] = [
            {}, {"valid_at": "2026-10-20T09:20:00+00:00"}, {"valid_at": "any"}]
        found = [store.recall(ALICE, "jazz", 5, as_of="2026-10-20T09:00:30+00:00", **ask)
                 for ask in asks]
        assert [[m["text"] for m in each] for each in found] == [
            ["jazz band"], [], ["jazz band"]]
        with copied_only(store):
            assert [store.recall(ALICE, "jazz", 5, as_of="2026-10-20T09:00:30+00:00", **ask)
                    for ask in asks] == found
