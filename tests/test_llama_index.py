"""LlamaIndex's memory block over memory.py, on both engines: LlamaIndex's own Memory
hands a conversation's oldest messages to the block and, in the next session (another
block, as another process would open), is given what the block recalls; users apart, a
session's memories alone where asked, and a memory another tool wrote never given."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest
from deferred import deferred, needs

from memory import Scope

# The block's calls are coroutines: anyio runs them.
pytestmark = [needs("llama_index.core", "llama-index"), pytest.mark.anyio]
if TYPE_CHECKING:
    from llama_index.core.llms import ChatMessage
    from llama_index.core.memory import Memory

    from memory_frameworks.llama_index import MemoryBlock
else:
    ChatMessage, = deferred("llama_index.core.llms", "ChatMessage")
    Memory, = deferred("llama_index.core.memory", "Memory")
    MemoryBlock, = deferred("memory_frameworks.llama_index", "MemoryBlock")

ALICE = Scope("alice", "llama-index")
TALK = [("user", "I am vegetarian and I love jazz concerts in Lisbon."),
        ("assistant", "Noted: vegetarian, and jazz."),
        ("user", "Book me a table for Friday evening please."),
        ("assistant", "Done: Friday at eight."),
        ("user", "Also remind me to buy train tickets to Porto.")]


def conversation(block: MemoryBlock, session: str) -> Memory:
    """LlamaIndex's Memory over the block, small enough that a few turns overflow it."""
    return Memory.from_defaults(session_id=session, token_limit=60, token_flush_size=20,
                                chat_history_token_ratio=0.5, memory_blocks=[block])


@pytest.fixture
def block(target: str) -> Iterator[MemoryBlock]:
    with MemoryBlock(target, user="alice") as opened:
        yield opened


def given(block: MemoryBlock, session: str, question: str) -> str:
    """What a new session's Memory puts before the model for `question`."""
    memory = conversation(block, session)
    memory.put(ChatMessage(role="user", content=question))
    system = [m for m in memory.get() if m.role.value == "system"]
    return "\n".join(str(m.content) for m in system)


def test_the_oldest_turns_are_kept_and_given_in_the_next_session(target: str) -> None:
    with MemoryBlock(target, user="alice") as block:
        memory = conversation(block, "chat-1")
        for role, text in TALK:
            memory.put(ChatMessage(role=role, content=text))
        kept = [m["text"] for m in block.store.memories(ALICE)]
        assert kept[:2] == ["user: I am vegetarian and I love jazz concerts in Lisbon.",
                            "assistant: Noted: vegetarian, and jazz."]
        assert {m["source"] for m in block.store.memories(ALICE)} == {"chat-1/message"}
    with MemoryBlock(target, user="alice") as again:  # a new process's
        shown = given(again, "chat-2", "Anything vegetarian near the jazz club?")
        assert "I am vegetarian and I love jazz concerts in Lisbon." in shown
        # The Memory's tag holds the block's, of another name: no tag within its own kind.
        assert shown.startswith("<memory>\n<memories>\n") and shown.count("<memory>") == 1
    with MemoryBlock(target, user="bob") as other:
        assert "vegetarian" not in given(other, "chat-1", "Anything vegetarian near jazz?")


def test_a_session_s_own_memories_alone_where_asked(block: MemoryBlock) -> None:
    memory = conversation(block, "chat-1")
    for role, text in TALK:
        memory.put(ChatMessage(role=role, content=text))
    with MemoryBlock(block.store, user="alice", session_only=True) as only:
        assert given(only, "chat-2", "vegetarian jazz Lisbon") == ""
        assert "vegetarian" in given(only, "chat-1", "vegetarian jazz Lisbon")


def test_a_memory_another_tool_wrote_is_never_given(block: MemoryBlock) -> None:
    block.store.remember(ALICE, "user", "user: planted vegetarian jazz", "chat-1/message",
                         metadata={"llama_index": "memory"})
    block.store.remember(ALICE, "task", "unmarked vegetarian jazz", "chat-1/message")
    assert given(block, "chat-2", "vegetarian jazz") == ""


async def test_the_latest_messages_ask(target: str) -> None:
    with MemoryBlock(target, user="alice", window=1, top_k=1) as block:
        await block.aput([ChatMessage(role="user", content="I love jazz concerts."),
                          ChatMessage(role="user", content="Trains to Porto leave hourly.")])
        asked = [ChatMessage(role="user", content="any jazz tonight?"),
                 ChatMessage(role="user", content="and the trains to Porto?")]
        assert await block.aget(asked) == "user: Trains to Porto leave hourly."


async def test_truncation_drops_the_least_relevant_lines(block: MemoryBlock) -> None:
    content = "user: first fact here\nuser: second fact\nuser: third"
    assert await block.atruncate(content, 1) == "user: first fact here\nuser: second fact"
    assert await block.atruncate(content, 4) == "user: first fact here"
    assert await block.atruncate(content, 100) is None


async def test_messages_without_text_keep_nothing(block: MemoryBlock) -> None:
    await block.aput([ChatMessage(role="user", content="   "), ChatMessage(role="user")])
    assert block.store.count(ALICE) == 0
    assert await block.aget([]) == ""


def test_bad_settings_are_refused(target: str) -> None:
    for options in ({"top_k": 0}, {"top_k": 11}, {"window": 0}, {"user": "Not An Id"}):
        with pytest.raises(ValueError):
            MemoryBlock(target, **{"user": "alice", **options})  # type: ignore[arg-type]
