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
import logging
import os
import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, cast

from memory import MAX_LIMIT, MAX_QUERY, Memory, MemoryStore, Recalled, Scope
from memory_frameworks import (
    conversation,
    identifier,
    needs,
    recall_pages,
    record_key,
    store_of,
)

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
#: The conversation of the memories add_memory is given explicitly.
EXPLICIT = "__memory__"
# Every kept event's metadata holds it: recall's filter of the service's memories.
_MARK = {"adk.v": 1}
# A session's newest memories, read before an add to tell its new events.
_NEWEST = 32
# Events looked for by id in one filter ($in takes at most 100 values).
_MOST_ASKED = 100


def _text(event: Event) -> str | None:
    # What a person or a model said: thoughts, calls, responses and files are not kept.
    if event.partial or event.content is None or not event.content.parts:
        return None
    said = "\n".join(part.text for part in event.content.parts if part.text and not part.thought)
    return said if said.strip() else None


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
        self.store, self._owned = store_of(location, options, LONGEST_TEXT)

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
        conversation NO_SESSION), in one transaction. custom_metadata is not kept (an
        event's metadata is its own: add_memory keeps it for explicit memories)."""
        await self._add(self.scope(app_name, user_id), session_id or NO_SESSION, events)

    async def _add(self, scope: Scope, session_id: str, events: Iterable[Event]) -> None:
        if not isinstance(session_id, str):
            raise ValueError("the session id must be a str")
        given = list(events)
        rows = await asyncio.to_thread(self._unkept, scope, session_id, given)
        if rows:
            await asyncio.to_thread(self.store.remember_many, rows)
        _log.info("kept %d new events of %d", len(rows), len(given))

    def _unkept(self, scope: Scope, session_id: str, events: list[Event]
                ) -> list[dict[str, Any]]:
        """The rows of the events with text the session does not keep yet, oldest first,
        each event once. A session only grows (ADK adds it again after each turn): the
        events after the newest one among its newest memories are its new ones; where
        none of those is one of the events, each of the events is looked for by its id."""
        talk = conversation(session_id)
        newest = self.store.memories(scope, conversation=talk, newest_first=True,
                                     limit=_NEWEST)
        known = _keys(newest)
        unkept: dict[str, tuple[Event, str]] = {}
        for event in reversed(events):
            if (text := _text(event)) is None:
                continue
            key = record_key(session_id, event.id)
            if key in known:
                break
            unkept.pop(key, None)  # an event given twice takes its first place
            unkept[key] = (event, text)
        if len(newest) == _NEWEST and unkept:  # the newest memories are not all of them
            ids = sorted({event.id for event, _ in unkept.values()})
            for start in range(0, len(ids), _MOST_ASKED):
                known |= _keys(self.store.memories(scope, where={
                    **_MARK, "adk.session": session_id,
                    "adk.event": {"$in": ids[start:start + _MOST_ASKED]}}))
        return [{"scope": scope, "level": "task", "text": text, "source": f"{talk}/event",
                 "key": key, "metadata": {"adk": {
                     "v": 1, "session": session_id, "event": event.id, "author": event.author,
                     "role": event.content.role if event.content is not None else None,
                     "at": _seconds(event.timestamp)}}}
                for key, (event, text) in reversed(unkept.items()) if key not in known]

    async def add_memory(self, *, app_name: str, user_id: str,
                         memories: Sequence[MemoryEntry],
                         custom_metadata: Mapping[str, object] | None = None) -> None:
        """Keep explicit memories, each one memory of the conversation EXPLICIT (keyed by
        its id where it has one, so that giving it again replaces it), with its author,
        role and custom_metadata (the call's under the entry's own) as its metadata; all
        in one transaction. A search gives them back as they were given."""
        scope = self.scope(app_name, user_id)
        rows = []
        for entry in memories:
            text = "\n".join(part.text for part in (entry.content.parts or []) if part.text)
            if not text.strip():
                raise ValueError("a memory to add needs text in its content")
            event = entry.id or uuid.uuid4().hex
            custom = {**(custom_metadata or {}), **(entry.custom_metadata or {})}
            rows.append({"scope": scope, "level": "task", "text": text,
                         "source": f"{EXPLICIT}/event", "key": record_key(EXPLICIT, event),
                         "metadata": {"adk": {"v": 1, "session": EXPLICIT, "event": event,
                                              "author": entry.author,
                                              "role": entry.content.role, "at": None,
                                              "timestamp": entry.timestamp,
                                              "custom": custom}}})
        if rows:
            await asyncio.to_thread(self.store.remember_many, rows)
        _log.info("kept %d explicit memories", len(rows))

    async def search_memory(self, *, app_name: str, user_id: str,
                            query: str) -> SearchMemoryResponse:
        """The user's memories of the app that match `query` best, best first, by the
        store's recall (its first 20,000 characters); a blank query finds nothing."""
        scope = self.scope(app_name, user_id)
        if not isinstance(query, str):
            raise ValueError("query must be a str")
        if not query.strip():
            return SearchMemoryResponse()
        found = await asyncio.to_thread(self._found, scope, query[:MAX_QUERY])
        return SearchMemoryResponse(memories=[_entry(memory, adk) for memory, adk in found])

    def _found(self, scope: Scope, query: str) -> list[tuple[Recalled, dict[str, Any]]]:
        """The best `limit` of the scope's memories this service kept for `query`: pages of
        recall, past memories that are no event of its (_own), and past those that match
        nothing of the query themselves (a turn's neighbours lend it score, which ranks
        it, but are not returned for it alone, as ADK's own services return what
        matches)."""
        found: list[tuple[Recalled, dict[str, Any]]] = []
        pages = recall_pages(self.store, scope, query, where=_MARK, explain=True)
        while len(found) < self.limit and (page := next(pages, None)) is not None:
            found += [(_unexplained(memory), adk) for memory in page
                      if _matches(memory) and (adk := _own(memory)) is not None
                      ][:self.limit - len(found)]
        return found

    async def delete_memory(self, *, app_name: str, user_id: str,
                            memory_id: str | None = None) -> None:
        """Forget the memory a search returned with this id; another user's or app's id,
        or one that is not a search's, forgets nothing."""
        scope = self.scope(app_name, user_id)
        if isinstance(memory_id, str) and memory_id.isascii() and memory_id.isdigit() \
                and len(memory_id) <= 18:
            await asyncio.to_thread(self._forget, scope, int(memory_id))

    def _forget(self, scope: Scope, memory_id: int) -> None:
        found = self.store.get(scope, memory_id)
        if found is not None and _own(found) is not None:  # another tool's stays
            self.store.forget(scope, memory_id)

    def close(self) -> None:
        """Close the MemoryStore if this service opened it; again: nothing."""
        if self._owned:
            self.store.close()


def _keys(memories: list[Memory]) -> set[str]:
    """The keys of the events among these memories."""
    return {str(memory.get("key")) for memory in memories if _own(memory) is not None}


def _matches(memory: Recalled) -> bool:
    """Whether a recalled memory matches the query itself: by a word, or by meaning."""
    why: Mapping[str, Any] = memory.get("why") or {}
    return bool(why.get("matched")) or "meaning" in why


def _unexplained(memory: Recalled) -> Recalled:
    return cast(Recalled, {name: value for name, value in memory.items() if name != "why"})


def _seconds(timestamp: object) -> float | None:
    """An event's time, where it is one a datetime holds (an event may say 1e20)."""
    if type(timestamp) not in (int, float):
        return None
    try:
        datetime.fromtimestamp(timestamp)  # type: ignore[arg-type]
    except (OverflowError, ValueError, OSError):
        return None
    return float(timestamp)  # type: ignore[arg-type]


def _own(memory: Memory | Recalled) -> dict[str, Any] | None:
    """The event record of a memory this service kept: of the app's task (never the user
    level, which other tools write), its source an event's, its metadata's fields of
    their types and its key the one they give; None for any other memory, which is
    skipped and logged by id."""
    meta = memory.get("metadata")
    adk = meta.get("adk") if isinstance(meta, dict) else None
    if memory["level"] == "task" and isinstance(adk, dict) and adk.get("v") == 1 \
            and isinstance(session := adk.get("session"), str) \
            and isinstance(event := adk.get("event"), str) \
            and memory.get("key") == record_key(session, event) \
            and memory["source"] == f"{conversation(session)}/event" \
            and all(adk.get(name) is None or isinstance(adk[name], str)
                    for name in ("author", "role", "timestamp")) \
            and isinstance(adk.get("custom", {}), dict) \
            and (adk.get("at") is None or _seconds(adk["at"]) is not None):
        return adk
    _log.warning("memory %d of the app's task is no event of this service's: skipped",
                 memory["id"])
    return None


def _entry(memory: Recalled, adk: dict[str, Any]) -> MemoryEntry:
    at = adk.get("at")
    return MemoryEntry(
        id=str(memory["id"]),
        content=types.Content(role=adk.get("role"), parts=[types.Part(text=memory["text"])]),
        author=adk.get("author"),
        # As ADK's own services give it: the event's time, local and ISO 8601; an explicit
        # memory's as it was given.
        timestamp=datetime.fromtimestamp(at).isoformat() if isinstance(at, int | float)
        else adk.get("timestamp"),
        custom_metadata=adk["custom"] if adk["session"] == EXPLICIT and "custom" in adk
        else {"session_id": adk["session"]})
