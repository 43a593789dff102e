"""Helpers the tests share, on the standard library alone: the files a test writes and
reads behind the store's back, the command line run as a user runs it, a settable clock.
Not a test module: no test is collected from it."""

from __future__ import annotations

import hashlib
import importlib
import pathlib
import re
import sqlite3
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

import memory
from memory import Scope

ROOT = pathlib.Path(__file__).resolve().parent.parent
# The scopes most tests use: a user with two tasks, and another user.
ALICE = Scope("alice", "trip")
ALICE_WORK = Scope("alice", "work")
BOB = Scope("bob", "trip")
FIXTURES = ROOT / "tests" / "fixtures"
# The ranks a store without an embedder offers ("hybrid" then ranks as "idf"): those the
# model scores.
WORD_RANKS: tuple[memory.Rank, ...] = ("shared", "idf", "hybrid")

# A statement that reads, counts, changes or deletes memories or their index rows;
# an INSERT ... VALUES reads nothing, and sqlite_sequence holds no memory data.
TOUCHES_MEMORY_DATA = re.compile(
    r"\b(FROM|UPDATE|JOIN)\s+"
    r"(memories|memory_words|memory_counts|memory_vectors|memory_vector_blocks|memory_fields"
    r"|memory_receipts|memory_history|memory_embeddings)"
    r"\b", re.I)

# SPEC Part 1's layout, frozen: what a version-1 file holds. Its index name is not part
# of the contract, so the fixture names it differently from ours.
VERSION_1 = """
CREATE TABLE memories (
    id INTEGER PRIMARY KEY,
    user_id TEXT NOT NULL,
    task_id TEXT,
    text TEXT NOT NULL,
    source TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE INDEX idx_memories_user_task ON memories (user_id, task_id);
PRAGMA user_version = 1;
"""

# A process that writes `count` memories for `user` on the file, recalling as it goes,
# and prints its count: argv is the path, the user and the count.
WRITER = textwrap.dedent("""
    import sys
    from memory import MemoryStore, Scope
    path, user, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    scope = Scope(user, "work")
    with MemoryStore(path) as store:
        for n in range(count):
            store.remember(scope, "task" if n % 3 else "user", f"note {n} from {user}", "t")
            if n % 10 == 0:
                for found in store.recall(scope, f"note from {user}", limit=5):
                    assert found["text"].endswith(user), found
        print(store.count(scope))
""")


def all_finish(threads: list[threading.Thread], timeout: float = 120) -> bool:
    """Start the threads, wait for each (at most `timeout` seconds): whether all ended."""
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=timeout)
    return not any(thread.is_alive() for thread in threads)


def scalar(path: pathlib.Path, sql: str) -> Any:
    """The first value `sql` reads through a plain connection of the test's own."""
    db = sqlite3.connect(path)
    try:
        return db.execute(sql).fetchone()[0]
    finally:
        db.close()


def tables(path: pathlib.Path) -> list[str]:
    db = sqlite3.connect(path)
    try:
        rows = db.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        return [name for (name,) in rows]
    finally:
        db.close()


def stamp_version(path: pathlib.Path, version: int) -> None:
    db = sqlite3.connect(path)
    try:
        db.execute(f"PRAGMA user_version = {version:d}")
    finally:
        db.close()


def user_version(path: pathlib.Path) -> int:
    return int(scalar(path, "PRAGMA user_version"))


def row_count(path: pathlib.Path) -> int:
    return int(scalar(path, "SELECT count(*) FROM memories"))


def write_version_1(path: pathlib.Path, memories: Iterable[Any]) -> None:
    """A version-1 file holding `memories` (the model's Memory, or alike)."""
    db = sqlite3.connect(path)
    db.executescript(VERSION_1)
    db.executemany("INSERT INTO memories VALUES (?, ?, ?, ?, ?, ?)",
                   [(m.id, m.user, m.task, m.text, m.source, m.created_at) for m in memories])
    db.commit()
    db.close()


