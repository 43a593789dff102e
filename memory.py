"""A persistent memory store for AI assistants, with explicit user and task scope.

One SQLite file holds the memories of many users. Every read, count and delete
filters by the caller's scope with one predicate, so no operation can hand one
user's memories to another.
"""

from __future__ import annotations

import argparse
import array
import collections
import contextlib
import dataclasses
import heapq
import itertools
import json
import logging
import operator
import os
import pathlib
import re
import sqlite3
import sys
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

__version__ = "0.1.0"

SCHEMA_VERSION = 2
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
# Sized so a row stays on its B-tree page (no overflow page) and rewriting one is cheap.
POSTINGS_PER_ROW = 96
# A write of this many memories or fewer appends each word's ids to the newest row of its
# (user, word, task) when it has room, so single writes do not leave one-id rows for recall
# to read; a larger write makes rows of its own, sparing a lookup per word.
_APPEND_UP_TO = 16
# Each connection's page cache: the word index of a large store is written in key order
# per word, i.e. all over the file.
_CACHE_KIB = 64 * 1024
_MAX_ID = 2**63 - 1

# AUTOINCREMENT: an id is never handed out twice, even after the newest is forgotten.
_CREATE_MEMORIES = """CREATE TABLE memories (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id TEXT NOT NULL,
    task_id TEXT,
    text TEXT NOT NULL,
    source TEXT NOT NULL,
    created_at TEXT NOT NULL
)"""
_CREATE_SCOPE_INDEX = "CREATE INDEX memories_scope ON memories (user_id, task_id)"
# The word index: for each (user, word, task), the ids of the memories holding the word,
# packed as little-endian int64 in ascending runs of up to POSTINGS_PER_ROW. Recall reads
# only the rows of the query's words under one user, so its cost follows the memories that
# share a word with the query, not the user's total. A row holds ids of one task (or of
# the user level) and the rows of one (user, word, task) cover disjoint id ranges, so the
# row holding an id is the one with the greatest first_id at or below it.
_CREATE_WORDS = """CREATE TABLE memory_words (
    user_id TEXT NOT NULL,
    word TEXT NOT NULL,
    first_id INTEGER NOT NULL,
    task_id TEXT,
    ids BLOB NOT NULL,
    PRIMARY KEY (user_id, word, first_id)
) WITHOUT ROWID"""
SCHEMA = ";\n".join([_CREATE_MEMORIES, _CREATE_SCOPE_INDEX, _CREATE_WORDS])

# The one scope predicate: user-level rows (task_id IS NULL) and this task's rows,
# both under this user, so no branch can reach another user's row.
_IN_SCOPE = "WHERE user_id = ? AND (task_id IS NULL OR task_id = ?)"

