"""Recall with context: a memory also scores a share of its neighbours' match, the
nearest live memories its scope sees of its conversation (its source up to the last
"/"); never across conversations, users or tasks, never from a memory that is gone; and
the same, to the bit, as the model's scoring of every visible memory, on both engines."""

from __future__ import annotations

import json
import math
import pathlib
import random
import shutil
from collections.abc import Callable, Iterable
from datetime import timedelta

import pytest
from embedders import ConceptEmbedder

import memory
import model as model_module
from helpers import ALICE, ALICE_WORK, BOB, FIXTURES, WORD_RANKS, SetClock, cli
from memory import MemoryInputError, MemoryStore, Scope, StoreError
from model import Memory, Model, utc

LATER = "2026-10-20T09:02:00+00:00"  # two minutes on

QUESTION = "When did Dana start the pottery class?"
ASKED = "Sam: Did you sign up for that pottery class?"
ANSWER = "Dana: Last Tuesday, finally!"


def talk(store: MemoryStore, scope: Scope, conversation: str, *lines: str,
         level: memory.Level = "user") -> list[int]:
    """Write `lines` as the turns of `conversation`, in order."""
    return store.remember_many([(scope, level, line, f"{conversation}/turn-{n}")
                                for n, line in enumerate(lines)])


def ids(found: list[memory.Recalled]) -> list[int]:
    return [result["id"] for result in found]


def test_the_answer_beside_the_question_is_found_with_context(target: str) -> None:
    with MemoryStore(target, rank="idf") as store:
        asked, answer = talk(store, ALICE, "chat-1", ASKED, ANSWER)
        later = talk(store, ALICE, "chat-2", "Dana likes green tea.", "Dana lives in Leeds.")
        assert answer not in ids(store.recall(ALICE, QUESTION, 3))
        found = store.recall(ALICE, QUESTION, 3, context=True, explain=True)
        assert ids(found) == [asked, answer, later[1]]
        own = store.recall(ALICE, QUESTION, 10)
        score = {result["id"]: result["score"] for result in own}
        # The answer's own match (Dana) and 0.6 of the question's, written just before it.
        assert found[1]["score"] == score[answer] + 0.6 * score[asked]
        assert found[1]["why"] == {"matched": {"dana": score[answer]},
                                   "lent": {asked: 0.6 * score[asked]}}
        # The question takes 0.4 of the answer's; the turn after it matches nothing.
        assert found[0]["why"]["lent"] == {answer: 0.4 * score[answer]}


def test_a_memory_that_matches_nothing_is_found_by_its_neighbours(target: str) -> None:
    with MemoryStore(target) as store:
        first, quiet, last = talk(store, ALICE, "chat", "pottery", "nothing shared", "pottery")
        found = store.recall(ALICE, "pottery", 5, context=True, explain=True)
        # Each pottery turn: 1, and 0.6 of the other if written before it, 0.4 if after;
        # the quiet turn between them: 0.6 of the first and 0.4 of the last.
        assert [(r["id"], r["score"]) for r in found] == [
            (last, 1 + 0.6), (first, 1 + 0.4), (quiet, 0.6 + 0.4)]
        assert found[2]["why"] == memory.Why(matched={}, lent={first: 0.6, last: 0.4})


def test_context_flows_only_within_one_conversation_of_one_scope(target: str) -> None:
    with MemoryStore(target) as store:
        (asked,) = talk(store, ALICE, "chat", "pottery class")
        # Between the question and its answer, written in turn: none of them is a
        # neighbour of either, so none takes the question's place beside the answer.
        others = [
            *talk(store, ALICE, "other", "no match", "no match"),  # another conversation
            *talk(store, BOB, "chat", "bob's", "bob's"),  # its conversation's name, Bob's
            *talk(store, ALICE_WORK, "chat", "work", "work", level="task"),  # another task's
            store.remember(ALICE, "user", "a note", "chat"),  # no "/": in no conversation
            store.remember(ALICE, "user", "a note", "/chat"),  # nothing before "/": nor this
        ]
        (answer,) = talk(store, ALICE, "chat", "the answer")
        found = store.recall(ALICE, "pottery class", 10, context=True, explain=True)
        assert [(r["id"], r["why"].get("lent")) for r in found] == [
            (asked, {}), (answer, {asked: 0.6 * 2})]
        # Within its task, a task memory is a neighbour like any other.
        work = store.recall(ALICE_WORK, "pottery", 10, context=True)
        assert ids(work) == [asked, others[5], others[4]]
        bob = store.recall(BOB, "bob", 10, context=True)
        assert [(r["id"], r["score"]) for r in bob] == [(others[3], 1 + 0.6),
                                                         (others[2], 1 + 0.4)]


