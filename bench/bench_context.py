"""The cost of recall with context at a heavy user's size: prints a table; never a test.

    python3 bench/bench_context.py [--size 100000] [--words-alone] [FILE]

One user holds SIZE memories (and ten other users as many between them) on two
workloads: Zipf text (20,000 words, exponent 1.1, 5 to 15 words, queries of 2 to 4 words,
as bench_memory.py draws them), in conversations of 20 turns; and realistic text, the
turns of a converted LoCoMo file (FILE, default ../shared/quality/locomo-dev.json, not
shipped: CC BY-NC) repeated, each copy its own conversations, asked its questions. Each
query runs top 5 on memory.py (stems + idf) without and with context, hybrid (random
384-dimension vectors standing in for an embedder's) without and with context, on SQLite
FTS5 (bm25, porter, any word of the query, the user a column filter) and, where the `tantivy`
package is installed, on tantivy (the user a filter term, the query through the index's own
parser so stemmed as its en_stem texts, any word, BM25, the texts of the best fetched as the
store returns them), all in one run on the same rows. Each method runs its queries one
after another; recall with context also runs each query right after the same recall
without context, whose
reads leave colder caches, and (last, as it adds to the rows) right after a write to the
scope, as an assistant that remembers each turn recalls, with and without vectors. Times
are per query, in ms (a write's own time is not counted).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import itertools
import json
import random
import re
import sqlite3
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from bench_memory import Zipf  # noqa: E402
from bench_vectors import Random  # noqa: E402

import memory  # noqa: E402
from memory import MemoryStore, Scope  # noqa: E402
from tables import format_table  # noqa: E402

DEFAULT = ROOT.parent / "shared" / "quality" / "locomo-dev.json"
ME = Scope("bench-user", "task-1")
OTHER_USERS = 10
QUERIES = 300
LIMIT = 5
SEED = 20261202
Row = tuple[str, str, str]  # (user, text, source)


def zipf_rows(size: int) -> tuple[list[Row], list[str]]:
    rng = random.Random(SEED)
    zipf = Zipf(rng)
    rows = [(f"other-{n % OTHER_USERS}", zipf.text(), f"talk-{n // 20}/{n % 20}")
            for n in range(size)]
    rows += [(ME.user, zipf.text(), f"talk-{n // 20}/{n % 20}") for n in range(size)]
    return rows, [" ".join(zipf.words(2, 4)) for _ in range(QUERIES)]


def realistic_rows(size: int, path: Path) -> tuple[list[Row], list[str]]:
    conversations = json.loads(path.read_text(encoding="utf-8"))["conversations"]
    turns = [(conversation["conversation"], turn) for conversation in conversations
             for turn in conversation["memories"]]
    questions = [q["question"] for conversation in conversations
                 for q in conversation["questions"]]

    def turns_for(user: str) -> Iterator[Row]:
        for n in range(size):
            copy, (name, turn) = n // len(turns), turns[n % len(turns)]
            yield (user, turn["text"],
                   f"copy-{copy}-conv-{name}/session-{turn['session']}/{turn['source']}")

    rows = [row for user in [f"other-{n}" for n in range(OTHER_USERS)]
            for row in itertools.islice(turns_for(user), size // OTHER_USERS)]
    rows += list(turns_for(ME.user))
    return rows, random.Random(SEED).sample(questions, min(QUERIES, len(questions)))


def times(call: Callable[[str], object], queries: list[str],
          before: Callable[[str], object] | None = None) -> tuple[float, float]:
    """p50 and p99 of `call` over the queries, each run right after `before` on the same
    query where it is given (whose own time is not counted)."""
    for query in queries[:20]:  # warm the caches
        call(query)
    spent = []
    for query in queries:
        if before is not None:
            before(query)
        began = time.perf_counter()
        call(query)
        spent.append(1000 * (time.perf_counter() - began))
    spent.sort()
    return spent[len(spent) // 2], spent[int(len(spent) * 0.99)]


def fts5(folder: Path, rows: list[Row]) -> Callable[[str], object]:
    db = sqlite3.connect(folder / "fts5.db")
    db.execute("CREATE VIRTUAL TABLE turns USING fts5(user_id UNINDEXED, text,"
               " tokenize = 'porter')")
    db.executemany("INSERT INTO turns (user_id, text) VALUES (?, ?)",
                   [(user, text) for user, text, _ in rows])
    db.commit()

    def recall(query: str) -> object:
        terms = sorted({term.lower() for term in re.findall(r"\w+", query)})
        match = " OR ".join('"' + term.replace('"', '""') + '"' for term in terms)
        return db.execute("SELECT rowid FROM turns WHERE turns MATCH ? AND user_id = ?"
                          " ORDER BY bm25(turns) LIMIT ?", (match, ME.user, LIMIT)).fetchall()
    return recall


def tantivy_ranker(folder: Path, rows: list[Row]) -> Callable[[str], object] | None:
    if importlib.util.find_spec("tantivy") is None:
        return None
    tantivy: Any = importlib.import_module("tantivy")
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("user", tokenizer_name="raw")
    builder.add_text_field("text", stored=True, tokenizer_name="en_stem")
    schema = builder.build()
    index = tantivy.Index(schema, path=str(folder))
    writer = index.writer()
    for user, text, _ in rows:
        writer.add_document(tantivy.Document(user=user, text=text))
    writer.commit()
    index.reload()
    searcher = index.searcher()
    mine = tantivy.Query.term_query(schema, "user", ME.user)

    def recall(query: str) -> object:
        # The query's words through the index's own parser, so stemmed as the texts were
        # (a term query of "hiking" never meets the index's "hike"), any of them; then the
        # texts of the best, as the store returns them.
        words = index.parse_query(" ".join(re.findall(r"\w+", query)), ["text"])
        both = tantivy.Query.boolean_query([(tantivy.Occur.Must, words),
                                            (tantivy.Occur.Must, mine)])
        return [searcher.doc(address)["text"] for _, address
                in searcher.search(both, LIMIT).hits]
    return recall


def workload(name: str, rows: list[Row], queries: list[str], folder: Path,
             words_alone: bool = False) -> list[dict[str, Any]]:
    with MemoryStore(folder / "memory.db", **memory.RECOMMENDED) as store:
        store.remember_many((Scope(user, ME.task), "user", text, source)
                            for user, text, source in rows)
        def without(query: str) -> object:
            return store.recall(ME, query, LIMIT, context=False)

        def within(query: str) -> object:
            return store.recall(ME, query, LIMIT, context=True)

        def write(query: str) -> object:
            return store.remember(ME, "user", query, "talk-new/0")

        plain, context = times(without, queries), times(within, queries)
        # The memory a recall allocates at its peak (tracemalloc), the most of 20 queries:
        # with context from the kept copy, and without.
        peaks = {"memory.py stems+idf": peak_mib(without, queries[:20]),
                 "memory.py stems+idf+context": peak_mib(within, queries[:20])}
        after = times(within, queries, before=without)
        written = times(within, queries, before=write)  # last: it adds to the rows
    first = "memory.py stems+idf+context, the first (reads the conversations)"
    with MemoryStore(folder / "memory.db", **memory.RECOMMENDED) as store:  # no copy yet
        began = time.perf_counter()
        store.recall(ME, queries[0], LIMIT, context=True)
        first_ms = 1000 * (time.perf_counter() - began)
    with MemoryStore(folder / "memory.db", **memory.RECOMMENDED) as store:  # nor here
        peaks[first] = peak_mib(lambda query: store.recall(ME, query, LIMIT, context=True),
                                queries[:1])
    measured = [("memory.py stems+idf", plain), ("memory.py stems+idf+context", context),
                ("memory.py stems+idf+context, each after one without", after),
                ("memory.py stems+idf+context, each after a write", written)]
    if not words_alone:
        measured += hybrid(rows, queries, folder)
    peers = [] if words_alone else [("SQLite FTS5 bm25 porter", fts5(folder, rows))]
    (folder / "tantivy").mkdir()
    tantivy = tantivy_ranker(folder / "tantivy", rows)
    if tantivy is not None:
        peers.append(("tantivy BM25", tantivy))
    measured += [(method, times(recall, queries)) for method, recall in peers]
    table = [{"workload": name, "method": method, "p50": p50, "p99": p99,
              "p50 / context's": p50 / context[0], "p99 / context's": p99 / context[1],
              "peak MiB": peaks.get(method)} for method, (p50, p99) in measured]
    table.append({"workload": name, "method": first, "p50": first_ms, "peak MiB": peaks[first]})
    return table


def hybrid(rows: list[Row], queries: list[str], folder: Path
           ) -> list[tuple[str, tuple[float, float]]]:
    """Hybrid scores every memory the scope sees, by words and by meaning (random unit
    vectors of 384 dimensions stand in for a model's: the cost does not depend on them)."""
    with MemoryStore(folder / "hybrid.db", embedder=Random(7), durable=False,
                     **memory.RECOMMENDED) as store:
        for start in range(0, len(rows), 5000):
            store.remember_many((Scope(user, ME.task), "user", text, source)
                                for user, text, source in rows[start : start + 5000])
        return [
            ("memory.py stems+hybrid", times(lambda q: store.recall(ME, q, LIMIT,
                                                                    context=False), queries)),
            ("memory.py stems+hybrid+context", times(lambda q: store.recall(ME, q, LIMIT),
                                                     queries)),
            ("memory.py stems+hybrid+context, each after a write", times(
                lambda q: store.recall(ME, q, LIMIT), queries,
                before=lambda q: store.remember(ME, "user", q, "talk-new/0")))]


def peak_mib(recall: Callable[[str], object], queries: list[str]) -> float:
    """The most memory one of the recalls allocates at its peak, in MiB (tracemalloc)."""
    most = 0
    for query in queries:
        tracemalloc.start()
        try:
            recall(query)
            most = max(most, tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
    return most / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file", nargs="?", type=Path, default=DEFAULT)
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--words-alone", action="store_true",
                        help="leave out hybrid and FTS5 (for a million: hours otherwise)")
    args = parser.parse_args()
    print(f"memory.py {memory.__version__}, SQLite {sqlite3.sqlite_version},"
          f" {args.size} memories for one user, top {LIMIT}, ms per query")
    table = []
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name) / "zipf"
        folder.mkdir()
        table += workload("Zipf", *zipf_rows(args.size), folder, args.words_alone)
        if args.file.exists():
            folder = Path(name) / "realistic"
            folder.mkdir()
            table += workload("realistic", *realistic_rows(args.size, args.file), folder,
                              args.words_alone)
    print(format_table(table, cell=lambda value: f"{value:.2f}"))


if __name__ == "__main__":
    main()
