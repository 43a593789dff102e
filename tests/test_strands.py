"""Strands Agents' MemoryStore over memory.py, on both engines: a real Agent with its
MemoryManager and a scripted model (no network) that keeps a fact in one run and is given
it in the next, two users kept apart, extraction's raw messages kept once however often a
batch is retried, an entry added twice kept once, another tool's memory never an entry.

Strands pins the MCP SDK below the version the mcp extra needs, so these run in an
environment of their own (the test-crewai-strands extra; .ci/run makes it) and skip in
the test extra's, saying so."""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

pytest.importorskip("strands", reason="Strands is tested in the test-crewai-strands extra's"
                    " environment (Strands pins the MCP SDK below the mcp extra's)")

from strands import Agent  # noqa: E402
from strands.memory import AddMessagesContext, MemoryManager  # noqa: E402
from strands.models.model import Model  # noqa: E402
from strands.types.content import Message  # noqa: E402

from memory import MemoryStore, Scope  # noqa: E402
from memory_frameworks import record_key  # noqa: E402
from memory_frameworks.strands import StrandsMemoryStore  # noqa: E402

pytestmark = pytest.mark.anyio

KAMAL = Scope("kamal", "strands")


class ScriptedModel(Model):
    """Strands' Model answering from a script, a turn a call: a text, or a tool call
    (name, input); each call's messages and system prompt kept for the test to read."""

    def __init__(self, turns: list[str | tuple[str, dict[str, Any]]]) -> None:
        self.turns = list(turns)
        self.seen: list[str] = []

    def update_config(self, **model_config: Any) -> None:
        pass

    def get_config(self) -> dict[str, Any]:
        return {}

    def structured_output(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def stream(self, messages: Any, tool_specs: Any = None,
                     system_prompt: str | None = None, **kwargs: Any
                     ) -> AsyncIterator[Any]:
        self.seen.append(json.dumps([messages, system_prompt, kwargs], default=str))
        turn = self.turns.pop(0)
        yield {"messageStart": {"role": "assistant"}}
        if isinstance(turn, str):
            yield {"contentBlockStart": {"start": {}}}
            yield {"contentBlockDelta": {"delta": {"text": turn}}}
            yield {"contentBlockStop": {}}
            yield {"messageStop": {"stopReason": "end_turn"}}
            return
        name, arguments = turn
        yield {"contentBlockStart": {"start": {"toolUse": {"name": name,
                                                           "toolUseId": f"t{len(self.seen)}"}}}}
        yield {"contentBlockDelta": {"delta": {"toolUse": {"input": json.dumps(arguments)}}}}
        yield {"contentBlockStop": {}}
        yield {"messageStop": {"stopReason": "tool_use"}}


def agent(store: StrandsMemoryStore, model: ScriptedModel, **manager: Any) -> Agent:
    return Agent(model=model, callback_handler=None,
                 memory_manager=MemoryManager(stores=[store], **manager))


@pytest.fixture
def stores(target: str) -> Iterator[tuple[StrandsMemoryStore, StrandsMemoryStore]]:
    with MemoryStore(target) as shared:
        yield (StrandsMemoryStore(shared, user="kamal"),
               StrandsMemoryStore(shared, user="priya"))


def test_an_agent_remembers_in_one_run_and_is_given_it_in_the_next(target: str) -> None:
    for user, fact in (("kamal", "Kamal is vegetarian"), ("priya", "Priya eats fish")):
        with StrandsMemoryStore(target, user=user) as store:
            model = ScriptedModel([("add_memory", {"entries": [fact]}), "Noted."])
            agent(store, model, add_tool_config=True)("Remember what I eat.")
            assert model.turns == []  # the tool was called, and answered
    with StrandsMemoryStore(target, user="kamal") as store:  # a new process, later
        model = ScriptedModel(["You are vegetarian."])
        agent(store, model)("What do I eat? vegetarian or fish?")
        assert "Kamal is vegetarian" in model.seen[0]
        assert "Priya" not in model.seen[0]


def test_extraction_keeps_each_message_once_however_often_a_batch_is_retried(
        target: str) -> None:
    with StrandsMemoryStore(target, user="kamal", extraction=True) as store:
        model = ScriptedModel(["Lisbon is lovely in May."])
        agent(store, model, injection=False)("I am moving to Lisbon in May.")
        texts = [m["text"] for m in store.store.memories(KAMAL)]
        assert texts == ["user: I am moving to Lisbon in May.",
                         "assistant: Lisbon is lovely in May."]


async def test_a_retried_batch_writes_nothing_twice(
        stores: tuple[StrandsMemoryStore, StrandsMemoryStore]) -> None:
    kamal, _ = stores
    said: list[Message] = [{"role": "user", "content": [{"text": "ok"}]},
                           {"role": "assistant", "content": [{"text": "ok"}]},
                           {"role": "user", "content": [{"toolResult": {
                               "toolUseId": "t", "content": [], "status": "success"}}]}]
    context = AddMessagesContext(sequence_numbers=[4, 5, 7])
    first = await kamal.add_messages(said[:2], AddMessagesContext(sequence_numbers=[4, 5]))
    again = await kamal.add_messages(said, context)  # a retry, grown by a tool's result
    assert again == first and len(set(first)) == 2  # two "ok"s: two messages
    assert [str(m["id"]) for m in kamal.store.memories(KAMAL)] == first  # none written again
    await kamal.initialize()  # a new run numbers from 0 again: its messages are new
    assert set(await kamal.add_messages(said[:1], AddMessagesContext(
        sequence_numbers=[4]))).isdisjoint(first)
    assert kamal.store.count(KAMAL) == 3
    with pytest.raises(ValueError, match="a sequence number for each"):
        await kamal.add_messages(said, AddMessagesContext(sequence_numbers=[1]))


async def test_an_entry_added_twice_is_kept_once_and_users_are_apart(
        stores: tuple[StrandsMemoryStore, StrandsMemoryStore]) -> None:
    kamal, priya = stores
    first = await kamal.add("Kamal prefers window seats", {"topic": "travel"})
    assert await kamal.add("  Kamal prefers window seats ", {"topic": "travel"}) == first
    assert kamal.store.count(KAMAL) == 1
    found = await kamal.search("window seats")
    assert [(e.content, e.metadata and e.metadata["topic"]) for e in found] == [
        ("Kamal prefers window seats", "travel")]
    assert await priya.search("window seats") == []
    with pytest.raises(ValueError, match="non-empty"):
        await kamal.add("  ")
    with pytest.raises(ValueError, match="at least 1"):
        await kamal.search("seats", {"max_search_results": 0})


async def test_another_tools_memory_is_never_an_entry(
        stores: tuple[StrandsMemoryStore, StrandsMemoryStore]) -> None:
    kamal, _ = stores
    kamal.store.remember(KAMAL, "task", "window seats by the cli", "cli")
    kamal.store.remember(KAMAL, "user", "window seats for every task", "cli",
                         metadata={"strands": "entry"})
    kamal.store.remember(KAMAL, "task", "window seats forged", "cli",
                         metadata={"strands": "forged"})
    assert await kamal.search("window seats") == []
    # Another tool's memory under the key an entry of the same text takes: not the entry.
    kamal.store.remember(KAMAL, "task", "window seats", "cli", key=record_key(
        "entry", hashlib.sha256(b"window seats").hexdigest()))
    kept = await kamal.add("window seats")
    assert [e.content for e in await kamal.search("window seats")] == ["window seats"]
    assert kept.isdigit()


async def test_a_store_not_writable_refuses_writes(target: str) -> None:
    with StrandsMemoryStore(target, user="kamal", writable=False) as store:
        with pytest.raises(ValueError, match="not writable"):
            await store.add("a fact")
        with pytest.raises(ValueError, match="not writable"):
            await store.add_messages([{"role": "user", "content": [{"text": "hi"}]}])
        assert await store.search("fact") == []


async def test_a_search_pages_past_the_store_s_recall_limit(
        stores: tuple[StrandsMemoryStore, StrandsMemoryStore]) -> None:
    kamal, _ = stores
    for number in range(30):
        await kamal.add(f"fact number {number}")
    found = await kamal.search("fact number", {"max_search_results": 25})
    assert len(found) == 25 and len({e.metadata and e.metadata["id"] for e in found}) == 25
