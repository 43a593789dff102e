"""LangGraph's store interface (`langgraph.store.base.BaseStore`) over memory.py.

    from memory_frameworks.langgraph import LangGraphStore
    store = LangGraphStore("memory.db", user_label=1)   # ("memories", user_id); or user="alice"
    graph = builder.compile(store=store)                         # nodes call get_store()

Each item is one memory of the user's task `task` (default "langgraph"): its namespace and
key become the memory's key (readable JSON, or a digest where that is not printable or
longer than a key may be) and its metadata (the namespace, each of its prefixes, the key,
the ttl and whether it is indexed), its value the metadata's `value`, which LangGraph's
filters read. The user is the code's choice, never a namespace's shape: `user=` (one
user's store), or `user_label=N`, the namespace label that holds the user (0 for
`("alice", "memories")`, 1 for `("memories", "alice")` as LangGraph's tutorials and LangMem
write it); a search or a listing whose prefix does not name the user is refused, so that
no namespace reaches another user's items. docs/frameworks.md tells the rest.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import itertools
import json
import logging
import math
import os
import sys
import threading
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, NamedTuple, cast

from memory import RECOMMENDED, Memory, MemoryStore, Rank, Scope
from memory_frameworks import identifier, needs, recall_pages, record_key

with needs("langgraph"):
    from langgraph.store.base import (
        BaseStore,
        GetOp,
        IndexConfig,
        InvalidNamespaceError,
        Item,
        ListNamespacesOp,
        MatchCondition,
        Op,
        PutOp,
        Result,
        SearchItem,
        SearchOp,
        TTLConfig,
        ensure_embeddings,
        get_text_at_path,
        validate_op_namespace,
    )

__all__ = ["AsyncLangGraphStore", "LangGraphStore"]

_log = logging.getLogger("memory.langgraph")

#: The longest text (a value's indexed text) a store this module opens takes.
LONGEST_TEXT = 1_000_000
# A memory takes at most 16 texts to embed (one vector each).
_MOST_TEXTS = 16
_SOURCE = "langgraph"
# Every item's metadata holds this, so a search of the whole namespace tree finds items
# alone (the user's other memories, visible in every task, have none).
_MARK = {"langgraph.v": 1}
_WHOSE = ("LangGraphStore needs to be told whose items are whose: user=\"alice\" for one"
          " user's store, or user_label=N for the namespace label that holds the user:"
          " user_label=0 for namespaces such as (user_id, \"memories\"), user_label=1 for"
          " (\"memories\", user_id), as LangGraph's tutorials and LangMem write them")


class _Embedder:
    """LangGraph's IndexConfig embedding (an Embeddings, a function, or a "provider:model"
    string LangChain resolves) as the store's Embedder; its name is what the file records,
    so it names the model where it can."""

    def __init__(self, config: IndexConfig) -> None:
        embed = config.get("embed")
        dims = config.get("dims")
        if type(dims) is not int or dims <= 0:
            raise ValueError("index needs dims, a positive int")
        self._embeddings = ensure_embeddings(embed)
        self.dimensions = dims
        self.name = f"langgraph:{_named(embed)}"

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return self._embeddings.embed_documents(list(texts))


def _named(embed: object) -> str:
    if isinstance(embed, str):
        return embed
    for name in ("model", "model_name"):
        if isinstance(getattr(embed, name, None), str):
            return f"{type(embed).__qualname__}:{getattr(embed, name)}"
    kind = embed if callable(embed) and not hasattr(embed, "embed_documents") else type(embed)
    return f"{getattr(kind, '__module__', '?')}.{getattr(kind, '__qualname__', '?')}"


def _prefixes(namespace: tuple[str, ...]) -> dict[str, str]:
    # Labels hold no ".", so the first n labels joined by "." name that prefix alone:
    # a search under a prefix is one equality on the index of terms.
    return {str(n): ".".join(namespace[:n]) for n in range(1, len(namespace) + 1)}


def _filter_paths(filter: Mapping[str, Any], within: str = "value") -> dict[str, Any]:
    """LangGraph's filter as the store's `where`: a dict without operators matches the
    nested object path by path, as LangGraph's in-memory store does; each operand as
    _operands gives it."""
    where: dict[str, Any] = {}
    for name, wanted in filter.items():
        if not isinstance(name, str) or not name:
            raise ValueError("a filter's keys must be non-empty strings")
        path = f"{within}.{name}"
        operators = isinstance(wanted, dict) and any(str(op).startswith("$") for op in wanted)
        if isinstance(wanted, dict) and wanted and not operators:
            where.update(_filter_paths(wanted, path))
            continue
        tests: dict[str, Any] = {}
        for op, operand in (wanted.items() if operators else [("$eq", wanted)]):
            for kept_op, kept in _operands(op, operand):
                tests[kept_op] = _stricter(kept_op, tests[kept_op], kept) \
                    if kept_op in tests else kept
        if tests:
            where[path] = tests
    return where


# The store keeps no value a filter of LangGraph's may still compare with: not NaN or an
# infinity, no integer past 2**53, no string holding a NUL. Such an operand is compared as
# LangGraph's stores compare it, by what it means for the values the store can hold.
_LARGEST = sys.float_info.max
_NOTHING: list[tuple[str, Any]] = [("$in", [])]


def _operands(op: str, operand: Any) -> list[tuple[str, Any]]:
    """The store's tests for one of LangGraph's (none: every value holds)."""
    if type(operand) is int and abs(operand) > 2**53:
        operand = float(operand) if abs(operand) < 2**1024 else math.copysign(math.inf,
                                                                              operand)
    if op in ("$in", "$nin") and isinstance(operand, (list, tuple)):
        held = [value for value in (_operands("$eq", item) for item in operand)
                if value != _NOTHING]
        return [(op, [value[0][1] for value in held])]
    if isinstance(operand, float) and math.isnan(operand):
        return [] if op == "$ne" else _NOTHING
    if isinstance(operand, float) and math.isinf(operand):
        above = operand > 0
        return {"$eq": _NOTHING, "$ne": [],
                "$lt": [("$lte", _LARGEST)] if above else _NOTHING,
                "$lte": [("$lte", _LARGEST)] if above else _NOTHING,
                "$gt": _NOTHING if above else [("$gte", -_LARGEST)],
                "$gte": _NOTHING if above else [("$gte", -_LARGEST)]}.get(op, [(op, operand)])
    if isinstance(operand, str) and "\x00" in operand:
        # No held string has a NUL: below this one are those up to its part before it.
        before = operand.partition("\x00")[0]
        return {"$eq": _NOTHING, "$ne": [], "$lt": [("$lte", before)],
                "$lte": [("$lte", before)], "$gt": [("$gt", before)],
                "$gte": [("$gt", before)]}.get(op, [(op, operand)])
    return [(op, operand)]


def _stricter(op: str, one: Any, other: Any) -> Any:
    """Two operands of one test on a path, as one: what both admit."""
    if op in ("$lt", "$lte") and _comparable(one, other):
        return min(one, other)
    if op in ("$gt", "$gte") and _comparable(one, other):
        return max(one, other)
    if op == "$in":
        return [value for value in one if value in other]
    raise ValueError(f"a filter gives {op} twice on one path")


def _comparable(one: Any, other: Any) -> bool:
    numbers = {type(one), type(other)} <= {int, float}
    return numbers or (type(one) is str and type(other) is str)


def _microseconds() -> str:
    """The clock of a store this module opens: UTC to the microsecond, since LangGraph's
    ttl is minutes that may be a fraction of one (5 s is 0.083), where the store's own
    clock reads to the second."""
    return datetime.now(UTC).isoformat(timespec="microseconds")


def _when(stamp: str | None) -> datetime:
    return datetime.fromisoformat(cast(str, stamp))


class _Record(NamedTuple):
    """What an item memory holds, checked (_record_of)."""

    namespace: tuple[str, ...]
    key: str
    value: dict[str, Any]
    minutes: float | None


class LangGraphStore(BaseStore):
    """A LangGraph store whose items are memories of a MemoryStore (SQLite or PostgreSQL).

    `conn_string_or_store`: a path or postgresql:// URL (opened with RECOMMENDED unless
    `options` say otherwise, and closed by close()), or an open MemoryStore, used as it is.
    `user`: the one user of the store's items; or `user_label`: which namespace label holds
    each item's user (a label that is not a user id is given as its digest: identifier).
    One of the two is required. `index`: LangGraph's IndexConfig (dims, embed, fields);
    items are then found by meaning and words (`rank`, default "hybrid"); without it, by
    words alone. `ttl`: TTLConfig."""

    supports_ttl: bool = True

    def __init__(self, conn_string_or_store: str | os.PathLike[str] | MemoryStore, *,
                 user: str | None = None, user_label: int | None = None,
                 task: str = "langgraph",
                 index: IndexConfig | None = None, ttl: TTLConfig | None = None,
                 rank: Rank | None = None, **options: Any) -> None:
        if (user is None) == (user_label is None):
            raise ValueError(_WHOSE)
        if user is None and (type(user_label) is not int or user_label < 0):
            raise ValueError("user_label must be an int from 0")
        self.user, self.user_label, self.task = user, user_label, task
        self.index_config = index
        self.ttl_config = ttl
        # SqliteStore's and PostgresStore's IndexConfig call them text_fields.
        given = cast(Mapping[str, Any], index or {})
        self._fields = list(given.get("fields") or given.get("text_fields") or ["$"])
        if isinstance(conn_string_or_store, MemoryStore):
            if options:
                raise ValueError("options open a store: give a path, not an open store")
            if index is not None and conn_string_or_store.embedder is None:
                raise ValueError("index needs the store's embedder: open the MemoryStore with"
                                 " embedder=..., or give a path and let index embed")
            self.store, self._owned = conn_string_or_store, False
        else:
            settings: dict[str, Any] = {**RECOMMENDED, "max_text": LONGEST_TEXT,
                                        "clock": _microseconds, **options}
            if index is not None:
                settings.setdefault("embedder", _Embedder(index))
            self.store, self._owned = MemoryStore(conn_string_or_store, **settings), True
        if index is not None and self.store.embedder is not None \
                and index.get("dims", self.store.embedder.dimensions) \
                != self.store.embedder.dimensions:
            raise ValueError("index dims differ from the store's embedder's dimensions")
        self._rank: Rank | None = rank or ("hybrid" if index is not None else None)
        Scope(user or "any", task)  # user and task checked now, not at the first call
        self._sweeper: threading.Thread | None = None
        self._stop = threading.Event()

    @classmethod
    @contextlib.contextmanager
    def from_conn_string(cls, conn_string: str, *, index: IndexConfig | None = None,
                         ttl: TTLConfig | None = None, **options: Any
                         ) -> Iterator[LangGraphStore]:
        """The store on `conn_string`, closed at the end of the with block."""
        store = cls(conn_string, index=index, ttl=ttl, **options)
        try:
            yield store
        finally:
            store.close()

    def setup(self) -> None:
        """Nothing to do: the MemoryStore creates and upgrades its schema when it opens."""

    def close(self) -> None:
        """Stop the sweeper and close the MemoryStore if this opened it; again: nothing."""
        LangGraphStore.stop_ttl_sweeper(self)  # the async twin's is a coroutine
        if self._owned:
            self.store.close()

    # -- the operations ------------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """The results of `ops` in order: reads (as the store holds it before the batch's
        writes), then the puts in one transaction (the last of each item's wins), then the
        deletes."""
        ops = list(ops)
        for op in ops:
            validate_op_namespace(op)
        results: list[Result] = [None] * len(ops)
        refreshed: dict[tuple[Scope, float], list[int]] = {}
        for place, op in enumerate(ops):
            if isinstance(op, GetOp):
                results[place] = self._get(op, refreshed)
            elif isinstance(op, SearchOp):
                results[place] = self._search(op, refreshed)
            elif isinstance(op, ListNamespacesOp):
                results[place] = self._list_namespaces(op)
            elif not isinstance(op, PutOp):
                raise ValueError(f"unknown operation {type(op).__name__}")
        for (scope, minutes), ids in refreshed.items():
            self.store.renew(scope, ids, minutes * 60)
        self._put([op for op in ops if isinstance(op, PutOp)])
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """batch, in a worker thread."""
        return await asyncio.to_thread(self.batch, list(ops))

    def _scope(self, namespace: tuple[str, ...]) -> Scope:
        if self.user is not None:
            return Scope(self.user, self.task)
        assert self.user_label is not None  # the constructor has one or the other
        if len(namespace) <= self.user_label or namespace[self.user_label] == "*":
            raise InvalidNamespaceError(f"the namespace or prefix has no label"
                                        f" {self.user_label}, which names the user: no"
                                        " operation spans users")
        return Scope(identifier(namespace[self.user_label], "the user's label"), self.task)

    def _record_of(self, scope: Scope, found: Memory) -> _Record | None:
        """The item a memory of the scope holds, if it is one this adapter wrote: of its
        task (not the user level, which other tools write), of its source, its record's
        fields of their types, and its key the one its namespace and key give, so that a
        memory planted by another tool, however its metadata looks, is never an item (it
        is skipped, and logged by id)."""
        meta = found.get("metadata")
        kept = meta.get("langgraph") if isinstance(meta, dict) else None
        record = None
        if found["level"] == "task" and found["source"] == _SOURCE \
                and isinstance(kept, dict) and isinstance(meta, dict):
            namespace, key, minutes = (kept.get("namespace"), kept.get("key"),
                                       kept.get("ttl"))
            if isinstance(namespace, list) and namespace \
                    and all(type(label) is str for label in namespace) \
                    and type(key) is str and isinstance(meta.get("value"), dict) \
                    and (minutes is None or type(minutes) in (int, float)) \
                    and found.get("key") == record_key(*namespace, key) \
                    and self._names(tuple(namespace), scope):
                record = _Record(tuple(namespace), key, meta["value"], minutes)
        if record is None:
            _log.warning("memory %d of the langgraph task is no item of this adapter's:"
                         " skipped", found["id"])
        return record

    def _names(self, namespace: tuple[str, ...], scope: Scope) -> bool:
        """Whether a stored namespace is the scope's: any, in one user's store; else one
        whose user label names the scope's user (one that names no user is no one's)."""
        if self.user is not None:
            return True
        try:
            return self._scope(namespace) == scope
        except ValueError:  # InvalidNamespaceError too
            return False

    def _item(self, found: Memory, record: _Record, score: float | None = None,
              searched: bool = False) -> Item:
        stamps = {"created_at": _when(found["created_at"]),
                  "updated_at": _when(found.get("updated_at") or found["created_at"])}
        if searched:
            return SearchItem(record.namespace, record.key, record.value, score=score,
                              **stamps)
        return Item(value=record.value, key=record.key, namespace=record.namespace, **stamps)

    def _refresh(self, refreshed: dict[tuple[Scope, float], list[int]], scope: Scope,
                 found: Memory, record: _Record, asked: bool) -> None:
        """Note a read item's ttl for renewal, where the op asks it and TTLConfig allows."""
        minutes = record.minutes
        # Where TTLConfig does not say, no read refreshes, as LangGraph's SqliteStore has it.
        if asked and minutes is not None and (self.ttl_config or {}).get("refresh_on_read",
                                                                         False):
            refreshed.setdefault((scope, float(minutes)), []).append(found["id"])

    def _get(self, op: GetOp, refreshed: dict[tuple[Scope, float], list[int]]) -> Item | None:
        scope = self._scope(op.namespace)
        found = self.store.get(scope, key=record_key(*op.namespace, op.key))
        # get(key=) falls back to the user level's key: a memory there is no item.
        record = None if found is None or found["level"] != "task" \
            else self._record_of(scope, found)
        if found is None or record is None or (record.namespace, record.key) != (
                tuple(op.namespace), op.key):
            return None
        self._refresh(refreshed, scope, found, record, op.refresh_ttl)
        return self._item(found, record)

    def _search(self, op: SearchOp, refreshed: dict[tuple[Scope, float], list[int]]
                ) -> list[Item]:
        prefix = tuple(op.namespace_prefix)
        scope = self._scope(prefix)
        where = {**_MARK, **_filter_paths(op.filter or {})}
        if prefix:
            where[f"langgraph.p.{len(prefix)}"] = ".".join(prefix)
        if op.query:
            where["langgraph.indexed"] = True
            found = self._recalled(scope, op.query, where, op.offset, op.limit)
        else:  # LangGraph's own stores: the most recently updated first
            found = self._listed(scope, where, op.offset, op.limit)
        for memory, record, _ in found:
            self._refresh(refreshed, scope, memory, record, op.refresh_ttl)
        return [self._item(memory, record, score, searched=True)
                for memory, record, score in found]

    def _listed(self, scope: Scope, where: dict[str, Any], offset: int, limit: int
                ) -> list[tuple[Memory, _Record, float | None]]:
        """The items of the filter, newest first, from `offset`: pages of offset + limit
        memories, each down from the last, until `limit` items are found (a memory that
        is no item takes no place)."""
        found: list[tuple[Memory, _Record, float | None]] = []
        skipped, size, before = 0, offset + limit, None
        while len(found) < limit:
            page = self.store.memories(scope, newest_first=True, where=where, limit=size,
                                       before=before)
            for memory in page:
                record = self._record_of(scope, memory)
                if record is None:
                    continue
                if skipped < offset:
                    skipped += 1
                elif len(found) < limit:
                    found.append((memory, record, None))
            if len(page) < size:
                break
            before = page[-1]["id"]
        return found

    def _recalled(self, scope: Scope, query: str, where: dict[str, Any], offset: int,
                  limit: int) -> list[tuple[Memory, _Record, float | None]]:
        """The items recall ranks best for `query`, from `offset`: pages of the ranking
        until `limit` of them are found (a memory that is no item takes no place)."""
        found: list[tuple[Memory, _Record, float | None]] = []
        skipped = 0
        pages = recall_pages(self.store, scope, query, rank=self._rank, context=False,
                             where=where)
        while len(found) < limit and (page := next(pages, None)) is not None:
            for memory in page:
                record = self._record_of(scope, cast(Memory, memory))
                if record is None:
                    continue
                if skipped < offset:
                    skipped += 1
                elif len(found) < limit:
                    found.append((cast(Memory, memory), record, memory["score"]))
        return found

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        conditions = op.match_conditions or ()
        scope = self._listing_scope(conditions)
        held = {record.namespace for memory in self.store.memories(scope, where=_MARK)
                if (record := self._record_of(scope, memory)) is not None}
        matching = sorted(namespace for namespace in held
                          if all(_matches(condition, namespace) for condition in conditions))
        if op.max_depth is not None:
            matching = sorted({namespace[:op.max_depth] for namespace in matching})
        return matching[op.offset:op.offset + op.limit]

    def _listing_scope(self, conditions: Sequence[MatchCondition]) -> Scope:
        if self.user is not None:
            return Scope(self.user, self.task)
        assert self.user_label is not None  # the constructor has one or the other
        for condition in conditions:
            path = tuple(condition.path)
            if condition.match_type == "prefix" and len(path) > self.user_label \
                    and path[self.user_label] != "*":
                return Scope(identifier(path[self.user_label], "the user's label"), self.task)
        raise InvalidNamespaceError("a listing needs a prefix condition that names the user"
                                    f" (label {self.user_label}): no listing spans users")

    def _put(self, puts: list[PutOp]) -> None:
        last = {(tuple(op.namespace), op.key): op for op in puts}  # the last put of each wins
        written = []
        for (namespace, key), op in last.items():
            if not namespace:
                raise InvalidNamespaceError("a namespace cannot be empty")
            if op.value is not None:
                written.append(self._record(namespace, key, op))
        if written:
            self.store.remember_many(written)
        for (namespace, key), op in last.items():
            if op.value is None:
                self.store.forget(self._scope(namespace), key=record_key(*namespace, key))

    def _record(self, namespace: tuple[str, ...], key: str, op: PutOp) -> dict[str, Any]:
        """The remember_many item of one put."""
        if not isinstance(key, str):
            raise ValueError("a key must be a string")
        if not isinstance(op.value, Mapping):
            raise ValueError("a value must be a mapping of strings to JSON values")
        value = dict(op.value)
        minutes = op.ttl  # BaseStore.put gave it TTLConfig's default_ttl where none was asked
        indexed = op.index is not False
        texts = self._texts(value, op.index if isinstance(op.index, list) else self._fields)
        embed: bool | list[str] = False
        if indexed and self.index_config is not None and texts:
            if len(texts) > _MOST_TEXTS:
                raise ValueError(f"an item gives at most {_MOST_TEXTS} texts to embed,"
                                 f" this one {len(texts)}")
            embed = texts
        shown = "\n".join(texts) if texts else json.dumps(value, ensure_ascii=False)
        return {"scope": self._scope(namespace), "level": "task",
                "text": shown if shown.strip() else json.dumps(value),
                "source": _SOURCE, "ttl": None if minutes is None else float(minutes) * 60,
                "key": record_key(*namespace, key), "embed": embed,
                "metadata": {"langgraph": {"v": 1, "namespace": list(namespace), "key": key,
                                           "p": _prefixes(namespace), "ttl": minutes,
                                           "indexed": indexed}, "value": value}}

    @staticmethod
    def _texts(value: dict[str, Any], fields: list[str]) -> list[str]:
        """The texts an item is found by: each field's (LangGraph's paths), the string
        leaves of the whole value for "$" (its JSON would match every key's name)."""
        texts: list[str] = []
        for field in fields:
            if field in ("$", ""):
                texts += [leaf for leaf in _leaves(value) if leaf.strip()]
            else:
                texts += [text for text in get_text_at_path(value, field) if text.strip()]
        return texts

    # -- expiry ----------------------------------------------------------------------------

    def sweep_ttl(self) -> int:
        """Delete every expired memory of the store (expired items are never returned
        before this; it frees their space); how many."""
        return self.store.purge_expired()

    def start_ttl_sweeper(self, sweep_interval_minutes: float | None = None
                          ) -> concurrent.futures.Future[None]:
        """sweep_ttl every `sweep_interval_minutes` (else the TTLConfig's, else 5) in a
        thread until stop_ttl_sweeper(); a future done when it stops."""
        done: concurrent.futures.Future[None] = concurrent.futures.Future()
        if self._sweeper is not None and self._sweeper.is_alive():
            done.set_result(None)
            return done
        every = float(sweep_interval_minutes
                      or (self.ttl_config or {}).get("sweep_interval_minutes") or 5) * 60
        self._stop.clear()

        def sweep() -> None:
            while not self._stop.wait(every):
                try:
                    _log.info("swept %d expired memories", self.store.purge_expired())
                except Exception as exc:  # a failed sweep is tried again next time
                    _log.warning("a sweep failed: %s", type(exc).__name__)
            done.set_result(None)

        self._sweeper = threading.Thread(target=sweep, name="memory-ttl-sweeper",
                                         daemon=True)
        self._sweeper.start()
        return done

    def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        """Stop the sweeper; whether it stopped within `timeout` (True: none ran)."""
        self._stop.set()
        sweeper = self._sweeper
        if sweeper is None:
            return True
        sweeper.join(timeout)
        if sweeper.is_alive():
            return False
        self._sweeper = None
        return True


