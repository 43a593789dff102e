"""What the framework adapters cost, beside the frameworks' own stores. Prints tables;
never a test.

    pip install -e '.[test,dev]'      # LangGraph's SqliteStore and PostgresStore among them
    python3 bench/bench_frameworks.py                        # SQLite and a throw-away PostgreSQL
    python3 bench/bench_frameworks.py --sqlite-only

In the same run, on files in one folder:

- LangGraph: a namespace ("alice", "memories") holding 100 or 10,000 items (a value of 8
  to 20 words and a number), put in batches of 500; then get of a random key, put of a
  new item, put replacing an item, each the median of 200 calls, and search of the
  namespace without a query (the usual "load this user's memories"), alone and with a
  filter, the median of 50: memory_frameworks.langgraph's LangGraphStore on each engine
  against LangGraph's SqliteStore and, on the same server, its PostgresStore (no index
  either side).
- The Agents SDK: a session of 100 or 10,000 items; add_items of one item and
  get_items(limit=1), the median of 200, and pop_item (its item added back after each),
  the median of 50: AgentsSession on each engine against the SDK's SQLiteSession.
- Google ADK: a session of 100 or 1,000 events added; then add_session_to_memory of the
  session grown by one event (as a runner's callback adds it after each turn), the median
  of 20, and search_memory of 3 words, the median of 200, with how many memories it
  returns: ADKMemoryService on each engine against ADK's InMemoryMemoryService (which
  keeps no file and matches words only) and its SqliteMemoryService (a file, FTS5).
- Pydantic AI: a harness notebook of 100 or 1,000 files (8 to 20 words each) of one
  user; read of a file, a new file written, a file written over its version, the median
  of 200; list_paths of the first 100 and a search of 3 words (top 5), the median of 50:
  PydanticAIMemoryStore on each engine against the harness's SqliteMemoryStore.

    python3 bench/bench_frameworks.py --only pydantic-ai     # that table alone

- The Anthropic memory tool: a folder of 100 or 1,000 files (5 lines each); view of a
  file, create of a new one, and an edit as a model makes it (view, then str_replace of
  its first line), the median of 200; view of the folder, the median of 20:
  AnthropicMemoryTool on each engine against the SDK's BetaLocalFilesystemMemoryTool
  (a folder of files).
- LlamaIndex: its Memory (the SQLAlchemy chat store it opens, in memory) alone, and with
  a MemoryBlock holding 100 or 10,000 messages on each engine: a put of a message, the
  median of 200, and a get (the chat history with what the block recalls before the
  model), the median of 50. LlamaIndex ships no block that keeps text without a vector
  store or a model, so the row beside it is the Memory without a block.
- Microsoft Agent Framework: a session history of 100 or 1,000 messages; a turn saved (two
  messages), the median of 200, and the session's messages read, the median of 50:
  MemoryHistoryProvider on each engine against the framework's FileHistoryProvider (a
  JSON Lines file a session).
- CrewAI (in the test-crewai-strands extra's environment): a user's 100 or 10,000 records
  (8 to 20 words, a 384-number embedding, one of three scopes under /user/alice), saved in
  batches of 500; a record saved and get_record, the median of 200, and a search of the
  user's scope (top 10), the median of 50: CrewAIStorage on each engine against CrewAI's
  LanceDBStorage.
- Strands (in the same environment): 100 or 1,000 entries added; an entry added, the
  median of 200, and a search of 3 words (top 5), the median of 50: StrandsMemoryStore on
  each engine against Strands' FileMemoryStore (a markdown file an entry).

    python3 bench/bench_frameworks.py --only crewai       # with .[test-crewai-strands]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import itertools
import platform
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import timing  # noqa: E402

import memory  # noqa: E402
from tables import format_table  # noqa: E402

NAMESPACE = ("alice", "memories")
SIZES = (100, 10_000)
CALLS = 200
WORDS = [f"w{n}" for n in range(5_000)]
# CrewAI's records carry its embedder's vectors: MiniLM's size.
DIMENSIONS = 384
# The frameworks whose tables run in an environment of their own (they pin an older MCP
# SDK than the test extra's): the package each needs.
APART = {"crewai": "crewai", "strands": "strands"}


def value(chooser: random.Random, n: int) -> dict[str, Any]:
    return {"text": " ".join(chooser.choices(WORDS, k=chooser.randint(8, 20))), "n": n}


def p50_ms(call: Callable[[], object], repeat: int = CALLS) -> float:
    return timing.p50_ms(call, repeat)


async def p50_ms_async(call: Callable[[], Any], repeat: int = CALLS) -> float:
    """p50_ms of a coroutine's calls, each awaited in turn."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        await call()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def langgraph_row(name: str, store: Any, size: int) -> dict[str, Any]:
    from langgraph.store.base import PutOp
    chooser = random.Random(size)
    for start in range(0, size, 500):
        store.batch([PutOp(NAMESPACE, f"k{n}", value(chooser, n))
                     for n in range(start, min(size, start + 500))])
    keys = itertools.cycle(chooser.sample(range(size), min(size, CALLS)))
    fresh = itertools.count(size)
    got = p50_ms(lambda: store.get(NAMESPACE, f"k{next(keys)}"))
    added = p50_ms(lambda: store.put(NAMESPACE, f"k{next(fresh)}", value(chooser, 0)))
    replaced = p50_ms(lambda: store.put(NAMESPACE, f"k{next(keys)}", value(chooser, 1)))
    listed = p50_ms(lambda: store.search(NAMESPACE, limit=10), 50)
    filtered = p50_ms(lambda: store.search(NAMESPACE, filter={"n": size // 2}, limit=10), 50)
    assert store.get(NAMESPACE, f"k{size}") is not None
    return {"store": name, "items": size, "get p50 ms": got, "put new p50 ms": added,
            "put replacing p50 ms": replaced, "search, no query p50 ms": listed,
            "search, a filter p50 ms": filtered}


def langgraph_table(locations: list[tuple[str, Callable[[], str]]],
                    folder: Path) -> list[dict[str, Any]]:
    from langgraph.store.sqlite import SqliteStore

    from memory_frameworks.langgraph import LangGraphStore
    table = []
    for size in SIZES:
        for engine, location in locations:
            mine = LangGraphStore(location(), user_label=0)
            table.append(langgraph_row(f"LangGraphStore, {engine}", mine, size))
            mine.close()
        with SqliteStore.from_conn_string(str(folder / f"langgraph-{size}.db")) as theirs:
            theirs.setup()
            table.append(langgraph_row("LangGraph's SqliteStore", theirs, size))
        for engine, location in locations:
            if engine == "PostgreSQL":  # the same server, a database of its own
                from langgraph.store.postgres import PostgresStore
                with PostgresStore.from_conn_string(location()) as theirs:
                    theirs.setup()
                    table.append(langgraph_row("LangGraph's PostgresStore", theirs, size))
    return table


async def agents_row(name: str, session: Any, size: int) -> dict[str, Any]:
    for start in range(0, size, 500):
        await session.add_items([{"role": "user", "content": f"turn {n}"}
                                 for n in range(start, min(size, start + 500))])

    async def p50(make: Callable[[], Any]) -> float:
        times = []
        for _ in range(CALLS):
            start = time.perf_counter()
            await make()
            times.append(time.perf_counter() - start)
        return statistics.median(times) * 1000

    turns: Iterator[int] = itertools.count(size)
    added = await p50(lambda: session.add_items([{"role": "user",
                                                   "content": f"turn {next(turns)}"}]))
    newest = await p50(lambda: session.get_items(limit=1))
    assert (await session.get_items(limit=1))[0]["content"] == f"turn {size + CALLS - 1}"
    popped: list[float] = []
    for _ in range(CALLS // 4):  # each pop's item given back, so the session keeps its size
        began = time.perf_counter()
        item = await session.pop_item()
        popped.append(time.perf_counter() - began)
        await session.add_items([item])
    return {"session": name, "items": size, "add_items(1) p50 ms": added,
            "get_items(limit=1) p50 ms": newest,
            "pop_item p50 ms": statistics.median(popped) * 1000}


def agents_table(locations: list[tuple[str, Callable[[], str]]],
                 folder: Path) -> list[dict[str, Any]]:
    from agents import SQLiteSession

    from memory_frameworks.agents import AgentsSession
    table = []
    for size in SIZES:
        for engine, location in locations:
            mine = AgentsSession("chat", location(), user="alice")
            table.append(asyncio.run(agents_row(f"AgentsSession, {engine}", mine, size)))
            mine.close()
        theirs = SQLiteSession("chat", str(folder / f"agents-{size}.db"))
        table.append(asyncio.run(agents_row("the SDK's SQLiteSession", theirs, size)))
        theirs.close()
    return table


async def adk_row(name: str, service: Any, size: int) -> dict[str, Any]:
    from google.adk.events.event import Event
    from google.adk.sessions.session import Session
    from google.genai import types
    chooser = random.Random(size)

    def event(n: int) -> Event:
        text = " ".join(chooser.choices(WORDS, k=chooser.randint(8, 20)))
        return Event(id=f"e{n}", author="user" if n % 2 else "assistant", timestamp=n,
                     content=types.Content(role="user", parts=[types.Part(text=text)]))

    events = [event(n) for n in range(size)]
    session = Session(id="s1", app_name="bench", user_id="alice", events=events)
    await service.add_session_to_memory(session)
    times = []
    for n in range(size, size + 20):  # ADK adds the whole session after each turn
        session.events.append(event(n))
        start = time.perf_counter()
        await service.add_session_to_memory(session)
        times.append(time.perf_counter() - start)
    queries = itertools.cycle([" ".join(chooser.choices(WORDS, k=3)) for _ in range(50)])
    searched, returned = [], []
    for _ in range(CALLS):
        start = time.perf_counter()
        found = await service.search_memory(app_name="bench", user_id="alice",
                                            query=next(queries))
        searched.append(time.perf_counter() - start)
        returned.append(len(found.memories))
    return {"service": name, "events": size,
            "add_session_to_memory (one new) p50 ms": statistics.median(times) * 1000,
            "search_memory p50 ms": statistics.median(searched) * 1000,
            "memories a search returns, median": statistics.median(returned)}


def adk_table(locations: list[tuple[str, Callable[[], str]]],
              folder: Path) -> list[dict[str, Any]]:
    from google.adk.memory import SqliteMemoryService
    from google.adk.memory.in_memory_memory_service import InMemoryMemoryService

    from memory_frameworks.adk import ADKMemoryService
    table = []
    for size in (100, 1_000):
        for engine, location in locations:
            mine = ADKMemoryService(location())
            table.append(asyncio.run(adk_row(f"ADKMemoryService, {engine}", mine, size)))
            mine.close()
        table.append(asyncio.run(adk_row("ADK's InMemoryMemoryService",
                                         InMemoryMemoryService(), size)))
        table.append(asyncio.run(adk_row("ADK's SqliteMemoryService", SqliteMemoryService(
            folder / f"adk-{size}.db"), size)))
    return table


async def pydantic_ai_row(name: str, store: Any, size: int) -> dict[str, Any]:
    chooser = random.Random(size)

    def text() -> str:
        return " ".join(chooser.choices(WORDS, k=chooser.randint(8, 20)))

    versions = {}
    for n in range(size):
        written = await store.write(f"alice/main/f{n:05}.md", text(), expected_version=None)
        versions[n] = written.version

    picked = itertools.cycle(chooser.sample(range(size), min(size, 50)))

    async def replace() -> None:
        n = next(picked)
        versions[n] = (await store.write(f"alice/main/f{n:05}.md", text(),
                                         expected_version=versions[n])).version

    fresh = itertools.count(size)
    queries = itertools.cycle([" ".join(chooser.choices(WORDS, k=3)) for _ in range(20)])
    return {"store": name, "files": size,
            "read p50 ms": await p50_ms_async(lambda: store.read(
                f"alice/main/f{next(picked):05}.md", max_chars=10_000), CALLS),
            "write new p50 ms": await p50_ms_async(lambda: store.write(
                f"alice/main/g{next(fresh):05}.md", text(), expected_version=None), CALLS),
            "write over a version p50 ms": await p50_ms_async(replace, CALLS),
            "list_paths (100) p50 ms": await p50_ms_async(lambda: store.list_paths(
                "alice/main/", limit=100), 50),
            "search p50 ms": await p50_ms_async(lambda: store.search(
                "alice/main/", next(queries), limit=5, max_files=size + CALLS,
                max_chars=4_000, max_file_chars=500), 50)}


def pydantic_ai_table(locations: list[tuple[str, Callable[[], str]]],
                      folder: Path) -> list[dict[str, Any]]:
    from pydantic_ai_harness.memory import SqliteMemoryStore

    from memory_frameworks.pydantic_ai import PydanticAIMemoryStore
    table = []
    for size in (100, 1_000):
        for engine, location in locations:
            with PydanticAIMemoryStore(location(), user="alice") as mine:
                table.append(asyncio.run(pydantic_ai_row(f"PydanticAIMemoryStore, {engine}",
                                                         mine, size)))
        theirs = SqliteMemoryStore(database=folder / f"harness-{size}.db")
        table.append(asyncio.run(pydantic_ai_row("the harness's SqliteMemoryStore", theirs,
                                                 size)))
    return table


def anthropic_row(name: str, tool: Any, size: int) -> dict[str, Any]:
    chooser = random.Random(size)

    def text() -> str:
        return "\n".join(" ".join(chooser.choices(WORDS, k=chooser.randint(8, 20)))
                         for _ in range(5)) + "\n"

    for n in range(size):
        tool.call({"command": "create", "path": f"/memories/notes/f{n:05}.md",
                   "file_text": text()})
    picked = itertools.cycle(chooser.sample(range(size), min(size, 50)))
    fresh = itertools.count(size)

    def edit() -> object:
        n = next(picked)
        content = tool.call({"command": "view", "path": f"/memories/notes/f{n:05}.md"})
        first = content.split("\n")[1].split("\t", 1)[1]
        return tool.call({"command": "str_replace", "path": f"/memories/notes/f{n:05}.md",
                          "old_str": first, "new_str": first + " again"})

    return {"tool": name, "files": size,
            "view a file p50 ms": p50_ms(lambda: tool.call({
                "command": "view", "path": f"/memories/notes/f{next(picked):05}.md"})),
            "create p50 ms": p50_ms(lambda: tool.call({
                "command": "create", "path": f"/memories/new/f{next(fresh):05}.md",
                "file_text": text()})),
            "view, then str_replace p50 ms": p50_ms(edit),
            "view the folder p50 ms": p50_ms(lambda: tool.call({
                "command": "view", "path": "/memories/notes"}), 20)}


def anthropic_table(locations: list[tuple[str, Callable[[], str]]],
                    folder: Path) -> list[dict[str, Any]]:
    from anthropic.lib.tools._beta_builtin_memory_tool import BetaLocalFilesystemMemoryTool

    from memory_frameworks.anthropic import AnthropicMemoryTool
    table = []
    for size in (100, 1_000):
        for engine, location in locations:
            with AnthropicMemoryTool(location(), user="alice") as mine:
                table.append(anthropic_row(f"AnthropicMemoryTool, {engine}", mine, size))
        theirs = BetaLocalFilesystemMemoryTool(str(folder / f"anthropic-{size}"))
        table.append(anthropic_row("the SDK's BetaLocalFilesystemMemoryTool", theirs, size))
    return table


async def llama_index_row(name: str, block: Any, size: int) -> dict[str, Any]:
    from llama_index.core.llms import ChatMessage
    from llama_index.core.memory import Memory
    chooser = random.Random(size)

    def message(role: str = "user") -> Any:
        return ChatMessage(role=role, content=" ".join(
            chooser.choices(WORDS, k=chooser.randint(8, 20))))

    if block is not None:
        await block.aput([message() for _ in range(size)])
    memory = Memory.from_defaults(session_id="chat", token_limit=2_000,
                                  memory_blocks=[] if block is None else [block])

    return {"memory": name, "messages kept": size if block is not None else 0,
            "put a message p50 ms": await p50_ms_async(lambda: memory.aput(message()), CALLS),
            "get (what goes before the model) p50 ms": await p50_ms_async(memory.aget, 50)}


def llama_index_table(locations: list[tuple[str, Callable[[], str]]],
                      folder: Path) -> list[dict[str, Any]]:
    from memory_frameworks.llama_index import MemoryBlock
    table = [asyncio.run(llama_index_row("LlamaIndex's Memory alone (SQLAlchemy chat store)",
                                         None, 0))]
    for size in (100, 10_000):
        for engine, location in locations:
            with MemoryBlock(location(), user="alice") as block:
                table.append(asyncio.run(llama_index_row(f"with MemoryBlock, {engine}",
                                                         block, size)))
    return table


async def agent_framework_row(name: str, history: Any, size: int) -> dict[str, Any]:
    from agent_framework import Message
    chooser = random.Random(size)

    def message(n: int) -> Any:
        return Message("user" if n % 2 else "assistant",
                       [" ".join(chooser.choices(WORDS, k=chooser.randint(8, 20)))])

    await history.save_messages("chat", [message(n) for n in range(size)])
    fresh = itertools.count(size)

    return {"history": name, "messages": size,
            "save a turn (two messages) p50 ms": await p50_ms_async(lambda: history.save_messages(
                "chat", [message(next(fresh)), message(next(fresh))]), CALLS),
            "get_messages p50 ms": await p50_ms_async(lambda: history.get_messages("chat"), 50)}


def agent_framework_table(locations: list[tuple[str, Callable[[], str]]],
                          folder: Path) -> list[dict[str, Any]]:
    from agent_framework import FileHistoryProvider

    from memory_frameworks.agent_framework import MemoryHistoryProvider
    table = []
    for size in (100, 1_000):
        for engine, location in locations:
            mine = MemoryHistoryProvider(location(), user="alice")
            table.append(asyncio.run(agent_framework_row(f"MemoryHistoryProvider, {engine}",
                                                         mine, size)))
            mine.close()
        theirs = FileHistoryProvider(folder / f"maf-{size}")
        table.append(asyncio.run(agent_framework_row("the framework's FileHistoryProvider",
                                                     theirs, size)))
    return table


def crewai_row(name: str, storage: Any, size: int) -> dict[str, Any]:
    from crewai.memory.types import MemoryRecord
    chooser = random.Random(size)

    def record() -> Any:
        vector = [chooser.gauss(0, 1) for _ in range(DIMENSIONS)]
        return MemoryRecord(content=" ".join(chooser.choices(WORDS, k=chooser.randint(8, 20))),
                            scope=f"/user/alice/{chooser.choice(['food', 'travel', 'work'])}",
                            categories=[chooser.choice(WORDS)], embedding=vector)

    for start in range(0, size, 500):
        storage.save([record() for _ in range(min(500, size - start))])
    kept = storage.list_records("/user/alice", limit=1)[0].id
    queries = itertools.cycle([record().embedding for _ in range(50)])
    return {"storage": name, "records": size,
            "save a record p50 ms": p50_ms(lambda: storage.save([record()])),
            "get_record p50 ms": p50_ms(lambda: storage.get_record(kept)),
            "search (top 10, a scope) p50 ms": p50_ms(lambda: storage.search(
                next(queries), scope_prefix="/user/alice", limit=10), 50)}


def crewai_table(locations: list[tuple[str, Callable[[], str]]],
                 folder: Path) -> list[dict[str, Any]]:
    from crewai.memory.storage.lancedb_storage import LanceDBStorage

    from memory_frameworks.crewai import CrewAIStorage
    table = []
    for size in (100, 10_000):
        for engine, location in locations:
            with CrewAIStorage(location(), user="alice") as mine:
                table.append(crewai_row(f"CrewAIStorage, {engine}", mine, size))
        theirs = LanceDBStorage(folder / f"lancedb-{size}")
        table.append(crewai_row("CrewAI's LanceDBStorage", theirs, size))
    return table


async def strands_row(name: str, store: Any, size: int) -> dict[str, Any]:
    chooser = random.Random(size)

    def entry() -> str:
        return " ".join(chooser.choices(WORDS, k=chooser.randint(8, 20)))

    for _ in range(size):
        await store.add(entry())
    queries = itertools.cycle([" ".join(chooser.choices(WORDS, k=3)) for _ in range(50)])
    return {"store": name, "entries": size,
            "add an entry p50 ms": await p50_ms_async(lambda: store.add(entry()), CALLS),
            "search (top 5) p50 ms": await p50_ms_async(lambda: store.search(
                next(queries), {"max_search_results": 5}), 50)}


def strands_table(locations: list[tuple[str, Callable[[], str]]],
                  folder: Path) -> list[dict[str, Any]]:
    from strands.storage import LocalFileStorage
    from strands.vended_memory_stores.file_memory_store import FileMemoryStore

    from memory_frameworks.strands import StrandsMemoryStore
    table = []
    for size in (100, 1_000):
        for engine, location in locations:
            with StrandsMemoryStore(location(), user="alice") as mine:
                table.append(asyncio.run(strands_row(f"StrandsMemoryStore, {engine}",
                                                     mine, size)))
        theirs = FileMemoryStore(name="bench", storage=LocalFileStorage(
            str(folder / f"strands-{size}")))
        table.append(asyncio.run(strands_row("Strands' FileMemoryStore", theirs, size)))
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sqlite-only", action="store_true")
    parser.add_argument("--only", choices=["langgraph", "agents", "adk", "pydantic-ai",
                                           "anthropic", "llama-index", "agent-framework",
                                           "crewai", "strands"])
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="memory-bench-frameworks-"))
    files = (str(folder / f"{n}.db") for n in itertools.count())
    engines: list[tuple[str, Callable[[], str]]] = [("SQLite", lambda: next(files))]
    server = None
    if not args.sqlite_only:
        from pg_server import bench_server
        server = bench_server()
        engines.append(("PostgreSQL", server.new_database))
    print(f"memory.py {memory.__version__}, Python {platform.python_version()}")
    try:
        tables = {"langgraph": ("LangGraph", langgraph_table),
                  "agents": ("The Agents SDK", agents_table),
                  "adk": ("Google ADK", adk_table),
                  "pydantic-ai": ("Pydantic AI", pydantic_ai_table),
                  "anthropic": ("The Anthropic memory tool", anthropic_table),
                  "llama-index": ("LlamaIndex", llama_index_table),
                  "agent-framework": ("Microsoft Agent Framework", agent_framework_table),
                  "crewai": ("CrewAI", crewai_table), "strands": ("Strands", strands_table)}
        for name, (title, made) in tables.items():
            if args.only not in (None, name):
                continue
            if name in APART and importlib.util.find_spec(APART[name]) is None:
                print(f"\n{title}: not installed here (the test-crewai-strands extra's"
                      " environment has it)")
                continue
            print(f"\n{title}\n\n{format_table(made(engines, folder))}")
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
