"""Microsoft Agent Framework's context and history providers over memory.py.

    from agent_framework import Agent
    from memory_frameworks.agent_framework import MemoryContextProvider, MemoryHistoryProvider
    agent = Agent(client, "Be brief.", context_providers=[
        MemoryHistoryProvider("memory.db", user="alice"),     # or a postgresql:// URL
        MemoryContextProvider("memory.db", user="alice")])

MemoryHistoryProvider keeps a session's messages, each one memory of the user's task `task`
(default "agent-framework"), at task level: its text the message as the framework's own
dict (JSON), its source "<session>/message", its metadata the provider's mark; the next
run of the session reads them back in order. MemoryContextProvider keeps what the user
says as memories of the same task and, before each run, gives the model the ones that best
match the run's input as instructions, across sessions. The user is the constructor's.
docs/frameworks.md tells the rest.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from typing import Any

from memory import MAX_QUERY, MemoryStore, Scope
from memory_frameworks import OnStore, conversation, marked, needs, store_of

with needs("agent-framework"):
    import anyio.to_thread
    from agent_framework import (
        AgentSession,
        ContextProvider,
        HistoryProvider,
        Message,
        SessionContext,
    )

__all__ = ["MemoryContextProvider", "MemoryHistoryProvider"]

_log = logging.getLogger("memory.agent_framework")

#: The longest message a store this module opens takes.
LONGEST_MESSAGE = 1_000_000
_MARK = "agent_framework"
_HISTORY = "message"
_SAID = "said"
# A run the framework gives no session id: its messages are this conversation's.
_NO_SESSION = "agent-framework"
_HISTORY_OPTIONS = ("load_messages", "store_inputs", "store_context_messages",
                    "store_context_from", "store_outputs")


def _talk(session_id: str | None) -> str:
    return _NO_SESSION if session_id is None else conversation(session_id)


class _OnStore(OnStore):
    """What both providers stand on: the user's task, and the store it is kept in."""

    def _open(self, location: str | os.PathLike[str] | MemoryStore, user: str, task: str,
              options: dict[str, Any]) -> None:
        self.scope = Scope(user, task)
        self.store, self._owned = store_of(location, options, LONGEST_MESSAGE)


class MemoryHistoryProvider(_OnStore, HistoryProvider):
    """A session's messages kept in a MemoryStore (the framework's HistoryProvider).

    `location`: a path or postgresql:// URL (opened with RECOMMENDED unless `options` say
    otherwise, closed by close()), or an open MemoryStore, used as it is. HistoryProvider's
    own flags (load_messages, store_inputs, ...) go with the options."""

    def __init__(self, location: str | os.PathLike[str] | MemoryStore, *, user: str,
                 task: str = "agent-framework", source_id: str = "memory-history",
                 **options: Any) -> None:
        flags = {name: options.pop(name) for name in _HISTORY_OPTIONS if name in options}
        super().__init__(source_id, **flags)
        self._open(location, user, task, options)

    async def get_messages(self, session_id: str | None, *,
                           state: dict[str, Any] | None = None, **kwargs: Any) -> list[Message]:
        """The session's messages, oldest first."""
        def read() -> list[Message]:  # in the worker thread, parsing too
            source = f"{_talk(session_id)}/message"
            return [Message.from_dict(json.loads(memory["text"]))
                    for memory in self.store.memories(self.scope, conversation=_talk(session_id))
                    if memory["source"] == source and marked(memory, _MARK, _HISTORY)]
        return await anyio.to_thread.run_sync(read)

    async def save_messages(self, session_id: str | None, messages: Sequence[Message], *,
                            state: dict[str, Any] | None = None, **kwargs: Any) -> None:
        """Keep the messages, in one transaction."""
        items = [{"scope": self.scope, "level": "task", "text": json.dumps(
            message.to_dict(), ensure_ascii=False, separators=(",", ":")),
            "source": f"{_talk(session_id)}/message", "metadata": {_MARK: _HISTORY},
            "embed": False} for message in messages]
        if items:
            await anyio.to_thread.run_sync(self.store.remember_many, items)
            _log.debug("kept %d messages of user %s", len(items), self.scope.user)


class MemoryContextProvider(_OnStore, ContextProvider):
    """What the user said, kept in a MemoryStore and given back before each run: the
    `top_k` (1 to 10) memories that best match the run's input, as instructions.

    `location`: as MemoryHistoryProvider's."""

    def __init__(self, location: str | os.PathLike[str] | MemoryStore, *, user: str,
                 task: str = "agent-framework", source_id: str = "memory", top_k: int = 3,
                 **options: Any) -> None:
        super().__init__(source_id)
        if not isinstance(top_k, int) or not 1 <= top_k <= 10:
            raise ValueError("top_k is an int from 1 to 10")
        self.top_k = top_k
        self._open(location, user, task, options)

    async def before_run(self, *, agent: Any, session: AgentSession,
                         context: SessionContext, state: dict[str, Any]) -> None:
        query = " ".join(message.text for message in context.input_messages)[-MAX_QUERY:]
        if not query.strip():
            return
        # By the mark, a term of the metadata index; the level told apart here.
        found = await anyio.to_thread.run_sync(lambda: self.store.recall(
            self.scope, query, 2 * self.top_k, where={_MARK: _SAID}))
        kept = [memory["text"] for memory in found
                if marked(memory, _MARK, _SAID)][:self.top_k]
        if kept:
            context.extend_instructions(self.source_id, "What this user said before, which"
                                        " may bear on the request:\n"
                                        + "\n".join(f"- {text}" for text in kept))

    async def after_run(self, *, agent: Any, session: AgentSession,
                        context: SessionContext, state: dict[str, Any]) -> None:
        """Keep what the user said in the run (its input messages with text)."""
        items = [{"scope": self.scope, "level": "task", "text": message.text.strip(),
                  "source": f"{_talk(context.session_id)}/said", "metadata": {_MARK: _SAID}}
                 for message in context.input_messages
                 if message.role == "user" and message.text.strip()]
        if items:
            await anyio.to_thread.run_sync(lambda: self.store.remember_many(items,
                                                                           dedupe=True))
