"""Recall by meaning: the caller's embedder, the vectors kept, scoped, deleted and erased
with their memories, the recorded embedder and its refusal, reindex(embedder=), bad
embedders, no lock while embedding, and the meaning and hybrid ranks, on both engines."""

from __future__ import annotations

import array
import json
import logging
import math
import os
import pathlib
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from echoes import ECHOES, PLAIN_FAILURES, TEXTS
from embedders import Broken, ConceptEmbedder, Waiting, cosine
from hypothesis import given
from hypothesis import strategies as st

import memory
from helpers import (
    ALICE,
    ALICE_WORK,
    BOB,
    FIXTURES,
    ROOT,
    TOUCHES_MEMORY_DATA,
    SetClock,
    digest,
    file_bytes,
)
from memory import MemoryInputError, MemoryStore, Scope, StoreError

VEGETARIAN = "Alice is vegetarian."
PARAPHRASE = "Any meat-free places for dinner?"


@pytest.fixture
def embedder() -> ConceptEmbedder:
    return ConceptEmbedder()


@pytest.fixture
def store(target: str, clock: SetClock, embedder: ConceptEmbedder) -> Iterator[MemoryStore]:
    with MemoryStore(target, clock=clock, embedder=embedder) as opened:
        yield opened


def ids(found: list[memory.Recalled]) -> list[int]:
    return [result["id"] for result in found]


def float32(vector: list[float]) -> list[float]:
    return list(array.array("f", vector))


def test_meaning_finds_a_memory_that_shares_no_word_with_the_question(
        store: MemoryStore) -> None:
    wanted = store.remember(ALICE, "user", VEGETARIAN, "chat/1")
    store.remember(ALICE, "user", "Alice flies to Lisbon on Friday.", "chat/2")
    assert store.recall(ALICE, PARAPHRASE, rank="idf") == []
    found = store.recall(ALICE, PARAPHRASE, 1, rank="meaning", explain=True)
    assert ids(found) == [wanted]
    assert found[0]["why"]["meaning"] == found[0]["score"] > 0.3


def test_meaning_sees_only_the_scope_however_near_another_vector_is(
        store: MemoryStore) -> None:
    mine = store.remember(ALICE, "user", "Alice plays in a band.", "s")
    # The same text as the question: the nearest vector there is, each out of scope.
    store.remember(BOB, "user", "vegetarian dinner", "s")
    store.remember(ALICE_WORK, "task", "vegetarian dinner", "s")
    for rank in ("meaning", "hybrid"):
        found = store.recall(ALICE, "vegetarian dinner", 20, rank=rank)
        assert ids(found) == [mine]
        # Nor does it take the place of one in scope: a top 1 is the scope's best.
        assert ids(store.recall(ALICE, "vegetarian dinner", 1, rank=rank)) == [mine]
        assert mine not in ids(store.recall(BOB, "vegetarian dinner", 20, rank=rank))


def test_meaning_scores_every_visible_vector_exactly(
        store: MemoryStore, embedder: ConceptEmbedder, clock: SetClock) -> None:
    texts = ["vegetarian dinner in Lisbon", "jazz concert", "a plant-based supper",
             "Alice's band plays jazz", "the Portugal trip", "meat free", "nothing like it"]
    places: list[tuple[Scope, memory.Level, float | None]] = [
        (ALICE, "user", None), (ALICE_WORK, "task", 30.0), (BOB, "user", None),
        (ALICE, "task", None)]
    written = []
    for n, text in enumerate(texts):
        scope, level, ttl = places[n % len(places)]
        written.append((store.remember(scope, level, text, "s", ttl=ttl), scope, level, text))
    store.forget(ALICE, written[0][0])
    clock.at = "2026-10-20T09:05:00+00:00"  # the ttl=30 memory (another task's) expired
    for query in ("vegetarian supper", "jazz music band", "portugal"):
        asked = float32(embedder.vector(query))
        expected = sorted(
            ((cosine(float32(embedder.vector(text)), asked), memory_id)
             for memory_id, scope, level, text in written[1:]
             if scope.user == "alice" and (level == "user" or scope.task == "trip")),
            reverse=True)
        found = store.recall(ALICE, query, 20, rank="meaning")
        assert ids(found) == [memory_id for _, memory_id in expected]
        assert [r["score"] for r in found] == pytest.approx([s for s, _ in expected], abs=1e-6)


def test_an_expired_memory_is_found_by_no_rank(store: MemoryStore, clock: SetClock) -> None:
    kept = store.remember(ALICE, "user", "Alice plays in a band.", "s")
    store.remember(ALICE, "user", "vegetarian dinner", "s", ttl=30)
    clock.at = "2026-10-20T09:05:00+00:00"
    for rank in ("meaning", "hybrid"):
        assert ids(store.recall(ALICE, "vegetarian dinner", 5, rank=rank)) == [kept]


