"""CrewAI's unified Memory storage over memory.py, on both engines: the StorageBackend
contract suite of crewai-memory-core (run as it ships, the adapter one user's storage),
then this project's tests of what the suite does not look at: users kept apart, another
tool's memory never a record, times and vectors kept, the filters as CrewAI's own store
reads them, a touch that keeps the vector.

CrewAI pins the MCP SDK below the version the mcp extra needs, so these run in an
environment of their own (the test-crewai-strands extra; .ci/run makes it) and skip in
the test extra's, saying so."""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

# CrewAI's tracing waits 5 s for a server after each remember: no network here.
os.environ.setdefault("CREWAI_TRACING_ENABLED", "false")
pytest.importorskip("crewai", reason="CrewAI is tested in the test-crewai-strands extra's"
                    " environment (CrewAI pins the MCP SDK below the mcp extra's)")
pytest.importorskip("crewai_memory_core")

from crewai.memory import Memory as CrewMemory  # noqa: E402
from crewai.memory.storage.backend import (  # noqa: E402
    EmbeddingDimensionMismatchError,
    StorageBackend,
)
from crewai.memory.types import MemoryRecord  # noqa: E402
from crewai_memory_core.contract import *  # noqa: E402, F403
from crewai_memory_core.testing import FakeEmbedder  # noqa: E402

from memory import MemoryStore, Scope  # noqa: E402
from memory_frameworks.crewai import CrewAIStorage  # noqa: E402

pytestmark = pytest.mark.anyio  # the suite's one coroutine: anyio runs it

EMBED = FakeEmbedder(64)
KAMAL = Scope("kamal", "crewai")


@pytest.fixture
def backend(target: str) -> Iterator[CrewAIStorage]:
    """The contract suite's backend: fresh, empty, one user's."""
    with CrewAIStorage(target, user="kamal") as opened:
        yield opened


def record(content: str, scope: str = "/", **fields: object) -> MemoryRecord:
    return MemoryRecord(content=content, scope=scope, embedding=EMBED([content])[0],
                        **fields)  # type: ignore[arg-type]


def test_it_is_crewai_s_storage_backend(backend: CrewAIStorage) -> None:
    assert isinstance(backend, StorageBackend)


def test_users_are_kept_apart(target: str) -> None:
    with MemoryStore(target) as store:
        kamal = CrewAIStorage(store, user="kamal")
        priya = CrewAIStorage(store, user="priya")
        mine = record("kamal loves sushi", "/user")
        kamal.save([mine])
        priya.save([record("priya loves sushi", "/user")])
        query = EMBED(["sushi"])[0]
        assert [r.content for r, _ in kamal.search(query, limit=10)] == ["kamal loves sushi"]
        assert priya.get_record(mine.id) is None  # another's id: not found
        assert priya.delete(record_ids=[mine.id]) == 0
        assert kamal.count() == 1 and priya.count() == 1
        priya.reset()
        assert kamal.count() == 1 and priya.count() == 0


def test_another_tools_memory_is_never_a_record(target: str) -> None:
    with MemoryStore(target) as store:
        storage = CrewAIStorage(store, user="kamal")
        kept = record("kept by crewai", "/user")
        storage.save([kept])
        vector = EMBED(["kept by crewai"])[0]
        # Another tool's memories in the same task and at the user level, one under the
        # record's own key and metadata, with the same vector.
        held = store.get(KAMAL, key=f'["{kept.id}"]')
        assert held is not None and held["metadata"] is not None
        forged = {**held["metadata"], "crewai": "forged"}
        store.remember(KAMAL, "task", "another tool", "cli", metadata=forged, vectors=[vector])
        store.remember(KAMAL, "user", "the user level", "cli", metadata=held["metadata"],
                       vectors=[vector])
        assert [r.content for r, _ in storage.search(vector, limit=10)] == ["kept by crewai"]
        assert storage.count() == 1 and storage.list_categories() == {}
        assert [r.content for r in storage.list_records()] == ["kept by crewai"]
        store.remember(KAMAL, "task", "a squatter", "cli", key='["squat"]')
        assert storage.get_record("squat") is None  # its key, but not a record
        storage.reset()
        assert [m["text"] for m in store.memories(KAMAL)] == [
            "another tool", "the user level", "a squatter"]


