"""The Anthropic SDK's memory tool over memory.py.

    from memory_frameworks.anthropic import AnthropicMemoryTool
    memory_tool = AnthropicMemoryTool("memory.db", user="alice")   # or a postgresql:// URL
    runner = client.beta.messages.tool_runner(model=..., tools=[memory_tool], messages=...)

Each file under /memories is one memory of the user's task `task` (default "anthropic"), at
task level: its key the file's path, its text the file's content, its metadata the
adapter's mark. A directory is the paths that begin with it: `view` of one lists its keys
by prefix, two levels deep. An edit (`str_replace`, `insert`) reads the file and writes it
over that memory by id, in one transaction that finds it unchanged, reading and applying
the edit again where another agent wrote first: two agents' edits never lose one. The user
is the constructor's, never a path's. docs/frameworks.md tells the rest.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

from memory import Memory, MemoryStore, Scope, VersionConflict
from memory_frameworks import OnStore, marked, needs, store_of

with needs("anthropic"):
    from anthropic.lib.tools import BetaAbstractMemoryTool, BetaAsyncAbstractMemoryTool, ToolError
    from anthropic.types.beta import (
        BetaMemoryTool20250818CreateCommand,
        BetaMemoryTool20250818DeleteCommand,
        BetaMemoryTool20250818InsertCommand,
        BetaMemoryTool20250818RenameCommand,
        BetaMemoryTool20250818StrReplaceCommand,
        BetaMemoryTool20250818ViewCommand,
    )
    from anyio.to_thread import run_sync

__all__ = ["AnthropicMemoryTool", "AsyncAnthropicMemoryTool"]

_log = logging.getLogger("memory.anthropic")

#: The longest file a store this module opens takes.
LONGEST_FILE = 1_000_000
ROOT = "/memories"
_MARK = "anthropic"
_FILE = "memory-file"
_SOURCE = "anthropic-memory"
# The tool's files, as a filter: its mark, at task level (the user level is the user's).
_FILES = {_MARK: _FILE, "$level": "task"}
# How many times an edit is read and applied again where another writer came first.
_EDIT_ATTEMPTS = 20
_LONGEST_PATH = 512
# The SDK's own file tool numbers lines in a column this wide.
_LINE_NUMBER_WIDTH = 6
_MOST_LINES = 999_999


def _size(count: int) -> str:
    """A size as the SDK's file tool writes it: 0B, 512B, 1.5K, 2M."""
    units, size = ["B", "K", "M", "G"], float(count)
    place = 0
    while size >= 1024 and place < len(units) - 1:
        size, place = size / 1024, place + 1
    return f"{int(size)}{units[place]}" if size == int(size) else f"{size:.1f}{units[place]}"


def _numbered(lines: list[str], first: int) -> str:
    return "\n".join(f"{str(number).rjust(_LINE_NUMBER_WIDTH)}\t{line}"
                     for number, line in enumerate(lines, first))


