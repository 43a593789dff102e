"""What reading the past costs: get, a page and recall as of a time, beside a floor and the
same reads now. Prints tables; never a test.

    python3 bench/bench_time.py                  # SQLite and a throw-away PostgreSQL
    python3 bench/bench_time.py --sqlite-only
    python3 bench/bench_time.py --largest 10000  # leave out the scopes above 10,000

One user's task holds N keyed memories (1,000, 10,000 and 100,000, each with 200 versions;
and 10,000 with 100,000 versions), in a store that keeps history. They are written a
thousand to a tick of the clock (a second), then their keys are replaced in turn, a
thousand to a tick, until the versions are there. The time read as of is the tick before
the last batch of replaces: the memories live then are the last batch's versions and
every other key's live memory. In the same run, on the same rows, each the median of
many calls:

- get(key, as_of) of a key of the last batch (its version then) and of any key, and
  get(key) now;
- memories(limit=20, as_of): the oldest 20 live then, and the newest 20 (newest_first);
- memories(key_prefix="", limit=20, as_of): the first 20 keys live then, beside the
  same listing now;
- recall(query, 5, rank="idf", as_of) of three of the words, beside the same recall now
  and beside the copy of the scope as it read then that every recall as of a time ranked
  in before (and vectors and context still do), each answer checked against the copy's;
- the floor: a plain table of the same versions, each a row with the window it was live
  in (valid_from, valid_to: UTC times of one fixed form), indexed on (user_id, key,
  valid_from) and on (user_id, id): the get as the newest version of the key from at or
  before the time, whose window is open then; the page as the ids walked up (or down)
  whose window holds the time. It keeps nothing else a store keeps (no expiry, no tasks,
  no scope beside the user), so it is what the index alone costs.

A page passes over the rows that were not live at the time read (the oldest 20 walk past
the versions superseded before it, the newest 20 past what was written after it): the
floor's walk passes over the same rows, in SQL, where the store's tests each in Python.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import platform
import random
import sqlite3
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from timing import p50_ms  # noqa: E402

import memory  # noqa: E402
from memory import MemoryStore, Scope  # noqa: E402
from tables import format_table  # noqa: E402

USER = Scope("bench", "trip")
BATCH = 1_000
START = 1_792_486_800  # 2026-10-20T09:00:00Z
WORDS = [f"w{n}" for n in range(2_000)]
CASES = [(1_000, 200), (10_000, 200), (100_000, 200), (10_000, 100_000)]

_FLOOR_TABLE = """CREATE TABLE versions (
    user_id TEXT NOT NULL,
    id BIGINT NOT NULL,
    key TEXT NOT NULL,
    text TEXT NOT NULL,
    valid_from TEXT NOT NULL,
    valid_to TEXT
)"""
_FLOOR_INDEXES = ("CREATE INDEX versions_key ON versions (user_id, key, valid_from)",
                  "CREATE INDEX versions_id ON versions (user_id, id)")
_FLOOR_GET = ("SELECT id, key, text, valid_from, valid_to FROM versions WHERE user_id = ?"
              " AND key = ? AND valid_from <= ? ORDER BY valid_from DESC LIMIT 1")
_FLOOR_PAGE = ("SELECT id, key, text, valid_from, valid_to FROM versions WHERE user_id = ?"
               " AND valid_from <= ? AND (valid_to IS NULL OR valid_to > ?)"
               " ORDER BY id {order} LIMIT 20")


class Clock:
    """A clock at a tick, moved on by the bench: the system clock's form, to the second."""

    def __init__(self) -> None:
        self.second = START

    def __call__(self) -> str:
        return memory._utc_second(self.second)


def instant(reading: str) -> str:
    return memory._utc_form("bench", reading) or ""


