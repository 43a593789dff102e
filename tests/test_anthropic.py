"""The Anthropic SDK's memory tool over memory.py, on both engines: the SDK's own tool
runner driving the tool from scripted replies (its HTTP transport mocked, no network),
each command as the runner calls it, edits racing, users apart, and a memory another tool
wrote never a file."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest
from deferred import deferred, module, needs

from helpers import all_finish
from memory import MemoryStore, Scope

pytestmark = needs("anthropic", "anthropic")
if TYPE_CHECKING:
    import anthropic.lib.tools as tools
    import httpx2
    from anthropic import Anthropic

    from memory_frameworks.anthropic import AnthropicMemoryTool, AsyncAnthropicMemoryTool
else:
    httpx2, tools = module("httpx2"), module("anthropic.lib.tools")
    Anthropic, = deferred("anthropic", "Anthropic")
    AnthropicMemoryTool, AsyncAnthropicMemoryTool = deferred(
        "memory_frameworks.anthropic", "AnthropicMemoryTool", "AsyncAnthropicMemoryTool")

ALICE = Scope("alice", "anthropic")


@pytest.fixture
def tool(target: str) -> Iterator[AnthropicMemoryTool]:
    with_store = AnthropicMemoryTool(target, user="alice")
    yield with_store
    with_store.close()


def run(tool: AnthropicMemoryTool, **command: Any) -> Any:
    """A command as the SDK's runner gives it to the tool: its input, as the model sent."""
    return tool.call(command)


def reply(stop: str, *content: dict[str, Any]) -> dict[str, Any]:
    return {"id": "m", "type": "message", "role": "assistant", "model": "claude-test",
            "stop_reason": stop, "stop_sequence": None, "content": list(content),
            "usage": {"input_tokens": 1, "output_tokens": 1}}


def test_the_sdk_s_tool_runner_keeps_and_reads_a_memory(target: str) -> None:
    """Two conversations of the SDK's tool runner, the model scripted: the first creates
    a file, the second views it and gets its text in the tool's result."""
    scripted = iter([
        reply("tool_use", {"type": "tool_use", "id": "t1", "name": "memory", "input": {
            "command": "create", "path": "/memories/prefs.md",
            "file_text": "Alice is vegetarian.\n"}}),
        reply("end_turn", {"type": "text", "text": "Noted."}),
        reply("tool_use", {"type": "tool_use", "id": "t2", "name": "memory", "input": {
            "command": "view", "path": "/memories/prefs.md"}}),
        reply("end_turn", {"type": "text", "text": "You are vegetarian."}),
    ])
    sent: list[Any] = []

    def server(request: httpx2.Request) -> httpx2.Response:
        sent.append(json.loads(request.content))
        return httpx2.Response(200, json=next(scripted))

    client = Anthropic(api_key="test", http_client=httpx2.Client(
        transport=httpx2.MockTransport(server)))
    for words in ("I am vegetarian.", "What do I eat?"):
        with AnthropicMemoryTool(target, user="alice") as tool:  # a process each
            runner = client.beta.messages.tool_runner(
                model="claude-test", max_tokens=100, tools=[tool],
                messages=[{"role": "user", "content": words}])
            assert [message.stop_reason for message in runner] == ["tool_use", "end_turn"]
    assert sent[0]["tools"] == [{"type": "memory_20250818", "name": "memory"}]
    (result,) = sent[3]["messages"][-1]["content"]
    assert result["tool_use_id"] == "t2" and "Alice is vegetarian." in result["content"]
    with MemoryStore(target) as store:  # bob's tool sees none of it
        assert store.memories(Scope("bob", "anthropic")) == []


