"""The caller's own vectors: a framework that computes its embeddings gives them with each
memory and the query's at recall; the store keeps them as it keeps an embedder's (scoped,
filtered before ranking, read past the kept budget, erased, exported). On both engines."""

from __future__ import annotations

import array
import pathlib
from typing import Any

import pytest
from embedders import ConceptEmbedder

import memory
from helpers import ALICE, ALICE_WORK, BOB, SetClock, file_bytes
from memory import MemoryInputError, MemoryStore, StoreError
from model import rows_of_user

NORTH, EAST, UP = [1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]



def ranked(found: list[Any]) -> list[tuple[str, float]]:
    return [(r["text"], round(r["score"], 3)) for r in found]


def test_recall_ranks_by_the_vectors_the_caller_gave(target: str,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    with MemoryStore(target) as store:
        store.remember(ALICE, "user", "north", "s", vectors=[NORTH])
        store.remember(ALICE, "user", "east or up", "s", vectors=[EAST, UP])  # the best counts
        store.remember(ALICE, "task", "no vector", "s")
        store.remember(BOB, "user", "bob's north", "s", vectors=[NORTH])  # nearest, not hers
        store.remember(ALICE_WORK, "task", "work's north", "s", vectors=[NORTH])
        found = store.recall(ALICE, "", 5, rank="meaning", vector=[0.8, 0.0, 0.6])
        assert ranked(found) == [("north", 0.8), ("east or up", 0.6)]
        assert ranked(store.recall(ALICE, "", 5, rank="meaning", vector=UP,
                                   min_score=0.5)) == [("east or up", 1.0)]
        # Hybrid: every memory the scope sees, one without a vector by its words alone.
        hybrid = ranked(store.recall(ALICE, "no vector", 5, rank="hybrid", vector=NORTH))
        assert dict(hybrid)["north"] == 1.0 and dict(hybrid)["no vector"] > 0
        with pytest.raises(MemoryInputError, match="query's vector"):
            store.recall(ALICE, "north", 3, rank="meaning")
        with pytest.raises(MemoryInputError, match="ranks by 'meaning' or 'hybrid'"):
            store.recall(ALICE, "north", 3, rank="idf", vector=NORTH)
        stats = store.stats()
        assert (stats["embedder"], stats["dimensions"], stats["without_vectors"]) == (
            "vectors given by the caller", 3, 1)
    caplog.clear()
    with MemoryStore(target) as store:  # opened again, it knows its vectors' space
        assert isinstance(store.embedder, memory._GivenVectors)
        assert ranked(store.recall(ALICE, "", 1, rank="meaning", vector=NORTH)) == [
            ("north", 1.0)]
    # Not a store opened without the embedder its vectors came from: nothing to warn of.
    assert not [r for r in caplog.records if r.levelname == "WARNING"]


def test_a_filter_holds_before_the_best_are_chosen_and_past_the_kept_budget(
        target: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memory, "KEPT_BYTES", 1)  # read block by block, not from a copy
    with MemoryStore(target) as store:
        store.remember_many([{"scope": ALICE, "level": "user", "text": f"note {n}",
                              "source": "s", "metadata": {"n": n},
                              "vectors": [[1.0, n / 100, 0.0]]} for n in range(60)])
        found = store.recall(ALICE, "", 3, rank="meaning", vector=NORTH,
                             where={"n": {"$gte": 50}})
        assert [r["metadata"]["n"] for r in found] == [50, 51, 52]  # type: ignore[index]


def test_one_store_holds_one_dimension_count(target: str) -> None:
    with MemoryStore(target) as store:
        assert store.recall(ALICE, "", 3, rank="meaning", vector=NORTH) == []  # none yet
        with pytest.raises(MemoryInputError, match="2 dimension counts"):
            store.remember_many([{"scope": ALICE, "level": "user", "text": t, "source": "s",
                                  "vectors": [v]} for t, v in (("a", NORTH), ("b", [1.0]))])
        assert store.count(ALICE) == 0 and store.stats()["embedder"] is None
        # The first write of vectors rolled back (a version conflict): nothing recorded.
        with pytest.raises(memory.VersionConflict):
            store.remember(ALICE, "user", "up", "s", vectors=[UP], key="k", if_version=1)
        assert store.stats()["embedder"] is None
        store.remember(ALICE, "user", "plain", "s")
        store.remember(ALICE, "user", "north", "s", vectors=[NORTH])
        with pytest.raises(MemoryInputError, match="have 2 dimensions; the store's have 3"):
            store.remember(ALICE, "user", "flat", "s", vectors=[[1.0, 0.0]])
        with pytest.raises(MemoryInputError, match="have 4 dimensions; the store's have 3"):
            store.recall(ALICE, "", 3, rank="meaning", vector=[1.0, 0.0, 0.0, 0.0])
        assert store.count(ALICE) == 2
    with pytest.raises(StoreError, match="another embedder"):
        MemoryStore(target, embedder=ConceptEmbedder())


def axis(dimensions: int) -> list[float]:
    """A unit vector of that many numbers, along the fourth axis."""
    return [1.0 if place == 3 else 0.0 for place in range(dimensions)]


def test_a_store_with_an_embedder_takes_vectors_of_its_dimensions(target: str) -> None:
    embedder = ConceptEmbedder()
    wide = axis(embedder.dimensions)
    with MemoryStore(target, embedder=embedder) as store:
        given = store.remember(ALICE, "user", "unrelated words", "s", vectors=[wide])
        store.remember(ALICE, "user", "jazz concert", "s")  # embedded by the embedder
        found = store.recall(ALICE, "", 1, rank="meaning", vector=wide)
        assert [r["id"] for r in found] == [given]
        with pytest.raises(MemoryInputError, match="have 3 dimensions; the store's have"):
            store.remember(ALICE, "user", "x", "s", vectors=[NORTH])


@pytest.mark.parametrize(("options", "message"), [
    ({"vectors": [NORTH], "embed": False}, "give vectors or embed, not both"),
    ({"vectors": NORTH}, "a vector of vectors must be a list"),
    ({"vectors": []}, "vectors must be a list of 1 to 16"),
    ({"vectors": [NORTH] * 17}, "vectors must be a list of 1 to 16"),
    ({"vectors": [[0.0, 0.0, 0.0]]}, "all zeros"),
    ({"vectors": [[float("nan"), 1.0, 0.0]]}, "not finite"),
    ({"vectors": [NORTH, [1.0, 0.0]]}, "vector 1 of vectors has 2 numbers, not the 3"),
    ({"vectors": [["a", 1.0, 0.0]]}, "not a number"),
])
def test_bad_vectors_are_refused_before_anything_is_written(
        store: MemoryStore, options: dict[str, Any], message: str) -> None:
    with pytest.raises(MemoryInputError, match=message):
        store.remember(ALICE, "user", "text", "s", **options)
    assert store.count(ALICE) == 0 and store.stats()["embedder"] is None


@pytest.mark.parametrize("vector", [[], [0.0, 0.0], [float("inf")], "abc", [[1.0]], None])
def test_a_bad_query_vector_is_refused(store: MemoryStore, vector: Any) -> None:
    store.remember(ALICE, "user", "north", "s", vectors=[NORTH])
    if vector is None:  # none: the query's words, by idf
        assert store.recall(ALICE, "north", 3, rank="idf", vector=vector)
        return
    with pytest.raises(MemoryInputError, match="vector"):
        store.recall(ALICE, "", 3, rank="meaning", vector=vector)


def test_given_vectors_are_memory_data_forgotten_erased_and_compacted(
        tmp_path: pathlib.Path, clock: SetClock) -> None:
    path = tmp_path / "m.db"
    marked = [0.123456789, 0.987654321, 0.55555555]
    pattern = array.array("f", marked).tobytes()
    with MemoryStore(path, clock=clock) as store:
        kept = store.remember(ALICE, "user", "marked", "s", vectors=[marked])
        store.remember(ALICE, "user", "other", "s", vectors=[NORTH])
        assert pattern in file_bytes(path)
        assert store.forget(ALICE, kept)
        store.compact()
        assert pattern not in file_bytes(path)
        assert rows_of_user(str(path), "memory_vectors", "alice") == 1
        store.erase_user("alice")
        assert rows_of_user(str(path), "memory_vectors", "alice") == 0


def test_a_revise_keeping_the_text_keeps_the_callers_vectors(target: str) -> None:
    with MemoryStore(target) as store:  # a store of its callers' vectors
        first = store.remember(ALICE, "user", "east or up", "s", vectors=[EAST, UP], key="k")
        second = store.revise(ALICE, first, "east or up", "s", metadata={"seen": 2})
        assert second is not None
        assert ranked(store.recall(ALICE, "", 3, rank="meaning", vector=UP)) == [
            ("east or up", 1.0)]
        assert store.export_user("alice")[0]["vectors"] == [EAST, UP]
        store.revise(ALICE, second, "north now", "s")  # no embedder makes one of this
        assert store.recall(ALICE, "", 3, rank="meaning", vector=UP) == []


def test_a_revise_keeping_the_text_keeps_what_it_was_embedded_from(target: str) -> None:
    embedder = ConceptEmbedder()
    wide = axis(embedder.dimensions)
    with MemoryStore(target, embedder=embedder) as store:
        given = store.remember(ALICE, "user", "unrelated words", "s", vectors=[wide])
        unembedded = store.remember(ALICE, "user", "jazz concert", "s", embed=False)
        store.revise(ALICE, given, "unrelated words", "s2")
        store.revise(ALICE, unembedded, "jazz concert", "s2")
        assert [r["text"] for r in store.recall(ALICE, "jazz", 3, rank="meaning")] == [
            "unrelated words"]  # the given vector's cosine alone: none of the other
        assert store.recall(ALICE, "", 1, rank="meaning", vector=wide)[0]["score"] == 1.0


def test_export_and_import_carry_the_vectors(target: str) -> None:
    with MemoryStore(target) as store:
        store.remember(ALICE, "user", "east or up", "s", vectors=[EAST, UP], key="k")
        store.remember(ALICE, "user", "no vector", "s")
        exported = store.export_user("alice")
        assert [r.get("vectors") for r in exported] == [[EAST, UP], None]
        assert "embed" not in exported[0]
        store.erase_user("alice")
        store.import_memories(exported)
        assert ranked(store.recall(ALICE, "", 3, rank="meaning", vector=UP)) == [
            ("east or up", 1.0)]
        assert rows_of_user(target, "memory_vectors", "alice") == 1
        # Under an operation id, a replay with the same vectors is the same call.
        first = store.remember(ALICE, "user", "up", "s", vectors=[UP], operation="op")
        assert store.remember(ALICE, "user", "up", "s", vectors=[UP], operation="op") == first
        with pytest.raises(memory.OperationConflict):
            store.remember(ALICE, "user", "up", "s", vectors=[EAST], operation="op")


def test_reindex_with_an_embedder_moves_a_store_of_given_vectors_to_it(target: str) -> None:
    with MemoryStore(target) as store:
        store.remember(ALICE, "user", "jazz concert tonight", "s", vectors=[NORTH])
        store.remember(ALICE, "user", "a quiet hotel", "s", vectors=[EAST])
        store.reindex(embedder=ConceptEmbedder())  # every memory embedded from its text
        assert [r["text"] for r in store.recall(ALICE, "music", 1, rank="meaning")] == [
            "jazz concert tonight"]
        assert all("vectors" not in r and "embed" not in r for r in store.export_user("alice"))
        assert store.stats()["embedder"] == ConceptEmbedder().name
