"""Hostile files, read-only and full stores, file modes, and fuzzed bad input.

Each hostile file must be answered by the module's own error with its bytes unchanged;
each bad value by MemoryInputError before anything is written.
"""

from __future__ import annotations

import os
import pathlib
import random
import sqlite3
import stat
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import memory
from memory import MAX_TEXT, MemoryInputError, MemoryStore, SchemaError, Scope, StoreError
from test_index import digest
from test_memory import row_count, stamp_version

ALICE = Scope("alice", "trip")


def filled(path: pathlib.Path, count: int = 300) -> pathlib.Path:
    with MemoryStore(path) as store:
        store.remember_many([(ALICE, "user", f"hotel note {n} " + "padding " * 30, "s")
                             for n in range(count)])
    return path


def assert_refused(path: pathlib.Path) -> None:
    """Opening, or at the latest the first read, raises SchemaError; no byte changes."""
    before = digest(path)
    with pytest.raises(SchemaError):
        store = MemoryStore(path)
        try:
            store.count(ALICE)
            store.recall(ALICE, "hotel note")
        finally:
            store.close()
    assert digest(path) == before


def test_random_bytes(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "random.db"
    path.write_bytes(random.Random(7).randbytes(16384))
    assert_refused(path)


def test_truncated_database(tmp_path: pathlib.Path) -> None:
    path = filled(tmp_path / "memory.db")
    data = path.read_bytes()
    assert len(data) > 8 * 4096
    path.write_bytes(data[: len(data) // 2])
    assert_refused(path)


def test_damaged_header(tmp_path: pathlib.Path) -> None:
    path = filled(tmp_path / "memory.db")
    data = bytearray(path.read_bytes())
    data[0:16] = b"NOT A DATABASE!\x00"
    path.write_bytes(bytes(data))
    assert_refused(path)


def test_damaged_page_size(tmp_path: pathlib.Path) -> None:
    path = filled(tmp_path / "memory.db")
    data = bytearray(path.read_bytes())
    data[16:18] = b"\x00\x07"  # not a power of two
    path.write_bytes(bytes(data))
    assert_refused(path)


def test_foreign_database(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "foreign.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE memories (body TEXT)")
    db.commit()
    db.close()
    assert_refused(path)


@pytest.mark.parametrize("version", [1, memory.SCHEMA_VERSION])
def test_foreign_database_stamped_with_a_known_version(tmp_path: pathlib.Path,
                                                       version: int) -> None:
    path = tmp_path / "stamped.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE notes (body TEXT)")
    db.execute("INSERT INTO notes VALUES ('keep me')")
    db.commit()
    db.close()
    stamp_version(path, version)
    assert_refused(path)


def test_newer_version(tmp_path: pathlib.Path) -> None:
    path = filled(tmp_path / "memory.db", 3)
    stamp_version(path, memory.SCHEMA_VERSION + 1)
    assert_refused(path)


def test_a_directory(tmp_path: pathlib.Path) -> None:
    with pytest.raises(SchemaError, match="directory"):
        MemoryStore(tmp_path)


def test_missing_folder(tmp_path: pathlib.Path) -> None:
    with pytest.raises(StoreError, match="cannot create"):
        MemoryStore(tmp_path / "no" / "such" / "memory.db")


def test_read_only_store_reads_and_refuses_writes(tmp_path: pathlib.Path) -> None:
    path = filled(tmp_path / "memory.db", 5)
    before = digest(path)
    with MemoryStore(path, read_only=True) as store:
        assert store.count(ALICE) == 5
        assert len(store.recall(ALICE, "hotel note", limit=10)) == 5
        with pytest.raises(StoreError, match="readonly") as caught:
            store.remember(ALICE, "user", "not written", "s")
        assert not isinstance(caught.value, sqlite3.Error)
        assert store.count(ALICE) == 5
    assert digest(path) == before


def test_read_only_open_of_a_missing_file(tmp_path: pathlib.Path) -> None:
    with pytest.raises(StoreError):
        MemoryStore(tmp_path / "absent.db", read_only=True)
    assert not (tmp_path / "absent.db").exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="file modes do not bind root")
def test_file_without_write_permission(tmp_path: pathlib.Path) -> None:
    path = filled(tmp_path / "memory.db", 5)
    path.chmod(0o400)
    with MemoryStore(path) as store:
        assert store.count(ALICE) == 5
        with pytest.raises(StoreError):
            store.remember(ALICE, "user", "not written", "s")


def test_full_disk_then_room_again(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "memory.db"
    with MemoryStore(path) as store:
        kept = store.remember(ALICE, "user", "kept before the disk filled", "s")
        (pages,) = store.db.execute("PRAGMA page_count").fetchone()
        store.db.execute(f"PRAGMA max_page_count = {pages}")
        big = "x" * (MAX_TEXT - 20)
        with pytest.raises(StoreError, match="full") as caught:
            for n in range(50):
                store.remember_many([(ALICE, "user", f"{big} {n} {k}", "s") for k in range(20)])
        assert not isinstance(caught.value, sqlite3.Error)
        assert [m["id"] for m in store.recall(ALICE, "kept disk filled")] == [kept]
        count = store.count(ALICE)
        store.db.execute("PRAGMA max_page_count = 1073741823")
        store.remember(ALICE, "user", "written once there is room", "s")
        assert store.count(ALICE) == count + 1
        assert store.db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


@pytest.mark.parametrize("umask", [0o000, 0o022, 0o077, 0o277])
def test_new_files_are_private_whatever_the_umask(tmp_path: pathlib.Path, umask: int) -> None:
    path = tmp_path / "memory.db"
    previous = os.umask(umask)
    try:
        store = MemoryStore(path)
    finally:
        os.umask(previous)
    try:
        store.remember(ALICE, "user", "private", "s")
        files = [path, pathlib.Path(f"{path}-wal"), pathlib.Path(f"{path}-shm")]
        for file in files:
            assert file.exists(), file
            assert stat.S_IMODE(file.stat().st_mode) == 0o600, file
    finally:
        store.close()


# -- bad values for every public parameter ---------------------------------------------

ANYTHING = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=True), st.binary(max_size=20), st.text(max_size=20),
    st.lists(st.integers(), max_size=3), st.just(b"alice"), st.just(object()),
)
BAD_STRINGS = st.one_of(
    st.just(""), st.just("   \n\t"),
    st.text(max_size=10).map(lambda t: t + "\x00"),
    st.text(max_size=10).map(lambda t: t + "\ud800"),
    st.integers(min_value=MAX_TEXT * 10 + 1, max_value=3 * 2**20).map(lambda n: "y" * n),
)
BAD_IDENTIFIERS = st.one_of(
    ANYTHING.filter(lambda v: not (isinstance(v, str) and memory.IDENTIFIER.fullmatch(v))),
    st.just("Alice"), st.just("trip planning"), st.just("a" * 65), st.just("-x"),
    st.just("alice\n"), st.just("ali\x00ce"), st.just("\ud800"),
)