_SQL_LAYOUT = "SELECT (SELECT user_version FROM pragma_user_version), count(*) FROM sqlite_master"
_SQL_TABLES = "SELECT name FROM sqlite_master WHERE type = 'table'"
# Under the write lock the next ids are known, so a batch is one executemany. AUTOINCREMENT
# keeps sqlite_sequence at the largest id ever written, forgotten ones included; memories
# is the only table that can have a row there (memory_words has no rowid).
_SQL_LAST_ID = "SELECT coalesce(max(seq), 0) FROM sqlite_sequence"
_SQL_INSERT = (
    "INSERT INTO memories (id, user_id, task_id, text, source, created_at)"
    " VALUES (?, ?, ?, ?, ?, ?)"
)
_MEMORY_COLUMNS = "id, task_id, text, source, created_at"
_SQL_COUNT = f"SELECT count(*) FROM memories {_IN_SCOPE}"
_SQL_POSTINGS = (
    f"SELECT ids FROM memory_words {_IN_SCOPE} AND word IN (SELECT value FROM json_each(?))"
)
# NOT INDEXED: look the few ids up by primary key rather than walk the user's index range.
_SQL_RECALLED = (
    f"SELECT {_MEMORY_COLUMNS} FROM memories NOT INDEXED {_IN_SCOPE}"
    " AND id IN (SELECT value FROM json_each(?))"
)
_SQL_NEWEST_POSTINGS = (
    "SELECT first_id, length(ids) FROM memory_words WHERE user_id = ? AND task_id IS ?"
    " AND word = ? ORDER BY first_id DESC LIMIT 1"
)
_SQL_APPEND_POSTINGS = (
    "UPDATE memory_words SET ids = CAST(ids || ? AS BLOB)"
    " WHERE user_id = ? AND task_id IS ? AND word = ? AND first_id = ?"
)
_SQL_INSERT_POSTINGS = (
    "INSERT INTO memory_words (user_id, word, first_id, task_id, ids) VALUES (?, ?, ?, ?, ?)"
)
_SQL_VISIBLE = f"SELECT {_MEMORY_COLUMNS} FROM memories {_IN_SCOPE} ORDER BY id"
_SQL_VISIBLE_ID = f"SELECT {_MEMORY_COLUMNS} FROM memories {_IN_SCOPE} AND id = ?"
_SQL_VISIBLE_SOURCE = f"SELECT {_MEMORY_COLUMNS} FROM memories {_IN_SCOPE} AND source = ?"
_SQL_OWNED = f"SELECT {_MEMORY_COLUMNS} FROM memories WHERE user_id = ? ORDER BY id"
_SQL_FORGET = (
    f"DELETE FROM memories NOT INDEXED {_IN_SCOPE} AND id IN (SELECT value FROM json_each(?))"
)
_SQL_ERASE = "DELETE FROM memories WHERE user_id = ?"
_SQL_ERASE_POSTINGS = "DELETE FROM memory_words WHERE user_id = ?"
# The rows of one (user, word, task) that may hold ids from lo up to hi: from the row
# holding lo (the greatest first_id at or below it) on.
_SQL_POSTINGS_SPAN = (
    "SELECT first_id, ids FROM memory_words WHERE user_id = ? AND task_id IS ? AND word = ?"
    " AND first_id BETWEEN coalesce((SELECT max(first_id) FROM memory_words WHERE user_id = ?"
    " AND task_id IS ? AND word = ? AND first_id <= ?), ?) AND ?"
)
_SQL_REWRITE_POSTINGS = (
    "UPDATE memory_words SET first_id = ?, ids = ?"
    " WHERE user_id = ? AND task_id IS ? AND word = ? AND first_id = ?"
)
_SQL_DROP_POSTINGS = (
    "DELETE FROM memory_words WHERE user_id = ? AND task_id IS ? AND word = ? AND first_id = ?"
)
_SQL_CHECKPOINT = "PRAGMA wal_checkpoint(TRUNCATE)"
# The operator's aggregate: counts only, across users by design, so it is the one read
# without the scope predicate. No call made for a user uses it.
_SQL_STATS = "SELECT count(*), count(task_id), count(DISTINCT user_id) FROM memories"

log = logging.getLogger("memory")
_Row = TypeVar("_Row")


# -- errors ----------------------------------------------------------------------------

class MemoryInputError(ValueError):
    """An invalid scope, level, text, source or limit; nothing was written."""

    def __init__(self, message: str, position: int | None = None) -> None:
        super().__init__(message)
        #: In a bulk call, the 0-based position of the first bad item.
        self.position = position


class StoreError(RuntimeError):
    """The store could not carry out the operation: closed, read-only, full or locked."""


class SchemaError(StoreError):
    """The file is not a memory store this code can read: foreign, newer or damaged."""


def _store_error(exc: sqlite3.Error, path: str) -> StoreError:
    """The module's error for a sqlite3 one: damage is a SchemaError, the rest StoreError."""
    damaged = (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB)
    if getattr(exc, "sqlite_errorcode", 0) & 0xFF in damaged:
        return SchemaError(f"{path} is not a readable memory store: {exc}")
    return StoreError(f"{path}: {exc}")


# -- scope and validation --------------------------------------------------------------

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


def _check_path(path: object) -> str:
    if not isinstance(path, (str, os.PathLike)):
        raise MemoryInputError(f"path must be a str or os.PathLike, got {type(path).__name__}")
    checked = os.fspath(path)
    if not isinstance(checked, str) or not checked or "\x00" in checked:
        raise MemoryInputError(f"path must be a nonempty str path without NUL, got {checked!r:.80}")
    return checked


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


def _check_id(memory_id: object) -> int:
    if isinstance(memory_id, bool) or not isinstance(memory_id, int):
        raise MemoryInputError(f"memory_id must be an int, got {type(memory_id).__name__}")
    if not 1 <= memory_id <= _MAX_ID:
        raise MemoryInputError(f"memory_id must be from 1 to {_MAX_ID}, got {memory_id}")
    return memory_id


def _new_row(scope: Scope, level: str, text: str, source: str) -> tuple[str, str | None, str, str]:
    """Validate one memory to write: (user_id, task_id, text, source)."""
    _check_scope(scope)
    return (
        scope.user,
        scope.task if _check_level(level) == "task" else None,
        _check_text("text", text, MAX_TEXT),
        _check_text("source", source, MAX_TEXT),
    )


