"""The store against a plain in-memory model of SPEC Part 1, on arbitrary Unicode.

The model is the oracle later work on speed is held to: it scores every visible
memory the slow, obvious way, with its own copy of the word rule.
"""

from __future__ import annotations

import array
import dataclasses
import re
import shutil
import sqlite3
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from memory import MAX_TEXT, MemoryStore, Scope, fixed_clock

MODEL_STOPWORDS = frozenset(
    "a an and are as at be by did do does for from how i in is it my of on or that"
    " the this to was we what when where which who will with you your".split()
)


def model_words(text: str) -> set[str]:
    return set(re.findall("[a-z0-9]+", text.lower())) - MODEL_STOPWORDS


@dataclasses.dataclass
class Memory:
    id: int
    user: str
    task: str | None
    text: str
    source: str
    created_at: str

    def visible_in(self, scope: Scope) -> bool:
        return self.user == scope.user and (self.task is None or self.task == scope.task)

    def as_result(self, score: int) -> dict[str, Any]:
        return {"id": self.id, "level": "user" if self.task is None else "task",
                "text": self.text, "source": self.source, "created_at": self.created_at,
                "score": score}


class Model:
    def __init__(self) -> None:
        self.memories: list[Memory] = []

    def visible(self, scope: Scope) -> list[Memory]:
        return [m for m in self.memories if m.visible_in(scope)]

    def recall(self, scope: Scope, query: str, limit: int) -> list[dict[str, Any]]:
        wanted = model_words(query)
        scored = [(len(wanted & model_words(m.text)), m) for m in self.visible(scope)]
        ranked = sorted(((s, m) for s, m in scored if s > 0), key=lambda p: (-p[0], -p[1].id))
        return [m.as_result(s) for s, m in ranked[:limit]]

    def count(self, scope: Scope) -> int:
        return len(self.visible(scope))


def index_problems(db: sqlite3.Connection) -> list[str]:
    """How the word index differs from the words of the memories it indexes: every
    (user, word, task, id) once, nothing for a memory that is gone."""
    expected = {(user, word, task, memory_id)
                for memory_id, user, task, text in db.execute(
                    "SELECT id, user_id, task_id, text FROM memories")
                for word in model_words(text)}
    found: list[tuple[str, str, str | None, int]] = []
    for user, word, task, first_id, blob in db.execute(
            "SELECT user_id, word, task_id, first_id, ids FROM memory_words"):
        ids = array.array("q", blob)
        if not ids or ids[0] != first_id or list(ids) != sorted(set(ids)):
            return [f"malformed row {user}/{word}/{first_id}: {list(ids)}"]
        found += [(user, word, task, memory_id) for memory_id in ids]
    problems = [f"posting twice: {p}" for p in set(found) if found.count(p) > 1]
    problems += [f"stale posting: {p}" for p in set(found) - expected]
    problems += [f"missing posting: {p}" for p in expected - set(found)]
    return problems


USERS = st.sampled_from(["alice", "bob", "carol-2"])
TASKS = st.sampled_from(["trip", "work", "t-3"])
SCOPES = st.builds(Scope, USERS, TASKS)
# Shared words make matches likely; the odd letters are ones whose lower() is ASCII
# (KELVIN SIGN -> k, LATIN CAPITAL I WITH DOT -> i + combining dot) or is not.
VOCABULARY = ["hotel", "Hotel", "HOTEL", "book", "vegetarian", "lisbon", "seat", "seats",
              "the", "is", "which", "my", "42", "caf\u00e9", "\u212aelvin", "\u0130stanbul",
              "stra\u00dfe", "\uff28otel", "\u00fcber", "na\u00efve", "x-ray", "a1b2"]
FRAGMENTS = st.one_of(
    st.sampled_from(VOCABULARY),
    st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"),
            min_size=1, max_size=8),
)
TEXTS = (st.lists(FRAGMENTS, min_size=1, max_size=8).map(" ".join)
         .filter(lambda t: bool(t.strip()) and len(t) <= MAX_TEXT))
QUERIES = st.lists(FRAGMENTS, max_size=8).map(" ".join)
SOURCES = st.sampled_from(["trip/turn-1", "trip/turn-2", "onboarding/turn-4"])
LIMITS = st.integers(min_value=1, max_value=20)


class StoreMatchesModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.folder = Path(tempfile.mkdtemp())
        self.clock = fixed_clock()
        self.store = MemoryStore(self.folder / "memory.db", clock=self.clock)
        self.model = Model()
        self.created = fixed_clock()
        self.highest_id = 0

    def teardown(self) -> None:
        self.store.close()
        shutil.rmtree(self.folder)

    @rule(scope=SCOPES, level=st.sampled_from(["user", "task"]), text=TEXTS, source=SOURCES)
    def remember(self, scope: Scope, level: str, text: str, source: str) -> None:
        memory_id = self.store.remember(scope, level, text, source)
        assert memory_id > self.highest_id
        self.highest_id = memory_id
        self.model.memories.append(Memory(memory_id, scope.user,
                                          scope.task if level == "task" else None,
                                          text, source, self.created()))

    @rule(items=st.lists(st.tuples(SCOPES, st.sampled_from(["user", "task"]), TEXTS, SOURCES),
                         max_size=20))
    def remember_many(self, items: list[tuple[Scope, str, str, str]]) -> None:
        ids = self.store.remember_many(items)
        assert len(ids) == len(items)
        for memory_id, (scope, level, text, source) in zip(ids, items, strict=True):
            assert memory_id > self.highest_id  # never an id handed out before
            self.highest_id = memory_id
            self.model.memories.append(Memory(memory_id, scope.user,
                                              scope.task if level == "task" else None,
                                              text, source, self.created()))

    @precondition(lambda self: self.model.memories)
    @rule(scope=SCOPES, data=st.data(), limit=LIMITS)
    def recall_a_stored_text(self, scope: Scope, data: st.DataObject, limit: int) -> None:
        query = data.draw(st.sampled_from([m.text for m in self.model.memories]))
        assert self.store.recall(scope, query, limit) == self.model.recall(scope, query, limit)

    @rule(scope=SCOPES, query=QUERIES, limit=LIMITS)
    def recall(self, scope: Scope, query: str, limit: int) -> None:
        assert self.store.recall(scope, query, limit) == self.model.recall(scope, query, limit)

    @rule(scope=SCOPES, data=st.data())
    def forget(self, scope: Scope, data: st.DataObject) -> None:
        known = [m.id for m in self.model.memories]
        memory_id = data.draw(st.sampled_from(known) if known and data.draw(st.booleans())
                              else st.integers(min_value=1, max_value=10**6))
        visible = [m for m in self.model.visible(scope) if m.id == memory_id]
        assert self.store.forget(scope, memory_id) is bool(visible)
        self.model.memories = [m for m in self.model.memories if m not in visible]

    @rule(scope=SCOPES, source=SOURCES)
    def forget_source(self, scope: Scope, source: str) -> None:
        gone = [m for m in self.model.visible(scope) if m.source == source]
        assert self.store.forget_source(scope, source) == len(gone)
        self.model.memories = [m for m in self.model.memories if m not in gone]

    @rule(user=USERS)
    def erase_user(self, user: str) -> None:
        gone = [m for m in self.model.memories if m.user == user]
        assert self.store.erase_user(user) == len(gone)
        self.model.memories = [m for m in self.model.memories if m.user != user]

    @rule(scope=SCOPES)
    def memories(self, scope: Scope) -> None:
        expected = [{k: v for k, v in m.as_result(0).items() if k != "score"}
                    for m in self.model.visible(scope)]
        assert self.store.memories(scope) == expected

    @rule(user=USERS)
    def export_user(self, user: str) -> None:
        expected = [{"id": m.id, "user": m.user, "task": m.task,
                     **{k: v for k, v in m.as_result(0).items() if k not in ("id", "score")}}
                    for m in self.model.memories if m.user == user]
        exported = self.store.export_user(user)
        assert exported == expected
        # Whatever a store holds can be imported again, field for field but the ids.
        with MemoryStore(":memory:") as other:
            other.import_memories(exported)
            again = other.export_user(user)
        assert [{**r, "id": 0} for r in again] == [{**r, "id": 0} for r in exported]

    @rule()
    def reopen(self) -> None:
        self.store.close()
        self.store = MemoryStore(self.folder / "memory.db", clock=self.clock)

    @invariant()
    def index_matches_the_memories(self) -> None:
        assert index_problems(self.store.db) == []

    @invariant()
    def counts_agree(self) -> None:
        for user in ("alice", "bob", "carol-2", "dave"):
            for task in ("trip", "work", "t-3", "other"):
                scope = Scope(user, task)
                assert self.store.count(scope) == self.model.count(scope)


TestStoreMatchesModel = StoreMatchesModel.TestCase
