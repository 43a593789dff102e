"""Files written by the project's own earlier releases open, upgrade and recall the same.

Each fixture in tests/fixtures was written by memory.py as it stood at the commit in its
name (the release that introduced its schema version, and for version 4 also the next
one, which changed its expiry index under the same number), from the same memories; its
.json holds the rows that release stored and what its recall returned.
"""

from __future__ import annotations

import json
import pathlib
import shutil
import sqlite3
from typing import Any
from unittest import mock

import pytest
from embedders import ConceptEmbedder

import memory
from helpers import FIXTURES
from memory import MemoryStore, Scope, fixed_clock

# By version (10 after 9), then by name: version 4's two layouts are in commit order so.
RELEASES = sorted((path.stem for path in FIXTURES.glob("version-*.sqlite3")),
                  key=lambda name: (int(name.split("-")[1]), name))


def release(name: str, folder: pathlib.Path) -> tuple[pathlib.Path, dict[str, Any]]:
    """A copy of the release's file in `folder`, and what the release recorded of it."""
    path = folder / f"{name}.sqlite3"
    shutil.copyfile(FIXTURES / f"{name}.sqlite3", path)
    return path, json.loads((FIXTURES / f"{name}.json").read_text())


def objects(path: pathlib.Path) -> list[tuple[str, str, str]]:
    db = sqlite3.connect(path)
    try:
        return sorted(db.execute("SELECT type, name, sql FROM sqlite_master"))
    finally:
        db.close()


def test_every_layout_a_release_wrote_has_a_fixture() -> None:
    assert len(RELEASES) == len(memory.SQLITE_LAYOUTS)
    assert [int(name.split("-")[1]) for name in RELEASES] == [
        layout.version for layout in memory.SQLITE_LAYOUTS]


@pytest.mark.parametrize("name", RELEASES)
def test_a_file_of_an_earlier_release_upgrades_and_recalls_the_same(
        tmp_path: pathlib.Path, name: str) -> None:
    path, recorded = release(name, tmp_path)
    statements: list[str] = []
    real_connect = sqlite3.connect

    def connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        connection: sqlite3.Connection = real_connect(*args, **kwargs)
        connection.set_trace_callback(statements.append)
        return connection

    with mock.patch.object(sqlite3, "connect", connect):
        store = MemoryStore(path, clock=fixed_clock())
    with store:
        # One transaction: the steps and the version stamp between one BEGIN and COMMIT
        # (none for a file of the current layout).
        upgraded = name != RELEASES[-1]
        assert [s for s in statements if s in ("BEGIN IMMEDIATE", "COMMIT")] == [
            "BEGIN IMMEDIATE", "COMMIT"] * upgraded
        assert store.db.version() == memory.SCHEMA_VERSION
        rows = store.db.execute("SELECT id, user_id, task_id, text, source, created_at,"
                                " expires_at FROM memories ORDER BY id").fetchall()
        assert [list(row[:len(recorded["rows"][0])]) for row in rows] == recorded["rows"]
        for scoped, results in recorded["recall"].items():
            scope = Scope(*scoped.split("/"))
            found = store.recall(scope, recorded["query"], recorded["limit"])
            assert [[r["id"], r["score"]] for r in found] == results
        assert store.check()["ok"]
        new_id = store.remember(Scope("alice", "trip"), "user", "Alice likes jazz.", "s")
        assert new_id == max(row[0] for row in recorded["rows"]) + 1
    fresh = tmp_path / "fresh.sqlite3"
    MemoryStore(fresh).close()
    assert objects(path) == objects(fresh)


@pytest.mark.parametrize("name", RELEASES)
def test_a_failed_upgrade_of_an_earlier_release_changes_nothing(
        tmp_path: pathlib.Path, name: str) -> None:
    path, _ = release(name, tmp_path)
    before = path.read_bytes()
    *earlier, last = memory.MIGRATIONS

    def failing(db: memory._SqliteEngine) -> None:
        last(db)
        raise sqlite3.OperationalError("disk I/O error (simulated)")

    with mock.patch.object(memory, "MIGRATIONS", [*earlier, failing]):
        if name == RELEASES[-1]:  # the current layout: no step runs
            MemoryStore(path).close()
        else:
            with pytest.raises(sqlite3.OperationalError, match="simulated"):
                MemoryStore(path)
            assert path.read_bytes() == before


def test_the_first_layout_of_version_4_is_read_as_it_is_when_read_only(
        tmp_path: pathlib.Path) -> None:
    path, recorded = release("version-4-34098a4", tmp_path)
    before = path.read_bytes()
    with MemoryStore(path, read_only=True, clock=fixed_clock()) as reader:
        found = reader.recall(Scope("bob", "trip"), recorded["query"], recorded["limit"])
        assert [[r["id"], r["score"]] for r in found] == recorded["recall"]["bob/trip"]
    assert path.read_bytes() == before


