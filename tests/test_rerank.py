"""A reranker the caller brings: it reorders recall's best RERANK_DEPTH, within the scope
and the filter, on both engines; the command line, `memory mcp` and the adapters take it
where they open a store. The reranker is the suite's own (tests/embedders.py)."""

from __future__ import annotations

import asyncio
import importlib
import json
import math
import os
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

import pytest
from echoes import ECHOES, TEXTS
from embedders import ShortestFirst

import memory
from helpers import ALICE, ALICE_WORK, BOB, ROOT, SetClock
from memory import MemoryInputError, MemoryStore, StoreError

# Alice's memories of tea, longest first: the shared rank puts the one holding the most of
# the query's words first, the reranker the shortest.
TEAS = ["green tea at breakfast, oolong and jasmine at noon", "green tea at noon", "green tea"]
ASKED = "green tea oolong jasmine noon"


def texts(found: list[Any]) -> list[str]:
    return [result["text"] for result in found]


def remembered(store: MemoryStore) -> None:
    for text in TEAS:
        store.remember(ALICE, "user", text, "chat", metadata={"kind": "drink"})
    store.remember(ALICE, "user", "tea!", "chat", metadata={"kind": "plan"})
    store.remember(BOB, "user", "te tea", "chat", metadata={"kind": "drink"})
    store.remember(ALICE_WORK, "task", "tea?", "chat", metadata={"kind": "drink"})


def test_the_reranker_reorders_the_best_the_scope_and_the_filter_admit(
        target: str, clock: SetClock) -> None:
    reranker = ShortestFirst()
    with MemoryStore(target, clock=clock, rank="shared", reranker=reranker) as store:
        remembered(store)
        ranked = store.recall(ALICE, ASKED, 3, rerank=False, where={"kind": "drink"},
                              explain=True)
        assert texts(ranked) == TEAS and reranker.calls == []
        found = store.recall(ALICE, ASKED, 3, where={"kind": "drink"}, explain=True)
        assert texts(found) == TEAS[::-1]
        # Its texts were the scope's that the filter admits: not Bob's, not another
        # task's, not Alice's plan.
        assert reranker.calls == [(ASKED, TEAS)]
        assert [r["score"] for r in found] == [-9.0, -17.0, -float(len(TEAS[0]))]
        # explain: the rank's score beside the reranker's, and the words add up to it.
        by_id = {r["id"]: r for r in ranked}
        for result in found:
            assert result["why"]["ranked"] == by_id[result["id"]]["score"]
            assert math.isclose(sum(result["why"]["matched"].values()),
                                result["why"]["ranked"])
        # min_score compares the reranker's score; budget cuts the reordered list.
        assert texts(store.recall(ALICE, ASKED, 3, where={"kind": "drink"},
                                  min_score=-17)) == TEAS[:0:-1]
        assert texts(store.recall(ALICE, ASKED, 3, where={"kind": "drink"},
                                  budget=10)) == ["green tea"]
        assert texts(store.recall(BOB, ASKED, 3)) == ["te tea"]


def test_it_reads_the_rank_s_best_fifty_and_pages_through_them_alone(
        target: str, clock: SetClock) -> None:
    reranker = ShortestFirst()
    with MemoryStore(target, clock=clock, rank="shared", reranker=reranker) as store:
        # 60 memories: the shared rank puts those with more of the query's words first
        # (each a word more than the next), the newer first among equals.
        for number in range(60):
            words = " ".join(f"w{at}" for at in range(60 - number))
            store.remember(ALICE, "user", f"{words} {'x' * number}", "chat")
        query = " ".join(f"w{at}" for at in range(60))
        unranked = [r["text"] for r in store.recall(ALICE, query, 20, rerank=False)]
        pages = [store.recall(ALICE, query, 20, offset=offset) for offset in (0, 20, 40, 60)]
        (asked, given), = reranker.calls[:1]
        assert len(given) == memory.RERANK_DEPTH == 50 and given[:20] == unranked
        assert all(call == (asked, given) for call in reranker.calls)
        everything = [text for page in pages for text in texts(page)]
        # The best 50 by the rank, reordered (shortest first); none past them.
        assert everything == sorted(given, key=len) and len(pages[3]) == 0