def fill(store: MemoryStore, clock: Clock, size: int, versions: int
         ) -> tuple[list[tuple[Any, ...]], str, list[str]]:
    """Write the case; the floor's rows (user, id, key, text, from, to), the time read as
    of and the keys of the last batch."""
    draw = random.Random(size + versions)
    current: dict[str, tuple[int, str, str]] = {}
    floor: list[tuple[Any, ...]] = []
    keys = [f"k{n:06}" for n in range(size)]
    order = itertools.chain(keys, itertools.islice(itertools.cycle(keys), versions))
    then, last = "", []
    while batch := list(itertools.islice(order, BATCH)):
        then = instant(clock())  # the tick before this batch's, and the last batch's
        clock.second += 1
        texts = [" ".join(draw.choices(WORDS, k=10)) for _ in batch]
        ids = store.remember_many([(USER, "task", text, "s/1", None, key)
                                   for key, text in zip(batch, texts, strict=True)])
        now = instant(clock())
        for key, text, memory_id in zip(batch, texts, ids, strict=True):
            if key in current:
                old_id, old_text, since = current[key]
                floor.append((USER.user, old_id, key, old_text, since, now))
            current[key] = (memory_id, text, now)
        last = batch
    floor += [(USER.user, memory_id, key, text, since, None)
              for key, (memory_id, text, since) in current.items()]
    return floor, then, last


def copied(store: MemoryStore, read: Callable[[], Any]) -> Any:
    """What `read` reads where every recall as of a time ranks in a copy of the scope as
    it read then (as each did before it ranked where the memories are)."""
    store._planner.recalled_then = lambda asked: None  # type: ignore[method-assign]
    try:
        return read()
    finally:
        del store._planner.recalled_then


def floor_sqlite(path: str, rows: list[tuple[Any, ...]]
                 ) -> Callable[[str, tuple[Any, ...]], list[Any]]:
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute(_FLOOR_TABLE)
    with db:
        db.executemany("INSERT INTO versions VALUES (?, ?, ?, ?, ?, ?)", rows)
    for statement in _FLOOR_INDEXES:
        db.execute(statement)
    db.execute("ANALYZE")

    def read(sql: str, arguments: tuple[Any, ...]) -> list[Any]:
        db.execute("BEGIN")  # one snapshot, as every read of the store's is
        try:
            return db.execute(sql, arguments).fetchall()
        finally:
            db.execute("COMMIT")
    return read


def floor_postgres(url: str, rows: list[tuple[Any, ...]]
                   ) -> Callable[[str, tuple[Any, ...]], list[Any]]:
    import psycopg
    db = psycopg.connect(url, autocommit=True)
    db.execute(_FLOOR_TABLE)
    with db.cursor() as cursor, cursor.copy("COPY versions FROM STDIN") as copy:
        for row in rows:
            copy.write_row(row)
    for statement in _FLOOR_INDEXES:
        db.execute(statement)
    db.execute("ANALYZE versions")

    def read(sql: str, arguments: tuple[Any, ...]) -> list[Any]:
        with db.transaction():  # one snapshot, as every read of the store's is
            return db.execute(sql.replace("?", "%s"), arguments).fetchall()
    return read