def test_a_record_keeps_its_time_and_its_vector(backend: CrewAIStorage) -> None:
    then = datetime(2024, 3, 1, 12, 30, 15)  # CrewAI's times are naive UTC
    kept = record("the user moved to Lisbon", "/user/kamal", created_at=then,
                  last_accessed=then, categories=["place"], importance=0.25,
                  metadata={"lang": "en", "n": 3}, source="chat-1", private=True)
    backend.save([kept])
    got = backend.get_record(kept.id)
    assert got is not None
    assert (got.created_at, got.last_accessed) == (then, then)
    assert got.model_dump() == kept.model_dump()
    memory = backend.store.get(KAMAL, key=f'["{kept.id}"]')
    assert memory is not None and memory["created_at"].startswith("2024-03-01T12:30:15")
    # An update without an embedding keeps the vector where the content stays.
    backend.update(kept.model_copy(update={"importance": 0.75, "embedding": None}))
    hits = backend.search(EMBED(["the user moved to Lisbon"])[0], limit=1)
    assert [(r.importance, round(score, 6)) for r, score in hits] == [(0.75, 1.0)]
    # A touch notes the read and keeps the vector too.
    backend.touch_records([kept.id])
    touched = backend.get_record(kept.id)
    assert touched is not None and touched.last_accessed > then
    assert touched.created_at == then
    assert round(backend.search(EMBED(["moved to Lisbon"])[0], limit=1)[0][1], 3) > 0.5


def test_an_update_replaces_the_content_and_the_vector(backend: CrewAIStorage) -> None:
    kept = record("tea in the morning", "/user")
    backend.save([kept])
    backend.update(kept.model_copy(update={"content": "coffee at night",
                                           "embedding": EMBED(["coffee at night"])[0]}))
    hits = backend.search(EMBED(["coffee at night"])[0], limit=5)
    assert [(r.id, r.content, round(s, 6)) for r, s in hits] == [
        (kept.id, "coffee at night", 1.0)]
    # A record saved again under its id replaces it, as update does.
    backend.save([kept])
    assert [r.content for r in backend.list_records()] == ["tea in the morning"]


def test_other_dimensions_are_crewai_s_own_error(backend: CrewAIStorage) -> None:
    backend.save([record("sixty-four numbers")])
    with pytest.raises(EmbeddingDimensionMismatchError):
        backend.save([MemoryRecord(content="three", embedding=[1.0, 0.0, 0.0])])
    with pytest.raises(EmbeddingDimensionMismatchError):
        backend.search([1.0, 0.0, 0.0])
    assert backend.count() == 1


def test_filters_read_as_crewai_s_own_store_reads_them(backend: CrewAIStorage) -> None:
    old = datetime.now(UTC).replace(tzinfo=None) - timedelta(days=40)
    backend.save([
        record("a", "/a", categories=["x", "y"], metadata={"k": "v", "nested": {"n": 1}}),
        record("a.b", "/a.b", categories=["y"]),  # a "." in a segment is its own
        record("deep", "/a/b/c/d", created_at=old, metadata={"k": "w"}),
        record("root"),
    ])
    assert backend.count("/a") == 2 and backend.count("/a.b") == 1
    assert backend.count("a/b/") == 1  # a path as CrewAI's stores read it
    assert backend.list_scopes("/") == ["/a", "/a.b"]
    assert backend.list_scopes("/a/b") == ["/a/b/c"]
    query = EMBED(["a"])[0]
    assert {r.content for r, _ in backend.search(query, categories=["y"], limit=10)} == {
        "a", "a.b"}
    assert [r.content for r, _ in backend.search(
        query, metadata_filter={"nested": {"n": 1}}, limit=10)] == ["a"]
    with pytest.raises(ValueError, match="without '.'"):
        backend.search(query, metadata_filter={"nested.n": 1})
    many = [f"c{n}" for n in range(40)] + ["x"]  # more than a combination takes at once
    assert [r.content for r, _ in backend.search(query, categories=many, limit=10)] == ["a"]
    assert backend.delete(older_than=datetime.now(UTC) - timedelta(days=30)) == 1
    assert backend.delete(record_ids=[f"none-{n}" for n in range(250)]) == 0
    assert backend.count() == 3


def test_a_search_pages_past_the_store_s_recall_limit(backend: CrewAIStorage) -> None:
    backend.save([record(f"fact number {n}") for n in range(45)])
    hits = backend.search(EMBED(["fact number"])[0], limit=45)
    assert len(hits) == 45 and len({r.id for r, _ in hits}) == 45
    scores = [score for _, score in hits]
    assert scores == sorted(scores, reverse=True)


def test_crewai_s_memory_remembers_across_a_restart_and_keeps_users_apart(
        target: str) -> None:
    for user, fact in (("kamal", "the user loves sushi"), ("priya", "the user loves tea")):
        with CrewAIStorage(target, user=user) as storage:
            memory = CrewMemory(storage=storage, embedder=EMBED, consolidation_threshold=1.0)
            try:
                memory.remember(fact, scope="/user", categories=["food"], importance=0.9)
            finally:
                memory.close()
    with CrewAIStorage(target, user="kamal") as storage:  # another process, later
        memory = CrewMemory(storage=storage, embedder=EMBED, consolidation_threshold=1.0)
        try:
            found = memory.recall("what does the user love?", scope="/user", depth="shallow")
            assert [match.record.content for match in found] == ["the user loves sushi"]
        finally:
            memory.close()
