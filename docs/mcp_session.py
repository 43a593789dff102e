"""A short session with `memory mcp`, as an assistant's MCP client has it: the server is
started over stdio by the SDK's own client, on a new store in a temporary folder, and each
call and the text the model reads back are printed. Needs the `mcp` extra.

    python3 docs/mcp_session.py
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from typing import Any

from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client


async def session(store: str) -> None:
    server = StdioServerParameters(command=sys.executable,
                                   args=["-m", "memory", "mcp", store, "--user", "alice"])
    async with stdio_client(server) as (reading, writing):
        async with ClientSession(reading, writing) as client:
            await client.initialize()
            tools = await client.list_tools()
            print("tools:", ", ".join(tool.name for tool in tools.tools))

            async def call(tool: str, **arguments: Any) -> Any:
                print(f"> {tool} {json.dumps(arguments)}")
                result = await client.call_tool(tool, arguments)
                for content in result.content:
                    if content.type == "text":
                        prefix = "error: " if result.is_error else ""
                        print("  " + (prefix + content.text).replace("\n", "\n  "))
                return result.structured_content

            await call("remember", text="Alice is vegetarian.")
            await call("remember", text="alice is  VEGETARIAN.")
            await call("remember", text="The Lisbon hotel is booked for May.", level="task")
            await call("recall", query="vegetarian places near the Lisbon hotel")
            await call("revise", memory_id=1, text="Alice eats fish now.")
            await call("list_memories")
            await call("forget", memory_id=2, user="bob")
            await call("forget", memory_id=2)


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as folder:
        asyncio.run(session(f"{folder}/assistant.db"))