def test_rerank_is_asked_of_a_store_that_has_one_and_of_a_query_with_words(
        target: str) -> None:
    with MemoryStore(target, rank="idf") as store:
        store.remember(ALICE, "user", "tea", "chat")
        with pytest.raises(MemoryInputError, match="needs the store's reranker"):
            store.recall(ALICE, "tea", rerank=True)
        with pytest.raises(MemoryInputError, match="rerank must be a bool"):
            store.recall(ALICE, "tea", rerank=1)  # type: ignore[arg-type]
        assert texts(store.recall(ALICE, "tea", rerank=False)) == ["tea"]
    reranker = ShortestFirst()
    with MemoryStore(target, rank="idf", reranker=reranker) as store:
        store.remember(ALICE, "user", "north", "chat", vectors=[[1.0, 0.0]])
        with pytest.raises(MemoryInputError, match="must have words"):
            store.recall(ALICE, " ", rank="meaning", vector=[1.0, 0.0], rerank=True)
        # A recall by the query's vector alone has nothing for a reranker to read.
        assert texts(store.recall(ALICE, "", rank="meaning", vector=[1.0, 0.0])) == ["north"]
        assert reranker.calls == []


class Raising:
    name = "raising"

    def rerank(self, query: str, texts: Sequence[str]) -> list[float]:
        raise ValueError(f"cannot score {texts[0]!r}")


class Answering:
    name = "answering"

    def __init__(self, answer: Any) -> None:
        self.answer = answer

    def rerank(self, query: str, texts: Sequence[str]) -> Any:
        return self.answer(texts)


def test_a_reranker_s_failure_is_a_store_error_naming_what_it_did_never_a_text(
        target: str) -> None:
    def failure(reranker: Any) -> str:
        with MemoryStore(target, rank="idf", reranker=reranker) as store:
            store.remember(ALICE, "user", "secret tea recipe", "chat")
            store.remember(ALICE, "user", "tea", "chat")
            with pytest.raises(StoreError) as caught:
                store.recall(ALICE, "tea")
            store.erase_user("alice")
        assert "secret" not in str(caught.value) and caught.value.__context__ is None
        return str(caught.value)

    assert failure(Raising()) == "the reranker raised ValueError"
    assert failure(Answering(lambda texts: [1.0])) == "the reranker gave 1 scores for 2 texts"
    assert failure(Answering(lambda texts: [1.0, math.nan])) == (
        "the reranker gave a score that is not a finite number")
    for wrong in (lambda texts: "12", lambda texts: ["1", "2"], lambda texts: None):
        assert failure(Answering(wrong)) == (
            "the reranker gave something other than a sequence of numbers")
    lazy = Answering(lambda texts: (1 / 0 for _ in texts))
    assert failure(lazy) == ("the reranker's scores raised ZeroDivisionError while they were"
                             " read")
    # A model's answer is often an array of its own floats, or a generator: both are read.
    with MemoryStore(target, rank="idf", reranker=Answering(
            lambda texts: (float(len(text)) for text in texts))) as store:
        store.remember(ALICE, "user", "tea", "chat")
        store.remember(ALICE, "user", "tea for two", "chat")
        assert texts(store.recall(ALICE, "tea")) == ["tea for two", "tea"]
    # Scores that tie keep the rank's order (here the newer first).
    with MemoryStore(target, rank="idf", reranker=Answering(
            lambda texts: [0] * len(texts))) as store:
        assert texts(store.recall(ALICE, "tea")) == ["tea for two", "tea"]


