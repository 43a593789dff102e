"""An agent for Google ADK's Runner that needs no model: it answers with the best memory
the user's words find. Not a test module; the tests import it deferred (tests/deferred.py)."""

from __future__ import annotations

from collections.abc import AsyncGenerator

from google.adk.agents.base_agent import BaseAgent
from google.adk.agents.invocation_context import InvocationContext
from google.adk.events.event import Event
from google.genai import types


class Recaller(BaseAgent):
    """An agent with no model: it answers with the best memory the user's words find."""

    async def _run_async_impl(self, ctx: InvocationContext) -> AsyncGenerator[Event, None]:
        assert ctx.memory_service is not None and ctx.user_content is not None
        asked = "".join(part.text or "" for part in ctx.user_content.parts or [])
        found = await ctx.memory_service.search_memory(
            app_name=ctx.session.app_name, user_id=ctx.session.user_id, query=asked)
        best = found.memories[0].content.parts or [] if found.memories else []
        said = best[0].text or "" if best else "nothing"
        yield Event(author=self.name, invocation_id=ctx.invocation_id,
                    content=types.Content(role="model", parts=[types.Part(text=said)]))
