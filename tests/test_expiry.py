"""Memories that expire (ttl) and memories that are corrected (revise)."""

from __future__ import annotations

import json
import pathlib
import sqlite3
from typing import Any

import pytest

import memory
from helpers import ALICE, ALICE_WORK, BOB, WORD_RANKS, SetClock, cli, file_bytes, row_count
from memory import MemoryInputError, MemoryStore, fixed_clock
from model import index_problems, index_problems_at, transactions_left


@pytest.mark.parametrize("ttl", [0, -1, float("nan"), float("inf"), True, "60", [60]])
def test_a_bad_ttl_is_refused(store: MemoryStore, ttl: Any) -> None:
    with pytest.raises(MemoryInputError, match="ttl"):
        store.remember(ALICE, "user", "text", "s", ttl=ttl)
    with pytest.raises(MemoryInputError, match="item 0: ttl"):
        store.remember_many([(ALICE, "user", "text", "s", ttl)])
    assert store.count(ALICE) == 0


def test_a_ttl_past_the_year_9999_is_refused(store: MemoryStore) -> None:
    with pytest.raises(MemoryInputError, match="9999"):
        store.remember(ALICE, "user", "text", "s", ttl=1e15)
    assert transactions_left(store) == 0 and store.count(ALICE) == 0


def test_a_ttl_needs_a_reading_with_a_utc_offset(tmp_path: pathlib.Path) -> None:
    naive = SetClock("2026-10-20T09:00:00")
    with MemoryStore(tmp_path / "m.db", clock=naive) as store:
        store.remember(ALICE, "user", "without a ttl, a reading without offset is fine", "s")
        with pytest.raises(MemoryInputError, match="no UTC offset"):
            store.remember(ALICE, "user", "expiring", "s", ttl=60)
        assert store.count(ALICE) == 1


def test_live_until_the_instant_it_expires(store: MemoryStore, clock: SetClock) -> None:
    memory_id = store.remember(ALICE, "task", "The hotel is booked for the 14th.", "s", ttl=60)
    assert store.memories(ALICE)[0]["expires_at"] == "2026-10-20T09:01:00.000000+00:00"
    clock.at = "2026-10-20T10:00:59.999+01:00"  # the same instant as 09:00:59.999 UTC
    assert store.count(ALICE) == 1 and store.recall(ALICE, "hotel")[0]["id"] == memory_id
    clock.at = "2026-10-20T09:01:00+00:00"  # now >= expires_at: not live
    assert store.count(ALICE) == 0
    assert store.recall(ALICE, "hotel") == [] and store.memories(ALICE) == []
    assert store.recall(ALICE, "hotel", rank="idf") == []
    assert store.forget(ALICE, memory_id) is False
    assert store.revise(ALICE, memory_id, "Booked for the 15th.", "s") is None
    assert store.forget_source(ALICE, "s") == 0
    exported = store.export_user("alice")  # still stored until purged: listed here
    assert [(r["id"], r["expires_at"]) for r in exported] == \
        [(memory_id, "2026-10-20T09:01:00.000000+00:00")]


def test_recall_fills_its_limit_with_live_memories(store: MemoryStore, clock: SetClock) -> None:
    live = store.remember_many([(ALICE, "user", f"hotel note {n}", "s") for n in range(5)])
    store.remember_many([(ALICE, "user", f"hotel note {n}", "s", 30) for n in range(5)])
    clock.at = "2026-10-20T09:00:30+00:00"
    for rank in WORD_RANKS:
        assert [r["id"] for r in store.recall(ALICE, "hotel", 5, rank=rank)] == live[::-1]


def test_idf_counts_live_memories_only(tmp_path: pathlib.Path, clock: SetClock) -> None:
    with MemoryStore(tmp_path / "a.db", clock=clock) as with_expired, \
            MemoryStore(tmp_path / "b.db", clock=clock) as without:
        for store, extra in ((with_expired, 30), (without, None)):
            store.remember_many([(ALICE, "user", "jazz and tea", "s"),
                                 (ALICE, "user", "tea only", "s")])
            if extra:
                store.remember_many([(ALICE, "user", "tea jazz tea", "s", extra)] * 4)
        clock.at = "2026-10-20T09:00:30+00:00"
        assert with_expired.recall(ALICE, "jazz tea", 5, rank="idf") == \
            without.recall(ALICE, "jazz tea", 5, rank="idf")


