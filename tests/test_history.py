"""History that forgetting erases: a store that keeps history (history=True) keeps each
version a memory supersedes (replaced under its key, revised, renamed) until the memory
goes; history() gives them oldest first; get, memories and recall read as of a time, as
the scope read then; every way a memory goes takes its versions with it, to the bytes of
the file; a state machine of keyed writes and as-of reads against a model, with history
on and off. Both engines."""

from __future__ import annotations

import array
import pathlib
import random
import re
import threading
from datetime import timedelta, timezone
from typing import Any

import pytest
from embedders import ConceptEmbedder
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import memory
from helpers import (
    ALICE,
    ALICE_WORK,
    BOB,
    TOUCHES_MEMORY_DATA,
    SetClock,
    all_finish,
    file_bytes,
)
from memory import MemoryInputError, MemoryStore, Scope
from model import rows_of_user

T0 = "2026-10-20T09:00:00+00:00"


def at(minutes: float) -> str:
    """The time `minutes` after T0, as the tests' clock gives it."""
    clock = SetClock(T0)
    clock.advance(minutes * 60)
    return clock.at


@pytest.fixture
def store(target: str, clock: SetClock) -> Any:
    with MemoryStore(target, clock=clock, history=True) as opened:
        yield opened


def texts(found: list[Any]) -> list[str]:
    return [memory_["text"] for memory_ in found]


def test_each_superseded_version_is_kept_oldest_first(store: MemoryStore,
                                                      clock: SetClock) -> None:
    first = store.remember(ALICE, "task", "Seat: aisle.", "s", key="seat",
                           metadata={"row": 3})
    clock.advance(60)
    second = store.remember(ALICE, "task", "Seat: window.", "s", key="seat")
    clock.advance(60)
    third = store.revise(ALICE, second, "Seat: window, over the wing.", "s")
    clock.advance(60)
    assert third is not None and store.rename(ALICE, "seat", "seats/plane") == third
    versions = store.history(ALICE, key="seats/plane")
    assert [(v["id"], v["text"], v["key"], v["version"]) for v in versions] == [
        (first, "Seat: aisle.", "seat", 1), (second, "Seat: window.", "seat", 2),
        (third, "Seat: window, over the wing.", "seat", 3),
        (third, "Seat: window, over the wing.", "seats/plane", 4)]
    # Each was superseded when the next was written; the live one is not.
    assert [v["superseded_at"] for v in versions] == [at(1), at(2), at(3), None]
    assert [v["updated_at"] for v in versions] == [at(0), at(1), at(2), at(3)]
    assert versions[0]["metadata"] == {"row": 3} and versions[1]["metadata"] is None
    assert versions[-1] == {**store.get(ALICE, third), "superseded_at": None}  # type: ignore[dict-item]
    # Any version's id finds the memory's history; the key it had then does not.
    assert store.history(ALICE, first) == store.history(ALICE, third) == versions
    assert store.history(ALICE, key="seat") == []
    # Another user, another task, an unknown id: nothing, all alike.
    assert store.history(BOB, first) == store.history(Scope("alice", "other"), first) == []
    assert store.history(ALICE, third + 100) == []
    # A memory never superseded is its own history.
    plain = store.remember(ALICE, "user", "Likes jazz.", "s")
    assert texts(store.history(ALICE, plain)) == ["Likes jazz."]


def test_a_store_without_history_keeps_no_version(target: str, clock: SetClock) -> None:
    with MemoryStore(target, clock=clock) as store:
        store.remember(ALICE, "user", "Seat: aisle.", "s", key="seat")
        store.remember(ALICE, "user", "Seat: window.", "s", key="seat")
        assert texts(store.history(ALICE, key="seat")) == ["Seat: window."]
        assert rows_of_user(target, "memory_history", "alice") == 0
    # Asked for, it is recorded in the file: the next store keeps history unasked.
    with MemoryStore(target, clock=clock, history=True):
        pass
    with MemoryStore(target, clock=clock) as store:
        store.remember(ALICE, "user", "Seat: front.", "s", key="seat")
        assert texts(store.history(ALICE, key="seat")) == ["Seat: window.", "Seat: front."]
    # Turned off, it keeps no more: what it kept is read until its memory goes, and a
    # memory replaced then goes whole, past and all.
    with MemoryStore(target, clock=clock, history=False) as store:
        store.remember(ALICE, "user", "Hotel: river.", "s", key="hotel")
        assert texts(store.history(ALICE, key="seat")) == ["Seat: window.", "Seat: front."]
        store.remember(ALICE, "user", "Seat: back.", "s", key="seat")
        assert texts(store.history(ALICE, key="seat")) == ["Seat: back."]
        assert rows_of_user(target, "memory_history", "alice") == 0


