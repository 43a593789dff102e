"""recall(approximate=True) against the exact ranking on a model's vectors: prints a table;
never a test.

    python3 bench/bench_ann.py [FILE]

Every turn of a converted LoCoMo file (bench/bench_quality.py says how; default
../shared/quality/locomo-dev.json) is one memory of one user, embedded by all-MiniLM-L6-v2
(memory_minilm.py; each text once), and each question is asked of them all: the share of
the exact top 10 (rank "meaning") that the HNSW index's top 10 holds, and each recall's
p50 time, with ANN_FROM lowered below the user's count so that the index serves them.
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
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from bench_quality import DEFAULT, Remembered  # noqa: E402

import memory  # noqa: E402
from memory import MemoryStore, Scope  # noqa: E402
from tables import format_table  # noqa: E402


def main() -> None:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT
    conversations = json.loads(path.read_text(encoding="utf-8"))["conversations"]
    from memory_minilm import MiniLM

    model = Remembered(MiniLM())
    turns = [turn["text"] for c in conversations for turn in c["memories"]]
    questions = [q["question"] for c in conversations for q in c["questions"]]
    model.prepare(turns + questions)
    me = Scope("reader", "all")
    with tempfile.TemporaryDirectory() as folder, \
            mock.patch.object(memory, "ANN_FROM", 1000), \
            MemoryStore(Path(folder) / "m.db", embedder=model) as store:
        store.remember_many([(me, "user", text, "turn") for text in turns])
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
    print(f"{path.name}: {len(turns)} turns of one user, {len(questions)} questions,"
          f" {model.name}")
    print(format_table([
        {"rank": "meaning, exact", "recall@10": 1.0,
         "p50 ms": statistics.median(exact_ms)},
        {"rank": "meaning, approximate=True", "recall@10": hits / (10 * len(questions)),
         "p50 ms": statistics.median(approximate_ms)}],
        cell=lambda value: f"{value:.3f}"))
    print(f"the index's build (the first approximate recall): {1000 * built:.0f} ms")


if __name__ == "__main__":
    main()
