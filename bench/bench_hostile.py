"""What hostile but valid input costs: prints a table; never run as a test.

    python3 bench/bench_hostile.py [--library DIR] [--no-postgres]

Two inputs any user can send. A query of about 20,000 characters holding 5,000 distinct
words, against a scope of 2,000 memories, beside a full scan of that scope (fetch every
visible row, score it in Python); and a remember_many of 3,000 memories, one for each of
3,000 users, beside the same batch for one user (the fastest of five of each), and for
3,000 users who hold 20 memories apiece already. And the fastest of 50 recalls in a scope
of 15 memories (stems, idf). SQLite on a file, and PostgreSQL on a server this script
starts (as the tests do).
--library DIR imports memory.py from DIR instead, to measure an earlier version in the
same session.
"""

from __future__ import annotations

import argparse
import importlib
import pathlib
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "bench")]

from pg_server import Server, server_binaries  # noqa: E402
from tables import format_table  # noqa: E402

MEMORIES, QUERY_WORDS, BATCH = 2_000, 5_000, 3_000
HELD, SMALL = 20, 15


def best_of(call: Callable[[], object], repeat: int = 3) -> float:
    """Milliseconds of the fastest of `repeat` calls."""
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        call()
        times.append((time.perf_counter() - began) * 1000)
    return min(times)


def long_query(rng: random.Random, vocabulary: list[str]) -> str:
    """QUERY_WORDS distinct words, about 20,000 characters, a fifth of them held."""
    unheld = [f"q{n:x}" for n in range(QUERY_WORDS * 4 // 5)]
    return " ".join(rng.sample(vocabulary, QUERY_WORDS // 5) + unheld)[:20_000]


@contextmanager
def targets(postgres: bool) -> Iterator[list[tuple[str, Callable[[], str]]]]:
    """(engine, a function giving a new, empty store location) for each engine."""
    folder = pathlib.Path(tempfile.mkdtemp(prefix="memory-hostile-"))
    names = iter(range(10**6))
    found: list[tuple[str, Callable[[], str]]] = [
        ("SQLite", lambda: str(folder / f"store-{next(names)}.db"))]
    server = None
    binaries = server_binaries() if postgres else None
    if binaries is not None:
        server = Server(pathlib.Path(tempfile.mkdtemp(prefix="memory-pg-hostile-")), binaries)
        server.start()
        found.append(("PostgreSQL", server.new_database))
    try:
        yield found
    finally:
        if server is not None:
            server.stop()
            shutil.rmtree(server.folder, ignore_errors=True)
        shutil.rmtree(folder, ignore_errors=True)


def measure(memory: Any, engine: str, new_target: Callable[[], str]) -> dict[str, Any]:
    rng = random.Random(20261201)
    vocabulary = [f"w{n}" for n in range(3_000)]
    me = memory.Scope("alice", "trip")
    row: dict[str, Any] = {"engine": engine}
    with memory.MemoryStore(new_target()) as store:
        store.remember_many([(me, "user", " ".join(rng.sample(vocabulary, 8)), "s")
                             for _ in range(MEMORIES)])
        query = long_query(rng, vocabulary)
        row["long query ms"] = best_of(lambda: store.recall(me, query, 5))
        wanted = memory.words(query)
        row["full scan ms"] = best_of(lambda: [
            len(memory.words(m["text"]) & wanted) for m in store.memories(me)])
        row["query vs scan"] = row["long query ms"] / row["full scan ms"]
    texts = [" ".join(rng.sample(vocabulary, 8)) for _ in range(BATCH)]
    batches = {name: [(memory.Scope(f"user-{n % users}", "t"), "user", text, "s")
                      for n, text in enumerate(texts)]
               for users, name in ((1, "batch ms, 1 user"), (BATCH, "batch ms, 3,000 users"))}
    for _ in range(5):  # the fastest of five, each into a new store, the two taking turns
        for name, items in batches.items():
            with memory.MemoryStore(new_target()) as store:
                began = time.perf_counter()
                store.remember_many(items)
                took = (time.perf_counter() - began) * 1000
            row[name] = min(row.get(name, took), took)
    row["users vs one"] = row["batch ms, 3,000 users"] / row["batch ms, 1 user"]
    # The same batch where each of the 3,000 users holds HELD memories already.
    with memory.MemoryStore(new_target()) as store:
        for _ in range(HELD):
            store.remember_many([(memory.Scope(f"user-{n}", "t"), "user",
                                  " ".join(rng.sample(vocabulary, 8)), "s")
                                 for n in range(BATCH)])
        items = [(memory.Scope(f"user-{n}", "t"), "user", text, "s")
                 for n, text in enumerate(texts)]
        began = time.perf_counter()
        store.remember_many(items)
        row[f"batch ms, users of {HELD}"] = (time.perf_counter() - began) * 1000
    row[f"users of {HELD} vs one"] = (row[f"batch ms, users of {HELD}"]
                                      / row["batch ms, 1 user"])
    # Recall in a small scope (the recommended settings): under the index's threshold,
    # where there is one, the scope's memories are read and their words found anew.
    small = [(me, "user", " ".join(rng.sample(vocabulary, 12)), "s") for _ in range(SMALL)]
    with memory.MemoryStore(new_target(), matching="stems", rank="idf") as store:
        store.remember_many(small)
        query = " ".join(rng.sample(vocabulary, 4))
        row[f"recall ms, {SMALL} memories"] = best_of(lambda: store.recall(me, query, 5), 50)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--library", type=pathlib.Path, default=ROOT,
                        help="the folder whose memory.py to measure (default: this one)")
    parser.add_argument("--no-postgres", action="store_true", help="SQLite only")
    args = parser.parse_args()
    sys.path.insert(0, str(args.library.resolve()))
    memory = importlib.import_module("memory")
    print(f"memory.py from {args.library}, Python {sys.version.split()[0]}")
    with targets(not args.no_postgres) as found:
        rows = [measure(memory, engine, new_target) for engine, new_target in found]
    print(format_table(rows))


if __name__ == "__main__":
    main()