@pytest.mark.parametrize("history", ["yes", 1, None])
def test_history_is_a_bool(tmp_path: pathlib.Path, history: Any) -> None:
    if history is None:
        MemoryStore(tmp_path / "m.db", history=history).close()
        return
    with pytest.raises(MemoryInputError, match="history must be a bool"):
        MemoryStore(tmp_path / "m.db", history=history)


def test_a_read_only_store_cannot_turn_history_on(tmp_path: pathlib.Path) -> None:
    MemoryStore(tmp_path / "m.db").close()
    with pytest.raises(MemoryInputError, match="read-only"):
        MemoryStore(tmp_path / "m.db", read_only=True, history=True)
    MemoryStore(tmp_path / "m.db", history=True).close()
    MemoryStore(tmp_path / "m.db", read_only=True, history=True).close()


def test_as_of_reads_the_memories_as_they_read_then(store: MemoryStore,
                                                    clock: SetClock) -> None:
    kept = store.remember(ALICE, "user", "Hotel by the river.", "s", key="hotel")
    gone = store.remember(ALICE, "task", "Hotel budget is small.", "s")
    brief = store.remember(ALICE, "task", "Hotel shuttle at noon.", "s", ttl=600)
    clock.advance(60)
    store.remember(ALICE, "user", "Hotel by the station.", "s", key="hotel")
    clock.advance(60)
    store.forget(ALICE, gone)  # a forgotten memory has no past
    later = store.remember(ALICE, "task", "Hotel has a pool.", "s")
    clock.advance(60)
    assert texts(store.memories(ALICE, as_of=at(0.5))) == [
        "Hotel by the river.", "Hotel shuttle at noon."]
    assert texts(store.memories(ALICE, as_of=at(1.2))) == [  # in id order, as ever
        "Hotel shuttle at noon.", "Hotel by the station."]
    assert texts(store.memories(ALICE, as_of=at(2))) == [
        "Hotel shuttle at noon.", "Hotel by the station.", "Hotel has a pool."]
    assert store.memories(ALICE, as_of=at(-1)) == []
    assert texts(store.memories(ALICE, as_of=at(3))) == texts(store.memories(ALICE))
    assert texts(store.memories(ALICE, as_of=at(10))) == [  # the shuttle's time is up
        "Hotel by the station.", "Hotel has a pool."]
    # As they read then: the superseded version with its own id, key and times.
    (then,) = store.memories(ALICE, as_of=at(0.5), key_prefix="")
    assert {**then, "superseded_at": at(1)} == store.history(ALICE, key="hotel")[0]
    assert then["id"] == kept and "superseded_at" not in then
    assert store.get(ALICE, key="hotel", as_of=at(0.5)) == then
    assert store.get(ALICE, kept, as_of=at(0.5)) == then
    assert store.get(ALICE, kept, as_of=at(1.5)) is None  # that version was gone by then
    assert store.get(ALICE, brief, as_of=at(1.5)) == store.get(ALICE, brief)
    assert store.get(ALICE, gone, as_of=at(0.5)) is None
    assert store.get(ALICE, later, as_of=at(1)) is None
    assert store.get(BOB, kept, as_of=at(0.5)) is None
    assert texts(store.recall(ALICE, "hotel river", 5, as_of=at(0.5))) == [
        "Hotel by the river.", "Hotel shuttle at noon."]
    assert texts(store.recall(ALICE_WORK, "hotel river", 5, as_of=at(0.5))) == [
        "Hotel by the river."]  # the scope's: another task's never
    # Expired now, a memory has no past either, before any purge.
    clock.advance(600)
    assert texts(store.memories(ALICE, as_of=at(0.5))) == ["Hotel by the river."]


def test_writers_racing_on_one_key_leave_one_chain(target: str) -> None:
    """Eight threads replacing one key, history kept: every write is a version of the one
    chain, in the order the store took them, none lost, none twice."""
    with MemoryStore(target, history=True) as store:
        store.remember(ALICE, "user", "Seat: none yet.", "s", key="seat")

        def writer(n: int) -> None:
            store.remember(ALICE, "user", f"Seat: row {n}.", "s", key="seat")

        assert all_finish([threading.Thread(target=writer, args=(n,)) for n in range(8)])
        versions = store.history(ALICE, key="seat")
        assert [v["version"] for v in versions] == list(range(1, 10))
        assert sorted(v["text"] for v in versions[1:]) == sorted(
            f"Seat: row {n}." for n in range(8))
        assert [v["superseded_at"] is None for v in versions] == [False] * 8 + [True]
        assert rows_of_user(target, "memory_history", "alice") == 8


