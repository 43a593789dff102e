"""Valid time: a memory's window in the world (valid_from, valid_to), kept in one UTC form;
reads give what is valid now unless given valid_at (a time, or "any"); a keyed write from a
later time keeps the holder as an earlier holder of its key, its window closed; revise ends
a window and keeps the memory; bad windows are refused with nothing written; the window
travels in export and import and goes with the memory. Both engines."""

from __future__ import annotations

import json
import pathlib
import random
import re
from collections.abc import Callable
from typing import Any, NamedTuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import memory
from helpers import (
    ALICE,
    ALICE_WORK,
    BOB,
    PG_BEFORE_VALIDITY,
    TOUCHES_MEMORY_DATA,
    SetClock,
    cli,
    file_bytes,
)
from memory import MemoryInputError, MemoryStore, Scope, VersionConflict
from model import owner_connection

LISBON_FROM = "2019-03-01T00:00:00+00:00"
MOVED = "2025-06-01T00:00:00+01:00"  # 2025-05-31T23:00Z
JANUARY = "2025-01-15T12:00:00+00:00"


def utc(reading: str) -> str:
    """A time as the store keeps a window's end: UTC, to the microsecond."""
    return memory._instant("t", reading)


def texts(found: list[Any]) -> list[str]:
    return [memory["text"] for memory in found]


def moved_to_porto(store: MemoryStore, clock: SetClock, scope: Scope = ALICE,
                   level: memory.Level = "user") -> tuple[int, int]:
    lisbon = store.remember(scope, level, "Alice lives in Lisbon.", "chat/1", key="home",
                            valid_from=LISBON_FROM)
    clock.advance(60)
    porto = store.remember(scope, level, "Alice lives in Porto.", "chat/2", key="home",
                           valid_from=MOVED)
    return lisbon, porto


def test_a_window_is_kept_as_the_utc_instants_it_names(store: MemoryStore) -> None:
    kept = store.remember(ALICE, "user", "Alice works in Braga.", "s",
                          valid_from="2024-02-01T10:00:00+02:00",
                          valid_to="2024-09-30T18:00:00.5-04:00")
    plain = store.remember(ALICE, "user", "Alice likes jazz.", "s")
    found = store.get(ALICE, kept, valid_at="any")
    assert found is not None
    assert (found["valid_from"], found["valid_to"]) == (
        "2024-02-01T08:00:00.000000+00:00", "2024-09-30T22:00:00.500000+00:00")
    assert "valid_from" not in cast_memory(store.get(ALICE, plain))  # no window: as before
    assert store.get(ALICE, kept) is None  # its window closed in 2024


def cast_memory(found: memory.Memory | None) -> memory.Memory:
    assert found is not None
    return found


def test_reads_give_what_is_valid_now_then_or_whenever(store: MemoryStore,
                                                       clock: SetClock) -> None:
    lisbon, porto = moved_to_porto(store, clock)
    future = store.remember(ALICE, "task", "Alice will live in Faro.", "chat/3",
                            valid_from="2030-01-01T00:00:00+00:00")
    question = "where does Alice live"
    now = {"get": store.get(ALICE, lisbon), "by key": store.get(ALICE, key="home"),
           "recall": texts(store.recall(ALICE, question, 5)),
           "memories": [m["id"] for m in store.memories(ALICE)],
           "keys": texts(store.memories(ALICE, key_prefix="ho")), "count": store.count(ALICE),
           "counted by key": store.count(ALICE, key_prefix="ho"),
           "newest": [m["id"] for m in store.memories(ALICE, newest_first=True, limit=5)]}
    assert now == {"get": None, "by key": store.get(ALICE, porto),
                   "recall": ["Alice lives in Porto."], "memories": [porto],
                   "keys": ["Alice lives in Porto."], "count": 1, "counted by key": 1,
                   "newest": [porto]}
    assert cast_memory(store.get(ALICE, key="home", valid_at=JANUARY))["id"] == lisbon
    assert texts(store.recall(ALICE, question, 5, valid_at=JANUARY)) == [
        "Alice lives in Lisbon."]
    assert [m["id"] for m in store.memories(ALICE, valid_at=JANUARY)] == [lisbon]
    assert store.count(ALICE, valid_at=JANUARY) == 1
    assert [m["id"] for m in store.memories(ALICE, valid_at="2031-01-01T00:00:00Z")] == [
        porto, future]
    # "any": every memory, whatever its window; the key lists its holder, then the earlier.
    assert [m["id"] for m in store.memories(ALICE, valid_at="any")] == [lisbon, porto, future]
    assert store.count(ALICE, valid_at="any") == 3
    assert [(m["key"], m["id"]) for m in store.memories(ALICE, key_prefix="", valid_at="any")
            ] == [("home", porto), ("home", lisbon)]
    assert store.count(ALICE, key_prefix="home", valid_at="any") == 2
    # A window's start is in it, its end is not.
    assert cast_memory(store.get(ALICE, key="home", valid_at=MOVED))["id"] == porto
    assert cast_memory(store.get(ALICE, key="home", valid_at="2025-05-31T22:59:59.999999Z")
                       )["id"] == lisbon
    # The store's other users see nothing of hers, at any time.
    assert store.memories(BOB, valid_at="any") == [] == store.recall(BOB, question,
                                                                     valid_at="any")


