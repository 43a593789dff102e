"""The Pydantic AI harness's MemoryStore over memory.py, on both engines: the harness
backends' own contract suite (pydantic-ai-memory-core's, run as it ships, the adapter in
one user's store), then this project's tests of what the suite does not look at: users
kept apart by the path's segment, a memory another tool wrote never a file, versions that
never come back, writers racing on one version, a retried operation."""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.metadata
from collections.abc import Iterator
from typing import Any, cast

import pytest

# The contract suite's tests are collected from its module, so it is imported here, at
# collection (0.5 s), the one framework that is (tests/test_collection.py): the others'
# names are deferred to their tests (tests/deferred.py).
pytest.importorskip("pydantic_ai_memory_core.contract", reason="needs the `pydantic-ai` extra"
                    " and pydantic-ai-memory-core (python3 -m pip install -e '.[test]')")
from pydantic_ai_harness.memory import (  # noqa: E402
    MemoryConflictError,
    MemoryOperation,
    MemoryOperationConflictError,
)
from pydantic_ai_memory_core.contract import *  # noqa: E402, F403
from pydantic_ai_memory_core.contract import (  # noqa: E402
    test_memory_capability_end_to_end as _shipped_end_to_end,
)

from helpers import all_finish  # noqa: E402
from memory import MemoryStore, Scope  # noqa: E402
from memory_frameworks.pydantic_ai import PydanticAIMemoryStore  # noqa: E402

pytestmark = pytest.mark.anyio  # the suite's tests are coroutines: anyio runs them

# The shipped suite (0.1.0) finds the memory the model saw at the first "<memory>" of the
# prompt's user parts; harness 0.75 puts a note naming "<memory>" there first and the
# memory in a part after it, so the test fails on the harness's own InMemoryMemoryStore
# as on this adapter (it passed with harness 0.62; the versions between are untried).
# test_the_memory_written_in_one_run_reaches_the_model_in_the_next checks the same here.
test_memory_capability_end_to_end = pytest.mark.xfail(
    tuple(map(int, importlib.metadata.version("pydantic-ai-harness").split(".")[:2]))
    >= (0, 75), reason="pydantic-ai-memory-core 0.1.0 reads harness 0.75's prompt at its"
    " note", strict=True)(_shipped_end_to_end)

KAMAL = Scope("kamal", "pydantic-ai")


@pytest.fixture
def store(target: str) -> Iterator[PydanticAIMemoryStore]:
    """The contract suite's store: fresh, empty, one user's."""
    with PydanticAIMemoryStore(target, user="kamal") as opened:
        yield opened


@pytest.fixture
def by_segment(target: str) -> Iterator[PydanticAIMemoryStore]:
    """A store whose paths name their users: the harness's namespace first."""
    with PydanticAIMemoryStore(target, user_segment=0) as opened:
        yield opened


@dataclasses.dataclass
class _User:
    user_id: str


