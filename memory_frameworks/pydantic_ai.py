"""The Pydantic AI harness's MemoryStore over memory.py.

    from pydantic_ai_harness.memory import Memory
    from memory_frameworks.pydantic_ai import PydanticAIMemoryStore
    store = PydanticAIMemoryStore("memory.db", user="alice")   # or a postgresql:// URL
    agent = Agent(model, capabilities=[Memory(store=store)])

Each file of the harness's notebook is one memory of the user's task `task` (default
"pydantic-ai"), at task level: its key the file's path, its text the file's content, its
metadata the adapter's mark, the operation that wrote it and what the write recorded
(MetadataMemoryStore). A file's version is its memory's id, which the store never gives
twice, so a version never comes back after a delete; a write over a version is a revision
of that memory by id, in one transaction, and an operation's receipt is the store's own,
under the harness's fingerprint. The user is the constructor's: one user's store (`user=`),
or the path segment that holds it (`user_segment=`, 0 where the harness's namespace, which
the application derives from its own user, comes first). docs/frameworks.md tells the rest.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
from collections.abc import Mapping
from typing import Any

from memory import (
    MAX_LIMIT,
    Memory,
    MemoryStore,
    OperationConflict,
    Recalled,
    Scope,
    VersionConflict,
)
from memory_frameworks import OnStore, identifier, marked, needs, store_of

with needs("pydantic-ai"):
    from anyio.to_thread import run_sync
    from pydantic_ai_harness.memory import (
        MemoryConflictError,
        MemoryFile,
        MemoryMutation,
        MemoryOperation,
        MemoryOperationConflictError,
        MemorySearchMatch,
        MemorySearchResult,
    )

__all__ = ["PydanticAIMemoryStore"]

_log = logging.getLogger("memory.pydantic_ai")

#: The longest file a store this module opens takes.
LONGEST_FILE = 1_000_000
# What marks a memory as a file of the harness's notebook: only those are its files.
_MARK = "pydantic_ai"
_FILE = "memory-file"
_SOURCE = "pydantic-ai"
# A path's segment, as the harness's own stores take them (its paths name files, and no
# segment may climb out of its folder); a path is at most as long as a key.
_SEGMENT = re.compile(r"[A-Za-z0-9_.-]{1,200}")
_LONGEST_PATH = 512
_LONGEST_METADATA = 4_096
# The recall a search ranks with: words by rarity, each file alone (no conversation).
_SEARCHED = {"rank": "idf", "context": False}


def _check_path(path: object, what: str = "path") -> str:
    """ValueError unless `path` names a file as the harness's stores take it."""
    if not isinstance(path, str) or not 0 < len(path) <= _LONGEST_PATH or not all(
            _SEGMENT.fullmatch(part) and ".." not in part and part != "."
            for part in path.split("/")):
        raise ValueError(f"invalid memory {what}: segments of letters, digits, _ . -,"
                         " none of them . or holding ..")
    return path


def _check_prefix(prefix: object) -> str:
    if not isinstance(prefix, str):
        raise ValueError("invalid memory prefix")
    if prefix:
        _check_path(prefix.removesuffix("/"), "prefix")
    return prefix


def _check_metadata(metadata: object) -> dict[str, str] | None:
    """The harness's write metadata: string keys and values (none of NUL), at most 4,096
    characters as JSON; None or {} records none."""
    if not metadata:
        return None
    if not isinstance(metadata, Mapping) or not all(
            isinstance(key, str) and isinstance(value, str) and "\x00" not in key + value
            for key, value in metadata.items()):
        raise TypeError("memory metadata keys and values must be strings without NUL")
    if sum(len(key) + len(value) + 6 for key, value in metadata.items()) > _LONGEST_METADATA:
        raise ValueError(f"memory metadata is longer than {_LONGEST_METADATA} characters")
    return dict(metadata)


def _digest(operation: MemoryOperation) -> str:
    """The harness's fingerprint of an operation, digested: any length of it fits."""
    return hashlib.sha256(operation.fingerprint.encode()).hexdigest()


