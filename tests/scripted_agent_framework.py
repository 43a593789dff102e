"""A chat client for Microsoft Agent Framework's Agent that answers "ok" and keeps what
each call was given: a real agent with no model and no network. Not a test module; the
tests import it deferred (tests/deferred.py)."""

from __future__ import annotations

from collections.abc import Awaitable, Mapping, Sequence
from typing import Any

from agent_framework import BaseChatClient, ChatResponse, Message


class Scripted(BaseChatClient):
    """A chat client that answers "ok" and keeps what each call was given."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[list[tuple[str, str]], str]] = []

    def _inner_get_response(self, *, messages: Sequence[Message], stream: bool,
                            options: Mapping[str, Any], **kwargs: Any) -> Awaitable[Any]:
        async def reply() -> ChatResponse:
            self.seen.append(([(str(m.role), m.text) for m in messages],
                              str(options.get("instructions"))))
            return ChatResponse(messages=[Message("assistant", ["ok"])])
        return reply()
