"""What the framework records cost: filters, keys and long texts. Prints tables; never a test.

    python3 bench/bench_records.py                 # SQLite and a throw-away PostgreSQL
    python3 bench/bench_records.py --size 20000    # a smaller scope
    python3 bench/bench_records.py --sqlite-only

One user holds N memories (default 100,000) of Zipf-distributed words (20,000 words,
exponent 1.1, 8 to 20 a text) in conversations of 20 turns, each with metadata: 1% of
them {"ns": "target"}, the rest one of 99 other namespaces, and a number "n" from 0 to 999.
In the same run, on the same rows, with RECOMMENDED's settings (no embedder):

- recall of 2 to 4 query words, top 5, unfiltered; with an equality filter that 1% match;
  with a range filter that 1% match (it reads the scope's metadata);
- get(key) among 100 and 10,000 keyed memories, against what an adapter without keys does
  (read the scope's memories and find the key in each text's JSON) at 100 and 1,000;
- remember and recall of one text of 2,000, 20,000 and 200,000 characters;
- a small owner (15 memories) of short texts or of texts of 1,000,000 characters: its
  recall, and another user's recall while the small owner's run back to back in a thread
  (the store serves one call at a time: the other user waits for the one under way).

    python3 bench/bench_records.py --small-owner-only   # that table alone

- among 10,000 keyed memories of one owner: a write replacing a key, the same under
  if_version (compare-and-set), a new write under an operation id (its receipt recorded)
  and the replay of one (the receipt read, nothing written), each the median of 200;
  listing 20 keys by prefix and the same page by ids, the median of 50.

    python3 bench/bench_records.py --versions-only      # that table alone

- among 10,000 keyed memories of one owner, in a store that keeps history and one that
  does not: a write replacing a key (the median of 200, each key replaced once before, so
  that it holds a version), history(key), get(key) as of a time before the replaces,
  memories as of that time (the first 20), recall (3 words, top 5) now and as of then.

    python3 bench/bench_records.py --history-only       # that table alone
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import platform
import random
import statistics
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from timing import p50_ms, store_engines  # noqa: E402

import memory  # noqa: E402
from memory import MemoryStore, Scope  # noqa: E402
from tables import format_table  # noqa: E402

USER = Scope("alice", "bench")
VOCABULARY = 20_000


def zipf_words(seed: int) -> Callable[[int], list[str]]:
    chooser = random.Random(seed)
    weights = list(itertools.accumulate(1 / (rank ** 1.1) for rank in range(1, VOCABULARY + 1)))
    names = [f"w{rank}" for rank in range(VOCABULARY)]
    return lambda k: chooser.choices(names, cum_weights=weights, k=k)


def rows(size: int) -> Iterator[tuple[Any, ...]]:
    draw, chooser = zipf_words(1), random.Random(2)
    for n in range(size):
        namespace = "target" if n % 100 == 0 else f"ns-{n % 100}"
        yield (USER, "user", " ".join(draw(chooser.randint(8, 20))), f"c{n // 20}/t{n}",
               None, None, {"ns": namespace, "n": (n * 7919) % 1000})


def filters(location: str, size: int, engine: str) -> list[dict[str, Any]]:
    with MemoryStore(location, **memory._recommended_here()) as store:
        batch = list(rows(size))
        for start in range(0, size, 10_000):
            store.remember_many(batch[start : start + 10_000])
        draw, chooser = zipf_words(3), random.Random(4)
        queries = [" ".join(draw(chooser.randint(2, 4))) for _ in range(60)]
        cycle = itertools.cycle(queries)
        for query in queries[:5]:  # the kept copies read once
            store.recall(USER, query, 5)
        plain = p50_ms(lambda: store.recall(USER, next(cycle), 5), len(queries))
        equal = p50_ms(lambda: store.recall(USER, next(cycle), 5, where={"ns": "target"}),
                       len(queries))
        ranged = p50_ms(lambda: store.recall(USER, next(cycle), 5,
                                             where={"n": {"$lt": 10}}), len(queries))
        listed = p50_ms(lambda: store.memories(USER, where={"ns": "target"}, limit=20), 20)
    return [{"engine": engine, "memories": size, "recall p50 ms": plain,
             "with equality filter (1%)": equal, "ratio": equal / plain,
             "with range filter (1%)": ranged, "range ratio": ranged / plain,
             "list 20 filtered ms": listed}]


def keys(location: Callable[[], str], engine: str) -> list[dict[str, Any]]:
    table = []
    for size in (100, 1_000, 10_000):
        with MemoryStore(location()) as store:
            store.remember_many([(USER, "user", f"value {n}", "s", None, f"item-{n}",
                                  {"namespace": ["docs"]}) for n in range(size)])
            wanted = itertools.cycle(random.Random(5).sample(range(size), min(size, 50)))
            by_key = p50_ms(functools.partial(lambda asked: store.get(
                USER, key=f"item-{next(asked)}"), wanted), 50)
            row: dict[str, Any] = {"engine": engine, "keyed memories": size,
                                   "get(key) p50 ms": by_key}
            if size <= 1_000:  # the adapter's way without keys: a scan of the scope
                store.remember_many([(USER, "user", json.dumps({"key": f"old-{n}", "v": n}),
                                      "s") for n in range(size)])

                def scan(asked: Iterator[int]) -> object:
                    name = f'"old-{next(asked)}"'
                    return next(m for m in store.memories(USER) if name in m["text"])
                row["scan for a key in texts p50 ms"] = p50_ms(
                    functools.partial(scan, wanted), 20)
            table.append(row)
    return table


def versions(location: Callable[[], str], engine: str) -> list[dict[str, Any]]:
    size, calls = 10_000, 200
    with MemoryStore(location()) as store:
        store.remember_many([(USER, "task", f"value {n}", "s", None, f"notes/{n:05}")
                             for n in range(size)])
        picked = random.Random(7).sample(range(size), calls)
        at = dict.fromkeys(picked, 1)
        chosen = iter(picked * 2)

        def replace() -> object:
            return store.remember(USER, "task", "changed", "s", key=f"notes/{next(chosen):05}")

        plain = p50_ms(replace, calls)
        for n in picked:
            at[n] += 1
        swapped = iter(picked)

        def compare_and_set() -> object:
            n = next(swapped)
            return store.remember(USER, "task", "changed again", "s", key=f"notes/{n:05}",
                                  if_version=at[n])

        checked = p50_ms(compare_and_set, calls)
        fresh = itertools.count()

        def recorded() -> object:
            n = next(fresh)
            return store.remember(USER, "task", f"once {n}", "s", operation=f"op-{n}")

        once = p50_ms(recorded, calls)
        again = itertools.count()

        def replayed() -> object:
            n = next(again)
            return store.remember(USER, "task", f"once {n}", "s", operation=f"op-{n}")

        replay = p50_ms(replayed, calls)
        starts = itertools.cycle(f"notes/{n:05}" for n in picked)
        prefix = p50_ms(lambda: store.memories(USER, key_prefix="notes/",
                                               after_key=next(starts), limit=20), 50)
        pages = itertools.cycle(picked)
        by_ids = p50_ms(lambda: store.memories(USER, after=next(pages), limit=20), 50)
        assert store.count(USER) == size + calls
    return [{"engine": engine, "keyed memories": size, "replace a key p50 ms": plain,
             "with if_version p50 ms": checked, "under a new operation p50 ms": once,
             "replayed p50 ms": replay, "20 keys by prefix p50 ms": prefix,
             "20 by ids p50 ms": by_ids}]


def history(location: Callable[[], str], engine: str) -> list[dict[str, Any]]:
    return [history_row(location(), engine, keep) for keep in (False, True)]


def history_row(location: str, engine: str, keep: bool) -> dict[str, Any]:
    size, calls = 10_000, 200
    draw = zipf_words(8)
    clock = memory.fixed_clock("2026-10-20T09:00:00+00:00", 0.001)
    with MemoryStore(location, clock=clock, history=keep) as store:
        store.remember_many([(USER, "task", " ".join(draw(12)), f"c/{n // 20}", None,
                              f"notes/{n:05}") for n in range(size)])
        then = clock.now()
        picked = random.Random(7).sample(range(size), calls)
        for n in picked:  # each picked key holds a version from now on
            store.remember(USER, "task", " ".join(draw(12)), "s", key=f"notes/{n:05}")
        chosen = iter(picked)
        replace = p50_ms(lambda: store.remember(USER, "task", " ".join(draw(12)), "s",
                                                key=f"notes/{next(chosen):05}"), calls)
        keys = itertools.cycle(f"notes/{n:05}" for n in picked)
        asked = itertools.cycle([" ".join(draw(3)) for _ in range(20)])
        return {
            "engine": engine, "history": "kept" if keep else "not kept",
            "replace a key p50 ms": replace,
            "history(key) p50 ms": p50_ms(lambda: store.history(USER, key=next(keys)), 50),
            "get(key) p50 ms": p50_ms(lambda: store.get(USER, key=next(keys)), 50),
            "get(key, as_of) p50 ms": p50_ms(
                lambda: store.get(USER, key=next(keys), as_of=then), 5),
            "20 memories as_of p50 ms": p50_ms(
                lambda: store.memories(USER, limit=20, as_of=then), 5),
            "recall p50 ms": p50_ms(lambda: store.recall(USER, next(asked), 5), 20),
            "recall as_of p50 ms": p50_ms(
                lambda: store.recall(USER, next(asked), 5, as_of=then), 5)}


def long_texts(location: Callable[[], str], engine: str) -> list[dict[str, Any]]:
    table = []
    draw = zipf_words(6)
    for length in (2_000, 20_000, 200_000):
        with MemoryStore(location(), max_text=memory._LONGEST_TEXT,
                         **memory._recommended_here()) as store:
            store.remember_many([(USER, "user", " ".join(draw(12)), f"c/{n}")
                                 for n in range(1_000)])
            text = " ".join(draw(length // 4))[:length]
            written = p50_ms(functools.partial(store.remember, USER, "user", text, "long/1"), 5)
            recalled = p50_ms(lambda: store.recall(USER, " ".join(draw(3)), 5), 20)
            table.append({"engine": engine, "text characters": length,
                          "remember p50 ms": written, "recall p50 ms (1,000 short beside)":
                          recalled})
    return table


def small_owner(location: Callable[[], str], engine: str) -> list[dict[str, Any]]:
    table = []
    for length in (60, 1_000_000):
        with MemoryStore(location(), max_text=memory._LONGEST_TEXT,
                         **memory._recommended_here()) as store:
            table.append(small_owner_row(store, length, engine))
    return table


def small_owner_row(store: MemoryStore, length: int, engine: str) -> dict[str, Any]:
    draw = zipf_words(7)
    store.remember_many([(USER, "user", " ".join(draw(length // 4))[:length].strip(),
                          f"c/{n}") for n in range(15)])
    other = Scope("bob", "bench")
    store.remember_many([(other, "user", " ".join(draw(12)), f"b/{n}") for n in range(200)])
    queries = itertools.cycle([" ".join(draw(3)) for _ in range(40)])
    own = p50_ms(lambda: store.recall(USER, next(queries), 5), 20)
    answers = [[r["id"] for r in store.recall(USER, next(queries), 5)] for _ in range(20)]
    answered = statistics.median(sum(len(m["text"]) for i in ids if (m := store.get(USER, i)))
                                 for ids in answers)
    # The floor: the answer's memories read by id, which any recall returning them reads.
    floor = p50_ms(lambda: [store.get(USER, i) for i in answers[len(answers) // 2]], 20)
    stop = threading.Event()

    def load() -> None:
        while not stop.is_set():
            store.recall(USER, next(queries), 5)
    thread = threading.Thread(target=load)
    thread.start()
    try:
        theirs = p50_ms(lambda: store.recall(other, next(queries), 5), 20)
    finally:
        stop.set()
        thread.join(600)
    return {"engine": engine, "small owner's texts": f"15 x {length:,}",
            "its recall p50 ms": own, "characters it returns": int(answered),
            "its answer read by id p50 ms": floor,
            "another user's recall meanwhile p50 ms": theirs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--sqlite-only", action="store_true")
    parser.add_argument("--small-owner-only", action="store_true")
    parser.add_argument("--versions-only", action="store_true")
    parser.add_argument("--history-only", action="store_true")
    args = parser.parse_args()
    print(f"memory.py {memory.__version__}, Python {platform.python_version()}")
    with store_engines(args.sqlite_only, "memory-bench-records-") as engines:
        if args.versions_only:
            table = [row for name, where in engines for row in versions(where, name)]
            print(f"\nVersions and receipts\n\n{format_table(table)}")
            return
        if args.history_only:
            table = [row for name, where in engines for row in history(where, name)]
            print(f"\nHistory\n\n{format_table(table)}")
            return
        if args.small_owner_only:
            table = [row for name, where in engines for row in small_owner(where, name)]
            print(f"\nA small owner\n\n{format_table(table)}")
            return
        tables = {"Filters": [row for name, where in engines
                              for row in filters(where(), args.size, name)],
                  "Keys": [row for name, where in engines for row in keys(where, name)],
                  "Long texts": [row for name, where in engines
                                 for row in long_texts(where, name)],
                  "A small owner": [row for name, where in engines
                                    for row in small_owner(where, name)],
                  "Versions and receipts": [row for name, where in engines
                                            for row in versions(where, name)],
                  "History": [row for name, where in engines for row in history(where, name)]}
        for title, table in tables.items():
            print(f"\n{title}\n\n{format_table(table)}")


if __name__ == "__main__":
    main()