@pytest.mark.parametrize("as_of", ["yesterday", "2026-10-20T09:00:00", 5, ""])
def test_a_bad_as_of_is_refused(store: MemoryStore, as_of: Any) -> None:
    store.remember(ALICE, "user", "Hotel by the river.", "s")
    for read in (lambda: store.memories(ALICE, as_of=as_of),
                 lambda: store.get(ALICE, 1, as_of=as_of),
                 lambda: store.recall(ALICE, "hotel", as_of=as_of)):
        with pytest.raises(MemoryInputError, match="as_of"):
            read()


def test_a_recall_as_of_a_time_ranks_as_a_recall_then_did(target: str,
                                                          clock: SetClock) -> None:
    embedder = ConceptEmbedder()
    with MemoryStore(target, clock=clock, history=True, embedder=embedder) as store:
        # Ids here are not the private store's: one forgotten leaves a gap.
        store.forget(ALICE, store.remember(ALICE, "user", "Jazz dinner.", "talk/0"))
        for n in range(40):  # the live owners' words indexed (the store at then reads
            # its own from the texts): the two ways score alike
            store.remember(ALICE, "task", f"Dinner place {n}: a vegan supper.", f"talk/{n % 7}",
                           key=f"dinner/{n}", metadata={"n": n})
            store.remember(ALICE, "user", f"Jazz band {n} plays tonight.", f"talk/{n % 7}")
            clock.advance(10)
        then = clock.at
        assert rows_of_user(target, "memory_words", "alice") > 0
        asks: list[dict[str, Any]] = [
            {"rank": "idf"}, {"rank": "idf", "context": True, "explain": True},
            {"rank": "meaning"}, {"rank": "hybrid", "explain": True, "limit": 4},
            {"rank": "shared", "where": {"n": {"$gte": 2}}, "offset": 1, "limit": 9},
            {"rank": "hybrid", "context": True, "min_score": 0.1, "budget": 120}]
        before = [store.recall(ALICE, "vegan dinner jazz", **ask) for ask in asks]
        assert all(before) and any("lent" in found["why"] for found in before[1])
        clock.advance(60)
        for n in range(0, 6, 2):
            store.remember(ALICE, "task", f"Dinner place {n} closed: eat meat.", "talk/x",
                           key=f"dinner/{n}")
        for found in store.memories(ALICE, limit=3):
            store.revise(ALICE, found["id"], "Plant music.", "talk/y")
        store.remember(ALICE, "user", "Vegan jazz dinner every night.", "talk/z")
        assert [store.recall(ALICE, "vegan dinner jazz", **ask) for ask in asks] != before
        assert [store.recall(ALICE, "vegan dinner jazz", **ask, as_of=then)
                for ask in asks] == before


def test_pages_as_of_a_time_concatenate_in_the_ids_here(store: MemoryStore,
                                                         clock: SetClock) -> None:
    ids = [store.remember(ALICE, "task", f"note {n}", "s", key=f"k{n % 4}") for n in range(9)]
    store.remember(ALICE, "task", "late", "s")
    whole = store.memories(ALICE, as_of=at(0))
    late = store.memories(ALICE)[-1]["id"]
    # Each key's last write at that reading: one superseded at the instant it was
    # written was never the live one.
    assert [m["id"] for m in whole] == [*ids[5:], late]
    pages, after = [], 0
    while page := store.memories(ALICE, as_of=at(0), after=after, limit=2):
        pages += page
        after = page[-1]["id"]
    assert pages == whole
    down = store.memories(ALICE, as_of=at(0), newest_first=True, before=ids[8], limit=2)
    assert [m["id"] for m in down] == [ids[7], ids[6]]


LISTINGS = st.fixed_dictionaries({}, optional={
    "after": st.integers(0, 12), "limit": st.integers(1, 5), "before": st.integers(1, 14),
    "newest_first": st.booleans(), "conversation": st.sampled_from(["talk", "chat"]),
    "where": st.sampled_from([{"n": {"$gte": 1}}, {"$key": {"$ne": "k1"}},
                              {"$or": [{"n": 0}, {"$source": "chat/1"}]}])})
KEYED = st.fixed_dictionaries({}, optional={
    "key_prefix": st.sampled_from(["", "k", "k1", "x"]), "after_key": st.sampled_from(["k0", "k1"]),
    "limit": st.integers(1, 3), "where": st.just({"n": {"$lt": 2}})})
