"""memory.py under the agent frameworks: one module a framework, each with its extra.

    from memory_frameworks.langgraph import LangGraphStore     # pip install '.[langgraph]'
    from memory_frameworks.agents import AgentsSession          # pip install '.[agents]'
    from memory_frameworks.adk import ADKMemoryService          # pip install '.[adk]'

Each stands on memory.py, which names none of them. docs/frameworks.md tells the rest.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Iterator
from typing import Any, Self

from memory import IDENTIFIER, MAX_LIMIT, RECOMMENDED, Memory, MemoryStore, Recalled, Scope

# The prefix of a name given as its digest: a name that is an identifier but begins so is
# hashed too, so no one chooses a name that equals the digest of another's.
_DIGESTED = "h-"


def store_of(location: str | os.PathLike[str] | MemoryStore, options: dict[str, Any],
             longest: int) -> tuple[MemoryStore, bool]:
    """An adapter's store, and whether the adapter opened it (and so closes it): an open
    MemoryStore as it is (no `options` then: they open one), else the store at `location`
    opened with RECOMMENDED, texts of up to `longest` characters, and `options` over them."""
    if isinstance(location, MemoryStore):
        if options:
            raise ValueError("options open a store: give a path, not an open store")
        return location, False
    return MemoryStore(location, **{**RECOMMENDED, "max_text": longest, **options}), True


class OnStore:
    """An adapter over a store (store_of's): it closes the store where it opened it, at
    close() or at the end of the with block it is entered in."""

    store: MemoryStore
    _owned: bool

    def close(self) -> None:
        """Close the store, if this adapter opened it."""
        if self._owned:
            self.store.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def identifier(name: str, what: str) -> str:
    """The store's identifier (a user or task id) for a name a framework gives: the name
    itself where it is one (and does not begin "h-"), else "h-" and 62 hex digits of its
    SHA-256, so that two names ("user_1", "User-1") never share one."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"{what} must be a non-empty str")
    if IDENTIFIER.fullmatch(name) and not name.startswith(_DIGESTED):
        return name
    return _DIGESTED + hashlib.sha256(name.encode()).hexdigest()[:62]


def marked(found: Memory | Recalled | None, mark: str, value: str) -> bool:
    """Whether a memory is an adapter's own: of its task (never the user level, which
    `memory mcp` and other tools write), its metadata's `mark` holding the adapter's
    `value`; another tool's memory never is, whatever its key."""
    return found is not None and found["level"] == "task" and (
        found.get("metadata") or {}).get(mark) == value


# recall pages no deeper than this.
_DEEPEST_OFFSET = 10_000


def recall_pages(store: MemoryStore, scope: Scope, query: str,
                 **options: Any) -> Iterator[list[Recalled]]:
    """recall's ranking a page (MAX_LIMIT) at a time, each asked for as it is taken, as deep
    as recall pages: the pages concatenate to the ranking; a short one is the last."""
    for offset in range(0, _DEEPEST_OFFSET + 1, MAX_LIMIT):
        page = store.recall(scope, query, MAX_LIMIT, offset=offset, **options)
        yield page
        if len(page) < MAX_LIMIT:
            return


def recalled(store: MemoryStore, scope: Scope, query: str, limit: int,
             **options: Any) -> list[Recalled]:
    """recall's best `limit`, more than one call gives (recall_pages)."""
    found: list[Recalled] = []
    pages = recall_pages(store, scope, query, **options)
    while len(found) < limit and (page := next(pages, None)) is not None:
        found += page
    return found[:limit]


# A record's key, as the store keys the memory that holds it: at most this long.
_LONGEST_KEY = 512


def record_key(*names: str) -> str:
    """The store's key for a framework's record named by `names` (a namespace and a key,
    a session and an event): their JSON where it is printable and short enough, else its
    digest."""
    named = json.dumps(names, ensure_ascii=False, separators=(",", ":"))
    if len(named) <= _LONGEST_KEY and named.isprintable():
        return named
    return "sha256:" + hashlib.sha256(named.encode()).hexdigest()


# A framework's session id stands for itself as a conversation where it can: printable,
# not blank, no space at either end, no "/" at its end (a conversation is a source up to
# its last "/"), at most this long, and not beginning as a digest does; any other is its
# digest.
_LONGEST_PLAIN_ID = 256
_CONVERSATION_DIGEST = "sha256:"


def conversation(session_id: str) -> str:
    """The store's conversation for a framework's session id: the id, or its digest."""
    plain = (session_id.isprintable() and session_id.strip() == session_id != ""
             and not session_id.endswith("/") and len(session_id) <= _LONGEST_PLAIN_ID
             and not session_id.startswith(_CONVERSATION_DIGEST))
    return session_id if plain else (_CONVERSATION_DIGEST
                                     + hashlib.sha256(session_id.encode()).hexdigest())


@contextlib.contextmanager
def needs(extra: str) -> Iterator[None]:
    """The framework imports of the module of `extra`: where a package is missing, the
    error names the pip line that brings it."""
    try:
        yield
    except ModuleNotFoundError as exc:
        raise ModuleNotFoundError(
            f"memory_frameworks.{extra.replace('-', '_')} needs the {extra} extra (missing:"
            f" {exc.name}):"
            f" python3 -m pip install 'memory-store[{extra}]', or from the project's folder"
            f" python3 -m pip install '.[{extra}]'", name=exc.name) from exc
