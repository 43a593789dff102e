"""Google ADK's memory service (`google.adk.memory.BaseMemoryService`) over memory.py.

    from memory_frameworks.adk import ADKMemoryService
    memory_service = ADKMemoryService("memory.db")              # or a postgresql:// URL
    runner = Runner(agent=agent, app_name="travel", session_service=sessions,
                    memory_service=memory_service)

Each event with text is one memory of the session's user and of the task its app names:
its text the event's text parts, its source "<session_id>/event", so that a session is the
memory's conversation (recall with context scores a turn with its neighbours), its key
the session and event ids, so that adding a session again adds only its new events. A name
that is not already one of the store's identifiers (lower case, digits and "-", at most 64)
becomes a digest of itself: "user_1" and "User-1" stay two users. docs/frameworks.md tells
the rest.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from memory import MAX_LIMIT, MAX_QUERY, RECOMMENDED, MemoryStore, Recalled, Scope
from memory_frameworks import identifier, needs

with needs("adk"):
    from google.adk.events.event import Event
    from google.adk.memory.base_memory_service import BaseMemoryService, SearchMemoryResponse
    from google.adk.memory.memory_entry import MemoryEntry
    from google.adk.sessions.session import Session
    from google.genai import types

__all__ = ["ADKMemoryService"]

_log = logging.getLogger("memory.adk")

#: The longest event text a store this module opens takes.
LONGEST_TEXT = 1_000_000
#: The conversation of events added without a session id, as ADK's own service names it.
NO_SESSION = "__unknown_session_id__"
_LONGEST_KEY = 512


def _text(event: Event) -> str | None:
    # What a person or a model said: thoughts, calls, responses and files are not kept.
    if event.partial or event.content is None or not event.content.parts:
        return None
    said = "\n".join(part.text for part in event.content.parts if part.text and not part.thought)
    return said if said.strip() else None


def _key(session_id: str, event_id: str) -> str:
    named = json.dumps([session_id, event_id], ensure_ascii=False, separators=(",", ":"))
    if len(named) <= _LONGEST_KEY and named.isprintable():
        return named
    return "sha256:" + hashlib.sha256(named.encode()).hexdigest()


class ADKMemoryService(BaseMemoryService):
    """ADK's memory service (`Runner(..., memory_service=...)`) kept in a MemoryStore.

    `location`: a path or postgresql:// URL (opened with RECOMMENDED unless `options` say
    otherwise, closed by close()), or an open MemoryStore, used as it is. `limit`: the
    memories a search returns, at most 20. Every call runs in a worker thread."""

    def __init__(self, location: str | os.PathLike[str] | MemoryStore, *, limit: int = 10,
                 **options: Any) -> None:
        if type(limit) is not int or not 0 < limit <= MAX_LIMIT:
            raise ValueError(f"limit must be an int from 1 to {MAX_LIMIT}")
        self.limit = limit
        if isinstance(location, MemoryStore):
            if options:
                raise ValueError("options open a store: give a path, not an open store")
            self.store, self._owned = location, False
        else:
            settings: dict[str, Any] = {**RECOMMENDED, "max_text": LONGEST_TEXT, **options}
            self.store, self._owned = MemoryStore(location, **settings), True

    @staticmethod
    def scope(app_name: str, user_id: str) -> Scope:
        """Where the memories of a user of an app live: the user's, the app's task."""
        return Scope(identifier(user_id, "user_id"), identifier(app_name, "app_name"))

    async def add_session_to_memory(self, session: Session) -> None:
        """Keep the session's events not yet kept (ADK adds a growing session again and
        again), in one transaction."""
        await self._add(self.scope(session.app_name, session.user_id), session.id,
                        session.events)

    async def add_events_to_memory(self, *, app_name: str, user_id: str,
                                   events: Sequence[Event], session_id: str | None = None,
                                   custom_metadata: Mapping[str, object] | None = None
                                   ) -> None:
        """Keep the events not yet kept in the session (or, without one, in the
        conversation NO_SESSION), in one transaction. custom_metadata is not kept."""
        await self._add(self.scope(app_name, user_id), session_id or NO_SESSION, events)

    async def _add(self, scope: Scope, session_id: str, events: Iterable[Event]) -> None:
        if not isinstance(session_id, str) or not session_id:
            raise ValueError("the session id must be a non-empty str")
        fresh = [(event, text) for event in events if (text := _text(event)) is not None]
        if not fresh:
            return
        kept = await asyncio.to_thread(self.store.memories, scope, conversation=session_id)
        known = {memory["key"] for memory in kept if memory.get("key")}
        rows = []
        for event, text in fresh:
            key = _key(session_id, event.id)
            if key in known:
                continue
            known.add(key)
            role = event.content.role if event.content is not None else None
            rows.append({"scope": scope, "level": "task", "text": text,
                         "source": f"{session_id}/event", "key": key,
                         "metadata": {"adk": {"v": 1, "session": session_id, "event": event.id,
                                              "author": event.author, "role": role,
                                              "at": event.timestamp}}})
        if rows:
            await asyncio.to_thread(self.store.remember_many, rows)
        _log.info("kept %d new events of %d", len(rows), len(fresh))

    async def search_memory(self, *, app_name: str, user_id: str,
                            query: str) -> SearchMemoryResponse:
        """The user's memories of the app that match `query` best, best first, by the
        store's recall (its first 20,000 characters); a blank query finds nothing."""
        scope = self.scope(app_name, user_id)
        if not isinstance(query, str):
            raise ValueError("query must be a str")
        if not query.strip():
            return SearchMemoryResponse()
        found = await asyncio.to_thread(self.store.recall, scope, query[:MAX_QUERY],
                                        self.limit)
        return SearchMemoryResponse(memories=[_entry(memory) for memory in found])

    async def delete_memory(self, *, app_name: str, user_id: str,
                            memory_id: str | None = None) -> None:
        """Forget the memory a search returned with this id; another user's or app's id,
        or one that is not a search's, forgets nothing."""
        scope = self.scope(app_name, user_id)
        if isinstance(memory_id, str) and memory_id.isascii() and memory_id.isdigit() \
                and len(memory_id) <= 18:
            await asyncio.to_thread(self.store.forget, scope, int(memory_id))

    def close(self) -> None:
        """Close the MemoryStore if this service opened it; again: nothing."""
        if self._owned:
            self.store.close()


def _entry(memory: Recalled) -> MemoryEntry:
    adk: dict[str, Any] = (memory.get("metadata") or {}).get("adk") or {}
    at = adk.get("at")
    return MemoryEntry(
        id=str(memory["id"]),
        content=types.Content(role=adk.get("role"), parts=[types.Part(text=memory["text"])]),
        author=adk.get("author"),
        # As ADK's own services give it: the event's time, local and ISO 8601.
        timestamp=datetime.fromtimestamp(at).isoformat() if isinstance(at, int | float)
        else None,
        custom_metadata={"session_id": adk["session"]} if "session" in adk else {})