WRITES = st.lists(st.tuples(st.sampled_from([ALICE, ALICE_WORK]), st.sampled_from(["user", "task"]),
                            st.sampled_from([None, "k0", "k1", "k2"]), st.integers(0, 2),
                            st.sampled_from(["talk/1", "talk/2", "chat/1"]),
                            st.sampled_from([None, 60])), min_size=1, max_size=12)


@settings(max_examples=40, deadline=None)
@given(writes=WRITES, listings=st.lists(st.one_of(LISTINGS, KEYED), min_size=1, max_size=6))
def test_a_read_as_of_now_is_the_read_now(writes: list[Any], listings: list[Any]) -> None:
    """The pages, filters and key listings of memories(), and get by id and by key, as of
    the clock's reading are what the same calls read without as_of: the as-of reads
    answer each option as the live ones do."""
    clock = SetClock(T0)
    with MemoryStore(":memory:", clock=clock, history=True) as store:
        for scope, level, key, n, source, ttl in writes:
            store.remember(scope, level, f"note {n} {key}", source, key=key,
                           metadata={"n": n}, ttl=ttl)
            clock.advance(30)
        for listing in listings:
            for scope in (ALICE, ALICE_WORK):
                try:
                    live = store.memories(scope, **listing)
                except MemoryInputError as refused:
                    with pytest.raises(MemoryInputError, match=re.escape(str(refused))):
                        store.memories(scope, **listing, as_of=clock.at)
                    continue
                assert store.memories(scope, **listing, as_of=clock.at) == live
        for scope in (ALICE, ALICE_WORK, BOB):
            for memory_id in range(1, len(writes) + 2):
                assert store.get(scope, memory_id, as_of=clock.at) == store.get(scope, memory_id)
            for key in ("k0", "k1", "k2"):
                assert store.get(scope, key=key, as_of=clock.at) == store.get(scope, key=key)


# Steps of a scope's life: (what, key, other key, ttl): a keyed write (a replace where
# the key is held) of the task or of the user level (shared), an unkeyed one, a revision,
# a rename and a forget, of keys a to c.
STEPS = st.lists(st.tuples(st.sampled_from(["write", "shared", "note", "revise", "rename",
                                            "forget"]),
                           st.sampled_from("abc"), st.sampled_from("abcd"),
                           st.sampled_from([None, None, 150])), min_size=1, max_size=14)


def as_of_agrees_with_the_reads_then(location: str, steps: list[Any]) -> None:
    """After each step the reads of the scope are kept; at the end, every read as of each
    step's time is what was read then, less the memories forgotten or expired since (a
    memory's versions go with it): for memories() whole, its pages, its listing by key
    and get by id and key."""
    clock = SetClock(T0)
    lineage: dict[int, int] = {}  # each id read, the memory (its first id) it is of
    seen: list[tuple[str, list[Any], list[Any], list[Any]]] = []
    with MemoryStore(location, clock=clock, history=True) as store:
        for what, key, other, ttl in steps:
            clock.advance(60)
            held = store.get(ALICE, key=key)
            if what == "write" or (what == "note" and held is None):
                new = store.remember(ALICE, "task", f"{key} {clock.at}", "talk/1", key=key,
                                     ttl=ttl)
                lineage[new] = lineage[held["id"]] if held and held["level"] == "task" else new
            elif what == "shared":  # ALICE_WORK sees the user level's holder of the key
                holder = store.get(ALICE_WORK, key=key)
                new = store.remember(ALICE, "user", f"{key} shared {clock.at}", "talk/3",
                                     key=key, ttl=ttl)
                lineage[new] = lineage[holder["id"]] if holder else new
            elif what == "note":
                new = store.remember(ALICE, "user", f"note {clock.at}", "talk/2", ttl=ttl)
                lineage[new] = new
            elif held is None:
                continue
            elif what == "revise":
                revised = store.revise(ALICE, held["id"], held["text"] + "!", "talk/1")
                assert revised is not None
                lineage[revised] = lineage[held["id"]]
            elif what == "rename" and store.get(ALICE, key=other) is None:
                store.rename(ALICE, key, other)
            elif what == "forget":
                store.forget(ALICE, key=key)
            seen.append((clock.at, store.memories(ALICE), store.memories(ALICE, key_prefix=""),
                         store.memories(ALICE_WORK, key_prefix="")))
        clock.advance(60)
        reads_as_of_agree(store, seen, lineage)


