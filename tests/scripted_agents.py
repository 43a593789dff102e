"""A model for the Agents SDK's Runner that answers each call with its next reply: a real
run with no network. Importing it turns the SDK's tracing off (it would send to a server).
Not a test module; the tests import it deferred (tests/deferred.py)."""

from __future__ import annotations

from typing import Any

from agents import set_tracing_disabled
from agents.items import ModelResponse
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import ResponseOutputMessage, ResponseOutputText

set_tracing_disabled(True)


class Scripted(Model):
    """A model that answers each call with its next reply, keeping what it was given."""

    def __init__(self, *replies: str) -> None:
        self.replies = list(replies)
        self.inputs: list[Any] = []

    async def get_response(self, system_instructions: Any, input: Any, model_settings: Any,
                           tools: Any, output_schema: Any, handoffs: Any, tracing: Any, *,
                           previous_response_id: Any, conversation_id: Any, prompt: Any,
                           **more: Any) -> ModelResponse:
        self.inputs.append(input)
        text = self.replies.pop(0)
        message = ResponseOutputMessage(
            id=f"msg-{len(self.inputs)}", type="message", role="assistant",
            status="completed",
            content=[ResponseOutputText(type="output_text", text=text, annotations=[])])
        return ModelResponse(output=[message], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError
