"""recall(..., approximate=True): an HNSW index (usearch) of a large scope's vectors, kept by
the store, grown by later writes, built again after a deletion, never holding another
scope's memory; on both engines. Its recall against the exact ranking is checked here on
clustered vectors and, where MiniLM's weights are installed, on the model's own."""

from __future__ import annotations

import json
import pathlib
import random
from typing import Any

import pytest

import memory
from helpers import ALICE, ALICE_WORK, BOB, SetClock
from memory import MemoryInputError, MemoryStore

np = pytest.importorskip("numpy")
pytest.importorskip("usearch")

DIMENSIONS = 24


def clustered(count: int, seed: int) -> list[list[float]]:
    """Vectors around 12 centres, as a model's are around topics."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((12, DIMENSIONS))
    chosen = centres[rng.integers(0, 12, count)] + 0.35 * rng.standard_normal(
        (count, DIMENSIONS))
    return [[float(x) for x in row] for row in chosen]


def ids(found: list[Any]) -> list[int]:
    return [r["id"] for r in found]


@pytest.fixture
def store(target: str, clock: SetClock, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setattr(memory, "ANN_FROM", 100)
    with MemoryStore(target, clock=clock) as opened:
        vectors = clustered(900, 1)
        opened.remember_many([{"scope": [ALICE, BOB, ALICE_WORK][n % 3],
                               "level": "task" if n % 4 == 0 else "user",
                               "text": f"note {n}", "source": "chat",
                               "vectors": [vectors[n]]} for n in range(900)])
        yield opened


def test_the_index_finds_nearly_what_the_exact_ranking_finds_and_nothing_of_another_scope(
        store: MemoryStore) -> None:
    seen = {m["id"] for m in store.memories(ALICE)}
    queries = clustered(40, 2)
    hits = 0
    for query in queries:
        exact = ids(store.recall(ALICE, "", 10, rank="meaning", vector=query))
        found = store.recall(ALICE, "", 10, rank="meaning", vector=query, approximate=True)
        assert set(ids(found)) <= seen and len(found) == 10
        assert [r["score"] for r in found] == sorted((r["score"] for r in found),
                                                     reverse=True)
        hits += len(set(exact) & set(ids(found)))
    assert hits / (10 * len(queries)) >= 0.9


def test_a_filter_and_expiry_hold_as_in_the_exact_ranking(
        store: MemoryStore, clock: SetClock) -> None:
    query = clustered(1, 3)[0]
    store.remember(ALICE, "user", "the nearest, expiring", "chat", vectors=[query], ttl=30,
                   metadata={"kind": "a"})
    store.remember(ALICE, "user", "the nearest, kept", "chat", vectors=[query],
                   metadata={"kind": "b"})
    found = store.recall(ALICE, "", 3, rank="meaning", vector=query, approximate=True)
    assert [r["text"] for r in found[:2]] == ["the nearest, kept", "the nearest, expiring"]
    clock.advance(60)
    found = store.recall(ALICE, "", 3, rank="meaning", vector=query, approximate=True)
    assert "the nearest, expiring" not in [r["text"] for r in found]
    only_b = store.recall(ALICE, "", 3, rank="meaning", vector=query, approximate=True,
                          where={"kind": "b"})
    assert [r["text"] for r in only_b] == ["the nearest, kept"]
    # The farthest memory, the one the filter admits: the index is asked for more until
    # it is found.
    store.remember(ALICE, "user", "the farthest", "chat", vectors=[[-x for x in query]],
                   metadata={"kind": "c"})
    assert [r["text"] for r in store.recall(ALICE, "", 3, rank="meaning", vector=query,
                                            approximate=True, where={"kind": "c"})] == [
        "the farthest"]



def test_below_ann_from_a_scope_is_ranked_exactly_with_no_index(
        store: MemoryStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.undo()
    assert memory.ANN_FROM == 20_000  # README's "20,000 memories or more"
    monkeypatch.setattr(memory, "ANN_FROM", 10**6)
    monkeypatch.setattr(memory, "_Approximate", None)  # none is built
    for query in clustered(5, 7):
        assert store.recall(ALICE, "", 10, rank="meaning", vector=query, approximate=True) \
            == store.recall(ALICE, "", 10, rank="meaning", vector=query)


def test_the_index_grows_with_writes_and_is_built_again_after_a_deletion(
        store: MemoryStore, monkeypatch: pytest.MonkeyPatch) -> None:
    query = clustered(1, 4)[0]
    builds = []
    real = memory._Approximate.__init__

    def counted(self: Any, dimensions: int) -> None:
        builds.append(dimensions)
        real(self, dimensions)
    monkeypatch.setattr(memory._Approximate, "__init__", counted)
    store.recall(ALICE, "", 5, rank="meaning", vector=query, approximate=True)
    new = store.remember(ALICE, "user", "written after", "chat", vectors=[query])
    found = store.recall(ALICE, "", 5, rank="meaning", vector=query, approximate=True)
    assert ids(found)[0] == new and len(builds) == 1  # grown, not built again
    store.forget(ALICE, new)
    found = store.recall(ALICE, "", 5, rank="meaning", vector=query, approximate=True)
    assert new not in ids(found) and len(builds) == 2
    # Bob's index is his own: his recall builds one, holding none of Alice's.
    bobs = {m["id"] for m in store.memories(BOB)}
    assert set(ids(store.recall(BOB, "", 20, rank="meaning", vector=query,
                                approximate=True))) <= bobs and len(builds) == 3


def test_approximate_is_asked_of_meaning_today(store: MemoryStore) -> None:
    query = clustered(1, 5)[0]
    with pytest.raises(MemoryInputError, match="'meaning' alone"):
        store.recall(ALICE, "note", 3, rank="hybrid", vector=query, approximate=True)
    with pytest.raises(MemoryInputError, match="as_of is exact"):
        store.recall(ALICE, "", 3, rank="meaning", vector=query, approximate=True,
                     as_of="2026-10-20T09:00:00+00:00")
    with pytest.raises(MemoryInputError, match="approximate must be a bool"):
        store.recall(ALICE, "", 3, rank="meaning", vector=query, approximate=1)  # type: ignore[arg-type]


def test_on_minilm_vectors_the_index_finds_nearly_what_the_exact_ranking_finds(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The paraphrase set's 310 texts by all-MiniLM-L6-v2, each question asked of all."""
    pytest.importorskip("tokenizers")
    pytest.importorskip("all_minilm_l6_v2")
    from memory_minilm import MiniLM

    monkeypatch.setattr(memory, "ANN_FROM", 100)
    items = json.loads((pathlib.Path(__file__).parent.parent / "bench" / "paraphrases.json")
                       .read_text(encoding="utf-8"))["items"]
    texts = [text for item in items for text in (item["memory"], *item["lures"])]
    with MemoryStore(tmp_path / "m.db", embedder=MiniLM()) as store:
        store.remember_many([(ALICE, "user", text, "note") for text in texts])
        hits = 0
        for item in random.Random(6).sample(items, 30):
            exact = ids(store.recall(ALICE, item["question"], 10, rank="meaning"))
            found = store.recall(ALICE, item["question"], 10, rank="meaning", approximate=True)
            hits += len(set(exact) & set(ids(found)))
    assert hits / 300 >= 0.95


def test_the_indexes_kept_stay_within_ann_bytes(
        store: MemoryStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memory, "ANN_BYTES", 1)  # room for the newest alone
    query = clustered(1, 8)[0]
    for scope in (ALICE, BOB, ALICE_WORK):
        store.recall(scope, "", 3, rank="meaning", vector=query, approximate=True)
    assert list(store._planner._indexes) == [memory._ScopeKey(ALICE_WORK.user, ALICE_WORK.task)]
