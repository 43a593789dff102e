"""CrewAI's unified Memory storage over memory.py.

    from crewai.memory import Memory
    from memory_frameworks.crewai import CrewAIStorage
    memory = Memory(storage=CrewAIStorage("memory.db", user="alice"))   # or postgresql://

CrewAI's Memory decides what to keep, embeds it with its own embedder and hands its
storage records: each is one memory of the user's task `task` (default "crewai"), at
task level, its key the record's id, its text the record's content, its vector the
record's embedding (the vectors its caller gives: the store records their dimensions at
the first), its created_at the record's. The rest of the record is the memory's
metadata: the adapter's mark, the scope path with each of its prefixes (so that a scope
and everything under it is one equality), the categories, importance, last access,
source, private flag and the record's own metadata. A search is a recall by meaning
under the same filters; a delete, a forget by them. The user is the constructor's, never
a record's scope or source. docs/frameworks.md tells the rest.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from memory import Memory, MemoryStore, Recalled, Scope
from memory_frameworks import OnStore, marked, needs, recalled, record_key, store_of

with needs("crewai"):
    from crewai.memory.storage.backend import EmbeddingDimensionMismatchError
    from crewai.memory.types import MemoryRecord, ScopeInfo

__all__ = ["CrewAIStorage"]

_log = logging.getLogger("memory.crewai")

#: The longest record a store this module opens takes.
LONGEST_RECORD = 1_000_000
_MARK = "crewai"
_RECORD = "record"
_SOURCE = "crewai"
_OWN = {"$level": "task", _MARK: _RECORD}
# A filter's combination takes at most this many filters, and $in this many values.
_WIDEST = 16
_MOST_IN = 100


def _path(scope: str | None) -> str:
    """A CrewAI scope as CrewAI's stores read it: a leading "/", none trailing, "/" the
    root."""
    return "/" + (scope or "/").strip().strip("/")


def _prefixes(path: str) -> dict[str, str]:
    # A scope is under a prefix of n segments where its n-segment prefix is that: one
    # equality on the index of terms.
    parts = path.strip("/").split("/") if path != "/" else []
    return {str(n): "/" + "/".join(parts[:n]) for n in range(1, len(parts) + 1)}


def _instant(moment: datetime) -> str:
    """CrewAI's time (naive: UTC, as CrewAI writes them) as an ISO time with its offset."""
    aware = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    return aware.isoformat()


def _moment(instant: str) -> datetime:
    """The store's ISO time as CrewAI's: naive, in UTC."""
    return datetime.fromisoformat(instant).astimezone(UTC).replace(tzinfo=None)