def _each_valid(items: object, check: Callable[[Any], _Row], noun: str) -> list[_Row]:
    """Every item checked, or MemoryInputError naming the position of the first bad one."""
    if isinstance(items, (str, bytes, dict)) or not isinstance(items, Iterable):
        raise MemoryInputError(f"{noun}s must be an iterable, got {type(items).__name__}")
    rows = []
    for position, item in enumerate(items):
        try:
            rows.append(check(item))
        except (MemoryInputError, TypeError) as exc:
            raise MemoryInputError(f"{noun} {position}: {exc}", position) from None
    return rows


_RECORD_KEYS = frozenset({"user", "task", "level", "text", "source", "created_at"})


def _record_row(record: object) -> tuple[str, str | None, str, str, str | None]:
    """Validate one exported record as a row to write, keeping its created_at."""
    if not isinstance(record, dict) or set(record) != _RECORD_KEYS:
        keys = sorted(record) if isinstance(record, dict) else type(record).__name__
        raise MemoryInputError(f"a record has exactly the keys {sorted(_RECORD_KEYS)}, not {keys}")
    level = _check_level(record["level"])
    task = record["task"]
    if level == "user" and task is not None:
        raise MemoryInputError("a user-level record has task null")
    # A Scope needs a task; a user-level memory keeps none, so any valid name serves.
    scope = Scope(record["user"], "user-level" if task is None else task)
    created_at = _check_text("created_at", record["created_at"], 64)
    try:
        datetime.fromisoformat(created_at)
    except ValueError:
        raise MemoryInputError(f"created_at is not ISO-8601: {created_at!r}") from None
    return (*_new_row(scope, level, record["text"], record["source"]), created_at)


# -- clocks and words ------------------------------------------------------------------

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


# -- the word index --------------------------------------------------------------------

def _pack(ids: Iterable[int]) -> bytes:
    packed = array.array("q", ids)
    if sys.byteorder == "big":
        packed.byteswap()
    return packed.tobytes()


def _unpack(blob: bytes) -> array.array[int]:
    ids = array.array("q")
    ids.frombytes(blob)
    if sys.byteorder == "big":
        ids.byteswap()
    return ids


def _index_words(
    db: sqlite3.Connection, rows: Iterable[tuple[int, str, str | None, str]], append: bool
) -> None:
    """Add the postings of new (id, user_id, task_id, text) rows, ids ascending."""
    owners: dict[tuple[str, str | None], dict[str, list[int]]] = {}
    for memory_id, user_id, task_id, text in rows:
        by_word = owners.setdefault((user_id, task_id), collections.defaultdict(list))
        for word in words(text):
            by_word[word].append(memory_id)
    groups = (
        (user_id, word, task_id, ids)
        for (user_id, task_id), by_word in owners.items()
        for word, ids in by_word.items()
    )
    new_rows = []
    for user_id, word, task_id, ids in groups:
        if append:
            newest = db.execute(_SQL_NEWEST_POSTINGS, (user_id, task_id, word)).fetchone()
            if newest and newest[1] // 8 + len(ids) <= POSTINGS_PER_ROW:
                db.execute(_SQL_APPEND_POSTINGS, (_pack(ids), user_id, task_id, word, newest[0]))
                continue
        for start in range(0, len(ids), POSTINGS_PER_ROW):
            run = ids[start : start + POSTINGS_PER_ROW]
            new_rows.append((user_id, word, run[0], task_id, _pack(run)))
    db.executemany(_SQL_INSERT_POSTINGS, sorted(new_rows))


def _unindex(db: sqlite3.Connection, user_id: str, rows: list[tuple[Any, ...]]) -> None:
    """Remove the postings of the user's memories `rows` (id, task_id, text, ...)."""
    groups: dict[tuple[str | None, str], set[int]] = collections.defaultdict(set)
    for memory_id, task_id, text, *_ in rows:
        for word in words(text):
            groups[task_id, word].add(memory_id)
    for (task_id, word), gone in groups.items():
        lo, hi = min(gone), max(gone)
        key = (user_id, task_id, word)
        span = db.execute(_SQL_POSTINGS_SPAN, (*key, *key, lo, lo, hi)).fetchall()
        for first_id, blob in span:
            ids = _unpack(blob)
            kept = [i for i in ids if i not in gone]
            if len(kept) == len(ids):
                continue
            if kept:
                db.execute(_SQL_REWRITE_POSTINGS, (kept[0], _pack(kept), *key, first_id))
            else:
                db.execute(_SQL_DROP_POSTINGS, (*key, first_id))