def test_a_keyed_write_from_a_later_time_keeps_the_holder_its_window_closed(
        store: MemoryStore, clock: SetClock) -> None:
    lisbon, porto = moved_to_porto(store, clock)
    kept = cast_memory(store.get(ALICE, lisbon, valid_at="any"))
    assert (kept["key"], kept["version"], kept["valid_to"], kept["updated_at"]) == (
        "home", 2, utc(MOVED), clock.at)
    assert cast_memory(store.get(ALICE, porto))["version"] == 1
    # A write without valid_from, or from the holder's own start, corrects the holder.
    clock.advance(60)
    corrected = store.remember(ALICE, "user", "Alice lives in Porto, Ribeira.", "chat/3",
                               key="home", valid_from=MOVED, if_version=1)
    assert store.get(ALICE, porto, valid_at="any") is None
    assert cast_memory(store.get(ALICE, key="home"))["version"] == 2
    again = store.remember(ALICE, "user", "Alice lives in Porto, Foz.", "chat/4", key="home")
    assert store.get(ALICE, corrected, valid_at="any") is None
    assert "valid_from" not in cast_memory(store.get(ALICE, again))
    assert store.count(ALICE, valid_at="any") == 2  # Lisbon kept through both
    # if_version compares the holder's version; on a conflict nothing is written.
    with pytest.raises(VersionConflict):
        store.remember(ALICE, "user", "Alice lives in Aveiro.", "chat/5", key="home",
                       valid_from="2026-01-01T00:00:00Z", if_version=1)
    assert store.count(ALICE, valid_at="any") == 2
    # An earlier holder that closed already keeps its own end.
    store.remember(BOB, "user", "Bob is in Rome.", "s", key="city",
                   valid_from="2020-01-01T00:00:00Z", valid_to="2021-01-01T00:00:00Z")
    store.remember(BOB, "user", "Bob is in Oslo.", "s", key="city",
                   valid_from="2022-01-01T00:00:00Z")
    rome = store.memories(BOB, key_prefix="city", valid_at="2020-06-01T00:00:00Z")
    assert [(m["text"], m["valid_to"]) for m in rome] == [
        ("Bob is in Rome.", "2021-01-01T00:00:00.000000+00:00")]


def test_rename_moves_the_holder_alone_and_forget_takes_the_key_s_past(
        store: MemoryStore, clock: SetClock) -> None:
    lisbon, porto = moved_to_porto(store, clock)
    assert store.rename(ALICE, "home", "house") == porto
    assert texts(store.memories(ALICE, key_prefix="ho", valid_at="any")) == [
        "Alice lives in Lisbon.", "Alice lives in Porto."]  # "home" then "house"
    assert store.forget(ALICE, key="house")
    assert not store.forget(ALICE, key="house")
    assert store.get(ALICE, key="home") is None  # the earlier holder holds no longer
    assert cast_memory(store.get(ALICE, key="home", valid_at=JANUARY))["id"] == lisbon
    # Forgetting a key forgets what it held before, of the same owner, with it.
    task_lisbon, task_porto = moved_to_porto(store, clock, level="task")
    assert store.forget(ALICE, key="home")
    assert [m["id"] for m in store.memories(ALICE, valid_at="any")] == [lisbon]
    assert store.forget(ALICE, key="home")
    assert store.memories(ALICE, valid_at="any") == []


def test_the_task_s_own_holder_stands_over_the_user_level_s_at_each_time(
        store: MemoryStore, clock: SetClock) -> None:
    user_lisbon, user_porto = moved_to_porto(store, clock)
    task_lisbon, task_porto = moved_to_porto(store, clock, level="task")
    assert cast_memory(store.get(ALICE, key="home"))["id"] == task_porto
    assert cast_memory(store.get(ALICE, key="home", valid_at=JANUARY))["id"] == task_lisbon
    assert cast_memory(store.get(ALICE_WORK, key="home", valid_at=JANUARY))["id"] == user_lisbon
    assert store.forget(ALICE, task_lisbon)
    assert cast_memory(store.get(ALICE, key="home", valid_at=JANUARY))["id"] == user_lisbon
    assert cast_memory(store.get(ALICE_WORK, key="home"))["id"] == user_porto