def test_the_pure_python_scores_equal_numpy_s(store: MemoryStore,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    for text in ("vegetarian dinner", "jazz", "Lisbon in May", "vegan supper places"):
        store.remember(ALICE, "user", text, "s")
    with monkeypatch.context() as bare:  # first, so that no copy of numpy's is kept yet
        bare.setattr(memory, "_numpy", lambda: None)
        without = store.recall(ALICE, "meat-free dinner", 10, rank="meaning")
        hybrid_without = store.recall(ALICE, "meat-free dinner", 10, rank="hybrid")
    with_numpy = store.recall(ALICE, "meat-free dinner", 10, rank="meaning")
    assert ids(store.recall(ALICE, "meat-free dinner", 10, rank="hybrid")) == ids(hybrid_without)
    assert ids(without) == ids(with_numpy)
    assert [r["score"] for r in without] == pytest.approx([r["score"] for r in with_numpy])


def test_ties_go_to_the_newer_memory(store: MemoryStore) -> None:
    first = store.remember(ALICE, "user", "jazz", "s")
    second = store.remember(ALICE, "user", "jazz", "s")
    assert ids(store.recall(ALICE, "music", 2, rank="meaning")) == [second, first]


@pytest.mark.parametrize("block", [512, 1], ids=["one partition", "blocks of 1"])
def test_a_tie_at_the_limit_goes_to_the_newest_of_many(
        store: MemoryStore, block: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memory, "_BLOCK", block)
    store.remember(ALICE, "user", "Lisbon", "s")
    tied = [store.remember(ALICE, "user", "jazz", "s") for _ in range(3)]
    store.remember(ALICE, "user", "Portugal", "s")
    for rank in ("meaning", "hybrid"):
        assert ids(store.recall(ALICE, "music", 1, rank=rank)) == [tied[-1]]
        assert ids(store.recall(ALICE, "music", 2, rank=rank)) == tied[:0:-1]


def vectors_of(target: str) -> int | None:
    """How many vector rows the SQLite file holds, behind the store's back."""
    if target.startswith("postgresql"):
        return None
    db = sqlite3.connect(target)
    try:
        return int(db.execute("SELECT count(*) FROM memory_vectors").fetchone()[0])
    finally:
        db.close()


def test_every_deletion_takes_the_vector_with_its_memory(
        store: MemoryStore, target: str, clock: SetClock) -> None:
    gone = store.remember(ALICE, "user", "vegetarian", "s")
    sourced = store.remember(ALICE, "user", "jazz", "from-chat")
    revised = store.remember(ALICE, "user", "Lisbon", "s")
    expiring = store.remember(ALICE, "user", "dinner", "s", ttl=30)
    store.remember(BOB, "user", "bob's", "s")
    assert store.stats()["without_vectors"] == 0
    assert store.forget(ALICE, gone)
    assert store.forget_source(ALICE, "from-chat") == 1
    new = store.revise(ALICE, revised, "Porto", "s")
    clock.at = "2026-10-20T09:05:00+00:00"
    assert store.purge_expired() == 1
    assert store.erase_user("bob") == 1
    assert store.stats() | {"memories": 1, "without_vectors": 0} == store.stats()
    assert vectors_of(target) in (None, 1)
    assert ids(store.recall(ALICE, "anything at all", 20, rank="meaning")) == [new]
    for memory_id in (gone, sourced, revised, expiring):
        assert memory_id not in ids(store.recall(ALICE, "vegetarian jazz lisbon dinner", 20,
                                                 rank="meaning"))


def test_expiry_on_write_takes_the_vector_too(store: MemoryStore, target: str,
                                              clock: SetClock) -> None:
    store.remember(ALICE, "user", "vegetarian", "s", ttl=30)
    clock.at = "2026-10-20T09:05:00+00:00"
    store.remember(ALICE, "user", "jazz", "s")  # the write purges the expired one
    assert store.stats()["memories"] == 1
    assert store.stats()["without_vectors"] == 0
    assert vectors_of(target) in (None, 1)


def test_compact_leaves_no_byte_of_a_forgotten_vector(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "m.db"
    marked = Broken(lambda texts: [[1.0 + 2**-20 * n for n in range(16)] for _ in texts])
    with MemoryStore(path, embedder=marked) as store:
        gone = store.remember(ALICE, "user", "secret", "s")
        blob = array.array("f", marked.embed(["x"])[0]).tobytes()
        assert blob in file_bytes(path)
        store.forget(ALICE, gone)
        store.compact()
        assert blob not in file_bytes(path)


def test_the_file_records_its_embedder_and_refuses_another(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "m.db"
    with MemoryStore(path, embedder=ConceptEmbedder()) as store:
        store.remember(ALICE, "user", VEGETARIAN, "s")
        assert (store.stats()["embedder"], store.stats()["dimensions"]) == ("concepts-1", 16)
    before = digest(path)
    for other in (ConceptEmbedder(name="concepts-2"), ConceptEmbedder(dimensions=32)):
        with pytest.raises(StoreError, match="another embedder") as caught:
            MemoryStore(path, embedder=other)
        # The recorded embedder is named, so the caller knows which to pass; the caller's
        # own value is not echoed.
        assert "records 'concepts-1' of 16 dimensions" in str(caught.value)
        assert "concepts-2" not in str(caught.value) and "32" not in str(caught.value)
        assert digest(path) == before
        with pytest.raises(StoreError, match="another embedder"):
            MemoryStore(path, embedder=other, read_only=True)
    with MemoryStore(path) as by_words:  # without one: words, and a memory without vector
        by_words.remember(ALICE, "user", "Alice likes jazz.", "s")
        assert by_words.stats()["without_vectors"] == 1
        assert by_words.stats()["embedder"] == "concepts-1"
        with pytest.raises(MemoryInputError, match="needs a store opened with an embedder"):
            by_words.recall(ALICE, "music", rank="meaning")
        assert ids(by_words.recall(ALICE, "jazz", rank="hybrid")) == ids(
            by_words.recall(ALICE, "jazz", rank="idf"))
    with MemoryStore(path, embedder=ConceptEmbedder(), read_only=True) as reader:
        assert len(reader.recall(ALICE, PARAPHRASE, 5, rank="meaning")) == 1


def test_a_read_only_store_needs_a_recorded_embedder(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "m.db"
    MemoryStore(path).close()
    with pytest.raises(StoreError, match="records no embedder"):
        MemoryStore(path, embedder=ConceptEmbedder(), read_only=True)


def test_another_process_s_reindex_is_seen_before_a_write(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "m.db"
    with MemoryStore(path, embedder=ConceptEmbedder()) as old, \
            MemoryStore(path) as other:
        old.remember(ALICE, "user", VEGETARIAN, "s")
        other.reindex(embedder=ConceptEmbedder(name="concepts-2"))
        with pytest.raises(StoreError, match="another embedder"):
            old.remember(ALICE, "user", "stale vectors", "s")
        with pytest.raises(StoreError, match="another embedder"):
            old.recall(ALICE, PARAPHRASE, rank="meaning")
        assert other.count(ALICE) == 1


def test_reindex_embeds_every_memory_anew_and_switches(target: str) -> None:
    with MemoryStore(target) as store:  # written by words alone
        written = [store.remember(ALICE, "user", f"memory {n} about jazz", "s")
                   for n in range(70)]
        store.remember(BOB, "user", VEGETARIAN, "s")
        assert store.stats()["without_vectors"] == 71
        steps: list[tuple[int, int]] = []
        embedder = ConceptEmbedder(name="concepts-2")
        store.reindex(embedder=embedder, progress=lambda *step: steps.append(step))
        assert steps == [(64, 71), (71, 71)]
        assert embedder.calls == [64, 7]
        assert store.embedder is embedder
        assert store.stats() | {"embedder": "concepts-2", "without_vectors": 0} == store.stats()
        assert ids(store.recall(BOB, PARAPHRASE, rank="meaning")) == [written[-1] + 1]
    with pytest.raises(StoreError, match="another embedder"):
        MemoryStore(target, embedder=ConceptEmbedder())
    with MemoryStore(target, embedder=ConceptEmbedder(name="concepts-2")) as store:
        assert len(store.recall(ALICE, "music", 20, rank="meaning")) == 20
    with MemoryStore(target) as store, pytest.raises(MemoryInputError, match="reindex needs"):
        store.reindex()


KILLED_MIDWAY = """
import os, signal, sys
sys.path[:0] = [{tests!r}, {root!r}]
from embedders import ConceptEmbedder
from memory import MemoryStore

class Dies(ConceptEmbedder):
    def embed(self, texts):
        if self.calls:
            os.kill(os.getpid(), signal.SIGKILL)
        return super().embed(texts)

with MemoryStore({path!r}) as store:
    store.reindex(embedder=Dies(name="concepts-2"))
"""


def test_a_reindex_killed_midway_leaves_the_old_vectors_working(
        tmp_path: pathlib.Path) -> None:
    path = tmp_path / "m.db"
    with MemoryStore(path, embedder=ConceptEmbedder()) as store:
        store.remember_many([(ALICE, "user", f"memory {n} about jazz", "s") for n in range(99)])
        wanted = store.remember(ALICE, "user", VEGETARIAN, "s")
        before = store.recall(ALICE, PARAPHRASE, 3, rank="meaning")
    code = KILLED_MIDWAY.format(tests=str(ROOT / "tests"), root=str(ROOT), path=str(path))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120)
    assert done.returncode == -signal.SIGKILL
    with MemoryStore(path, embedder=ConceptEmbedder()) as store:
        assert store.recall(ALICE, PARAPHRASE, 3, rank="meaning") == before
        assert before[0]["id"] == wanted
        assert store.stats()["embedder"] == "concepts-1"
        assert store.check()["ok"]


def lazy_vectors(texts: list[str]) -> list[Iterator[float]]:
    """Vectors read as they are used, as a client library's rows are, failing partway."""
    def vector(text: str) -> Iterator[float]:
        yield 1.0
        raise RuntimeError(f"the text was: {text}")
    return [vector(text) for text in texts]


def lazy_batch(texts: list[str]) -> Iterator[list[float]]:
    yield [1.0] * 16
    raise LookupError(f"the text was: {texts[-1]}")


@pytest.mark.parametrize("given, problem", [
    (ValueError("the text was: secret"), "the embedder raised ValueError"),
    (ValueError("could not embed: SECRE"), "the embedder raised ValueError"),
    (RuntimeError("CUDA out of memory\nsecret"), "the embedder raised RuntimeError: CUDA out"
     " of memory"),
    (lazy_vectors, "vector 0 raised RuntimeError while it was read"),
    (lazy_batch, "the embedder raised LookupError"),
    (lambda texts: [[1.0] * 16], "gave 1 vectors for 2 texts"),
    (lambda texts: [[1.0] * 15 for _ in texts], "has 15 numbers, not the 16"),
    (lambda texts: [[math.nan] * 16 for _ in texts], "not finite"),
    (lambda texts: [[1e39] * 16 for _ in texts], "not finite"),
    (lambda texts: [["one"] * 16 for _ in texts], "not a number"),
    (lambda texts: [[0.0] * 16 for _ in texts], "all zeros"),
    (lambda texts: [[1e-16] * 16 for _ in texts], "too short or too long to compare"),
    (lambda texts: [[1e20] + [1.0] * 15 for _ in texts], "too short or too long to compare"),
    (lambda texts: ["secret" for _ in texts], "not a sequence of numbers but str"),
    (lambda texts: 7, "the embedder raised TypeError"),
])
def test_a_bad_embedder_is_a_store_error_and_nothing_is_written(
        target: str, given: object, problem: str) -> None:
    with MemoryStore(target, embedder=Broken(given)) as store:
        with pytest.raises(StoreError, match=re.escape(problem)) as caught:
            store.remember_many([(ALICE, "user", "secret", "s"), (ALICE, "user", "two", "s")])
        assert "secret" not in str(caught.value)
        assert caught.value.__cause__ is None and caught.value.__context__ is None
        assert store.count(ALICE) == 0


@pytest.mark.parametrize("raised, said", [
    (ValueError("cannot embed 'Alice is vegetarian.'"), "ValueError"),
    (ValueError("could not embed: VEGETA"), "ValueError"),  # a part of a text, case aside
    (KeyError("jazz"), "KeyError"),  # a text shorter than the window, whole
    (RuntimeError("CUDA out of memory\nwhile embedding: Alice is vegetarian."),
     "RuntimeError: CUDA out of memory"),
    (ConnectionError("Connection refused"), "ConnectionError: Connection refused"),
    (RuntimeError(""), "RuntimeError"),
])
def test_an_embedder_s_message_is_given_only_where_it_cannot_quote_a_text(
        target: str, raised: Exception, said: str) -> None:
    with MemoryStore(target, embedder=Broken(raised)) as store:
        with pytest.raises(StoreError) as caught:
            store.remember_many([(ALICE, "user", VEGETARIAN, "s"), (ALICE, "user", "jazz", "s")])
        assert str(caught.value) == f"the embedder raised {said}"
        assert store.count(ALICE) == 0


def echoing(echo: str) -> Broken:
    """An embedder whose service refuses its input, echoing the batch's first text so."""
    return Broken(lambda texts: RuntimeError(
        f"HTTP 400 invalid input: {ECHOES[echo](texts[0])}"))


@pytest.mark.parametrize("echo", sorted(ECHOES))
def test_an_embedder_s_message_gives_no_text_in_any_encoding(target: str, echo: str) -> None:
    with MemoryStore(target, embedder=echoing(echo)) as store:
        store.remember(ALICE, "user", "held without a vector", "s", embed=False)
        for text in TEXTS:
            with pytest.raises(StoreError) as caught:
                store.remember(ALICE, "user", text, "s")
            assert str(caught.value) == "the embedder raised RuntimeError"
            with pytest.raises(StoreError) as caught:  # the query is a text too
                store.recall(ALICE, text, rank="meaning")
            assert str(caught.value) == "the embedder raised RuntimeError"
        assert store.count(ALICE) == 1


@given(text=st.text(st.characters(codec="utf-8", exclude_categories=["Cs", "Cc"]),
                    min_size=1, max_size=40).filter(str.strip),
       echo=st.sampled_from(sorted(ECHOES)))
def test_no_text_is_given_in_any_encoding_whatever_the_text(text: str, echo: str) -> None:
    with MemoryStore(":memory:", embedder=echoing(echo)) as store:
        with pytest.raises(StoreError) as caught:
            store.remember(ALICE, "user", text, "s")
    assert str(caught.value) == "the embedder raised RuntimeError"


@pytest.mark.parametrize("line", PLAIN_FAILURES)
def test_a_line_of_error_words_and_a_few_signs_is_given_whole(target: str, line: str) -> None:
    with MemoryStore(target, embedder=Broken(RuntimeError(line))) as store:
        for text in TEXTS:
            with pytest.raises(StoreError) as caught:
                store.remember(ALICE, "user", text, "s")
            assert str(caught.value) == f"the embedder raised RuntimeError: {line}"


@pytest.mark.parametrize("line", [
    "Http 429 too many requests",  # the case of a word as it is written (lower, upper, title)
    "HtTp 429 too many requests",  # a case chosen letter by letter carries a bit a letter
    "HTTP 429 Too Many Requests: 4827",  # six other characters
    "HTTP 429 Too Many Requests for zoe",  # a word not of the list
    r"HTTP 429 Too Many Requests \u00e9",  # an escape is other characters
    "HTTP 429 Too Many Requests\u00e9",  # not ASCII
    "HTTP 429 Trop de requêtes",  # not ASCII
])
def test_a_line_with_more_than_error_words_and_a_few_signs_is_not_given(
        line: str) -> None:
    given = "the embedder raised RuntimeError"
    with MemoryStore(":memory:", embedder=Broken(RuntimeError(line))) as store:
        with pytest.raises(StoreError) as caught:
            store.remember(ALICE, "user", "Alice is vegetarian.", "s")
    assert str(caught.value) == (f"{given}: {line}" if line == "Http 429 too many requests"
                                 else given)
    # Fewer others than the shortest text holds: a text of 3 characters, 3 others.
    with MemoryStore(":memory:", embedder=Broken(RuntimeError("HTTP 429"))) as store:
        with pytest.raises(StoreError) as caught:
            store.remember(ALICE, "user", "zoe", "s")
    assert str(caught.value) == given


def test_an_embedder_without_what_it_needs_is_refused(target: str) -> None:
    class Nameless:
        dimensions = 3

        def embed(self, texts: list[str]) -> list[list[float]]:
            return []

    for bad, named in [(Nameless(), "embedder.name"),
                       (ConceptEmbedder(name=""), "embedder.name"),
                       (ConceptEmbedder(dimensions=0), "embedder.dimensions"),
                       (Broken(None, dimensions=True), "embedder.dimensions")]:
        with pytest.raises(MemoryInputError, match=named):
            MemoryStore(target, embedder=bad)  # type: ignore[arg-type]
    with pytest.raises(MemoryInputError, match="rank='meaning' needs an embedder"):
        MemoryStore(target, rank="meaning")


def test_embedding_holds_no_lock(tmp_path: pathlib.Path) -> None:
    embedder = Waiting()
    with MemoryStore(tmp_path / "m.db", embedder=embedder) as store:
        embedder.go.set()
        store.remember(ALICE, "user", "first", "s")
        embedder.go.clear()
        writer = threading.Thread(target=store.remember, args=(ALICE, "user", "slow", "s"))
        embedder.started.clear()
        writer.start()
        try:
            assert embedder.started.wait(timeout=30)
            counted: list[int] = []
            reader = threading.Thread(target=lambda: counted.append(store.count(ALICE)))
            reader.start()
            reader.join(timeout=30)
            assert counted == [1]  # while the other thread's model still runs
        finally:
            embedder.go.set()
            writer.join(timeout=30)
        assert not writer.is_alive()
        assert store.count(ALICE) == 2


def test_bulk_writes_embed_in_batches(store: MemoryStore, embedder: ConceptEmbedder) -> None:
    store.remember_many([(ALICE, "user", f"jazz {n}", "s") for n in range(150)])
    assert embedder.calls == [64, 64, 22]
    records = store.export_user("alice")
    assert "vector" not in json.dumps(records)  # the model's, not the user's
    embedder.calls.clear()
    store.import_memories([record | {"user": "bob"} for record in records[:70]])
    assert embedder.calls == [64, 6]
    assert store.stats()["without_vectors"] == 0


def test_hybrid_trusts_meaning_when_words_cover_little_of_the_question(
        store: MemoryStore) -> None:
    wanted = store.remember(ALICE, "user", VEGETARIAN, "c/1")
    # A lure: one word of the question, none of its meaning.
    lure = store.remember(ALICE, "user", "Alice bought new places mats for the hallway.", "c/2")
    assert ids(store.recall(ALICE, PARAPHRASE, 1, rank="idf")) == [lure]
    assert ids(store.recall(ALICE, PARAPHRASE, 1, rank="hybrid")) == [wanted]


def test_hybrid_scores_add_up_as_explained(store: MemoryStore) -> None:
    for n, text in enumerate(["Alice is vegetarian.", "We ate dinner in Lisbon.",
                              "The jazz band played late.", "Supper at a vegan place.",
                              "Nothing here."]):
        store.remember(ALICE, "user", text, f"chat/{n}")
    for context in (False, True):
        found = store.recall(ALICE, "vegetarian dinner in Lisbon", 5, rank="hybrid",
                             context=context, explain=True)
        assert len(found) == 5
        for result in found:
            why = result["why"]
            held = why["matched"].values()
            informed = sum(weight >= memory._INFORMATIVE for weight in held) >= 2
            words = sum(held) * informed + sum(why.get("lent", {}).values())
            assert result["score"] == pytest.approx(
                why["meaning"] + memory._HYBRID_WORDS * words / why["question"])
        assert any("lent" in r["why"] for r in found) == context


@pytest.mark.parametrize("numpy", [True, False])
def test_hybrid_counts_words_only_where_two_inform(store: MemoryStore, numpy: bool,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A word most of the scope's memories hold (the user's own name) informs nothing:
    a memory that shares it and one rare word has no word evidence; one that shares two
    rare words counts every word it shares, the name's too. With numpy (every memory
    scored at once) and without."""
    if not numpy:
        monkeypatch.setattr(memory, "_numpy", lambda: None)
    one = store.remember(ALICE, "user", "Alice heard jazz.", "c/1")
    two = store.remember(ALICE, "user", "Alice heard jazz in Lisbon.", "c/2")
    store.remember_many([(ALICE, "user", f"Alice note {n}.", f"c/{n + 3}") for n in range(10)])
    found = {r["id"]: r["why"] for r in store.recall(ALICE, "alice jazz lisbon", 5,
                                                     rank="hybrid", explain=True)}
    assert found[one]["matched"]["alice"] < memory._INFORMATIVE <= found[one]["matched"]["jazz"]
    assert store.recall(ALICE, "alice jazz lisbon", 5, rank="hybrid", explain=True)[0][
        "id"] == two
    scores = {r["id"]: r["score"] for r in store.recall(ALICE, "alice jazz lisbon", 5,
                                                         rank="hybrid", explain=True)}
    assert scores[one] == pytest.approx(found[one]["meaning"])  # its words count nothing
    assert scores[two] == pytest.approx(found[two]["meaning"] + sum(
        found[two]["matched"].values()) / found[two]["question"])


@pytest.mark.stems
def test_the_recommended_settings_rank_hybrid_with_an_embedder(target: str) -> None:
    with MemoryStore(target, embedder=ConceptEmbedder(), **memory.RECOMMENDED) as store:
        wanted = store.remember(ALICE, "user", VEGETARIAN, "c/1")
        store.remember(ALICE, "user", "Alice bought new places mats.", "c/2")
        assert store.rank == "hybrid"
        assert ids(store.recall(ALICE, PARAPHRASE, 1)) == [wanted]


def test_every_statement_of_meaning_carries_the_scope(store: MemoryStore) -> None:
    store.remember_many([(ALICE, "user", VEGETARIAN, "c/1"), (ALICE_WORK, "task", "jazz", "c/2"),
                         (BOB, "user", "bob", "c/1")])
    statements: list[str] = []
    store.db.set_trace_callback(statements.append)
    store.recall(ALICE, PARAPHRASE, rank="meaning")
    store.recall(ALICE, PARAPHRASE, rank="hybrid", context=True)
    store.remember(ALICE, "user", "Alice cooks lentils.", "c/3")
    store.recall(ALICE, PARAPHRASE, rank="hybrid", context=True)  # the kept copies grow
    store.revise(ALICE, 1, "Alice is vegan.", "c/1")
    store.forget(ALICE_WORK, 2)
    store.db.set_trace_callback(None)
    touching = [s for s in statements if TOUCHES_MEMORY_DATA.search(s)]
    assert any("memory_vectors" in s for s in touching)
    grown = {s.split(" FROM ")[0] for s in touching if "AND id > " in s}
    # The kept copies' growth (and on SQLite the write's look for vectors to seal).
    grown.discard("SELECT newest.last_id, (SELECT count(*)")
    assert grown == {"SELECT (SELECT count(*)", "SELECT id, vector", "SELECT id, conversation"}
    for statement in touching:
        assert re.search(r"WHERE user_id = .*\btask_(id|key) (IS|=|IN) ", statement), statement


def test_a_version_6_file_upgrades_and_keeps_its_results(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "v6.db"
    shutil.copy(FIXTURES / "version-6-4fb685d.sqlite3", path)
    expected = json.loads((FIXTURES / "version-6-4fb685d.json").read_text())
    with MemoryStore(path, read_only=True) as reader:  # read as it is, by words
        assert reader.stats()["without_vectors"] == reader.stats()["memories"]
        with pytest.raises(StoreError, match="records no embedder"):
            MemoryStore(path, read_only=True, embedder=ConceptEmbedder())
    with MemoryStore(path, embedder=ConceptEmbedder()) as store:
        assert store.stats()["schema_version"] == memory.SCHEMA_VERSION == 16
        exported = [store.export_user(user) for user in ("alice", "bob")]
        assert sorted([r["id"], r["user"], r["task"], r["text"], r["source"], r["created_at"],
                       r["expires_at"]] for records in exported for r in records) == \
            sorted(expected["rows"])
        store.reindex(embedder=store.embedder)
        assert store.stats()["without_vectors"] == 0


def memory_command(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`python3 -m memory ARGS` with the tests' embedders importable."""
    return subprocess.run([sys.executable, "-m", "memory", *args], cwd=ROOT, text=True,
                          capture_output=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "tests"), **env})


def test_the_command_line_takes_an_embedder_by_import_path(tmp_path: pathlib.Path) -> None:
    path = str(tmp_path / "m.db")
    scope = ["--user", "alice", "--task", "trip"]
    done = memory_command("remember", path, *scope, VEGETARIAN, "--embedder",
                          "embedders:concepts")
    assert done.returncode == 0, done.stderr
    asked = ["recall", path, *scope, PARAPHRASE, "--rank", "meaning"]
    for found in (memory_command(*asked, "--embedder", "embedders:concepts"),
                  memory_command(*asked, MEMORY_EMBEDDER="embedders:concepts")):
        assert found.returncode == 0, found.stderr
        assert json.loads(found.stdout)["text"] == VEGETARIAN
    refused = memory_command(*asked)
    assert refused.returncode == 1 and "needs a store opened with an embedder" in refused.stderr
    for spec in ("no_such_module:factory", "embedders:no_such_factory", "embedders"):
        bad = memory_command(*asked, "--embedder", spec)
        assert bad.returncode == 1 and spec not in bad.stderr, bad.stderr
    moved = memory_command("reindex", path, "--embedder", "embedders:concepts_two",
                           MEMORY_EMBEDDER="embedders:concepts")
    assert moved.returncode == 0, moved.stderr
    assert moved.stdout == "reindexed with embedder dimensions=16\n"
    stats = json.loads(memory_command("stats", path).stdout)
    assert (stats["embedder"], stats["without_vectors"]) == ("concepts-2", 0)
    stale = memory_command(*asked, MEMORY_EMBEDDER="embedders:concepts")
    assert stale.returncode == 1 and "another embedder" in stale.stderr


def test_a_version_7_file_as_its_release_wrote_it_recalls_by_meaning(
        tmp_path: pathlib.Path) -> None:
    path = tmp_path / "v7.db"
    shutil.copy(FIXTURES / "version-7-d54e473.sqlite3", path)
    recorded = json.loads((FIXTURES / "version-7-d54e473.json").read_text())
    with MemoryStore(path, read_only=True, embedder=ConceptEmbedder()) as reader:
        assert reader.stats()["embedder"] == recorded["embedder"]
        assert reader.stats()["without_vectors"] == 0
        for scoped, expected in recorded["meaning"].items():
            found = reader.recall(Scope(*scoped.split("/")), recorded["query"],
                                  recorded["limit"], rank="meaning")
            assert ids(found) == expected


def test_a_kept_copy_of_the_vectors_follows_every_change_another_store_makes(
        target: str) -> None:
    with MemoryStore(target, embedder=ConceptEmbedder()) as reader, \
            MemoryStore(target, embedder=ConceptEmbedder()) as writer:
        first, second = writer.remember_many([(ALICE, "user", "jazz", "s"),
                                              (ALICE, "user", "music", "s")])
        assert ids(reader.recall(ALICE, "concert", 5, rank="meaning")) == [second, first]
        writer.forget(ALICE, second)
        assert ids(reader.recall(ALICE, "concert", 5, rank="meaning")) == [first]
        revised = writer.revise(ALICE, first, "band", "s")  # one out, one in
        assert ids(reader.recall(ALICE, "concert", 5, rank="meaning")) == [revised]
        task = writer.remember(ALICE, "task", "jazz", "s")
        assert ids(reader.recall(ALICE, "concert", 5, rank="meaning")) == [task, revised]
        assert ids(reader.recall(ALICE_WORK, "concert", 5, rank="meaning")) == [revised]
        writer.erase_user("alice")
        assert reader.recall(ALICE, "concert", 5, rank="meaning") == []


def test_a_kept_copy_of_the_vectors_grows_with_later_writes(
        target: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """After writes alone (with the embedder, at the task level, a batch, one by a store
    without an embedder, so without a vector), recall by meaning and hybrid reads only the
    vectors written since and ranks as a store reading the scope afresh; after a deletion,
    even with a write that keeps the count, it reads the scope's vectors again."""
    pytest.importorskip("numpy")
    reads = [0]  # the reads of a scope's vectors from the first
    real_blocks = memory._vector_blocks

    def counted_blocks(db: memory._Session, key: memory._ScopeKey, dimensions: int,
                       *reuse: Any, **past: Any) -> Iterator[memory._Vectors]:
        reads[0] += 1
        return real_blocks(db, key, dimensions, *reuse, **past)
    monkeypatch.setattr(memory, "_vector_blocks", counted_blocks)
    ranks: list[memory.Rank] = ["meaning", "hybrid"]
    asked = [(scope, query, rank) for scope in (ALICE, ALICE_WORK)
             for query in ("meat-free supper", "jazz concert") for rank in ranks]

    def recalled(store: MemoryStore) -> list[list[memory.Recalled]]:
        return [store.recall(scope, query, 5, rank=rank, context=True, explain=True)
                for scope, query, rank in asked]

    def afresh() -> list[list[memory.Recalled]]:
        with MemoryStore(target, embedder=ConceptEmbedder()) as fresh:
            return recalled(fresh)

    with MemoryStore(target, embedder=ConceptEmbedder()) as store:
        first = store.remember_many([(ALICE, "user", text, f"c/{n}") for n, text in
                                     enumerate(["vegetarian dinner", "jazz", "Lisbon"])])
        recalled(store)
        writes = [
            lambda: store.remember(ALICE, "user", "a plant-based supper", "c/3"),
            lambda: store.remember(ALICE_WORK, "task", "Alice's band plays jazz", "d/0"),
            lambda: store.remember_many([(ALICE, "user", "meat free", "c/4"),
                                         (ALICE, "user", "the Portugal trip", "e/0")])]

        def without_an_embedder() -> None:
            with MemoryStore(target) as plain:
                plain.remember(ALICE, "user", "jazz dinner", "c/5")
        for write in [*writes, without_an_embedder]:
            write()
            expected, before = afresh(), reads[0]
            assert recalled(store) == expected
            assert reads[0] == before
        store.forget(ALICE, first[1])
        store.remember(ALICE, "user", "vegan supper places", "c/6")
        expected, before = afresh(), reads[0]
        assert recalled(store) == expected
        assert reads[0] - before == 2  # both scopes see the user's memories


class Shifted(ConceptEmbedder):
    """Another model of the same dimensions, whose cosines differ."""

    def vector(self, text: str) -> list[float]:
        return [x + 1.0 for x in super().vector(text)]


def test_a_kept_copy_of_one_embedder_s_vectors_is_not_used_after_a_reindex(
        target: str) -> None:
    with MemoryStore(target, embedder=ConceptEmbedder()) as store:
        store.remember_many([(ALICE, "user", text, "s") for text in
                             ("vegetarian dinner", "jazz", "Lisbon", "Alice's band plays jazz")])
        before = store.recall(ALICE, "jazz concert", 5, rank="meaning")
        store.reindex(embedder=Shifted(name="shifted-1"))
        after = store.recall(ALICE, "jazz concert", 5, rank="meaning")
    with MemoryStore(target, embedder=Shifted(name="shifted-1")) as fresh:
        assert after == fresh.recall(ALICE, "jazz concert", 5, rank="meaning")
    assert [r["score"] for r in after] != [r["score"] for r in before]


def test_a_store_that_records_an_embedder_says_at_open_when_it_has_none(
        target: str, caplog: pytest.LogCaptureFixture) -> None:
    with MemoryStore(target, embedder=ConceptEmbedder()) as store:
        store.remember(ALICE, "user", VEGETARIAN, "s")
    caplog.set_level(logging.INFO, logger="memory")
    warned = [record for record in caplog.records if record.levelno == logging.WARNING]
    assert warned == []
    with MemoryStore(target, read_only=True):  # writes nothing: nothing to say
        pass
    with MemoryStore(target) as by_words:
        by_words.remember(ALICE, "user", "Alice likes jazz.", "s")
        assert by_words.stats()["without_vectors"] == 1
    (said,) = [record for record in caplog.records if record.levelno == logging.WARNING]
    assert "opened without one" in said.getMessage() and "reindex" in said.getMessage()
    assert "concepts" not in said.getMessage() and "jazz" not in said.getMessage()
    with MemoryStore(target, embedder=ConceptEmbedder()) as store:
        store.reindex(embedder=ConceptEmbedder())
        assert store.stats()["without_vectors"] == 0


TOKYO = "東京タワーに行きたい"
ALICE_TEA = "Алиса любит чай"


@pytest.mark.parametrize("raised", [
    ValueError(json.dumps({"error": "bad input", "input": [TOKYO]})),  # JSON's \u escapes
    ValueError(f"cannot embed {ALICE_TEA.encode()!r}"),  # a bytes repr's \x escapes
    ValueError("bad request: " + "".join(f"%{b:02X}" for b in TOKYO.encode())),  # a URL's
    ValueError("cannot embed \\U00006771\\U00004eac\\U000030bf\\U000030ef"),
    ValueError("cannot embed ＢＯＢ ＥＡＴＳ"),  # widened: NFKC
    ValueError("cannot embed Alice is here"),  # the text broken by zero-width spaces
], ids=["json", "bytes-repr", "url", "code-points", "fullwidth", "zero-width"])
def test_an_embedder_s_message_quoting_a_text_in_an_escaped_form_is_not_given(
        target: str, raised: Exception) -> None:
    broken = "\u200b".join("Alice is here")  # zero-width spaces between its letters
    texts = [TOKYO, ALICE_TEA, "Bob eats no meat.", broken]
    with MemoryStore(target, embedder=Broken(raised)) as store:
        with pytest.raises(StoreError) as caught:
            store.remember_many([(ALICE, "user", text, "s") for text in texts])
        assert str(caught.value) == "the embedder raised ValueError"
        assert store.count(ALICE) == 0