# -- transactions and migrations -------------------------------------------------------

@contextlib.contextmanager
def _transaction(
    db: sqlite3.Connection, begin: str = "BEGIN IMMEDIATE"
) -> Iterator[sqlite3.Connection]:
    """Run the block in one transaction: a write one taking the write lock up front, or
    with `begin="BEGIN"` a read one that sees a single snapshot."""
    db.execute(begin)
    try:
        yield db
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                db.execute("ROLLBACK")
        raise


def _execute_script(db: sqlite3.Connection, script: str) -> None:
    # executescript() would commit on its own, outside the caller's transaction.
    for statement in script.split(";"):
        if statement.strip():
            db.execute(statement)


def _upgrade_to_2(db: sqlite3.Connection) -> None:
    """Version 1 (SPEC Part 1's table) gains AUTOINCREMENT ids and the word index."""
    # When a later version changes these tables, freeze their version-2 text here.
    db.execute("ALTER TABLE memories RENAME TO memories_v1")
    db.execute(_CREATE_MEMORIES)
    db.execute(
        "INSERT INTO memories (id, user_id, task_id, text, source, created_at)"
        " SELECT id, user_id, task_id, text, source, created_at FROM memories_v1 ORDER BY id"
    )
    # Dropping the old table drops its index too, whatever a version-1 writer named it.
    db.execute("DROP TABLE memories_v1")
    db.execute(_CREATE_SCOPE_INDEX)
    db.execute(_CREATE_WORDS)
    rows = db.execute("SELECT id, user_id, task_id, text FROM memories ORDER BY id")
    _index_words(db, rows, append=False)


# (version a file is at after the step, the step); a file at version v runs every
# step whose target is above v, in order, all in one transaction with the version bump.
MIGRATIONS: list[tuple[int, Callable[[sqlite3.Connection], None]]] = [
    (2, _upgrade_to_2),
]
# The version each table first appears in: a file stamped with a version must have them.
_TABLE_SINCE = {"memories": 1, "memory_words": 2}


def _layout(db: sqlite3.Connection, path: str) -> int:
    """The file's schema version, or SchemaError if this code cannot read it."""
    try:
        version, objects = db.execute(_SQL_LAYOUT).fetchone()
    except sqlite3.Error as exc:
        raise _store_error(exc, path) from exc
    if version == 0 and objects:
        raise SchemaError(f"{path} holds tables but no schema version: not a memory store")
    if not 0 <= version <= SCHEMA_VERSION:
        raise SchemaError(
            f"{path} has database schema version {version};"
            f" this code reads versions 1 to {SCHEMA_VERSION}"
        )
    tables = {name for (name,) in db.execute(_SQL_TABLES)}
    missing = sorted(t for t, since in _TABLE_SINCE.items() if since <= version and t not in tables)
    if missing:
        raise SchemaError(f"{path} claims schema version {version} but has no table {missing[0]}")
    return int(version)


def _prepare(db: sqlite3.Connection, path: str, writable: bool) -> None:
    """Create or upgrade the file's schema; refuse a file this code cannot read."""
    version = _layout(db, path)
    if version == SCHEMA_VERSION:
        return
    if not writable:
        raise SchemaError(f"{path} is at schema version {version} and opened read-only")
    with _transaction(db):
        # Read again under the write lock: another process may have done it meanwhile.
        version = _layout(db, path)
        if version == 0:
            _execute_script(db, SCHEMA)
        for target, step in MIGRATIONS:
            if 0 < version < target:
                step(db)
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION:d}")
    if version == 0:
        log.info("created schema version %d", SCHEMA_VERSION)
    elif version < SCHEMA_VERSION:
        log.info("upgraded schema from version %d to %d", version, SCHEMA_VERSION)


# -- the store -------------------------------------------------------------------------

