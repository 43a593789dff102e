"""Write rates beside a plain table, on Zipf text and conversational turns: prints a table;
never a test.

    python3 bench/bench_writes.py [--size 50000] [--no-postgres] [--floors]
    python3 bench/bench_writes.py --pooler-only

For each engine (SQLite; PostgreSQL on a throw-away server with fsync on, where its
binaries are here) and each workload (Zipf: 5 to 15 words, as bench_memory.py draws them;
turns: one to three sentences, bench/turns.py), memory.py (RECOMMENDED, no embedder)
against a plain one-table schema (id, user, task, level, text, source, created_at, one
(user, task) index) on the same engine and settings, in one run:

- bulk: SIZE memories of one user (and SIZE of ten others, interleaved), remember_many in
  batches of 10,000, against executemany of the same rows in a transaction a batch;
- durable: single writes, each its own transaction synced to disk (SQLite synchronous
  FULL, PostgreSQL's commit), in rounds of 25 alternating between the two, so a noisy
  neighbour slows them alike.
Rates are memories a second; "ratio" is memory.py's over the plain table's. `--floors`
adds, on turns, where a durable write's time goes (time_goes): the store as it is, without
sync, without its word index and without both, beside the plain table (and on PostgreSQL
the plain insert in as many round trips as a remember takes). `--pooler-only` gives a
durable write and a recall on PostgreSQL direct and through PgBouncer (through_pooler).
"""

from __future__ import annotations

import argparse
import functools
import random
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench"), str(ROOT / "tests")]

from bench_memory import Zipf  # noqa: E402
from bench_vectors import postgres  # noqa: E402
from turns import turn  # noqa: E402

import memory  # noqa: E402
from memory import MemoryStore, Scope, system_clock  # noqa: E402
from tables import format_table  # noqa: E402

SEED = 20261204
BATCH = 10_000
SINGLES = 200
ME = Scope("bench-user", "task-1")
PLAIN_SCHEMA = ("CREATE TABLE plain (id {id}, user_id TEXT NOT NULL, task_id TEXT,"
                " level TEXT NOT NULL, text TEXT NOT NULL, source TEXT NOT NULL,"
                " created_at TEXT NOT NULL)",
                "CREATE INDEX plain_scope ON plain (user_id, task_id)")


class Plain:
    """The plain table on one engine: bulk batches and durable single inserts."""

    def __init__(self, target: str) -> None:
        self.postgres = "://" in target
        if self.postgres:
            import psycopg
            self.db: Any = psycopg.connect(target, autocommit=True)
            marker, identity = "%s", "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY"
        else:
            self.db = sqlite3.connect(target, isolation_level=None)
            self.db.execute("PRAGMA journal_mode = WAL")
            self.db.execute("PRAGMA synchronous = FULL")
            marker, identity = "?", "INTEGER PRIMARY KEY"
        for statement in PLAIN_SCHEMA:
            self.db.execute(statement.format(id=identity))
        self.insert = ("INSERT INTO plain (user_id, task_id, level, text, source, created_at)"
                       f" VALUES ({', '.join([marker] * 6)})")

    def bulk(self, rows: list[tuple[str, str]]) -> None:
        values = [(user, "task-1", "user", text, "s", system_clock()) for user, text in rows]
        if self.postgres:
            with self.db.transaction(), self.db.cursor() as cursor:
                cursor.executemany(self.insert, values)
        else:
            self.db.execute("BEGIN")
            self.db.executemany(self.insert, values)
            self.db.execute("COMMIT")

    def one(self, text: str) -> None:
        self.db.execute(self.insert, (ME.user, "task-1", "user", text, "s", system_clock()))

    def three_trips(self, text: str) -> None:
        """The insert in a transaction of a durable remember's three round trips on
        PostgreSQL (BEGIN with the locks and the rule; what the write needs to know; the
        write with COMMIT), each other statement trivial: what the protocol alone costs."""
        with self.db.pipeline():
            self.db.execute("BEGIN")
            self.db.execute("SELECT 1")
        self.db.execute("SELECT 1").fetchall()
        with self.db.pipeline():
            self.one(text)
            self.db.execute("COMMIT")

    def close(self) -> None:
        self.db.close()