def _receipt_of(operation: MemoryOperation, kind: str, existed: bool) -> tuple[str, str]:
    """The store's operation for the harness's: its id, and a fingerprint that names what
    the call was (a write or a delete), whether it found the file, and the harness's own
    fingerprint of it (_digest)."""
    return operation.id, f"{kind}:{existed:d}:{_digest(operation)}"


def _mutation_of(operation: MemoryOperation, receipt: dict[str, Any]) -> MemoryMutation:
    """The harness's replayed mutation from the store's receipt of `operation`;
    MemoryOperationConflictError where the harness's fingerprint is another."""
    kind, _, rest = str(receipt["fingerprint"]).partition(":")
    existed, _, digest = rest.partition(":")
    if digest != _digest(operation):
        raise MemoryOperationConflictError(
            "the operation id was used for another call (other arguments) before")
    result = receipt["result"]
    return MemoryMutation(version=str(result) if kind == "write" else None, replayed=True,
                          existed=existed == "1")


class PydanticAIMemoryStore(OnStore):
    """The harness's MemoryStore, SearchableMemoryStore and MetadataMemoryStore, kept in a
    MemoryStore.

    `location`: a path or postgresql:// URL (opened with RECOMMENDED unless `options` say
    otherwise, closed by close()), or an open MemoryStore, used as it is. Exactly one of
    `user` (every path is that user's) and `user_segment` (the path's segment at that
    place names the user: a name that is not an identifier is its digest). Every call
    runs in a worker thread."""

    def __init__(self, location: str | os.PathLike[str] | MemoryStore, *,
                 user: str | None = None, user_segment: int | None = None,
                 task: str = "pydantic-ai", **options: Any) -> None:
        if (user is None) == (user_segment is None):
            raise ValueError("give user= (one user's store) or user_segment= (the path"
                             " segment that names the user: 0 for the harness's namespace"
                             " first), one of them")
        if user_segment is not None and (type(user_segment) is not int or user_segment < 0):
            raise ValueError("user_segment must be an int from 0")
        self._user, self._segment = user, user_segment
        self._task = task
        if user is not None:
            Scope(user, task)  # checked now, not at the first call
        self.store, self._owned = store_of(location, options, LONGEST_FILE)

    # -- whose, and which memories are files ----------------------------------------

    def _scope(self, path: str) -> Scope:
        """The scope of the user `path` belongs to."""
        if self._user is not None:
            return Scope(self._user, self._task)
        parts = path.split("/")
        if self._segment is None or self._segment >= len(parts) or not parts[self._segment]:
            raise ValueError(f"the path has no segment {self._segment} to name its user")
        return Scope(identifier(parts[self._segment], "user"), self._task)

    def _scope_of_prefix(self, prefix: str) -> Scope:
        """The scope a listing or search of `prefix` reads: the user's whose segment the
        prefix holds whole (a prefix must name one user where users are segments)."""
        if self._segment is not None and prefix.count("/") <= self._segment:
            raise ValueError(f"a prefix names its user: it holds segment {self._segment}"
                             " whole, ending with /")
        return self._scope(prefix)

    @staticmethod
    def _is_file(memory: Memory | Recalled | None, path: str | None = None) -> bool:
        """Whether a memory is a file the adapter wrote (at `path`)."""
        return marked(memory, _MARK, _FILE) and (
            path is None or memory is not None and memory.get("key") == path)

    def _file(self, scope: Scope, path: str) -> Memory | None:
        found = self.store.get(scope, key=path)
        return found if self._is_file(found, path) else None

    def _at_version(self, scope: Scope, path: str, version: str) -> Memory:
        """The file at `path` if it is at `version`; MemoryConflictError where not."""
        found = self.store.get(scope, int(version)) if version.isdigit() else None
        if found is None or not self._is_file(found, path):
            raise MemoryConflictError("the file is not at the expected version")
        return found

    def _replayed(self, scope: Scope, operation: MemoryOperation | None
                  ) -> MemoryMutation | None:
        if operation is None:
            return None
        receipt = self.store.operation(scope, operation.id)
        return None if receipt is None else _mutation_of(operation, receipt)

    # -- the protocol, each call in a worker thread -----------------------------------


    async def read(self, path: str, *, max_chars: int) -> MemoryFile | None:
        """The file at `path`, at most `max_chars` of it, or None."""
        _check_path(path)
        if type(max_chars) is not int or max_chars <= 0:
            raise ValueError("max_chars must be a positive int")
        found = await run_sync(self._file, self._scope(path), path)
        if found is None:
            return None
        mark = (found.get("metadata") or {})
        text = found["text"]
        return MemoryFile(content=text[:max_chars], version=str(found["id"]),
                          operation_id=mark.get("operation"), truncated=len(text) > max_chars,
                          metadata=mark.get("write"))

    async def get_operation(self, operation: MemoryOperation) -> MemoryMutation | None:
        """What `operation` did, where it was done (and its receipt is kept): with
        user_segment none, since an operation names no path and so no user (a write or
        delete under it is replayed all the same)."""
        if self._user is None:
            return None
        return await run_sync(self._replayed, Scope(self._user, self._task), operation)

    async def write(self, path: str, content: str, *, expected_version: str | None,
                    operation: MemoryOperation | None = None) -> MemoryMutation:
        """Create `path` (expected_version None: only where there is no file) or replace it
        (only at `expected_version`); MemoryConflictError where not."""
        return await self.write_with_metadata(path, content, expected_version=expected_version,
                                              metadata=None, operation=operation)

    async def write_with_metadata(self, path: str, content: str, *,
                                  expected_version: str | None,
                                  metadata: Mapping[str, str] | None,
                                  operation: MemoryOperation | None = None) -> MemoryMutation:
        """write, recording `metadata` with the version it writes."""
        _check_path(path)
        if not isinstance(content, str) or not content.strip():
            raise ValueError("a memory file's content is a non-blank str (delete a file to"
                             " empty it)")
        if expected_version is not None and not isinstance(expected_version, str):
            raise ValueError("expected_version must be a str or None")
        recorded = _check_metadata(metadata)
        return await run_sync(self._write, path, content, expected_version, recorded,
                              operation)

    def _write(self, path: str, content: str, expected: str | None,
               recorded: dict[str, str] | None,
               operation: MemoryOperation | None) -> MemoryMutation:
        scope = self._scope(path)
        replayed = self._replayed(scope, operation)
        if replayed is not None:
            return replayed
        mark: dict[str, Any] = {_MARK: _FILE}
        if operation is not None:
            mark["operation"] = operation.id
        if recorded is not None:
            mark["write"] = recorded
        receipt = None if operation is None else _receipt_of(
            operation, "write", expected is not None)
        try:
            if expected is None:
                written = self.store.remember(scope, "task", content, _SOURCE, key=path,
                                              metadata=mark, if_version=0,
                                              operation=receipt)
            else:
                held = self._at_version(scope, path, expected)
                revised = self.store.revise(scope, held["id"], content, _SOURCE,
                                            metadata=mark, operation=receipt)
                if revised is None:  # replaced or deleted since it was read
                    raise MemoryConflictError("the file is not at the expected version")
                written = revised
        except VersionConflict:
            raise MemoryConflictError("a file exists at the path") from None
        except OperationConflict as exc:
            raise MemoryOperationConflictError(str(exc)) from None
        _log.debug("wrote memory %d of user %s", written, scope.user)
        return MemoryMutation(version=str(written), replayed=False,
                              existed=expected is not None)

    async def delete(self, path: str, *, expected_version: str | None,
                     operation: MemoryOperation | None = None) -> MemoryMutation:
        """Delete `path` where it is at `expected_version`; with None, succeed where there
        is no file (MemoryConflictError where there is one)."""
        _check_path(path)
        if expected_version is not None and not isinstance(expected_version, str):
            raise ValueError("expected_version must be a str or None")
        return await run_sync(self._delete, path, expected_version, operation)

    def _delete(self, path: str, expected: str | None,
                operation: MemoryOperation | None) -> MemoryMutation:
        scope = self._scope(path)
        replayed = self._replayed(scope, operation)
        if replayed is not None:
            return replayed
        if expected is None:
            if self._file(scope, path) is not None:
                raise MemoryConflictError("a file exists at the path")
            return MemoryMutation(version=None, replayed=False, existed=False)
        held = self._at_version(scope, path, expected)
        try:
            forgot = self.store.forget(scope, held["id"], operation=None if operation is None
                                       else _receipt_of(operation, "delete", True))
        except OperationConflict as exc:
            raise MemoryOperationConflictError(str(exc)) from None
        if not forgot:  # replaced or deleted since it was read
            raise MemoryConflictError("the file is not at the expected version")
        return MemoryMutation(version=None, replayed=False, existed=True)

    async def list_paths(self, prefix: str = "", *, limit: int) -> list[str]:
        """The paths that begin with `prefix`, in order, at most `limit`."""
        _check_prefix(prefix)
        if type(limit) is not int or limit <= 0:
            raise ValueError("limit must be a positive int")
        return await run_sync(self._paths, prefix, limit)

    def _paths(self, prefix: str, limit: int) -> list[str]:
        scope = self._scope_of_prefix(prefix)
        paths: list[str] = []
        after: str | None = None
        # A page of the key index at a time, each memory told a file here: a filter would
        # read every key of the range to admit a page's worth.
        while len(paths) < limit:
            wanted = limit - len(paths)
            page = self.store.memories(scope, key_prefix=prefix, after_key=after,
                                       limit=wanted)
            paths += [str(found.get("key")) for found in page if self._is_file(found)]
            if len(page) < wanted:
                break
            after = page[-1].get("key")
        return paths

    async def search(self, prefix: str, query: str, *, limit: int, max_files: int,
                     max_chars: int, max_file_chars: int) -> MemorySearchResult:
        """The files below `prefix` that best match `query`, ranked through the store's
        word index (its matching rule: word forms too, where it is stems): of the first
        `max_files` paths in order (`scanned`), at most `limit`, each with a snippet of
        its content around the first word matched, the paths and snippets together at
        most `max_chars`; `truncated` where a bound left some out."""
        _check_prefix(prefix)
        for name, bound in (("limit", limit), ("max_files", max_files),
                            ("max_chars", max_chars), ("max_file_chars", max_file_chars)):
            if type(bound) is not int or bound <= 0:
                raise ValueError(f"{name} must be a positive int")
        if not isinstance(query, str) or not query.strip():
            return MemorySearchResult(matches=[], scanned=0, truncated=False)
        return await run_sync(self._search, prefix, query, limit, max_files, max_chars,
                              max_file_chars)

    def _search(self, prefix: str, query: str, limit: int, max_files: int, max_chars: int,
                max_file_chars: int) -> MemorySearchResult:
        scope = self._scope_of_prefix(prefix)
        paths = self._paths(prefix, max_files + 1)
        scanned = set(paths[:max_files])
        truncated = len(paths) > max_files
        found: list[tuple[float, Memory]] = []
        offset = 0
        while len(found) <= limit and offset <= 10_000 - MAX_LIMIT:
            page = self.store.recall(scope, query, MAX_LIMIT, offset=offset,
                                     where={"$key": {"$gte": prefix}},
                                     **_SEARCHED)  # type: ignore[arg-type]
            found += [(hit["score"], hit) for hit in page  # type: ignore[misc]
                      if hit.get("key") in scanned and self._is_file(hit)]
            if len(page) < MAX_LIMIT:
                break
            offset += MAX_LIMIT
        truncated = truncated or len(found) > limit
        matches, left = [], max_chars
        for score, hit in found[:limit]:
            path = str(hit.get("key"))
            room = min(left - len(path), max_file_chars)
            if room <= 0:
                truncated = True
                break
            snippet = _snippet(hit["text"], query, room)
            matches.append(MemorySearchMatch(path=path, snippet=snippet, score=score))
            left -= len(path) + len(snippet)
        return MemorySearchResult(matches=matches, scanned=len(scanned), truncated=truncated)


def _snippet(content: str, query: str, most: int) -> str:
    """At most `most` characters of `content` around the first of the query's words it
    holds (its start where it holds none as written)."""
    lowered = content.lower()
    places = [place for word in query.lower().split() if (place := lowered.find(word)) >= 0]
    start = max(0, min(places, default=0) - most // 3)
    start = max(0, min(start, len(content) - most))
    return content[start:start + most]