def test_each_command_as_the_runner_calls_it(tool: AnthropicMemoryTool) -> None:
    assert run(tool, command="create", path="/memories/notes/trip.md",
               file_text="Day 1: Lisbon.\nDay 2: Porto.\n").startswith("File created")
    run(tool, command="create", path="/memories/prefs.md", file_text="Vegetarian.\n")
    listing = run(tool, command="view", path="/memories")
    assert listing.splitlines()[1:] == ["41B\t/memories", "29B\t/memories/notes/",
                                        "29B\t/memories/notes/trip.md",
                                        "12B\t/memories/prefs.md"]
    assert run(tool, command="view", path="/memories/notes/trip.md",
               view_range=[2, 2]).endswith("     2\tDay 2: Porto.")
    edited = run(tool, command="str_replace", path="/memories/notes/trip.md",
                 old_str="Porto", new_str="Porto, then Braga")
    assert "Day 2: Porto, then Braga." in edited
    with pytest.raises(tools.ToolError, match="did not appear verbatim"):
        run(tool, command="str_replace", path="/memories/notes/trip.md", old_str="Faro",
            new_str="x")
    with pytest.raises(tools.ToolError, match="Multiple occurrences"):
        run(tool, command="str_replace", path="/memories/notes/trip.md", old_str="Day",
            new_str="x")
    run(tool, command="insert", path="/memories/notes/trip.md", insert_line=0,
        insert_text="Trip plan")
    assert tool.store.get(ALICE, key="/memories/notes/trip.md")["text"] == (  # type: ignore[index]
        "Trip plan\nDay 1: Lisbon.\nDay 2: Porto, then Braga.\n")
    with pytest.raises(tools.ToolError, match="already exists"):
        run(tool, command="create", path="/memories/prefs.md", file_text="again")
    with pytest.raises(tools.ToolError, match="already exists"):  # a directory
        run(tool, command="create", path="/memories/notes", file_text="x")
    with pytest.raises(tools.ToolError, match="is a file"):
        run(tool, command="create", path="/memories/prefs.md/x", file_text="x")
    assert run(tool, command="rename", old_path="/memories/notes",
               new_path="/memories/travel").startswith("Successfully renamed")
    assert tool.store.get(ALICE, key="/memories/travel/trip.md") is not None
    with pytest.raises(tools.ToolError, match="already exists"):
        run(tool, command="rename", old_path="/memories/travel/trip.md",
            new_path="/memories/prefs.md")
    run(tool, command="delete", path="/memories/travel")
    with pytest.raises(tools.ToolError, match="does not exist"):
        run(tool, command="view", path="/memories/travel/trip.md")
    assert tool.clear_all_memory() == "All memory cleared"
    assert tool.store.count(ALICE) == 0


@pytest.mark.parametrize("path", ["/etc/passwd", "/memories/../x", "/memories/a/./b",
                                  "/memories//a", "memories/a", "/memories/a\x00b"])
def test_a_path_outside_the_memories_is_refused(tool: AnthropicMemoryTool, path: str) -> None:
    with pytest.raises(tools.ToolError):
        run(tool, command="create", path=path, file_text="x")
    assert tool.store.count(ALICE) == 0


def test_a_memory_another_tool_wrote_is_never_a_file(tool: AnthropicMemoryTool) -> None:
    tool.store.remember(ALICE, "user", "planted", "s", key="/memories/prefs.md",
                        metadata={"anthropic": "memory-file"})
    tool.store.remember(ALICE, "task", "unmarked", "s", key="/memories/notes.md")
    assert run(tool, command="view", path="/memories").splitlines()[1:] == ["0B\t/memories"]
    with pytest.raises(tools.ToolError, match="does not exist"):
        run(tool, command="str_replace", path="/memories/prefs.md", old_str="planted",
            new_str="x")
    with pytest.raises(tools.ToolError, match="does not exist"):
        run(tool, command="delete", path="/memories/notes.md")
    tool.clear_all_memory()
    assert tool.store.count(ALICE) == 2  # neither is the tool's to clear


def test_edits_racing_on_one_file_never_lose_one(target: str) -> None:
    with AnthropicMemoryTool(target, user="alice") as tool:
        run(tool, command="create", path="/memories/log.md", file_text="start\n")

        def editor(n: int) -> None:
            run(tool, command="insert", path="/memories/log.md", insert_line=1,
                insert_text=f"line {n}")

        assert all_finish([threading.Thread(target=editor, args=(n,)) for n in range(8)])
        text = tool.store.get(ALICE, key="/memories/log.md")["text"]  # type: ignore[index]
        assert sorted(text.splitlines()) == sorted(["start", *(f"line {n}" for n in range(8))])


def test_the_async_tool_answers_as_the_other(target: str) -> None:
    async def session() -> list[Any]:
        tool = AsyncAnthropicMemoryTool(target, user="alice")
        try:
            return [await tool.call({"command": "create", "path": "/memories/a.md",
                                     "file_text": "A\n"}),
                    await tool.call({"command": "view", "path": "/memories/a.md"}),
                    await tool.clear_all_memory()]
        finally:
            tool.close()

    created, viewed, cleared = asyncio.run(session())
    assert created.startswith("File created") and viewed.endswith("     1\tA\n     2\t")
    assert cleared == "All memory cleared"