def digest(path: pathlib.Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def file_bytes(path: pathlib.Path) -> bytes:
    """The file's bytes, its -wal's and its -vectors' (the sealed blocks' second copy):
    everywhere deleted text or vectors could stay."""
    beside = [pathlib.Path(f"{path}-{suffix}") for suffix in ("wal", "vectors")]
    return path.read_bytes() + b"".join(p.read_bytes() for p in beside if p.exists())


def cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """`python3 -m memory ARGS` from the project's folder, as a user runs it."""
    return subprocess.run([sys.executable, "-m", "memory", *args], cwd=ROOT, text=True,
                          input=stdin, capture_output=True, timeout=120)


class SetClock:
    """A clock whose writes read `at`, and whose reads (now) read it too, set by the test."""

    def __init__(self, at: str = "2026-10-20T09:00:00+00:00") -> None:
        self.at = at

    def __call__(self) -> str:
        return self.at

    def now(self) -> str:
        return self.at

    def advance(self, seconds: float) -> None:
        """Move the clock on by so many seconds."""
        self.at = (datetime.fromisoformat(self.at) + timedelta(seconds=seconds)).isoformat()


def served_answers(monkeypatch: Any) -> list[Any]:
    """What PostgreSQL sessions answer when recall asks the server to score a scope's
    vectors (served_vectors: None where it cannot), each call's, from now on; through a
    test's monkeypatch, which undoes it. Needs the `postgres` extra."""
    sessions = importlib.import_module("memory_postgres")._PostgresSession
    answers: list[Any] = []
    real = sessions.served_vectors

    def counted(*args: Any, **kwargs: Any) -> Any:
        answers.append(real(*args, **kwargs))
        return answers[-1]
    monkeypatch.setattr(sessions, "served_vectors", counted)
    return answers


# What a store written before its indexes of changes (SQLite's layout 16, PostgreSQL's
# version 15) lacks, and what one written before windows of validity (layout 15, version
# 14) lacks, for the tests that take a store back to an earlier layout by hand.
BEFORE_CHANGES_INDEXED = tuple(f"DROP INDEX IF EXISTS {index}" for index in (
    "memories_updated", "memories_created", "memories_written_otherwise",
    "memory_history_superseded",
    "memory_history_superseded_otherwise"))
BEFORE_VALIDITY = (*BEFORE_CHANGES_INDEXED,
                   "DROP INDEX memories_valid_from", "DROP INDEX memories_valid_to",
                   "ALTER TABLE memories DROP COLUMN valid_from",
                   "ALTER TABLE memories DROP COLUMN valid_to",
                   "ALTER TABLE memory_history DROP COLUMN valid_from",
                   "ALTER TABLE memory_history DROP COLUMN valid_to")
# PostgreSQL's version 16 reads the scope's settings once a statement in its policies:
# version 15's read them in the condition (on memory_embeddings too, where pgvector made it).
_PG_POLICY_15 = ("user_id = ANY (string_to_array(current_setting('memory.user_ids', true),"
                 " ',')) OR current_setting('memory.operator', true) = 'on'")
PG_BEFORE_SCOPE_ONCE = (
    *(f"ALTER POLICY {table}_scope ON {table} USING ({_PG_POLICY_15})" for table in (
        "memories", "memory_words", "memory_counts", "memory_vectors", "memory_fields",
        "memory_vector_blocks", "memory_receipts", "memory_history")),
    "DO $$ BEGIN IF to_regclass('memory_embeddings') IS NOT NULL THEN ALTER POLICY"
    f" memory_embeddings_scope ON memory_embeddings USING ({_PG_POLICY_15}); END IF; END $$")
# PostgreSQL's version 15 stores whether each time is of another form, besides.
PG_BEFORE_CHANGES_INDEXED = (*PG_BEFORE_SCOPE_ONCE, *BEFORE_CHANGES_INDEXED,
                             "ALTER TABLE memories DROP COLUMN written_otherwise",
                             "ALTER TABLE memory_history DROP COLUMN superseded_otherwise")
PG_BEFORE_VALIDITY = (*PG_BEFORE_CHANGES_INDEXED,
                      *BEFORE_VALIDITY[len(BEFORE_CHANGES_INDEXED):])