def test_a_file_from_before_conversations_lists_one_when_read_as_it_is(
        tmp_path: pathlib.Path) -> None:
    path, recorded = release("version-5-a3b9158", tmp_path)
    before = path.read_bytes()
    with MemoryStore(path, read_only=True) as reader:
        alice = Scope("alice", "trip")
        every = reader.memories(alice)
        for conversation in ("onboarding", "trip", "nowhere"):
            assert reader.memories(alice, conversation=conversation) == [
                m for m in every if m["source"].rpartition("/")[0] == conversation]
        assert reader.memories(alice, conversation="onboarding")  # not all empty
    assert path.read_bytes() == before
    with MemoryStore(path) as upgraded:  # the column, once upgraded: the same answers
        assert upgraded.memories(alice, conversation="trip") == [
            m for m in every if m["source"].startswith("trip/")]


def test_a_version_8_file_keeps_its_keys_metadata_and_what_each_was_embedded_from(
        tmp_path: pathlib.Path) -> None:
    path, recorded = release("version-8-055a6a4", tmp_path)
    alice = Scope("alice", "trip")
    with MemoryStore(path, read_only=True) as reader:  # a memory before versions: 1
        assert reader.get(alice, key="seat") == {**recorded["keyed"], "version": 1}
        assert [m["id"] for m in reader.memories(alice, where={"kind": "preference"})] == [
            recorded["keyed"]["id"]]
        (exported,) = [r for r in reader.export_user("alice") if "key" in r]
        assert exported["embed"] == ["aisle seat", "long flights"]


def test_a_version_11_file_keeps_its_versions_and_a_version_10_file_reads_them_as_1(
        tmp_path: pathlib.Path) -> None:
    path, recorded = release("version-11-a822b79", tmp_path)
    dana = Scope("dana", "trip")
    with MemoryStore(path) as store:
        assert store.get(dana, key="seat") == recorded["keyed"]  # at version 3
        with pytest.raises(memory.VersionConflict, match="at version 3, not version 2"):
            store.remember(dana, "task", "Dana's seat: window.", "s", key="seat", if_version=2)
        store.remember(dana, "task", "Dana's seat: window.", "s", key="seat", if_version=3)
        assert store.get(dana, key="seat")["version"] == 4  # type: ignore[index]
    path, _ = release("version-10-764d6da", tmp_path)
    alice = Scope("alice", "trip")
    with MemoryStore(path, read_only=True) as reader:
        (keyed,) = [m for m in reader.memories(alice) if "key" in m]
        assert keyed["version"] == 1
    with MemoryStore(path) as store:  # upgraded: its keyed memories at 1, then 2
        store.remember(alice, "user", "Alice's seat: window.", "s", key=keyed["key"],
                       if_version=1)
        assert store.get(alice, key=keyed["key"])["version"] == 2  # type: ignore[index]


def test_a_version_12_file_keeps_its_receipts_and_an_older_one_gains_them(
        tmp_path: pathlib.Path) -> None:
    path, recorded = release("version-12-bc85fd5", tmp_path)
    erin = Scope("erin", "trip")
    clock = fixed_clock("2026-12-06T14:30:00+00:00")
    with MemoryStore(path, clock=clock) as store:
        assert store.operation(erin, "turn-1")["result"] == recorded["receipt"][  # type: ignore[index]
            "result"]
        # That release digested a row's whole tuple, which has grown since: the call made
        # again is another one (its receipts live a day; the digest is stable from here,
        # test_operations.py::test_a_receipt_s_digest_is_of_the_arguments_given_by_name).
        with pytest.raises(memory.OperationConflict):
            store.remember(erin, "task", "Erin's seat: aisle.", "trip/turn-1", key="seat",
                           operation="turn-1")
        assert store.count(erin) == 1
    path, _ = release("version-11-a822b79", tmp_path)
    with MemoryStore(path, read_only=True) as reader:  # read as it is: no receipts
        assert reader.operation(erin, "turn-1") is None
    with MemoryStore(path, clock=clock) as store:
        kept = store.remember(erin, "task", "Erin's seat.", "s", operation="op")
        assert store.operation(erin, "op")["result"] == kept  # type: ignore[index]


def test_a_file_from_before_keys_reads_as_memories_without_any_when_read_only(
        tmp_path: pathlib.Path) -> None:
    path, recorded = release("version-7-d54e473", tmp_path)
    before = path.read_bytes()
    alice = Scope("alice", "trip")
    with MemoryStore(path, read_only=True) as reader:
        every = reader.memories(alice)
        assert every and all("key" not in memory for memory in every)
        assert reader.get(alice, key="seat") is None
        assert reader.memories(alice, where={"kind": "preference"}) == []
        assert reader.memories(alice, where={"kind": {"$ne": "preference"}}) == every
        assert reader.count(alice, where={"kind": {"$gt": "a"}}) == 0
        assert reader.memories(alice, newest_first=True) == every[::-1]
    assert path.read_bytes() == before