def test_a_listing_by_key_pages_past_a_key_and_its_earlier_holders(store: MemoryStore,
                                                                   clock: SetClock) -> None:
    lisbon, porto = moved_to_porto(store, clock)
    jazz = store.remember(ALICE, "user", "Alice likes jazz.", "s", key="homework")
    first = store.memories(ALICE, key_prefix="home", limit=1, valid_at="any")
    assert [m["id"] for m in first] == [porto]
    rest = store.memories(ALICE, key_prefix="home", after_key="home", valid_at="any")
    assert [m["id"] for m in rest] == [jazz]  # after "home": after its earlier holders too
    assert lisbon not in [m["id"] for m in rest]


def test_revise_ends_a_window_and_keeps_the_memory(store: MemoryStore,
                                                   clock: SetClock) -> None:
    held = store.remember(ALICE, "user", "Alice's badge opens gate 3.", "s",
                          valid_from="2026-01-01T00:00:00Z", metadata={"kind": "access"})
    clock.advance(60)
    ended = store.revise(ALICE, held, "Alice's badge opens gate 3.", "s2",
                         valid_to="2026-06-01T00:00:00Z")
    assert ended is not None and store.get(ALICE, ended) is None
    kept = cast_memory(store.get(ALICE, ended, valid_at="2026-03-01T00:00:00Z"))
    assert (kept["valid_from"], kept["valid_to"], kept["metadata"]) == (
        utc("2026-01-01T00:00:00Z"), utc("2026-06-01T00:00:00Z"), {"kind": "access"})
    again = store.revise(ALICE, ended, "Alice's badge opens gate 4.", "s3")
    assert again is not None
    assert cast_memory(store.get(ALICE, again, valid_at="any"))["valid_to"] == kept["valid_to"]
    with pytest.raises(MemoryInputError, match="after valid_from"):
        store.revise(ALICE, again, "x", "s", valid_from="2027-01-01T00:00:00Z")
    assert cast_memory(store.get(ALICE, again, valid_at="any"))["text"] == (
        "Alice's badge opens gate 4.")


@pytest.mark.parametrize(("window", "message"), [
    ({"valid_from": "2025-06-01T00:00:00"}, "no UTC offset"),
    ({"valid_to": float("nan")}, "must be a str"),
    ({"valid_from": 1717200000}, "must be a str"),
    ({"valid_from": "June 2025"}, "ISO-8601"),
    ({"valid_from": "2025-06-01T00:00:00Z", "valid_to": "2025-06-01T02:00:00+02:00"},
     "after valid_from"),
    ({"valid_from": "2025-06-02T00:00:00Z", "valid_to": "2025-06-01T00:00:00Z"},
     "after valid_from"),
    ({"valid_to": "9999-12-31T23:59:59-01:00"}, "outside the years"),
])
def test_a_bad_window_is_refused_and_nothing_is_written(store: MemoryStore,
                                                        window: dict[str, Any],
                                                        message: str) -> None:
    with pytest.raises(MemoryInputError, match=message):
        store.remember(ALICE, "user", "Alice lives in Porto.", "s", **window)
    with pytest.raises(MemoryInputError, match=message):
        store.remember_many([{"scope": ALICE, "level": "user", "text": "fine", "source": "s"},
                             {"scope": ALICE, "level": "user", "text": "bad", "source": "s",
                              **window}])
    assert store.count(ALICE, valid_at="any") == 0


@pytest.mark.parametrize("valid_at", ["2025-06-01T00:00:00", "yesterday", 3, ""])
def test_a_bad_valid_at_is_refused_by_every_read(store: MemoryStore, valid_at: Any) -> None:
    reads: list[Callable[[], object]] = [
             lambda: store.get(ALICE, 1, valid_at=valid_at),
             lambda: store.memories(ALICE, valid_at=valid_at),
             lambda: store.memories(ALICE, key_prefix="", valid_at=valid_at),
             lambda: store.recall(ALICE, "porto", valid_at=valid_at),
             lambda: store.count(ALICE, valid_at=valid_at)]
    for read in reads:
        with pytest.raises(MemoryInputError, match="valid_at"):
            read()