def reads_as_of_agree(store: MemoryStore, seen: list[tuple[str, list[Any], list[Any], list[Any]]],
                      lineage: dict[int, int]) -> None:
    """The reads as of each time `seen` are what was read then, of the memories live now:
    where the task's holder of a key then is gone, the user level's then (as the other
    task saw it) is the key's."""
    alive = {lineage.get(m["id"], m["id"]) for m in store.memories(ALICE)}
    for at_, listed, keyed, shared in seen:
        holders = {m["key"]: m for m in shared if lineage.get(m["id"], m["id"]) in alive}
        holders.update((m["key"], m) for m in keyed if m["level"] == "task"
                       and lineage.get(m["id"], m["id"]) in alive)
        held = [holders[name] for name in sorted(holders)]
        assert store.memories(ALICE, as_of=at_, key_prefix="") == held
        assert store.memories(ALICE, as_of=at_, key_prefix="", after_key="a", limit=1) == \
            [m for m in held if m["key"] > "a"][:1]
        assert store.memories(ALICE, as_of=at_, key_prefix="c") == \
            [m for m in held if m["key"].startswith("c")]
        kept = [m for m in listed if lineage.get(m["id"], m["id"]) in alive]
        assert store.memories(ALICE, as_of=at_) == kept
        assert store.memories(ALICE, as_of=at_, newest_first=True, limit=2) == \
            kept[::-1][:2]
        if kept:
            assert store.memories(ALICE, as_of=at_, after=kept[0]["id"], limit=3) == \
                kept[1:4]
        for m in kept:
            assert store.get(ALICE, m["id"], as_of=at_) == m
        for name in "abcd":
            assert store.get(ALICE, key=name, as_of=at_) == holders.get(name), (at_, name)


def test_an_as_of_page_reads_on_past_a_run_that_ends_among_one_id_s_versions(
        target: str) -> None:
    """A memory renamed 40 times has 40 versions of its id: more than the first run of an
    owner's versions that a page of 5 reads (32), where the clock's times are of a form
    that the runs cannot tell apart in SQL (an offset other than UTC's)."""
    clock = SetClock("2026-10-20T10:00:00+01:00")
    with MemoryStore(target, clock=clock, history=True) as store:
        renamed = store.remember(ALICE, "task", "Seat: aisle.", "s", key="k0")
        after = store.remember(ALICE, "task", "Seat: later.", "s")
        times = []
        for n in range(1, 41):
            clock.advance(60)
            times.append(clock.at)
            store.rename(ALICE, f"k{n - 1}", f"k{n}")
        for n, at_ in enumerate(times, start=1):
            for newest in (False, True):
                found = store.memories(ALICE, as_of=at_, newest_first=newest, limit=5)
                assert [(m["id"], m.get("key")) for m in found] == (
                    [(renamed, f"k{n}"), (after, None)][::-1 if newest else 1])
            then = store.get(ALICE, renamed, as_of=at_)
            assert then is not None and then["key"] == f"k{n}"


def test_an_as_of_listing_by_key_reads_on_past_its_runs(target: str) -> None:
    """Listings by key as of each time are the listings made then, less a memory expired
    since, where the runs they read end among one key's versions (one key replaced 40
    times, past the first run of 32) and between two owners' memories of one key (40
    keys held at both levels, after one of the user level's alone), and where the clock's
    times are of a form that the runs cannot tell apart in SQL (an offset other than
    UTC's)."""
    clock = SetClock("2026-10-20T10:00:00+01:00")
    with MemoryStore(target, clock=clock, history=True) as store:
        store.remember_many([{"scope": ALICE, "level": level, "text": f"{level} {n}",
                              "source": "s", "key": f"k{n:02}"}
                             for n in range(40) for level in ("user", "task")])
        store.remember(ALICE, "user", "Gone by the end.", "s", key="j0", ttl=40 * 60 + 30)
        seen = []
        for n in range(40):
            clock.advance(60)
            store.remember(ALICE, "task", f"k00 again {n}", "s", key="k00")
            seen.append((clock.at, store.memories(ALICE, key_prefix="")[1:],
                         store.memories(ALICE_WORK, key_prefix="k0", after_key="k00", limit=3)))
        clock.advance(60)
        for at_, listed, shared in seen:
            assert store.memories(ALICE, as_of=at_, key_prefix="") == listed
            assert store.memories(ALICE, as_of=at_, key_prefix="", limit=30) == listed[:30]
            assert store.memories(ALICE, as_of=at_, key_prefix="", after_key="k00",
                                  limit=2) == listed[1:3]
            assert store.memories(ALICE_WORK, as_of=at_, key_prefix="k0", after_key="k00",
                                  limit=3) == shared