def test_purge_expired_deletes_them_and_their_text(tmp_path: pathlib.Path,
                                                   clock: SetClock) -> None:
    path = tmp_path / "memory.db"
    with MemoryStore(path, clock=clock) as store:
        store.remember_many([(ALICE, "user", f"kept note {n}", "s") for n in range(20)])
        store.remember(ALICE, "task", "Door code 4471-quokka until checkout.", "turn-9", ttl=60)
        store.remember(BOB, "user", "Bob's expiring zebra note.", "turn-2", ttl=120)
        clock.at = "2026-10-20T09:01:00+00:00"
        assert store.purge_expired() == 1  # Bob's lives on
        assert index_problems_at(store.path) == []
        store.compact()
        assert b"4471-quokka" not in file_bytes(path)
        assert b"zebra" in file_bytes(path)
        clock.at = "2026-10-20T09:05:00+00:00"
        assert store.purge_expired() == 1
        assert store.export_user("bob") == [] and store.count(ALICE) == 20
    assert row_count(path) == 20


def test_a_write_purges_its_scopes_expired_memories_first(store: MemoryStore,
                                                          clock: SetClock) -> None:
    many = memory.PURGE_PER_WRITE + 10
    store.remember_many([(ALICE, "user", f"old note {n}", "s", 30) for n in range(many)])
    store.remember_many([(BOB, "user", "bob's own", "s", 30), (ALICE_WORK, "task", "w", "s", 30)])
    clock.at = "2026-10-20T09:00:30+00:00"
    store.remember(ALICE, "task", "a new memory", "s")
    stored = store.export_user("alice")
    # A bounded number of the scope's expired memories went; nothing outside the scope.
    assert len(stored) == many - memory.PURGE_PER_WRITE + 2
    assert any(r["task"] == "work" for r in stored)
    assert len(store.export_user("bob")) == 1
    assert index_problems_at(store.path) == []


def test_import_keeps_expires_at(store: MemoryStore, clock: SetClock) -> None:
    store.remember(ALICE, "user", "expiring", "s", ttl=60)
    store.remember(ALICE, "user", "lasting", "s")
    records = store.export_user("alice")
    with MemoryStore(":memory:", clock=clock) as other:
        other.import_memories(records)
        assert [r["expires_at"] for r in other.export_user("alice")] == \
            ["2026-10-20T09:01:00.000000+00:00", None]
        clock.at = "2026-10-20T09:02:00+00:00"
        # An expired record is imported, and is not live.
        other.import_memories([{**records[0], "created_at": "2026-10-20T08:00:00+00:00"}])
        assert other.count(ALICE) == 1
        assert len(other.export_user("alice")) == 2  # the write purged the first
    old = {k: v for k, v in records[1].items() if k != "expires_at"}  # older exports
    with MemoryStore(":memory:", clock=clock) as other:
        other.import_memories([old])
        assert other.export_user("alice")[0]["expires_at"] is None
    with pytest.raises(MemoryInputError, match="expires_at has no UTC offset"):
        store.import_memories([{**records[0], "expires_at": "2026-10-21T00:00:00"}])


def test_fixed_clock_reads_without_a_tick() -> None:
    clock = fixed_clock()
    assert clock.now() == "2026-10-20T09:00:00+00:00"
    assert clock() == "2026-10-20T09:00:00+00:00"
    assert clock() == "2026-10-20T09:01:00+00:00"
    assert clock.now() == clock.now() == "2026-10-20T09:01:00+00:00"
    assert clock() == "2026-10-20T09:02:00+00:00"


def test_reads_do_not_tick_a_fixed_clock(tmp_path: pathlib.Path) -> None:
    clock = fixed_clock()
    with MemoryStore(tmp_path / "m.db", clock=clock) as store:
        store.remember(ALICE, "user", "one", "s", ttl=90)
        for _ in range(5):
            store.recall(ALICE, "one")
            store.count(ALICE)
            store.memories(ALICE)
        assert store.remember(ALICE, "user", "two", "s") == 2
        assert [m["created_at"] for m in store.memories(ALICE)] == \
            ["2026-10-20T09:00:00+00:00", "2026-10-20T09:01:00+00:00"]


def test_a_naive_clock_cannot_judge_expiring_memories(tmp_path: pathlib.Path,
                                                      clock: SetClock) -> None:
    path = tmp_path / "m.db"
    with MemoryStore(path, clock=clock) as store:
        store.remember(ALICE, "user", "expiring", "s", ttl=60)
        store.remember(BOB, "user", "lasting", "s")
    with MemoryStore(path, clock=SetClock("2026-10-20T09:00:00")) as store:
        assert store.count(BOB) == 1  # nothing in Bob's scope expires
        with pytest.raises(MemoryInputError, match="no UTC offset"):
            store.count(ALICE)
        with pytest.raises(MemoryInputError, match="no UTC offset"):
            store.purge_expired()


