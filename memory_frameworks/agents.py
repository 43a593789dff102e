"""The OpenAI Agents SDK's Session protocol over memory.py.

    from memory_frameworks.agents import AgentsSession
    session = AgentsSession("chat-42", "memory.db", user="alice")   # or a postgresql:// URL
    result = await Runner.run(agent, "Where did I say I stay in Lisbon?", session=session)

Each item the SDK keeps is one memory of the user's task `task` (default "agents"): its
text the item as JSON, its source "<session_id>/item", so that the session is the memory's
conversation (recall with context reads its turns together) and forget_conversation clears
it. The user is the caller's, given at construction, never an item's. docs/frameworks.md
tells the rest.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from typing import Any

from memory import Memory, MemoryStore, Scope
from memory_frameworks import conversation, needs, store_of

with needs("agents"):
    from agents.memory.session_settings import (
        SessionSettings,
        coerce_session_settings,
        resolve_session_limit,
    )

__all__ = ["AgentsSession"]

_log = logging.getLogger("memory.agents")

#: The longest item (as JSON) a store this module opens takes: tool outputs run to tens of
#: kilobytes.
LONGEST_ITEM = 1_000_000


def _check_order(session_id: str, location: object) -> None:
    """ValueError where the two look swapped, AgentsSession(path, "chat-1", ...): the
    session id an existing file, or a location with no store that looks like an id (no
    folder, no suffix), which would otherwise create a store file named so."""
    if os.path.isfile(session_id):
        raise ValueError("the session id names an existing file: AgentsSession takes the"
                         " session id first, then the store's location:"
                         " AgentsSession(session_id, location, user=...)")
    if isinstance(location, str) and "://" not in location and location != ":memory:" \
            and not os.path.exists(location) and os.sep not in location \
            and "." not in location:
        raise ValueError("the location has no store and looks like a session id:"
                         " AgentsSession takes the session id first, then the store's"
                         " location (a path with a suffix, ./name for one without, or a"
                         " postgresql:// URL): AgentsSession(session_id, location, user=...)")


class AgentsSession:
    """A session of the Agents SDK (`Runner.run(..., session=...)`) kept in a MemoryStore.

    `location`: a path or postgresql:// URL (opened with RECOMMENDED unless `options` say
    otherwise, closed by close()), or an open MemoryStore, used as it is. Every call runs
    in a worker thread, in one transaction."""

    #: Optional in the SDK's protocol; a session made here always has one.
    session_settings: SessionSettings | None

    def __init__(self, session_id: str, location: str | os.PathLike[str] | MemoryStore, *,
                 user: str, task: str = "agents",
                 session_settings: SessionSettings | dict[str, Any] | None = None,
                 **options: Any) -> None:
        if not isinstance(session_id, str):
            raise ValueError("session_id must be a str")
        _check_order(session_id, location)
        self.session_id = session_id
        self._conversation = conversation(session_id)
        self._closed = False
        self.scope = Scope(user, task)
        self.session_settings = (coerce_session_settings(session_settings)
                                 if session_settings is not None else SessionSettings())
        self._source = f"{self._conversation}/item"
        self.store, self._owned = store_of(location, options, LONGEST_ITEM)

    def _open(self) -> None:
        if self._closed:
            raise RuntimeError("AgentsSession is closed")

    def _item(self, memory: Memory) -> tuple[bool, Any]:
        """Whether the memory is an item this session wrote, and the item: of its task
        (not the user level, which other tools write), of its source, its text JSON. Any
        other memory of the conversation is skipped, and logged by id."""
        if memory["level"] == "task" and memory["source"] == self._source \
                and "key" not in memory:
            try:
                return True, json.loads(memory["text"])
            except ValueError:
                pass
        _log.warning("memory %d of the session's conversation is no item: skipped",
                     memory["id"])
        return False, None

    def _newest(self, most: int | None) -> list[tuple[Memory, Any]]:
        """The session's newest `most` items (all for None), newest first, read a page at
        a time from the newest back, past memories that are no items."""
        found: list[tuple[Memory, Any]] = []
        before = None
        while most is None or len(found) < most:
            size = None if most is None else most - len(found)
            page = self.store.memories(self.scope, conversation=self._conversation,
                                       newest_first=True, limit=size, before=before)
            for memory in page:
                own, item = self._item(memory)
                if own:
                    found.append((memory, item))
            if size is None or len(page) < size:
                break
            before = page[-1]["id"]
        return found

    async def get_items(self, limit: int | None = None) -> list[Any]:
        """The session's items, oldest first: all, or the newest `limit` (else the
        settings' limit), read from the newest back (limit=1 reads one memory)."""
        self._open()
        most = resolve_session_limit(limit, self.session_settings)
        if most is not None and most <= 0:
            return []
        found = await asyncio.to_thread(self._newest, most)
        return [item for _, item in reversed(found)]

    async def add_items(self, items: list[Any]) -> None:
        """Keep the items after the session's others, all in one transaction or none."""
        self._open()
        if not items:
            return
        rows = [{"scope": self.scope, "level": "task", "source": self._source,
                 "text": json.dumps(item, ensure_ascii=False, separators=(",", ":")),
                 "embed": False} for item in items]
        await asyncio.to_thread(self.store.remember_many, rows)

    async def pop_item(self) -> Any | None:
        """Remove the newest item and return it (None for an empty session). Two pops at
        once take two items: a pop whose item another took takes the next."""
        self._open()
        return await asyncio.to_thread(self._pop)

    def _pop(self) -> Any | None:
        # Read and forget in one worker thread: a hop to the event loop between them cost
        # a fifth of a pop.
        while newest := self._newest(1):
            memory, item = newest[0]
            if self.store.forget(self.scope, memory["id"]):
                return item
        return None

    async def clear_session(self) -> None:
        """Forget every item of the session: in one transaction where the conversation
        holds nothing else, else item by item (what is no item stays)."""
        self._open()
        cleared = await asyncio.to_thread(self._clear)
        _log.info("cleared %d items of a session", cleared)

    def _clear(self) -> int:
        listed = self.store.memories(self.scope, conversation=self._conversation)
        own = [memory["id"] for memory in listed if self._item(memory)[0]]
        if len(own) == len(listed):
            return self.store.forget_conversation(self.scope, self._conversation)
        return sum(self.store.forget(self.scope, memory_id) for memory_id in own)

    def close(self) -> None:
        """Close the MemoryStore if this session opened it; every call after is a
        RuntimeError; again: nothing."""
        if self._owned and not self._closed:
            self.store.close()
        self._closed = True
