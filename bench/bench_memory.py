"""Benchmarks for memory.py: prints tables; never run as a test.

    python3 bench/bench_memory.py              # 1k, 10k and 100k memories for one user
    python3 bench/bench_memory.py --million    # and 1M, uniform and Zipf
    python3 bench/bench_memory.py --peers      # FTS5 and a plain table beside the Zipf rows

Each size builds a fresh file where one user holds N memories and other users hold N
more, then measures, in the same run on the same rows, the indexed store against the
plain full scan (fetch every visible row, score it in Python). Texts are 5 to 15 words
drawn uniformly from a 5,000-word vocabulary; queries are made the same way. Then: each
matching rule with each rank at --rules-size memories (default 100k), the same number
with 10% of them expiring, a Zipf-distributed workload as real text is (20,000 words,
exponent 1.1, queries of 2 to 4 words, top 5; --peers adds SQLite FTS5 and a plain
table on the same rows in the same run, and reports ratios), and recall throughput from
eight threads.
"""

from __future__ import annotations

import argparse
import collections
import functools
import itertools
import json
import multiprocessing
import os
import platform
import random
import shutil
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

# The library, and the tests' support (a settable clock, the throw-away server), from a
# clean clone: no install needed.
ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import memory  # noqa: E402
from helpers import SetClock  # noqa: E402
from memory import MemoryStore, Scope, system_clock, words  # noqa: E402
from tables import format_table  # noqa: E402

VOCABULARY_SIZE = 5000
OTHER_USERS = 10
QUERIES = 200
SINGLE_WRITES = 200
SEED = 20261020

# The plain recall rule: every visible row is fetched and scored in Python.
_FULL_SCAN_SQL = memory._sql(
    "SELECT id, task_id, text, source, created_at FROM memories"
    " WHERE user_id = ? AND (task_id IS NULL OR task_id = ?) ORDER BY id")


def full_scan_recall(db: memory._Session, scope: Scope, query: str,
                     limit: int = 3) -> list[dict[str, Any]]:
    wanted = words(query)
    rows = db.execute(_FULL_SCAN_SQL, (scope.user, scope.task)).fetchall()
    scored = [(len(wanted & words(row[2])), row) for row in rows]
    ranked = sorted((p for p in scored if p[0]), key=lambda p: (p[0], p[1][0]), reverse=True)
    return [{"id": row[0], "level": "user" if row[1] is None else "task", "text": row[2],
             "source": row[3], "created_at": row[4], "score": score}
            for score, row in ranked[:limit]]


def vocabulary(rng: random.Random, size: int = VOCABULARY_SIZE) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    found: set[str] = set()
    while len(found) < size:
        word = "".join(rng.choice(letters) for _ in range(rng.randint(4, 9)))
        if word not in memory.STOPWORDS:
            found.add(word)
    return sorted(found)


def sentence(rng: random.Random, vocab: list[str]) -> str:
    return " ".join(rng.choice(vocab) for _ in range(rng.randint(5, 15))).capitalize() + "."


def timed(call: Callable[[], object], repeat: int) -> list[float]:
    """Milliseconds of each of `repeat` calls."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1000)
    return times


def call_times(call: Callable[[], object], times: int) -> None:
    for _ in range(times):
        call()


def remember_text(store: MemoryStore, scope: Scope, text: Callable[[], str]) -> int:
    """Remember a new text for the scope's user."""
    return store.remember(scope, "user", text(), "s")


def peak_kib(call: Callable[[], object]) -> float:
    tracemalloc.start()
    call()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak / 1024


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def fill(store: MemoryStore, rng: random.Random, vocab: list[str], scope: Scope,
         count: int) -> float:
    """Write `count` memories in batches; return memories per second."""
    elapsed = 0.0
    for start in range(0, count, 10_000):
        batch = [(scope, rng.choice(["user", "task"]), sentence(rng, vocab), f"turn-{n}")
                 for n in range(start, min(count, start + 10_000))]
        began = time.perf_counter()
        store.remember_many(batch)
        elapsed += time.perf_counter() - began
    return count / elapsed