def _create_private(path: str) -> None:
    """Create the file empty and readable by its owner alone, unless it exists."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    except OSError as exc:
        raise StoreError(f"cannot create {path}: {exc.strerror}") from exc
    try:
        os.fchmod(fd, 0o600)  # the umask may have taken the owner's bits away
    finally:
        os.close(fd)


# Open stores, so that a forked child can give each a lock of its own: the parent's
# may have been held by a thread that does not exist in the child.
_OPEN_STORES: weakref.WeakSet[MemoryStore] = weakref.WeakSet()


# Connections a forked child inherited. SQLite forbids using them in the child, and
# closing one there could disturb the parent's locks, so the child only keeps them.
_INHERITED: list[sqlite3.Connection] = []


def _after_fork_in_child() -> None:
    for store in list(_OPEN_STORES):
        store._lock = threading.RLock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _level_of(task_id: str | None) -> str:
    return "user" if task_id is None else "task"


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


def _id_span(ids: list[int]) -> str:
    return f"{ids[0]}..{ids[-1]}" if ids else "none"


class MemoryStore:
    """Memories of many users in one SQLite file, each operation confined to a scope.

    One store may be shared by threads; processes each open their own on the same file.
    `read_only` opens an existing store without writing to it. `durable=False` trades the
    last commits before a power loss (never before a process crash) for faster writes.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        clock: Callable[[], str] = system_clock,
        *,
        read_only: bool = False,
        durable: bool = True,
    ) -> None:
        self.path = _check_path(path)
        if not callable(clock):
            raise MemoryInputError(f"clock must be callable, got {type(clock).__name__}")
        self.clock = clock
        self.read_only = bool(read_only)
        self.durable = bool(durable)
        self._lock = threading.RLock()
        self._pid = os.getpid()
        self._db: sqlite3.Connection | None = self._connect()
        _OPEN_STORES.add(self)

    def _connect(self) -> sqlite3.Connection:
        if os.path.isdir(self.path):
            raise SchemaError(f"{self.path} is a directory, not a memory store")
        memory_only = self.path == ":memory:"
        if self.read_only:
            if not os.path.isfile(self.path):
                raise StoreError(f"{self.path}: no such memory store")
            uri = f"{pathlib.Path(self.path).absolute().as_uri()}?mode=ro"
            target, is_uri = uri, True
        else:
            if not memory_only:
                _create_private(self.path)
            target, is_uri = self.path, False
        try:
            db = sqlite3.connect(
                target,
                isolation_level=None,
                timeout=BUSY_TIMEOUT_SECONDS,
                check_same_thread=False,
                uri=is_uri,
            )
        except sqlite3.Error as exc:
            raise _store_error(exc, self.path) from exc
        try:
            # A failure to create or upgrade re-raises sqlite3's own error (SPEC Part 1).
            _prepare(db, self.path, writable=not self.read_only)
            self._configure(db, memory_only)
        except BaseException:
            db.close()
            raise
        log.info("opened %s read_only=%s", self.path, self.read_only)
        return db

    def _configure(self, db: sqlite3.Connection, memory_only: bool) -> None:
        # Only once the file is known to be ours: WAL changes the file's header. WAL lets
        # readers go on while one process writes; FULL syncs every commit to the disk.
        try:
            db.execute(f"PRAGMA cache_size = -{_CACHE_KIB:d}")
            db.execute("PRAGMA secure_delete = ON")
            (journal,) = db.execute("PRAGMA journal_mode").fetchone()
            if journal != "wal" and not self.read_only and not memory_only:
                db.execute("PRAGMA journal_mode = WAL")
            db.execute(f"PRAGMA synchronous = {'FULL' if self.durable else 'NORMAL'}")
        except sqlite3.Error as exc:
            raise _store_error(exc, self.path) from exc

    # -- the object ----------------------------------------------------------------

    @property
    def db(self) -> sqlite3.Connection:
        """The open connection (tests trace it); a forked child gets one of its own."""
        with self._lock:
            if self._db is None:
                raise StoreError("MemoryStore is closed")
            if self._pid != os.getpid():
                _INHERITED.append(self._db)
                self._db, self._pid = None, os.getpid()
                self._db = self._connect()
            return self._db

    def close(self) -> None:
        """Close the file; closing again does nothing."""
        with self._lock:
            if self._db is not None and self._pid != os.getpid():
                _INHERITED.append(self._db)
            elif self._db is not None:
                self._db.close()
            self._db = None
            _OPEN_STORES.discard(self)

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
                raise _store_error(exc, self.path) from exc

    @contextlib.contextmanager
    def _writing(self) -> Iterator[sqlite3.Connection]:
        with self._reading() as db, _transaction(db):
            yield db

    # -- memories ------------------------------------------------------------------

    def remember(self, scope: Scope, level: str, text: str, source: str) -> int:
        """Keep `text` at `level` for the scope's user; return its new id."""
        (memory_id,) = self._insert([(*_new_row(scope, level, text, source), None)])
        return memory_id

    def remember_many(self, items: Iterable[tuple[Scope, str, str, str]]) -> list[int]:
        """Keep many (scope, level, text, source) items in one transaction; all or none."""
        return self._insert(_each_valid(items, lambda item: (*_new_row(*item), None), "item"))

    def import_memories(self, records: Iterable[dict[str, Any]]) -> list[int]:
        """Keep exported records (user, task, level, text, source, created_at), each with
        its own created_at, in one transaction; all or none."""
        return self._insert(_each_valid(records, _record_row, "record"))

    def _insert(self, rows: list[tuple[str, str | None, str, str, str | None]]) -> list[int]:
        """Write validated (user_id, task_id, text, source, created_at or None) rows."""
        with self._writing() as db:
            (last_id,) = db.execute(_SQL_LAST_ID).fetchone()
            ids = list(range(last_id + 1, last_id + 1 + len(rows)))
            numbered = list(zip(ids, rows, strict=True))
            db.executemany(_SQL_INSERT, [(i, *row[:4], row[4] or self._now())
                                         for i, row in numbered])
            new = ((memory_id, *row[:3]) for memory_id, row in numbered)
            _index_words(db, new, append=len(rows) <= _APPEND_UP_TO)
        task_level = sum(row[1] is not None for row in rows)
        log.info("remembered %d memories (%d user level, %d task level), ids %s",
                 len(ids), len(ids) - task_level, task_level, _id_span(ids))
        return ids

    def _now(self) -> str:
        reading = self.clock()
        if not isinstance(reading, str):
            raise MemoryInputError(f"clock must return a str, got {type(reading).__name__}")
        return reading

    def recall(self, scope: Scope, query: str, limit: int = 3) -> list[dict[str, Any]]:
        """The memories visible in the scope that share most words with `query`."""
        _check_scope(scope)
        _check_limit(limit)
        wanted = words(_check_text("query", query, MAX_QUERY, blank=True))
        if not wanted:
            return []
        scoped = (scope.user, scope.task)
        with self._reading() as db, _transaction(db, "BEGIN"):
            # An id sits in one row per word, so its count is the number of shared words.
            postings = db.execute(_SQL_POSTINGS, (*scoped, json.dumps(sorted(wanted))))
            shared = collections.Counter(_unpack(b"".join(map(operator.itemgetter(0), postings))))
            best = heapq.nlargest(limit, zip(shared.values(), shared.keys(), strict=True))
            found = db.execute(_SQL_RECALLED, (*scoped, json.dumps([i for _, i in best])))
            rows = {row[0]: row for row in found}
        return [_memory(rows[i], score=score) for score, i in best if i in rows]

    def count(self, scope: Scope) -> int:
        """How many memories are visible in the scope."""
        _check_scope(scope)
        with self._reading() as db:
            (visible,) = db.execute(_SQL_COUNT, (scope.user, scope.task)).fetchone()
        return int(visible)

    # -- seeing and forgetting -------------------------------------------------------

    def memories(self, scope: Scope) -> list[dict[str, Any]]:
        """Every memory visible in the scope, oldest first."""
        _check_scope(scope)
        with self._reading() as db:
            rows = db.execute(_SQL_VISIBLE, (scope.user, scope.task)).fetchall()
        return [_memory(row) for row in rows]

    def forget(self, scope: Scope, memory_id: int) -> bool:
        """Delete the memory if the scope can see it. False for any id it cannot see,
        whether unknown, another task's or another user's: all answer alike."""
        _check_scope(scope)
        arguments = (scope.user, scope.task, _check_id(memory_id))
        return bool(self._forget(scope, _SQL_VISIBLE_ID, arguments))

    def forget_source(self, scope: Scope, source: str) -> int:
        """Delete every memory visible in the scope that came from `source`."""
        _check_scope(scope)
        arguments = (scope.user, scope.task, _check_text("source", source, MAX_TEXT))
        return self._forget(scope, _SQL_VISIBLE_SOURCE, arguments)

    def _forget(self, scope: Scope, select: str, arguments: tuple[Any, ...]) -> int:
        with self._writing() as db:
            rows = db.execute(select, arguments).fetchall()
            _unindex(db, scope.user, rows)
            ids = [row[0] for row in rows]
            deleted = db.execute(_SQL_FORGET, (scope.user, scope.task, json.dumps(ids))).rowcount
        self._scrub()
        log.info("forgot %d memories of user %s, ids %s", deleted, scope.user, ids)
        return int(deleted)

    def erase_user(self, user: str) -> int:
        """Delete every memory the user owns, at every level and in every task."""
        user = _check_identifier("user", user)
        with self._writing() as db:
            db.execute(_SQL_ERASE_POSTINGS, (user,))
            erased = db.execute(_SQL_ERASE, (user,)).rowcount
        self._scrub()
        log.info("erased %d memories of user %s", erased, user)
        return int(erased)

    def export_user(self, user: str) -> list[dict[str, Any]]:
        """Every memory the user owns, oldest first, each with its task (None: user level)."""
        user = _check_identifier("user", user)
        with self._reading() as db:
            rows = db.execute(_SQL_OWNED, (user,)).fetchall()
        return [{"id": row[0], "task": row[1], **_memory(row)} for row in rows]

    def _scrub(self) -> None:
        # secure_delete zeroed the deleted cells in the new page images; checkpointing
        # copies them over the old ones and truncating the WAL drops its older frames.
        with self._reading() as db:
            busy, _, _ = db.execute(_SQL_CHECKPOINT).fetchone()
        if busy:
            log.warning("checkpoint blocked by a reader; deleted text stays in the WAL until"
                        " the next checkpoint")

    # -- operating -------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """Counts by level and users, schema version and bytes on disk; never text."""
        with self._reading() as db, _transaction(db, "BEGIN"):
            total, task_level, users = db.execute(_SQL_STATS).fetchone()
            (version,) = db.execute("PRAGMA user_version").fetchone()
        files = [self.path, f"{self.path}-wal"]
        return {
            "schema_version": version,
            "memories": total,
            "user_level": total - task_level,
            "task_level": task_level,
            "users": users,
            "file_bytes": sum(os.path.getsize(f) for f in files if os.path.isfile(f)),
        }

    def check(self) -> dict[str, Any]:
        """SQLite's integrity check of the whole file, and its schema version."""
        with self._reading() as db:
            problems = [row[0] for row in db.execute("PRAGMA integrity_check")]
            (version,) = db.execute("PRAGMA user_version").fetchone()
        return {"ok": problems == ["ok"], "integrity": problems, "schema_version": version}

    def backup(self, destination: str | os.PathLike[str]) -> None:
        """Copy the store, as one consistent snapshot, to a new file readable by its owner
        alone; other processes may go on writing meanwhile."""
        target_path = _check_path(destination)
        if os.path.exists(target_path) and os.path.getsize(target_path):
            raise StoreError(f"{target_path} exists; a backup never overwrites a file")
        _create_private(target_path)
        try:
            target = sqlite3.connect(target_path)
        except sqlite3.Error as exc:
            raise _store_error(exc, target_path) from exc
        try:
            with self._reading() as db:
                db.backup(target)  # all pages in one step: one read snapshot
        finally:
            target.close()
        log.info("backed up %s to %s", self.path, target_path)