def case(location: str, floor_at: Callable[[list[tuple[Any, ...]]], Callable[..., Any]],
         engine: str, size: int, versions: int) -> dict[str, Any]:
    clock = Clock()
    with MemoryStore(location, clock=clock, history=True) as store:
        rows, then, last = fill(store, clock, size, versions)
        floor = floor_at(rows)
        picked = itertools.cycle(random.Random(1).sample(last, min(50, len(last))))
        anywhere = itertools.cycle(random.Random(2).sample(
            [f"k{n:06}" for n in range(size)], 50))
        # The same answers, first: the floor is a floor of this read.
        for key in itertools.islice(picked, 20):
            found = store.get(USER, key=key, as_of=then)
            (floor_row,) = floor("SELECT id, key, text, valid_from, valid_to FROM versions"
                                 " WHERE user_id = ? AND key = ? AND valid_from <= ?"
                                 " AND (valid_to IS NULL OR valid_to > ?)",
                                 (USER.user, key, then, then))
            assert found is not None and found["id"] == floor_row[0], key
        assert store.memories(USER, key_prefix="", limit=20, as_of=then) == sorted(
            store.memories(USER, limit=None, as_of=then), key=lambda m: m.get("key") or "")[:20]
        for order, newest in (("", False), ("DESC", True)):
            page = store.memories(USER, limit=20, newest_first=newest, as_of=then)
            assert [m["id"] for m in page] == [row[0] for row in floor(
                _FLOOR_PAGE.format(order=order), (USER.user, then, then))]
        queries = itertools.cycle([" ".join(random.Random(n).sample(WORDS, 3))
                                   for n in range(50)])

        def as_copied(query: str) -> None:
            found = copied(store, lambda: store.recall(USER, query, 5, rank="idf", as_of=then))
            assert found == store.recall(USER, query, 5, rank="idf", as_of=then), query
        # Once, at 100,000 memories: a copy of the scope costs seconds (its own recall,
        # timed with it, a thousandth of that).
        copied_ms = p50_ms(lambda: as_copied(next(queries)), 3 if size < 100_000 else 1)
        return {
            "engine": engine, "memories": size, "versions": versions,
            "get(key, as_of) p50 ms": p50_ms(
                lambda: store.get(USER, key=next(picked), as_of=then), 200),
            "its floor p50 ms": p50_ms(
                lambda: floor(_FLOOR_GET, (USER.user, next(picked), then)), 200),
            "get(key) now p50 ms": p50_ms(lambda: store.get(USER, key=next(picked)), 200),
            "get(any key, as_of) p50 ms": p50_ms(
                lambda: store.get(USER, key=next(anywhere), as_of=then), 200),
            "oldest 20 as_of p50 ms": p50_ms(
                lambda: store.memories(USER, limit=20, as_of=then), 20),
            "their floor p50 ms": p50_ms(
                lambda: floor(_FLOOR_PAGE.format(order=""), (USER.user, then, then)), 20),
            "newest 20 as_of p50 ms": p50_ms(
                lambda: store.memories(USER, limit=20, newest_first=True, as_of=then), 20),
            "theirs p50 ms": p50_ms(
                lambda: floor(_FLOOR_PAGE.format(order="DESC"), (USER.user, then, then)),
                20),
            "first 20 by key as_of p50 ms": p50_ms(
                lambda: store.memories(USER, key_prefix="", limit=20, as_of=then), 20),
            "first 20 by key now p50 ms": p50_ms(
                lambda: store.memories(USER, key_prefix="", limit=20), 20),
            "recall as_of p50 ms": p50_ms(
                lambda: store.recall(USER, next(queries), 5, rank="idf", as_of=then), 50),
            "recall now p50 ms": p50_ms(
                lambda: store.recall(USER, next(queries), 5, rank="idf"), 50),
            "recall as_of copied p50 ms": copied_ms}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sqlite-only", action="store_true")
    parser.add_argument("--largest", type=int, default=100_000)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="memory-bench-time-"))
    files: Iterator[str] = (str(folder / f"{n}.db") for n in itertools.count())
    engines: list[tuple[str, Callable[[], tuple[str, Callable[..., Any]]]]] = [
        ("SQLite", lambda: (next(files), functools.partial(floor_sqlite, next(files))))]
    server = None
    if not args.sqlite_only:
        from pg_server import bench_server
        server = bench_server()

        def on_postgres() -> tuple[str, Callable[..., Any]]:
            floor_url = server.new_database()
            return server.new_database(), lambda rows: floor_postgres(floor_url, rows)
        engines.append(("PostgreSQL", on_postgres))
    print(f"memory.py {memory.__version__}, Python {platform.python_version()}")
    try:
        table = []
        for size, versions in CASES:
            if size > args.largest:
                continue
            for engine, where in engines:
                location, floor_at = where()
                table.append(case(location, floor_at, engine, size, versions))
                print(format_table(table[-1:]), flush=True)
        print(f"\nAs of a time\n\n{format_table(table)}")
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