def measure(size: int, folder: Path) -> dict[str, float]:
    rng = random.Random(SEED + size)
    vocab = vocabulary(rng)
    me = Scope("bench-user", "task-1")
    row: dict[str, float] = {"size": size}
    with MemoryStore(folder / f"bench-{size}.db") as store:
        for other in range(OTHER_USERS):
            fill(store, rng, vocab, Scope(f"other-{other}", "task-1"), size // OTHER_USERS)
        row["remember_many/s"] = fill(store, rng, vocab, me, size)
        # Ten memories hold a word no other memory has: their recall should cost the same
        # at every size, since its cost follows the matching memories, not the total.
        store.remember_many([(me, "user", f"{sentence(rng, vocab)} zzneedle", "needle")
                             for _ in range(10)])
        single = timed(lambda: store.remember(me, "user", sentence(rng, vocab), "single"),
                       SINGLE_WRITES)
        row["remember/s"] = 1000 / statistics.mean(single)

        queries = [sentence(rng, vocab) for _ in range(QUERIES)]
        it = iter(queries * 2)
        recall = timed(lambda: store.recall(me, next(it)), QUERIES)
        row["recall p50 ms"] = statistics.median(recall)
        row["recall p99 ms"] = percentile(recall, 0.99)
        row["recall peak KiB"] = peak_kib(lambda: store.recall(me, queries[0]))
        with Counting() as counted:
            store.recall(me, queries[0])
        row["postings read"] = counted.postings
        needle = timed(lambda: store.recall(me, "zzneedle", limit=20), QUERIES)
        row["needle recall ms"] = statistics.median(needle)
        row["needle peak KiB"] = peak_kib(lambda: store.recall(me, "zzneedle", limit=20))

        scans = max(3, min(QUERIES, 200_000 // size))
        for query in queries[:scans]:  # the two designs agree on every measured query
            assert store.recall(me, query) == full_scan_recall(store.db, me, query)
        it = iter(queries)
        scan = timed(lambda: full_scan_recall(store.db, me, next(it)), scans)
        row["scan p50 ms"] = statistics.median(scan)
        row["scan peak KiB"] = peak_kib(lambda: full_scan_recall(store.db, me, queries[0]))
        row["recall speed-up"] = row["scan p50 ms"] / row["recall p50 ms"]

        row["recall p50 ms, 8 threads"] = threaded_recall_p50(store, me, queries)

        count = timed(lambda: store.count(me), 50)
        fetch = timed(lambda: len(store.db.execute(_FULL_SCAN_SQL, (me.user, me.task))
                                  .fetchall()), max(3, min(50, 100_000 // size)))
        row["count ms"] = statistics.median(count)
        row["fetch rows ms"] = statistics.median(fetch)
        row["count speed-up"] = row["fetch rows ms"] / row["count ms"]
        # Deleting is cheap; compact() rewrites the whole file, every user's memories.
        newest = store.remember(me, "user", sentence(rng, vocab), "to-forget")
        row["forget ms"] = timed(lambda: store.forget(me, newest), 1)[0]
        row["compact ms"] = timed(store.compact, 1)[0]
    return row


def threaded_recall_p50(store: MemoryStore, scope: Scope, queries: list[str]) -> float:
    """Median recall latency while 8 threads recall on the one shared store at once."""
    times: list[float] = []
    start = threading.Barrier(8)

    def reader(offset: int) -> None:
        start.wait(timeout=60)
        mine = queries[offset::8]
        it = iter(mine)
        times.extend(timed(lambda: store.recall(scope, next(it)), len(mine)))

    threads = [threading.Thread(target=reader, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=600)
    return statistics.median(times)


def rules_and_ranks(folder: Path, size: int) -> list[dict[str, Any]]:
    """remember_many/s and recall latency for each matching rule and rank, on the same
    texts and queries, `size` memories for the user and as many for ten others."""
    rows = []
    for matching in memory.MATCHING:
        rng = random.Random(SEED)
        vocab = vocabulary(rng)
        me = Scope("bench-user", "task-1")
        with MemoryStore(folder / f"rules-{matching}.db", matching=matching) as store:
            for other in range(OTHER_USERS):
                fill(store, rng, vocab, Scope(f"other-{other}", "task-1"), size // OTHER_USERS)
            rate = fill(store, rng, vocab, me, size)
            queries = [sentence(rng, vocab) for _ in range(QUERIES)]
            for rank in memory.RANKS:
                recall = [timed(functools.partial(store.recall, me, q, rank=rank), 1)[0]
                          for q in queries]
                rows.append({"matching": matching, "rank": rank, "remember_many/s": rate,
                             "recall p50 ms": statistics.median(recall),
                             "recall p99 ms": percentile(recall, 0.99)})
    return rows


def expiry(folder: Path, size: int) -> list[dict[str, Any]]:
    """The same `size` memories twice: without ttl, and with 10% carrying one, 1% of all
    expired but not yet purged; then one purge_expired() of the 10% at once."""
    rows: list[dict[str, Any]] = []
    for name, with_ttl in (("no ttl", False), ("10% ttl, 1% expired", True)):
        rng = random.Random(SEED)
        vocab = vocabulary(rng)
        me = Scope("bench-user", "task-1")
        clock = SetClock("2026-10-20T09:00:00+00:00")
        with MemoryStore(folder / f"expiry-{with_ttl}.db", clock=clock) as store:
            for start in range(0, size, 10_000):
                batch: list[tuple[Any, ...]] = []
                for n in range(start, min(size, start + 10_000)):
                    item = (me, rng.choice(["user", "task"]), sentence(rng, vocab), "s")
                    ttl = None if not with_ttl or n % 10 else 30 if n % 100 == 0 else 86_400
                    batch.append((*item, ttl))
                store.remember_many(batch)
            clock.at = "2026-10-20T09:01:00+00:00"  # the ttl of 30 s has run out
            queries = [sentence(rng, vocab) for _ in range(QUERIES)]
            recall = [timed(functools.partial(store.recall, me, q), 1)[0] for q in queries]
            idf = [timed(functools.partial(store.recall, me, q, rank="idf"), 1)[0]
                   for q in queries]
            count = timed(functools.partial(store.count, me), 50)
            row = {"store": name, "live": store.count(me),
                   "recall p50 ms": statistics.median(recall),
                   "recall p99 ms": percentile(recall, 0.99),
                   "idf recall p99 ms": percentile(idf, 0.99),
                   "count ms": statistics.median(count)}
            if with_ttl:
                clock.at = "2026-10-22T09:00:00+00:00"  # every ttl has run out
                began = time.perf_counter()
                row["purged"] = store.purge_expired()
                row["purge s"] = time.perf_counter() - began
            rows.append(row)
    rows[1]["recall p99 vs no ttl"] = rows[1]["recall p99 ms"] / rows[0]["recall p99 ms"]
    return rows


class Zipf:
    """Words from a 20,000-word vocabulary drawn by Zipf's law (exponent 1.1), as real text
    uses them: a few words everywhere, most words rare."""

    def __init__(self, rng: random.Random, size: int = 20_000, exponent: float = 1.1) -> None:
        self.rng = rng
        self.vocab = vocabulary(rng, size)
        self.cumulative = list(itertools.accumulate(1 / rank**exponent
                                                    for rank in range(1, size + 1)))

    def words(self, low: int, high: int) -> list[str]:
        return self.rng.choices(self.vocab, cum_weights=self.cumulative,
                                k=self.rng.randint(low, high))

    def text(self) -> str:
        return " ".join(self.words(5, 15)).capitalize() + "."


class Counting:
    """Counts the postings recall unpacks while in a `with` block."""

    def __enter__(self) -> Counting:
        self.postings = 0
        self.real = memory._unpack

        def unpack(blob: object) -> Any:
            ids = self.real(blob)
            self.postings += len(ids)
            return ids

        memory._unpack = unpack
        return self

    def __exit__(self, *exc_info: object) -> None:
        memory._unpack = self.real


class NoRows:
    """The cursor of a statement that ran nothing: no rows."""

    def fetchone(self) -> None:
        return None

    def fetchall(self) -> list[Any]:
        return []

    def __iter__(self) -> Any:
        return iter(())


class NoStatements(memory._Session):
    """An engine that runs nothing: each statement reads as no rows, new ids from 1."""

    def __init__(self) -> None:
        self.execute = self.executemany = lambda *arguments: NoRows()

    @property
    def in_transaction(self) -> bool:
        return False

    def commit(self) -> None:
        pass

    def ask_new_ids(self, count: int) -> Callable[[], list[int]]:
        return lambda: list(range(1, count + 1))


def python_alone_per_second(store: MemoryStore, items: list[tuple[Any, ...]]) -> float:
    """remember_many's own work on `items`, in the same batches, with every statement
    stubbed out: validation, a clock reading a memory, tokenizing, grouping the ids by
    word and packing them. A ceiling on the bulk rate that no SQL can raise."""
    began = time.perf_counter()
    for start in range(0, len(items), 10_000):
        rows = memory._each_valid(items[start:start + 10_000],
                                  lambda item: memory._new_row(*item), "item")
        store._writes.write(NoStatements(), rows)
    return len(items) / (time.perf_counter() - began)


def wal_pages_by_object(db: sqlite3.Connection, path: Path, write: Callable[[], object],
                        count: int = 50) -> dict[str, float]:
    """WAL frames appended per commit of `write`, from an emptied WAL, by the table or
    index each page belongs to (the frame headers' page numbers, named by dbstat)."""
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    (page_size,) = db.execute("PRAGMA page_size").fetchone()
    for _ in range(count):
        write()
    wal = Path(f"{path}-wal").read_bytes()
    pages = [int.from_bytes(wal[at:at + 4], "big")
             for at in range(32, len(wal) - 23, page_size + 24)]
    owners = dict(db.execute("SELECT pageno, name FROM dbstat"))
    found = collections.Counter(owners.get(page, "other") for page in pages)
    return {name: n / count for name, n in found.most_common()}


def zipf_with_peers(folder: Path, size: int, peers: bool) -> list[dict[str, Any]]:
    """The Zipf workload at `size` memories for one user (and as many for ten others):
    memory.py, and with `peers` SQLite FTS5 (bm25, user as a column filter) and a plain
    table with one (user_id, task_id) index, the engine's floor for inserts, on the same
    rows in the same run. Durable single writes alternate between the engines in rounds,
    so a noisy neighbour slows them alike."""
    rng = random.Random(SEED)
    zipf = Zipf(rng)
    me = Scope("bench-user", "task-1")
    rows = [(f"other-{n % OTHER_USERS}", zipf.text()) for n in range(size)]
    rows += [(me.user, zipf.text()) for _ in range(size)]
    items = [(Scope(user, "task-1"), "user", text, "s") for user, text in rows]
    queries = [" ".join(zipf.words(2, 4)) for _ in range(QUERIES)]
    singles = iter([zipf.text() for _ in range(10 * SINGLE_WRITES)])
    path = folder / f"zipf-{size}.db"
    store = MemoryStore(path)
    began = time.perf_counter()
    for start in range(0, len(items), 10_000):
        store.remember_many(items[start:start + 10_000])
    ours: dict[str, Any] = {"engine": "memory.py",
                            "bulk insert/s": len(rows) / (time.perf_counter() - began),
                            "Python alone/s": python_alone_per_second(store, items)}
    for query in queries[:20]:  # the top-k agrees with the full scan on a sample
        assert store.recall(me, query, 5) == full_scan_recall(store.db, me, query, 5)
    recall = [timed(functools.partial(store.recall, me, q, 5), 1)[0] for q in queries]
    with Counting() as counted:
        for query in queries:
            store.recall(me, query, 5)
    ours.update({"recall p50 ms": statistics.median(recall),
                 "recall p99 ms": percentile(recall, 0.99),
                 "postings read (mean)": counted.postings / len(queries),
                 "recall peak KiB (max)": max(peak_kib(functools.partial(store.recall, me, q, 5))
                                              for q in queries[:50])})
    (index_bytes, row_bytes) = store.db.execute(
        "SELECT sum(pgsize) FILTER (WHERE name = 'memory_words'), sum(pgsize) FILTER"
        " (WHERE name IN ('memories', 'memories_scope')) FROM dbstat").fetchone()
    ours["index / rows"] = index_bytes / row_bytes
    writers: list[tuple[dict[str, Any], Callable[[], object]]] = [
        (ours, lambda: store.remember(me, "user", next(singles), "s"))]
    by_object = wal_pages_by_object(store.db.connection, path, writers[0][1])
    ours["WAL pages/write"] = sum(by_object.values())
    ours["WAL pages by object"] = ", ".join(f"{name} {n:.2f}" for name, n in by_object.items())
    results = [ours]
    if peers:
        results += peer_tables(folder, rows, queries, singles, me, writers)
    for _ in range(SINGLE_WRITES // 25):  # rounds of 25 writes to each engine in turn
        for row, write in writers:
            row.setdefault("durable seconds", 0.0)
            row["durable seconds"] += timed(functools.partial(call_times, write, 25), 1)[0] / 1000
    for row, _ in writers:
        row["durable insert/s"] = SINGLE_WRITES / row.pop("durable seconds")
    store.close()
    if peers:
        ours, fts, floor = results
        ours["recall vs FTS5"] = fts["recall p50 ms"] / ours["recall p50 ms"]
        ours["bulk vs FTS5"] = ours["bulk insert/s"] / fts["bulk insert/s"]
        ours["durable vs floor"] = ours["durable insert/s"] / floor["durable insert/s"]
        ours["WAL pages vs floor"] = ours["WAL pages/write"] / floor["WAL pages/write"]
    for row in results:
        row["size"] = size
    return results


def peer_tables(folder: Path, rows: list[tuple[str, str]], queries: list[str],
                singles: Iterator[str], me: Scope,
                writers: list[tuple[dict[str, Any], Callable[[], object]]]
                ) -> list[dict[str, Any]]:
    """FTS5 and the plain table on `rows`; each adds its durable writer to `writers`."""
    fts_path = folder / f"fts5-{len(rows)}.db"
    fts = sqlite3.connect(fts_path, isolation_level=None, check_same_thread=False)
    fts.execute("PRAGMA journal_mode = WAL")
    fts.execute("PRAGMA synchronous = FULL")
    fts.execute("CREATE VIRTUAL TABLE fts USING fts5(user, text)")
    began = time.perf_counter()
    fts.execute("BEGIN")
    fts.executemany("INSERT INTO fts (user, text) VALUES (?, ?)", rows)
    fts.execute("COMMIT")
    fts_row: dict[str, Any] = {"engine": "FTS5 bm25",
                               "bulk insert/s": len(rows) / (time.perf_counter() - began)}

    def fts_recall(query: str) -> list[Any]:
        terms = " OR ".join(f'text : "{word}"' for word in sorted(set(query.split())))
        return fts.execute("SELECT rowid FROM fts WHERE fts MATCH ? ORDER BY bm25(fts)"
                           " LIMIT 5", (f'user : "{me.user}" AND ({terms})',)).fetchall()

    recall = [timed(functools.partial(fts_recall, q), 1)[0] for q in queries]
    fts_row.update({"recall p50 ms": statistics.median(recall),
                    "recall p99 ms": percentile(recall, 0.99)})
    (index_bytes, row_bytes) = fts.execute(
        "SELECT sum(pgsize) FILTER (WHERE name != 'fts_content'), sum(pgsize) FILTER"
        " (WHERE name = 'fts_content') FROM dbstat WHERE name LIKE 'fts%'").fetchone()
    fts_row["index / rows"] = index_bytes / row_bytes

    def fts_write() -> None:
        fts.execute("INSERT INTO fts (user, text) VALUES (?, ?)", (me.user, next(singles)))

    fts_row["WAL pages/write"] = sum(wal_pages_by_object(fts, fts_path, fts_write).values())
    writers.append((fts_row, fts_write))
    plain_path = folder / f"plain-{len(rows)}.db"
    plain = sqlite3.connect(plain_path, isolation_level=None, check_same_thread=False)
    plain.execute("PRAGMA journal_mode = WAL")
    plain.execute("PRAGMA synchronous = FULL")
    plain.execute("CREATE TABLE plain (id INTEGER PRIMARY KEY, user_id TEXT NOT NULL,"
                  " task_id TEXT, text TEXT NOT NULL, source TEXT NOT NULL,"
                  " created_at TEXT NOT NULL)")
    plain.execute("CREATE INDEX plain_scope ON plain (user_id, task_id)")
    insert = ("INSERT INTO plain (user_id, task_id, text, source, created_at)"
              " VALUES (?, ?, ?, ?, ?)")
    began = time.perf_counter()
    plain.execute("BEGIN")
    plain.executemany(insert, [(user, None, text, "s", system_clock()) for user, text in rows])
    plain.execute("COMMIT")
    floor: dict[str, Any] = {"engine": "plain table, one index (floor)",
                             "bulk insert/s": len(rows) / (time.perf_counter() - began)}

    def plain_write() -> None:
        plain.execute(insert, (me.user, None, next(singles), "s", system_clock()))

    floor["WAL pages/write"] = sum(
        wal_pages_by_object(plain, plain_path, plain_write).values())
    writers.append((floor, plain_write))
    return [fts_row, floor]


def readers(target: str, me: Scope, queries: list[str],
            sharing: tuple[int, ...] = (1, 8)) -> list[dict[str, Any]]:
    """Recall throughput on the store at `target`: threads sharing one store (on SQLite
    one connection, taken in turn; on PostgreSQL its pool), then eight threads with a
    store (a connection) each."""

    def run(stores: list[MemoryStore], count: int) -> float:
        start = threading.Barrier(count)

        def reader(offset: int) -> None:
            start.wait(timeout=60)
            for query in queries[offset::count]:
                stores[offset % len(stores)].recall(me, query, 5)

        workers = [threading.Thread(target=reader, args=(n,)) for n in range(count)]
        began = time.perf_counter()
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(timeout=600)
        return len(queries) / (time.perf_counter() - began)

    shared = MemoryStore(target)
    own = [MemoryStore(target) for _ in range(max(sharing))]
    rows: list[dict[str, Any]] = []
    for count in sharing:
        threads = f"{count} thread{'s' * (count > 1)}"
        rows.append({"readers": f"{threads}, 1 shared store",
                     "recalls/s": run([shared], count)})
        if count > 1:
            rows.append({"readers": f"{threads}, a store (connection) each",
                         "recalls/s": run(own[:count], count)})
            rows[-2]["shared vs a store each"] = rows[-2]["recalls/s"] / rows[-1]["recalls/s"]
    for row in rows:
        row["vs 1 thread"] = row["recalls/s"] / rows[0]["recalls/s"]
    for store in [shared, *own]:
        store.close()
    return rows


def threads(folder: Path, size: int) -> list[dict[str, Any]]:
    """Recall throughput on the Zipf file of `size`, from threads (see readers)."""
    zipf = Zipf(random.Random(SEED))  # the file's vocabulary
    zipf.rng = random.Random(SEED + 1)  # other queries, drawn the same way
    queries = [" ".join(zipf.words(2, 4)) for _ in range(2 * QUERIES)]
    return readers(str(folder / f"zipf-{size}.db"), Scope("bench-user", "task-1"), queries)


def durability(folder: Path) -> list[dict[str, Any]]:
    """Single remember/s on a small file in each journal mode, measured back to back."""
    rng = random.Random(SEED)
    vocab = vocabulary(rng)
    me = Scope("bench-user", "task-1")
    modes: list[tuple[str, dict[str, Any], str | None]] = [
             ("WAL, synchronous=FULL (default)", {}, None),
             ("WAL, synchronous=NORMAL (durable=False)", {"durable": False}, None),
             ("rollback journal, FULL", {}, "DELETE")]
    rows: list[dict[str, Any]] = []
    for name, options, journal in modes:
        with MemoryStore(folder / f"durable-{len(rows)}.db", **options) as store:
            if journal:
                store.db.execute(f"PRAGMA journal_mode = {journal}")
            single = timed(lambda: store.remember(me, "user", sentence(rng, vocab), "s"),
                           SINGLE_WRITES)
        rows.append({"mode": name, "remember/s": 1000 / statistics.mean(single)})
    return rows


def write_singles(target: str, user: str, count: int) -> tuple[float, float]:
    """Durable single remembers by one process: when the first began and the last ended
    (wall clock, so that processes compare), the store already open."""
    rng = random.Random(user)
    zipf = Zipf(rng, 2_000)
    with MemoryStore(target) as store:
        began = time.time()
        for _ in range(count):
            store.remember(Scope(user, "task-1"), "user", zipf.text(), "s")
        return began, time.time()


def plain_singles(url: str, user: str, count: int) -> tuple[float, float]:
    """The floor: durable single-statement INSERTs into a plain table, as write_singles."""
    import psycopg

    rng = random.Random(user)
    zipf = Zipf(rng, 2_000)
    with psycopg.connect(url, autocommit=True) as db:
        began = time.time()
        for n in range(count):
            db.execute("INSERT INTO plain_floor (user_id, id, text) VALUES (%s, %s, %s)",
                       (user, n, zipf.text()))
        return began, time.time()


def writers(write: Callable[[str, str, int], tuple[float, float]], url: str,
            processes: int, count: int) -> float:
    """Writes per second of `processes` processes writing `count` each, their own users,
    from the first write's start to the last one's end."""
    context = multiprocessing.get_context("spawn")
    with context.Pool(processes) as pool:
        results = [pool.apply_async(write, (url, f"writer-{processes}-{n}", count))
                   for n in range(processes)]
        spans = [result.get(timeout=600) for result in results]
    return processes * count / (max(end for _, end in spans) - min(began for began, _ in spans))


def gin_peers(owner_url: str, rows: list[tuple[Scope, str]], queries: list[str],
              me: Scope) -> list[dict[str, Any]]:
    """Top-5 recall from GIN indexes on the same rows: over word arrays (`&&`, ranked by
    the words shared, newer first) and over tsvector (ts_rank); the store's own table of
    postings is the other row of the table."""
    import psycopg

    with psycopg.connect(owner_url, autocommit=True) as db:
        db.execute("CREATE TABLE gin_docs (user_id TEXT, id BIGINT, words TEXT[],"
                   " tsv TSVECTOR, PRIMARY KEY (user_id, id))")
        with db.cursor() as cursor:
            cursor.executemany(
                "INSERT INTO gin_docs VALUES (%s, %s, %s, to_tsvector('simple', %s))",
                [(scope.user, n, sorted(words(text)), text)
                 for n, (scope, text) in enumerate(rows)])
        db.execute("CREATE INDEX gin_words ON gin_docs USING gin (words)")
        db.execute("CREATE INDEX gin_tsv ON gin_docs USING gin (tsv)")
        db.execute("ANALYZE gin_docs")

        def by_array(query: str) -> list[Any]:
            wanted = sorted(words(query))
            return db.execute(
                "SELECT id FROM gin_docs WHERE user_id = %s AND words && %s::text[] ORDER BY"
                " cardinality(ARRAY(SELECT unnest(words) INTERSECT SELECT unnest(%s::text[])))"
                " DESC, id DESC LIMIT 5", (me.user, wanted, wanted)).fetchall()

        def by_tsvector(query: str) -> list[Any]:
            wanted = " | ".join(sorted(words(query)))
            return db.execute(
                "SELECT id FROM gin_docs WHERE user_id = %s AND tsv @@ to_tsquery('simple', %s)"
                " ORDER BY ts_rank(tsv, to_tsquery('simple', %s)) DESC, id DESC LIMIT 5",
                (me.user, wanted, wanted)).fetchall()

        found = []
        for name, recall in (("Zipf, GIN over word arrays", by_array),
                             ("Zipf, GIN over tsvector, ts_rank", by_tsvector)):
            times = [timed(functools.partial(recall, q), 1)[0] for q in queries]
            found.append({"workload": name, "recall p50 ms": statistics.median(times),
                          "recall p99 ms": percentile(times, 0.99)})
    return found


def postgres(new_database: Callable[[], str], size: int, gin: Callable[[str], str] | None = None
             ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The uniform and Zipf workloads on PostgreSQL, `size` memories for one user and as
    many for ten others, over the server's Unix socket: bulk and durable writes, recall,
    recall with row-level security switched off (its cost), and 8 processes writing, the
    store's durable remember beside plain single-row INSERTs (the engine's floor); and
    recall throughput from threads sharing a store (its pool) or with a store each."""
    import psycopg

    rows, threaded = [], []
    me = Scope("bench-user", "task-1")
    for workload in ("uniform", "Zipf"):
        rng = random.Random(SEED)
        text: Callable[[], str]
        if workload == "uniform":
            text = functools.partial(sentence, rng, vocabulary(rng))
            queries = [text() for _ in range(QUERIES)]
        else:
            zipf = Zipf(rng)
            text = zipf.text
            queries = [" ".join(zipf.words(2, 4)) for _ in range(QUERIES)]
        url = new_database()
        items = [(Scope(f"other-{n % OTHER_USERS}", "task-1"), "user", text(), "s")
                 for n in range(size)] + [(me, "user", text(), "s") for _ in range(size)]
        with MemoryStore(url) as store:
            began = time.perf_counter()
            for start in range(0, len(items), 10_000):
                store.remember_many(items[start:start + 10_000])
            row: dict[str, Any] = {"workload": workload, "size": size,
                                   "remember_many/s": len(items) / (time.perf_counter() - began)}
            for query in queries[:20]:  # the top-k agrees with the full scan on a sample
                with store._snapshot({me.user}) as db:
                    expected = full_scan_recall(db, me, query, 5)
                assert store.recall(me, query, 5) == expected
            recall = [timed(functools.partial(store.recall, me, q, 5), 1)[0] for q in queries]
            row["recall p50 ms"] = statistics.median(recall)
            row["recall p99 ms"] = percentile(recall, 0.99)
            singles = timed(functools.partial(remember_text, store, me, text), SINGLE_WRITES)
            row["durable remember/s"] = 1000 / statistics.mean(singles)
            # The owner is bound by the policies only while they are forced on it.
            toggles = {force: [memory._sql(
                "", postgresql=f"ALTER TABLE {table} {force} ROW LEVEL SECURITY")
                               for table in ("memories", "memory_words", "memory_counts")]
                       for force in ("FORCE", "NO FORCE")}
            with store._reading() as db:
                for sql in toggles["NO FORCE"]:
                    db.execute(sql)
            unguarded = [timed(functools.partial(store.recall, me, q, 5), 1)[0] for q in queries]
            with store._reading() as db:
                for sql in toggles["FORCE"]:
                    db.execute(sql)
            row["recall p50 ms, no RLS"] = statistics.median(unguarded)
            row["RLS cost"] = row["recall p50 ms"] / row["recall p50 ms, no RLS"]
        rows.append(row)
        if workload == "Zipf":
            threaded.extend(readers(url, me, queries * 2, (1, 4, 8)))
        if gin is not None and workload == "Zipf":
            rows += gin_peers(gin(url), [(scope, text) for scope, _, text, _ in items],
                              queries, me)
    url = new_database()
    MemoryStore(url).close()
    with psycopg.connect(url, autocommit=True) as db:
        db.execute("CREATE TABLE plain_floor (user_id TEXT, id BIGINT, text TEXT,"
                   " PRIMARY KEY (user_id, id))")
    for name, write in (("durable remember", write_singles), ("plain INSERT", plain_singles)):
        one = writers(write, url, 1, 1_000)
        eight = writers(write, url, 8, 500)
        rows.append({"workload": f"1 process, {name}", "durable remember/s": one})
        rows.append({"workload": f"8 processes, {name}", "durable remember/s": eight,
                     "vs 1 process": eight / one})
    return rows, threaded


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--million", action="store_true",
                        help="also measure 1M memories (uniform and Zipf)")
    parser.add_argument("--sizes", type=int, nargs="*", help="sizes to measure instead")
    parser.add_argument("--json", action="store_true", help="print rows as JSON too")
    parser.add_argument("--peers", action="store_true",
                        help="add FTS5 and a plain table to the Zipf workload's table")
    parser.add_argument("--zipf-size", type=int, default=100_000,
                        help="memories for the user in the Zipf workload (default 100,000)")
    parser.add_argument("--rules-size", type=int, default=100_000,
                        help="memories for the rules-and-ranks table (default 100,000)")
    parser.add_argument("--engine", choices=["sqlite", "postgres"], default="sqlite",
                        help="postgres: measure the PostgreSQL engine only")
    parser.add_argument("--url", help="with --engine postgres: a server to create databases"
                        " on (postgresql://owner@/postgres?host=...); default: start one")
    parser.add_argument("--gin", action="store_true", help="with --engine postgres: add"
                        " top-5 recall from GIN indexes on the Zipf rows (a server it starts)")
    args = parser.parse_args()
    if args.engine == "postgres":
        main_postgres(args.url, (args.sizes or [100_000])[0], args.gin)
        return
    sizes = args.sizes or [1_000, 10_000, 100_000] + ([1_000_000] if args.million else [])
    print(f"memory.py {memory.__version__}, Python {platform.python_version()}, SQLite "
          f"{sqlite3.sqlite_version}, {platform.machine()}, {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory() as name:
        rows = [measure(size, Path(name)) for size in sizes]
        durable = durability(Path(name))
        rules = rules_and_ranks(Path(name), args.rules_size)
        expiring = expiry(Path(name), args.rules_size)
        zipf_sizes = [args.zipf_size] + ([1_000_000] if args.million else [])
        zipf = [row for size in zipf_sizes
                for row in zipf_with_peers(Path(name), size, args.peers)]
        threaded = threads(Path(name), args.zipf_size)
    print(format_table(rows, ["size", "recall p50 ms", "recall p99 ms", "scan p50 ms",
                              "recall speed-up", "recall peak KiB", "postings read",
                              "scan peak KiB", "needle recall ms", "needle peak KiB",
                              "recall p50 ms, 8 threads"]))
    print()
    print(format_table(rows, ["size", "remember/s", "remember_many/s", "forget ms",
                              "compact ms", "count ms", "fetch rows ms", "count speed-up"]))
    print()
    print(format_table(durable))
    print()
    print(format_table(rules))
    print()
    print(format_table(expiring, ["store", "live", "recall p50 ms", "recall p99 ms",
                                  "idf recall p99 ms", "count ms", "purged", "purge s",
                                  "recall p99 vs no ttl"]))
    print()
    print(format_table(zipf, ["size", "engine", "recall p50 ms", "recall p99 ms",
                              "postings read (mean)", "recall peak KiB (max)",
                              "recall vs FTS5"]))
    print()
    print(format_table(zipf, ["size", "engine", "bulk insert/s", "durable insert/s",
                              "WAL pages/write", "index / rows", "bulk vs FTS5",
                              "durable vs floor", "WAL pages vs floor"]))
    print(f"memory.py's WAL pages a write, by table or index: {zipf[0]['WAL pages by object']}")
    print(f"memory.py's bulk work in Python alone (every statement stubbed out):"
          f" {zipf[0]['Python alone/s']:,.0f} memories/s")
    print()
    print(format_table(threaded, ["readers", "recalls/s", "vs 1 thread", "shared vs a store each"]))
    if args.json:
        print(json.dumps({"sizes": rows, "durability": durable, "rules": rules,
                          "expiry": expiring, "zipf": zipf, "threads": threaded}))


def main_postgres(url: str | None, size: int, gin: bool = False) -> None:
    import psycopg

    from pg_server import Server, server_binaries

    server = None
    if url is None:
        binaries = server_binaries()
        if binaries is None:
            raise SystemExit("no PostgreSQL server binaries here: apt-get install postgresql")
        server = Server(Path(tempfile.mkdtemp(prefix="memory-pg-bench-")), binaries, fsync=True)
        server.start()
    names = itertools.count()

    def new_database() -> str:
        if server is not None:
            return server.new_database()
        name = f"memory_bench_{os.getpid()}_{next(names)}"
        with psycopg.connect(url or "", autocommit=True) as admin:
            admin.execute(f"CREATE DATABASE {name}")
        return url.replace("/postgres?", f"/{name}?") if url else ""

    try:
        with psycopg.connect(new_database().replace("memory_app", "postgres")
                             if server else url or "") as probe:
            version = probe.info.server_version
        print(f"memory.py {memory.__version__}, Python {platform.python_version()},"
              f" PostgreSQL {version // 10000}.{version % 10000}, {os.cpu_count()} cores,"
              " Unix socket, fsync on")
        owner = (lambda store_url: store_url.replace("memory_app", "postgres")) \
            if gin and server is not None else None
        rows, threaded = postgres(new_database, size, owner)
        print(format_table(rows, ["workload", "size", "remember_many/s", "durable remember/s",
                                  "vs 1 process", "recall p50 ms", "recall p99 ms",
                                  "recall p50 ms, no RLS", "RLS cost"]))
        print()
        print(format_table(threaded, ["readers", "recalls/s", "vs 1 thread",
                                      "shared vs a store each"]))
    finally:
        if server is not None:
            server.stop()
            shutil.rmtree(server.folder, ignore_errors=True)


if __name__ == "__main__":
    main()