# -- the command line ----------------------------------------------------------------

def _identifier(value: str) -> str:
    if IDENTIFIER.fullmatch(value) is None:
        raise argparse.ArgumentTypeError(f"{value!r} is not an id ({IDENTIFIER.pattern})")
    return value


def _bounded_int(low: int, high: int) -> Callable[[str], int]:
    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from None
        if not low <= number <= high:
            raise argparse.ArgumentTypeError(f"{number} is not from {low} to {high}")
        return number

    return parse


def _emit(value: object) -> None:
    print(json.dumps(value, ensure_ascii=False))


def _exported(memory: dict[str, Any], user: str) -> dict[str, Any]:
    return {"user": user, **{key: memory[key] for key in ("task", "level", "text", "source",
                                                           "created_at")}}


def _run_stats(args: argparse.Namespace) -> int:
    with MemoryStore(args.path, read_only=True) as store:
        print(json.dumps(store.stats(), indent=2))
    return 0


def _run_list(args: argparse.Namespace) -> int:
    with MemoryStore(args.path, read_only=True) as store:
        for memory in store.memories(Scope(args.user, args.task)):
            _emit(memory)
    return 0


def _run_recall(args: argparse.Namespace) -> int:
    with MemoryStore(args.path, read_only=True) as store:
        for memory in store.recall(Scope(args.user, args.task), args.query, args.limit):
            _emit(memory)
    return 0