def test_a_forgotten_expired_or_revised_neighbour_lends_nothing(target: str) -> None:
    clock = SetClock()
    with MemoryStore(target, clock=clock) as store:
        far, expiring, _, answer = store.remember_many([
            (ALICE, "user", "pottery class", "chat/1"),
            (ALICE, "user", "pottery", "chat/2", 90),
            (ALICE, "user", "pottery", "chat/3", 90),
            (ALICE, "user", "an answer", "chat/4")])
        gone, revised, other = talk(store, ALICE, "talk", "pottery", "pottery", "quiet")

        def lent(memory_id: int) -> dict[int, float] | None:
            found = store.recall(ALICE, "pottery class", 20, context=True, explain=True)
            return next((r["why"]["lent"] for r in found if r["id"] == memory_id), None)

        assert lent(answer) == {expiring: 0.6, expiring + 1: 0.6}
        clock.at = LATER  # expired, not yet purged: the one before them takes their place
        assert lent(answer) == {far: 0.6 * 2}
        assert lent(other) == {gone: 0.6, revised: 0.6}
        store.forget(ALICE, gone)
        assert lent(other) == {revised: 0.6}
        new_id = store.revise(ALICE, revised, "no longer", "talk/2")
        assert new_id is not None and lent(other) is None  # its neighbour matches nothing


def test_recall_with_context_is_off_unless_the_store_or_the_call_turns_it_on(
        target: str) -> None:
    with MemoryStore(target) as store:
        asked, answer = talk(store, ALICE, "chat", "pottery", "an answer")
        assert store.context is False and store.stats()["context"] is False
        assert ids(store.recall(ALICE, "pottery")) == [asked]
        assert ids(store.recall(ALICE, "pottery", context=True)) == [asked, answer]
    with MemoryStore(target, context=True) as store:
        assert store.context is True and store.stats()["context"] is True
        assert ids(store.recall(ALICE, "pottery")) == [asked, answer]
        assert ids(store.recall(ALICE, "pottery", context=False)) == [asked]
        for bad in ("yes", 1, None.__class__):
            with pytest.raises(MemoryInputError, match="context must be a bool, got"):
                store.recall(ALICE, "pottery", context=bad)  # type: ignore[arg-type]
    with pytest.raises(MemoryInputError, match="context must be a bool, got a str"):
        MemoryStore(target, context="yes")  # type: ignore[arg-type]


@pytest.mark.parametrize("scoring", ["numpy", "numpy, blocks of 2", "pure Python",
                                     "numpy, falling weights", "pure Python, falling weights"])