class _Notebook(OnStore):
    """The files of one user's task in a MemoryStore, as the memory tool's commands see
    them; every answer a string for the model, every refusal a ToolError."""

    def __init__(self, location: str | os.PathLike[str] | MemoryStore, user: str, task: str,
                 options: dict[str, Any]) -> None:
        self.scope = Scope(user, task)
        self.store, self._owned = store_of(location, options, LONGEST_FILE)

    # -- paths and files -----------------------------------------------------------

    @staticmethod
    def path(path: object) -> str:
        """The path as the store keys it: /memories or a path below, each segment named
        (no empty, . or .. segment, nothing unprintable); ToolError where not."""
        if not isinstance(path, str) or not (path == ROOT or path.startswith(ROOT + "/")):
            raise ToolError(f"Path must start with {ROOT}, got: {path}")
        trimmed = path.rstrip("/") or ROOT
        parts = trimmed[len(ROOT):].split("/")[1:]
        if len(trimmed) > _LONGEST_PATH or not trimmed.isprintable() or any(
                part in ("", ".", "..") for part in parts):
            raise ToolError(f"Path {path} would escape {ROOT} directory")
        return trimmed

    def file(self, path: str) -> Memory | None:
        found = self.store.get(self.scope, key=path)
        return found if marked(found, _MARK, _FILE) else None

    def files_under(self, folder: str) -> list[Memory]:
        """The files below `folder` (/memories: all), in path order."""
        prefix = folder + "/"
        found: list[Memory] = []
        after: str | None = None
        while True:
            page = self.store.memories(self.scope, key_prefix=prefix, after_key=after,
                                       limit=500)
            found += [memory for memory in page if marked(memory, _MARK, _FILE)]
            if len(page) < 500:
                return found
            after = page[-1].get("key")

    def _must_be_free(self, path: str) -> None:
        """ToolError where `path` cannot hold a new file: it is a file or a directory
        already, or a folder above it is a file."""
        if self.file(path) is not None or self.files_under(path)[:1]:
            raise ToolError(f"File {path} already exists")
        folder = path.rpartition("/")[0]
        while folder != ROOT:
            if self.file(folder) is not None:
                raise ToolError(f"The path {folder} is a file, not a directory")
            folder = folder.rpartition("/")[0]

    # -- the commands ----------------------------------------------------------------

    def view(self, path: str, view_range: list[int] | None) -> str:
        path = self.path(path)
        found = None if path == ROOT else self.file(path)
        if found is not None:
            lines = found["text"].split("\n")
            if len(lines) > _MOST_LINES:
                raise ToolError(f"File {path} exceeds maximum line limit of 999,999 lines.")
            first = 1
            if view_range and len(view_range) == 2:
                first = max(1, view_range[0])
                lines = lines[first - 1:None if view_range[1] == -1 else view_range[1]]
            return f"Here's the content of {path} with line numbers:\n" + _numbered(lines, first)
        files = self.files_under(path)
        if not files and path != ROOT:
            raise ToolError(f"The path {path} does not exist. Please provide a valid path.")
        sizes: dict[str, int] = {}
        for memory in files:
            parts = str(memory.get("key"))[len(path) + 1:].split("/")
            size = len(memory["text"].encode())
            for depth in range(1, min(len(parts), 2) + 1):  # two levels, as the SDK's
                entry = "/".join(parts[:depth]) + ("/" if depth < len(parts) else "")
                sizes[entry] = sizes.get(entry, 0) + size
        listed = [f"{_size(_total(files))}\t{path}"]
        listed += [f"{_size(sizes[entry])}\t{path}/{entry}" for entry in sorted(sizes)]
        return (f"Here're the files and directories up to 2 levels deep in {path},"
                " excluding hidden items:\n" + "\n".join(listed))

    def create(self, path: str, text: str) -> str:
        path = self.path(path)
        if path == ROOT:
            raise ToolError(f"Cannot create a file at {ROOT}")
        self._must_be_free(path)
        try:
            self.store.remember(self.scope, "task", self._text(text), _SOURCE, key=path,
                                metadata={_MARK: _FILE}, if_version=0)
        except VersionConflict:  # another tool's memory holds the key
            raise ToolError(f"File {path} already exists") from None
        return f"File created successfully at: {path}"

    @staticmethod
    def _text(text: object) -> str:
        if not isinstance(text, str) or not text.strip():
            raise ToolError("A memory file holds some text (delete it to empty it)")
        return text

    def edit(self, path: str, change: Callable[[str], tuple[str, str]]) -> str:
        """Apply `change` (the file's text -> its new text and the answer) to the file,
        over the version it was read at; read and applied again where another writer
        came first."""
        path = self.path(path)
        for _ in range(_EDIT_ATTEMPTS):
            found = self.file(path)
            if found is None:
                raise ToolError(f"The path {path} does not exist. Please provide a valid path.")
            text, answer = change(found["text"])
            if self.store.revise(self.scope, found["id"], self._text(text), _SOURCE) is not None:
                return answer
            _log.debug("memory %d of user %s was written meanwhile: the edit again",
                       found["id"], self.scope.user)
        raise ToolError(f"The file {path} kept changing; try the edit again")

    def delete(self, path: str) -> str:
        path = self.path(path)
        if path == ROOT:
            raise ToolError(f"Cannot delete the {ROOT} directory itself")
        found = self.file(path)
        if found is not None:
            self.store.forget(self.scope, found["id"])
        elif not self.store.forget_where(self.scope, {**_FILES, "$key": {
                "$gte": path + "/", "$lt": path + "0"}}):  # "0" follows "/"
            raise ToolError(f"The path {path} does not exist")
        return f"Successfully deleted {path}"

    def rename(self, old: str, new: str) -> str:
        old, new = self.path(old), self.path(new)
        if ROOT in (old, new):
            raise ToolError(f"Cannot rename the {ROOT} directory itself")
        held = self.file(old)
        moved = [held] if held is not None else self.files_under(old)
        if not moved:
            raise ToolError(f"The path {old} does not exist")
        if new.startswith(old + "/"):
            raise ToolError(f"Cannot move {old} into itself")
        self._must_be_free(new)
        for memory in moved:  # a directory file by file, each in its own transaction
            key = str(memory.get("key"))
            try:
                renamed = self.store.rename(self.scope, key, new + key[len(old):])
            except VersionConflict:
                raise ToolError(f"The destination {new} already exists") from None
            if renamed is None:
                raise ToolError(f"The path {key} no longer exists")
        return f"Successfully renamed {old} to {new}"

    def clear(self) -> str:
        self.store.forget_where(self.scope, _FILES)
        return "All memory cleared"


def _total(files: list[Memory]) -> int:
    return sum(len(memory["text"].encode()) for memory in files)