def _run_export(args: argparse.Namespace) -> int:
    with MemoryStore(args.path, read_only=True) as store:
        for memory in store.export_user(args.user):
            _emit(_exported(memory, args.user))
    return 0


def _run_import(args: argparse.Namespace) -> int:
    records, line_of = [], []
    opened = open(args.file, encoding="utf-8") if args.file != "-" else contextlib.nullcontext(
        sys.stdin
    )
    with opened as source:
        for number, line in enumerate(source, start=1):
            if line.strip():
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise MemoryInputError(f"line {number}: not JSON: {exc.msg}") from None
                line_of.append(number)
    try:
        rows = _each_valid(records, _record_row, "record")
    except MemoryInputError as exc:
        assert exc.position is not None
        reason = str(exc).partition(": ")[2]
        raise MemoryInputError(f"line {line_of[exc.position]}: {reason}") from None
    # Validated before the store is opened, so bad input does not even create the file.
    with MemoryStore(args.path) as store:
        ids = store._insert(rows)
    print(f"imported {len(ids)} memories")
    return 0


def _existing(path: str) -> MemoryStore:
    """A writable store on a file that must already exist: no command creates one by typo."""
    if not os.path.isfile(path):
        raise StoreError(f"{path}: no such memory store")
    return MemoryStore(path)