def test_where_reaches_the_window_s_ends(store: MemoryStore, clock: SetClock) -> None:
    lisbon, porto = moved_to_porto(store, clock)
    plain = store.remember(ALICE, "user", "Alice likes jazz.", "s")
    def ids(where: dict[str, Any]) -> list[int]:
        return [m["id"] for m in store.memories(ALICE, where=where, valid_at="any")]
    assert ids({"$valid_from": {"$lt": "2020-01-01T00:00:00+00:00"}}) == [lisbon]
    assert ids({"$valid_to": {"$lte": "2025-06-01T00:00:00+01:00"}}) == [lisbon]
    assert ids({"$not": {"$valid_from": {"$gte": "2000-01-01T00:00:00Z"}}}) == [plain]
    assert store.count(ALICE, where={"$valid_from": {"$gt": "2020-01-01T00:00:00Z"}}) == 1
    with pytest.raises(MemoryInputError, match=r"\$valid_to compares an ISO 8601 time"):
        ids({"$valid_to": {"$lt": "2025-06-01"}})
    assert porto in ids({"$key": "home"}) and lisbon in ids({"$key": "home"})


def test_as_of_and_valid_at_together(target: str, clock: SetClock) -> None:
    with MemoryStore(target, clock=clock, history=True) as store:
        before = clock.at
        lisbon, porto = moved_to_porto(store, clock)
        # What the store believed before the move: Lisbon, open, so valid now.
        assert texts([cast_memory(store.get(ALICE, key="home", as_of=before))]) == [
            "Alice lives in Lisbon."]
        assert texts(store.recall(ALICE, "where does Alice live", as_of=before)) == [
            "Alice lives in Lisbon."]
        believed = cast_memory(store.get(ALICE, lisbon, as_of=before))
        assert believed["valid_to"] is None
        # What it believes now about January 2025, and about now.
        assert texts(store.memories(ALICE, as_of=clock.at, valid_at=JANUARY)) == [
            "Alice lives in Lisbon."]
        assert texts(store.memories(ALICE, as_of=clock.at)) == ["Alice lives in Porto."]
        assert texts(store.memories(ALICE, key_prefix="", as_of=clock.at, valid_at="any")) == [
            "Alice lives in Porto.", "Alice lives in Lisbon."]
        assert cast_memory(store.get(ALICE, key="home", as_of=clock.at, valid_at=JANUARY)
                           )["id"] == lisbon
        assert texts(store.recall(ALICE, "where does Alice live", as_of=clock.at,
                                  valid_at=JANUARY)) == ["Alice lives in Lisbon."]
        # History keeps each version's window.
        assert [(v["version"], v["valid_to"]) for v in store.history(ALICE, lisbon)] == [
            (1, None), (2, utc(MOVED))]


def test_export_and_import_carry_windows_and_earlier_holders(target: str,
                                                             clock: SetClock) -> None:
    with MemoryStore(target, clock=clock, history=True) as store:
        lisbon, porto = moved_to_porto(store, clock)
        exported = store.export_user("alice")
        assert [(r["key"], r.get("past_holder"), r["valid_to"]) for r in exported] == [
            ("home", True, utc(MOVED)), ("home", None, None)]
        assert exported[0]["history"][0]["valid_from"] == utc(LISBON_FROM)
        store.erase_user("alice")
        store.import_memories(json.loads(json.dumps(exported)))
        assert texts([cast_memory(store.get(ALICE, key="home", valid_at=JANUARY))]) == [
            "Alice lives in Lisbon."]
        assert texts([cast_memory(store.get(ALICE, key="home"))]) == ["Alice lives in Porto."]
        def unnumbered(records: list[Any]) -> list[Any]:
            return [{**r, "id": 0, "history": [{**v, "id": 0} for v in r.get("history", [])]}
                    for r in records]

        assert unnumbered(store.export_user("alice")) == unnumbered(exported)
        # An earlier holder beside a live holder of its key is no clash; two holders are.
        with pytest.raises(MemoryInputError, match="holds its key"):
            store.import_memories([{**exported[1], "text": "Alice lives in Braga."}])
        with pytest.raises(MemoryInputError, match="past holder"):
            store.import_memories([{**exported[1], "key": None, "past_holder": True}])


def test_an_import_refuses_naive_history_times_naming_the_record(store: MemoryStore,
                                                                 clock: SetClock) -> None:
    record: dict[str, Any] = {
        "user": "alice", "task": None, "level": "user", "text": "Seat: window.", "source": "s",
        "created_at": "2026-10-20T09:01:00+00:00", "key": "seat", "version": 2, "history": [
            {"text": "Seat: aisle.", "source": "s", "created_at": "2026-10-20T09:00:00",
             "superseded_at": "2026-10-20T09:01:00+00:00", "version": 1}]}
    plain = {**record, "history": None, "version": None, "key": None}
    with MemoryStore(store.path, clock=clock, history=True) as keeping:
        for bad in (record,
                    {**record, "history": [{**record["history"][0],
                                            "created_at": "2026-10-20T09:00:00+00:00",
                                            "superseded_at": "2026-10-20T09:01:00"}]},
                    {**record, "created_at": "2026-10-20T09:01:00",
                     "history": [{**record["history"][0],
                                  "created_at": "2026-10-20T09:00:00+00:00"}]}):
            with pytest.raises(MemoryInputError, match="^record 1: .*no UTC offset"):
                keeping.import_memories([plain, bad])
        assert keeping.count(ALICE) == 0
        assert keeping.memories(ALICE, as_of="2026-10-20T09:00:30+00:00") == []


