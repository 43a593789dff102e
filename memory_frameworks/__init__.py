"""memory.py under the agent frameworks: one module a framework, each with its extra.

    from memory_frameworks.langgraph import LangGraphStore     # pip install '.[langgraph]'
    from memory_frameworks.agents import AgentsSession          # pip install '.[agents]'
    from memory_frameworks.adk import ADKMemoryService          # pip install '.[adk]'

Each stands on memory.py, which names none of them. docs/frameworks.md tells the rest.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


@contextlib.contextmanager
def needs(extra: str) -> Iterator[None]:
    """The framework imports of the module of `extra`: where a package is missing, the
    error names the pip line that brings it."""
    try:
        yield
    except ModuleNotFoundError as exc:
        raise ModuleNotFoundError(
            f"memory_frameworks.{extra} needs the {extra} extra (missing: {exc.name}):"
            f" python3 -m pip install 'memory-store[{extra}]', or from the project's folder"
            f" python3 -m pip install '.[{extra}]'", name=exc.name) from exc