def test_revise_replaces_a_memory_in_one_step(tmp_path: pathlib.Path, clock: SetClock) -> None:
    path = tmp_path / "memory.db"
    with MemoryStore(path, clock=clock) as store:
        old = store.remember(ALICE, "task", "Alice eats no fish, ever-zq1.", "turn-1")
        newer = store.remember(ALICE, "user", "Alice likes jazz.", "turn-2")
        clock.at = "2026-10-20T09:05:00+00:00"
        revised = store.revise(ALICE, old, "Alice eats fish now.", "turn-7", ttl=3600)
        assert revised is not None and revised > newer
        [after] = [m for m in store.memories(ALICE) if m["id"] == revised]
        assert (after["level"], after["text"], after["source"], after["created_at"],
                after["expires_at"]) == ("task", "Alice eats fish now.", "turn-7",
                                         "2026-10-20T09:05:00+00:00",
                                         "2026-10-20T10:05:00.000000+00:00")
        assert store.recall(ALICE, "fish")[0]["id"] == revised
        assert old not in {m["id"] for m in store.export_user("alice")}
        for scope, memory_id in ((ALICE_WORK, revised), (BOB, newer), (ALICE, 999)):
            assert store.revise(scope, memory_id, "nope", "s") is None
        assert store.count(ALICE) == 2 and index_problems(store.db) == []
        store.compact()
    assert b"ever-zq1" not in file_bytes(path)


def test_revise_keeps_the_expiry_unless_given_a_ttl(store: MemoryStore, clock: SetClock) -> None:
    """A correction is the same fact, better said: it expires when the old memory did,
    unless `ttl` says otherwise (counted from the correction)."""
    hotel = store.remember(ALICE, "task", "Hotel holds the room.", "s", ttl=3600)
    forever = store.remember(ALICE, "user", "Alice likes jazz.", "s")
    clock.at = "2026-10-20T09:30:00+00:00"
    kept = store.revise(ALICE, hotel, "Hotel holds the room till noon.", "fix")
    stays = store.revise(ALICE, forever, "Alice loves jazz.", "fix")
    assert kept is not None and stays is not None
    expiry = {m["id"]: m["expires_at"] for m in store.memories(ALICE)}
    assert expiry == {kept: "2026-10-20T10:00:00.000000+00:00", stays: None}
    later = store.revise(ALICE, kept, "Hotel holds the room till one.", "fix", ttl=60)
    assert later is not None
    assert store.get(ALICE, later)["expires_at"] == (  # type: ignore[index]
        "2026-10-20T09:31:00.000000+00:00")


def test_revise_is_all_or_nothing(store: MemoryStore) -> None:
    old = store.remember(ALICE, "user", "Alice eats no fish.", "turn-1")
    with pytest.raises(MemoryInputError):
        store.revise(ALICE, old, "", "turn-7")
    with pytest.raises(MemoryInputError):
        store.revise(ALICE, old, "text", "turn-7", ttl=-5)
    store.clock = lambda: "not a time"
    with pytest.raises(MemoryInputError, match="clock reading"):
        store.revise(ALICE, old, "Alice eats fish now.", "turn-7")
    assert [m["text"] for m in store.export_user("alice")] == ["Alice eats no fish."]


def write_version_3(path: pathlib.Path) -> None:
    db = sqlite3.connect(path)
    for statement in memory.SQLITE_LAYOUTS[1].statements:
        db.execute(statement)
    db.execute(memory._SQL_SET_MATCHING, ("exact",))
    db.execute("INSERT INTO memories (user_id, task_id, text, source, created_at)"
               " VALUES ('alice', NULL, 'Alice likes tea.', 's', '2026-10-20T09:00:00+00:00')")
    db.execute("INSERT INTO memory_counts VALUES ('alice', '', 1)")
    memory._index_words(memory._SqliteEngine(db, str(path)),
                        [(1, "alice", None, "Alice likes tea.", "2026-10-20T09:00:00+00:00")],
                        memory._RULES["exact"], 0)
    db.execute("PRAGMA user_version = 3")
    db.commit()
    db.close()