def test_a_version_9_file_recalls_from_its_sealed_blocks_as_its_release_did(
        tmp_path: pathlib.Path) -> None:
    """Its release sealed blocks of two vectors and dropped one by a forget: past the kept
    budget (read from the blocks and the rows beside them) it recalls by meaning as that
    release did, and its blocks are the ones the release wrote."""
    path, recorded = release("version-9-86fad48", tmp_path)
    with mock.patch.object(memory, "KEPT_BYTES", 1), \
            MemoryStore(path, read_only=True, embedder=ConceptEmbedder()) as reader:
        assert [list(row) for row in reader.db.execute(
            "SELECT user_id, task_id, first_id, last_id, after_id FROM memory_vector_blocks"
            " ORDER BY first_id")] == recorded["blocks"]
        for scoped, expected in recorded["meaning"].items():
            found = reader.recall(Scope(*scoped.split("/")), recorded["query"],
                                  recorded["limit"], rank="meaning")
            assert [r["id"] for r in found] == expected


def test_a_version_13_file_keeps_its_history_and_an_older_one_gains_the_table(
        tmp_path: pathlib.Path) -> None:
    path, recorded = release("version-13-478f8ce", tmp_path)
    dana = Scope("dana", "trip")
    with MemoryStore(path, read_only=True, embedder=ConceptEmbedder()) as reader:
        assert reader.stats()["history"] is True
        assert reader.history(dana, key="seat") == recorded["history"]
        for when, texts in recorded["as_of"].items():
            assert [m["text"] for m in reader.memories(dana, key_prefix="", as_of=when)] == texts
    with MemoryStore(path, embedder=ConceptEmbedder()) as store:  # forgotten: no past
        assert store.forget(dana, key="seat")
        assert store.db.execute("SELECT count(*) FROM memory_history").fetchone() == (0,)
    path, _ = release("version-12-bc85fd5", tmp_path)
    with MemoryStore(path, read_only=True) as reader:  # read as it is: no history
        (only,) = reader.history(dana, key="seat")
        assert only["superseded_at"] is None and not reader.stats()["history"]
    with MemoryStore(path, history=True) as store:  # upgraded, it keeps them
        store.remember(dana, "task", "Dana's seat: front.", "s", key="seat")
        assert [v["version"] for v in store.history(dana, key="seat")] == [3, 4]


def test_a_version_15_file_reads_its_windows_and_an_older_one_reads_none(
        tmp_path: pathlib.Path) -> None:
    path, recorded = release("version-15-7b4e0a8", tmp_path)
    frank = Scope("frank", "trip")
    with MemoryStore(path, read_only=True) as reader:
        for when, texts in recorded["valid"].items():
            assert [m["text"] for m in reader.memories(frank, valid_at=when)] == texts
        for when, text in recorded["valid_keyed"].items():
            found = reader.get(frank, key="home", valid_at=when)
            assert found is not None and found["text"] == text
    path, _ = release("version-14-234b111", tmp_path)
    with MemoryStore(path, read_only=True) as reader:  # read as it is: no window
        dana = Scope("dana", "trip")
        every = reader.memories(dana, valid_at="any")
        assert every and every == reader.memories(dana) == reader.memories(
            dana, valid_at="1999-01-01T00:00:00+00:00")
        assert not any("valid_from" in m for m in every)
        assert reader.history(dana, key="seat")[0]["superseded_at"] is not None


def test_a_version_16_file_recalls_as_of_a_time_as_its_release_did_and_a_15_one_alike(
        tmp_path: pathlib.Path) -> None:
    """Recalls as of a time read what changed since from layout 16's indexes; a file of
    layout 15 read as it is has none of them, and reads the same (its scope whole)."""
    path, recorded = release("version-16-d3c04fc", tmp_path)
    with MemoryStore(path, read_only=True) as reader:
        for scoped, times in recorded["recall_as_of"].items():
            for when, results in times.items():
                found = reader.recall(Scope(*scoped.split("/")),
                                      recorded["as_of_queries"][scoped], 5, rank="idf",
                                      as_of=when)
                assert [[m["id"], m["score"]] for m in found] == results
    path, _ = release("version-15-7b4e0a8", tmp_path)
    with MemoryStore(path, read_only=True) as reader:
        for when, results in recorded["recall_as_of"]["dana/trip"].items():
            found = reader.recall(Scope("dana", "trip"), recorded["as_of_queries"]["dana/trip"],
                                  5, rank="idf", as_of=when)
            assert [[m["id"], m["score"]] for m in found] == results