def measure(engine: str, workload: str, targets: tuple[str, str], size: int,
            text: Callable[[], str]) -> dict[str, Any]:
    rows = [(f"other-{n % 10}" if n % 2 else ME.user, text()) for n in range(2 * size)]
    singles = iter([text() for _ in range(2 * SINGLES)])
    store, plain = MemoryStore(targets[0], **memory.RECOMMENDED), Plain(targets[1])
    try:
        spent = {"ours": 0.0, "plain": 0.0}
        for start in range(0, len(rows), BATCH):  # batches alternating between the two
            batch = rows[start:start + BATCH]
            began = time.perf_counter()
            store.remember_many([(Scope(user, "task-1"), "user", said, "s")
                                 for user, said in batch])
            spent["ours"] += time.perf_counter() - began
            began = time.perf_counter()
            plain.bulk(batch)
            spent["plain"] += time.perf_counter() - began
        durable = {"ours": 0.0, "plain": 0.0}
        for _ in range(SINGLES // 25):
            began = time.perf_counter()
            for _ in range(25):
                store.remember(ME, "user", next(singles), "s")
            durable["ours"] += time.perf_counter() - began
            began = time.perf_counter()
            for _ in range(25):
                plain.one(next(singles))
            durable["plain"] += time.perf_counter() - began
    finally:
        store.close()
        plain.close()
    bulk = {who: len(rows) / seconds for who, seconds in spent.items()}
    single = {who: SINGLES / seconds for who, seconds in durable.items()}
    return {"engine": engine, "workload": workload,
            "bulk memory.py/s": bulk["ours"], "bulk plain/s": bulk["plain"],
            "bulk ratio": bulk["ours"] / bulk["plain"],
            "durable memory.py/s": single["ours"], "durable plain/s": single["plain"],
            "durable ratio": single["ours"] / single["plain"]}


def time_goes(engine: str, targets: tuple[str, str], size: int,
              text: Callable[[], str]) -> list[dict[str, Any]]:
    """Where a durable single write's time goes, on a store of SIZE memories of the user
    (and SIZE of others): each writer's wall clock a write, this process's CPU time (the
    client's work: Python, the driver, SQLite's engine in-process) and the rest (waiting:
    on the disk's sync, or on the server), in rounds of 25 alternating between writers."""
    stores = [MemoryStore(targets[0], **memory.RECOMMENDED, durable=durable)
              for durable in (True, False, True, False)]
    # The last two never reach the index's threshold, so they write no postings: what a
    # write costs without its word index (a bench's file; recall there would miss them).
    for unindexed in stores[2:]:
        unindexed._index_from = 2**62
    plain = Plain(targets[1])
    try:
        stores[0].remember_many([(Scope(f"other-{n % 10}" if n % 2 else ME.user, "task-1"),
                                  "user", text(), "s") for n in range(2 * size)])
        names = ("memory.py", "memory.py, no sync", "memory.py, no word index",
                 "memory.py, no word index, no sync")
        writers: dict[str, Callable[[str], object]] = {
            name: functools.partial(store.remember, ME, "user", source="s")
            for name, store in zip(names, stores, strict=True)}
        writers["plain table"] = plain.one
        if plain.postgres:
            writers["plain table, three round trips"] = plain.three_trips
        spent = {name: [0.0, 0.0] for name in writers}
        for _ in range(SINGLES // 25):
            for name, write in writers.items():
                said = [text() for _ in range(25)]
                wall, cpu = time.perf_counter(), time.process_time()
                for one in said:
                    write(one)
                spent[name][0] += time.perf_counter() - wall
                spent[name][1] += time.process_time() - cpu
    finally:
        for store in stores:
            store.close()
        plain.close()
    plain_ms = spent["plain table"][0] / SINGLES * 1000
    return [{"engine": engine, "writer": name, "ms a write": wall / SINGLES * 1000,
             "client CPU ms": cpu / SINGLES * 1000, "waiting ms": (wall - cpu) / SINGLES * 1000,
             "rate vs plain": plain_ms / (wall / SINGLES * 1000)}
            for name, (wall, cpu) in spent.items()]


def through_pooler(server: Any, text: Callable[[], str]) -> list[dict[str, Any]]:
    """A durable single write and a recall, direct and through PgBouncer (pooling by
    transaction over 2 server connections) to the same database, and direct with no
    statement prepared on the server, as the store has it through a pooler (which gives a
    prepared statement's server connection to other clients), in rounds of 25 alternating
    between the three; each store of one connection, on a user of its own."""
    from pg_server import Pooler, database_of
    with Pooler(server) as pooler:
        direct = server.new_database()
        MemoryStore(direct).close()
        pooled = pooler.url(database_of(direct))
        stores = {"direct": MemoryStore(direct, pool_size=1),
                  "direct, no statement prepared": MemoryStore(direct, pool_size=1),
                  "through PgBouncer": MemoryStore(pooled, pool_size=1)}
        with stores["direct, no statement prepared"]._reading() as db:
            db.connection.prepare_threshold = None  # type: ignore[attr-defined]
        scopes = {name: Scope(f"pooled-{n}", "task-1") for n, name in enumerate(stores)}
        for name, store in stores.items():
            store.remember_many([(scopes[name], "user", text(), "s") for _ in range(2_000)])
        queries = [" ".join(text().split()[:3]) for _ in range(50)]
        spent = {name: [0.0, 0.0] for name in stores}
        for _ in range(SINGLES // 25):
            for name, store in stores.items():
                said = [text() for _ in range(25)]
                began = time.perf_counter()
                for one in said:
                    store.remember(scopes[name], "user", one, "s")
                spent[name][0] += time.perf_counter() - began
                began = time.perf_counter()
                for query in queries[:25]:
                    store.recall(scopes[name], query, 5)
                spent[name][1] += time.perf_counter() - began
        for store in stores.values():
            store.close()
    write_ms, recall_ms = (spent["direct"][n] / SINGLES * 1000 for n in (0, 1))
    return [{"connection": name, "durable remember ms": wrote / SINGLES * 1000,
             "vs direct": wrote / SINGLES * 1000 / write_ms,
             "recall ms": recalled / SINGLES * 1000,
             "recall vs direct": recalled / SINGLES * 1000 / recall_ms}
            for name, (wrote, recalled) in spent.items()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=50_000)
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument("--floors", action="store_true",
                        help="also: where a durable write's time goes, on turns")
    parser.add_argument("--pooler-only", action="store_true",
                        help="only PostgreSQL direct against through PgBouncer, on turns")
    args = parser.parse_args()
    if args.pooler_only:
        rng = random.Random(SEED)
        with postgres(fsync=True) as server:
            if server is None:
                raise SystemExit("no PostgreSQL server binaries here")
            print(format_table(through_pooler(server, lambda: turn(rng)),
                               cell=lambda value: f"{value:.3f}"))
        return
    rng = random.Random(SEED)
    zipf = Zipf(rng)
    workloads = {"Zipf": zipf.text, "turns": lambda: turn(rng)}
    print(f"memory.py {memory.__version__}, SQLite {sqlite3.sqlite_version},"
          f" {args.size:,} memories of one user and as many of ten others")
    rows: list[dict[str, Any]] = []
    floors: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as folder:
        for name, text in workloads.items():
            rows.append(measure("SQLite", name, (f"{folder}/{name}.db",
                                                 f"{folder}/{name}-plain.db"), args.size, text))
        if args.floors:
            floors += time_goes("SQLite", (f"{folder}/floors.db", f"{folder}/floors-plain.db"),
                                args.size, workloads["turns"])
        if not args.no_postgres:
            with postgres(fsync=True) as server:
                if server is None:
                    print("PostgreSQL skipped: its server binaries are not here")
                for name, text in workloads.items() if server is not None else ():
                    rows.append(measure("PostgreSQL", name, (server.new_database(),
                                                             server.new_database()),
                                        args.size, text))
                if args.floors and server is not None:
                    floors += time_goes("PostgreSQL", (server.new_database(),
                                                       server.new_database()),
                                        args.size, workloads["turns"])
    print(format_table(rows, cell=lambda value: f"{value:,.0f}" if value >= 100
                       else f"{value:.3f}"))
    if floors:
        print(f"\nWhere a durable write's time goes (turns, {SINGLES} writes each):")
        print(format_table(floors, cell=lambda value: f"{value:.3f}"))


if __name__ == "__main__":
    main()