@settings(max_examples=40, deadline=None)
@given(steps=STEPS)
def test_a_read_as_of_a_time_is_the_read_made_then(steps: list[Any]) -> None:
    as_of_agrees_with_the_reads_then(":memory:", steps)


def test_a_read_as_of_a_time_is_the_read_made_then_on_each_engine(target: str) -> None:
    draw = random.Random(5)
    steps = [(draw.choice(["write", "write", "shared", "note", "revise", "rename", "forget"]),
              draw.choice("abc"), draw.choice("abcd"), draw.choice([None, None, 150]))
             for _ in range(40)]
    as_of_agrees_with_the_reads_then(target, steps)


@given(st.datetimes(timezones=st.builds(lambda minutes: timezone(timedelta(minutes=minutes)),
                                        st.integers(-1439, 1439) | st.just(0))),
       st.sampled_from(["seconds", "auto"]))
def test_a_stored_time_is_the_instant_it_names(moment: Any, spec: str) -> None:
    reading = moment.isoformat(timespec=spec)
    assert memory._reading_instant(reading) == memory._utc_form("t", reading)


def superseded_everywhere(target: str, store: MemoryStore, clock: SetClock,
                          scope: Scope = ALICE, source: str = "talk/1") -> int:
    """A keyed memory written three times and revised: three versions kept, each with its
    window of validity (the writes correct one another: from one time on)."""
    since = "2026-01-01T00:00:00+00:00"
    store.remember(scope, "task", "Seat: aisle.", source, key="seat", metadata={"m": 1},
                   valid_from=since)
    clock.advance(1)
    store.remember(scope, "task", "Seat: window.", source, key="seat", metadata={"m": 2},
                   valid_from=since, valid_to="2027-01-01T00:00:00+00:00")
    clock.advance(1)
    latest = store.remember(scope, "task", "Seat: front.", source, key="seat",
                            metadata={"m": 3}, valid_from=since)
    clock.advance(1)
    revised = store.revise(scope, latest, "Seat: front, left.", source,
                           valid_to="2028-01-01T00:00:00+00:00")
    assert revised is not None and len(store.history(scope, revised)) == 4
    assert rows_of_user(target, "memory_history", scope.user) == 3
    assert all(version["valid_from"] for version in store.history(scope, revised))
    return revised


@pytest.mark.parametrize("way", ["forget", "forget key", "forget_where", "forget_source",
                                 "forget_conversation", "erase_user", "expiry",
                                 "purge_expired", "a key written over an expired one"])
def test_every_way_a_memory_goes_takes_its_versions(target: str, clock: SetClock,
                                                    way: str) -> None:
    with MemoryStore(target, clock=clock, history=True) as store:
        other = superseded_everywhere(target, store, clock, BOB)
        first = clock.at  # the time alice's first version was written
        live = superseded_everywhere(target, store, clock)
        assert texts(store.memories(ALICE, as_of=first)) == ["Seat: aisle."]
        if way == "forget":
            assert store.forget(ALICE, live)
        elif way == "forget key":
            assert store.forget(ALICE, key="seat")
        elif way == "forget_where":
            assert store.forget_where(ALICE, {"$key": "seat"}) == 1
        elif way == "forget_source":
            assert store.forget_source(ALICE, "talk/1") == 1
        elif way == "forget_conversation":
            assert store.forget_conversation(ALICE, "talk") == 1
        elif way == "erase_user":
            assert store.erase_user("alice") == 1
        else:
            assert store.renew(ALICE, [live], 30) == 1
            clock.advance(60)
            assert store.history(ALICE, live) == []  # expired: no past, before any purge
            assert store.memories(ALICE, as_of=first) == []
            if way == "expiry":  # a write of the scope purges it
                store.remember(ALICE, "task", "Seat: none.", "s")
            elif way == "purge_expired":
                assert store.purge_expired() == 1
            else:
                store.remember(ALICE, "task", "Seat: none.", "s", key="seat")
                assert [v["version"] for v in store.history(ALICE, key="seat")] == [1]
        assert rows_of_user(target, "memory_history", "alice") == 0
        assert rows_of_user(target, "memory_history", "bob") == 3
        assert len(store.history(BOB, other)) == 4


