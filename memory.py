"""A persistent memory store for AI assistants, with explicit user and task scope.

One SQLite file holds the memories of many users. Every read, count and delete
filters by the caller's scope with one predicate, so no operation can hand one
user's memories to another.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
import os
import re
import sqlite3
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

__version__ = "0.1.0"

SCHEMA_VERSION = 1
IDENTIFIER = re.compile(r"[a-z0-9][a-z0-9-]{0,63}")
MAX_TEXT = 2000
MAX_QUERY = 10 * MAX_TEXT
MAX_LIMIT = 20
LEVELS = ("user", "task")
WORD = re.compile(r"[a-z0-9]+")
STOPWORDS = frozenset(
    "a an and are as at be by did do does for from how i in is it my of on or that"
    " the this to was we what when where which who will with you your".split()
)
BUSY_TIMEOUT_SECONDS = 30.0

SCHEMA = """
CREATE TABLE memories (
    id INTEGER PRIMARY KEY,
    user_id TEXT NOT NULL,
    task_id TEXT,
    text TEXT NOT NULL,
    source TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE INDEX memories_scope ON memories (user_id, task_id)
"""

# The one scope predicate: user-level rows (task_id IS NULL) and this task's rows,
# both under this user, so no branch can reach another user's row.
_IN_SCOPE = "WHERE user_id = ? AND (task_id IS NULL OR task_id = ?)"

_SQL_LAYOUT = "SELECT (SELECT user_version FROM pragma_user_version), count(*) FROM sqlite_master"
_SQL_INSERT = (
    "INSERT INTO memories (user_id, task_id, text, source, created_at) VALUES (?, ?, ?, ?, ?)"
)
_SQL_VISIBLE = f"SELECT id, task_id, text, source, created_at FROM memories {_IN_SCOPE} ORDER BY id"
_SQL_COUNT = f"SELECT count(*) FROM memories {_IN_SCOPE}"

log = logging.getLogger("memory")


class MemoryInputError(ValueError):
    """An invalid scope, level, text, source or limit; nothing was written."""


class SchemaError(RuntimeError):
    """The file is not a memory store this code can read."""


class StoreError(RuntimeError):
    """The store could not carry out the operation (closed, read-only, full, damaged)."""


@dataclasses.dataclass(frozen=True)
class Scope:
    """The authenticated user and the task of one request."""

    user: str
    task: str

    def __post_init__(self) -> None:
        _check_identifier("user", self.user)
        _check_identifier("task", self.task)


def _check_identifier(name: str, value: object) -> str:
    if not isinstance(value, str) or IDENTIFIER.fullmatch(value) is None:
        raise MemoryInputError(
            f"{name} must be a str matching {IDENTIFIER.pattern!r}, got {value!r:.80}"
        )
    return value


def fixed_clock(
    start: str = "2026-10-20T09:00:00+00:00", step_seconds: float = 60
) -> Callable[[], str]:
    """Return a clock whose first reading is `start`, each later one a step later."""
    origin = datetime.fromisoformat(start)
    ticks = itertools.count()
    return lambda: (origin + timedelta(seconds=step_seconds * next(ticks))).isoformat()


def system_clock() -> str:
    """The current UTC time, to the second."""
    return datetime.now(UTC).isoformat(timespec="seconds")


def words(text: str) -> set[str]:
    """The words of `text` that count for matching: lower-cased, stopwords removed."""
    return set(WORD.findall(text.lower())) - STOPWORDS


def _check_text(name: str, value: object, longest: int, blank: bool = False) -> str:
    if not isinstance(value, str):
        raise MemoryInputError(f"{name} must be a str, got {type(value).__name__}")
    if len(value) > longest:
        raise MemoryInputError(f"{name} is {len(value)} characters, longer than {longest}")
    if not blank and not value.strip():
        raise MemoryInputError(f"{name} must not be blank")
    if "\x00" in value:
        raise MemoryInputError(f"{name} must not contain NUL characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise MemoryInputError(f"{name} is not valid Unicode: {exc.reason}") from None
    return value


def _check_level(level: object) -> str:
    if not isinstance(level, str) or level not in LEVELS:
        raise MemoryInputError(f"level must be 'user' or 'task', got {level!r:.80}")
    return level


def _check_limit(limit: object) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise MemoryInputError(f"limit must be an int from 1 to {MAX_LIMIT}, got {limit!r:.80}")
    return limit


def _check_scope(scope: object) -> Scope:
    if not isinstance(scope, Scope):
        raise MemoryInputError(f"scope must be a Scope, got {type(scope).__name__}")
    return scope


def _level_of(task_id: str | None) -> str:
    return "user" if task_id is None else "task"


class MemoryStore:
    """Memories of many users in one SQLite file, each operation confined to a scope."""

    def __init__(self, path: str | os.PathLike[str], clock: Callable[[], str] = system_clock):
        self.path = os.fspath(path)
        self.clock = clock
        self._lock = threading.RLock()
        self._db: sqlite3.Connection | None = self._connect()

    # -- opening -------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, isolation_level=None, timeout=BUSY_TIMEOUT_SECONDS)
        try:
            self._prepare(db)
        except BaseException:
            db.close()
            raise
        return db

    def _prepare(self, db: sqlite3.Connection) -> None:
        try:
            version, objects = db.execute(_SQL_LAYOUT).fetchone()
        except sqlite3.DatabaseError as exc:
            raise SchemaError(f"{self.path} is not a memory store: {exc}") from exc
        if version == SCHEMA_VERSION:
            return
        if version != 0:
            raise SchemaError(
                f"{self.path} has database schema version {version};"
                f" this code reads version {SCHEMA_VERSION}"
            )
        if objects:
            raise SchemaError(f"{self.path} holds tables but no schema version: not a memory store")
        db.execute("BEGIN")
        try:
            for statement in SCHEMA.split(";"):
                if statement.strip():
                    db.execute(statement)
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION:d}")
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        log.info("created memory store schema version %d", SCHEMA_VERSION)

    # -- the object ----------------------------------------------------------------

    @property
    def db(self) -> sqlite3.Connection:
        """The open connection (tests trace it)."""
        if self._db is None:
            raise StoreError("MemoryStore is closed")
        return self._db

    def close(self) -> None:
        """Close the file; closing again does nothing."""
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    def __enter__(self) -> MemoryStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @contextlib.contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            db = self.db
            try:
                yield db
            except sqlite3.Error as exc:
                raise StoreError(f"memory store {self.path}: {exc}") from exc

    @contextlib.contextmanager
    def _writing(self) -> Iterator[sqlite3.Connection]:
        with self._reading() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise

    # -- memories ------------------------------------------------------------------

    def remember(self, scope: Scope, level: str, text: str, source: str) -> int:
        """Keep `text` at `level` for the scope's user; return its new id."""
        _check_scope(scope)
        task_id = scope.task if _check_level(level) == "task" else None
        row = (
            scope.user,
            task_id,
            _check_text("text", text, MAX_TEXT),
            _check_text("source", source, MAX_TEXT),
        )
        with self._writing() as db:
            memory_id = db.execute(_SQL_INSERT, (*row, self.clock())).lastrowid
        assert memory_id is not None
        log.debug("remembered id=%d level=%s", memory_id, level)
        return memory_id

    def recall(self, scope: Scope, query: str, limit: int = 3) -> list[dict[str, Any]]:
        """The memories visible in the scope that share most words with `query`."""
        _check_scope(scope)
        _check_limit(limit)
        wanted = words(_check_text("query", query, MAX_QUERY, blank=True))
        with self._reading() as db:
            rows = db.execute(_SQL_VISIBLE, (scope.user, scope.task)).fetchall()
        scored = [(len(wanted & words(row[2])), row) for row in rows]
        scored = [(score, row) for score, row in scored if score]
        scored.sort(key=lambda pair: (pair[0], pair[1][0]), reverse=True)
        return [_memory(row, score=score) for score, row in scored[:limit]]

    def count(self, scope: Scope) -> int:
        """How many memories are visible in the scope."""
        _check_scope(scope)
        with self._reading() as db:
            (visible,) = db.execute(_SQL_COUNT, (scope.user, scope.task)).fetchone()
        return int(visible)


def _memory(row: tuple[Any, ...], **extra: Any) -> dict[str, Any]:
    memory_id, task_id, text, source, created_at = row
    return {
        "id": memory_id,
        "level": _level_of(task_id),
        "text": text,
        "source": source,
        "created_at": created_at,
        **extra,
    }
