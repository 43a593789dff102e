"""Recall that fits a prompt: explain, budget, and paging through memories, on each engine,
from the library and the command line."""

from __future__ import annotations

import json
import pathlib
import random
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import memory
from helpers import ALICE, ALICE_WORK, BOB, WORD_RANKS, SetClock, cli
from memory import MemoryInputError, MemoryStore, Rank

TEXTS = ["Alice likes green tea", "Alice books the Lisbon hotel", "green hotel by the river",
         "tea at the Lisbon river hotel", "Bob likes coffee", "the river is green"]


def fill(store: MemoryStore) -> list[int]:
    ids = [store.remember(ALICE, "user" if n % 2 else "task", text, f"s/{n}")
           for n, text in enumerate(TEXTS * 3)]
    store.remember(BOB, "user", "green tea hotel river Lisbon", "s")  # never Alice's
    return ids


@pytest.mark.parametrize("rank", WORD_RANKS)
@pytest.mark.parametrize("index_from", [1, memory.INDEX_FROM])
def test_explain_adds_why_and_changes_nothing_else(target: str, rank: Rank,
                                                   index_from: int) -> None:
    """The same results in the same order, each with `why`: the query's words it holds,
    in sorted order, whose contributions add up to its score (each word 1 for shared);
    with the owners' words indexed and not."""
    with mock.patch.object(memory, "INDEX_FROM", index_from), MemoryStore(target) as store:
        fill(store)
        for query in ("green tea by the Lisbon river", "hotel", "coffee", "nothing here"):
            plain = store.recall(ALICE, query, 20, rank=rank)
            explained = store.recall(ALICE, query, 20, rank=rank, explain=True)
            assert [{k: v for k, v in m.items() if k != "why"} for m in explained] == plain
            wanted = memory.words(query)
            for found in explained:
                matched = found["why"]["matched"]
                assert list(matched) == sorted(wanted & memory.words(found["text"]))
                assert sum(matched.values()) == pytest.approx(found["score"], rel=1e-12)
                if rank == "shared":
                    assert set(matched.values()) == {1}
            assert all("why" not in m for m in plain)


@pytest.mark.parametrize("budget", [1, 15, 21, 30, 60, 500])
def test_a_budget_bounds_the_texts_best_first(store: MemoryStore, budget: int) -> None:
    fill(store)
    every = store.recall(ALICE, "green tea hotel river Lisbon", 20, rank="idf")
    fitted = store.recall(ALICE, "green tea hotel river Lisbon", 20, rank="idf", budget=budget)
    expected, left = [], budget
    for found in every:  # best first; one that does not fit what is left is skipped
        if len(found["text"]) <= left:
            expected.append(found)
            left -= len(found["text"])
    assert fitted == expected
    assert sum(len(m["text"]) for m in fitted) <= budget
    if len(every[0]["text"]) <= budget:
        assert fitted and fitted[0] == every[0]  # never empty when the best alone fits


def test_bad_budgets_pages_and_explains_are_refused(store: MemoryStore) -> None:
    fill(store)
    for bad in (0, -1, True, 1.5, "10", 2**63):
        with pytest.raises(MemoryInputError, match="budget must be"):
            store.recall(ALICE, "tea", budget=bad)  # type: ignore[arg-type]
        for name in ("after", "limit"):
            if (name, bad) == ("after", 0):  # the first page's cursor
                continue
            with pytest.raises(MemoryInputError, match=f"{name} must be"):
                store.memories(ALICE, **{name: bad})  # type: ignore[arg-type]
    with pytest.raises(MemoryInputError, match="explain must be a bool"):
        store.recall(ALICE, "tea", explain="yes")  # type: ignore[arg-type]


@settings(max_examples=25)
@given(sizes=st.lists(st.integers(1, 7), min_size=1, max_size=6), seed=st.integers(0, 99))
def test_paging_through_gives_memories_exactly(tmp_path_factory: pytest.TempPathFactory,
                                               sizes: list[int], seed: int) -> None:
    """Pages after the last id of the one before, of any sizes, with forgotten, expired
    and other scopes' memories among them, add up to memories(scope)."""
    rng = random.Random(seed)
    clock = SetClock()
    path = tmp_path_factory.mktemp("paging") / "m.db"
    with MemoryStore(path, clock=clock) as store:
        for n in range(30):
            scope = rng.choice([ALICE, ALICE, ALICE_WORK, BOB])
            store.remember(scope, rng.choice(["user", "task"]), f"note {n}", "s",
                           ttl=rng.choice([None, None, 60]))
        for memory_id in rng.sample(range(1, 31), 5):
            store.forget(ALICE, memory_id)
        clock.at = "2026-10-20T10:00:00+00:00"  # the ttl=60 memories have expired
        every = store.memories(ALICE)
        pages: list[memory.Memory] = []
        after: int | None = None
        for size in sizes * 10:
            page = store.memories(ALICE, after=after, limit=size)
            assert page == every[len(pages):len(pages) + size]  # full but for the last
            if not page:
                break
            pages += page
            after = page[-1]["id"]
        assert pages == every[:len(pages)]
        assert store.memories(ALICE, after=after) == every[len(pages):]
        assert store.memories(ALICE, after=None, limit=None) == every
        assert store.memories(ALICE, after=0) == every  # 0: before every id
        assert store.memories(ALICE, after=0, limit=3) == every[:3]


def test_the_command_line_explains_bounds_and_pages(tmp_path: pathlib.Path) -> None:
    path = str(tmp_path / "m.db")
    with MemoryStore(path) as store:
        ids = fill(store)
        expected = store.recall(ALICE, "green tea", 5, rank="idf", budget=40, explain=True)
        listed = store.memories(ALICE)
    scope = ["--user", "alice", "--task", "trip"]
    done = cli("recall", path, *scope, "green tea", "--rank", "idf", "--limit", "5",
               "--budget", "40", "--explain", "--no-context")
    assert done.returncode == 0, done.stderr
    assert [json.loads(line) for line in done.stdout.splitlines()] == expected
    done = cli("list", path, *scope, "--after", str(ids[3]), "--limit", "4")
    assert done.returncode == 0, done.stderr
    after = [m for m in listed if m["id"] > ids[3]][:4]
    assert [json.loads(line) for line in done.stdout.splitlines()] == after
    first = cli("list", path, *scope, "--after", "0", "--limit", "4")  # 0: the first page
    assert [json.loads(line) for line in first.stdout.splitlines()] == listed[:4]
    for bad in (["list", path, *scope, "--after", "-1"], ["recall", path, *scope, "x",
                                                         "--budget", "-5"]):
        refused = cli(*bad)
        assert refused.returncode == 2 and "Traceback" not in refused.stderr