def test_after_forget_and_compact_no_byte_of_any_version_remains(
        tmp_path: pathlib.Path, clock: SetClock) -> None:
    path = tmp_path / "m.db"
    marks = [[0.123456789, 0.987654321, 0.55555555], [0.31415926, 0.27182818, 0.1414213]]
    patterns = [array.array("f", mark).tobytes() for mark in marks]
    with MemoryStore(path, clock=clock, history=True) as store:
        store.remember(ALICE, "user", "Passport QX-1111.", "s", key="id",
                       metadata={"secret": "meta-AAAA"}, vectors=[marks[0]])
        clock.advance(1)
        latest = store.remember(ALICE, "user", "Passport QX-2222.", "s", key="id",
                                metadata={"secret": "meta-BBBB"}, vectors=[marks[1]])
        clock.advance(1)
        store.revise(ALICE, latest, "Passport QX-3333.", "s")
        store.remember(ALICE, "user", "Other note.", "s", vectors=[[1.0, 0.0, 0.0]])
        for secret in (b"QX-1111", b"QX-2222", b"meta-AAAA", b"meta-BBBB", *patterns):
            assert secret in file_bytes(path)
        assert store.forget(ALICE, key="id")
        store.compact()
        for secret in (b"QX-1111", b"QX-2222", b"QX-3333", b"meta-AAAA", b"meta-BBBB",
                       *patterns):
            assert secret not in file_bytes(path)


def test_as_of_recall_by_meaning_reads_each_version_s_own_vector(target: str,
                                                                 clock: SetClock) -> None:
    north, east = [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]
    with MemoryStore(target, clock=clock, history=True) as store:
        store.remember(ALICE, "user", "the way", "s", key="way", vectors=[north])
        clock.advance(60)
        store.remember(ALICE, "user", "the way now", "s", key="way", vectors=[east])
        found = store.recall(ALICE, "", 1, rank="meaning", vector=north, as_of=at(0))
        assert [(r["text"], r["score"]) for r in found] == [("the way", 1.0)]
        found = store.recall(ALICE, "", 1, rank="meaning", vector=north)
        assert [(r["text"], r["score"]) for r in found] == [("the way now", 0.0)]


def test_reindex_with_an_embedder_embeds_the_versions_kept(target: str,
                                                          clock: SetClock) -> None:
    with MemoryStore(target, clock=clock, history=True) as store:
        store.remember(ALICE, "user", "jazz concert tonight", "s", key="plan",
                       vectors=[[1.0, 0.0, 0.0]])
        clock.advance(60)
        store.remember(ALICE, "user", "a quiet hotel", "s", key="plan",
                       vectors=[[0.0, 1.0, 0.0]])
        store.reindex(embedder=ConceptEmbedder())
        found = store.recall(ALICE, "music", 1, rank="meaning", as_of=at(0))
        assert [r["text"] for r in found] == ["jazz concert tonight"] and found[0]["score"] > 0
        assert all("vectors" not in version for record in store.export_user("alice")
                   for version in record.get("history", []))


def test_export_and_import_carry_the_versions(target: str, tmp_path: pathlib.Path,
                                              clock: SetClock) -> None:
    with MemoryStore(target, clock=clock, history=True) as store:
        live = superseded_everywhere(target, store, clock)
        plain = store.remember(ALICE, "user", "Likes jazz.", "s")
        exported = store.export_user("alice")
        assert [len(r.get("history", [])) for r in exported] == [3, 0]
        versions = store.history(ALICE, live)
        store.erase_user("alice")
        store.import_memories(exported)
        (moved, again) = store.memories(ALICE)
        assert again["text"] == "Likes jazz." and again["id"] != plain
        assert [{**v, "id": 0} for v in store.history(ALICE, moved["id"])] == [
            {**v, "id": 0} for v in versions]
        assert store.get(ALICE, key="seat", as_of=at(0.5)) is not None
    # A store that keeps no history refuses versions it would drop.
    with MemoryStore(tmp_path / "plain.db", clock=clock) as plain_store, \
            pytest.raises(MemoryInputError, match="history"):
        plain_store.import_memories(exported)