def test_dedupe_keeps_another_window_as_another_fact(store: MemoryStore) -> None:
    first = store.remember(ALICE, "user", "Alice lives in Porto.", "s", dedupe=True,
                           valid_from=MOVED)
    assert store.remember(ALICE, "user", "alice lives in porto.", "s", dedupe=True,
                          valid_from="2025-05-31T23:00:00Z") == first
    other = store.remember(ALICE, "user", "Alice lives in Porto.", "s", dedupe=True)
    assert other != first
    assert store.remember_many([(ALICE, "user", "Alice lives in Porto.", "s")],
                               dedupe=True) == [other]


def test_a_clock_without_an_offset_reads_a_scope_with_windows_only_at_a_time(
        target: str) -> None:
    with MemoryStore(target, clock=lambda: "2026-10-20T09:00:00") as store:
        store.remember(BOB, "user", "Bob likes trains.", "s")
        assert store.count(BOB) == 1  # no window in his scope: read as before
        store.remember(ALICE, "user", "Alice lives in Porto.", "s", valid_from=MOVED)
        with pytest.raises(MemoryInputError, match="valid now is unknown"):
            store.memories(ALICE)
        assert store.count(ALICE, valid_at=JANUARY) == 0
        assert store.count(ALICE, valid_at="any") == 1


def test_every_read_at_a_time_names_the_user_and_the_task(store: MemoryStore,
                                                          clock: SetClock) -> None:
    moved_to_porto(store, clock)
    statements: list[str] = []
    store.db.set_trace_callback(statements.append)
    for valid_at in (None, JANUARY, "any"):
        store.get(ALICE, 1, valid_at=valid_at)
        store.get(ALICE, key="home", valid_at=valid_at)
        store.memories(ALICE, valid_at=valid_at)
        store.memories(ALICE, key_prefix="h", valid_at=valid_at)
        store.memories(ALICE, newest_first=True, limit=1, valid_at=valid_at)
        store.recall(ALICE, "Alice Porto", valid_at=valid_at)
        store.count(ALICE, valid_at=valid_at)
        store.count(ALICE, where={"$valid_from": {"$gt": JANUARY}}, valid_at=valid_at)
    store.remember(ALICE, "user", "Alice lives in Faro.", "s", key="home",
                   valid_from="2026-01-01T00:00:00Z")
    store.db.set_trace_callback(None)
    windows = [s for s in statements if "valid_" in s and TOUCHES_MEMORY_DATA.search(s)]
    assert len(windows) >= 4
    for statement in windows:
        for part in re.split(r"\bUNION\b", statement):
            assert re.search(r"WHERE user_id = .*\btask_id (IS NULL|=|IS) ", part), part


def test_forget_and_compact_leave_no_byte_of_a_window(tmp_path: pathlib.Path,
                                                      clock: SetClock) -> None:
    path = tmp_path / "m.db"
    marks = ("1911-11-11T11:11:11.111111", "1922-02-22T22:22:22.222222")
    with MemoryStore(path, clock=clock, history=True) as store:
        held = store.remember(ALICE, "user", "Alice lived in Coimbra.", "s", key="home",
                              valid_from=f"{marks[0]}+00:00")
        clock.advance(1)
        store.revise(ALICE, held, "Alice lived in Coimbra.", "s", valid_to=f"{marks[1]}+00:00")
        store.remember(ALICE, "user", "Other note.", "s")
        assert all(mark.encode() in file_bytes(path) for mark in marks)
        assert store.forget(ALICE, key="home")
        store.compact()
        assert not any(mark.encode() in file_bytes(path) for mark in marks)