rows_in = row_count


@pytest.fixture(scope="module")
def fuzz_store() -> Iterator[tuple[MemoryStore, pathlib.Path]]:
    with tempfile.TemporaryDirectory() as name:
        path = pathlib.Path(name) / "fuzz.db"
        with MemoryStore(path) as store:
            store.remember(ALICE, "user", "one memory to keep", "s")
            yield store, path


def rejected(call: Callable[[], Any], store: MemoryStore, path: pathlib.Path) -> None:
    with pytest.raises(MemoryInputError):
        call()
    assert rows_in(path) == 1
    assert store.count(ALICE) == 1


@given(user=BAD_IDENTIFIERS, task=BAD_IDENTIFIERS)
def test_fuzz_scope(user: Any, task: Any) -> None:
    with pytest.raises(MemoryInputError):
        Scope(user, task)
    with pytest.raises(MemoryInputError):
        Scope("alice", task)
    with pytest.raises(MemoryInputError):
        Scope(user, "trip")


@given(level=ANYTHING.filter(lambda v: v not in ("user", "task")),
       text=st.one_of(BAD_STRINGS, ANYTHING.filter(lambda v: not isinstance(v, str))),
       source=st.one_of(BAD_STRINGS, ANYTHING.filter(lambda v: not isinstance(v, str))),
       scope=ANYTHING)
def test_fuzz_remember(fuzz_store: tuple[MemoryStore, pathlib.Path], level: Any, text: Any,
                       source: Any, scope: Any) -> None:
    store, path = fuzz_store
    rejected(lambda: store.remember(ALICE, level, "good text", "s"), store, path)
    rejected(lambda: store.remember(ALICE, "user", text, "s"), store, path)
    rejected(lambda: store.remember(ALICE, "task", "good text", source), store, path)
    rejected(lambda: store.remember(scope, "user", "good text", "s"), store, path)
    rejected(lambda: store.remember_many([(ALICE, "user", "good", "s"), (ALICE, level, text,
                                                                        source)]), store, path)
    rejected(lambda: store.remember_many([scope]), store, path)


@given(query=st.one_of(ANYTHING.filter(lambda v: not isinstance(v, str)),
                       st.text(max_size=10).map(lambda t: t + "\x00"),
                       st.text(max_size=10).map(lambda t: t + "\udfff"),
                       st.just("q " * memory.MAX_QUERY)),
       limit=st.one_of(st.integers().filter(lambda n: not 1 <= n <= 20), st.booleans(),
                       ANYTHING.filter(lambda v: not isinstance(v, int))),
       scope=ANYTHING)
def test_fuzz_recall_and_count(fuzz_store: tuple[MemoryStore, pathlib.Path], query: Any,
                               limit: Any, scope: Any) -> None:
    store, path = fuzz_store
    rejected(lambda: store.recall(ALICE, query), store, path)
    rejected(lambda: store.recall(ALICE, "memory", limit=limit), store, path)
    rejected(lambda: store.recall(scope, "memory"), store, path)
    rejected(lambda: store.count(scope), store, path)


@given(path=st.one_of(st.none(), st.integers(), st.just(b"bytes.db"), st.just(""),
                      st.just("with\x00nul.db"), st.floats()),
       clock=st.one_of(st.none(), st.integers(), st.text(max_size=5)))
def test_fuzz_constructor(path: Any, clock: Any) -> None:
    with tempfile.TemporaryDirectory() as name:
        with pytest.raises(MemoryInputError):
            MemoryStore(path)
        with pytest.raises(MemoryInputError):
            MemoryStore(pathlib.Path(name) / "m.db", clock=clock)
        assert not (pathlib.Path(name) / "m.db").exists()


def test_a_clock_that_returns_no_string(tmp_path: pathlib.Path) -> None:
    with MemoryStore(tmp_path / "m.db", clock=lambda: 12) as store:  # type: ignore[arg-type,return-value]
        with pytest.raises(MemoryInputError, match="clock"):
            store.remember(ALICE, "user", "text", "s")
        assert store.count(ALICE) == 0
