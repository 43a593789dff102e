"""The state machine that runs the store beside the model, rule by rule, on SQLite; the
PostgreSQL tests run a subclass of it. Not a test module: test_properties.py runs it."""

from __future__ import annotations

import shutil
import tempfile
from datetime import timedelta
from pathlib import Path

from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

import memory
from memory import MemoryStore, Scope, fixed_clock
from model import (
    LIMITS,
    QUERIES,
    RANK,
    RULES_HERE,
    SCOPES,
    SOURCES,
    TEXTS,
    TTLS,
    USERS,
    Memory,
    Model,
    index_problems,
    utc,
)

# From how many memories an owner's words are indexed: low ones, so that a few calls take
# an owner across the threshold and back and a scope mixes owners on each side of it.
INDEX_FROMS = st.sampled_from([1, 2, 3, memory.INDEX_FROM])
# How many characters of a text weigh one toward it: the store's, or few, so that one
# text can take an owner across the threshold and a deletion back.
WEIGHED_BYS = st.sampled_from([memory._WEIGHED_BY, 12])


class StoreMatchesModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.folder = Path(tempfile.mkdtemp())
        self.clock = fixed_clock()
        self.created = fixed_clock()
        self.highest_id = 0
        self.index_from = memory.INDEX_FROM  # the module's, given back at teardown
        self.weighed_by = memory._WEIGHED_BY

    @initialize(matching=st.sampled_from(RULES_HERE), index_from=INDEX_FROMS,
                weighed_by=WEIGHED_BYS)
    def open_a_new_store(self, matching: memory.Matching, index_from: int,
                         weighed_by: int) -> None:
        memory.INDEX_FROM, memory._WEIGHED_BY = index_from, weighed_by
        self.store = MemoryStore(self.folder / "memory.db", clock=self.clock, matching=matching)
        self.model = Model(matching)

    def teardown(self) -> None:
        memory.INDEX_FROM, memory._WEIGHED_BY = self.index_from, self.weighed_by
        self.store.close()
        shutil.rmtree(self.folder)

    def write(self, rows: list[tuple[str, str | None, str, str, float | None]],
              ids: list[int]) -> None:
        """The model's side of a write the store made: first its purge, then the rows,
        each taking one clock reading."""
        assert len(ids) == len(rows)
        for owner, task_key in sorted({(user, task or "") for user, task, *_ in rows}):
            self.model.purge_before_writing(owner, task_key or None, memory.PURGE_PER_WRITE)
        for memory_id, (user, task, text, source, ttl) in zip(ids, rows, strict=True):
            assert memory_id > self.highest_id  # never an id handed out before
            self.highest_id = memory_id
            created = self.created()
            expires = None if ttl is None else utc(created) + timedelta(seconds=ttl)
            self.model.memories.append(Memory(memory_id, user, task, text, source, created,
                                              expires))
        self.model.now = self.created.now()

    @rule(scope=SCOPES, level=st.sampled_from(["user", "task"]), text=TEXTS, source=SOURCES,
          ttl=TTLS)
    def remember(self, scope: Scope, level: memory.Level, text: str, source: str,
                 ttl: float | None) -> None:
        memory_id = self.store.remember(scope, level, text, source, ttl=ttl)
        self.write([(scope.user, scope.task if level == "task" else None, text, source, ttl)],
                   [memory_id])

    @rule(items=st.lists(st.tuples(SCOPES, st.sampled_from(["user", "task"]), TEXTS, SOURCES,
                                   TTLS), max_size=20))
    def remember_many(self, items: list[tuple[Scope, str, str, str, float | None]]) -> None:
        ids = self.store.remember_many(items)
        self.write([(scope.user, scope.task if level == "task" else None, text, source, ttl)
                    for scope, level, text, source, ttl in items], ids)

    @rule(ticks=st.integers(min_value=1, max_value=4))
    def time_passes(self, ticks: int) -> None:
        for _ in range(ticks):
            self.clock()
            self.created()
        self.model.now = self.created.now()

    @rule(scope=SCOPES, data=st.data(), text=TEXTS, source=SOURCES, ttl=TTLS)
    def revise(self, scope: Scope, data: st.DataObject, text: str, source: str,
               ttl: float | None) -> None:
        known = [m.id for m in self.model.memories]
        memory_id = data.draw(st.sampled_from(known) if bool(known) and data.draw(st.booleans())
                              else st.integers(min_value=1, max_value=10**6))
        seen = [m for m in self.model.visible(scope) if m.id == memory_id]
        revised = self.store.revise(scope, memory_id, text, source, ttl=ttl)
        if not seen:  # unknown, another task's or user's, expired: nothing changes
            assert revised is None
            return
        assert revised is not None
        self.model.memories.remove(seen[0])
        self.write([(scope.user, seen[0].task, text, source, ttl)], [revised])
        if ttl is None:  # the corrected memory expires when the old one did
            self.model.memories[-1].expires_at = seen[0].expires_at

    @rule()
    def purge_expired(self) -> None:
        gone = [m for m in self.model.memories if not m.live_at(self.model.now)]
        assert self.store.purge_expired() == len(gone)
        self.model.memories = [m for m in self.model.memories if m not in gone]
        self.store.compact()
        self.purged_text_is_gone(gone)

    def purged_text_is_gone(self, gone: list[Memory]) -> None:
        """Under the deletion guarantee: after compact(), no purged text is in the file.
        Only texts that nothing kept holds are looked for (the rest may be kept data)."""
        kept = [f"{m.text}\0{m.source}".encode() for m in self.model.memories]
        data = (self.folder / "memory.db").read_bytes()
        for m in gone:
            needle = m.text.encode()
            if len(needle) >= 12 and not any(needle in k for k in kept):
                assert needle not in data, m.text

    @precondition(lambda self: self.model.memories)
    @rule(scope=SCOPES, data=st.data(), limit=LIMITS, rank=RANK, context=st.booleans())
    def recall_a_stored_text(self, scope: Scope, data: st.DataObject, limit: int,
                             rank: memory.Rank, context: bool) -> None:
        query = data.draw(st.sampled_from([m.text for m in self.model.memories]))
        assert self.store.recall(scope, query, limit, rank=rank, context=context) == \
            self.model.recall(scope, query, limit, rank, context)

    @rule(scope=SCOPES, query=QUERIES, limit=LIMITS, rank=RANK, context=st.booleans())
    def recall(self, scope: Scope, query: str, limit: int, rank: memory.Rank,
               context: bool) -> None:
        assert self.store.recall(scope, query, limit, rank=rank, context=context) == \
            self.model.recall(scope, query, limit, rank, context)

    @rule(matching=st.sampled_from(RULES_HERE))
    def reindex(self, matching: memory.Matching) -> None:
        self.store.reindex(matching)
        self.model.matching = matching

    @rule(scope=SCOPES, data=st.data())
    def forget(self, scope: Scope, data: st.DataObject) -> None:
        known = [m.id for m in self.model.memories]
        memory_id = data.draw(st.sampled_from(known) if bool(known) and data.draw(st.booleans())
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
        expected = [{**{k: v for k, v in m.as_result(0).items() if k != "score"},
                     "expires_at": m.as_record()["expires_at"]}
                    for m in self.model.visible(scope)]
        assert self.store.memories(scope) == expected

    @rule(user=USERS)
    def export_user(self, user: str) -> None:
        expected = [m.as_record() for m in self.model.memories if m.user == user]
        exported = self.store.export_user(user)
        assert exported == expected
        # Whatever a store holds can be imported again, field for field but the ids.
        with MemoryStore(":memory:") as other:
            other.import_memories(exported)
            again = other.export_user(user)
        assert [{**r, "id": 0} for r in again] == [{**r, "id": 0} for r in exported]

    @rule(name_the_rule=st.booleans())
    def reopen(self, name_the_rule: bool) -> None:
        self.store.close()
        self.store = MemoryStore(self.folder / "memory.db", clock=self.clock,
                                 matching=self.model.matching if name_the_rule else None)
        assert self.store.matching == self.model.matching

    @invariant()
    def index_matches_the_memories(self) -> None:
        assert index_problems(self.store.db) == []

    @invariant()
    def counts_agree(self) -> None:
        for user in ("alice", "bob", "carol-2", "dave"):
            for task in ("trip", "work", "t-3", "other"):
                scope = Scope(user, task)
                assert self.store.count(scope) == self.model.count(scope)