def test_the_command_line_writes_and_reads_windows(tmp_path: pathlib.Path) -> None:
    path = str(tmp_path / "m.db")
    scope = ["--user", "alice", "--task", "moving"]
    assert cli("remember", path, *scope, "--key", "home", "--valid-from", LISBON_FROM,
               "Alice lives in Lisbon.").returncode == 0
    assert cli("remember", path, *scope, "--key", "home", "--valid-from", MOVED,
               "Alice lives in Porto.").returncode == 0

    def listed(*options: str) -> list[str]:
        done = cli("list", path, *scope, *options)
        assert done.returncode == 0, done.stderr
        return [json.loads(line)["text"] for line in done.stdout.splitlines()]

    assert listed() == ["Alice lives in Porto."]
    assert listed("--valid-at", JANUARY) == ["Alice lives in Lisbon."]
    assert listed("--valid-at", "any") == ["Alice lives in Lisbon.", "Alice lives in Porto."]
    found = cli("recall", path, *scope, "where does Alice live", "--valid-at", JANUARY)
    assert [json.loads(line)["text"] for line in found.stdout.splitlines()] == [
        "Alice lives in Lisbon."]
    assert cli("revise", path, *scope, "2", "Alice lives in Porto.", "--source", "s",
               "--valid-to", "2026-01-01T00:00:00Z").returncode == 0
    assert listed() == []
    refused = cli("remember", path, *scope, "--valid-from", "2025-06-01", "x")
    assert refused.returncode != 0 and "valid_from" in refused.stderr
    assert listed("--valid-at", "any") == ["Alice lives in Lisbon.", "Alice lives in Porto."]