def test_every_statement_on_history_names_the_user_and_the_task(store: MemoryStore,
                                                                 clock: SetClock) -> None:
    statements: list[str] = []
    store.db.set_trace_callback(statements.append)
    live = superseded_everywhere(store.path, store, clock) \
        if not store.path.startswith("postgresql://") else None
    if live is None:  # on PostgreSQL: the same calls, without the file's count
        store.remember(ALICE, "task", "Seat: aisle.", "s", key="seat")
        live = store.remember(ALICE, "task", "Seat: window.", "s", key="seat")
        live = store.revise(ALICE, live, "Seat: front.", "s")
    store.rename(ALICE, "seat", "seat2")
    store.history(ALICE, 1)
    store.memories(ALICE, as_of=at(0))
    store.recall(ALICE, "seat", as_of=at(0))
    store.forget(ALICE, live)
    store.purge_expired()
    store.erase_user("alice")
    store.db.set_trace_callback(None)
    on_history = [s for s in statements if "memory_history" in s]
    assert len(on_history) >= 8
    for statement in on_history:
        assert TOUCHES_MEMORY_DATA.search(statement), statement
        if statement.startswith("DELETE FROM memory_history WHERE user_id = ") \
                and " AND (task_id" not in statement:  # erase_user, purge_expired: every task
            continue
        assert re.search(r"WHERE user_id = .*\btask_id (IS NULL|=) ", statement), statement


# -- a state machine of keyed writes and as-of reads against a model ------------------


class History(RuleBasedStateMachine):
    """Keyed writes, replaces, revisions, renames and forgets on a clock that ticks a
    minute a write, against a model of each key's versions: an as-of read at any minute
    so far agrees with the model, with history kept (HistoryKept) or not."""

    keep = True

    def __init__(self) -> None:
        super().__init__()
        self.clock = SetClock(T0)
        self.store = MemoryStore(":memory:", clock=self.clock, history=self.keep)
        self.minute = 0
        # Each live key's versions: (key then, text, from minute, to minute or None);
        # a forgotten key is gone, past and all.
        self.versions: dict[str, list[tuple[str, str, int, int | None]]] = {}

    def supersede(self, key: str, text: str, new_key: str | None = None) -> None:
        self.minute += 1
        self.clock.at = at(self.minute)
        held = self.versions.pop(key, [])
        if held:
            held[-1] = (*held[-1][:3], self.minute)
        self.versions[new_key or key] = [*held, (new_key or key, text, self.minute, None)]

    @rule(key=st.sampled_from("abc"), text=st.sampled_from(["tea", "coffee", "juice"]))
    def write(self, key: str, text: str) -> None:
        self.supersede(key, f"{key} {text}")
        self.store.remember(ALICE, "user", f"{key} {text}", "s", key=key)

    @precondition(lambda self: self.versions)
    @rule(data=st.data())
    def revise(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(self.versions)))
        found = self.store.get(ALICE, key=key)
        assert found is not None
        self.supersede(key, found["text"] + "!")
        assert self.store.revise(ALICE, found["id"], found["text"] + "!", "s") is not None

    @precondition(lambda self: self.versions)
    @rule(data=st.data(), new_key=st.sampled_from("abcd"))
    def rename(self, data: st.DataObject, new_key: str) -> None:
        key = data.draw(st.sampled_from(sorted(self.versions)))
        if new_key in self.versions:
            return  # the new key is held (or is the key itself)
        found = self.store.get(ALICE, key=key)
        assert found is not None
        self.supersede(key, found["text"], new_key)
        assert self.store.rename(ALICE, key, new_key) == found["id"]

    @precondition(lambda self: self.versions)
    @rule(data=st.data())
    def forget(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(self.versions)))
        self.minute += 1
        self.clock.at = at(self.minute)
        del self.versions[key]
        assert self.store.forget(ALICE, key=key)

    def expected(self, minute: int) -> list[tuple[str, str]]:
        """The (key, text) pairs live at `minute`, as the store should read them."""
        return sorted((key, text) for versions in self.versions.values()
                      for key, text, start, end in (versions if self.keep else versions[-1:])
                      if start <= minute and (end is None or minute < end))

    @rule(data=st.data())
    def read_as_of(self, data: st.DataObject) -> None:
        minute = data.draw(st.integers(0, self.minute))
        found = self.store.memories(ALICE, as_of=at(minute))
        assert sorted((m["key"], m["text"]) for m in found) == self.expected(minute)

    @invariant()
    def the_live_memories_and_their_histories_agree(self) -> None:
        assert sorted((m["key"], m["text"]) for m in self.store.memories(ALICE)) == \
            self.expected(self.minute)
        for key, versions in self.versions.items():
            assert [(v["key"], v["text"]) for v in self.store.history(ALICE, key=key)] == [
                (then, text) for then, text, _, _ in (versions if self.keep else versions[-1:])]

    def teardown(self) -> None:
        self.store.close()


class HistoryNotKept(History):
    keep = False


TestHistoryKept = History.TestCase
TestHistoryNotKept = HistoryNotKept.TestCase
for _case in (TestHistoryKept, TestHistoryNotKept):
    _case.settings = settings(max_examples=40, stateful_step_count=15, deadline=None)