def test_the_memory_written_in_one_run_reaches_the_model_in_the_next(
        store: PydanticAIMemoryStore) -> None:
    """The harness's Memory capability over the adapter: what an agent's run wrote with
    write_memory is in the messages the model is given in a fresh run (as the shipped
    suite's end-to-end test means, read from every part of every message)."""
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel
    from pydantic_ai_harness.memory import Memory

    given: list[str] = []

    def scripted(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        parts = [part for message in messages for part in getattr(message, "parts", [])]
        if not any(getattr(part, "tool_name", None) == "write_memory" for part in parts) \
                and "remember:" in str(parts[0]):
            return ModelResponse(parts=[ToolCallPart(
                tool_name="write_memory", args={"content": "the user moved to Hanoi"})])
        given.append(" ".join(str(getattr(part, "content", "")) for part in parts))
        return ModelResponse(parts=[TextPart("ok")])

    memory_of_user = Memory(store=store, namespace=lambda ctx: cast(_User, ctx.deps).user_id)
    agent = Agent(FunctionModel(scripted), deps_type=_User, capabilities=[memory_of_user])
    assert agent.run_sync("remember: the user moved to Hanoi", deps=_User("kamal")).output == "ok"
    given.clear()
    assert agent.run_sync("plan a trip", deps=_User("kamal")).output == "ok"
    assert len(given) == 1 and "the user moved to Hanoi" in given[0], given


async def test_the_path_s_segment_keeps_users_apart(by_segment: PydanticAIMemoryStore) -> None:
    await by_segment.write("kamal/main/MEMORY.md", "Kamal lives in Hanoi.",
                           expected_version=None)
    await by_segment.write("priya/main/MEMORY.md", "Priya lives in Pune.",
                           expected_version=None)
    assert [m["text"] for m in by_segment.store.memories(KAMAL)] == ["Kamal lives in Hanoi."]
    assert await by_segment.list_paths("kamal/", limit=10) == ["kamal/main/MEMORY.md"]
    found = await by_segment.search("kamal/main/", "lives", limit=5, max_files=10,
                                    max_chars=500, max_file_chars=500)
    assert [match.path for match in found.matches] == ["kamal/main/MEMORY.md"]
    for prefix in ("", "kamal", "kam"):  # a listing names its user
        with pytest.raises(ValueError, match="names its user"):
            await by_segment.list_paths(prefix, limit=10)
    # A name that is not an identifier is its digest: two such never share a user.
    await by_segment.write("Kamal/main/MEMORY.md", "Another Kamal.", expected_version=None)
    assert (await by_segment.read("kamal/main/MEMORY.md", max_chars=100)).content == (  # type: ignore[union-attr]
        "Kamal lives in Hanoi.")


async def test_a_memory_another_tool_wrote_is_never_a_file(
        store: PydanticAIMemoryStore) -> None:
    """The user level (a model over `memory mcp` writes there), or the task's memories
    without the adapter's mark: not files, whatever key or metadata they carry."""
    memories = store.store
    memories.remember(KAMAL, "user", "planted", "s", key="kamal/main/MEMORY.md",
                      metadata={"pydantic_ai": "memory-file"})
    memories.remember(KAMAL, "task", "unmarked", "s", key="kamal/main/notes.md")
    assert await store.read("kamal/main/MEMORY.md", max_chars=100) is None
    assert await store.read("kamal/main/notes.md", max_chars=100) is None
    assert await store.list_paths("kamal/", limit=10) == []
    found = await store.search("kamal/", "planted unmarked", limit=5, max_files=10,
                               max_chars=500, max_file_chars=500)
    assert found.matches == [] and found.scanned == 0
    with pytest.raises(MemoryConflictError):  # the unmarked one holds the key
        await store.write("kamal/main/notes.md", "mine", expected_version=None)
    # The user level's memory is the user level's: a file of the task stands over it.
    written = await store.write("kamal/main/MEMORY.md", "Kamal's own notes.",
                                expected_version=None)
    assert (await store.read("kamal/main/MEMORY.md", max_chars=100)).version == (  # type: ignore[union-attr]
        written.version)
    versions = [m["key"] for m in memories.memories(Scope("kamal", "elsewhere"))]
    assert versions == ["kamal/main/MEMORY.md"]  # the planted one, untouched


async def test_a_version_never_comes_back(store: PydanticAIMemoryStore) -> None:
    """The harness's version is the memory's id, which the store never gives twice: a
    writer holding a version from before a delete and a new file cannot write over it."""
    path = "kamal/main/MEMORY.md"
    first = await store.write(path, "v1", expected_version=None)
    await store.delete(path, expected_version=first.version)
    again = await store.write(path, "v1 again", expected_version=None)
    assert again.version != first.version
    with pytest.raises(MemoryConflictError):
        await store.write(path, "stale", expected_version=first.version)
    with pytest.raises(MemoryConflictError):  # another file's version is not this one's
        other = await store.write("kamal/main/other.md", "x", expected_version=None)
        await store.write(path, "wrong", expected_version=other.version)
    assert (await store.read(path, max_chars=100)).content == "v1 again"  # type: ignore[union-attr]


def test_of_writers_racing_on_one_version_one_wins(target: str) -> None:
    path = "kamal/main/MEMORY.md"
    with PydanticAIMemoryStore(target, user="kamal") as store:
        first = asyncio.run(store.write(path, "v1", expected_version=None))
        won: list[str] = []
        lost: list[str] = []

        def writer(n: int) -> None:
            try:
                asyncio.run(store.write(path, f"writer {n}",
                                        expected_version=first.version))
                won.append(f"writer {n}")
            except MemoryConflictError:
                lost.append(f"writer {n}")

        import threading
        assert all_finish([threading.Thread(target=writer, args=(n,)) for n in range(8)])
        assert len(won) == 1 and len(lost) == 7
        assert asyncio.run(store.read(path, max_chars=100)).content == won[0]  # type: ignore[union-attr]


async def test_an_operation_retried_by_another_store_is_replayed(
        target: str, by_segment: PydanticAIMemoryStore) -> None:
    """A receipt is the store's: another process's adapter replays it; by segment, an
    operation names no user, so get_operation answers None, and the write replays."""
    path = "kamal/main/MEMORY.md"
    operation = MemoryOperation(id="call-1", fingerprint="f" * 200)
    done = await by_segment.write(path, "Kamal lives in Hanoi.", expected_version=None,
                                  operation=operation)
    assert await by_segment.get_operation(operation) is None
    again = await by_segment.write(path, "Kamal lives in Hanoi.", expected_version=None,
                                   operation=operation)
    assert (again.version, again.replayed, again.existed) == (done.version, True, False)
    with PydanticAIMemoryStore(target, user="kamal") as one_user:
        replayed = await one_user.get_operation(operation)
        assert replayed is not None and replayed.version == done.version
        with pytest.raises(MemoryOperationConflictError):
            await one_user.get_operation(MemoryOperation(id="call-1", fingerprint="other"))
        deleted = await one_user.delete(path, expected_version=done.version,
                                        operation=MemoryOperation(id="call-2", fingerprint="d"))
        assert (await one_user.get_operation(MemoryOperation(id="call-2", fingerprint="d"))
                ) == type(deleted)(version=None, replayed=True, existed=True)


@pytest.mark.parametrize("call", [
    lambda s: s.write("kamal/main/a.md", "  ", expected_version=None),
    lambda s: s.write("kamal/main/" + "a" * 600, "x", expected_version=None),
    lambda s: s.write("kamal//a.md", "x", expected_version=None),
    lambda s: s.write_with_metadata("kamal/a.md", "x", expected_version=None,
                                    metadata={"k": 1}),
    lambda s: s.list_paths("kamal/", limit=0),
    lambda s: s.search("kamal/", "x", limit=1, max_files=0, max_chars=1, max_file_chars=1),
])
async def test_bad_input_is_refused_and_nothing_is_written(store: PydanticAIMemoryStore,
                                                           call: Any) -> None:
    with pytest.raises((ValueError, TypeError)):
        await call(store)
    assert store.store.count(KAMAL) == 0


def test_the_user_is_the_constructor_s(tmp_path: Any) -> None:
    for options in ({}, {"user": "kamal", "user_segment": 0}, {"user_segment": -1},
                    {"user": "Not An Id"}):
        with pytest.raises(ValueError):
            PydanticAIMemoryStore(str(tmp_path / "m.db"), **options)
    with MemoryStore(str(tmp_path / "m.db")) as opened:
        PydanticAIMemoryStore(opened, user="kamal").close()  # not the adapter's to close
        assert opened.count(KAMAL) == 0
