"""Hostile files, read-only and full stores, file modes, and fuzzed bad input.

Each hostile file must be answered by the module's own error with its bytes unchanged;
each bad value by MemoryInputError before anything is written.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import random
import re
import sqlite3
import stat
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import memory
from helpers import ALICE, ROOT, digest, row_count, scalar, stamp_version, write_version_1
from memory import MAX_TEXT, MemoryInputError, MemoryStore, SchemaError, Scope, StoreError
from model import Memory


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
        with pytest.raises(StoreError, match="read_only=True") as caught:
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
        with pytest.raises(MemoryInputError, match="clock"):  # reads need the time too
            store.count(ALICE)
    assert row_count(tmp_path / "m.db") == 0


# -- links and modes: every file the store or a backup writes is its owner's alone --------

@pytest.fixture
def umask_022() -> Iterator[None]:
    previous = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(previous)


def mode(path: pathlib.Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_dangling_link_is_refused_not_followed(tmp_path: pathlib.Path, umask_022: None) -> None:
    link, target = tmp_path / "link.db", tmp_path / "target.db"
    link.symlink_to(target)
    with pytest.raises(StoreError, match="symbolic link"):
        MemoryStore(link)
    assert not target.exists()
    with MemoryStore(tmp_path / "memory.db") as store:
        with pytest.raises(StoreError, match="symbolic link"):
            store.backup(link)
    assert not target.exists()


def test_a_link_to_an_existing_store_is_used(tmp_path: pathlib.Path, umask_022: None) -> None:
    filled(tmp_path / "memory.db", 3)
    (tmp_path / "link.db").symlink_to(tmp_path / "memory.db")
    with MemoryStore(tmp_path / "link.db") as store:
        assert store.count(ALICE) == 3


def test_an_existing_empty_file_is_made_private(tmp_path: pathlib.Path, umask_022: None) -> None:
    path = tmp_path / "memory.db"
    path.touch(mode=0o644)
    assert mode(path) == 0o644
    with MemoryStore(path) as store:
        store.remember(ALICE, "user", "private", "s")
        for file in (path, pathlib.Path(f"{path}-wal"), pathlib.Path(f"{path}-shm")):
            assert mode(file) == 0o600, file


def test_a_backup_never_writes_into_an_existing_file(tmp_path: pathlib.Path,
                                                    umask_022: None) -> None:
    empty = tmp_path / "empty.db"
    empty.touch(mode=0o644)
    with MemoryStore(filled(tmp_path / "memory.db", 3)) as store:
        with pytest.raises(StoreError, match="exists"):
            store.backup(empty)
        store.backup(tmp_path / "copy.db")
    assert empty.read_bytes() == b"" and mode(empty) == 0o644
    assert mode(tmp_path / "copy.db") == 0o600


# -- a planted or foreign schema is refused at open, its bytes unchanged -------------------

PLANTS = {
    "a trigger moving rows to another user":
        "CREATE TRIGGER steal AFTER INSERT ON memories BEGIN"
        " UPDATE memories SET user_id = 'mallory' WHERE id = new.id; END",
    "a trigger copying rows to a table no deletion touches":
        "CREATE TABLE copies (text TEXT); CREATE TRIGGER keep AFTER INSERT ON memories"
        " BEGIN INSERT INTO copies VALUES (new.text); END",
    "a view": "CREATE VIEW everything AS SELECT * FROM memories",
    "another table": "CREATE TABLE notes (x)",
    "another index": "CREATE INDEX by_text ON memories (text)",
    "a changed column": "ALTER TABLE memories ADD COLUMN extra TEXT",
    "ANALYZE's statistics tables": "ANALYZE",
}


def plant(path: pathlib.Path, script: str, version: int | None = None) -> None:
    db = sqlite3.connect(path)
    try:
        db.executescript(script)
        if version is not None:
            db.execute(f"PRAGMA user_version = {version:d}")
    finally:
        db.close()


@pytest.mark.parametrize("planted", list(PLANTS), ids=list(PLANTS))
def test_a_planted_object_makes_the_file_foreign(tmp_path: pathlib.Path, planted: str) -> None:
    path = filled(tmp_path / "memory.db", 3)
    plant(path, PLANTS[planted])
    assert_refused(path)
    with pytest.raises(SchemaError):
        MemoryStore(path, read_only=True)


@pytest.mark.parametrize("version", [1, 2])
def test_another_programs_tables_under_our_names_are_refused(tmp_path: pathlib.Path,
                                                            version: int) -> None:
    path = tmp_path / "foreign.db"
    plant(path, "CREATE TABLE memories (a, b); CREATE TABLE memory_words (c);"
                " INSERT INTO memories VALUES (1, 2)", version)
    assert_refused(path)


def test_a_version_1_file_with_a_planted_trigger_is_refused(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "v1.db"
    write_version_1(path, [])
    plant(path, PLANTS["a trigger moving rows to another user"])
    assert_refused(path)


# -- errors never repeat what the caller passed --------------------------------------------

SECRET = "Alice's PIN is 4471"
# The secret, made invalid for every kind of parameter it may be passed as.
SECRETS = [SECRET, SECRET + "\x00", SECRET + "\ud800", SECRET * 1100, SECRET.encode(),
           [SECRET], {"user": SECRET}]


def assert_never_repeated(call: Callable[[], Any]) -> int:
    """Run a call that may fail; whatever it raises, its whole traceback (messages and
    the chain of causes) never holds the secret. Returns 1 if it raised, else 0."""
    try:
        call()
    except Exception as exc:
        logged = "".join(traceback.format_exception(exc))
        # Without the frames' places: a line numbered 4471 is not the secret.
        said = re.sub(r'File "[^"]*", line \d+', "File", logged)
        assert "4471" not in said, logged
        return 1
    return 0


def record(**changes: Any) -> dict[str, Any]:
    return {"user": "alice", "task": None, "level": "user", "text": "a memory",
            "source": "s", "created_at": "2026-10-20T09:00:00+00:00", **changes}


def calls_passing(bad: Any, store: MemoryStore, path: pathlib.Path) -> list[Callable[[], Any]]:
    """Every public call, with `bad` in each parameter position in turn."""
    return [
        lambda: Scope(bad, "trip"), lambda: Scope("alice", bad),
        lambda: store.remember(bad, "user", "text", "s"),
        lambda: store.remember(ALICE, bad, "text", "s"),
        lambda: store.remember(ALICE, "user", bad, "s"),
        lambda: store.remember(ALICE, "user", "text", bad),
        lambda: store.remember_many([(ALICE, bad, "text", "s")]),
        lambda: store.remember_many([(ALICE, "user", bad, "s")]),
        lambda: store.remember_many([bad]), lambda: store.remember_many(bad),
        lambda: store.recall(bad, "query"), lambda: store.recall(ALICE, bad),
        lambda: store.recall(ALICE, "query", bad), lambda: store.count(bad),
        lambda: store.recall(ALICE, "query", budget=bad),
        lambda: store.recall(ALICE, "query", explain=bad),
        lambda: store.memories(bad), lambda: store.forget(ALICE, bad),
        lambda: store.memories(ALICE, after=bad), lambda: store.memories(ALICE, limit=bad),
        lambda: store.forget(bad, 1), lambda: store.forget_source(ALICE, bad),
        lambda: store.forget_source(bad, "s"), lambda: store.erase_user(bad),
        lambda: store.export_user(bad), lambda: store.backup(bad),
        lambda: store.import_memories(bad), lambda: store.import_memories([bad]),
        *[lambda key=key: store.import_memories([record(**{key: bad})])
          for key in memory.RECORD_KEYS],
        lambda: store.import_memories([{**record(), str(bad): 1}]),
        lambda: store.import_memories([record(level="task", task=None, user=bad)]),
        lambda: MemoryStore(bad), lambda: MemoryStore(path, clock=bad),
        lambda: MemoryStore(":memory:", clock=lambda: bad).remember(ALICE, "user", "t", "s"),
    ]


def test_no_error_message_carries_a_value_the_caller_passed(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # MemoryStore(SECRET) is a valid path
    path = filled(tmp_path / "memory.db", 3)
    with MemoryStore(path) as store:
        raised = sum(assert_never_repeated(call) for bad in SECRETS
                     for call in calls_passing(bad, store, path))
    assert raised >= 30 * len(SECRETS)


def run_main(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    """The command line in this process: its exit status and everything it printed."""
    try:
        status = memory.main(list(argv))
    except SystemExit as exc:
        status = int(exc.code or 0)
    printed = capsys.readouterr()
    return status, printed.out + printed.err


def test_no_command_line_error_carries_a_value_the_caller_passed(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    path = str(filled(tmp_path / "memory.db", 3))
    secret_file = tmp_path / "records.jsonl"
    scope = ["--user", "alice", "--task", "trip"]
    commands = [
        ["list", path, "--user", SECRET, "--task", "trip"],
        ["list", path, "--user", "alice", "--task", SECRET],
        ["recall", path, *scope, "query", "--limit", SECRET],
        ["recall", path, *scope, SECRET + "\ud800"], ["recall", path, *scope, SECRET * 1100],
        ["recall", path, *scope, "query", "PIN", "is", "4471"],
        ["forget", path, *scope, SECRET], ["export", path, "--user", SECRET],
        ["erase-user", path, "--user", SECRET, "--yes"], ["import", path, str(secret_file)],
        ["stats", str(tmp_path / SECRET)], ["backup", path, path],
        ["import", path, str(tmp_path / "missing" / SECRET)],
        ["recall", path, *scope, "query", "--budget", SECRET],
        ["list", path, *scope, "--after", SECRET], ["list", path, *scope, "--limit", SECRET],
        ["import", path, "--from", "server-memory", str(secret_file), "--user", "alice"],
        ["import", path, "--from", "server-memory", str(secret_file), "--user", SECRET],
        ["import", path, "--from", SECRET, str(secret_file)],
    ]
    lines = [json.dumps(record(**{key: SECRET + "\x00"})) for key in memory.RECORD_KEYS]
    server_memory = [json.dumps({"type": "entity", "name": SECRET + "\x00", "entityType": "p",
                                 "observations": []}),
                     json.dumps({"type": "entity", "name": "A", "entityType": "p",
                                 "observations": [SECRET * 1100]}),
                     json.dumps({"type": SECRET}), json.dumps({"type": "relation",
                                                              "from": SECRET})]
    for line in [*lines, json.dumps({**record(), SECRET: 1}), SECRET, f'["{SECRET}"',
                 *server_memory]:
        secret_file.write_text(line + "\n", encoding="utf-8")
        for argv in commands:
            status, printed = run_main(capsys, *argv)
            assert status in (1, 2), argv
            assert "4471" not in printed, (argv, printed)
    with MemoryStore(path) as store:
        assert store.count(ALICE) == 3


# -- clock readings are checked as an imported created_at is --------------------------------

@pytest.mark.parametrize("reading", ["yesterday", "", "2026-10-20\x00", "9" * 100_000,
                                     "2026-10-20T09:00:00\ud800", 12, None])
def test_a_bad_clock_reading_writes_nothing(tmp_path: pathlib.Path, reading: Any) -> None:
    with MemoryStore(tmp_path / "m.db", clock=lambda: reading) as store:
        with pytest.raises(MemoryInputError, match="clock reading"):
            store.remember(ALICE, "user", "text", "s")
        assert not store.db.in_transaction
        assert store.export_user("alice") == []
    assert row_count(tmp_path / "m.db") == 0


# -- scope checks cannot be bypassed --------------------------------------------------------

class HollowScope(Scope):
    def __post_init__(self) -> None:  # skips the identifier check
        pass


def mutated_scope() -> Scope:
    scope = Scope("alice", "trip")
    object.__setattr__(scope, "user", "ALICE")
    return scope


@pytest.mark.parametrize("make", [lambda: HollowScope("ALICE", "trip"),
                                  lambda: HollowScope("alice", "Trip Planning"),
                                  mutated_scope])
def test_every_call_checks_the_scope_itself(tmp_path: pathlib.Path, make: Any) -> None:
    path = filled(tmp_path / "memory.db", 3)
    scope = make()
    with MemoryStore(path) as store:
        calls: list[Callable[[], object]] = [
                lambda: store.remember(scope, "user", "text", "s"),
                     lambda: store.remember_many([(scope, "task", "text", "s")]),
                     lambda: store.recall(scope, "hotel"), lambda: store.count(scope),
                     lambda: store.memories(scope), lambda: store.forget(scope, 1),
                     lambda: store.forget_source(scope, "s")]
        for call in calls:
            with pytest.raises(MemoryInputError):
                call()
    assert row_count(path) == 3
    assert scalar(path, "SELECT count(*) FROM memories WHERE user_id <> 'alice'") == 0


# -- damage is SchemaError, a full id space StoreError, the file unchanged ------------------

@pytest.mark.parametrize("damaged", ["substr(ids, 1, 7)", "'not a run of ids'"])
def test_a_damaged_index_row_is_a_schema_error(tmp_path: pathlib.Path,
                                              capsys: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch,
                                              damaged: str) -> None:
    monkeypatch.setattr(memory, "INDEX_FROM", 1)  # its three memories indexed
    path = filled(tmp_path / "memory.db", 3)
    plant(path, f"UPDATE memory_words SET ids = {damaged} WHERE word = 'hotel'")
    before = digest(path)
    with MemoryStore(path) as store:
        with pytest.raises(SchemaError, match="damaged"):
            store.recall(ALICE, "hotel")
        with pytest.raises(SchemaError, match="damaged"):  # every posting read at once
            store.recall(ALICE, "hotel", rank="idf", context=True)
        with pytest.raises(SchemaError, match="damaged"):
            store.forget(ALICE, 1)
        assert not store.db.in_transaction
    assert digest(path) == before
    status, printed = run_main(capsys, "recall", str(path), "--user", "alice", "--task", "trip",
                               "hotel")
    assert status == 1 and printed.startswith("memory: error:") and printed.count("\n") == 1


@pytest.mark.parametrize("words", [1, memory._STATEMENT_A_WORD_UP_TO + 1],
                         ids=["a statement a word", "one statement for all"])
def test_damaged_index_rows_whose_lengths_add_up_to_whole_ids_are_a_schema_error(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, words: int) -> None:
    monkeypatch.setattr(memory, "INDEX_FROM", 1)
    path = filled(tmp_path / "memory.db", 2 * memory.POSTINGS_PER_ROW + 1)  # three rows
    # One row a byte short, the next a byte long: joined, they are a whole number of ids.
    plant(path, "UPDATE memory_words SET ids = CASE WHEN first_id = (SELECT min(first_id)"
                " FROM memory_words WHERE word = 'hotel') THEN substr(ids, 1, length(ids) - 1)"
                " ELSE ids || x'00' END WHERE word = 'hotel' AND first_id < (SELECT max(first_id)"
                " FROM memory_words WHERE word = 'hotel')")
    assert scalar(path, "SELECT sum(length(ids)) % 8 FROM memory_words WHERE word = 'hotel'") == 0
    before = digest(path)
    query = " ".join(["hotel", *(f"absent{n}" for n in range(words - 1))])
    with MemoryStore(path) as store:
        for context in (False, True):
            with pytest.raises(SchemaError, match="damaged"):
                store.recall(ALICE, query, rank="idf", context=context)
    assert digest(path) == before


def test_a_full_id_space_is_a_store_error(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "v1.db"
    write_version_1(path, [Memory(2**63 - 1, "alice", None, "the last id", "s",
                                  "2026-10-20T09:00:00+00:00")])
    MemoryStore(path).close()  # the upgrade
    before = digest(path)
    with MemoryStore(path) as store:
        with pytest.raises(StoreError, match="used up its ids"):
            store.remember(ALICE, "user", "one too many", "s")
        assert not store.db.in_transaction
    assert digest(path) == before


# -- read-only opening writes no file ------------------------------------------------------

def listing(folder: pathlib.Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def read_everything(path: pathlib.Path) -> None:
    with MemoryStore(path, read_only=True) as store:
        assert store.count(ALICE) == 5
        assert len(store.recall(ALICE, "hotel note", limit=10)) == 5
        assert len(store.export_user("alice")) == 5
        assert store.stats()["memories"] == 5 and store.check()["ok"]
        with pytest.raises(StoreError, match="read_only"):
            store.remember(ALICE, "user", "not written", "s")
        with pytest.raises(StoreError, match="read_only"):
            store.compact()


def test_read_only_opening_leaves_no_file_behind(tmp_path: pathlib.Path) -> None:
    path = filled(tmp_path / "memory.db", 5)
    before, files = digest(path), listing(tmp_path)
    read_everything(path)
    assert listing(tmp_path) == files and digest(path) == before


@contextlib.contextmanager
def read_only_folder(folder: pathlib.Path) -> Iterator[None]:
    """The folder made unwritable for this process: immutable as root, mode 0555 else."""
    if os.geteuid() == 0:
        done = subprocess.run(["chattr", "+i", str(folder)], capture_output=True, check=False)
        if done.returncode:
            pytest.skip(f"root cannot make a read-only folder here: {done.stderr!r}")
        undo = ["chattr", "-i", str(folder)]
    else:
        folder.chmod(0o555)
        undo = ["chmod", "755", str(folder)]
    try:
        assert not os.access(folder, os.W_OK)
        yield
    finally:
        subprocess.run(undo, check=True)


def test_read_only_opening_works_in_a_read_only_folder(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    path = filled(folder / "memory.db", 5)
    before, files = digest(path), listing(folder)
    with read_only_folder(folder):
        read_everything(path)
        for argv in (["stats", str(path)], ["check", str(path)],
                     ["list", str(path), "--user", "alice", "--task", "trip"],
                     ["export", str(path), "--user", "alice"],
                     ["backup", str(path), str(tmp_path / "copy.db")]):
            status, printed = run_main(capsys, *argv)
            assert status == 0, (argv, printed)
        assert listing(folder) == files
    assert digest(path) == before
    with MemoryStore(tmp_path / "copy.db", read_only=True) as copy:
        assert copy.count(ALICE) == 5


def test_read_only_store_beside_a_writer_sees_its_writes(tmp_path: pathlib.Path) -> None:
    path = filled(tmp_path / "memory.db", 5)
    with MemoryStore(path) as writer:
        files = listing(tmp_path)
        with MemoryStore(path, read_only=True) as reader:
            writer.remember(ALICE, "user", "hotel note written while a reader is open", "s")
            assert reader.count(ALICE) == 6
        assert listing(tmp_path) == files


# -- round two: inputs that slipped past validation ------------------------------------

@pytest.mark.parametrize("ttl", [10**400, 2**1024, -10**400], ids=["1e400", "2^1024", "-1e400"])
def test_a_ttl_too_large_for_a_float_is_an_input_error(tmp_path: pathlib.Path, ttl: int) -> None:
    path = tmp_path / "m.db"
    with MemoryStore(path) as store:
        with pytest.raises(MemoryInputError, match="ttl must be a finite number"):
            store.remember(ALICE, "user", "text", "s", ttl=ttl)
        with pytest.raises(MemoryInputError, match="item 1: ttl") as caught:
            store.remember_many([(ALICE, "user", "text", "s"), (ALICE, "user", "t", "s", ttl)])
        assert caught.value.position == 1
    assert row_count(path) == 0


def test_a_ttl_past_the_year_9999_in_a_batch_names_its_item(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "m.db"
    items = [(ALICE, "user", f"note {n}", "s", 60.0) for n in range(5)]
    items.append((ALICE, "user", "the sixth", "s", 1e300))
    with MemoryStore(path) as store:
        with pytest.raises(MemoryInputError, match="^item 5: ttl reaches past") as caught:
            store.remember_many(items)
        assert caught.value.position == 5
        assert not store.db.in_transaction
        with pytest.raises(MemoryInputError, match="^ttl reaches past") as single:
            store.remember(ALICE, "user", "one", "s", ttl=1e300)
        assert single.value.position is None
    assert row_count(path) == 0


def test_a_scope_made_without_its_fields_is_an_input_error(tmp_path: pathlib.Path) -> None:
    hollow = Scope.__new__(Scope)
    with MemoryStore(filled(tmp_path / "m.db", 3)) as store:
        calls: list[Callable[[], object]] = [
            lambda: store.remember(hollow, "user", "text", "s"),
            lambda: store.recall(hollow, "hotel"), lambda: store.count(hollow),
            lambda: store.forget(hollow, 1), lambda: store.memories(hollow)]
        for call in calls:
            with pytest.raises(MemoryInputError, match="user must be a str"):
                call()
        assert store.count(ALICE) == 3


@pytest.mark.parametrize("argv", [
    ["recall", "m.db", "--user", "alice", "--task", "trip", "q", "--rank", "SECRETVALUE-4417"],
    ["reindex", "m.db", "--matching", "SECRETVALUE-4417"],
])
def test_the_command_line_never_echoes_an_invalid_choice(
        capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    with pytest.raises(SystemExit) as done:
        memory.main(argv)
    assert done.value.code == 2
    printed = capsys.readouterr()
    assert "SECRETVALUE" not in printed.out + printed.err
    assert "must be one of" in printed.err


def test_export_with_standard_output_closed_fails(tmp_path: pathlib.Path) -> None:
    path = filled(tmp_path / "m.db", 3)
    done = subprocess.run(
        [sys.executable, "-m", "memory", "export", str(path), "--user", "alice"],
        cwd=ROOT, stderr=subprocess.PIPE, text=True, timeout=60,
        preexec_fn=lambda: os.close(1))
    assert done.returncode == 1
    assert done.stderr == "memory: error: standard output is closed\n"


def test_common_mistakes_get_a_line_that_says_what_to_do(tmp_path: pathlib.Path) -> None:
    with pytest.raises(MemoryInputError, match=r"a dict where the clock goes: .*\*\*RECOMMENDED"):
        MemoryStore(tmp_path / "m.db", memory.RECOMMENDED)  # type: ignore[arg-type]
    for url in ("http://example.test/store", "sqlite:///m.db", "https://x/y"):
        with pytest.raises(MemoryInputError, match="a file's path or a postgresql:// URL"):
            MemoryStore(url)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("blocked, opening, hint", [
    ("snowballstemmer", "MemoryStore(sys.argv[1], matching='stems')",
     "pip install snowballstemmer PyStemmer (or '.[stems]' from a checkout)"),
    ("psycopg", "MemoryStore('postgresql:///nowhere')",
     "pip install 'psycopg[binary]' psycopg-pool (or '.[postgres]' from a checkout)"),
    ("memory_postgres", "MemoryStore('postgresql:///nowhere')",
     "memory_postgres.py is not beside memory.py: copy it there, or pip install"
     " '.[postgres]' from a checkout"),
])
def test_a_missing_extra_names_what_installs_it(tmp_path: pathlib.Path, blocked: str,
                                                 opening: str, hint: str) -> None:
    code = (f"import sys; sys.modules[{blocked!r}] = None\n"
            "from memory import MemoryStore, StoreError\n"
            f"try:\n    {opening}\nexcept StoreError as exc:\n    print(exc)\n")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "m.db")], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert hint in done.stdout, done.stdout + done.stderr
    assert "memory-store[" not in done.stdout