def test_a_reranker_that_changes_its_list_or_answers_a_mapping_is_a_store_error(
        target: str) -> None:
    def failure(answer: Any) -> str:
        with MemoryStore(target, rank="idf", reranker=Answering(answer)) as store:
            store.remember(ALICE, "user", "tea", "chat")
            store.remember(ALICE, "user", "tea for two", "chat")
            with pytest.raises(StoreError) as caught:
                store.recall(ALICE, "tea")
            store.erase_user("alice")
        return str(caught.value)

    def appending(texts: Any) -> list[float]:
        texts.append("more")
        return [1.0] * len(texts)

    def clearing(texts: Any) -> list[float]:
        texts.clear()
        return []

    def popping(texts: Any) -> list[float]:
        texts.pop()
        return [1.0, 2.0]

    def replacing(texts: Any) -> list[float]:
        texts[0] = 7
        return [1.0, 2.0]

    for changing in (appending, clearing, popping, replacing):
        assert failure(changing) == "the reranker changed the list of texts it was given"
    # A mapping's keys, a set's members, a view of either: no order of the texts.
    for unordered in (lambda texts: {0: 0.5, 1: 0.9}, lambda texts: {0.5, 0.9},
                      lambda texts: {0.5: "a", 0.9: "b"}.keys(),
                      lambda texts: {"a": 0.5, "b": 0.9}.items()):
        assert failure(unordered) == (
            "the reranker gave something other than a sequence of numbers")


@pytest.mark.parametrize("echo", sorted(ECHOES))
def test_a_reranker_s_message_gives_no_text_in_any_encoding(target: str, echo: str) -> None:
    form = ECHOES[echo]
    class Echoing:
        name = "echoing"

        def __init__(self, quoted: Any) -> None:
            self.quoted = quoted

        def rerank(self, query: str, texts: Sequence[str]) -> list[float]:
            raise RuntimeError(f"HTTP 400 invalid input: {form(self.quoted(query, texts))}")

    for quoted in (lambda query, texts: query, lambda query, texts: texts[-1]):
        with MemoryStore(target, rank="idf", reranker=Echoing(quoted)) as store:
            for text in TEXTS:  # each found by the word beside it
                store.remember(ALICE, "user", f"{text} tea", "chat")
            for text in TEXTS:
                with pytest.raises(StoreError) as caught:
                    store.recall(ALICE, f"tea {text}")
                assert str(caught.value) == "the reranker raised RuntimeError"
            store.erase_user("alice")


def test_a_reranker_is_checked_when_the_store_opens(tmp_path: Any) -> None:
    path = str(tmp_path / "m.db")
    with pytest.raises(MemoryInputError, match="an instance, got the class ShortestFirst"):
        MemoryStore(path, reranker=ShortestFirst)  # type: ignore[arg-type]
    with pytest.raises(MemoryInputError, match="reranker.name must be a str"):
        MemoryStore(path, reranker=object())  # type: ignore[arg-type]
    nameless = Answering(list)
    nameless.rerank = None  # type: ignore[method-assign,assignment]
    with pytest.raises(MemoryInputError, match="reranker.rerank must be callable"):
        MemoryStore(path, reranker=nameless)


def test_a_recall_as_of_a_time_is_reranked_from_the_memories_of_then(
        target: str, clock: SetClock) -> None:
    reranker = ShortestFirst()
    with MemoryStore(target, clock=clock, rank="shared", reranker=reranker,
                     history=True) as store:
        ids = [store.remember(ALICE, "user", text, "chat") for text in TEAS]
        # Past a page of the past's recall: the reranker reads the best 50 of then.
        fillers = [f"green {'x' * at}" for at in range(60, 90)]
        for text in fillers:
            store.remember(ALICE, "user", text, "chat")
        then = clock.at
        clock.advance(60)
        store.revise(ALICE, ids[2], "green tea, and a very long text written later", "chat")
        assert texts(store.recall(ALICE, ASKED, 3, as_of=then)) == TEAS[::-1]
        assert sorted(reranker.calls[-1][1]) == sorted(TEAS + fillers)
        assert [r["id"] for r in store.recall(ALICE, ASKED, 3, as_of=then)] == ids[::-1]
        assert texts(store.recall(ALICE, ASKED, 20, offset=20, as_of=then)) == fillers[17:]