@pytest.mark.parametrize("seed", [1, 2])
def test_recall_with_context_equals_scoring_every_visible_memory(
        target: str, seed: int, scoring: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Hundreds of memories in a few conversations, some of each scope, some expiring
    and some forgotten: every result equals the model's, score for score, whether numpy
    scores all of the scope's conversations at once or, without it, the search takes its
    batches of the best own scores and stops early. Most are alice's, so that numpy
    finds her ids by a table over their span and bob's, far apart, by binary search.
    In blocks of 2, numpy seeks the best among the best maxima of blocks, as it does
    in a scope of thousands."""
    if scoring.startswith("pure Python"):
        monkeypatch.setattr(memory, "_numpy", lambda: None)
    if scoring.endswith("falling weights"):  # each neighbour by its distance
        before, after = (0.6, 0.3), (0.4, 0.2)
        monkeypatch.setitem(model_module.CONTEXT_WEIGHTS, "before", before)
        monkeypatch.setitem(model_module.CONTEXT_WEIGHTS, "after", after)
        monkeypatch.setattr(memory, "_CONTEXT_BEFORE", before)
        monkeypatch.setattr(memory, "_CONTEXT_AFTER", after)
        monkeypatch.setattr(memory, "_SHARES", ((-2, 0.3), (-1, 0.6), (1, 0.4), (2, 0.2)))
        monkeypatch.setattr(memory, "_CONTEXT_REACH", 1 + sum(before) + sum(after))
    if scoring == "numpy, blocks of 2":
        monkeypatch.setattr(memory, "_BLOCK", 2)
    chance = random.Random(seed)
    vocabulary = [f"w{n}" for n in range(40)]
    scopes = [ALICE, ALICE_WORK, BOB]
    clock = SetClock()
    model = Model()
    with MemoryStore(target, clock=clock) as store:
        rows = []
        for _ in range(600):
            (scope,) = chance.choices(scopes, weights=[6, 2, 1])
            level = chance.choice(["user", "user", "task"])
            # Zipf-like: a few words in most memories, most words in few.
            text = " ".join(chance.choices(vocabulary, weights=[1 / (1 + n) for n in range(40)],
                                           k=chance.randint(1, 6)))
            source = chance.choice(["a/1", "b/2", "c/d/3", "none"])
            rows.append((scope, level, text, source, chance.choice([None] * 5 + [60])))
        written = store.remember_many(rows)
        for memory_id, (scope, level, text, source, ttl) in zip(written, rows, strict=True):
            expires = None if ttl is None else utc(clock.at) + timedelta(seconds=ttl)
            model.memories.append(Memory(memory_id, scope.user,
                                         scope.task if level == "task" else None, text,
                                         source, clock.at, expires))
        for memory_id in chance.sample(written, 60):
            owner = next(m for m in model.memories if m.id == memory_id)
            assert store.forget(Scope(owner.user, owner.task or "any"), memory_id)
            model.memories.remove(owner)
        clock.at = model.now = LATER
        for _ in range(40):
            query = " ".join(chance.choices(vocabulary, k=chance.randint(1, 4)))
            scope, limit = chance.choice(scopes), chance.choice([1, 3, 10])
            for rank in WORD_RANKS:
                expected = model.recall(scope, query, limit, rank, context=True)
                assert store.recall(scope, query, limit, rank=rank, context=True) == expected


@pytest.mark.parametrize("written", [range(100, 120, 2), range(100, 1000, 90)],
                         ids=["ids close together", "ids far apart"])
def test_the_kept_conversations_place_the_ids_they_hold_and_no_other(
        written: range) -> None:
    """Where the scope's ids lie close (a table over their span) and far apart (binary
    search): each id it holds is found where the conversations put it, and an id it does
    not hold (below, between, above its ids) is in no place."""
    np = pytest.importorskip("numpy")
    rows: list[tuple[int, str | None]] = [(memory_id, f"talk-{n % 3}")
                                          for n, memory_id in enumerate(written)]
    rows.sort(key=lambda row: (str(row[1]), row[0]))
    kept = memory._Conversations.read([rows[:4], rows[4:]])  # as read, in blocks
    assert bool(len(kept.table)) == (written.step < 4)  # the table, or binary search
    wanted = [memory_id for memory_id, _ in rows]
    assert kept.places(np.array(wanted)).tolist() == list(range(len(rows)))
    strangers = np.array([1, 99, written[0] + 1, written[-1] + 1, 2**40])
    assert kept.places(strangers).tolist() == []
    mixed = np.array([written[3], 99, written[0], written[-1] + 1])
    assert kept.places(mixed).tolist() == [wanted.index(written[3]), wanted.index(written[0])]


@pytest.mark.parametrize("block", [1, 2, 3, 512])
def test_the_limit_th_best_score_is_found_however_many_are_equal(
        block: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The limit-th highest of many scores, as recall with context and by meaning seek
    it among the maxima of blocks: the same as sorting finds, where most scores are equal
    (a scope scoring 0 but for a few), where the best lie together, or tie."""
    np = pytest.importorskip("numpy")
    monkeypatch.setattr(memory, "_BLOCK", block)
    chance = random.Random(block)
    for _ in range(3000):
        pool = [chance.choice([0.0, 0.3, 1.5, -math.inf, chance.random()])
                for _ in range(chance.randint(1, 8))]
        limit = chance.randint(1, 12)
        scores = np.array(chance.choices(pool, k=chance.randint(limit + 1, 40 * limit)))
        if chance.random() < 0.3:
            scores.sort()  # the best together at the end
        assert memory._limit_th_best(scores, limit) == sorted(scores.tolist())[-limit]


def test_explain_and_hybrid_are_the_same_with_numpy_and_without(
        target: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """With context and without: numpy scores every memory at once, pure Python in turn."""
    with MemoryStore(target, embedder=ConceptEmbedder(), **memory.RECOMMENDED) as store:
        talk(store, ALICE, "dinner", "Sam: where shall we eat tonight?", "Alice: anywhere",
             "Alice: I am vegetarian", "Sam: pottery class tonight?", "Alice: no, jazz")
        talk(store, ALICE_WORK, "dinner", "Sam: the band plays tonight", level="task")
        ranks: list[memory.Rank] = ["idf", "hybrid"]
        asked = [(scope, query, rank, context) for scope in (ALICE, ALICE_WORK)
                 for query in ("eat tonight", "meat-free dinner", "pottery tonight")
                 for rank in ranks for context in (True, False)]
        with_numpy = [store.recall(scope, query, 5, rank=rank, explain=True, context=context)
                      for scope, query, rank, context in asked]
    with monkeypatch.context() as bare:
        bare.setattr(memory, "_numpy", lambda: None)
        with MemoryStore(target, embedder=ConceptEmbedder(), **memory.RECOMMENDED) as store:
            without = [store.recall(scope, query, 5, rank=rank, explain=True, context=context)
                       for scope, query, rank, context in asked]
    assert any(result["why"].get("lent") for found in with_numpy for result in found)
    for found, expected in zip(with_numpy, without, strict=True):
        assert ids(found) == ids(expected)
        for result, other in zip(found, expected, strict=True):
            # The cosines alone differ: float32 in numpy, float64 without.
            assert result["score"] == pytest.approx(other["score"])
            assert result["why"]["matched"] == other["why"]["matched"]
            assert result["why"].get("lent") == other["why"].get("lent")


def test_a_kept_copy_of_the_conversations_follows_every_change_another_store_makes(
        target: str) -> None:
    clock = SetClock()
    with MemoryStore(target, clock=clock, context=True) as reader, \
            MemoryStore(target, clock=clock) as writer:
        asked, answer = talk(writer, ALICE, "talk", ASKED, ANSWER)

        def found(scope: Scope) -> set[int]:
            return set(ids(reader.recall(scope, QUESTION, 5)))
        assert found(ALICE) == {asked, answer}
        later = writer.remember(ALICE, "user", "Sam: pottery again", "talk/turn-9", ttl=60)
        assert found(ALICE) == {asked, answer, later}
        clock.at = LATER  # the later turn expires, no write between
        assert found(ALICE) == {asked, answer}
        writer.forget(ALICE, asked)
        assert found(ALICE) == {answer}
        task = writer.remember(ALICE_WORK, "task", "Sam: that pottery class?", "talk/turn-7")
        assert found(ALICE_WORK) == {task, answer}
        assert found(ALICE) == {answer}
        writer.erase_user("alice")
        assert found(ALICE_WORK) == set()


def test_a_kept_copy_of_the_conversations_grows_with_later_writes(
        target: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """After writes alone (to a conversation the copy holds, to a new one, of no
    conversation, at the task level, a batch), recall with context reads only what was
    written since and scores as a store reading the scope afresh; after a deletion, even
    with a write that keeps the count, it reads the whole scope again."""
    pytest.importorskip("numpy")
    calls = {"read": 0, "extended": 0}
    read, extended = memory._Conversations.read, memory._Conversations.extended

    def counted_read(blocks: Iterable[list[tuple[int, str | None]]]
                     ) -> memory._Conversations:
        calls["read"] += 1
        return read(blocks)

    def counted_extended(self: memory._Conversations, rows: list[tuple[int, str | None]]
                         ) -> memory._Conversations:
        calls["extended"] += 1
        return extended(self, rows)
    monkeypatch.setattr(memory._Conversations, "read", staticmethod(counted_read))
    monkeypatch.setattr(memory._Conversations, "extended", counted_extended)
    queries = ["pottery class", "jazz tonight", "dinner pottery"]

    def recalled(store: MemoryStore, scope: Scope) -> list[list[memory.Recalled]]:
        return [store.recall(scope, query, 5, explain=True) for query in queries]

    def afresh(scope: Scope) -> list[list[memory.Recalled]]:
        with MemoryStore(target, rank="idf", context=True) as fresh:
            return recalled(fresh, scope)

    with MemoryStore(target, rank="idf", context=True) as store:
        first = talk(store, ALICE, "chat-1", "Sam: pottery class?", "Dana: maybe",
                     "Dana: or not", "Sam: jazz tonight?")
        talk(store, ALICE, "chat-2", "Sam: dinner?", "Dana: pottery dinner")
        recalled(store, ALICE)
        recalled(store, ALICE_WORK)
        writes: list[Callable[[], object]] = [
            lambda: store.remember(ALICE, "user", "Dana: pottery again", "chat-1/turn-9"),
            lambda: store.remember(ALICE, "user", "Sam: jazz dinner", "chat-3/turn-0"),
            lambda: store.remember(ALICE, "user", "pottery class note", "note"),
            lambda: store.remember(ALICE_WORK, "task", "Sam: jazz for work", "chat-2/turn-5"),
            lambda: store.remember_many([(ALICE, "user", "Dana: jazz class", "chat-2/turn-6"),
                                         (ALICE, "user", "Sam: pottery?", "chat-3/turn-1")])]
        for write in writes:
            write()
            for scope in (ALICE, ALICE_WORK):
                before = dict(calls)
                assert recalled(store, scope) == afresh(scope)
                assert calls["read"] - before["read"] == 1  # afresh's alone
        assert calls["extended"] >= len(writes)
        # A forgotten turn brings the turns around it together; a write keeps the count.
        store.forget(ALICE, first[1])
        store.remember(ALICE, "user", "Dana: jazz maybe", "chat-2/turn-7")
        before = dict(calls)
        assert recalled(store, ALICE) == afresh(ALICE)
        assert (calls["read"] - before["read"], calls["extended"]) == (2, before["extended"])


def test_a_file_read_as_it_is_refuses_context_until_it_is_upgraded(
        tmp_path: pathlib.Path) -> None:
    path = tmp_path / "old.sqlite3"
    shutil.copyfile(FIXTURES / "version-5-a3b9158.sqlite3", path)
    scope = Scope("alice", "trip")
    with MemoryStore(path, read_only=True) as reader:
        before = reader.recall(scope, "vegetarian trains", 5)
        with pytest.raises(StoreError, match="recall with context needs the file's"
                                             " conversations, of schema version 6"):
            reader.recall(scope, "vegetarian trains", 5, context=True)
    with MemoryStore(path) as store:  # upgraded: each memory has its conversation
        assert store.recall(scope, "vegetarian trains", 5) == before
        found = store.recall(scope, "vegetarian trains", 5, context=True)
        # trip/turn-4 (trains) lends 0.6 to trip/turn-6, written after it in its talk.
        assert [(r["id"], r["score"]) for r in found] == [
            *((r["id"], r["score"]) for r in before), (7, 0.6)]
        (conversations,) = store.db.execute(
            "SELECT json_group_array(conversation) FROM memories WHERE user_id = ?",
            ("alice",)).fetchone()
        assert set(json.loads(conversations)) == {"onboarding", "work", "trip"}


def test_the_command_line_recalls_with_context_unless_told_not_to(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "m.db"
    with MemoryStore(path) as store:
        asked, answer = talk(store, ALICE, "chat", "pottery", "an answer")
    args = ("recall", str(path), "--user", "alice", "--task", "trip", "pottery")
    # With context by default, as memory mcp recalls.
    for extra, expected in ((("--no-context",), [asked]), ((), [asked, answer]),
                            (("--context",), [asked, answer])):
        done = cli(*args, *extra)
        assert done.returncode == 0, done.stderr
        assert [json.loads(line)["id"] for line in done.stdout.splitlines()] == expected