def test_version_3_file_upgrades_to_expiry(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "v3.db"
    write_version_3(path)
    with MemoryStore(path) as store:
        assert store.recall(ALICE, "tea")[0]["text"] == "Alice likes tea."
        assert store.export_user("alice")[0]["expires_at"] is None
        store.remember(ALICE, "user", "Alice likes jazz.", "s", ttl=60)
    fresh = tmp_path / "fresh.db"
    MemoryStore(fresh).close()

    def layout(file: pathlib.Path) -> list[Any]:
        db = sqlite3.connect(file)
        try:
            return sorted(db.execute("SELECT type, name, sql FROM sqlite_master"))
        finally:
            db.close()

    assert layout(path) == layout(fresh)



def test_command_line_revise_and_purge(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "m.db"
    with MemoryStore(path, clock=SetClock("2020-01-01T00:00:00+00:00")) as store:
        old = store.remember(ALICE, "user", "Alice eats no fish.", "turn-1")
        store.remember(ALICE, "user", "long expired", "turn-2", ttl=1)
    done = cli("revise", str(path), "--user", "alice", "--task", "trip", str(old),
               "Alice eats fish now.", "--source", "turn-7", "--ttl", "86400000")
    assert done.returncode == 0, done.stderr
    missing = cli("revise", str(path), "--user", "bob", "--task", "trip", str(old), "x",
                  "--source", "s")
    assert missing.returncode == 1 and missing.stderr.count("\n") == 1
    assert cli("revise", str(path), "--user", "alice", "--task", "trip", "1", "x", "--source",
               "s", "--ttl", "-3").returncode == 2
    purged = cli("purge", str(path))
    assert purged.returncode == 0 and "purged 0" in purged.stdout  # the revise purged it
    listed = [json.loads(line) for line in cli("export", str(path), "--user", "alice").stdout
              .splitlines()]
    assert [(r["text"], r["source"]) for r in listed] == [("Alice eats fish now.", "turn-7")]


# -- renewing ----------------------------------------------------------------------------

def test_renew_moves_the_expiry_of_live_memories_and_nothing_else(
        store: MemoryStore, clock: SetClock) -> None:
    kept = store.remember(ALICE, "user", "The hotel is booked.", "s", ttl=60, key="hotel",
                          metadata={"n": 1})
    forever = store.remember(ALICE_WORK, "task", "The train leaves at nine.", "s", ttl=60)
    before = store.get(ALICE, kept)
    clock.advance(30)
    assert store.renew(ALICE, [kept], 60) == 1
    assert store.renew(ALICE_WORK, [forever, forever], None) == 1
    clock.advance(59)  # 89 s after the write: live only because it was renewed
    renewed = store.get(ALICE, kept)
    assert renewed is not None and before is not None
    assert renewed["expires_at"] == "2026-10-20T09:01:30.000000+00:00"
    assert {k: v for k, v in renewed.items() if k != "expires_at"} == \
        {k: v for k, v in before.items() if k != "expires_at"}
    clock.advance(1)
    assert store.get(ALICE, kept) is None and store.renew(ALICE, [kept], 60) == 0
    clock.advance(10**6)
    assert [m["id"] for m in store.memories(ALICE_WORK)] == [forever]
    assert store.memories(ALICE_WORK)[0]["expires_at"] is None


def test_renew_sees_only_the_scope(store: MemoryStore, clock: SetClock) -> None:
    mine = store.remember(ALICE_WORK, "task", "Alice's task note.", "s", ttl=60)
    theirs = store.remember(BOB, "user", "Bob's note.", "s", ttl=60)
    # Another user's id, another task's: not renewed, not counted, left as they are.
    assert store.renew(ALICE, [mine, theirs], None) == 0
    assert store.renew(BOB, [mine], None) == 0
    clock.advance(61)
    assert store.count(ALICE_WORK) == 0 and store.count(BOB) == 0


@pytest.mark.parametrize("arguments", [
    ([1], 0), ([1], -5), ([1], float("nan")), ([1], "60"), ([1], True), (1, 60), ("1", 60),
    ([True], 60), (["1"], 60), ([0], 60), ([2**63], 60)])
def test_a_bad_renew_is_refused_and_changes_nothing(
        store: MemoryStore, clock: SetClock, arguments: tuple[Any, Any]) -> None:
    memory_id = store.remember(ALICE, "user", "The hotel is booked.", "s", ttl=60)
    ids, ttl = arguments
    with pytest.raises(MemoryInputError, match="ttl|memory_id"):
        store.renew(ALICE, ids, ttl)
    assert transactions_left(store) == 0
    assert store.memories(ALICE)[0]["expires_at"] == "2026-10-20T09:01:00.000000+00:00"
    assert store.get(ALICE, memory_id) is not None