def _leaves(value: object) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _leaves(item)
    elif isinstance(value, (list, tuple)):
        yield from itertools.chain.from_iterable(_leaves(item) for item in value)


def _matches(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    compared = namespace[:len(path)] if condition.match_type == "prefix" \
        else namespace[len(namespace) - len(path):]
    if condition.match_type not in ("prefix", "suffix"):
        raise ValueError("a match condition is a prefix or a suffix")
    return all(wanted in ("*", label) for wanted, label in zip(path, compared, strict=True))


class AsyncLangGraphStore(LangGraphStore):
    """LangGraphStore for asyncio code, as AsyncSqliteStore is to SqliteStore: the same
    store, with setup, close, sweep_ttl and from_conn_string as coroutines (each
    operation runs in a worker thread)."""

    @classmethod
    @contextlib.asynccontextmanager
    async def from_conn_string(  # type: ignore[override]
            cls, conn_string: str, *, index: IndexConfig | None = None,
            ttl: TTLConfig | None = None, **options: Any) -> AsyncIterator[AsyncLangGraphStore]:
        """The store on `conn_string`, closed at the end of the async with block."""
        store = await asyncio.to_thread(functools.partial(cls, conn_string, index=index,
                                                          ttl=ttl, **options))
        try:
            yield store
        finally:
            await store.aclose()

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """LangGraphStore's batch, from any thread but the event loop's, which it would
        hold up (asyncio.InvalidStateError there, as AsyncSqliteStore's sync calls are)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # no loop runs in this thread
            return super().batch(ops)
        raise asyncio.InvalidStateError(
            "a synchronous call of AsyncLangGraphStore from the event loop would hold it"
            " up: await the a-methods (aget, aput, asearch, ...) instead")

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """batch, in a worker thread."""
        return await asyncio.to_thread(super().batch, list(ops))

    async def setup(self) -> None:  # type: ignore[override]
        """Nothing to do: the store's schema is made when it opens."""

    async def aclose(self) -> None:
        await asyncio.to_thread(super().close)

    async def sweep_ttl(self) -> int:  # type: ignore[override]
        return await asyncio.to_thread(self.store.purge_expired)

    async def start_ttl_sweeper(  # type: ignore[override]
            self, sweep_interval_minutes: float | None = None) -> asyncio.Future[None]:
        """LangGraphStore's sweeper, started from asyncio code: an asyncio future done when
        it stops."""
        return asyncio.wrap_future(super().start_ttl_sweeper(sweep_interval_minutes))

    async def stop_ttl_sweeper(  # type: ignore[override]
            self, timeout: float | None = None) -> bool:
        return await asyncio.to_thread(super().stop_ttl_sweeper, timeout)
