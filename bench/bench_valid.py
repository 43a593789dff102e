"""What valid time costs the reads that judge it: reads now of a scope whose memories
carry windows, beside the same reads of the scope without any. Prints tables; never a test.

    python3 bench/bench_valid.py                  # SQLite and a throw-away PostgreSQL
    python3 bench/bench_valid.py --sqlite-only
    python3 bench/bench_valid.py --largest 10000  # leave out the scopes above 10,000

One user's task holds N memories (1,000, 10,000 and 100,000; half at the user level),
written in one of three ways, each in a store of its own:

- none: no memory has a window (the floor: what each read costs without valid time);
- open: one memory in ten has a window that holds now;
- closed: one memory in ten has a window that closed before now (a fact moved on).

In the same run, each the median of many calls: get(id) of a memory, the oldest 20 from
an id (memories(after=, limit=20)), the newest 20 (newest_first), count(), and recall of
three words (rank idf), each valid now (the default). A read leaves out the memories whose
windows leave now out: get and pages tell them by the rows they read, count and recall by
the scope's closed and future windows, read from their indexes.
"""

from __future__ import annotations

import argparse
import itertools
import platform
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from timing import p50_ms, store_engines  # noqa: E402

import memory  # noqa: E402
from memory import MemoryStore, Scope, fixed_clock  # noqa: E402
from tables import format_table  # noqa: E402

USER = Scope("bench", "trip")
SIZES = (1_000, 10_000, 100_000)
WORDS = [f"w{n}" for n in range(2_000)]
WINDOWS: dict[str, dict[str, str]] = {
    "none": {},
    "open": {"valid_from": "2020-01-01T00:00:00+00:00",
             "valid_to": "2030-01-01T00:00:00+00:00"},
    "closed": {"valid_from": "2020-01-01T00:00:00+00:00",
               "valid_to": "2021-01-01T00:00:00+00:00"},
}


def fill(store: MemoryStore, size: int, window: dict[str, str]) -> list[int]:
    ids: list[int] = []
    for start in range(0, size, 5_000):
        ids += store.remember_many([
            {"scope": USER, "level": "user" if n % 2 else "task",
             "text": f"{WORDS[n % 2000]} {WORDS[(n * 7) % 2000]} {WORDS[(n * 13) % 2000]}",
             "source": f"talk-{n % 100}/turn-{n}", **(window if n % 10 == 3 else {})}
            for n in range(start, min(size, start + 5_000))])
    return ids


def case(location: str, engine: str, size: int, kind: str) -> dict[str, Any]:
    repeat = 200 if size <= 10_000 else 50
    with MemoryStore(location, clock=fixed_clock("2026-10-20T09:00:00+00:00", 0.001)) as store:
        ids = fill(store, size, WINDOWS[kind])
        middle = ids[len(ids) // 2]
        query = f"{WORDS[5]} {WORDS[35]} {WORDS[65]}"
        assert len(store.memories(USER, after=middle, limit=20)) == 20
        return {"engine": engine, "memories": f"{size:,}", "windows": kind,
                "get": p50_ms(lambda: store.get(USER, ids[7]), repeat),
                "oldest 20": p50_ms(lambda: store.memories(USER, after=middle, limit=20),
                                    repeat),
                "newest 20": p50_ms(lambda: store.memories(USER, newest_first=True, limit=20),
                                    repeat),
                "count": p50_ms(lambda: store.count(USER), repeat),
                "recall": p50_ms(lambda: store.recall(USER, query, 5, rank="idf"), repeat)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sqlite-only", action="store_true")
    parser.add_argument("--largest", type=int, default=100_000)
    args = parser.parse_args()
    print(f"memory.py {memory.__version__}, Python {platform.python_version()}")
    with store_engines(args.sqlite_only, "memory-bench-valid-") as engines:
        table = []
        for size in SIZES:
            if size > args.largest:
                continue
            for (engine, where), kind in itertools.product(engines, WINDOWS):
                table.append(case(where(), engine, size, kind))
                print(format_table(table[-1:]), flush=True)
        print(f"\nValid now\n\n{format_table(table)}")


if __name__ == "__main__":
    main()