def _combined(op: str, conditions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Filters to combine by `op` ($and, $or), nested by it as far as a combination takes
    no more than _WIDEST."""
    while len(conditions) > _WIDEST:
        conditions = [{op: conditions[start:start + _WIDEST]}
                      for start in range(0, len(conditions), _WIDEST)]
    return conditions


def _all_of(conditions: list[dict[str, Any]]) -> dict[str, Any]:
    """Filters that must all hold, as one filter the store takes: their paths in one dict
    where they fit (an equality there is the index of terms' to answer; under $and, each
    memory's to test), the rest under $and."""
    merged: dict[str, Any] = {}
    rest: list[dict[str, Any]] = []
    for condition in conditions:
        for path, test in condition.items():
            if path in merged or len(merged) == _WIDEST - 1:
                rest.append({path: test})
            else:
                merged[path] = test
    return {**merged, "$and": _combined("$and", rest)} if rest else merged


def _where(scope_prefix: str | None = None, categories: list[str] | None = None,
           metadata_filter: dict[str, Any] | None = None, older_than: datetime | None = None,
           keys: list[str] | None = None) -> dict[str, Any]:
    """CrewAI's filters as the store's `where`, over the adapter's own records."""
    conditions: list[dict[str, Any]] = [_OWN]
    path = _path(scope_prefix)
    if path != "/":
        depth = path.count("/")
        conditions.append({f"in.{depth}": path})
    if categories:
        conditions.append({"$or": _combined("$or", [{"categories": {"$contains": category}}
                                                      for category in categories])})
    for name, value in (metadata_filter or {}).items():
        if not isinstance(name, str) or not name or "." in name:
            raise ValueError("a metadata_filter key is a non-empty str without '.'")
        conditions.append({f"metadata.{name}": {"$eq": value}})
    if older_than is not None:
        conditions.append({"$created_at": {"$lt": _instant(older_than)}})
    if keys is not None:
        conditions.append({"$key": {"$in": keys}})
    return _all_of(conditions)


def _kept(found: Memory | Recalled) -> dict[str, Any]:
    return found.get("metadata") or {}


def _record_of(found: Memory | Recalled) -> MemoryRecord:
    """The CrewAI record a memory holds (without its embedding, which the store keeps
    for search alone)."""
    kept = _kept(found)
    return MemoryRecord(
        id=kept["id"], content=found["text"], scope=kept["scope"],
        categories=kept["categories"], metadata=kept["metadata"],
        importance=kept["importance"], created_at=_moment(found["created_at"]),
        last_accessed=_moment(kept["last_accessed"]), source=kept["source"],
        private=kept["private"])


def _metadata_of(record: MemoryRecord) -> dict[str, Any]:
    """What a memory keeps of a record beside its text, time and vector."""
    path = _path(record.scope)
    return {_MARK: _RECORD, "id": record.id, "scope": path, "in": _prefixes(path),
            "categories": list(record.categories), "importance": record.importance,
            "last_accessed": _instant(record.last_accessed),
            "source": record.source, "private": record.private,
            "metadata": dict(record.metadata)}


class CrewAIStorage(OnStore):
    """CrewAI's StorageBackend (Memory(storage=...)) kept in a MemoryStore.

    `location`: a path or postgresql:// URL (opened with RECOMMENDED unless `options`
    say otherwise, closed by close()), or an open MemoryStore, used as it is."""

    def __init__(self, location: str | os.PathLike[str] | MemoryStore, *, user: str,
                 task: str = "crewai", **options: Any) -> None:
        self._scope = Scope(user, task)
        self.store, self._owned = store_of(location, options, LONGEST_RECORD)

    # -- records ---------------------------------------------------------------------

    def _held(self, record_id: str) -> Memory | None:
        found = self.store.get(self._scope, key=record_key(record_id))
        return found if marked(found, _MARK, _RECORD) else None

    def _check_dimensions(self, vectors: Iterable[list[float] | None]) -> None:
        """CrewAI's own error where an embedding is not of the store's dimensions."""
        held = self.store.embedder
        for vector in vectors:
            if vector and held is not None and len(vector) != held.dimensions:
                raise EmbeddingDimensionMismatchError(held.dimensions, len(vector))

    def save(self, records: list[MemoryRecord]) -> None:
        """Keep new records with their times, in one transaction; a record whose id is
        held already replaces it (as update)."""
        latest = {record.id: record for record in records}  # a repeated id: its last
        self._check_dimensions(record.embedding for record in latest.values())
        holding = {record_id: self._held(record_id) for record_id in latest}
        self._keep([latest[record_id] for record_id, held in holding.items() if held is None])
        for record_id, held in holding.items():
            if held is not None:
                self._replace(held, latest[record_id])
        _log.info("saved %d records of user %s", len(latest), self._scope.user)

    def update(self, record: MemoryRecord) -> None:
        """Replace the record of its id (its created_at kept), or keep it where none is
        held."""
        self._check_dimensions([record.embedding])
        held = self._held(record.id)
        if held is None:
            self._keep([record])
        else:
            self._replace(held, record)

    def _keep(self, records: list[MemoryRecord]) -> None:
        """Write records no memory holds, with their times, in one transaction."""
        if records:
            self.store.import_memories([{
                "user": self._scope.user, "task": self._scope.task, "level": "task",
                "text": record.content, "source": _SOURCE,
                "created_at": _instant(record.created_at), "key": record_key(record.id),
                "metadata": _metadata_of(record),
                **({"vectors": [record.embedding]} if record.embedding else {"embed": False}),
            } for record in records])

    def _replace(self, held: Memory, record: MemoryRecord) -> None:
        """Write a record over the memory that holds it. Without an embedding, the held
        vector stays where the content does."""
        if record.embedding:
            self.store.remember(self._scope, "task", record.content, _SOURCE,
                                key=record_key(record.id), metadata=_metadata_of(record),
                                vectors=[record.embedding])
        else:
            self.store.revise(self._scope, held["id"], record.content, _SOURCE,
                              metadata=_metadata_of(record))

    def get_record(self, record_id: str) -> MemoryRecord | None:
        held = self._held(record_id)
        return None if held is None else _record_of(held)

    def touch_records(self, record_ids: list[str]) -> None:
        """Note each record read now (a revise of its metadata: a version where the store
        keeps history)."""
        now = _instant(datetime.now(UTC))
        for record_id in record_ids:
            held = self._held(record_id)
            if held is not None:
                self.store.revise(self._scope, held["id"], held["text"], _SOURCE,
                                  metadata={**_kept(held), "last_accessed": now})

    # -- search ----------------------------------------------------------------------

    def search(self, query_embedding: list[float], scope_prefix: str | None = None,
               categories: list[str] | None = None,
               metadata_filter: dict[str, Any] | None = None, limit: int = 10,
               min_score: float = 0.0) -> list[tuple[MemoryRecord, float]]:
        """The records nearest the query's embedding (cosine, best first) under the
        filters, scoring `min_score` or more."""
        if not query_embedding or limit < 1:
            return []
        self._check_dimensions([query_embedding])
        found = recalled(self.store, self._scope, "", limit, rank="meaning",
                         vector=query_embedding, min_score=min_score, context=False,
                         where=_where(scope_prefix, categories, metadata_filter))
        return [(_record_of(hit), hit["score"]) for hit in found]

    # -- deletes ---------------------------------------------------------------------

    def delete(self, scope_prefix: str | None = None, categories: list[str] | None = None,
               record_ids: list[str] | None = None, older_than: datetime | None = None,
               metadata_filter: dict[str, Any] | None = None) -> int:
        """Forget the records the filters admit (all of them: with none, every record);
        how many."""
        if record_ids is None:
            return self.store.forget_where(self._scope, _where(
                scope_prefix, categories, metadata_filter, older_than))
        ids = list(dict.fromkeys(record_ids))
        return sum(self.store.forget_where(self._scope, _where(
            scope_prefix, categories, metadata_filter, older_than,
            [record_key(record_id) for record_id in ids[start:start + _MOST_IN]]))
            for start in range(0, len(ids), _MOST_IN))

    def reset(self, scope_prefix: str | None = None) -> None:
        self.store.forget_where(self._scope, _where(scope_prefix))

    # -- listings --------------------------------------------------------------------

    def _scan(self, scope_prefix: str | None) -> list[Memory]:
        return self.store.memories(self._scope, where=_where(scope_prefix))

    def list_records(self, scope_prefix: str | None = None, limit: int = 200,
                     offset: int = 0) -> list[MemoryRecord]:
        """The records under the scope, newest first (by created_at, then as written)."""
        held = sorted(self._scan(scope_prefix), reverse=True,
                      key=lambda found: (_moment(found["created_at"]), found["id"]))
        return [_record_of(found) for found in held[offset:offset + limit]]

    def count(self, scope_prefix: str | None = None) -> int:
        return self.store.count(self._scope, where=_where(scope_prefix))

    def list_scopes(self, parent: str = "/") -> list[str]:
        """The scopes directly under `parent` that hold records (or scopes that do)."""
        return self._children(_path(parent), self._scan(parent))

    @staticmethod
    def _children(path: str, held: list[Memory]) -> list[str]:
        depth = str(1 if path == "/" else path.count("/") + 1)
        return sorted({prefix for found in held if (prefix := _kept(found)["in"].get(depth))})

    def list_categories(self, scope_prefix: str | None = None) -> dict[str, int]:
        counts: dict[str, int] = {}
        for found in self._scan(scope_prefix):
            for category in _kept(found)["categories"]:
                counts[category] = counts.get(category, 0) + 1
        return counts

    def get_scope_info(self, scope: str) -> ScopeInfo:
        path = _path(scope)
        held = self._scan(path)
        times = [_moment(found["created_at"]) for found in held]
        return ScopeInfo(
            path=path, record_count=len(held),
            categories=sorted({category for found in held
                               for category in _kept(found)["categories"]}),
            oldest_record=min(times, default=None), newest_record=max(times, default=None),
            child_scopes=self._children(path, held))

    # -- async -----------------------------------------------------------------------

    async def asave(self, records: list[MemoryRecord]) -> None:
        await asyncio.to_thread(self.save, records)

    async def asearch(self, query_embedding: list[float], scope_prefix: str | None = None,
                      categories: list[str] | None = None,
                      metadata_filter: dict[str, Any] | None = None, limit: int = 10,
                      min_score: float = 0.0) -> list[tuple[MemoryRecord, float]]:
        return await asyncio.to_thread(self.search, query_embedding, scope_prefix,
                                       categories, metadata_filter, limit, min_score)

    async def adelete(self, scope_prefix: str | None = None,
                      categories: list[str] | None = None,
                      record_ids: list[str] | None = None, older_than: datetime | None = None,
                      metadata_filter: dict[str, Any] | None = None) -> int:
        return await asyncio.to_thread(self.delete, scope_prefix, categories, record_ids,
                                       older_than, metadata_filter)