def _run_forget(args: argparse.Namespace) -> int:
    with _existing(args.path) as store:
        if not store.forget(Scope(args.user, args.task), args.id):
            raise StoreError(f"no memory {args.id} in scope {args.user}/{args.task}")
    print(f"forgot memory {args.id}")
    return 0


def _run_erase_user(args: argparse.Namespace) -> int:
    with _existing(args.path) as store:
        erased = store.erase_user(args.user)
    print(f"erased {erased} memories of {args.user}")
    return 0


def _run_check(args: argparse.Namespace) -> int:
    with MemoryStore(args.path, read_only=True) as store:
        report = store.check()
    print(json.dumps(report, indent=2))
    return 0 if report["ok"] else 1


def _run_backup(args: argparse.Namespace) -> int:
    with MemoryStore(args.path, read_only=True) as store:
        store.backup(args.destination)
    print(f"backed up {args.path} to {args.destination}")
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="memory",
        description="Inspect, export, import, back up and erase a memory.py store.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="log what the store does (ids, levels, counts) on stderr")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, run: Callable[[argparse.Namespace], int], summary: str,
                user: bool = False, task: bool = False) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=summary, description=summary)
        sub.add_argument("path", metavar="PATH", help="the store's SQLite file")
        if user:
            sub.add_argument("--user", required=True, type=_identifier, help="the user id")
        if task:
            sub.add_argument("--task", required=True, type=_identifier, help="the task id")
        sub.set_defaults(run=run, usage=sub)
        return sub

    command("stats", _run_stats, "counts by level and users, schema version, file size")
    command("list", _run_list, "every memory the scope sees, oldest first, as JSON Lines",
            user=True, task=True)
    recall = command("recall", _run_recall, "the memories that best match QUERY, as JSON Lines",
                     user=True, task=True)
    recall.add_argument("query", metavar="QUERY")
    recall.add_argument("--limit", type=_bounded_int(1, MAX_LIMIT), default=3,
                        help=f"at most this many (1 to {MAX_LIMIT}, default 3)")
    command("export", _run_export, "every memory of the user, as JSON Lines on stdout",
            user=True)
    importing = command("import", _run_import,
                        "add JSON Lines records (as export writes them), all or none;"
                        " creates the store if it does not exist")
    importing.add_argument("file", metavar="FILE", help="a JSON Lines file, or - for stdin")
    forget = command("forget", _run_forget, "forget one memory the scope sees",
                     user=True, task=True)
    forget.add_argument("id", metavar="ID", type=_bounded_int(1, _MAX_ID))
    erase = command("erase-user", _run_erase_user,
                    "forget every memory of the user, in every task", user=True)
    erase.add_argument("--yes", action="store_true", help="confirm the erasure")
    command("check", _run_check, "integrity check and schema version; exit 1 unless ok")
    backup = command("backup", _run_backup,
                     "copy the store, consistently, while others may write to it")
    backup.add_argument("destination", metavar="DEST", help="a file that does not exist yet")
    return parser


def main(argv: list[str] | None = None) -> int:
    """The `memory` command: 0 on success, 2 on a usage error, 1 on a store error."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "erase-user" and not args.yes:
        args.usage.error("erase-user removes every memory of the user; add --yes to confirm")
    if args.verbose:
        logging.basicConfig(level=logging.DEBUG, format="%(name)s: %(levelname)s: %(message)s")
    try:
        return int(args.run(args))
    except BrokenPipeError:  # e.g. `memory export ... | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except (StoreError, MemoryInputError, OSError) as exc:
        print(f"memory: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