def _replace(path: str, old: str, new: str) -> Callable[[str], tuple[str, str]]:
    """str_replace's change: `old` there exactly once, replaced by `new`."""
    def change(text: str) -> tuple[str, str]:
        count = text.count(old)
        if count == 0:
            raise ToolError(f"No replacement was performed, old_str `{old}` did not appear"
                            f" verbatim in {path}.")
        if count > 1:
            numbers = [text[:place].count("\n") + 1 for place in _places(text, old)]
            raise ToolError(f"No replacement was performed. Multiple occurrences of old_str"
                            f" `{old}` in lines: {', '.join(map(str, numbers))}. Please"
                            " ensure it is unique")
        line = text[:text.find(old)].count("\n")
        changed = text.replace(old, new)
        lines = changed.split("\n")
        start, end = max(0, line - 2), min(len(lines), line + 3)
        return changed, ("The memory file has been edited. Here is the snippet showing the"
                         " change (with line numbers):\n"
                         + _numbered(lines[start:end], start + 1))
    return change


def _places(text: str, part: str) -> list[int]:
    places, start = [], 0
    while (place := text.find(part, start)) != -1:
        places.append(place)
        start = place + 1
    return places


def _insert(path: str, line: int, text: str) -> Callable[[str], tuple[str, str]]:
    """insert's change: `text` as a line after line `line` (0: first)."""
    def change(content: str) -> tuple[str, str]:
        lines = content.split("\n")
        if lines[-1] == "":
            lines.pop()
        if not isinstance(line, int) or not 0 <= line <= len(lines):
            raise ToolError(f"Invalid `insert_line` parameter: {line}. It should be within"
                            f" the range [0, {len(lines)}].")
        lines.insert(line, text.rstrip("\n"))
        return "\n".join(lines) + "\n", f"The file {path} has been edited."
    return change


class _OnNotebook:
    """What both tools stand on: the user's notebook, and the store under it."""

    def _open(self, location: str | os.PathLike[str] | MemoryStore, user: str, task: str,
              options: dict[str, Any]) -> None:
        self._notebook = _Notebook(location, user, task, options)
        self.store = self._notebook.store

    def close(self) -> None:
        """Close the store, if this tool opened it."""
        self._notebook.close()


class AnthropicMemoryTool(_OnNotebook, BetaAbstractMemoryTool):
    """The SDK's memory tool (`tools=[...]` of a tool runner) kept in a MemoryStore.

    `location`: a path or postgresql:// URL (opened with RECOMMENDED unless `options` say
    otherwise, closed by close()), or an open MemoryStore, used as it is."""

    def __init__(self, location: str | os.PathLike[str] | MemoryStore, *, user: str,
                 task: str = "anthropic", **options: Any) -> None:
        super().__init__()
        self._open(location, user, task, options)

    def __enter__(self) -> AnthropicMemoryTool:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def view(self, command: BetaMemoryTool20250818ViewCommand) -> str:
        return self._notebook.view(command.path, command.view_range)

    def create(self, command: BetaMemoryTool20250818CreateCommand) -> str:
        return self._notebook.create(command.path, command.file_text)

    def str_replace(self, command: BetaMemoryTool20250818StrReplaceCommand) -> str:
        return self._notebook.edit(command.path, _replace(command.path, command.old_str,
                                                          command.new_str))

    def insert(self, command: BetaMemoryTool20250818InsertCommand) -> str:
        return self._notebook.edit(command.path, _insert(command.path, command.insert_line,
                                                         command.insert_text))

    def delete(self, command: BetaMemoryTool20250818DeleteCommand) -> str:
        return self._notebook.delete(command.path)

    def rename(self, command: BetaMemoryTool20250818RenameCommand) -> str:
        return self._notebook.rename(command.old_path, command.new_path)

    def clear_all_memory(self) -> str:
        """Forget every file of the tool's (nothing else of the user's)."""
        return self._notebook.clear()


class AsyncAnthropicMemoryTool(_OnNotebook, BetaAsyncAbstractMemoryTool):
    """AnthropicMemoryTool for the SDK's async tool runner: each command in a worker
    thread."""

    def __init__(self, location: str | os.PathLike[str] | MemoryStore, *, user: str,
                 task: str = "anthropic", **options: Any) -> None:
        super().__init__()
        self._open(location, user, task, options)

    async def __aenter__(self) -> AsyncAnthropicMemoryTool:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.close()


    async def view(self, command: BetaMemoryTool20250818ViewCommand) -> str:
        return await run_sync(self._notebook.view, command.path, command.view_range)

    async def create(self, command: BetaMemoryTool20250818CreateCommand) -> str:
        return await run_sync(self._notebook.create, command.path, command.file_text)

    async def str_replace(self, command: BetaMemoryTool20250818StrReplaceCommand) -> str:
        return await run_sync(self._notebook.edit, command.path, _replace(
            command.path, command.old_str, command.new_str))

    async def insert(self, command: BetaMemoryTool20250818InsertCommand) -> str:
        return await run_sync(self._notebook.edit, command.path, _insert(
            command.path, command.insert_line, command.insert_text))

    async def delete(self, command: BetaMemoryTool20250818DeleteCommand) -> str:
        return await run_sync(self._notebook.delete, command.path)

    async def rename(self, command: BetaMemoryTool20250818RenameCommand) -> str:
        return await run_sync(self._notebook.rename, command.old_path, command.new_path)

    async def clear_all_memory(self) -> str:
        """Forget every file of the tool's (nothing else of the user's)."""
        return await run_sync(self._notebook.clear)
