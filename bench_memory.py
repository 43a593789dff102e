"""Benchmarks for memory.py: prints a table; never run as a test.

    python3 bench_memory.py            # 1k, 10k and 100k memories for one user
    python3 bench_memory.py --million  # and 1M

Each size builds a fresh file where one user holds N memories and other users hold N
more, then measures, in the same run on the same rows, the indexed store against the
plain full scan (fetch every visible row, score it in Python). Texts are 5 to 15 words
drawn from a 5,000-word vocabulary; queries are made the same way. A last table measures
each matching rule with each rank at --rules-size memories (default 100k), the same
number with 10% of them expiring, and a Zipf-distributed workload (--peers: beside SQLite
FTS5 and a plain table, on the same rows in the same run).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import random
import sqlite3
import statistics
import tempfile
import threading
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import memory
from memory import MemoryStore, Scope, system_clock, words

VOCABULARY_SIZE = 5000
OTHER_USERS = 10
QUERIES = 200
SINGLE_WRITES = 200
SEED = 20261020

# The plain recall rule: every visible row is fetched and scored in Python.
_FULL_SCAN_SQL = ("SELECT id, task_id, text, source, created_at FROM memories"
                  " WHERE user_id = ? AND (task_id IS NULL OR task_id = ?) ORDER BY id")


def full_scan_recall(db: sqlite3.Connection, scope: Scope, query: str,
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
        row["postings read"] = matching_postings(store, me, queries[0])
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


def matching_postings(store: MemoryStore, scope: Scope, query: str) -> int:
    """How many (word, memory) postings recall reads for `query`."""
    (total,) = store.db.execute(
        memory._SQL_POSTINGS_MAP.replace("SELECT word, task_id, first_id, length(ids) / 8",
                                     "SELECT coalesce(sum(length(ids)), 0) / 8"),
        (scope.user, scope.task, json.dumps(sorted(words(query))))).fetchone()
    return int(total)


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
                recall = [timed(lambda q=q, r=rank, s=me: store.recall(s, q, rank=r), 1)[0]
                          for q in queries]
                rows.append({"matching": matching, "rank": rank, "remember_many/s": rate,
                             "recall p50 ms": statistics.median(recall),
                             "recall p99 ms": percentile(recall, 0.99)})
    return rows


class SetClock:
    """A clock the benchmark sets: writes and reads both read `at`."""

    def __init__(self, at: str) -> None:
        self.at = at

    def __call__(self) -> str:
        return self.at

    def now(self) -> str:
        return self.at


def expiry(folder: Path, size: int) -> list[dict[str, Any]]:
    """The same `size` memories twice: without ttl, and with 10% carrying one, 1% of all
    expired but not yet purged; then one purge_expired() of the 10% at once."""
    rows = []
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
            recall = [timed(lambda q=q, s=me: store.recall(s, q), 1)[0] for q in queries]
            idf = [timed(lambda q=q, s=me: store.recall(s, q, rank="idf"), 1)[0]
                   for q in queries]
            count = timed(lambda s=me: store.count(s), 50)
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


def zipf_with_peers(folder: Path, size: int, peers: bool) -> list[dict[str, Any]]:
    """The Zipf workload at `size` memories for one user (and as many for ten others):
    memory.py, and with `peers` SQLite FTS5 (bm25, user as a column filter) and a plain
    table with one (user_id, task_id) index, the engine's floor for inserts, on the same
    rows in the same run."""
    rng = random.Random(SEED)
    zipf = Zipf(rng)
    me = Scope("bench-user", "task-1")
    rows = [(f"other-{n % OTHER_USERS}", zipf.text()) for n in range(size)]
    rows += [(me.user, zipf.text()) for _ in range(size)]
    queries = [" ".join(zipf.words(2, 4)) for _ in range(QUERIES)]
    singles = [zipf.text() for _ in range(SINGLE_WRITES)]
    results = []
    with MemoryStore(folder / "zipf.db") as store:
        began = time.perf_counter()
        for start in range(0, len(rows), 10_000):
            store.remember_many([(Scope(user, "task-1"), "user", text, "s")
                                 for user, text in rows[start:start + 10_000]])
        rate = len(rows) / (time.perf_counter() - began)
        recall = [timed(lambda q=q, s=me: store.recall(s, q, 5), 1)[0] for q in queries]
        it = iter(singles)
        single = timed(lambda s=me: store.remember(s, "user", next(it), "s"), SINGLE_WRITES)
        results.append({"engine": "memory.py", "bulk insert/s": rate,
                        "durable insert/s": 1000 / statistics.mean(single),
                        "recall p50 ms": statistics.median(recall),
                        "recall p99 ms": percentile(recall, 0.99)})
    if not peers:
        return results
    db = sqlite3.connect(folder / "fts5.db", isolation_level=None)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = FULL")
    db.execute("CREATE VIRTUAL TABLE fts USING fts5(user, text)")
    began = time.perf_counter()
    db.execute("BEGIN")
    db.executemany("INSERT INTO fts (user, text) VALUES (?, ?)", rows)
    db.execute("COMMIT")
    rate = len(rows) / (time.perf_counter() - began)

    def fts_recall(query: str) -> list[Any]:
        terms = " OR ".join(f'text : "{word}"' for word in sorted(set(query.split())))
        return db.execute("SELECT rowid FROM fts WHERE fts MATCH ? ORDER BY bm25(fts)"
                          " LIMIT 5", (f'user : "{me.user}" AND ({terms})',)).fetchall()

    recall = [timed(lambda q=q: fts_recall(q), 1)[0] for q in queries]
    it = iter(singles)
    single = timed(lambda: db.execute("INSERT INTO fts (user, text) VALUES (?, ?)",
                                      (me.user, next(it))), SINGLE_WRITES)
    results.append({"engine": "FTS5 bm25", "bulk insert/s": rate,
                    "durable insert/s": 1000 / statistics.mean(single),
                    "recall p50 ms": statistics.median(recall),
                    "recall p99 ms": percentile(recall, 0.99)})
    db.close()
    db = sqlite3.connect(folder / "plain.db", isolation_level=None)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = FULL")
    db.execute("CREATE TABLE plain (id INTEGER PRIMARY KEY, user_id TEXT NOT NULL,"
               " task_id TEXT, text TEXT NOT NULL, source TEXT NOT NULL,"
               " created_at TEXT NOT NULL)")
    db.execute("CREATE INDEX plain_scope ON plain (user_id, task_id)")
    insert = "INSERT INTO plain (user_id, task_id, text, source, created_at) VALUES (?, ?, ?, ?, ?)"
    began = time.perf_counter()
    db.execute("BEGIN")
    db.executemany(insert, [(user, None, text, "s", system_clock()) for user, text in rows])
    db.execute("COMMIT")
    rate = len(rows) / (time.perf_counter() - began)
    it = iter(singles)
    single = timed(lambda: db.execute(insert, (me.user, None, next(it), "s", system_clock())),
                   SINGLE_WRITES)
    results.append({"engine": "plain table, one index (floor)", "bulk insert/s": rate,
                    "durable insert/s": 1000 / statistics.mean(single)})
    db.close()
    ours, fts, floor = results
    ours["recall vs FTS5"] = fts["recall p50 ms"] / ours["recall p50 ms"]
    ours["bulk vs FTS5"] = ours["bulk insert/s"] / fts["bulk insert/s"]
    ours["durable vs floor"] = ours["durable insert/s"] / floor["durable insert/s"]
    return results


def durability(folder: Path) -> list[dict[str, float]]:
    """Single remember/s on a small file in each journal mode, measured back to back."""
    rng = random.Random(SEED)
    vocab = vocabulary(rng)
    me = Scope("bench-user", "task-1")
    modes = [("WAL, synchronous=FULL (default)", {}, None),
             ("WAL, synchronous=NORMAL (durable=False)", {"durable": False}, None),
             ("rollback journal, FULL", {}, "DELETE")]
    rows = []
    for name, options, journal in modes:
        with MemoryStore(folder / f"durable-{len(rows)}.db", **options) as store:
            if journal:
                store.db.execute(f"PRAGMA journal_mode = {journal}")
            single = timed(lambda: store.remember(me, "user", sentence(rng, vocab), "s"),
                           SINGLE_WRITES)
        rows.append({"mode": name, "remember/s": 1000 / statistics.mean(single)})
    return rows


def format_table(rows: list[dict[str, Any]], columns: list[str] | None = None) -> str:
    columns = columns or list(rows[0])
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        cells = ["" if value is None else value if isinstance(value, str)
                 else f"{value:,.0f}" if value >= 100 else f"{value:.3g}"
                 for value in (row.get(c) for c in columns)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--million", action="store_true", help="also measure 1M memories")
    parser.add_argument("--sizes", type=int, nargs="*", help="sizes to measure instead")
    parser.add_argument("--json", action="store_true", help="print rows as JSON too")
    parser.add_argument("--peers", action="store_true",
                        help="add FTS5 and a plain table to the Zipf workload's table")
    parser.add_argument("--zipf-size", type=int, default=100_000,
                        help="memories for the user in the Zipf workload (default 100,000)")
    parser.add_argument("--rules-size", type=int, default=100_000,
                        help="memories for the rules-and-ranks table (default 100,000)")
    args = parser.parse_args()
    sizes = args.sizes or [1_000, 10_000, 100_000] + ([1_000_000] if args.million else [])
    print(f"memory.py {memory.__version__}, Python {platform.python_version()}, SQLite "
          f"{sqlite3.sqlite_version}, {platform.machine()}, {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory() as name:
        rows = [measure(size, Path(name)) for size in sizes]
        durable = durability(Path(name))
        rules = rules_and_ranks(Path(name), args.rules_size)
        expiring = expiry(Path(name), args.rules_size)
        zipf = zipf_with_peers(Path(name), args.zipf_size, args.peers)
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
    print(format_table(zipf, ["engine", "bulk insert/s", "durable insert/s", "recall p50 ms",
                              "recall p99 ms", "recall vs FTS5", "bulk vs FTS5",
                              "durable vs floor"]))
    if args.json:
        print(json.dumps({"sizes": rows, "durability": durable, "rules": rules,
                          "expiry": expiring, "zipf": zipf}))


if __name__ == "__main__":
    main()