def test_the_async_store_passes_it_through() -> None:
    async def run() -> list[Any]:
        reranker = ShortestFirst()
        async with memory.AsyncMemoryStore(":memory:", rank="shared",
                                           reranker=reranker) as store:
            for text in TEAS:
                await store.remember(ALICE, "user", text, "chat")
            return await store.recall(ALICE, ASKED, 3)

    assert texts(asyncio.run(run())) == TEAS[::-1]


def command(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "memory", *args], cwd=ROOT, text=True,
                          capture_output=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "tests"), **env})


def test_the_command_line_takes_a_reranker_by_import_path(tmp_path: Any) -> None:
    path = str(tmp_path / "m.db")
    scope = ["--user", "alice", "--task", "trip"]
    with MemoryStore(path) as store:
        for text in TEAS:
            store.remember(ALICE, "user", text, "chat")
    asked = ["recall", path, *scope, ASKED, "--rank", "shared"]
    for done in (command(*asked, "--reranker", "embedders:shortest_first"),
                 command(*asked, MEMORY_RERANKER="embedders:shortest_first")):
        assert done.returncode == 0, done.stderr
        assert [json.loads(line)["text"] for line in done.stdout.splitlines()] == TEAS[::-1]
    kept = command(*asked, "--no-rerank", MEMORY_RERANKER="embedders:shortest_first")
    assert [json.loads(line)["text"] for line in kept.stdout.splitlines()] == TEAS
    refused = command(*asked, "--reranker", "embedders:concepts")
    assert refused.returncode == 1
    assert "reranker.rerank must be callable" in refused.stderr
    asked_of_none = command(*asked, "--rerank")
    assert asked_of_none.returncode == 1 and "needs the store's reranker" in asked_of_none.stderr


# Each adapter that recalls, with what its constructor needs besides the store's options;
# each opens its store with them (CrewAI and Strands run where their extra is installed).
ADAPTERS = {
    "adk": ("ADKMemoryService", {}),
    "agent_framework": ("MemoryContextProvider", {"user": "alice"}),
    "langgraph": ("LangGraphStore", {"user": "alice"}),
    "llama_index": ("MemoryBlock", {"user": "alice"}),
    "pydantic_ai": ("PydanticAIMemoryStore", {"user": "alice"}),
    "crewai": ("CrewAIStorage", {"user": "alice"}),
    "strands": ("StrandsMemoryStore", {"user": "alice"}),
}


@pytest.mark.parametrize("module", ADAPTERS)
def test_each_adapter_opens_its_store_with_the_reranker(module: str, tmp_path: Any) -> None:
    try:
        adapters = importlib.import_module(f"memory_frameworks.{module}")
    except ImportError:
        pytest.skip(f"memory_frameworks.{module}'s framework is not installed here")
    named, needed = ADAPTERS[module]
    reranker = ShortestFirst()
    adapter = getattr(adapters, named)(str(tmp_path / "m.db"), reranker=reranker, **needed)
    try:
        assert adapter.store.reranker is reranker
    finally:
        adapter.close()


def test_a_langgraph_search_is_reordered_by_the_reranker(tmp_path: Any) -> None:
    langgraph = pytest.importorskip("memory_frameworks.langgraph")
    store = langgraph.LangGraphStore(str(tmp_path / "m.db"), user="alice",
                                     reranker=ShortestFirst())
    try:
        for number, text in enumerate(TEAS):
            store.put(("alice", "notes"), f"n{number}", {"text": text})
        found = store.search(("alice", "notes"), query=ASKED, limit=3)
        assert [item.value["text"] for item in found] == TEAS[::-1]
    finally:
        store.close()
