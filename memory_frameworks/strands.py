"""Strands Agents' MemoryStore over memory.py.

    from strands import Agent
    from strands.memory import MemoryManager
    from memory_frameworks.strands import StrandsMemoryStore
    store = StrandsMemoryStore("memory.db", user="alice")   # or a postgresql:// URL
    agent = Agent(model=model, memory_manager=MemoryManager(stores=[store]))

Strands' MemoryManager searches its stores before each model call (and gives the model a
search tool); what it keeps comes to a store as entries (`add`: a fact, from the model's
add tool or its extractor) or as the conversation's messages (`add_messages`, with
extraction on). Each is one memory of the user's task `task` (default "strands"), at
task level, marked as the adapter's: an entry keyed by its text's digest (the same
entry added again is the one kept), a message keyed by the run and its sequence number
with its text's digest (a retried batch writes nothing twice), its source
"<run>/message", so that a run's messages are one conversation, which recall with
context reads together. The user is the constructor's. docs/frameworks.md tells the rest.
"""

from __future__ import annotations

import hashlib
import logging
import os
import uuid
from typing import Any

from memory import MAX_QUERY, Memory, MemoryStore, Scope
from memory_frameworks import OnStore, marked, needs, recalled, record_key, store_of

with needs("strands"):
    import anyio.to_thread
    from strands.memory import AddMessagesContext, MemoryEntry, SearchOptions
    from strands.memory.extraction.types import ExtractionConfig
    from strands.types.content import Message

__all__ = ["StrandsMemoryStore"]

_log = logging.getLogger("memory.strands")

#: The longest entry or message a store this module opens takes.
LONGEST_ENTRY = 1_000_000
_MARK = "strands"
_ENTRY, _MESSAGE = "entry", "message"
_SOURCE = "strands"
# What a search gives where neither the call nor the store says (Strands' own stores').
_SEARCHED = 10


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _text_of(message: Message) -> str:
    """A message's text blocks, after its role (its tool calls and images left out)."""
    said = " ".join(block["text"] for block in message["content"] if "text" in block)
    return f"{message['role']}: {said}" if said.strip() else ""


class StrandsMemoryStore(OnStore):
    """A Strands MemoryStore (MemoryManager's `stores`) kept in a MemoryStore.

    `location`: a path or postgresql:// URL (opened with RECOMMENDED unless `options`
    say otherwise, closed by close()), or an open MemoryStore, used as it is. `name`,
    `description`, `max_search_results`, `writable` and `extraction` are Strands' own
    (MemoryStoreConfig); `extraction=True` keeps the conversation's messages as they
    are, with no model call."""

    def __init__(self, location: str | os.PathLike[str] | MemoryStore, *, user: str,
                 task: str = "strands", name: str = "memory", description: str | None = None,
                 max_search_results: int | None = None, writable: bool = True,
                 extraction: ExtractionConfig | bool | None = None, **options: Any) -> None:
        if not isinstance(name, str) or not name.strip():
            raise ValueError("name must be a non-empty str")
        if max_search_results is not None and (type(max_search_results) is not int
                                               or max_search_results < 1):
            raise ValueError("max_search_results must be an int of at least 1")
        self.name, self.description = name, description
        self.max_search_results, self.writable = max_search_results, bool(writable)
        self.extraction = extraction
        self._scope = Scope(user, task)
        self.store, self._owned = store_of(location, options, LONGEST_ENTRY)
        self._run = uuid.uuid4().hex

    async def initialize(self) -> None:
        """A new run: the MemoryManager's sequence numbers start again from 0."""
        self._run = uuid.uuid4().hex

    def get_tools(self) -> list[Any]:
        return []  # the MemoryManager's search and add tools are the store's

    # -- search ----------------------------------------------------------------------

    async def search(self, query: str, options: SearchOptions | None = None
                     ) -> list[MemoryEntry]:
        """The user's entries and messages that match `query` best, best first, each
        with its id and score in its metadata."""
        asked = (options or {}).get("max_search_results")
        if asked is not None and (type(asked) is not int or asked < 1):
            raise ValueError("max_search_results must be an int of at least 1")
        limit = asked or self.max_search_results or _SEARCHED
        if not isinstance(query, str) or not query.strip():
            return []
        found = await anyio.to_thread.run_sync(
            lambda: recalled(self.store, self._scope, query[:MAX_QUERY], limit,
                             where={"$level": "task", _MARK: {"$in": [_ENTRY, _MESSAGE]}}))
        return [MemoryEntry(content=hit["text"], metadata={
            **((hit.get("metadata") or {}).get("metadata") or {}),
            "id": hit["id"], "score": hit["score"]}) for hit in found]

    # -- writes ----------------------------------------------------------------------

    def _check_writable(self) -> None:
        if not self.writable:
            raise ValueError(f"the memory store {self.name!r} is not writable")

    async def add(self, content: str, metadata: dict[str, Any] | None = None) -> str:
        """Keep an entry; the id of the memory that holds it. The same text added again
        (as extraction's retries do) is the entry kept: nothing is written."""
        self._check_writable()
        if not isinstance(content, str) or not content.strip():
            raise ValueError("content must be a non-empty str")
        if metadata is not None and not isinstance(metadata, dict):
            raise ValueError("metadata must be a dict")
        text = content.strip()
        key = record_key(_ENTRY, _digest(text))
        kept = {_MARK: _ENTRY, **({"metadata": metadata} if metadata else {})}

        def write() -> int:
            held = self._own(key, _ENTRY)
            if held is not None and held["text"] == text and (
                    held.get("metadata") or {}).get("metadata") == kept.get("metadata"):
                return held["id"]
            return self.store.remember(self._scope, "task", text, _SOURCE, key=key,
                                       metadata=kept)

        memory_id = await anyio.to_thread.run_sync(write)
        _log.info("kept entry %d of user %s", memory_id, self._scope.user)
        return str(memory_id)

    async def add_messages(self, messages: list[Message],
                           context: AddMessagesContext | None = None) -> list[str]:
        """Keep each message that holds text, in one transaction; the ids of the memories
        that hold them. A message is named by the run, its sequence number (the context's,
        else its place in the call) and its text, so a retried batch writes none twice."""
        self._check_writable()
        numbers = (context.sequence_numbers if context is not None else None) \
            or list(range(len(messages)))
        if len(numbers) != len(messages):
            raise ValueError("the context gives a sequence number for each message")
        run = self._run
        items = [(record_key(_MESSAGE, run, str(number), _digest(text)), text)
                 for number, message in zip(numbers, messages, strict=True)
                 if (text := _text_of(message))]

        def write() -> list[int]:
            held = {key: found for key, _ in items
                    if (found := self._own(key, _MESSAGE)) is not None}
            new = self.store.remember_many([
                {"scope": self._scope, "level": "task", "text": text,
                 "source": f"{run}/message", "key": key, "metadata": {_MARK: _MESSAGE}}
                for key, text in items if key not in held])
            written = iter(new)
            return [held[key]["id"] if key in held else next(written) for key, _ in items]

        ids = await anyio.to_thread.run_sync(write)
        _log.info("kept %d messages of user %s", len(ids), self._scope.user)
        return [str(memory_id) for memory_id in ids]

    def _own(self, key: str, kind: str) -> Memory | None:
        found = self.store.get(self._scope, key=key)
        return found if marked(found, _MARK, kind) else None