def test_a_postgres_database_of_version_13_gains_windows_in_one_transaction(
        url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    postgres = pytest.importorskip("memory_postgres")
    with MemoryStore(url) as store:
        kept = store.remember(ALICE, "user", "Alice likes jazz.", "s", key="music")
    with owner_connection(url) as db:  # version 13, as its release made it
        for statement in PG_BEFORE_VALIDITY:
            db.execute(statement)
        db.execute("UPDATE store_settings SET value = '13' WHERE name = 'schema_version'")

    def failing(db: Any) -> None:
        postgres._add_validity(db)
        raise memory.StoreError("disk full (simulated)")

    steps = [(target, failing if target == 14 else step)
             for target, step in postgres.POSTGRES_MIGRATIONS]
    monkeypatch.setattr(postgres, "POSTGRES_MIGRATIONS", steps)
    with pytest.raises(memory.StoreError, match="simulated"):
        MemoryStore(url)
    monkeypatch.undo()
    with owner_connection(url) as db:  # the step's columns rolled back with it
        assert db.execute("SELECT count(*) FROM information_schema.columns WHERE"
                          " column_name = 'valid_from'").fetchone() == (0,)
    with MemoryStore(url) as store:
        assert store.stats()["schema_version"] == postgres.POSTGRES_SCHEMA_VERSION == 16
        assert "valid_from" not in cast_memory(store.get(ALICE, key="music"))
        store.remember(ALICE, "user", "Alice likes fado.", "s", key="music",
                       valid_from="2026-01-01T00:00:00Z")
        assert cast_memory(store.get(ALICE, kept, valid_at="2025-01-01T00:00:00Z"))[
            "text"] == "Alice likes jazz."


def test_a_page_reads_past_closed_windows_until_it_is_full(store: MemoryStore) -> None:
    closed = {"valid_from": "2020-01-01T00:00:00Z", "valid_to": "2021-01-01T00:00:00Z"}
    ids = store.remember_many([{"scope": ALICE, "level": "user" if n % 2 else "task",
                                "text": f"note {n}", "source": f"talk/{n}",
                                **(closed if 5 <= n < 95 else {})} for n in range(100)])
    valid = ids[:5] + ids[95:]
    assert [m["id"] for m in store.memories(ALICE, limit=8)] == valid[:8]
    assert [m["id"] for m in store.memories(ALICE, after=ids[2], limit=4)] == valid[3:7]
    assert [m["id"] for m in store.memories(ALICE, newest_first=True, limit=8)] == (
        valid[::-1][:8])
    assert [m["id"] for m in store.memories(ALICE, conversation="talk", limit=7)] == valid[:7]
    assert [m["id"] for m in store.memories(ALICE, limit=3, valid_at="2020-06-01T00:00:00Z")
            ] == [*valid[:3]]
    assert [m["id"] for m in store.memories(ALICE, after=ids[4], limit=3,
                                            valid_at="2020-06-01T00:00:00Z")] == ids[5:8]


def test_the_command_line_names_the_line_of_a_record_with_naive_history_times(
        tmp_path: pathlib.Path) -> None:
    path = str(tmp_path / "m.db")
    good = {"user": "alice", "task": None, "level": "user", "text": "Alice likes jazz.",
            "source": "s", "created_at": "2026-10-20T09:00:00+00:00"}
    naive = {**good, "text": "Seat: window.", "key": "seat", "version": 2, "history": [
        {"text": "Seat: aisle.", "source": "s", "created_at": "2026-10-20T08:00:00",
         "superseded_at": "2026-10-20T09:00:00+00:00", "version": 1}]}
    lines = "\n".join(json.dumps(record) for record in (good, naive)) + "\n"
    done = cli("import", path, "--history", "-", stdin=lines)
    assert done.returncode != 0 and "line 2" in done.stderr and "UTC offset" in done.stderr
    assert not pathlib.Path(path).exists()  # checked before the store is made


def test_what_a_read_leaves_out_is_a_range_of_each_window_index_before_statistics(
        url: str) -> None:
    """Before the server has statistics of the table (as a bulk load leaves it), a
    one-sided range of a window index looked like a third of it, and PostgreSQL read the
    scope's every row instead (40 ms at 100,000 memories): each range is bounded on both
    sides, and each is a range of its own index."""
    clock = SetClock()
    with MemoryStore(url, clock=clock) as opened:
        opened.remember_many([{"scope": ALICE, "level": "user" if n % 2 else "task",
                               "text": f"note {n}", "source": "s",
                               **({"valid_from": "2020-01-01T00:00:00Z",
                                   "valid_to": "2030-01-01T00:00:00Z"} if n % 10 == 3 else {})}
                              for n in range(20_000)])
        now = utc(clock.at)
        with opened._snapshot({"alice"}) as db:
            plan = "\n".join(row[0] for row in db.execute(memory._sql("", postgresql=(
                f"EXPLAIN (ANALYZE) {memory._SQL_UNSEEN.form('postgresql')}")),
                ("alice", "trip", now) * 3))
        assert opened.count(ALICE) == 20_000
    assert "memories_valid_to" in plan and "memories_valid_from" in plan, plan
    assert "Rows Removed by Filter" not in plan and "Seq Scan" not in plan, plan


def test_deleting_reads_no_window(store: MemoryStore, clock: SetClock) -> None:
    lisbon, porto = moved_to_porto(store, clock)
    future = store.remember(ALICE, "user", "Alice will live in Faro.", "chat/3",
                            valid_from="2030-01-01T00:00:00Z", metadata={"city": "faro"})
    assert store.forget_where(ALICE, {"city": "faro"}) == 1
    assert store.forget_source(ALICE, "chat/1") == 1  # Lisbon, closed
    assert [m["id"] for m in store.memories(ALICE, valid_at="any")] == [porto]
    assert store.get(ALICE, future, valid_at="any") is None
    assert store.forget_conversation(ALICE, "chat") == 1
    assert store.count(ALICE, valid_at="any") == 0
    assert lisbon not in [r["id"] for r in store.export_user("alice")]


# -- against a model: keyed writes with windows, revisions that end them, forgets -------

ENDS = ["2020-01-01T00:00:00+00:00", "2022-01-01T00:00:00+00:00",
        "2024-01-01T00:00:00+00:00", "2026-01-01T00:00:00+00:00"]
PROBES = ["2019-06-01T00:00:00+00:00", "2021-06-01T00:00:00+00:00",
          "2023-06-01T00:00:00+00:00", "2025-06-01T00:00:00+00:00", None, "any"]
# (what, level, key, start, end): a write, a revision ending a memory, a forget by key.
STEPS = st.lists(st.tuples(st.sampled_from(["write", "write", "write", "end", "forget"]),
                           st.sampled_from(["user", "task"]),
                           st.sampled_from([None, "a", "b"]),
                           st.sampled_from([None, 0, 1, 2, 3]),
                           st.sampled_from([None, None, 1, 2, 3])), min_size=1, max_size=14)


class Held(NamedTuple):
    level: str
    key: str | None
    past: bool
    start: str | None
    end: str | None

    def valid_at(self, instant: str | None) -> bool:
        return instant is None or ((self.start is None or self.start <= instant)
                                   and (self.end is None or instant < self.end))


def as_the_model_reads(model: dict[int, Held], scope: Scope, probe: str | None,
                       now: str) -> tuple[list[int], dict[str, int | None]]:
    instant = None if probe == "any" else utc(probe or now)
    seen = {i: held for i, held in model.items()
            if held.level == "user" or scope.task == ALICE.task}
    ids = sorted(i for i, held in seen.items() if held.valid_at(instant))
    by_key: dict[str, int | None] = {}
    for key in ("a", "b"):
        under = [(held.level == "user", held.past, -i if held.past else 0, i)
                 for i, held in seen.items() if held.key == key and held.valid_at(instant)]
        by_key[key] = min(under)[-1] if under else None
    return ids, by_key


def windows_agree_with_a_model(location: str, steps: list[Any]) -> None:
    clock = SetClock()
    model: dict[int, Held] = {}
    with MemoryStore(location, clock=clock, history=True) as store:
        for n, (what, level, key, start_at, end_at) in enumerate(steps):
            clock.advance(60)
            start = None if start_at is None else ENDS[start_at]
            end = None if end_at is None else ENDS[end_at]
            if what == "forget" and key is not None:
                mine = {i for i, held in model.items() if held.key == key and (
                    held.level == "task" if any(h.key == key and h.level == "task"
                                                for h in model.values()) else True)}
                assert store.forget(ALICE, key=key) == bool(mine)
                for i in mine:
                    del model[i]
                continue
            if what == "end" and model:
                target = sorted(model)[n % len(model)]
                old = model[target]
                if end is None or (old.start is not None and utc(end) <= old.start):
                    continue
                revised = store.revise(ALICE, target, f"fact {target} ended", "s", valid_to=end)
                assert revised is not None
                model[revised] = old._replace(end=utc(end))
                del model[target]
                continue
            if start is not None and end is not None and end <= start:
                with pytest.raises(MemoryInputError):
                    store.remember(ALICE, level, f"fact {n}", "s", key=key, valid_from=start,
                                   valid_to=end)
                continue
            new = store.remember(ALICE, level, f"fact {n}", "s", key=key, valid_from=start,
                                 valid_to=end)
            holder = next((i for i, held in model.items() if key is not None and
                           held.key == key and held.level == level and not held.past), None)
            if holder is not None:
                old = model[holder]
                if start is not None and (old.start is None or old.start < start):
                    model[holder] = old._replace(past=True, end=utc(start) if old.end is None
                                                 else min(old.end, utc(start)))
                else:
                    del model[holder]
            model[new] = Held(level, key, False, None if start is None else utc(start),
                              None if end is None else utc(end))
        for scope in (ALICE, ALICE_WORK):
            for probe in PROBES:
                ids, by_key = as_the_model_reads(model, scope, probe, clock.at)
                assert [m["id"] for m in store.memories(scope, valid_at=probe)] == ids
                assert [m["id"] for m in store.memories(scope, limit=2, after=0,
                                                        valid_at=probe)] == ids[:2]
                assert store.count(scope, valid_at=probe) == len(ids)
                for key, expected in by_key.items():
                    found = store.get(scope, key=key, valid_at=probe)
                    assert (None if found is None else found["id"]) == expected, (key, probe)
                    then = store.get(scope, key=key, valid_at=probe, as_of=clock.at)
                    assert (None if then is None else then["id"]) == expected, (key, probe)


@settings(max_examples=60, deadline=None)
@given(steps=STEPS)
def test_windows_and_keyed_moves_agree_with_a_model(steps: list[Any]) -> None:
    windows_agree_with_a_model(":memory:", steps)


def test_windows_and_keyed_moves_agree_with_a_model_on_each_engine(target: str) -> None:
    draw = random.Random(7)
    steps = [(draw.choice(["write", "write", "write", "end", "forget"]),
              draw.choice(["user", "task"]), draw.choice([None, "a", "b"]),
              draw.choice([None, 0, 1, 2, 3]), draw.choice([None, None, 1, 2, 3]))
             for _ in range(40)]
    windows_agree_with_a_model(target, steps)


def test_of_a_key_s_earlier_holders_valid_at_once_the_newest_is_read(
        store: MemoryStore) -> None:
    store.remember_many([(ALICE, "user", f"filler {n}", "s") for n in range(8)])
    first = store.remember(ALICE, "user", "Seat: aisle.", "s", key="seat",
                           valid_from="2019-01-01T00:00:00Z")
    second = store.remember(ALICE, "user", "Seat: window.", "s", key="seat",
                            valid_from="2021-01-01T00:00:00Z")
    store.remember(ALICE, "user", "Seat: front.", "s", key="seat",
                   valid_from="2023-01-01T00:00:00Z", valid_to="2024-01-01T00:00:00Z")
    assert (first, second) == (9, 10)  # their past keys end in ids of 1 and 2 digits
    # Both earlier holders revised to hold until 2030: at 2025 both hold, the holder not.
    aisle = store.revise(ALICE, first, "Seat: aisle.", "s", valid_to="2030-01-01T00:00:00Z")
    window = store.revise(ALICE, second, "Seat: window.", "s", valid_to="2030-01-01T00:00:00Z")
    assert aisle is not None and window is not None and window > aisle
    at = "2025-06-01T00:00:00Z"
    assert cast_memory(store.get(ALICE, key="seat", valid_at=at))["id"] == window
    assert store.forget(ALICE, key="seat")
    assert store.count(ALICE, valid_at="any") == 8
