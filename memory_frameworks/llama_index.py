"""LlamaIndex's memory block over memory.py.

    from llama_index.core.memory import Memory
    from memory_frameworks.llama_index import MemoryBlock
    block = MemoryBlock("memory.db", user="alice")   # or a postgresql:// URL
    memory = Memory.from_defaults(session_id="chat-1", memory_blocks=[block])

LlamaIndex's Memory keeps a conversation's recent messages and, as they grow past its
token limit, hands the oldest to its blocks; before each model call it asks each block for
what to put before the model. This block keeps each message handed to it as one memory of
the user's task `task` (default "llama-index"), at task level: its text the role and the
message's text, its source "<session>/message" (so a session is the memories'
conversation, which recall with context reads together), its metadata the block's mark.
Asked, it recalls the best of them for the latest messages. The user is the
constructor's. docs/frameworks.md tells the rest.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from memory import MAX_LIMIT, MAX_QUERY, MemoryStore, Scope
from memory_frameworks import conversation, marked, needs, store_of

with needs("llama-index"):
    import anyio.to_thread
    from llama_index.core.base.llms.types import ChatMessage, TextBlock
    from llama_index.core.memory import BaseMemoryBlock
    from pydantic import Field, PrivateAttr

__all__ = ["MemoryBlock"]

_log = logging.getLogger("memory.llama_index")

#: The longest message a store this module opens takes.
LONGEST_MESSAGE = 1_000_000
_MARK = "llama_index"
# The memories a session's block recalls where the Memory names no session.
_NO_SESSION = "llama-index"


def _text_of(message: ChatMessage) -> str:
    """A message's text blocks, as one text (its images and other blocks left out)."""
    return " ".join(block.text for block in message.blocks if isinstance(block, TextBlock))


class MemoryBlock(BaseMemoryBlock[str]):
    """A LlamaIndex memory block (Memory's `memory_blocks`) kept in a MemoryStore.

    `location`: a path or postgresql:// URL (opened with RECOMMENDED unless `options` say
    otherwise, closed by close()), or an open MemoryStore, used as it is. `top_k`
    memories are recalled for the last `window` messages; with `session_only`, those of
    the session the Memory names alone."""

    # Memory wraps its blocks in <memory> and each block in a tag of its name: "memory"
    # would nest a tag in its own kind.
    name: str = Field(default="memories", description="The name of the memory block.")
    top_k: int = Field(default=3, description="How many memories a get gives, at most.")
    window: int = Field(default=5, description="How many of the latest messages ask.")
    session_only: bool = Field(default=False,
                               description="Recall the named session's memories alone.")
    _store: MemoryStore = PrivateAttr()
    _owned: bool = PrivateAttr()
    _scope: Scope = PrivateAttr()

    def __init__(self, location: str | os.PathLike[str] | MemoryStore, *, user: str,
                 task: str = "llama-index", **fields_and_options: Any) -> None:
        fields = {name: fields_and_options.pop(name) for name in list(fields_and_options)
                  if name in type(self).model_fields}
        super().__init__(**fields)
        if not 1 <= self.top_k <= MAX_LIMIT // 2 or not 1 <= self.window:
            raise ValueError(f"top_k is 1 to {MAX_LIMIT // 2} and window at least 1")
        self._scope = Scope(user, task)
        self._store, self._owned = store_of(location, fields_and_options, LONGEST_MESSAGE)

    @property
    def store(self) -> MemoryStore:
        return self._store

    def close(self) -> None:
        """Close the store, if this block opened it."""
        if self._owned:
            self._store.close()

    def __enter__(self) -> MemoryBlock:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


    async def _aput(self, messages: list[ChatMessage]) -> None:
        """Keep each message with text as one memory, all in one transaction."""
        items = []
        for message in messages:
            text = _text_of(message).strip()
            if not text:
                continue
            session = message.additional_kwargs.get("session_id")
            talk = conversation(str(session)) if session is not None else _NO_SESSION
            items.append({"scope": self._scope, "level": "task",
                          "text": f"{message.role.value}: {text}",
                          "source": f"{talk}/message", "metadata": {_MARK: self.name}})
        if items:
            await anyio.to_thread.run_sync(self._store.remember_many, items)
            _log.debug("kept %d messages of user %s", len(items), self._scope.user)

    async def _aget(self, messages: list[ChatMessage] | None = None,
                    session_id: str | None = None, **block_kwargs: Any) -> str:
        """The best memories for the latest messages, one a line ("" for none)."""
        if not messages:
            return ""
        query = " ".join(_text_of(message) for message in messages[-self.window:])
        query = query[-MAX_QUERY:].strip()
        if not query:
            return ""
        # The mark is a term of the metadata index; the level is told apart here, from
        # a few more than asked (a filter of it would read every memory of the scope).
        where: dict[str, Any] = {_MARK: self.name}
        if self.session_only and session_id is not None:
            where["$source"] = f"{conversation(session_id)}/message"
        found = await anyio.to_thread.run_sync(lambda: self._store.recall(
            self._scope, query, min(MAX_LIMIT, 2 * self.top_k), where=where))
        return "\n".join([memory["text"] for memory in found
                          if marked(memory, _MARK, self.name)][:self.top_k])

    async def atruncate(self, content: str, tokens_to_truncate: int) -> str | None:
        """The content less its last (least relevant) lines, about `tokens_to_truncate`
        tokens (a word a token); None where nothing is left."""
        lines = content.split("\n")
        dropped = 0
        while lines and dropped < tokens_to_truncate:
            dropped += len(lines.pop().split()) or 1
        return "\n".join(lines) or None
