"""A persistent memory store for AI assistants, with explicit user and task scope.

One SQLite file, or one database of another engine (PostgreSQL), holds the memories of
many users. Every read, count and delete filters by the caller's scope with one
predicate, so no operation can hand one user's memories to another.

This module is everything a copied file serves, on the standard library alone: the
store, its SQLite engine, asyncio and the command line. Two modules stand beside it:
memory_postgres.py, the PostgreSQL engine (a postgresql:// URL), and memory_mcp.py, the
MCP server (`memory mcp`), each needing an extra. Two rules keep the boundary:
    - the statements the store runs live here, in every dialect side by side; those an
      engine runs for itself (its schema, locks, settings) live with that engine;
    - the satellites stand on this module: they import it, never the reverse. It names
      nothing of theirs and finds them by module name (_ENGINES, _beside) when a URL or
      a command needs them.

The module reads top to bottom (docs/architecture.md is the map, part by part):
    constants       limits, rules and sizes
    statements      each statement of the store in both dialects (_Sql), SQLite's
                    layouts version by version, SQLite's own statements
    errors          MemoryInputError, StoreError and its kinds
    scope           Scope and the validation of every input; filters; a write's rows
    models          embedders and rerankers, called and checked; records
    clocks, words   clock readings, expiry instants, the exact and stems rules
    word index      packing postings, adding and removing a write's postings
    engines         the engine and session seams; the SQLite engine; engines by scheme
    vectors         the kept copies, the vector blocks, the approximate index, the file
    recall          the map of a query's rows, the full scoring and the top-k search
    the parts       _Recording, _Time, _Writes, _Planner, _Lifecycle, _Transfer
    the store       MemoryStore, its verbs, and AsyncMemoryStore over it for asyncio
    command line    the `memory` command
"""

from __future__ import annotations

import argparse
import array
import asyncio
import bisect
import collections
import contextlib
import dataclasses
import functools
import hashlib
import heapq
import importlib
import importlib.util
import io
import itertools
import json
import logging
import math
import operator
import os
import pathlib
import re
import sqlite3
import stat
import struct
import sys
import threading
import time
import unicodedata
import warnings
import weakref
import zlib
from collections.abc import (
    Callable,
    Collection,
    Coroutine,
    Iterable,
    Iterator,
    Mapping,
    MappingView,
    Sequence,
)
from collections.abc import Set as AbstractSet
from datetime import UTC, datetime, timedelta
from typing import (
    Any,
    Concatenate,
    Literal,
    NamedTuple,
    ParamSpec,
    Protocol,
    TypedDict,
    TypeVar,
    cast,
    get_args,
)

try:  # POSIX alone: the vectors file beside an SQLite store locks it (none elsewhere)
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__version__ = "0.1.0"
__all__ = [
    "AsyncMemoryStore", "ConnectionLost", "Embedder", "FixedClock", "IDENTIFIER", "Level",
    "MAX_LIMIT", "MAX_QUERY", "MAX_TEXT", "Matching", "Memory", "MemoryInputError", "MemoryStore",
    "OperationConflict", "OutcomeUnknown", "RECOMMENDED", "Rank", "Recalled", "Record", "Reranker",
    "SCHEMA_VERSION", "STOPWORDS", "SchemaError", "Scope", "StoreError", "StoreNotFound",
    "VersionConflict", "WORD", "Why", "fixed_clock", "stems", "system_clock", "words",
]

SCHEMA_VERSION = 16
IDENTIFIER = re.compile(r"[a-z0-9][a-z0-9-]{0,63}")
MAX_TEXT = 2000
MAX_QUERY = 10 * MAX_TEXT
MAX_LIMIT = 20
WORD = re.compile(r"[a-z0-9]+")
STOPWORDS = frozenset(
    "a an and are as at be by did do does for from how i in is it my of on or that"
    " the this to was we what when where which who will with you your".split()
)
# The stems rule's stopwords (its third version on): NLTK's English list, less the entries
# with an apostrophe, which split into words of their own ("don't" is "don" and "t").
_STEMS_STOPWORDS = frozenset(
    "a about above after again against ain all am an and any are aren as at be because been"
    " before being below between both but by can couldn d did didn do does doesn doing don"
    " down during each few for from further had hadn has hasn have haven having he her here"
    " hers herself him himself his how i if in into is isn it its itself just ll m ma me"
    " mightn more most mustn my myself needn no nor not now o of off on once only or other"
    " our ours ourselves out over own re s same shan she should shouldn so some such t than"
    " that the their theirs them themselves then there these they this those through to too"
    " under until up ve very was wasn we were weren what when where which while who whom"
    " why will with won wouldn y you your yours yourself yourselves".split()
)
BUSY_TIMEOUT_SECONDS = 30.0
#: A memory's level: "user" (seen in every task of its user) or "task" (in its task alone).
Level = Literal["user", "task"]
#: The word rules: "exact" (the literal rule) and "stems" (English stems, the better one).
Matching = Literal["exact", "stems"]
#: Recall's rankings: "shared" (distinct words shared), "idf" (rarer words weigh more),
#: "meaning" (the cosine of the embedder's vectors) and "hybrid" (idf and meaning both).
Rank = Literal["shared", "idf", "meaning", "hybrid"]


class _Settings(TypedDict, total=False):
    """Keyword arguments of MemoryStore that choose how recall ranks."""

    matching: Matching
    rank: Rank
    context: bool


class Embedder(Protocol):
    """What turns texts into vectors for recall by meaning: the caller's model, which the
    store never downloads or imports. `name` names the model and its version; the file
    records it with `dimensions`, and refuses another."""

    name: str
    dimensions: int

    def embed(self, texts: Sequence[str]) -> Sequence[Sequence[float]]:
        """One vector of `dimensions` finite numbers for each text, in order."""
        ...


class Reranker(Protocol):
    """What reorders recall's best candidates by reading each beside the query: the
    caller's model (a cross-encoder, say), which the store never downloads or imports.
    `name` names it in errors and explain."""

    name: str

    def rerank(self, query: str, texts: Sequence[str]) -> Sequence[float]:
        """One finite score for each text, in order: the higher, the better it answers."""
        ...


#: The settings of the best recall measured (docs/quality.md): MemoryStore(path,
#: **RECOMMENDED), with an embedder for meaning (without one, "hybrid" ranks by idf).
#: What a later release measures better joins it. matching="stems" needs the `stems`
#: extra; an existing file keeps its own rule (see reindex).
RECOMMENDED: _Settings = {"matching": "stems", "rank": "hybrid", "context": True}
LEVELS: tuple[Level, ...] = get_args(Level)
MATCHING: tuple[Matching, ...] = get_args(Matching)
RANKS: tuple[Rank, ...] = get_args(Rank)
# Characters of the Han, Hiragana, Katakana and Hangul scripts that str.isalnum() accepts,
# as Unicode 14 (Python 3.11) names them; a test derives the same set from the names.
_CJK = (
    "\u1100-\u11ff\u3041-\u3096\u309d-\u309f\u30a1-\u30fa\u30fc-\u30ff\u3131-\u318e"
    "\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\ua960-\ua97c\uac00-\ud7a3\ud7b0-\ud7c6"
    "\ud7cb-\ud7fb\uf900-\ufa6d\ufa70-\ufad9\uff66-\uffbe\uffc2-\uffc7\uffca-\uffcf"
    "\uffd2-\uffd7\uffda-\uffdc\U0001aff0-\U0001aff3\U0001aff5-\U0001affb"
    "\U0001affd-\U0001affe\U0001b000-\U0001b001\U0001b11f-\U0001b122"
    "\U0001b150-\U0001b152\U0001b164-\U0001b167\U00020000-\U0002a6df"
    "\U0002a700-\U0002b738\U0002b740-\U0002b81d\U0002b820-\U0002cea1"
    "\U0002ceb0-\U0002ebe0\U0002f800-\U0002fa1d\U00030000-\U0003134a"
)
_ALNUM_RUN = re.compile(r"[^\W_]+")  # maximal runs of characters c with c.isalnum()
_SCRIPT_PART = re.compile(f"[{_CJK}]+|[^{_CJK}]+")
_CJK_PART = re.compile(f"[{_CJK}]")
# Scripts written without spaces between words, whole blocks, marks included: Thai, Lao,
# Myanmar (and its extensions), Khmer (and its symbols). They are split as CJK is.
_UNSPACED = (
    "\u0e00-\u0e7f\u0e80-\u0eff\u1000-\u109f\u1780-\u17ff\u19e0-\u19ff"
    "\ua9e0-\ua9ff\uaa60-\uaa7f"
)
_PAIRED_PART = re.compile(f"[{_CJK}{_UNSPACED}]+|[^{_CJK}{_UNSPACED}]+")
_PAIRED = re.compile(f"[{_CJK}{_UNSPACED}]")
# Latin and Greek, where the stems rule drops diacritics (as SQLite's unicode61 tokenizer
# does for Latin): people type "cafe" for café and leave Greek accents off. Cyrillic keeps
# its marks: й and ё are letters of their own.
_FOLDED_SCRIPTS = (
    "\u0000-\u02af\u0370-\u03ff\u1d00-\u1dbf\u1e00-\u1fff\u2c60-\u2c7f\ua720-\ua7ff"
    "\uab30-\uab6f"
)
# Sized so a row stays on its B-tree page (no overflow page) and rewriting one is cheap.
POSTINGS_PER_ROW = 96
# An owner (a user's own level, or one of their tasks) has its words indexed once its
# memories weigh this much; recall reads a smaller owner's memories instead, as fast as a
# few postings rows. A write for many users who hold a memory or two each, an import's or
# a nightly batch's, would otherwise write an index row for nearly every word of every
# memory, where one user's memories share their words' rows.
INDEX_FROM = 16
# A memory weighs one for each _WEIGHED_BY characters of its text begun: a memory of the
# default MAX_TEXT weighs one, so INDEX_FROM counts memories, while a long text (max_text
# up to 1,000,000) is indexed at once, not read and split into words at every recall (15
# texts of 1,000,000 characters made a small owner's recall cost about a second, under
# the store's lock, which every other user of the store then waited for).
_WEIGHED_BY = 2000
# Each connection's page cache: the word index of a large store is written in key order
# per word, i.e. all over the file.
_CACHE_KIB = 64 * 1024
# Recall scores all the query words' postings at once when they are this few: reading
# the newest first saves less than its extra statements cost.
_READ_ALL_UP_TO = 4096
# Recall that reads every posting of the query's words reads each word's in a statement
# of its own up to this many words (each row then one column), and all in one beyond:
# a statement costs about as much as 10 rows, and a query may hold thousands of words.
_STATEMENT_A_WORD_UP_TO = 64
# Recall with context: a memory's neighbours are the live memories of its conversation
# the scope sees, the _CONTEXT_WINDOW nearest written before it and as many after; each
# lends its own score times its side's weight. Chosen on LoCoMo's dev half, where
# weights from 0.2 to 0.6 before and from 0 to 0.4 after all land within 0.01 of R@5.
# The weights by distance, the nearest first.
_CONTEXT_BEFORE = (0.6, 0.6)
_CONTEXT_AFTER = (0.4, 0.4)
_CONTEXT_WINDOW = len(_CONTEXT_BEFORE)
# Each neighbour's place from the memory and its weight, in ascending id order.
_SHARES = tuple([(-shift, _CONTEXT_BEFORE[shift - 1]) for shift in range(_CONTEXT_WINDOW, 0, -1)]
                + [(shift, _CONTEXT_AFTER[shift - 1]) for shift in range(1, _CONTEXT_WINDOW + 1)])
# At most how many times the best own score among its neighbours a memory can score.
_CONTEXT_REACH = 1 + sum(_CONTEXT_BEFORE) + sum(_CONTEXT_AFTER)
# A scope's kept conversations find each id by a table over its ids' span (8 bytes an id
# of the span) where the span is at most this many times the scope, else by binary search.
_DENSE_SPAN = 4
# A vector's length (Euclidean) must lie between these for numpy to compare it in float32:
# then its squares do not all underflow to 0, and neither they nor its products with
# another such vector's overflow.
_SHORTEST_VECTOR = 1e-15
_LONGEST_VECTOR = 1e18
# The best few of many scores are sought among those that reach the best maxima of blocks
# of this many (_limit_th_best).
_BLOCK = 512
# What a numpy array's object takes beside its data (its header, shape and strides, as
# tracemalloc counts them): a kept copy counts it for each array it holds.
_ARRAY_BYTES = 112
_INT_BYTES = 32  # a Python int of a conversation's number, as allocated
# What a kept copy takes beside its arrays and names: its object, the scope's key and counts
# it is kept by, its entry among the copies (measured by tracemalloc: 0.75 to 1.25 KiB).
_COPY_BYTES = 1024
# Reading the newest first gives up, and scores every posting at C speed instead, once it
# has read more than this fraction (1/_TOP_K_BUDGET) of them in Python: on queries of many
# words of like frequency it would read most of them anyway.
_TOP_K_BUDGET = 3
_MAX_ID = 2**63 - 1
# A write first deletes up to this many expired memories of each scope it writes in, so
# expired text does not wait for purge_expired() where the user is active.
PURGE_PER_WRITE = 100
# Texts per call of the embedder's embed(): a model's batch, small enough that a bulk
# write's memory and a call's time stay bounded.
EMBED_BATCH = 64
# recall with a reranker reorders this many of the rank's best, and gives no memory past
# them: a cross-encoder reads each beside the query, so its cost grows with the depth,
# and on LoCoMo the rank's best 50 hold 0.90 of the evidence, its best 20 0.84
# (docs/quality.md).
RERANK_DEPTH = 50
# recall(..., approximate=True) ranks by an HNSW index (usearch, the `ann` extra, or the
# database's own) where the scope holds this many memories or more; below, exactly, as
# without it: the exact read of 20,000 vectors costs a few milliseconds, an index's build
# far more.
ANN_FROM = 20_000
# The indexes a store keeps, the oldest dropped past this many bytes in all: an index is
# for a scope past the kept budget, so it cannot count against it (100,000 vectors of 384
# dimensions take 145 MiB).
ANN_BYTES = 4 * 2**30
# With numpy, a store keeps what recall read of the scopes it served last (their vectors
# and their conversations), up to this many bytes in all: reading a heavy user's 100,000
# rows again costs far more than scoring them. The oldest read goes first.
KEPT_BYTES = 256 * 2**20
# Hybrid recall adds to a memory's cosine its word evidence (_evidence: its idf score,
# where it shares at least two informative words with the question) over the question's
# own weight (all its words' idf: how much of the question the memory covers), times
# this. Measured against the scope's best match instead, one accidental word would count
# as a full one. docs/quality.md tells how it was chosen.
_HYBRID_WORDS = 1.0
# A word informs hybrid recall where its idf within the scope is at least this: a word
# most of the scope's memories hold (the user's own name, a date word every memory of a
# session carries) tells nothing of which of them the question means.
_INFORMATIVE = 0.1

# -- statements ------------------------------------------------------------------------
# A statement the store runs on every engine is an _Sql: its SQLite text, carrying its
# forms in other dialects, keyed by (dialect, shape). Most of PostgreSQL's differ only in
# how they say it (placeholders, NULL-safe equality, a JSON list, no NOT INDEXED), and
# that dialect's rewrite (_REWRITES) makes those; the rest are written out where the
# statement is defined, beside its SQLite text, so that a new statement cannot forget its
# twin. A session of another dialect runs only the statement's form in its dialect and
# refuses one without it before sending it. A new dialect is a key of _REWRITES and a
# keyword of _sql where a statement needs its own text.

def _postgres_form(sql: str) -> str:
    """The PostgreSQL text of a statement that says the same in both dialects but for
    placeholders, NULL-safe equality, a JSON list's elements and SQLite's NOT INDEXED.
    A list becomes an array first, so that the planner looks its elements up by index."""
    return (sql.replace("%", "%%")
            .replace(" IS ?", " IS NOT DISTINCT FROM ?")
            .replace("id IN (SELECT value FROM json_each(?))",
                     "id = ANY (ARRAY(SELECT jsonb_array_elements_text(?::jsonb)::bigint))")
            .replace("word IN (SELECT value FROM json_each(?))",
                     "word = ANY (ARRAY(SELECT jsonb_array_elements_text(?::jsonb)))")
            .replace(" NOT INDEXED", "")
            .replace("?", "%s"))


_REWRITES: dict[str, Callable[[str], str]] = {"postgresql": _postgres_form}
# The shapes of a statement: its own ("one"); for an insert, many rows at once, one array
# per column ("many"); for a read, once for each of many rows of parameters ("each",
# _each_row).
_SHAPES = ("one", "many", "each")


class _Sql(str):
    """A statement's SQLite text, and its `forms` in other dialects by (dialect, shape)."""

    forms: dict[tuple[str, str], str]

    def form(self, dialect: str, shape: str = "one") -> str | None:
        return self.forms.get((dialect, shape))


def _sql(sqlite: str, **forms: str) -> _Sql:
    """A statement for every engine: in each dialect of _REWRITES, its text is the one
    written out (keyword `postgresql`; `postgresql_many`, `postgresql_each` for the other
    shapes), else the dialect's rewrite of the SQLite text."""
    statement = _Sql(sqlite)
    statement.forms = {}
    for key, text in forms.items():
        dialect, _, shape = key.partition("_")
        if dialect not in _REWRITES or shape not in ("", *_SHAPES[1:]):
            raise TypeError(f"_sql() has no form {key}")
        statement.forms[dialect, shape or "one"] = text
    for dialect, rewrite in _REWRITES.items():
        statement.forms.setdefault((dialect, "one"), rewrite(sqlite))
    return statement


def _from_arrays(*types: str) -> str:
    """The rows of one array per column, for an insert's many-rows form: on PostgreSQL each
    statement of executemany costs the driver and the server a round of work, which a
    batch pays for each of its memories and index rows. Arrays go in binary (%b): their
    text form quotes and escapes every element, in the driver's Python."""
    return "SELECT * FROM unnest(" + ", ".join(f"%b::{kind}[]" for kind in types) + ")"


def _each_row(parameters: str, body: str) -> str:
    """A read's each-row form: the read `body` once for each row of parameters, the rows given
    as one JSON list of lists ("name type, ..." names and types each row's values in the
    statement's order; the body reads each as wanted.name), every row it gives led by the
    position of its parameters' row from 1. A write for many users asks what it needs to
    know of each in one statement, not one apiece: on PostgreSQL each costs the driver
    and the server a round of work. OFFSET 0 keeps the body a subquery run for each row:
    flattened into a join, the plan may scan the whole table instead, the row guard
    checking every row against every user."""
    named = [parameter.split() for parameter in parameters.split(", ")]
    columns = ", ".join(f"(listed.item ->> {position})::{kind} AS {name}"
                        for position, (name, kind) in enumerate(named))
    return (f"SELECT wanted.n, found.* FROM (SELECT listed.n, {columns} FROM"
            " jsonb_array_elements(%s::jsonb) WITH ORDINALITY AS listed (item, n)) AS wanted,"
            f" LATERAL ({body} OFFSET 0) AS found")


# -- SQLite's schema, version by version -----------------------------------------------
# Each layout's statements as the release that wrote it ran them, to the letter: a file
# is recognized by comparing its objects with what they make, and upgraded by the steps
# after its layout, so none of this text ever changes. A new layout is a new entry.

# Version 2. AUTOINCREMENT: an id is never handed out twice, even after the newest is
# forgotten. The word index: for each (user, word, task), the ids of the memories holding
# the word, packed as little-endian int64 in ascending runs of up to POSTINGS_PER_ROW.
# Recall reads only the rows of the query's words under one user, so its cost follows the
# memories that share a word with the query, not the user's total. A row holds ids of one
# task (or of the user level) and the rows of one (user, word, task) cover disjoint id
# ranges, so the row holding an id is the one with the greatest first_id at or below it.
_SQLITE_VERSION_2 = (
    """CREATE TABLE memories (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id TEXT NOT NULL,
    task_id TEXT,
    text TEXT NOT NULL,
    source TEXT NOT NULL,
    created_at TEXT NOT NULL
)""",
    "CREATE INDEX memories_scope ON memories (user_id, task_id)",
    """CREATE TABLE memory_words (
    user_id TEXT NOT NULL,
    word TEXT NOT NULL,
    first_id INTEGER NOT NULL,
    task_id TEXT,
    ids BLOB NOT NULL,
    PRIMARY KEY (user_id, word, first_id)
) WITHOUT ROWID""",
)
# Version 3 adds the file's own settings (the matching rule its word index was built
# with) and how many memories each (user, task) holds, kept in the transaction of every
# write and deletion, so count() is two point lookups. The user level is task_key ''
# (no task id can be empty), since a NULL in a key would not be unique.
_SQLITE_VERSION_3 = (
    *_SQLITE_VERSION_2,
    """CREATE TABLE store_settings (
    name TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID""",
    """CREATE TABLE memory_counts (
    user_id TEXT NOT NULL,
    task_key TEXT NOT NULL,
    memories INTEGER NOT NULL,
    PRIMARY KEY (user_id, task_key)
) WITHOUT ROWID""",
)
# Version 4 adds when a memory stops being live: a UTC time in one fixed-width form, so
# that SQL compares it as text, and an index of the memories that expire. Its first
# release (34098a4) indexed (user_id, expires_at); the next made the index cover the
# scope by adding task_id, under the same version number, so version 4 has two layouts.
_SQLITE_ADD_EXPIRY = "ALTER TABLE memories ADD COLUMN expires_at TEXT"
_SQLITE_DROP_EXPIRY_INDEX = "DROP INDEX memories_expiry"
_SQLITE_VERSION_4_FIRST = (
    *_SQLITE_VERSION_3,
    _SQLITE_ADD_EXPIRY,
    "CREATE INDEX memories_expiry ON memories (user_id, expires_at)"
    " WHERE expires_at IS NOT NULL",
)
_SQLITE_VERSION_4 = (
    *_SQLITE_VERSION_3,
    _SQLITE_ADD_EXPIRY,
    "CREATE INDEX memories_expiry ON memories (user_id, expires_at, task_id)"
    " WHERE expires_at IS NOT NULL",
)

# Version 5 adds, for remember(..., dedupe=True), a key of each memory's text in its
# normal form (_text_key) and an index of the keys under each user, so that finding a
# memory with the same text is one look-up at any size.
_SQLITE_ADD_TEXT_KEY = "ALTER TABLE memories ADD COLUMN text_key TEXT"
_SQLITE_VERSION_5 = (
    *_SQLITE_VERSION_4,
    _SQLITE_ADD_TEXT_KEY,
    "CREATE INDEX memories_text_key ON memories (user_id, text_key)",
)

# Version 6 adds each memory's conversation, its source up to the last "/" (NULL for a
# source without one), and an index of each user's conversations in write order, so
# that recall with context finds a memory's neighbours by an index descent apiece (it
# holds what the scope and expiry are judged by, so no row is read for them).
_SQLITE_ADD_CONVERSATION = "ALTER TABLE memories ADD COLUMN conversation TEXT"
_SQLITE_VERSION_6 = (
    *_SQLITE_VERSION_5,
    _SQLITE_ADD_CONVERSATION,
    "CREATE INDEX memories_conversation ON memories"
    " (user_id, conversation, id, task_id, expires_at)",
)

# Version 7 adds each memory's vector, from the embedder the file records (store_settings),
# as little-endian float32: keyed by the memory's id, under its user and task as every
# row of memory data. Recall by meaning reads the scope's rows through the index.
_SQLITE_VERSION_7 = (
    *_SQLITE_VERSION_6,
    """CREATE TABLE memory_vectors (
    id INTEGER PRIMARY KEY,
    user_id TEXT NOT NULL,
    task_id TEXT,
    vector BLOB NOT NULL
)""",
    "CREATE INDEX memory_vectors_scope ON memory_vectors (user_id, task_id)",
)

# Version 8 gives a memory what the agent frameworks' records hold: a key its owner chose
# (unique among the owner's memories, enforced by the index, so two writers racing on one
# key leave one memory), metadata (a JSON object, as text), when it was last replaced, and
# what it was embedded from (NULL: its text). memory_fields holds a term for each value at
# each path of a memory's metadata (_terms), so that an equality filter is a range of an
# index under the user, as a word is.
_SQLITE_VERSION_8 = (
    *_SQLITE_VERSION_7,
    "ALTER TABLE memories ADD COLUMN key TEXT",
    "ALTER TABLE memories ADD COLUMN metadata TEXT",
    "ALTER TABLE memories ADD COLUMN updated_at TEXT",
    "ALTER TABLE memories ADD COLUMN embed TEXT",
    "CREATE UNIQUE INDEX memories_key ON memories (user_id, ifnull(task_id, ''), key)"
    " WHERE key IS NOT NULL",
    """CREATE TABLE memory_fields (
    user_id TEXT NOT NULL,
    term TEXT NOT NULL,
    id INTEGER NOT NULL,
    task_id TEXT,
    PRIMARY KEY (user_id, term, id)
) WITHOUT ROWID""",
    "CREATE INDEX memory_fields_id ON memory_fields (user_id, id)",
)

# Version 9 holds each owner's vectors again in sealed blocks, so that recall past the
# kept budget reads a scope's vectors a blob at a time, not a row at a time (2.7 us a row
# through sqlite3, 30 times numpy's own cost of scoring it). A block is some of one
# (user, task)'s memories, ascending, with no memory of the owner between them left out:
# their ids (int64, one for each vector: a memory embedded from several texts repeats its
# id) and vectors (float32), as memory_vectors holds them. It is keyed by its first id
# (ids are never given twice, so no two blocks share one) and indexed by its owner's
# blocks in order. Written by the write that gives an owner a block's worth of vectors
# past its newest block, whose last id it records (after_id: the owner has no memory
# between, and never will, as ids only grow); the deletion of any of its vectors drops it
# in the same transaction, and its memories are read row by row until the owner's next
# block holds them anew, so a block never holds a vector memory_vectors does not.
_SQLITE_VERSION_9 = (
    *_SQLITE_VERSION_8,
    """CREATE TABLE memory_vector_blocks (
    first_id INTEGER PRIMARY KEY,
    user_id TEXT NOT NULL,
    task_id TEXT,
    last_id INTEGER NOT NULL,
    after_id INTEGER NOT NULL,
    ids BLOB NOT NULL,
    vectors BLOB NOT NULL
)""",
    "CREATE INDEX memory_vector_blocks_scope ON memory_vector_blocks"
    " (user_id, task_id, first_id, last_id)",
)

# Version 10 weighs each owner's memories (_weight), which decides whether its words are
# indexed, as it counts them.
_SQLITE_ADD_WEIGHT = "ALTER TABLE memory_counts ADD COLUMN weight INTEGER NOT NULL DEFAULT 0"
_SQLITE_VERSION_10 = (*_SQLITE_VERSION_9, _SQLITE_ADD_WEIGHT)

# Version 11 gives each memory its version: 1 when written, one more than the memory it
# replaces (under a key) or revises; NULL, in a memory written before it, is 1.
_SQLITE_ADD_VERSION = "ALTER TABLE memories ADD COLUMN version INTEGER"
_SQLITE_VERSION_11 = (*_SQLITE_VERSION_10, _SQLITE_ADD_VERSION)

# Version 12 keeps the receipts of operations done under an id (operation=): the owner,
# the id, a digest of the call's arguments and its result, until it expires. PostgreSQL's
# version 11 makes the same table (without SQLite's WITHOUT ROWID).
_RECEIPTS_TABLE = """CREATE TABLE memory_receipts (
    user_id TEXT NOT NULL,
    task_key TEXT NOT NULL,
    operation TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    result TEXT NOT NULL,
    created_at TEXT NOT NULL,
    expires_at TEXT NOT NULL,
    PRIMARY KEY (user_id, task_key, operation)
)"""
_SQLITE_VERSION_12 = (*_SQLITE_VERSION_11, f"{_RECEIPTS_TABLE} WITHOUT ROWID")

# Version 13 keeps, in a store that keeps history, each superseded version of a memory
# (replaced under its key, revised or renamed) as it read, with its vector, until its
# memory is forgotten: under the owner and the id of the live memory it leads to
# (`head_id`, moved to each successor), with when it stopped being the live one
# (`superseded_at`, the successor's reading). PostgreSQL's version 12 makes the same
# table in its own types.
def _history_table(number: str, blob: str, document: str) -> str:
    return f"""CREATE TABLE memory_history (
    user_id TEXT NOT NULL,
    head_id {number} NOT NULL,
    version {number} NOT NULL,
    id {number} NOT NULL,
    task_id TEXT,
    key TEXT,
    text TEXT NOT NULL,
    source TEXT NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT,
    expires_at TEXT,
    metadata {document},
    embed TEXT,
    vector {blob},
    superseded_at TEXT,
    PRIMARY KEY (user_id, head_id, version)
)"""


_SQLITE_VERSION_13 = (*_SQLITE_VERSION_12,
                      _history_table("INTEGER", "BLOB", "TEXT") + " WITHOUT ROWID")

# Version 14 indexes each owner's versions by their own ids and by their keys, so that an
# as-of read of one id or key is an index descent and an as-of page walks its owners'
# versions in id order, as the live memories are walked, not the scope's every version.
# A WITHOUT ROWID table's index holds its primary key after the indexed columns, so the
# versions of one id are in (head_id, version) order within it.
_SQLITE_VERSION_14 = (
    *_SQLITE_VERSION_13,
    "CREATE INDEX memory_history_ids ON memory_history (user_id, task_id, id, head_id,"
    " version, superseded_at, updated_at, created_at, expires_at)",
    "CREATE INDEX memory_history_keys ON memory_history (user_id, task_id, key)"
    " WHERE key IS NOT NULL",
)

# Version 15 gives each memory, and each version kept, the window in which what it says
# held in the world (valid_from, valid_to: NULL for since always and for still), in the
# fixed-width UTC form expiry times have, so that they compare as text. Each is indexed
# under the user where it is set, so that the memories a read at a time leaves out (a
# window closed by then, or not open yet) are a range of an index apiece, as the expired
# ones are: a store whose memories carry no window reads as before.
_SQLITE_ADD_VALIDITY = (
    "ALTER TABLE memories ADD COLUMN valid_from TEXT",
    "ALTER TABLE memories ADD COLUMN valid_to TEXT",
    "ALTER TABLE memory_history ADD COLUMN valid_from TEXT",
    "ALTER TABLE memory_history ADD COLUMN valid_to TEXT",
    "CREATE INDEX memories_valid_from ON memories (user_id, valid_from, task_id)"
    " WHERE valid_from IS NOT NULL",
    "CREATE INDEX memories_valid_to ON memories (user_id, valid_to, task_id)"
    " WHERE valid_to IS NOT NULL",
)
_SQLITE_VERSION_15 = (*_SQLITE_VERSION_14, *_SQLITE_ADD_VALIDITY)

# A time in the system clock's form (UTC, to the second), whose text orders as its instant
# does, as a LIKE pattern.
_SYSTEM_FORM = "'____-__-__T__:__:__+00:00'"
# Version 16 indexes each memory by when it was last written and each version by when it
# was superseded, those whose times are in the system clock's form apart from the others:
# so that a recall as of a time reads what changed since it (a range of the first, and
# the others, most often none), not the scope. A memory never replaced (updated_at NULL)
# is indexed by its created_at: PostgreSQL cannot bound an index scan under row-level
# security by a condition on an expression (coalesce is not leakproof).
_WRITTEN = "coalesce(updated_at, created_at)"
_INDEX_WRITTEN = (
    "CREATE INDEX memories_updated ON memories (user_id, updated_at, task_id)"
    f" WHERE updated_at LIKE {_SYSTEM_FORM}",
    "CREATE INDEX memories_created ON memories (user_id, created_at, task_id)"
    f" WHERE updated_at IS NULL AND created_at LIKE {_SYSTEM_FORM}",
    "CREATE INDEX memories_written_otherwise ON memories (user_id, task_id)"
    f" WHERE {_WRITTEN} NOT LIKE {_SYSTEM_FORM}",
)
# A version's superseded_at is NULL only inside the write that keeps it, which links it to
# its successor (_SQL_LINK_SUCCESSOR) before it commits: none is indexed, so that on
# PostgreSQL the link leaves no dead entry in the index of other forms.
_SUPERSEDED_IN_SYSTEM_FORM = f"(superseded_at LIKE {_SYSTEM_FORM})"
_SQLITE_INDEX_CHANGES = (
    *_INDEX_WRITTEN,
    "CREATE INDEX memory_history_superseded ON memory_history (user_id,"
    f" {_SUPERSEDED_IN_SYSTEM_FORM}, superseded_at, task_id)",
)
_SQLITE_VERSION_16 = (*_SQLITE_VERSION_15, *_SQLITE_INDEX_CHANGES)

# Reads need version 4's columns and nothing later: a file of a layout from version 4 on
# is read as it is when opened read-only (the text keys matter only to writes).
_READS_AS_IT_IS = 4
# The version whose memories have their conversations, which recall with context reads.
_CONVERSATIONS_FROM = 6
# The version that holds vectors, which an embedder needs.
_VECTORS_FROM = 7
# The version whose memories may have keys and metadata: a file opened read-only before
# it is read through a view that gives every memory none (_SQLITE_AS_RECORDS).
_RECORDS_FROM = 8
# The version whose vectors are in blocks as well (read row by row before it).
_VECTOR_BLOCKS_FROM = 9
# The version whose owners are indexed by the weight of their memories (by their count
# before it).
_WEIGHTS_FROM = 10
# The version whose memories have versions (a file before it opened read-only is read
# through a view that gives each none, which reads as 1).
_VERSIONS_FROM = 11
# The version that keeps receipts (a file before it opened read-only has none).
_RECEIPTS_FROM = 12
# The version that may keep history (a file before it opened read-only has none).
_HISTORY_FROM = 13
# The version whose memories have windows of validity (a file before it opened read-only
# is read through views that give each none).
_VALIDITY_FROM = 15


class _Layout(NamedTuple):
    """A schema a release of this code wrote: the version it stamps, its statements."""

    version: int
    statements: tuple[str, ...]


# In the order releases wrote them; the last is what a new file gets. A new file is made
# by the same ALTER as an upgraded one, so the two files' schemas are alike to the letter.
SQLITE_LAYOUTS = (
    _Layout(2, _SQLITE_VERSION_2),
    _Layout(3, _SQLITE_VERSION_3),
    _Layout(4, _SQLITE_VERSION_4_FIRST),
    _Layout(4, _SQLITE_VERSION_4),
    _Layout(5, _SQLITE_VERSION_5),
    _Layout(6, _SQLITE_VERSION_6),
    _Layout(7, _SQLITE_VERSION_7),
    _Layout(8, _SQLITE_VERSION_8),
    _Layout(9, _SQLITE_VERSION_9),
    _Layout(10, _SQLITE_VERSION_10),
    _Layout(11, _SQLITE_VERSION_11),
    _Layout(12, _SQLITE_VERSION_12),
    _Layout(13, _SQLITE_VERSION_13),
    _Layout(14, _SQLITE_VERSION_14),
    _Layout(15, _SQLITE_VERSION_15),
    _Layout(16, _SQLITE_VERSION_16),
)
# What a new file is made by, the newest layout's statements: read at each creation, not
# frozen with the layouts, so that a caller who replaces it sees creation run it whole or
# not at all (the layout check of a file it made still compares with the frozen text).
SCHEMA = ";\n".join(SQLITE_LAYOUTS[-1].statements)
# A version-1 file (the core layout: one table and an index, named as its writer chose):
# the table's columns as PRAGMA table_info gives them (name, declared type, pk).
_VERSION_1_COLUMNS = [
    ("id", "INTEGER", 1), ("user_id", "TEXT", 0), ("task_id", "TEXT", 0),
    ("text", "TEXT", 0), ("source", "TEXT", 0), ("created_at", "TEXT", 0),
]

# -- the statements of both engines ----------------------------------------------------

# The one scope predicate: user-level rows (task_id IS NULL) and this task's rows,
# both under this user, so no branch can reach another user's row.
_IN_SCOPE = "WHERE user_id = ? AND (task_id IS NULL OR task_id = ?)"
# Its PostgreSQL form, for the statements whose PostgreSQL text is written out, and its
# form for the statements run once for each row of parameters (`wanted`, _each_row).
_IN_SCOPE_PG = "WHERE user_id = %s AND (task_id IS NULL OR task_id = %s)"
_IN_SCOPE_OF_WANTED = ("WHERE user_id = wanted.user_id"
                       " AND (task_id IS NULL OR task_id = wanted.task_key)")

# A column that may be NULL takes '' for NULL too in SQLite (none holds an empty text),
# which binds it at less cost (_Session.null).
_SQL_INSERT = _sql(
    "INSERT INTO memories (id, user_id, task_id, text, source, created_at, expires_at,"
    " text_key, conversation, key, metadata, updated_at, embed, version, valid_from,"
    " valid_to) VALUES (?, ?, NULLIF(?, ''), ?, ?, ?, NULLIF(?, ''), ?, NULLIF(?, ''),"
    " NULLIF(?, ''), NULLIF(?, ''), NULLIF(?, ''), NULLIF(?, ''), ?, NULLIF(?, ''),"
    " NULLIF(?, ''))",
    postgresql="INSERT INTO memories (id, user_id, task_id, text, source, created_at,"
    " expires_at, text_key, conversation, key, metadata, updated_at, embed, version,"
    " valid_from, valid_to)"
    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s::jsonb, %s, %s, %s, %s, %s)",
    postgresql_many="INSERT INTO memories (id, user_id, task_id, text, source, created_at,"
    " expires_at, text_key, conversation, key, metadata, updated_at, embed, version,"
    " valid_from, valid_to) SELECT"
    " i, u, t, x, s, c, e, k, v, n, m::jsonb, a, b, r, f, o FROM unnest(" + ", ".join(
        f"%b::{kind}[]" for kind in ("bigint", *["text"] * 12, "bigint", "text", "text"))
    + ") AS given (i, u, t, x, s, c, e, k, v, n, m, a, b, r, f, o)")
# The terms of memories' metadata (_terms), memory data as their memories are.
_SQL_INSERT_FIELDS = _sql(
    "INSERT INTO memory_fields (user_id, term, id, task_id) VALUES (?, ?, ?, ?)",
    postgresql_many="INSERT INTO memory_fields (user_id, term, id, task_id) "
    + _from_arrays("text", "text", "bigint", "text"))
_SQL_FIELD_IDS = _sql(
    f"SELECT term, id FROM memory_fields {_IN_SCOPE}"
    " AND term IN (SELECT value FROM json_each(?))",
    postgresql="SELECT term, id FROM memory_fields WHERE user_id = %s AND (task_id IS NULL"
    " OR task_id = %s) AND term = ANY (ARRAY(SELECT jsonb_array_elements_text(%s::jsonb)))")
# How many memories hold each term, up to _COUNTED: a filter of several equalities reads
# the ids of its rarest, then tests the others on those ids alone (a one-in-10,000 value
# beside an adapter's mark on every item read 20,001 ids, 10 ms), and a page of a rare
# value is read from the index, not found by walking down the newest memories.
_COUNTED = 512
_SQL_FIELD_COUNTS = _sql(
    "SELECT value, (SELECT count(*) FROM (SELECT 1 FROM memory_fields"
    f" {_IN_SCOPE} AND term = value LIMIT ?)) FROM json_each(?)",
    postgresql="SELECT value, (SELECT count(*) FROM (SELECT 1 FROM memory_fields"
    f" {_IN_SCOPE_PG} AND term = value LIMIT %s)"
    " AS held) FROM jsonb_array_elements_text(%s::jsonb) AS value")
_SQL_FIELD_IDS_AMONG = _sql(
    f"SELECT term, id FROM memory_fields {_IN_SCOPE}"
    " AND term IN (SELECT value FROM json_each(?)) AND id IN (SELECT value FROM json_each(?))",
    postgresql="SELECT term, id FROM memory_fields WHERE user_id = %s AND (task_id IS NULL"
    " OR task_id = %s) AND term = ANY (ARRAY(SELECT jsonb_array_elements_text(%s::jsonb)))"
    " AND id = ANY (ARRAY(SELECT jsonb_array_elements_text(%s::jsonb)::bigint))")
# Without statistics SQLite walks the user's whole primary key (every term of every
# memory) for the ids; its index of ids makes a forget cost the forgotten memories' terms.
_SQL_FORGET_FIELDS = _sql(
    f"DELETE FROM memory_fields INDEXED BY memory_fields_id {_IN_SCOPE}"
    " AND id IN (SELECT value FROM json_each(?))",
    postgresql="DELETE FROM memory_fields WHERE user_id = %s AND (task_id IS NULL"
    " OR task_id = %s) AND id = ANY (ARRAY(SELECT jsonb_array_elements_text(%s::jsonb)::bigint))")
_SQL_DELETE_FIELDS_OF_USER = _sql(
    "DELETE FROM memory_fields WHERE user_id = ? AND id IN (SELECT value FROM json_each(?))")
_SQL_ERASE_FIELDS = _sql("DELETE FROM memory_fields WHERE user_id = ?")
# What the tests of a filter that the index of terms cannot answer read (its ordering
# tests, combinations and the memories' own fields) of the scope's memories, or of some.
_FACT_COLUMNS = ("id, metadata, created_at, updated_at, key, source,"
                 " CASE WHEN task_id IS NULL THEN 'user' ELSE 'task' END, valid_from, valid_to")
_SQL_SCOPE_FACTS = _sql(f"SELECT {_FACT_COLUMNS} FROM memories {_IN_SCOPE}")
# The scope's memories at the user level, from the index by owner: what a filter's $level
# tells apart, without reading every memory of the scope.
_SQL_USER_LEVEL_IDS = _sql(f"SELECT id FROM memories {_IN_SCOPE} AND task_id IS NULL")
_SQL_SOME_FACTS = _sql(
    f"SELECT {_FACT_COLUMNS} FROM memories NOT INDEXED"
    f" {_IN_SCOPE} AND id IN (SELECT value FROM json_each(?))")
# The memories of the scope whose text has the key: those of the same text, and rarely
# others (a key is a hash), which the store tells apart by their text.
# On PostgreSQL the key's hash index finds the row; the user is compared under the "C"
# collation (equal bytes, as under any deterministic one), which no index of the user's
# has, so that the planner cannot read the scope's index instead, as it does on a table
# it has no statistics of yet (a bulk load's, until autovacuum analyzes it).
_SQL_SAME_TEXT = _sql(
    f"SELECT id, task_id, text, expires_at, valid_from, valid_to FROM memories {_IN_SCOPE}"
    " AND text_key = ?",
    postgresql="SELECT id, task_id, text, expires_at, valid_from, valid_to FROM memories"
    " WHERE user_id = %s"
    ' COLLATE "C" AND (task_id IS NULL OR task_id = %s) AND text_key = %s',
    postgresql_each=_each_row(
        "user_id text, task_key text, text_key text",
        "SELECT id, task_id, text, expires_at, valid_from, valid_to FROM memories"
        ' WHERE user_id = wanted.user_id COLLATE "C" AND (task_id IS NULL OR task_id ='
        " wanted.task_key)"
        " AND text_key = wanted.text_key"))
# Version 5's upgrade gives every memory its text's key: it reads all of them, as an
# upgrade must, and writes each under its user.
_SQL_ALL_TEXTS = _sql("SELECT user_id, id, text FROM memories")
_SQL_SET_TEXT_KEY = _sql("UPDATE memories SET text_key = ? WHERE user_id = ? AND id = ?")
# Version 6's upgrade (3 on PostgreSQL) gives every memory its conversation, alike.
_SQL_ALL_SOURCES = _sql("SELECT user_id, id, source FROM memories")
_SQL_SET_CONVERSATION = _sql(
    "UPDATE memories SET conversation = ? WHERE user_id = ? AND id = ?")


# A keyed memory that a later fact moved into the past keeps its key, stored with this
# and its id after it, so that the key has one holder (the owner's unique index holds)
# and its past holders sort right after it: one range of the key index reads them all.
# No key holds the character (keys refuse control characters), and PostgreSQL's text,
# which cannot hold NUL, holds it.
_PAST_KEY = "\x01"
# Above a key's past holders and below every key after it.
_PAST_KEYS_END = "\x02"


def _key_of(stored: str | None) -> str | None:
    """A key as its owner named it: a past holder's without what follows it."""
    return None if stored is None else stored.partition(_PAST_KEY)[0]


def _held_as(key: str | None, memory_id: int) -> str | None:
    """The key a memory written with `key` is stored under: an imported past holder's
    (ending in _PAST_KEY) followed by its id."""
    return f"{key}{memory_id}" if key is not None and key.endswith(_PAST_KEY) else key


class _MemoryRow(NamedTuple):
    """A memory as the store's reads give it (_MEMORY_COLUMNS), and the results built
    from it: the one place a row's columns are named."""

    id: int
    task_id: str | None
    text: str
    source: str
    created_at: str
    expires_at: str | None
    key: str | None
    metadata: str | None  # JSON text, as both engines give it
    updated_at: str | None
    version: int | None  # None: 1 (written before versions were kept)
    valid_from: str | None  # None: since always
    valid_to: str | None  # None: still

    @property
    def current_version(self) -> int:
        return self.version or 1

    def expect_version(self, expected: int | None) -> None:
        """VersionConflict unless the memory is at `expected` (None: any version)."""
        if expected is not None and expected != self.current_version:
            raise VersionConflict(self.current_version, expected, "the memory")

    def fields(self) -> _Fields:
        return _Fields(id=self.id, level=_level_of(self.task_id), text=self.text,
                       source=self.source, created_at=self.created_at)

    def record(self) -> dict[str, Any]:
        """A memory with a key or metadata carries both and updated_at; one with neither
        has the seed's keys alone."""
        if self.key is None and self.metadata is None:
            return {}
        return {"key": _key_of(self.key), "metadata": _metadata_of(self.metadata),
                "updated_at": self.updated_at, "version": self.current_version}

    def window(self) -> dict[str, Any]:
        """A memory with a window of validity carries both its ends (None: open)."""
        if self.valid_from is None and self.valid_to is None:
            return {}
        return {"valid_from": self.valid_from, "valid_to": self.valid_to}

    def valid_at(self, instant: str | None) -> bool:
        """Whether what the memory says held at `instant` (None: at any time)."""
        return instant is None or ((self.valid_from is None or self.valid_from <= instant)
                                   and (self.valid_to is None or instant < self.valid_to))

    def memory(self) -> Memory:
        return cast(Memory, {**self.fields(), "expires_at": self.expires_at, **self.record(),
                             **self.window()})

    def recalled(self, score: float) -> Recalled:
        # `why` is for explain
        return cast(Recalled, {**self.fields(), "score": score, **self.record(),
                               **self.window()})


_MEMORY_COLUMNS = ", ".join(_MemoryRow._fields)
# The memory of an owner (the user level: task_id NULL) that holds a key, live or not;
# the owner named again as the key index has it, so that the look-up is its descent.
_SQL_KEYED = _sql(
    f"SELECT {_MEMORY_COLUMNS} FROM memories {_IN_SCOPE} AND task_id IS ?"
    " AND ifnull(task_id, '') = ? AND key = ?",
    postgresql=f"SELECT {_MEMORY_COLUMNS} FROM memories WHERE user_id = %s AND (task_id IS"
    " NULL OR task_id = %s) AND task_id IS NOT DISTINCT FROM %s AND coalesce(task_id, '')"
    " = %s AND key = %s",
    postgresql_each=_each_row(
        "user_id text, task_key text, task_id text, owner text, key text",
        f"SELECT {_MEMORY_COLUMNS} FROM memories {_IN_SCOPE_OF_WANTED} AND task_id IS NOT"
        " DISTINCT FROM"
        " wanted.task_id AND coalesce(task_id, '') = wanted.owner AND key = wanted.key"))
# The memories the scope sees that hold a key: its task's, then the user level's.
_SQL_VISIBLE_KEY = _sql(
    f"SELECT {_MEMORY_COLUMNS} FROM memories {_IN_SCOPE}"
    " AND ifnull(task_id, '') IN ('', ?) AND key = ? ORDER BY task_id IS NULL",
    postgresql=f"SELECT {_MEMORY_COLUMNS} FROM memories WHERE user_id = %s AND (task_id IS"
    " NULL OR task_id = %s) AND coalesce(task_id, '') IN ('', %s) AND key = %s"
    " ORDER BY task_id IS NULL")
# The memories the scope sees under a key, its holders and past holders (_PAST_KEY): its
# task's, then the user level's, each owner's holder first, then its past holders newest
# first; one range of the key index.
_SQL_VISIBLE_KEY_HOLDERS = _sql(
    f"SELECT {_MEMORY_COLUMNS} FROM memories {_IN_SCOPE}"
    " AND ifnull(task_id, '') IN ('', ?) AND key >= ? AND key < ?"
    " ORDER BY task_id IS NULL, key > ?, id DESC",
    postgresql=f"SELECT {_MEMORY_COLUMNS} FROM memories WHERE user_id = %s AND (task_id IS"
    " NULL OR task_id = %s) AND coalesce(task_id, '') IN ('', %s) AND key >= %s AND key < %s"
    " ORDER BY task_id IS NULL, key > %s, id DESC")


def _key_holders(arguments: tuple[Any, ...]) -> tuple[str, tuple[Any, ...]]:
    """The read of a key's holder and earlier holders, for _SQL_VISIBLE_KEY's arguments."""
    key = arguments[-1]
    return _SQL_VISIBLE_KEY_HOLDERS, (*arguments, key + _PAST_KEYS_END, key)
# The scope's keyed memories from a key on, or after it (strictly), below another, in key
# order: a range of the key index. SQLite's index is (user, owner, key): one range for
# each owner (the owner a parameter). PostgreSQL's is (user, key, owner): one range for
# both, where an owner's filter would read the other's keys to find none (the parameter
# unused), a key's user level before its task, as the index holds them. The range is
# bounded above even where the keys are not (_ABOVE_EVERY_KEY): PostgreSQL's planner,
# without statistics, took an unbounded range for most of the table and read the scope
# whole, sorted (12 ms for 20 keys of 10,000, 66 ms of 100,000).
def _keys_in_range(after: bool) -> _Sql:
    bounds = f"key {'>' if after else '>='} ? AND key < ?"
    return _sql(
        f"SELECT {_MEMORY_COLUMNS} FROM memories {_IN_SCOPE} AND ifnull(task_id, '') = ?"
        f" AND {bounds} ORDER BY key LIMIT ?",
        postgresql=f"SELECT {_MEMORY_COLUMNS} FROM memories WHERE user_id = %s AND (task_id"
        " IS NULL OR task_id = %s) AND %s::text IS NOT NULL AND"
        f" {bounds.replace('?', '%s')} ORDER BY key, coalesce(task_id, '') LIMIT %s")


_SQL_KEYS_FROM_BELOW = _keys_in_range(after=False)
_SQL_KEYS_AFTER_BELOW = _keys_in_range(after=True)
# By whether the lower bound is left out.
_KEY_RANGES = {False: _SQL_KEYS_FROM_BELOW, True: _SQL_KEYS_AFTER_BELOW}
# A receipt of an operation done under an id (memory_receipts), read and recorded in the
# operation's own transaction; an owner's expired ones go as it records another.
_SQL_RECEIPT = _sql(
    "SELECT fingerprint, result, created_at, expires_at FROM memory_receipts"
    " WHERE user_id = ? AND task_key = ? AND operation = ?")
_SQL_RECORD_RECEIPT = _sql(
    "INSERT INTO memory_receipts (user_id, task_key, operation, fingerprint, result,"
    " created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (user_id, task_key,"
    " operation) DO UPDATE SET fingerprint = excluded.fingerprint, result = excluded.result,"
    " created_at = excluded.created_at, expires_at = excluded.expires_at")
_SQL_DROP_EXPIRED_RECEIPTS = _sql(
    "DELETE FROM memory_receipts WHERE user_id = ? AND task_key = ? AND expires_at <= ?")
_SQL_EXPIRED_RECEIPT_USERS = _sql(
    "SELECT DISTINCT user_id FROM memory_receipts WHERE expires_at <= ?")
_SQL_PURGE_RECEIPTS = _sql("DELETE FROM memory_receipts WHERE user_id = ? AND expires_at <= ?")
_SQL_ERASE_RECEIPTS = _sql("DELETE FROM memory_receipts WHERE user_id = ?")
_SQL_RENAME = _sql(
    f"UPDATE memories SET key = ?, version = ?, updated_at = ? {_IN_SCOPE} AND id = ?")
# A keyed memory a later fact moves into the past: its key kept as a past holder's, its
# window closed, at its next version.
_SQL_MOVE_TO_PAST = _sql(
    f"UPDATE memories SET key = ?, version = ?, updated_at = ?, valid_to = ? {_IN_SCOPE}"
    " AND id = ?")
# Whether the store keeps history: "on" once a store asked for it, "off" once one asked
# not to (what was kept stays until its memory goes), none before.
_SQL_HISTORY = _sql("SELECT value FROM store_settings WHERE name = 'history'")
_SQL_SET_HISTORY = _sql(
    "INSERT OR REPLACE INTO store_settings (name, value) VALUES ('history', ?)",
    postgresql="INSERT INTO store_settings (name, value) VALUES ('history', %s)"
    " ON CONFLICT (name) DO UPDATE SET value = excluded.value")
# A memory's vector (NULL: it has none), read beside the memory's row.
_ITS_VECTOR = ("(SELECT vector FROM memory_vectors WHERE user_id = memories.user_id"
               " AND id = memories.id)")
# Memories of the scope kept as superseded versions, with their vectors, before they go:
# each under itself as head until its successor is written (_SQL_LINK_SUCCESSOR), which
# gives superseded_at unless the call did (a rename, which keeps the id).
_SQL_KEEP_SUPERSEDED = _sql(
    "INSERT INTO memory_history (user_id, head_id, version, id, task_id, key, text, source,"
    " created_at, updated_at, expires_at, metadata, embed, vector, superseded_at,"
    " valid_from, valid_to)"
    " SELECT user_id, id, coalesce(version, 1), id, task_id, key, text, source, created_at,"
    f" updated_at, expires_at, metadata, embed, {_ITS_VECTOR}, CAST(? AS TEXT), valid_from,"
    " valid_to"
    f" FROM memories NOT INDEXED {_IN_SCOPE} AND id IN (SELECT value FROM json_each(?))")
# A memory's versions move to its successor, superseded when the successor was written.
_SQL_LINK_SUCCESSOR = _sql(
    "UPDATE memory_history SET head_id = ?, superseded_at = coalesce(superseded_at, (SELECT"
    f" coalesce(updated_at, created_at) FROM memories NOT INDEXED {_IN_SCOPE} AND id = ?))"
    f" {_IN_SCOPE} AND head_id = ?")
# A memory that goes takes its past with it: every version it leads.
_SQL_FORGET_HISTORY = _sql(
    f"DELETE FROM memory_history {_IN_SCOPE} AND head_id IN (SELECT value FROM json_each(?))")
_SQL_DELETE_HISTORY_OF_USER = _sql(
    "DELETE FROM memory_history WHERE user_id = ? AND head_id IN (SELECT value FROM"
    " json_each(?))")
_SQL_ERASE_HISTORY = _sql("DELETE FROM memory_history WHERE user_id = ?")
# What reindex(embedder=) embeds each version from, and its new vector: its text, as its
# `embed` says, and no longer the caller's.
_SQL_OWNED_VERSION_EMBEDS = _sql(
    "SELECT head_id, version, text, embed FROM memory_history WHERE user_id = ?"
    " ORDER BY head_id, version")
_SQL_EMBED_VERSION = _sql(
    "UPDATE memory_history SET vector = ?, embed = NULLIF(embed, ?)"
    " WHERE user_id = ? AND head_id = ? AND version = ?")
# An imported record's versions (import_memories), under the memory written for it.
_SQL_INSERT_VERSION = _sql(
    "INSERT INTO memory_history (user_id, head_id, version, id, task_id, key, text, source,"
    " created_at, updated_at, expires_at, metadata, embed, vector, superseded_at,"
    " valid_from, valid_to) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
    postgresql="INSERT INTO memory_history (user_id, head_id, version, id, task_id, key,"
    " text, source, created_at, updated_at, expires_at, metadata, embed, vector,"
    " superseded_at, valid_from, valid_to) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s,"
    " %s, %s::jsonb, %s, %s, %s, %s, %s)")
# A version as a memory reads (_MemoryRow), with the live memory it leads to, when it was
# superseded and its vector.
_PAST_COLUMNS = f"{_MEMORY_COLUMNS}, head_id, superseded_at, vector, embed"
_SQL_HISTORY_OF = _sql(
    f"SELECT {_PAST_COLUMNS} FROM memory_history {_IN_SCOPE} AND head_id = ? ORDER BY version")
_SQL_HEAD_OF = _sql(f"SELECT head_id FROM memory_history {_IN_SCOPE} AND id = ?")
# What an as-of read picks from: the scope's versions, and its memories with their vectors.
_SQL_SCOPE_HISTORY = _sql(
    f"SELECT {_PAST_COLUMNS} FROM memory_history {_IN_SCOPE} ORDER BY head_id, version")
_SQL_VISIBLE_WITH_VECTORS = _sql(
    f"SELECT {_MEMORY_COLUMNS}, {_ITS_VECTOR} FROM memories {_IN_SCOPE} ORDER BY id")
_SQL_OWNED_HISTORY = _sql(
    f"SELECT {_PAST_COLUMNS} FROM memory_history WHERE user_id = ? ORDER BY head_id, version")
# The scope's memories that are no longer live, from the expiry index alone (it holds
# task_id, and id is the rowid): few, since writes and purge_expired() delete them, and
# returned as one JSON array, since a row apiece costs more than the lookup. On
# PostgreSQL the range is bounded on both sides (every expiry is an instant's text, a
# digit first): before it had statistics, it took a one-sided one for a third of the
# index and read the scope's every row through the scope index instead (2.3 ms a
# LangGraph get at 10,000 items, its every row filtered; 0.02 ms the range).
_EXPIRED_BY = "expires_at <= ?"
_PG_EXPIRED_BY = f"expires_at > '' AND {_EXPIRED_BY}"
_SQL_EXPIRED = _sql(
    f"SELECT json_group_array(id) FROM memories {_IN_SCOPE} AND {_EXPIRED_BY}",
    postgresql=_postgres_form("SELECT coalesce(json_agg(id), '[]')::text FROM memories"
                              f" {_IN_SCOPE} AND {_PG_EXPIRED_BY}"))
# The scope's memories a read at a time leaves out: expired, or whose windows leave the
# time out (closed by then, or not open yet); a range of each of the three indexes, their
# ids returned as _SQL_EXPIRED returns its own, or counted. Each window's range is bounded
# on both sides (every end is an instant's text, a digit first): PostgreSQL, before it has
# statistics, takes a one-sided range for a third of the index and read the scope's every
# row instead (40 ms at 100,000 memories), where a closed range is a few of its entries.
_UNSEEN = (f"SELECT id FROM memories {_IN_SCOPE} AND {_EXPIRED_BY} UNION SELECT id FROM"
           f" memories {_IN_SCOPE} AND valid_to > '' AND valid_to <= ? UNION SELECT id FROM"
           f" memories {_IN_SCOPE} AND valid_from > ? AND valid_from < 'A'")
_PG_UNSEEN = _postgres_form(_UNSEEN.replace(_EXPIRED_BY, _PG_EXPIRED_BY))
_SQL_UNSEEN = _sql(
    f"SELECT json_group_array(id) FROM ({_UNSEEN})",
    postgresql=f"SELECT coalesce(json_agg(id), '[]')::text FROM ({_PG_UNSEEN}) AS unseen")
_SQL_UNSEEN_COUNT = _sql(f"SELECT count(*) FROM ({_UNSEEN}) AS unseen",
                         postgresql=f"SELECT count(*) FROM ({_PG_UNSEEN}) AS unseen")
_SQL_ANY_WINDOW = _sql(
    f"SELECT 1 FROM memories {_IN_SCOPE} AND valid_to IS NOT NULL UNION ALL SELECT 1 FROM"
    f" memories {_IN_SCOPE} AND valid_from IS NOT NULL LIMIT 1")
_SQL_EXPIRED_COUNT = _sql(
    f"SELECT count(*) FROM memories {_IN_SCOPE} AND {_EXPIRED_BY}",
    postgresql=_postgres_form(f"SELECT count(*) FROM memories {_IN_SCOPE} AND {_PG_EXPIRED_BY}"))
_SQL_ANY_EXPIRING = _sql(
    f"SELECT 1 FROM memories {_IN_SCOPE} AND expires_at IS NOT NULL LIMIT 1")
_SQL_EXPIRED_ROWS = _sql(
    f"SELECT {_MEMORY_COLUMNS} FROM memories {_IN_SCOPE} AND expires_at <= ?"
    " ORDER BY expires_at, id LIMIT ?",
    postgresql_each=_each_row(
        "user_id text, task_key text, due text, most bigint",
        f"SELECT {_MEMORY_COLUMNS} FROM memories {_IN_SCOPE_OF_WANTED}"
        " AND expires_at <= wanted.due"
        " ORDER BY expires_at, id LIMIT wanted.most"))
_SQL_EXPIRED_OF_USER = _sql(
    f"SELECT {_MEMORY_COLUMNS} FROM memories WHERE user_id = ? AND expires_at <= ?")
_SQL_DELETE_OF_USER = _sql(
    "DELETE FROM memories NOT INDEXED WHERE user_id = ? AND id IN (SELECT value FROM json_each(?))"
)
_SQL_COUNT = _sql(
    "SELECT coalesce(sum(memories), 0) FROM memory_counts WHERE user_id = ? AND task_key IN"
    " ('', ?)",
    postgresql="SELECT coalesce(sum(memories), 0)::bigint FROM memory_counts WHERE user_id = %s"
    " AND task_key IN ('', %s)")
_SQL_COUNT_ADD = _sql(
    "INSERT INTO memory_counts (user_id, task_key, memories, weight) VALUES (?, ?, ?, ?)"
    " ON CONFLICT (user_id, task_key) DO UPDATE SET memories = memories + excluded.memories,"
    " weight = weight + excluded.weight",
    postgresql="INSERT INTO memory_counts (user_id, task_key, memories, weight)"
    " VALUES (%s, %s, %s, %s) ON CONFLICT (user_id, task_key) DO UPDATE"
    " SET memories = memory_counts.memories + excluded.memories,"
    " weight = memory_counts.weight + excluded.weight",
    # Its rows' keys are distinct (ON CONFLICT may not meet one row twice).
    postgresql_many="INSERT INTO memory_counts (user_id, task_key, memories, weight) "
    + _from_arrays("text", "text", "bigint", "bigint")
    + " ON CONFLICT (user_id, task_key) DO UPDATE"
    " SET memories = memory_counts.memories + excluded.memories,"
    " weight = memory_counts.weight + excluded.weight")
# How many memories one owner holds (user level: task_key '') and what they weigh, and
# each of a scope's two owners'.
_SQL_OWNER_COUNT = _sql(
    "SELECT memories, weight FROM memory_counts WHERE user_id = ? AND task_key = ?")
_SQL_SCOPE_COUNTS = _sql(
    "SELECT task_key, memories, weight FROM memory_counts WHERE user_id = ?"
    " AND task_key IN ('', ?)",
    postgresql_each=_each_row(
        "user_id text, task_key text",
        "SELECT task_key, memories, weight FROM memory_counts WHERE user_id = wanted.user_id"
        " AND task_key IN ('', wanted.task_key)"))
# A file from before the weights, opened read-only: an owner's weight was its count.
_SQL_SCOPE_COUNTS_UNWEIGHED = _sql(
    "SELECT task_key, memories, memories FROM memory_counts WHERE user_id = ?"
    " AND task_key IN ('', ?)")
_SQL_COUNT_SUBTRACT = _sql(
    "UPDATE memory_counts SET memories = memories - ?, weight = weight - ? WHERE user_id = ?"
    " AND task_key = ?"
)
# Each owner of the user weighed (the upgrade that adds the weights): what _weight gives.
_SQL_WEIGH_OWNERS = _sql(
    f"UPDATE memory_counts SET weight = (SELECT coalesce(sum(1 + (length(text) - 1)"
    f" / {_WEIGHED_BY:d}), 0) FROM memories WHERE user_id = ? AND ifnull(task_id, '')"
    " = memory_counts.task_key) WHERE user_id = ?",
    postgresql=f"UPDATE memory_counts SET weight = (SELECT coalesce(sum(1 + (length(text) - 1)"
    f" / {_WEIGHED_BY:d}), 0) FROM memories WHERE user_id = %s AND coalesce(task_id, '')"
    " = memory_counts.task_key) WHERE user_id = %s")
# The user's owners the weights take to the index's threshold that their count did not.
_SQL_NEWLY_INDEXED = _sql(
    "SELECT task_key FROM memory_counts WHERE user_id = ? AND memories < ? AND weight >= ?"
    " ORDER BY task_key")
_SQL_COUNT_DROP_EMPTY = _sql(
    "DELETE FROM memory_counts WHERE user_id = ? AND task_key = ? AND memories <= 0"
)
_SQL_ERASE_COUNTS = _sql("DELETE FROM memory_counts WHERE user_id = ?")
# The user's owners (the user level, '', and each task it has memories in), for an
# upgrade that goes through each one's memories apart.
_SQL_TASKS_COUNTED = _sql("SELECT task_key FROM memory_counts WHERE user_id = ? ORDER BY task_key")
_SQL_MATCHING = _sql("SELECT value FROM store_settings WHERE name = 'matching'")
_SQL_SET_MATCHING = _sql(
    "INSERT OR REPLACE INTO store_settings (name, value) VALUES ('matching', ?)",
    postgresql="INSERT INTO store_settings (name, value) VALUES ('matching', %s)"
    " ON CONFLICT (name) DO UPDATE SET value = excluded.value")
# The embedder whose vectors the store holds: JSON {"name": ..., "dimensions": ...}.
_SQL_EMBEDDER = _sql("SELECT value FROM store_settings WHERE name = 'embedder'")
_SQL_SET_EMBEDDER = _sql(
    "INSERT OR REPLACE INTO store_settings (name, value) VALUES ('embedder', ?)",
    postgresql="INSERT INTO store_settings (name, value) VALUES ('embedder', %s)"
    " ON CONFLICT (name) DO UPDATE SET value = excluded.value")
# Recall's map of the query words' postings, one row per word (a row apiece costs more
# than the lookup): the first ids of its user-level rows, then of the task's (the scope
# lets in no other task), how many ids they hold, and whether every row is a whole run
# of int64 ids. The blobs stay in the database.
# Both statements read the query's words (a JSON list, the first parameter) one by one,
# each looked up under the scope by key: a query may hold thousands of words, and a list
# tested against each of the user's index rows would cost their product. On PostgreSQL
# the rows of each word are a lateral subquery (OFFSET 0 keeps it one), so that the plan
# cannot turn the list into a filter whatever the table's statistics say; SQLite looks
# the words of a table up by key, and reads them in key order (GROUP BY needs no sort).
# SQLite's statements name the words first too, as a table it looks each up from.
_WANTED_WORDS = "WITH wanted (word) AS (SELECT value FROM json_each(?))"
_SCOPED_WORD_ROWS_PG = (
    "FROM jsonb_array_elements_text(%s::jsonb) AS wanted (listed), LATERAL (SELECT word,"
    " first_id, task_id, ids FROM memory_words WHERE user_id = %s AND (task_id IS NULL OR"
    " task_id = %s) AND word = wanted.listed OFFSET 0) AS found"
)
_SQL_POSTINGS_MAP = _sql(
    f"{_WANTED_WORDS} SELECT word, json_group_array(first_id) FILTER (WHERE task_id IS NULL),"
    " json_group_array(first_id) FILTER (WHERE task_id IS NOT NULL), sum(length(ids)) / 8,"
    " min(typeof(ids) = 'blob' AND length(ids) % 8 = 0)"
    f" FROM memory_words {_IN_SCOPE} AND word IN wanted GROUP BY word",
    postgresql="SELECT word,"
    " coalesce(json_agg(first_id) FILTER (WHERE task_id IS NULL), '[]')::text,"
    " coalesce(json_agg(first_id) FILTER (WHERE task_id IS NOT NULL), '[]')::text,"
    " (sum(length(ids)) / 8)::bigint, bool_and(length(ids) %% 8 = 0)::int"
    f" {_SCOPED_WORD_ROWS_PG} GROUP BY word")
# A postings row's ids, or NULL where they are not a run of whole ids (so that joining
# a word's rows fails as reading one does).
_SOUND_IDS = "CASE WHEN typeof(ids) = 'blob' AND length(ids) % 8 = 0 THEN ids END"
_SOUND_IDS_PG = "CASE WHEN length(ids) %% 8 = 0 THEN ids END"
# All rows of the query words.
_SQL_POSTINGS = _sql(
    f"{_WANTED_WORDS} SELECT word, first_id, {_SOUND_IDS} FROM memory_words {_IN_SCOPE}"
    " AND word IN wanted",
    postgresql=f"SELECT word, first_id, {_SOUND_IDS_PG} {_SCOPED_WORD_ROWS_PG}")
# One query word's rows, each one column: for a common word's thousand rows, half the
# time of the three columns of the query's rows in one statement.
_SQL_WORD_POSTINGS = _sql(
    f"SELECT {_SOUND_IDS} FROM memory_words {_IN_SCOPE} AND word = ?",
    postgresql=f"SELECT {_SOUND_IDS_PG} FROM memory_words {_IN_SCOPE_PG} AND word = %s",
    postgresql_each=_each_row(
        "user_id text, task_key text, word text",
        f"SELECT {_SOUND_IDS_PG} FROM memory_words {_IN_SCOPE_OF_WANTED}"
        " AND word = wanted.word"))
# The rows recall needs, by key: one statement a round, its (word, first id) pairs a
# JSON list walked first, each pair one look-up of the primary key (on PostgreSQL a
# lateral subquery, as above, or the plan may scan the user's whole index for them).
# Lists of words and of first ids would cost their product: a query may hold thousands.
_SQL_POSTINGS_ROWS = _sql(
    f"SELECT word, first_id, ids FROM json_each(?) CROSS JOIN memory_words {_IN_SCOPE}"
    " AND word = json_extract(value, '$[0]') AND first_id = json_extract(value, '$[1]')",
    postgresql="SELECT word, first_id, ids FROM jsonb_array_elements(%s::jsonb) AS wanted (pair),"
    f" LATERAL (SELECT word, first_id, ids FROM memory_words {_IN_SCOPE_PG}"
    " AND word = wanted.pair ->> 0 AND first_id ="
    " (wanted.pair ->> 1)::bigint OFFSET 0) AS found")
# Each listed memory the scope sees, with the ids of the live memories of its
# conversation the scope sees that come nearest before it and after it: twice the
# window each way, so that its neighbours' neighbours are among them too. Each side is
# one descent of the conversations' index; `now` is its last parameter. One JSON list
# of [id, [before...], [after...]] for all: a row apiece costs more than the descents.
_NEAREST = (
    "(SELECT {ids} FROM (SELECT id FROM memories " + _IN_SCOPE + " AND conversation ="
    " asked.conversation AND id {side} asked.id AND (expires_at IS NULL OR expires_at > ?)"
    f" ORDER BY id {{order}} LIMIT {2 * _CONTEXT_WINDOW:d}) AS nearest)")


def _around(listed: str, array: str, ids: str) -> str:
    sides = ", ".join(_NEAREST.format(ids=ids, side=side, order=order)
                      for side, order in (("<", "DESC"), (">", "ASC")))
    return (f"SELECT {listed.format(array=array.format(sides=sides))} FROM memories AS asked"
            f" NOT INDEXED {_IN_SCOPE} AND id IN (SELECT value FROM json_each(?))")


_SQL_AROUND = _sql(
    _around("json_group_array({array})", "json_array(id, {sides})",
            "json(json_group_array(id))"),
    postgresql=_postgres_form(_around("coalesce(json_agg({array}), '[]')::text",
                                      "json_build_array(id, {sides})",
                                      "coalesce(json_agg(id), '[]')")))
# NOT INDEXED: look the few ids up by primary key rather than walk the user's index range.
_SQL_RECALLED = _sql(
    f"SELECT {_MEMORY_COLUMNS} FROM memories NOT INDEXED {_IN_SCOPE}"
    " AND id IN (SELECT value FROM json_each(?))"
)
# For each listed word, the first id and size in bytes of the newest row of its (user,
# word, task), or NULLs; no row at all for an owner that holds fewer memories than the
# last parameter (one whose words are not indexed): one statement for all the words a
# write holds, then one executemany to append. Two scalar subqueries, each an index
# descent per word, read the same in both dialects and leave the planner no join to
# choose. The bound on first_id, always true, keeps PostgreSQL's planner on the descent
# where the table has no statistics yet (a bulk load autovacuum has not analyzed): without
# it, it read and sorted every row of each word (2.4-3.5 ms a durable remember at 50,000
# memories of the user, against 1.4-1.7).
_NEWEST_ROW = (
    "SELECT {column} FROM memory_words WHERE user_id = {user} AND task_id IS {task}"
    f" AND word = value AND first_id <= {_MAX_ID} ORDER BY first_id DESC LIMIT 1"
)
_INDEXED_OWNER = (
    "EXISTS (SELECT 1 FROM memory_counts WHERE user_id = {user} AND task_key = {task_key}"
    " AND weight >= {least})")
_NEWEST_POSTINGS = (
    f"SELECT value, ({_NEWEST_ROW.format(column='first_id', user='?', task='?')}),"
    f" ({_NEWEST_ROW.format(column='length(ids)', user='?', task='?')}) FROM json_each(?)"
    f" WHERE {_INDEXED_OWNER.format(user='?', task_key='?', least='?')}"
)
_SQL_NEWEST_POSTINGS = _sql(
    _NEWEST_POSTINGS,
    postgresql=_postgres_form(_NEWEST_POSTINGS).replace(
        "FROM json_each(%s)", "FROM jsonb_array_elements_text(%s::jsonb) AS value"),
    # On PostgreSQL the task's condition cannot bound the index scan, and with it the
    # planner chose to read and sort every row of the word (a durable write's cost grew
    # with the user's store: 4 ms at 50,000 memories). The word's newest row of any of the
    # user's owners is one backward index step; only where it is another owner's is the
    # owner's own looked for (each bounded as _NEWEST_ROW is).
    postgresql_each=_each_row(
        "user_id text, task_id text, user_again text, task_again text, words text,"
        " counted_user text, task_key text, index_from bigint",
        "SELECT value, CASE WHEN mine THEN top.first_id ELSE own.first_id END,"
        " CASE WHEN mine THEN top.size ELSE own.size END"
        " FROM jsonb_array_elements_text(wanted.words::jsonb) AS value"
        " LEFT JOIN LATERAL (SELECT first_id, length(ids) AS size, task_id FROM memory_words"
        " WHERE user_id = wanted.user_id AND word = value"
        f" AND first_id <= {_MAX_ID} ORDER BY first_id DESC LIMIT 1)"
        " AS top ON true"
        " CROSS JOIN LATERAL (SELECT top.task_id IS NOT DISTINCT FROM wanted.task_id AS mine)"
        " AS whose"
        " LEFT JOIN LATERAL (SELECT first_id, length(ids) AS size FROM memory_words"
        " WHERE user_id = wanted.user_id AND task_id IS NOT DISTINCT FROM wanted.task_id"
        f" AND word = value AND first_id <= {_MAX_ID} AND NOT mine"
        " ORDER BY first_id DESC LIMIT 1) AS own ON true"
        " WHERE " + _INDEXED_OWNER.format(user="wanted.user_id", task_key="wanted.task_key",
                                          least="wanted.index_from")))
_SQL_APPEND_POSTINGS = _sql(
    "UPDATE memory_words SET ids = CAST(ids || ? AS BLOB)"
    " WHERE user_id = ? AND task_id IS ? AND word = ? AND first_id = ?",
    postgresql="UPDATE memory_words SET ids = ids || %s WHERE user_id = %s"
    " AND task_id IS NOT DISTINCT FROM %s AND word = %s AND first_id = %s",
    # All of a write's top-ups in one statement, from arrays: one a word cost the server
    # an update's planning and execution each (a durable remember's ten words, 2 ms).
    postgresql_many="UPDATE memory_words SET ids = ids || given.more FROM unnest(%b::bytea[],"
    " %b::text[], %b::text[], %b::text[], %b::bigint[]) AS given (more, owner, task, listed,"
    " first) WHERE user_id = given.owner AND task_id IS NOT DISTINCT FROM given.task"
    " AND word = given.listed AND first_id = given.first")
_SQL_INSERT_POSTINGS = _sql(
    "INSERT INTO memory_words (user_id, word, first_id, task_id, ids) VALUES (?, ?, ?, ?, ?)",
    postgresql_many="INSERT INTO memory_words (user_id, word, first_id, task_id, ids) "
    + _from_arrays("text", "text", "bigint", "text", "bytea"))
_SQL_VISIBLE = _sql(f"SELECT {_MEMORY_COLUMNS} FROM memories {_IN_SCOPE} ORDER BY id")
# A page of them: after an id, at most so many (enough more that the expired among them,
# which the caller leaves out, cannot make the page short).
_SQL_VISIBLE_ID = _sql(f"SELECT {_MEMORY_COLUMNS} FROM memories {_IN_SCOPE} AND id = ?")
# What a memory was embedded from, and its vectors: what a revise keeping its text keeps.
_SQL_EMBEDDED_AS = _sql(f"SELECT embed, {_ITS_VECTOR} FROM memories {_IN_SCOPE} AND id = ?")
# By their ids: SQLite's planner would walk every row of the user in another index.
_SQL_VISIBLE_IDS = _sql(f"SELECT {_MEMORY_COLUMNS} FROM memories NOT INDEXED {_IN_SCOPE}"
                        " AND id IN (SELECT value FROM json_each(?)) ORDER BY id")
# A page between two ids, oldest or newest first.
_SQL_VISIBLE_BETWEEN = _sql(f"SELECT {_MEMORY_COLUMNS} FROM memories {_IN_SCOPE}"
                            " AND id > ? AND id < ? ORDER BY id LIMIT ?")
_SQL_VISIBLE_DOWN = _sql(f"SELECT {_MEMORY_COLUMNS} FROM memories {_IN_SCOPE}"
                         " AND id > ? AND id < ? ORDER BY id DESC LIMIT ?")
_SQL_VISIBLE_SOURCE = _sql(
    f"SELECT {_MEMORY_COLUMNS} FROM memories {_IN_SCOPE} AND source = ?")
# The scope's memories of one conversation (their sources up to the last "/"), or a page.
_SQL_VISIBLE_CONVERSATION = _sql(
    f"SELECT {_MEMORY_COLUMNS} FROM memories {_IN_SCOPE} AND conversation = ? AND id > ?"
    " ORDER BY id LIMIT ?")
_SQL_CONVERSATION_BETWEEN = _sql(
    f"SELECT {_MEMORY_COLUMNS} FROM memories {_IN_SCOPE} AND conversation = ? AND id > ?"
    " AND id < ? ORDER BY id LIMIT ?")
_SQL_CONVERSATION_DOWN = _sql(
    f"SELECT {_MEMORY_COLUMNS} FROM memories {_IN_SCOPE} AND conversation = ? AND id > ?"
    " AND id < ? ORDER BY id DESC LIMIT ?")
# One owner's memories, under the scope of the owner's task (user level: '', no task's).
_SQL_OWNER_TEXTS = _sql(
    f"SELECT id, text, created_at FROM memories {_IN_SCOPE} AND task_id IS ? ORDER BY id",
    postgresql_each=_each_row(
        "user_id text, task_key text, task_id text",
        f"SELECT id, text, created_at FROM memories {_IN_SCOPE_OF_WANTED}"
        " AND task_id IS NOT DISTINCT FROM"
        " wanted.task_id"
        " ORDER BY id"))
_SQL_OWNED = _sql(
    f"SELECT {_MEMORY_COLUMNS}, embed FROM memories WHERE user_id = ? ORDER BY id")
# The vectors of some of the user's memories, those its callers gave, for export.
_SQL_OWNED_VECTORS = _sql(
    "SELECT id, vector FROM memory_vectors WHERE user_id = ?"
    " AND id IN (SELECT value FROM json_each(?))")
# What reindex(embedder=) leaves of vectors a caller gave: memories embedded from their
# texts, as any other.
_SQL_EMBEDDED_ANEW = _sql("UPDATE memories SET embed = NULL WHERE user_id = ? AND embed = ?")
_SQL_OWNED_TEXTS = _sql(
    "SELECT id, user_id, task_id, text, created_at FROM memories WHERE user_id = ?"
    " ORDER BY id")
# What reindex(embedder=) embeds each memory from: its text, as its `embed` says.
_SQL_OWNED_EMBEDS = _sql(
    "SELECT id, user_id, task_id, text, embed FROM memories WHERE user_id = ? ORDER BY id")
_SQL_FORGET = _sql(
    f"DELETE FROM memories NOT INDEXED {_IN_SCOPE} AND id IN (SELECT value FROM json_each(?))"
)
_SQL_ERASE = _sql("DELETE FROM memories WHERE user_id = ?")
# A new expiry for some live memories of the scope; nothing else of theirs changes.
_SQL_RENEW = _sql(
    f"UPDATE memories SET expires_at = ? {_IN_SCOPE} AND id IN (SELECT value FROM json_each(?))"
    " AND (expires_at IS NULL OR expires_at > ?)")
# Vectors are memory data: written with their memory, deleted in its transaction, read
# under the scope.
_SQL_INSERT_VECTORS = _sql(
    "INSERT INTO memory_vectors (id, user_id, task_id, vector) VALUES (?, ?, ?, ?)",
    postgresql_many="INSERT INTO memory_vectors (id, user_id, task_id, vector) "
    + _from_arrays("bigint", "text", "text", "bytea"))
# The scope's memories by conversation, each one's in write order (the conversations'
# index holds it all): what recall with context scores over at once, with numpy.
_SQL_SCOPE_CONVERSATIONS = _sql(
    f"SELECT id, conversation FROM memories {_IN_SCOPE} ORDER BY conversation, id")


def _each_owner_after(select: str, between: str, end: str = "") -> str:
    """`select` of the scope's rows with ids above a kept copy's newest, each owner's
    apart (so that each is a range of its scope index), the two joined by `between`."""
    owner = f"{select} WHERE user_id = ? AND task_id {{task}} AND id > ?"
    return f"{owner.format(task='IS NULL')} {between} {owner.format(task='= ?')}{end}"


# How many of the scope's memories were written after a kept copy's newest id, and those
# memories' places and vectors: where the scope's counts grew by exactly as many, nothing
# else changed, and a kept copy gains them.
_SQL_SCOPE_WRITTEN_AFTER = _sql(
    f"SELECT ({_each_owner_after('SELECT count(*) FROM memories', ') + (', ')')}")
_SQL_SCOPE_CONVERSATIONS_AFTER = _sql(_each_owner_after(
    "SELECT id, conversation FROM memories", "UNION ALL", " ORDER BY id"))
_SQL_SCOPE_VECTORS_AFTER = _sql(_each_owner_after(
    "SELECT id, vector FROM memory_vectors", "UNION ALL", " ORDER BY id"))


def _owner_forms(sql: str, postgresql: str | None = None) -> tuple[_Sql, _Sql]:
    """A statement of one owner's rows (`task_id {task}`), for the user level and for a
    task: apart, so that each is a range of an index under the user. `postgresql`, in
    SQLite's dialect, is the PostgreSQL form where the two planners need each its own."""
    def of(task: str) -> _Sql:
        if postgresql is None:
            return _sql(sql.format(task=task))
        return _sql(sql.format(task=task), postgresql=_postgres_form(postgresql.format(task=task)))
    return of("IS NULL"), of("= ?")


def _in_owner_order(sql: str) -> str:
    """An owner's statement ordered by the task first, for PostgreSQL: its planner does
    not take `task_id IS NULL` for an equality under which the scope's index is in id
    order, and walked the user's primary key instead, past every task's memory (a page
    of the user level, none there, 32 ms among 100,000 of a task). Within one owner the
    order is the same."""
    return re.sub(r"ORDER BY (\w+)( DESC)?", r"ORDER BY task_id\2, \1\2", sql)


def _of_owner(user: str, task: str | None, of_user: _Sql, of_task: _Sql
              ) -> tuple[_Sql, tuple[str, ...]]:
    """The owner's statement of the two _owner_forms, and the parameters naming it."""
    return (of_user, (user,)) if task is None else (of_task, (user, task))


# An owner's newest memories down from an id: each owner's a backward range of the scope
# index, where the scope's two owners read together were every row of both, sorted.
_OWNER_DOWN = (f"SELECT {_MEMORY_COLUMNS} FROM memories WHERE user_id = ? AND task_id {{task}}"
               " AND id > ? AND id < ? ORDER BY id DESC LIMIT ?")
_SQL_OWNER_DOWN, _SQL_TASK_DOWN = _owner_forms(_OWNER_DOWN, _in_owner_order(_OWNER_DOWN))
# And its oldest up from one: the scope's two owners read together were read whole and
# sorted (SQLite through the conversation index, PostgreSQL a BitmapOr).
_OWNER_UP = _OWNER_DOWN.replace(" DESC", "")
_SQL_OWNER_UP, _SQL_TASK_UP = _owner_forms(_OWNER_UP, _in_owner_order(_OWNER_UP))
# What an as-of page walks leaves out of its runs, of the rows that cannot have been live
# at the instant: expired by then, or (a time in the system clock's form, UTC to the
# second, whose text orders as its instant does) written after it or superseded by it.
# A time of another form is left to the instants' comparison (_live_at), which decides
# every row the runs give.
_WRITTEN_BY_THEN = (
    " AND (expires_at IS NULL OR expires_at > ?) AND NOT (coalesce(updated_at, created_at)"
    f" LIKE {_SYSTEM_FORM} AND substr(coalesce(updated_at, created_at), 1, 19) > ?)")
_SUPERSEDED_AFTER = (f" AND NOT (coalesce(superseded_at, '') LIKE {_SYSTEM_FORM}"
                     " AND substr(superseded_at, 1, 19) <= ?)")
# An owner's memories up or down from an id, those an as-of page may find live then.
def _live_run(order: str) -> tuple[_Sql, _Sql]:
    sql = (f"SELECT {_MEMORY_COLUMNS} FROM memories WHERE user_id = ? AND task_id {{task}}"
           f" AND id > ? AND id < ?{_WRITTEN_BY_THEN} ORDER BY {order} LIMIT ?")
    return _owner_forms(sql, _in_owner_order(sql))


_SQL_OWNER_THEN_UP, _SQL_TASK_THEN_UP = _live_run("id")
_SQL_OWNER_THEN_DOWN, _SQL_TASK_THEN_DOWN = _live_run("id DESC")
# An owner's versions whose memories are live now (expiring after the reading given, or
# never): those of one id or one key, each a descent of its index (version 14), and a run
# of them up or down from an id, a range of it, in the order an as-of read gives them (by
# id, then as each memory's versions follow on).
_THEN_COLUMNS = f"{_MEMORY_COLUMNS}, head_id, superseded_at"
_HEAD_LIVE = (" AND EXISTS (SELECT 1 FROM memories WHERE user_id = memory_history.user_id"
              " AND id = memory_history.head_id AND (expires_at IS NULL OR expires_at > ?))")
# PostgreSQL turns an EXISTS into a join, which without statistics read every memory of
# the user for each version (2 s for a page of 20 at 1,000 memories): a scalar subquery
# it keeps, one look-up in the primary key for each version the index gives.
_PG_HEAD_LIVE = (" AND (SELECT true FROM memories WHERE user_id = memory_history.user_id"
                 " AND id = memory_history.head_id AND (expires_at IS NULL OR expires_at > ?))")
# Without statistics, SQLite reads the user's whole primary key for an equality on an
# index's columns rather than the index (whose every entry then costs a look-up in the
# primary key): so the memories an id's or key's versions lead to are read from the
# index alone, then each one's versions by the primary key.
# PostgreSQL's planner, given the subquery, walked the user's primary key for the outer
# read (under row-level security, without statistics): there the read is the index's
# descent alone, its parameters those of SQLite's form.
def _versions_by(column: str) -> tuple[_Sql, _Sql]:
    return _owner_forms(
        f"SELECT {_THEN_COLUMNS} FROM memory_history WHERE user_id = ? AND task_id {{task}}"
        " AND head_id IN (SELECT head_id FROM memory_history WHERE user_id = ? AND task_id"
        f" {{task}} AND {column} = ?) AND {column} = ?{_HEAD_LIVE}",
        f"SELECT {_THEN_COLUMNS} FROM memory_history WHERE user_id = ? AND task_id {{task}}"
        f" AND user_id = ? AND task_id {{task}} AND {column} = ? AND {column} = ?"
        f"{_PG_HEAD_LIVE}")


_SQL_OWNER_PAST_OF_ID, _SQL_TASK_PAST_OF_ID = _versions_by("id")
_SQL_OWNER_PAST_OF_KEY, _SQL_TASK_PAST_OF_KEY = _versions_by("key")
# On SQLite a run is found in the index of ids alone, which holds every column its tests
# read (SQLite reads a row of the table for each entry of an index that does not, 1 µs
# each of the versions passed over), and then its versions are read by their primary
# key. PostgreSQL reads the table for each entry either way (until a vacuum marks its
# pages visible), and its planner, without statistics, joined the two the other way
# round: the run there is one range of the index, then the owner's rows of it.
def _past_run(order: str) -> tuple[_Sql, _Sql]:
    run = (" FROM memory_history WHERE user_id = ? AND task_id {task} AND id > ? AND id < ?"
           f"{_WRITTEN_BY_THEN}{_SUPERSEDED_AFTER}")
    return _owner_forms(
        f"SELECT {_THEN_COLUMNS} FROM (SELECT head_id AS run_head, version AS run_version"
        f"{run}{_HEAD_LIVE} ORDER BY {order} LIMIT ?) AS run"
        " CROSS JOIN memory_history WHERE user_id = ? AND task_id {task}"
        f" AND head_id = run_head AND version = run_version ORDER BY {order}",
        _in_owner_order(f"SELECT {_THEN_COLUMNS} FROM (SELECT user_id, {_THEN_COLUMNS}{run}"
                        f"{_PG_HEAD_LIVE} ORDER BY {order} LIMIT ?) AS run WHERE user_id = ?"
                        f" AND task_id {{task}} ORDER BY {order}"))


_SQL_OWNER_PAST_UP, _SQL_TASK_PAST_UP = _past_run("id, head_id, version")
_SQL_OWNER_PAST_DOWN, _SQL_TASK_PAST_DOWN = _past_run(
    "id DESC, head_id DESC, version DESC")
# What a recall as of an instant reads beside the index of words: the scope's memories
# that may have been written or replaced after it, and its versions that may have been live
# at it (written by then, superseded after it); of times in the system clock's form, only
# those, and of any other form every one, as _live_at decides. The versions of other forms
# are named by the index alone, then read by their primary key: SQLite without statistics
# read the user's primary key for them, every version.
# On PostgreSQL the versions' index of changes is two, each holding the times of one form:
# its planner took an index led by the user and the form for reads of one key's versions,
# where the index of keys serves (before statistics). So its form of the read tests a
# time's form as the predicate of each index does, which the planner must find in it.
# Those of other forms are told by a stored column (_PG_INDEX_CHANGES): under row-level
# security the planner reads no statistics for a LIKE (not leakproof) and guesses a NOT
# LIKE holds for nearly every row, so once the tables had statistics it read the scope
# whole for them (100 ms at 100,000 versions) rather than their index, most often empty.
_PG_WRITTEN_OTHERWISE = "written_otherwise"
_PG_SUPERSEDED_OTHERWISE = "superseded_otherwise"


def _changed_after(sql: str) -> _Sql:
    postgresql = sql.replace(f"{_SUPERSEDED_IN_SYSTEM_FORM} = true",
                             f"superseded_at LIKE {_SYSTEM_FORM}")
    postgresql = postgresql.replace(f"{_SUPERSEDED_IN_SYSTEM_FORM} = false",
                                    _PG_SUPERSEDED_OTHERWISE)
    postgresql = postgresql.replace(f"{_WRITTEN} NOT LIKE {_SYSTEM_FORM}",
                                    _PG_WRITTEN_OTHERWISE)
    return _sql(sql, postgresql=_postgres_form(postgresql))


_SQL_WRITTEN_AFTER = _changed_after(
    f"SELECT id, {_WRITTEN}, expires_at FROM memories {_IN_SCOPE} AND updated_at LIKE"
    f" {_SYSTEM_FORM} AND updated_at > ? UNION ALL SELECT id, {_WRITTEN}, expires_at FROM"
    f" memories {_IN_SCOPE} AND updated_at IS NULL AND created_at LIKE {_SYSTEM_FORM} AND"
    f" created_at > ? UNION ALL SELECT id, {_WRITTEN}, expires_at FROM memories"
    f" {_IN_SCOPE} AND {_WRITTEN} NOT LIKE {_SYSTEM_FORM}")
_SQL_LIVE_THROUGH = _changed_after(
    f"SELECT {_THEN_COLUMNS} FROM memory_history {_IN_SCOPE} AND {_SUPERSEDED_IN_SYSTEM_FORM}"
    f" = true AND superseded_at > ?{_WRITTEN_BY_THEN} UNION ALL SELECT {_THEN_COLUMNS} FROM"
    " (SELECT head_id AS other_head, version AS other_version FROM memory_history"
    f" {_IN_SCOPE} AND {_SUPERSEDED_IN_SYSTEM_FORM} = false) AS other CROSS JOIN"
    f" memory_history {_IN_SCOPE} AND head_id = other_head AND version = other_version"
    f"{_WRITTEN_BY_THEN}")

# An owner's versions of memories live now in a key range (its lower bound left out or
# not), those an as-of listing by key may find live then, in key order: a range of the
# index of keys (version 14). Of one key's, one at most was live at an instant, so their
# order among themselves is left to the index.
def _past_keys(op: str) -> tuple[_Sql, _Sql]:
    sql = (f"SELECT {_THEN_COLUMNS} FROM memory_history WHERE user_id = ? AND task_id {{task}}"
           f" AND key {op} ? AND key < ?{_WRITTEN_BY_THEN}{_SUPERSEDED_AFTER}{{live}}"
           " ORDER BY key LIMIT ?")
    return _owner_forms(sql.replace("{live}", _HEAD_LIVE),
                        _in_owner_order(sql.replace("{live}", _PG_HEAD_LIVE)))


_PAST_KEYS = {False: _past_keys(">="), True: _past_keys(">")}  # by whether strict


# A page's read of its next so many rows after the last it read (None: from its start).
_PageRead = Callable[[int, int | None], list[tuple[Any, ...]]]


def _valid_run(read: _PageRead, most: int | None, expired: set[int], valid: str | None
               ) -> list[_MemoryRow]:
    """The rows a page's reads give, but those `expired` and those not valid at `valid`,
    as many as `most` asks (None: all): read on past the last, twice as many each time,
    while too few were left, so that it costs the rows it passes over."""
    asked = _MAX_ID if most is None else min(_MAX_ID, most + len(expired))
    kept: list[_MemoryRow] = []
    last = None
    while True:
        rows = read(asked, last)
        kept += [row for row in map(_MemoryRow._make, rows)
                 if row.id not in expired and row.valid_at(valid)]
        if most is None or len(kept) >= most or len(rows) < asked:
            return kept
        last, asked = rows[-1][0], min(_MAX_ID, 2 * asked)


def _along_owners(db: _Session, key: _ScopeKey, after: int, before: int,
                 most: int, newest: bool = True) -> list[tuple[Any, ...]]:
    """The scope's `most` newest memories between two ids, newest first (or, not
    `newest`, its oldest, oldest first): each owner's read along its own range of the
    index, the two merged."""
    rows: list[tuple[Any, ...]] = []
    for task in (None, key.task):
        sql, owner = _of_owner(key.user, task, *((_SQL_OWNER_DOWN, _SQL_TASK_DOWN) if newest
                                                 else (_SQL_OWNER_UP, _SQL_TASK_UP)))
        rows += db.execute(sql, (*owner, after, before, most)).fetchall()
    rows.sort(key=operator.itemgetter(0), reverse=newest)
    return rows[:most]


# A scope's vectors, each owner's in id order: its sealed blocks (version 9) in order, and
# the rows no block holds, between and after them, each run of rows from its range of the
# scope index (no sort of the scope's rows), read a block at a time (_Session.blocks):
# where they do not fit the kept budget, recall scores them block by block, in memory of
# one block.
_SQL_OWNER_VECTORS_BETWEEN, _SQL_TASK_VECTORS_BETWEEN = _owner_forms(
    "SELECT id, vector FROM memory_vectors WHERE user_id = ? AND task_id {task}"
    " AND id > ? AND id < ? ORDER BY id")
_SQL_OWNER_VECTOR_BLOCKS, _SQL_TASK_VECTOR_BLOCKS = _owner_forms(
    "SELECT first_id, last_id, after_id, ids, vectors FROM memory_vector_blocks"
    " WHERE user_id = ? AND task_id {task} ORDER BY first_id")
# Where an owner's blocks are, for a deletion to find those holding its memories.
_SQL_OWNER_VECTOR_SPANS, _SQL_TASK_VECTOR_SPANS = _owner_forms(
    "SELECT first_id, last_id FROM memory_vector_blocks WHERE user_id = ? AND task_id {task}"
    " ORDER BY first_id")
# What a write seals: the end of the owner's newest block, and whether a block's worth of
# its vectors lies past it (counting no further).
_SQL_OWNER_UNSEALED, _SQL_TASK_UNSEALED = _owner_forms(
    "SELECT newest.last_id, (SELECT count(*) FROM (SELECT 1 FROM memory_vectors"
    " WHERE user_id = ? AND task_id {task} AND id > newest.last_id LIMIT ?) AS past)"
    " FROM (SELECT coalesce((SELECT last_id FROM memory_vector_blocks WHERE user_id = ?"
    " AND task_id {task} ORDER BY first_id DESC LIMIT 1), 0) AS last_id) AS newest")
_SQL_SEAL_VECTOR_BLOCK = _sql(
    "INSERT INTO memory_vector_blocks (first_id, user_id, task_id, last_id, after_id, ids,"
    " vectors) VALUES (?, ?, ?, ?, ?, ?, ?)")
_SQL_OWNER_DROP_VECTOR_BLOCKS, _SQL_TASK_DROP_VECTOR_BLOCKS = _owner_forms(
    "DELETE FROM memory_vector_blocks WHERE user_id = ? AND task_id {task}"
    " AND first_id IN (SELECT value FROM json_each(?))")
_SQL_ERASE_VECTOR_BLOCKS = _sql("DELETE FROM memory_vector_blocks WHERE user_id = ?")
_VECTOR_BLOCK_BYTES = 4 * 2**20
# How many bytes of vectors a sealed block holds, at most: few enough that a deletion
# drops (and a later write seals again) little, many enough that reading a blob costs
# little beside scoring it.
_SEALED_BLOCK_BYTES = 2**20
# The greatest id SQLite gives, the upper bound of an owner's rows past its last block.
_ID_LIMIT = 2**63 - 1
# How many rows of a scope a read that goes through all of them fetches at a time.
_ROWS_PER_READ = 10_000


def _owners_after(key: _ScopeKey, newest: int) -> tuple[Any, ...]:
    """The parameters of a statement of the scope's memories after `newest`, each owner's
    apart (_SQL_SCOPE_WRITTEN_AFTER and the two beside it)."""
    return (key.user, newest, key.user, key.task, newest)


# The scope's newest memory id, from two descents of the scope index: with the counts of
# memory_counts, what tells whether the scope changed. Ids are never given twice, so any
# write under the scope raises it and any deletion lowers a count (a store's kept copy of
# the scope is good while neither has changed, and grows where only writes changed them).
_NEWEST_OF_OWNER = "(SELECT max(id) FROM memories WHERE user_id = ? AND task_id {task})"
# PostgreSQL's planner does not take `task_id IS NULL` as fixing the index's second column,
# so it read every user-level id for their max (69 ms at 100,000 of them, on a table
# without statistics; with them, it walked the user's ids newest first to the first
# user-level one). Ordered by the index's columns, and bounded as _NEWEST_ROW is, each
# owner's newest id is one backward step.
_PG_NEWEST_OF_OWNER = ("(SELECT id FROM memories WHERE user_id = %s AND task_id {task}"
                       f" AND id <= {_MAX_ID} ORDER BY task_id DESC, id DESC LIMIT 1)")
_SQL_NEWEST_IN_SCOPE = _sql(
    "SELECT max(coalesce({}, 0), coalesce({}, 0))".format(
        _NEWEST_OF_OWNER.format(task="IS NULL"), _NEWEST_OF_OWNER.format(task="= ?")),
    postgresql="SELECT coalesce(greatest({}, {}), 0)".format(
        *(_PG_NEWEST_OF_OWNER.format(task=task) for task in ("IS NULL", "= %s"))))
_SQL_FORGET_VECTORS = _sql(
    f"DELETE FROM memory_vectors NOT INDEXED {_IN_SCOPE}"
    " AND id IN (SELECT value FROM json_each(?))")
_SQL_DELETE_VECTORS_OF_USER = _sql(
    "DELETE FROM memory_vectors NOT INDEXED WHERE user_id = ?"
    " AND id IN (SELECT value FROM json_each(?))")
_SQL_ERASE_VECTORS = _sql("DELETE FROM memory_vectors WHERE user_id = ?")
_SQL_ERASE_POSTINGS = _sql("DELETE FROM memory_words WHERE user_id = ?")
_SQL_DROP_OWNER_POSTINGS = _sql("DELETE FROM memory_words WHERE user_id = ? AND task_id IS ?")
# The rows of one (user, word, task) that may hold ids from lo up to hi: from the row
# holding lo (the greatest first_id at or below it) on. On PostgreSQL a deletion's words
# are asked, rewritten and dropped in a statement each for all of them: one apiece cost
# the driver and the server a round of work per word.
_SQL_POSTINGS_SPAN = _sql(
    "SELECT first_id, ids FROM memory_words WHERE user_id = ? AND task_id IS ? AND word = ?"
    " AND first_id BETWEEN coalesce((SELECT max(first_id) FROM memory_words WHERE user_id = ?"
    " AND task_id IS ? AND word = ? AND first_id <= ?), ?) AND ?",
    postgresql_each=_each_row(
        "user_id text, task_id text, word text, _user text, _task text, _word text,"
        " lo bigint, _lo bigint, hi bigint",
        "SELECT first_id, ids FROM memory_words WHERE user_id = wanted.user_id AND task_id"
        " IS NOT DISTINCT FROM wanted.task_id AND word = wanted.word AND first_id BETWEEN"
        " coalesce((SELECT max(first_id) FROM memory_words WHERE user_id = wanted.user_id"
        " AND task_id IS NOT DISTINCT FROM wanted.task_id AND word = wanted.word"
        " AND first_id <= wanted.lo), wanted.lo) AND wanted.hi"))
_SQL_REWRITE_POSTINGS = _sql(
    "UPDATE memory_words SET first_id = ?, ids = ?"
    " WHERE user_id = ? AND task_id IS ? AND word = ? AND first_id = ?",
    # A row's new first_id is an id of its own (user, word, task), so no other row of any
    # task holds it: no rewrite meets another's key.
    postgresql_many="UPDATE memory_words SET first_id = given.first, ids = given.kept FROM"
    " unnest(%b::bigint[], %b::bytea[], %b::text[], %b::text[], %b::text[], %b::bigint[])"
    " AS given (first, kept, owner, task, listed, was) WHERE user_id = given.owner"
    " AND task_id IS NOT DISTINCT FROM given.task AND word = given.listed"
    " AND first_id = given.was")
_SQL_DROP_POSTINGS = _sql(
    "DELETE FROM memory_words WHERE user_id = ? AND task_id IS ? AND word = ? AND first_id = ?",
    postgresql_many="DELETE FROM memory_words USING unnest(%b::text[], %b::text[], %b::text[],"
    " %b::bigint[]) AS given (owner, task, listed, first) WHERE user_id = given.owner"
    " AND task_id IS NOT DISTINCT FROM given.task AND word = given.listed"
    " AND first_id = given.first")
# The operator's aggregates: counts only, across users by design, so they are two of
# the four reads without the scope predicate (see _SQL_USERS, _SQL_EXPIRED_USERS). No
# call made for a user uses them.
_SQL_STATS = _sql("SELECT count(*), count(task_id), count(DISTINCT user_id) FROM memories")
_SQL_VECTOR_COUNT = _sql("SELECT count(*) FROM memory_vectors")
# Reindexing walks the users one by one, each under `WHERE user_id = `; finding them is
# the other read without the user filter, and it returns ids only.
_SQL_USERS = _sql("SELECT DISTINCT user_id FROM memory_counts")
# purge_expired() finds the users with expired memories, ids only, then deletes each
# user's under `WHERE user_id = `.
_SQL_EXPIRED_USERS = _sql("SELECT DISTINCT user_id FROM memories WHERE expires_at <= ?")

# -- SQLite's own statements -----------------------------------------------------------

_SQLITE_LAYOUT = (
    "SELECT (SELECT user_version FROM pragma_user_version), count(*) FROM sqlite_master")
_SQLITE_OBJECTS = "SELECT type, name, tbl_name, coalesce(sql, '') FROM sqlite_master"
_SQLITE_VERSION_1_COLUMNS = "SELECT name, upper(type), pk FROM pragma_table_info('memories')"
_SQLITE_VERSION = "PRAGMA user_version"
# Under the write lock the next ids are known, so a batch is one executemany. AUTOINCREMENT
# keeps sqlite_sequence at the largest id ever written, forgotten ones included; memories
# is the only table that can have a row there (memory_words has no rowid).
_SQLITE_LAST_ID = "SELECT coalesce(max(seq), 0) FROM sqlite_sequence"
_SQLITE_CHECKPOINT = "PRAGMA wal_checkpoint(TRUNCATE)"
_SQLITE_RESERVE_IDS = "UPDATE sqlite_sequence SET seq = ? WHERE name = 'memories'"
_SQLITE_FIRST_IDS = "INSERT INTO sqlite_sequence (name, seq) VALUES ('memories', ?)"
# A file from before version 8 opened read-only: its memories read as the newest layout's,
# with no key, metadata or embedding choice, and no metadata terms (temp objects, which
# a read-only connection may make, come before the file's under the same name).
_SQLITE_AS_RECORDS = (
    "CREATE TEMP VIEW memories AS SELECT *, NULL AS key, NULL AS metadata,"
    " NULL AS updated_at, NULL AS embed, NULL AS version, NULL AS valid_from,"
    " NULL AS valid_to FROM main.memories",
    "CREATE TEMP TABLE memory_fields (user_id TEXT NOT NULL, term TEXT NOT NULL,"
    " id INTEGER NOT NULL, task_id TEXT, PRIMARY KEY (user_id, term, id))",
)

# A file from version 8 to 10 opened read-only: its memories without versions.
_SQLITE_AS_VERSIONED = (
    "CREATE TEMP VIEW memories AS SELECT *, NULL AS version, NULL AS valid_from,"
    " NULL AS valid_to FROM main.memories",
)
# A file from version 11 to 14 opened read-only: its memories and versions without windows.
_SQLITE_AS_VALID = (
    "CREATE TEMP VIEW memories AS SELECT *, NULL AS valid_from, NULL AS valid_to"
    " FROM main.memories",
)
_SQLITE_AS_VALID_HISTORY = (
    "CREATE TEMP VIEW memory_history AS SELECT *, NULL AS valid_from, NULL AS valid_to"
    " FROM main.memory_history",
)

_log = logging.getLogger("memory")
_Row = TypeVar("_Row")
_Checked = TypeVar("_Checked")


# -- errors ----------------------------------------------------------------------------

class MemoryInputError(ValueError):
    """An invalid scope, level, text, source or limit; nothing was written."""

    def __init__(self, message: str, position: int | None = None) -> None:
        super().__init__(message)
        #: In a bulk call, the 0-based position of the first bad item.
        self.position = position


class StoreError(RuntimeError):
    """The store could not carry out the operation: closed, read-only, full or locked."""


class VersionConflict(StoreError):
    """An if_version did not match the version of the memory it named; nothing changed."""

    def __init__(self, current: int, expected: int, what: str = "the key") -> None:
        held = f"holds a live memory at version {current}" if current else \
            "holds no live memory (version 0)"
        super().__init__(f"{what} {held}, not version {expected}")
        self.current, self.expected = current, expected


class OperationConflict(StoreError):
    """An operation id was used before for a call with other arguments; nothing changed."""


class SchemaError(StoreError):
    """The file is not a memory store this code can read: foreign, newer or damaged."""


class StoreNotFound(StoreError):
    """create=False, and the path or database holds no memory store yet."""


class OutcomeUnknown(StoreError):
    """The connection broke after a write's COMMIT was sent: it may or may not be applied."""


class ConnectionLost(StoreError):
    """The connection to the server broke before the call's COMMIT: nothing was applied."""


# -- scope and validation --------------------------------------------------------------
# Messages name the parameter, the rule and the value's type and length, never the value:
# applications log exceptions, and a value in the wrong place may be a memory's text.

def _described(value: object) -> str:
    if isinstance(value, (str, bytes, bytearray)):
        return f"a {type(value).__name__} of length {len(value)}"
    return f"a value of type {type(value).__name__}"


@dataclasses.dataclass(frozen=True)
class Scope:
    """The authenticated user and the task of one request."""

    user: str
    task: str

    def __post_init__(self) -> None:
        _check_identifier("user", self.user)
        _check_identifier("task", self.task)


class _Fields(TypedDict):
    id: int
    level: Level
    text: str
    source: str
    created_at: str


class _Keyed(TypedDict, total=False):
    """What a memory with a key or metadata carries (both, None where it has one alone),
    with when it was last replaced and its version; a memory with neither has none of
    the four."""

    key: str | None
    metadata: dict[str, Any] | None
    updated_at: str
    version: int


class _Stored(_Fields):
    expires_at: str | None


class _Past(TypedDict, total=False):
    superseded_at: str | None


class _Window(TypedDict, total=False):
    valid_from: str | None
    valid_to: str | None


class Memory(_Stored, _Keyed, _Window, _Past):
    """A memory as `memories` and `get` return it: expires_at is None for never; one with
    a window of validity has valid_from and valid_to (None: open at that end). As
    `history` gives it, with its version and superseded_at: when the next version was
    written (None: it is the live one)."""


class _Matched(TypedDict):
    matched: dict[str, float]


class Why(_Matched, total=False):
    """Why recall(..., explain=True) found a memory: `matched`, each query word (in the
    rule's form) the memory holds, in sorted order, with what it added to the score (1
    under the shared rank, its weight under idf); they add up to the score. With
    context, `lent` too: each neighbour that matched, by id ascending, with what it
    added; the two add up to the score. By meaning (ranks "meaning" and "hybrid" with an
    embedder), `meaning` too: the cosine of the memory's vector with the query's (0 for
    a memory without one). Under "meaning" it is the score, and `matched` is what the
    words would add by the shared rank; under "hybrid", the score is `meaning` plus
    _HYBRID_WORDS times the words' evidence over `question`, the weight of all the
    query's words: the evidence is the sum of `matched` where at least two of its words
    weigh _INFORMATIVE or more (else 0), plus `lent` (each neighbour's evidence times its
    weight). Reordered by a reranker, `ranked` too: the rank's score, which the others
    add up to, where the score is the reranker's."""

    lent: dict[int, float]
    meaning: float
    question: float
    ranked: float


class _Scored(_Fields):
    score: float


# A base of its own for the key only explain gives: Python 3.11 cannot see NotRequired in
# a postponed annotation, and a TypedDict's totality is seen.
class _Explained(TypedDict, total=False):
    why: Why


class Recalled(_Scored, _Explained, _Keyed, _Window):
    """A memory as `recall` returns it, with its score: distinct words shared with the
    query (rank "shared"), or their summed rarity (rank "idf"); with explain, `why`."""


class _RecordOptions(TypedDict, total=False):
    key: str | None
    metadata: dict[str, Any] | None
    updated_at: str
    version: int
    valid_from: str | None
    valid_to: str | None
    past_holder: bool
    embed: bool | list[str]
    vectors: list[list[float]]
    history: list[dict[str, Any]]


class _RecordFields(TypedDict):
    id: int
    user: str
    task: str | None
    level: Level
    text: str
    source: str
    created_at: str
    expires_at: str | None


class Record(_RecordFields, _RecordOptions):
    """A memory as `export_user` writes it and `import_memories` reads it: task None at
    user level, expires_at None for never; a keyed memory, or one with metadata, has
    key, metadata, updated_at and version too, one not embedded from its text `embed`,
    one whose vectors its caller gave `vectors`, and one with superseded versions kept
    (history=True) its version and `history`: those versions, oldest first, each as its
    own record of the same owner would be, with superseded_at and version."""


def _check_identifier(name: str, value: object) -> str:
    # An exact str: a subclass could compare or hash unlike the text SQLite is given.
    if type(value) is not str or IDENTIFIER.fullmatch(value) is None:
        raise MemoryInputError(
            f"{name} must be a str matching {IDENTIFIER.pattern!r}, got {_described(value)}"
        )
    return value


def _check_text(name: str, value: object, longest: int, blank: bool = False) -> str:
    if not isinstance(value, str):
        raise MemoryInputError(f"{name} must be a str, got {_described(value)}")
    if len(value) > longest:
        raise MemoryInputError(f"{name} is {len(value)} characters, longer than {longest}")
    if not blank and (not value or value.isspace()):
        raise MemoryInputError(f"{name} must not be blank")
    if "\x00" in value:
        raise MemoryInputError(f"{name} must not contain NUL characters")
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise MemoryInputError(f"{name} is not valid Unicode (a lone surrogate)") from None
    return value


def _check_timestamp(name: str, value: object) -> str:
    """A clock reading or an imported created_at: what datetime.fromisoformat reads."""
    _check_text(name, value, 64)
    assert isinstance(value, str)
    try:
        datetime.fromisoformat(value)
    except ValueError:
        raise MemoryInputError(
            f"{name} must be an ISO-8601 time, got {_described(value)} that is not one"
        ) from None
    return value


def _check_path(path: object) -> str:
    if not isinstance(path, (str, os.PathLike)):
        raise MemoryInputError(f"path must be a str or os.PathLike, got {_described(path)}")
    checked = os.fspath(path)
    if not isinstance(checked, str) or not checked or "\x00" in checked:
        raise MemoryInputError(
            f"path must be a nonempty str path without NUL, got {_described(checked)}"
        )
    return checked


_Choice = TypeVar("_Choice", bound=str)


def _check_flag(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise MemoryInputError(f"{name} must be a bool, got {_described(value)}")
    return value


def _check_choice(name: str, value: object, choices: tuple[_Choice, ...]) -> _Choice:
    if not isinstance(value, str) or value not in choices:
        raise MemoryInputError(f"{name} must be one of {', '.join(map(repr, choices))},"
                               f" got {_described(value)}")
    return choices[choices.index(value)]


def _check_level(level: object) -> Level:
    return _check_choice("level", level, LEVELS)


def _check_within(name: str, value: object, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise MemoryInputError(
            f"{name} must be an int from {low} to {high}, got {_described(value)}"
            + (" out of range" if type(value) is int else "")
        )
    return value


def _check_limit(limit: object) -> int:
    return _check_within("limit", limit, 1, MAX_LIMIT)


def _check_scope(scope: object) -> Scope:
    """A Scope checked again, read once: a subclass or a mutated instance gets no say."""
    if not isinstance(scope, Scope):
        raise MemoryInputError(f"scope must be a Scope, got {_described(scope)}")
    # getattr: an instance made without __init__ (Scope.__new__) has no fields at all.
    user, task = getattr(scope, "user", None), getattr(scope, "task", None)
    if type(user) is str and type(task) is str:
        return _valid_scope(user, task)
    return _valid_scope(_check_identifier("user", user), _check_identifier("task", task))


class _ScopeKey(NamedTuple):
    """The scope predicate's two parameters: the user, and the task whose memories are
    seen beside the user level ('' for the user level alone: no task id is empty)."""

    user: str
    task: str


# A batch names few scopes many times over; only a pair that passed the checks is kept.
_valid_scope = functools.lru_cache(maxsize=4096)(Scope)


def _check_id(memory_id: object, name: str = "memory_id", least: int = 1) -> int:
    if isinstance(memory_id, bool) or not isinstance(memory_id, int):
        raise MemoryInputError(f"{name} must be an int, got {_described(memory_id)}")
    if not least <= memory_id <= _MAX_ID:
        raise MemoryInputError(f"{name} must be from {least} to {_MAX_ID}, got an int out of"
                               " range")
    return memory_id


def _as_float(value: object) -> float:
    """An int or float as a float (an int past the largest float is infinite); NaN for
    anything else, a bool included."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return math.nan
    try:
        return float(value)
    except OverflowError:
        return math.inf


def _check_seconds(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise MemoryInputError(
            f"{name} must be a number of seconds or None, got {_described(value)}")
    seconds = _as_float(value)
    if not (math.isfinite(seconds) and seconds > 0):
        raise MemoryInputError(f"{name} must be a finite number of seconds above 0")
    return seconds


def _check_score(score: object, signed: bool = False) -> float:
    """A min_score: from 0 up, as the ranks score; `signed`, any finite number, as a
    reranker's may be (a model's logits)."""
    value = _as_float(score)
    if signed and math.isfinite(value):
        return value
    if not (math.isfinite(value) and value >= 0):
        raise MemoryInputError(
            f"min_score must be a finite number from 0 up, got {_described(score)}")
    return value


def _check_ttl(ttl: object) -> float | None:
    return None if ttl is None else _check_seconds("ttl", ttl)


# -- keys, metadata and filters ----------------------------------------------------------

_MAX_KEY = 512
_MAX_METADATA_BYTES = 64 * 1024
_MAX_EMBED_TEXTS = 16
_MAX_OFFSET = 10_000
#: The longest text a store may be opened to take (MemoryStore(max_text=...)).
_LONGEST_TEXT = 1_000_000
# Integers past 2**53 are not exact in the doubles most JSON readers (and filters) use
# (RFC 7493, I-JSON): refused rather than compared wrongly.
_EXACT_INTEGERS = 2**53
_DEEPEST_METADATA = 32
_MOST_PATHS = 16
_MOST_IN = 100
# A term longer than this is kept as its hash: an index key stays small on either engine.
_LONGEST_TERM = 200
_ORDERED = {"$gt": operator.gt, "$gte": operator.ge, "$lt": operator.lt, "$lte": operator.le}
_OPERATORS = frozenset({"$eq", "$ne", "$in", "$nin", "$contains", *_ORDERED})
# The memory's own fields, which a filter reaches under these paths (times as instants).
_TIMES = ("$created_at", "$updated_at", "$valid_from", "$valid_to")
_FIELDS = (*_TIMES, "$key", "$source", "$level")
_COMBINING = ("$and", "$or", "$not")
# The conditions of a filter at all its levels together, and how deep its combinations go.
_MOST_CONDITIONS = 64
_DEEPEST_WHERE = 8


def _check_key(key: object) -> str | None:
    if key is None:
        return None
    if type(key) is not str or not 0 < len(key) <= _MAX_KEY:
        raise MemoryInputError(f"key must be a str of 1 to {_MAX_KEY} characters,"
                               f" got {_described(key)}")
    if any(unicodedata.category(c) == "Cc" for c in key):
        raise MemoryInputError("key must not contain control characters")
    return _check_text("key", key, _MAX_KEY, blank=True)


def _check_json(name: str, value: object, depth: int = 0) -> None:
    """MemoryInputError unless `value` is JSON a filter can compare: str keys; str, int
    (within 2**53), finite float, bool, None, lists and objects, at most 32 deep."""
    if depth > _DEEPEST_METADATA:
        raise MemoryInputError(f"{name} is nested deeper than {_DEEPEST_METADATA} levels")
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, str):
        _check_text(f"a string in {name}", value, _LONGEST_TEXT, blank=True)
    elif type(value) is int:
        if abs(value) > _EXACT_INTEGERS:
            raise MemoryInputError(f"an integer in {name} is beyond 2**53 (not exact in JSON)")
    elif type(value) is float:
        if not math.isfinite(value):
            raise MemoryInputError(f"{name} holds a number that is not finite")
    elif isinstance(value, (list, tuple)):
        for item in value:
            _check_json(name, item, depth + 1)
    elif isinstance(value, dict):
        _check_object(name, value, depth)
    else:
        raise MemoryInputError(f"{name} holds a value of type {type(value).__name__},"
                               " which JSON has not")


def _check_object(name: str, value: dict[Any, Any], depth: int) -> None:
    for item_key, item in value.items():
        if type(item_key) is not str:
            raise MemoryInputError(f"{name} has a key that is not a str but"
                                   f" {type(item_key).__name__}")
        _check_text(f"a key in {name}", item_key, _MAX_KEY, blank=True)
        _check_json(name, item, depth + 1)


def _compact(value: object, sort_keys: bool = False) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False,
                      sort_keys=sort_keys)


def _encoded(name: str, value: object, check: Callable[[Any], _Checked]
             ) -> tuple[str, _Checked]:
    """`value` checked and encoded as compact JSON, and what was encoded checked again
    (that check's result): a value that changes as it is read (a dict subclass, another
    thread) is a MemoryInputError, and what is kept is what was checked."""
    try:
        check(value)
        text = _compact(value)
    except MemoryInputError:
        raise
    except (TypeError, ValueError, RuntimeError, RecursionError):
        raise MemoryInputError(f"{name} changed while it was checked") from None
    return text, check(json.loads(text, parse_int=_exact_integer))


def _check_metadata(metadata: object) -> str | None:
    """The metadata as the compact JSON text the store keeps, or None for none."""
    if metadata is None:
        return None
    if not isinstance(metadata, dict):
        raise MemoryInputError(f"metadata must be a dict (a JSON object), got"
                               f" {_described(metadata)}")
    text, _ = _encoded("metadata", metadata, lambda value: _check_json("metadata", value))
    if len(text.encode("utf-8")) > _MAX_METADATA_BYTES:
        raise MemoryInputError(f"metadata is {len(text.encode('utf-8'))} bytes as compact"
                               f" JSON, more than {_MAX_METADATA_BYTES}")
    return text


def _exact_integer(digits: str) -> int | float:
    # PostgreSQL's jsonb writes a float such as 1e+20 as its digits: an integer past 2**53
    # read back was a float (none is kept as an integer).
    number = int(digits)
    return number if abs(number) <= _EXACT_INTEGERS else float(number)


def _metadata_of(text: str | None) -> dict[str, Any] | None:
    return None if text is None else cast(dict[str, Any], json.loads(
        text, parse_int=_exact_integer))


def _check_embed(embed: object) -> str | None:
    """What a memory is embedded from, as the store records it: None for its text, "false"
    for nothing, else the JSON list of the texts given instead."""
    if embed is True:
        return None
    if embed is False:
        return "false"
    if isinstance(embed, (str, bytes)) or not isinstance(embed, (list, tuple)) \
            or not 0 < len(embed) <= _MAX_EMBED_TEXTS:
        raise MemoryInputError(f"embed must be True, False or a list of 1 to"
                               f" {_MAX_EMBED_TEXTS} str, got {_described(embed)}")
    for text in embed:
        _check_text("a text of embed", text, _LONGEST_TEXT)
    return _compact(list(embed))


def _embedded_from(text: str, embed: str | None) -> list[str]:
    """The texts a memory's vectors come from (none for embed=False; its text for vectors
    its caller gave, where an embedder is asked for them: reindex(embedder=))."""
    if embed is None or embed == _GIVEN_EMBED:
        return [text]
    return cast(list[str], [] if embed == "false" else json.loads(embed))


def _memory_vectors(embedder: Embedder, memories: list[tuple[str, str | None]]
                    ) -> list[bytes]:
    """The vectors of each (text, embed) memory in one blob, one after another; b"" for
    one embedded from nothing. Its texts go to the embedder together."""
    asked = [_embedded_from(text, embed) for text, embed in memories]
    vectors = iter(_embedded(embedder, [text for texts in asked for text in texts]))
    return [b"".join(next(vectors) for _ in texts) for texts in asked]


def _normal(value: Any) -> Any:
    """A JSON value as filters compare it: 1.0 is 1, and -0.0 is 0."""
    if type(value) is float and value.is_integer() and abs(value) <= _EXACT_INTEGERS:
        return int(value)
    if isinstance(value, dict):
        return {key: _normal(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_normal(item) for item in value]
    return value


def _term(path: Sequence[str], value: Any) -> str:
    """The index's term for a value at a path (a list of keys): its normal JSON, or the
    hash of a long one."""
    term = _compact([list(path), _normal(value)], sort_keys=True)
    if len(term) > _LONGEST_TERM:
        return "#" + hashlib.sha256(term.encode("utf-8")).hexdigest()
    return term


def _terms(metadata: Any, path: tuple[str, ...] = ()) -> Iterator[str]:
    """A term for the value at every path of the metadata's objects, nested ones too (not
    into lists: a list is one value)."""
    for key, value in metadata.items():
        here = (*path, key)
        yield _term(here, value)
        if isinstance(value, dict):
            yield from _terms(value, here)


def _value_at(metadata: Any, path: Sequence[str]) -> tuple[bool, Any]:
    for key in path:
        if not isinstance(metadata, dict) or key not in metadata:
            return False, None
        metadata = metadata[key]
    return True, metadata


def _comparable(one: Any, other: Any) -> bool:
    """Whether an ordering operator compares the two: numbers with numbers, strings with
    strings."""
    def number(value: Any) -> bool:
        return type(value) in (int, float)
    return (number(one) and number(other)) or (type(one) is str and type(other) is str)


class _Facts(NamedTuple):
    """What a filter reads of a memory: its metadata (a dict, or None) and its own fields."""

    metadata: Any
    created_at: str
    updated_at: str | None
    key: str | None
    source: str
    level: Level
    valid_from: str | None = None
    valid_to: str | None = None

    def at(self, path: tuple[str, ...]) -> tuple[bool, Any]:
        """Whether the memory has a value at the path, and the value: a time as the UTC
        instant it names (none for a reading without an offset; none for an open end of
        its window)."""
        if path[0] in ("$valid_from", "$valid_to"):
            end = self.valid_from if path[0] == "$valid_from" else self.valid_to
            return end is not None, end
        if path[0] in _TIMES:
            reading = self.created_at if path[0] == "$created_at" else \
                self.updated_at or self.created_at  # a memory never replaced: created
            try:
                instant = _utc_form(path[0], reading)
            except (ValueError, MemoryInputError):
                instant = None
            return instant is not None, instant
        if path[0] == "$key":
            return self.key is not None, _key_of(self.key)
        if path[0] == "$source":
            return True, self.source
        if path[0] == "$level":
            return True, self.level
        return _value_at(self.metadata, path)


class _Condition(NamedTuple):
    """One test of a filter: `op` of _OPERATORS at a path (a metadata path, or one of
    _FIELDS), its operand `value` ($in and $nin: a list); or `op` of _COMBINING over
    filters, `value` their lists of conditions ($not: one). The index of terms answers
    the equalities of metadata paths (`indexed`); the rest hold or fail on each memory's
    facts."""

    path: tuple[str, ...]
    op: str
    value: Any
    # The terms of an equality ($eq $in $ne $nin), made once: a test of every memory of a
    # scope would make them again for each.
    known: frozenset[str] = frozenset()

    @property
    def indexed(self) -> bool:
        return self.op in ("$eq", "$in", "$ne", "$nin") and self.path[0] not in _FIELDS

    def holds(self, facts: _Facts) -> bool:
        """Whether the test holds for a memory of these facts."""
        if self.op in _COMBINING:
            met = [all(condition.holds(facts) for condition in part) for part in self.value]
            return any(met) if self.op == "$or" else all(met) != (self.op == "$not")
        found, value = facts.at(self.path)
        if self.op in _ORDERED:
            return found and _comparable(value, self.value) and \
                bool(_ORDERED[self.op](value, self.value))
        if self.op == "$contains":
            return found and isinstance(value, list) and _term(self.path, self.value) in {
                _term(self.path, item) for item in value}
        if self.path[0] in _FIELDS:  # a str, compared as it is (a time as its instant)
            held = found and value in (self.value if self.op in ("$in", "$nin") else
                                       (self.value,))
        else:
            held = found and _term(self.path, value) in self.known
        return held == (self.op in ("$eq", "$in"))

    @property
    def reads_metadata(self) -> bool:
        """Whether the test reads a memory's metadata (not its own fields alone)."""
        if self.op in _COMBINING:
            return any(condition.reads_metadata for part in self.value for condition in part)
        return self.path[0] not in _FIELDS

    def terms(self) -> list[str]:
        """The terms whose memories an equality holds for ($eq, $in) or fails ($ne, $nin)."""
        return [_term(self.path, item) for item in
                (self.value if self.op in ("$in", "$nin") else [self.value])]


# What a test of $level alone reads of a memory at each level.
_LEVEL_FACTS = {level: _Facts(None, "", None, None, "", level) for level in LEVELS}


def _unread(metadata: str | None) -> None:
    return None


def _facts_of(row: _MemoryRow) -> _Facts:
    return _Facts(_metadata_of(row.metadata), row.created_at, row.updated_at, row.key,
                  row.source, _level_of(row.task_id), row.valid_from, row.valid_to)


def _admitting(conditions: list[_Condition]) -> Callable[[_MemoryRow], bool]:
    """Whether a filter admits a memory, as the index of its terms and the tests on each
    memory's facts together do (_Planner.admitted)."""
    tests = [(condition, frozenset(condition.terms()) if condition.indexed else None)
             for condition in conditions]
    # Rows share their values (an adapter's mark on each): each scalar's term made once.
    known: dict[tuple[int, type, Any], bool] = {}

    def admits(row: _MemoryRow) -> bool:
        facts = _facts_of(row)
        for place, (condition, terms) in enumerate(tests):
            if terms is None:
                if not condition.holds(facts):
                    return False
                continue
            # The one term of the path the index may hold for this memory (_terms).
            held, value = _value_at(facts.metadata, condition.path)
            if held and isinstance(value, (str, int, float, bool)):
                seen = (place, type(value), value)
                if seen not in known:
                    known[seen] = _term(condition.path, value) in terms
                matched = known[seen]
            else:
                matched = held and _term(condition.path, value) in terms
            if matched != (condition.op in ("$eq", "$in")):
                return False
        return True
    return admits


def _check_where(where: object) -> list[_Condition] | None:
    """A filter as its conditions, or MemoryInputError naming what is wrong (never a
    value): {path: value} is equality, {path: {op: value}} an operator's test. The
    conditions are of a copy of `where`, checked as the copy and the given alike."""
    if where is None:
        return None
    return _encoded("where", where, _conditions)[1]


def _conditions(where: object, depth: int = 0, counted: list[int] | None = None
                ) -> list[_Condition]:
    """The conditions of a filter (all must hold), its combinations' filters within
    _DEEPEST_WHERE levels, _MOST_CONDITIONS in all."""
    counted = [0] if counted is None else counted
    if not isinstance(where, dict):
        raise MemoryInputError(f"where must be a dict of paths, got {_described(where)}")
    if len(where) > _MOST_PATHS:
        raise MemoryInputError(f"where has {len(where)} paths, more than {_MOST_PATHS}")
    if depth > _DEEPEST_WHERE:
        raise MemoryInputError(f"where nests $and, $or and $not more than {_DEEPEST_WHERE}"
                               " levels deep")
    conditions = []
    for path, test in where.items():
        counted[0] += 1
        if counted[0] > _MOST_CONDITIONS:
            raise MemoryInputError(f"where has more than {_MOST_CONDITIONS} conditions")
        if path in _COMBINING:
            conditions.append(_combined(path, test, depth, counted))
            continue
        keys = _where_path(path)
        operators = isinstance(test, dict) and any(
            isinstance(name, str) and name.startswith("$") for name in test)
        if not operators:
            conditions.append(_tested(keys, "$eq", test))
            continue
        assert isinstance(test, dict)
        for op, value in test.items():
            conditions.append(_tested(keys, op, value))
    return conditions


def _combined(op: str, test: object, depth: int, counted: list[int]) -> _Condition:
    if op == "$not":
        if not isinstance(test, dict) or not test:
            raise MemoryInputError(f"$not takes a filter (a dict), got {_described(test)}")
        return _Condition((), op, [_conditions(test, depth + 1, counted)])
    if not isinstance(test, (list, tuple)) or not 0 < len(test) <= _MOST_PATHS:
        raise MemoryInputError(f"{op} takes a list of 1 to {_MOST_PATHS} filters, got"
                               f" {_described(test)}")
    return _Condition((), op, [_conditions(part, depth + 1, counted) for part in test])


def _where_path(path: object) -> tuple[str, ...]:
    """A filter's path as its keys: a dotted path into the metadata, or one of _FIELDS."""
    if type(path) is not str or not 0 < len(path) <= _MAX_KEY:
        raise MemoryInputError(f"a path of where must be a str of 1 to {_MAX_KEY}"
                               f" characters, got {_described(path)}")
    if path in _FIELDS:
        return (path,)
    if path.startswith("$"):  # read as a metadata key, a misspelt $or would match nothing
        raise MemoryInputError("where has an unknown combination or field (not one of"
                               f" {', '.join((*_COMBINING, *_FIELDS))}): {_described(path)}")
    keys = tuple(path.split("."))
    if not all(keys):
        raise MemoryInputError("a path of where has an empty key (a leading, trailing"
                               " or doubled '.')")
    # A metadata key may be blank (all spaces): so may a path's, to reach it.
    _check_text("a path of where", path, _MAX_KEY, blank=True)
    return keys


def _tested(keys: tuple[str, ...], op: object, value: Any) -> _Condition:
    """One operator's test at a path, its operand checked (a time as its UTC instant)."""
    if op not in _OPERATORS:
        raise MemoryInputError("where has an unknown operator (not one of"
                               f" {', '.join(sorted(_OPERATORS))}): {_described(op)}")
    assert isinstance(op, str)
    _check_json("a value of where", value)
    if op in _ORDERED and not _comparable(value, value):
        raise MemoryInputError(f"{op} compares a number or a str, got {_described(value)}")
    if op in ("$in", "$nin") and (not isinstance(value, (list, tuple))
                                  or len(value) > _MOST_IN):
        raise MemoryInputError(f"{op} takes a list of at most {_MOST_IN} values,"
                               f" got {_described(value)}")
    operands = list(value) if op in ("$in", "$nin") else [value]
    if keys[0] in _FIELDS:
        if op == "$contains":
            raise MemoryInputError(f"$contains tests a list in the metadata, not {keys[0]}")
        if not all(type(operand) is str for operand in operands):
            raise MemoryInputError(f"{keys[0]} compares a str, got {_described(value)}")
        if keys[0] in _TIMES:
            operands = [_filter_instant(keys[0], operand) for operand in operands]
    condition = _Condition(keys, op, operands if op in ("$in", "$nin") else operands[0])
    if op in ("$eq", "$in", "$ne", "$nin"):
        return condition._replace(known=frozenset(condition.terms()))
    return condition


def _filter_instant(name: str, reading: str) -> str:
    """An ISO 8601 time with a UTC offset, as the instant a filter compares."""
    try:
        instant = _utc_form(name, reading)
    except ValueError:
        instant = None
    if instant is None:
        raise MemoryInputError(f"{name} compares an ISO 8601 time with a UTC offset")
    return instant


class _Admitted:
    """The memories a filter admits: those of `allowed` (None: any) not in `excluded`."""

    def __init__(self, allowed: set[int] | None, excluded: set[int]) -> None:
        self.allowed, self.excluded = allowed, excluded

    def __contains__(self, memory_id: object) -> bool:
        return (self.allowed is None or memory_id in self.allowed) \
            and memory_id not in self.excluded

    def mask(self, ids: Any) -> Any:
        """Which of numpy's `ids` are admitted."""
        np = _numpy()
        admitted = np.ones(len(ids), dtype=bool)
        if self.allowed is not None:
            admitted &= np.isin(ids, np.fromiter(self.allowed, dtype=np.int64,
                                                 count=len(self.allowed)))
        if self.excluded:
            admitted &= ~np.isin(ids, np.fromiter(self.excluded, dtype=np.int64,
                                                  count=len(self.excluded)))
        return admitted


# -- what a write is given: new rows, bulk items, receipts -----------------------------

class _NewMemory(NamedTuple):
    """A validated memory to write; created_at None: read the clock as it is written."""

    user_id: str
    task_id: str | None
    text: str
    source: str
    created_at: str | None = None
    ttl: float | None = None
    expires_at: str | None = None
    vector: bytes | None = None  # the embedder's, as memory_vectors holds it (or None)
    key: str | None = None
    metadata: str | None = None  # compact JSON
    embed: str | None = None  # _check_embed's
    updated_at: str | None = None
    first_created: str | None = None  # the created_at of the keyed memory it replaces
    version: int | None = None  # None: 1, or one more than the memory it replaces
    if_version: int | None = None  # the version its key's live memory must be at (0: none)
    given: int | None = None  # the dimensions of vectors its caller gave (its `vector`)
    # An imported record's superseded versions, oldest first, each with its superseded_at.
    past: tuple[tuple[_NewMemory, str], ...] | None = None
    valid_from: str | None = None  # _instant's form; None: since always
    valid_to: str | None = None  # None: still


_CREATED_AT = _NewMemory._fields.index("created_at")


# valid_at's value for a read regardless of validity: every memory, whatever its window.
_ANY_TIME = "any"


def _check_valid_at(valid_at: object) -> str | None:
    """A read's valid_at: None (valid now), _ANY_TIME, or an ISO time with a UTC offset as
    the instant windows are compared at."""
    if valid_at is None:
        return None
    if valid_at == _ANY_TIME:
        return _ANY_TIME
    return _filter_instant("valid_at", _check_timestamp("valid_at", valid_at))


def _valid_time(name: str, value: object) -> str | None:
    """An end of a window of validity (None: open), as the instant it names."""
    if value is None:
        return None
    return _instant(name, _check_timestamp(name, value))


def _check_window(valid_from: object, valid_to: object) -> tuple[str | None, str | None]:
    """A window of validity: its ends as instants, the end after the start."""
    start, end = _valid_time("valid_from", valid_from), _valid_time("valid_to", valid_to)
    if start is not None and end is not None and end <= start:
        raise MemoryInputError("valid_to must come after valid_from: the window would hold"
                               " no time")
    return start, end


def _new_row(scope: Scope, level: str, text: str, source: str, ttl: float | None = None,
             key: object = None, metadata: object = None, embed: object = True, *,
             if_version: object = None, vectors: object = None, valid_from: object = None,
             valid_to: object = None, max_text: int = MAX_TEXT) -> _NewMemory:
    """Validate one memory to write."""
    checked = _check_scope(scope)
    start, end = _check_window(valid_from, valid_to)
    if if_version is not None and key is None:
        raise MemoryInputError("if_version needs a key: it is the version of the key's memory")
    vector, given = None, None
    if vectors is not None:
        if embed is not True:
            raise MemoryInputError("give vectors or embed, not both")
        vector, given = _caller_vectors(vectors, "vectors")
    return _NewMemory(
        checked.user,
        checked.task if _check_level(level) == "task" else None,
        _check_text("text", text, max_text),
        _check_text("source", source, MAX_TEXT),
        ttl=_check_ttl(ttl),
        vector=vector,
        key=_check_key(key),
        metadata=_check_metadata(metadata),
        embed=_GIVEN_EMBED if given is not None else _check_embed(embed),
        if_version=_check_if_version(if_version),
        given=given,
        valid_from=start,
        valid_to=end,
    )


_LONGEST_OPERATION = 128


class _Receipt(NamedTuple):
    """An operation done under an id: its owner (the scope's user and task), the id, and
    the call's fingerprint (its caller's, or a digest of the call and its arguments). A
    call that names one reads it first, in its
    transaction: done before with the same arguments, its result, nothing written; with
    others, OperationConflict; not done (or its receipt expired), the call's writes then
    its receipt, committed together."""

    user: str
    task: str
    operation: str
    fingerprint: str
    now: str  # the clock's reading, in the fixed-width UTC form
    ttl: float  # how long the receipt is kept

    def done(self, db: _Session) -> tuple[bool, Any]:
        found = db.execute(_SQL_RECEIPT, (self.user, self.task, self.operation)).fetchone()
        if found is None or found[3] <= self.now:
            db.holding = True
            return False, None
        if found[0] != self.fingerprint:
            raise OperationConflict("the operation id was used for another call (other"
                                    " arguments) before; nothing was done")
        return True, json.loads(found[1])

    def record(self, db: _Session, result: Any) -> None:
        db.execute(_SQL_DROP_EXPIRED_RECEIPTS, (self.user, self.task, self.now))
        db.execute(_SQL_RECORD_RECEIPT, (self.user, self.task, self.operation,
                                         self.fingerprint, json.dumps(result), self.now,
                                         _expiry(self.now, self.ttl)))

    @staticmethod
    def done_in(receipt: _Receipt | None, db: _Session) -> tuple[bool, Any]:
        """Whether the call was done before under the receipt, and its result then."""
        return (False, None) if receipt is None else receipt.done(db)

    @staticmethod
    def record_in(receipt: _Receipt | None, db: _Session, result: Any) -> None:
        if receipt is not None:
            receipt.record(db, result)


def _given(row: _NewMemory) -> dict[str, Any]:
    """What a call gave of a row to write, by name, for its receipt's digest: an option
    not given is left out, so that a release adding one replays the receipts of those
    before it."""
    return {name: value for name, value in row._asdict().items() if value is not None}


def _one_scope(items: list[Any]) -> Scope:
    """The one scope of a batch's items (tuples or dicts, checked already)."""
    scopes = [item["scope"] if isinstance(item, dict) else item[0] for item in items]
    if not scopes or any(scope != scopes[0] for scope in scopes):
        raise MemoryInputError("with operation, every item is of one scope")
    return cast(Scope, scopes[0])


def _check_operation(operation: object, name: str = "operation") -> str:
    if type(operation) is not str or not 0 < len(operation) <= _LONGEST_OPERATION \
            or not operation.isprintable():
        raise MemoryInputError(f"{name} must be a str of 1 to {_LONGEST_OPERATION}"
                               f" printable characters, got {_described(operation)}")
    return operation


def _operation_of(operation: object) -> tuple[str, str | None]:
    """An operation as a call gives it: its id, or (id, the caller's own fingerprint)."""
    if isinstance(operation, tuple) and len(operation) == 2:
        return (_check_operation(operation[0]),
                _check_operation(operation[1], "an operation's fingerprint"))
    return _check_operation(operation), None


def _required(name: str, value: object) -> object:
    if value is None:
        raise MemoryInputError(f"{name} is required")
    return value


def _check_if_version(if_version: object) -> int | None:
    """A version a write requires: 0 for none live, else the live memory's."""
    return None if if_version is None else _check_id(if_version, "if_version", least=0)


_ITEM_OPTIONS = ("ttl", "key", "metadata", "embed", "if_version", "vectors", "valid_from",
                 "valid_to")


def _item_row(item: object, max_text: int) -> _NewMemory:
    """One item of remember_many: a tuple (scope, level, text, source[, ttl[, key[,
    metadata[, embed]]]]) or a dict of remember's arguments by name."""
    if isinstance(item, dict):
        named = set(item)
        if not {"scope", "level", "text", "source"} <= named \
                or named - {"scope", "level", "text", "source", *_ITEM_OPTIONS}:
            raise MemoryInputError("an item dict has scope, level, text and source, and may"
                                   f" have {', '.join(_ITEM_OPTIONS)}; this one has"
                                   f" {len(named)} keys, not those")
        return _new_row(**item, max_text=max_text)
    if not isinstance(item, tuple) or not 4 <= len(item) <= 4 + len(_ITEM_OPTIONS):
        raise TypeError
    # Positionally: naming the options costs a dict an item (1.1 of a turn's 3 us here).
    return _new_row(*item, max_text=max_text)


def _one_key_each(rows: list[_NewMemory], noun: str | None) -> None:
    """MemoryInputError if two rows give one owner the same key: which would stay is not
    the caller's to guess."""
    first: dict[tuple[str, str | None, str], int] = {}
    for position, row in enumerate(rows):
        if row.key is None or row.key.endswith(_PAST_KEY):  # a past holder's: no holder
            continue
        owner = (row.user_id, row.task_id, row.key)
        if owner in first:
            raise MemoryInputError(f"{noun or 'item'}s {first[owner]} and {position} give one"
                                   " owner the same key", position)
        first[owner] = position


def _each_valid(items: object, check: Callable[[Any], _Row], noun: str) -> list[_Row]:
    """Every item checked, or MemoryInputError naming the position of the first bad one."""
    if isinstance(items, (str, bytes, dict)) or not isinstance(items, Iterable):
        raise MemoryInputError(f"{noun}s must be an iterable, got {_described(items)}")
    rows = []
    for position, item in enumerate(items):
        try:
            rows.append(check(item))
        except MemoryInputError as exc:
            raise MemoryInputError(f"{noun} {position}: {exc}", position) from None
        except TypeError:
            raise MemoryInputError(
                f"{noun} {position}: must be a tuple (scope, level, text, source[, ttl[, key"
                f"[, metadata[, embed]]]]) or a dict of them, got {_described(item)}",
                position) from None
    return rows


# -- embedders and rerankers: checked, called, failures told without a text ------------

def _check_named(model: object, kind: str) -> None:
    """What an embedder and a reranker (`kind`) share: an instance, with a name."""
    if isinstance(model, type):  # embedder=MiniLM: its embed() would fail at the first write
        raise MemoryInputError(f"{kind} must be an instance, got the class"
                               f" {model.__name__[:200]}: call it, {model.__name__[:200]}()")
    name = getattr(model, "name", None)
    if not isinstance(name, str) or not 0 < len(name) <= MAX_TEXT:
        raise MemoryInputError(f"{kind}.name must be a str of 1 to"
                               f" {MAX_TEXT} characters, got {_described(name)}")


def _check_embedder(embedder: object) -> Embedder:
    """The embedder, if it has what Embedder promises."""
    _check_named(embedder, "embedder")
    dimensions = getattr(embedder, "dimensions", None)
    if type(dimensions) is not int or not 0 < dimensions <= 65536:
        raise MemoryInputError("embedder.dimensions must be an int from 1 to 65536,"
                               f" got {_described(dimensions)}")
    if not callable(getattr(embedder, "embed", None)):
        raise MemoryInputError("embedder.embed must be callable")
    return cast(Embedder, embedder)


def _check_cuts(min_score: object, budget: object, reranked: bool
                ) -> tuple[float | None, int | None]:
    """recall's min_score (below 0 too where a reranker scores) and budget, checked."""
    return (None if min_score is None else _check_score(min_score, signed=reranked),
            None if budget is None else _check_id(budget, "budget"))


def _check_approximate(approximate: object, rank: Rank, as_of: str | None,
                       served: bool) -> None:
    """What recall(approximate=True) needs: rank "meaning", today's memories, and usearch
    unless the database searches its own index (`served`)."""
    if not _check_flag("approximate", approximate):
        return
    if rank != "meaning":
        raise MemoryInputError("approximate=True ranks by 'meaning' alone: hybrid scores"
                               " every memory the scope sees")
    if as_of is not None:
        raise MemoryInputError("approximate=True ranks today's memories: as_of is exact")
    if not served:
        _check_usearch()


def _check_usearch() -> None:
    """MemoryInputError where the store's own approximate index cannot be built here."""
    if importlib.util.find_spec("usearch") is None or _numpy() is None:
        raise MemoryInputError("approximate=True needs usearch and numpy: pip install"
                               " 'memory-store[ann]'")


def _check_reranker(reranker: object) -> Reranker:
    """The reranker, if it has what Reranker promises."""
    _check_named(reranker, "reranker")
    if not callable(getattr(reranker, "rerank", None)):
        raise MemoryInputError("reranker.rerank must be callable")
    return cast(Reranker, reranker)


# What a store without an embedder records once its callers give vectors (remember's
# vectors=), and what a memory's `embed` says of vectors its caller gave.
_GIVEN = "vectors given by the caller"
_GIVEN_EMBED = "vectors"
_MOST_VECTORS = 16


class _GivenVectors:
    """The vector space of a store without an embedder whose callers give vectors: of
    the dimensions the first had. It embeds nothing: a memory written without vectors
    has none, and recall by meaning takes the query's vector (recall's vector=)."""

    name = _GIVEN

    def __init__(self, dimensions: int) -> None:
        self.dimensions = dimensions

    def embed(self, texts: Sequence[str]) -> Sequence[Sequence[float]]:
        raise StoreError("a store of given vectors embeds no text")


def _caller_vectors(vectors: object, name: str) -> tuple[bytes, int]:
    """Vectors a caller gives, as one blob of float32 and their dimensions; a
    MemoryInputError naming what is wrong."""
    if isinstance(vectors, (str, bytes)) or not isinstance(vectors, (list, tuple)) \
            or not 0 < len(vectors) <= _MOST_VECTORS:
        raise MemoryInputError(f"{name} must be a list of 1 to {_MOST_VECTORS} vectors (lists"
                               f" of numbers), got {_described(vectors)}")
    first = vectors[0]
    if isinstance(first, (str, bytes)) or not isinstance(first, (list, tuple)) \
            or not 0 < len(first) <= 65536:
        raise MemoryInputError(f"a vector of {name} must be a list of 1 to 65536 numbers,"
                               f" got {_described(first)}")
    try:
        return b"".join(_vector_blob(vector, len(first), f"vector {at} of {name}",
                                     "the first vector")
                        for at, vector in enumerate(vectors)), len(first)
    except StoreError as exc:
        raise MemoryInputError(str(exc)) from None


def _embedder_record(embedder: Embedder) -> str:
    """What the file records of the embedder its vectors come from."""
    return json.dumps({"name": embedder.name, "dimensions": embedder.dimensions},
                      sort_keys=True)


def _vector_blob(vector: object, dimensions: int, where: str,
                 dimensions_of: str = "the embedder") -> bytes:
    """One vector as little-endian float32, or StoreError naming what is wrong with it
    (`where` it is, and whose `dimensions` it must have)."""
    if isinstance(vector, (str, bytes)) or not isinstance(vector, Iterable):
        raise StoreError(f"{where} is not a sequence of numbers but {type(vector).__name__}")
    packed, failure = None, None
    try:  # a lazy vector (a generator, a client's row) runs the embedder's code here
        packed = array.array("f", vector)
    except (TypeError, ValueError, OverflowError):
        pass
    except Exception as exc:
        failure = type(exc).__name__
    if failure is not None:  # raised out here, so the error (and its text) is no context
        raise StoreError(f"{where} raised {failure} while it was read")
    if packed is None:
        raise StoreError(f"{where} holds something that is not a number")
    if len(packed) != dimensions:
        raise StoreError(f"{where} has {len(packed)} numbers, not the {dimensions} of"
                         f" {dimensions_of}")
    if not all(map(math.isfinite, packed)):
        raise StoreError(f"{where} holds a number that is not finite in float32")
    if not any(packed):
        raise StoreError(f"{where} is all zeros: it has no direction to compare")
    if not _SHORTEST_VECTOR <= math.sqrt(math.fsum(x * x for x in packed)) <= _LONGEST_VECTOR:
        raise StoreError(f"{where} is too short or too long to compare in float32: its"
                         " length must be from 1e-15 to 1e18")
    if sys.byteorder == "big":
        packed.byteswap()
    return packed.tobytes()


# The words of error messages a failure's line may give beside a few other characters
# (_FEW_OTHERS): what a model's client, an HTTP service or a GPU says when it fails. A
# line of these words, numbers and signs carries no text in any encoding, being too
# short in everything else to hold one.
_ERROR_WORDS = frozenset("""
    a aborted abruptly access account after again allocate allocated an and api are argument
    array at attempt attempts attribute authentication available bad balance batch be been
    billing broken busy but by bytes call can canceled cancelled cannot capacity certificate
    characters chars client closed code configuration configured connect connection content
    context could cpu credits cuda day decode decoding denied device did dimension
    dimensions disabled dns does down download embedding embeddings empty encode encoding
    end ended endpoint entity environment eof err errno error exceeded exceeds exception
    exhausted expected expired failed failure file float for forbidden format found free
    from full gateway gb gib gone got gpu halt handshake has header headers host hour http
    https hub in index inf infinity input inputs instance insufficient int internal
    interrupted invalid is it json kb key kib killed large length limit limited list loaded
    local long lost malformed many max maximum may mb memory mib minute mismatch missing
    mode model models more ms must name nan network no none not null numbers object of
    offline ok on only onnx operation or out over overflow overloaded parse payload peer per
    permission pipe please process protocol queue quota raised ran range rate reached read
    refused remote request requests required reset resolution resource response retries
    retry return returned runtime score scores second seconds server service set shape size
    ssl status stopped str stream support supported temporarily temporary tensor text texts
    than the this timed timeout to token tokens too try type unable unauthorized unavailable
    unexpected unknown unprocessable unreachable unsupported use utf value variable vector
    vectors verify was we weights which while with wrong you your
    """.split())
_FEW_OTHERS = 6


def _compared(text: str) -> str:
    """A text as a message is compared with it: NFKC, case folded, format characters
    (zero-width and the like) dropped, so that a text broken or widened so still meets."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    return "".join(c for c in folded if unicodedata.category(c) != "Cf")


_LETTERS = re.compile(r"[A-Za-z]+")


def _an_error_word(word: str) -> bool:
    """Whether a run of letters is one of _ERROR_WORDS, in lower, upper or title case
    (a case chosen letter by letter would carry a bit a letter)."""
    return word.lower() in _ERROR_WORDS and word in (word.lower(), word.upper(), word.title())


def _cannot_carry(line: str, texts: list[str]) -> bool:
    """Whether a message's line cannot carry any of the texts, in any encoding: it is
    printable ASCII, quotes no run of 4 characters of a text (nor a shorter text whole),
    and outside the runs of letters that are _ERROR_WORDS it holds fewer than
    _FEW_OTHERS characters other than spaces, and fewer than the shortest text holds.
    What a line can carry beyond those words is then fewer characters than any text."""
    if not line.isascii() or not line.isprintable():
        return False
    given = [_compared(text) for text in texts]
    folded = _compared(line)
    windows = {folded[at : at + 4] for at in range(max(len(folded) - 3, 1))}
    if any(window in text for window in windows for text in given) or any(
            text.strip() and text.strip() in folded for text in given):
        return False
    others = _LETTERS.sub(lambda word: "" if _an_error_word(word.group()) else word.group(),
                          line)
    shortest = min((len("".join(text.split())) for text in given), default=_FEW_OTHERS)
    return len("".join(others.split())) < min(_FEW_OTHERS, shortest)


def _failure_of(exc: Exception, texts: list[str]) -> str:
    """The exception's type, with its message's first line (spaces collapsed, at most 200
    characters) where that line cannot carry a text the code was given (_cannot_carry):
    a message may quote its input, as it is or encoded (a JSON body, base64, hex)."""
    named = type(exc).__name__
    with contextlib.suppress(Exception):  # str() of a hostile exception may raise
        lines = str(exc).strip().splitlines()
        line = " ".join(lines[0].split())[:200] if lines else ""
        if line and _cannot_carry(line, texts):
            return f"{named}: {line}"
    return named


def _embedded(embedder: Embedder, texts: list[str]) -> list[bytes]:
    """Each text's vector from the embedder, EMBED_BATCH texts a call, each checked; an
    embedder that raises is StoreError naming the exception's type (and its message's
    first line where that cannot quote a text), never the text."""
    vectors: list[bytes] = []
    for start in range(0, len(texts), EMBED_BATCH):
        batch = texts[start : start + EMBED_BATCH]
        failure = None
        try:
            given = list(embedder.embed(batch))
        except Exception as exc:
            failure = _failure_of(exc, batch)
        if failure is not None:  # raised out here, so the error (and its text) is no context
            raise StoreError(f"the embedder raised {failure}")
        if len(given) != len(batch):
            raise StoreError(f"the embedder gave {len(given)} vectors for {len(batch)} texts")
        vectors += [_vector_blob(vector, embedder.dimensions,
                                 f"the embedder's vector {start + at}")
                    for at, vector in enumerate(given)]
    return vectors


def _reranked(reranker: Reranker, query: str, found: list[Recalled]) -> list[Recalled]:
    """The recalled memories in the order of the reranker's scores for them, the best
    first (a tie keeps the rank's order), each scored by it, with the rank's score in
    `why` where explain gave one."""
    if not found:
        return found
    scores = _rerank_scores(reranker, query, [result["text"] for result in found])
    for result, score in zip(found, scores, strict=True):
        if "why" in result:
            result["why"]["ranked"] = result["score"]
        result["score"] = score
    order = sorted(range(len(found)), key=lambda at: -scores[at])
    return [found[at] for at in order]


def _rerank_scores(reranker: Reranker, query: str, texts: list[str]) -> array.array[float]:
    """The reranker's score of each text, checked: one that raises or answers other than
    one finite number a text is StoreError naming what it did, never a text."""
    failure, scores, handed = None, None, list(texts)
    try:
        given = reranker.rerank(query, handed)
    except Exception as exc:
        failure = _failure_of(exc, [query, *texts])
    if failure is not None:  # raised out here, so the error (and its text) is no context
        raise StoreError(f"the reranker raised {failure}")
    if len(handed) != len(texts) or not all(  # its scores may be of the list it made
            type(new) is str and new == old for new, old in zip(handed, texts, strict=True)):
        raise StoreError("the reranker changed the list of texts it was given")
    try:  # a lazy answer (a generator) runs the reranker's code here too
        # A mapping's or a set's order is not the texts': its keys would be read as scores.
        if not isinstance(given, (str, bytes, Mapping, AbstractSet, MappingView)):
            scores = array.array("d", given)
    except (TypeError, ValueError, OverflowError):
        pass
    except Exception as exc:
        failure = type(exc).__name__
    if failure is not None:
        raise StoreError(f"the reranker's scores raised {failure} while they were read")
    if scores is None:
        raise StoreError("the reranker gave something other than a sequence of numbers")
    if len(scores) != len(texts):
        raise StoreError(f"the reranker gave {len(scores)} scores for {len(texts)} texts")
    if not all(map(math.isfinite, scores)):
        raise StoreError("the reranker gave a score that is not a finite number")
    return scores


# -- records: the shape export writes and import reads ---------------------------------

# The one record shape: export_user writes it, import_memories reads it, and so does the
# command line. `id` is written for the reader and ignored on import (ids are the store's).
RECORD_KEYS = ("id", "user", "task", "level", "text", "source", "created_at", "expires_at")
_REQUIRED_KEYS = frozenset(RECORD_KEYS) - {"id", "expires_at"}


_RECORD_OPTIONS = ("key", "metadata", "updated_at", "version", "embed", "vectors", "history",
                   "valid_from", "valid_to", "past_holder")
# A superseded version in a record's history: a memory of the record's owner as it read.
_VERSION_KEYS = ("id", "text", "source", "created_at", "expires_at", "superseded_at",
                 "version", *_RECORD_OPTIONS[:3], *_RECORD_OPTIONS[4:6], "valid_from",
                 "valid_to")
_MOST_VERSIONS = 10_000


def _record_row(record: object, max_text: int = MAX_TEXT) -> _NewMemory:
    """Validate one exported record as a row to write, keeping its created_at."""
    if not isinstance(record, dict):
        raise MemoryInputError(f"a record must be a JSON object, got {_described(record)}")
    missing = sorted(_REQUIRED_KEYS - set(record))
    unknown = len(set(record) - set(RECORD_KEYS) - set(_RECORD_OPTIONS))
    if missing or unknown:
        raise MemoryInputError(
            f"a record has the keys {', '.join(RECORD_KEYS)} (id, expires_at optional)"
            f" and may have {', '.join(_RECORD_OPTIONS)}; this one lacks"
            f" {missing or 'none'} and has {unknown} unknown"
        )
    if "id" in record:
        _check_id(record["id"], "id")
    level = _check_level(record["level"])
    task = record["task"]
    if level == "user" and task is not None:
        raise MemoryInputError("a user-level record has task null")
    if level == "task" and task is None:
        raise MemoryInputError("a task-level record needs a task")
    # A Scope needs a task; a user-level memory keeps none, so any valid name serves.
    scope = Scope(record["user"], "user-level" if task is None else task)
    created_at = _check_timestamp("created_at", record["created_at"])
    expires_at = record.get("expires_at")
    if expires_at is not None:
        expires_at = _instant("expires_at", _check_timestamp("expires_at", expires_at))
    updated_at = record.get("updated_at")
    if updated_at is not None:
        updated_at = _check_timestamp("updated_at", updated_at)
    row = _new_row(scope, level, record["text"], record["source"], key=record.get("key"),
                   metadata=record.get("metadata"), embed=record.get("embed", True),
                   vectors=record.get("vectors"), valid_from=record.get("valid_from"),
                   valid_to=record.get("valid_to"), max_text=max_text)
    version = record.get("version")
    if version is not None:
        version = _check_id(version, "version")
    past = None
    if record.get("history") is not None:
        # As-of reads compare every time of a memory with history as an instant.
        for name in ("created_at", "updated_at"):
            if record.get(name) is not None:
                _instant(f"{name} of a record with history", record[name])
        past = _past_of(record["history"], scope, level, version, max_text)
    return row._replace(created_at=created_at, expires_at=expires_at, updated_at=updated_at,
                        version=version, past=past, key=_record_key(record, row.key))


def _record_key(record: dict[str, Any], key: str | None) -> str | None:
    """A record's key as its memory is written with it: an earlier holder's (past_holder
    true) marked so, its id to follow once it has one (_Writes._values)."""
    if record.get("past_holder") is None or not _check_flag("past_holder",
                                                               record["past_holder"]):
        return key
    if key is None:
        raise MemoryInputError("a past holder (past_holder true) has its key")
    return f"{key}{_PAST_KEY}"


def _past_of(history: object, scope: Scope, level: Level, version: int | None,
             max_text: int) -> tuple[tuple[_NewMemory, str], ...]:
    """Validate a record's history: its superseded versions, oldest first, each a record
    of its owner (keys _VERSION_KEYS, superseded_at and version required), their
    versions ascending and below the record's own."""
    if not isinstance(history, list) or not 1 <= len(history) <= _MOST_VERSIONS:
        raise MemoryInputError(f"a record's history is a list of 1 to {_MOST_VERSIONS}"
                               f" versions, got {_described(history)}")
    if version is None:
        raise MemoryInputError("a record with a history has its version")
    past, below = [], 0
    for kept in history:
        if not isinstance(kept, dict) or not {"text", "source", "created_at", "version",
                                              "superseded_at"} <= set(kept) <= set(_VERSION_KEYS):
            raise MemoryInputError(
                f"a version of a record's history has the keys {', '.join(_VERSION_KEYS)}"
                " (text, source, created_at, superseded_at and version required)")
        number = _check_id(kept["version"], "a version's version")
        if not below < number < version:
            raise MemoryInputError("a record's versions ascend, each below the record's own")
        below = number
        for name in ("created_at", "updated_at", "superseded_at"):
            if kept.get(name) is not None:
                _instant(f"a version's {name}", _check_timestamp(name, kept[name]))
        row = _record_row({**{name: kept.get(name) for name in (
                               "key", "metadata", "expires_at", "updated_at", "version",
                               "valid_from", "valid_to")},
                           **{name: kept[name] for name in ("text", "source", "created_at",
                                                            "embed", "vectors") if name in kept},
                           "user": scope.user, "level": level,
                           "task": None if level == "user" else scope.task}, max_text)
        superseded_at = _check_timestamp("superseded_at", kept["superseded_at"])
        past.append((row, superseded_at))
    return tuple(past)


# -- clocks and words ------------------------------------------------------------------

class FixedClock:
    """Readings `step_seconds` apart from `start`. A call takes the next reading (a write
    takes one per memory); now() repeats the last one handed out, or `start` before any,
    so that reads, which need the time to tell what has expired, take no tick."""

    def __init__(self, start: str, step_seconds: float) -> None:
        self._origin = datetime.fromisoformat(start)
        self._step = step_seconds
        self._ticks = itertools.count()
        self._last = self._origin.isoformat()

    def __call__(self) -> str:
        self._last = (self._origin + timedelta(seconds=self._step * next(self._ticks))
                      ).isoformat()
        return self._last

    def now(self) -> str:
        return self._last


def fixed_clock(
    start: str = "2026-10-20T09:00:00+00:00", step_seconds: float = 60
) -> FixedClock:
    """Return a clock whose first reading is `start`, each later one a step later."""
    return FixedClock(start, step_seconds)


def system_clock() -> str:
    """The current UTC time, to the second."""
    return _utc_second(int(time.time()))


@functools.lru_cache(maxsize=1)
def _utc_second(second: int) -> str:
    # A batch reads the clock for each of its memories, mostly within one second: its
    # reading formatted once (a datetime's isoformat was 2 µs of a memory's 60 on
    # PostgreSQL's bulk path).
    return datetime.fromtimestamp(second, UTC).isoformat()


def _utc_form(name: str, reading: str) -> str | None:
    """The instant a reading names, in the one fixed-width UTC form expiry times are stored
    and compared in; None for a reading without a UTC offset, which names no instant."""
    moment = datetime.fromisoformat(reading)
    if moment.utcoffset() is None:
        return None
    try:
        return moment.astimezone(UTC).isoformat(timespec="microseconds")
    except OverflowError:
        raise MemoryInputError(f"{name} is outside the years 1 to 9999 in UTC") from None


def _instant(name: str, reading: str) -> str:
    """_utc_form, where a reading without an instant is the caller's error."""
    instant = _utc_form(name, reading)
    if instant is None:
        raise MemoryInputError(f"{name} has no UTC offset, so the instant it names is unknown")
    return instant


def _expiry(created_at: str, ttl: float) -> str:
    start = datetime.fromisoformat(_instant("the clock reading a ttl counts from", created_at))
    try:
        return (start + timedelta(seconds=ttl)).isoformat(timespec="microseconds")
    except OverflowError:
        raise MemoryInputError("ttl reaches past the year 9999") from None


def _same_text(text: str) -> str:
    """The text as dedupe compares it: NFKC, case folded, its whitespace runs one space."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    # Every whitespace character but the space is unprintable: a printable text without
    # two spaces in a row or at either end is its own split and join (1.3 us a turn).
    if (folded.isprintable() and "  " not in folded and not folded.startswith(" ")
            and not folded.endswith(" ")):
        return folded
    return " ".join(folded.split())


def _text_key(text: str) -> str:
    """The key a memory's text is looked up by for dedupe: a hash of its _same_text."""
    return hashlib.blake2b(_same_text(text).encode(), digest_size=16).hexdigest()


def _conversation_of(source: str) -> str | None:
    """The conversation a memory's source names: the text before its last "/" (the
    seed's own sources read "trip-planning/turn-3"); None for a source without one."""
    return source.rpartition("/")[0] or None


def _check_conversation(conversation: object) -> str:
    """A conversation as sources name it, a trailing "/" dropped."""
    given = _check_text("conversation", conversation, MAX_TEXT)
    named = given[:-1] if given.endswith("/") else given
    if not named.strip():
        raise MemoryInputError("conversation must not be blank")
    return named


# Each ASCII letter or digit byte kept, every other byte a space: the words of a text
# whose lowercase holds no character outside ASCII are its split bytes, the same words
# WORD and _ALNUM_RUN find, at a third of the regular expression's cost (4 of a turn's
# 12 us of stemming).
_ASCII_WORD_BYTES = bytes.maketrans(
    bytes(range(256)), bytes(byte if chr(byte).isascii() and chr(byte).isalnum() else 32
                             for byte in range(256)))


def _ascii_words(lowered: str) -> list[str]:
    """WORD's matches in an ASCII text with no capitals."""
    return lowered.encode().translate(_ASCII_WORD_BYTES).decode().split()


def words(text: str) -> set[str]:
    """The words of `text` under the `exact` rule: lower-cased, stopwords removed."""
    lowered = text.lower()
    found = _ascii_words(lowered) if lowered.isascii() else WORD.findall(lowered)
    return set(found).difference(STOPWORDS)


@functools.cache
def _stemmer() -> Callable[[str], str]:
    """Snowball's English stemmer (PyStemmer's C code where installed), with a cache:
    words repeat, and the pure-Python stemmer takes tens of microseconds a word."""
    try:
        snowball = importlib.import_module("snowballstemmer")
    except ImportError:
        raise StoreError("matching='stems' needs the snowballstemmer package: pip install"
                         " snowballstemmer PyStemmer (or '.[stems]' from a checkout)") from None
    stem: Callable[[str], str] = snowball.stemmer("english").stemWord
    return functools.lru_cache(maxsize=1 << 16)(stem)


def _add_parts(found: set[str], parts: Iterable[str], paired: re.Pattern[str],
               stopwords: frozenset[str] = STOPWORDS) -> None:
    """Add the words of a run's script `parts`: a part `paired` matches becomes its
    overlapping two-character pieces (a lone character is one); any other part its
    Snowball English stem, unless it is one of the `stopwords`."""
    stem = _stemmer()
    for part in parts:
        if paired.match(part):
            found.update(part[i : i + 2] for i in range(max(1, len(part) - 1)))
        elif part not in stopwords:
            found.add(stem(part))


def _stems_first(text: str) -> set[str]:
    """The first version of the `stems` rule, which folded case before normalizing (so
    words could keep capitals) and split words at combining marks: the words of the
    files it indexed, until they are reindexed."""
    found: set[str] = set()
    for run in _ALNUM_RUN.findall(unicodedata.normalize("NFKC", text.casefold())):
        _add_parts(found, _SCRIPT_PART.findall(run), _CJK_PART)
    return found


def _ranges(code_points: Iterable[int]) -> str:
    """A regular expression's character class body holding `code_points` (ascending)."""
    spans: list[list[int]] = []
    for code_point in code_points:
        if spans and spans[-1][1] == code_point - 1:
            spans[-1][1] = code_point
        else:
            spans.append([code_point, code_point])
    return "".join(re.escape(chr(low)) + ("" if low == high else "-" + re.escape(chr(high)))
                   for low, high in spans)


@functools.cache
def _word_patterns() -> tuple[re.Pattern[str], re.Pattern[str]]:
    """Runs of letters, digits and combining marks (a mark stays with its letter, as in
    Unicode's word boundaries, UAX #29), and a Latin or Greek letter's nonspacing marks.
    Built from this Python's Unicode data at the first use of the rule (about 30 ms):
    every mark lies in planes 0 and 1 but for plane 14's variation selectors."""
    planes = itertools.chain(range(0x20000), range(0xE0000, 0xE0200))
    categories = [(code_point, unicodedata.category(chr(code_point))) for code_point in planes]
    marks = _ranges(code_point for code_point, kind in categories if kind[0] == "M")
    nonspacing = _ranges(code_point for code_point, kind in categories if kind == "Mn")
    return (re.compile(f"(?:[^\\W_]|[{marks}])+"),
            re.compile(f"([{_FOLDED_SCRIPTS}])[{nonspacing}]+"))


def stems(text: str) -> set[str]:
    """The words of `text` under the `stems` rule. The text is NFKC-normalized, then
    case-folded and normalized again; its words are the maximal runs of letters, digits
    and combining marks, the nonspacing marks of Latin and Greek letters dropped. A part
    in Han, Hiragana, Katakana, Hangul, Thai, Lao, Myanmar or Khmer is split into
    overlapping two-character words (a lone character is one); any other part is dropped
    if one of NLTK's English stopwords, else reduced to its Snowball English stem."""
    return _stems_by(text, _STEMS_STOPWORDS)


def _stems_second(text: str) -> set[str]:
    """The second version of the `stems` rule: the third's, but with the exact rule's
    shorter list of stopwords; the words of the files it indexed, until reindexed."""
    return _stems_by(text, STOPWORDS)


def _stems_by(text: str, stopwords: frozenset[str]) -> set[str]:
    folded = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold())
    if folded.isascii():  # each run one part, neither paired nor marked: stemmed at once
        stem = _stemmer()
        return set(map(stem, set(_ascii_words(folded)).difference(stopwords)))
    runs, diacritics = _word_patterns()
    found: set[str] = set()
    for run in runs.findall(folded):
        if not run.isascii():
            bare = diacritics.sub(r"\1", unicodedata.normalize("NFD", run))
            run = unicodedata.normalize("NFC", bare)
        _add_parts(found, _PAIRED_PART.findall(run), _PAIRED, stopwords)
    return found


# A memory's date as the dated rules index it: the English month names (not the locale's).
_MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august",
           "september", "october", "november", "december")


def _date_words(created_at: str) -> str:
    """The date of a created_at as words: its day of the month, month name and year, as
    written (in its own UTC offset), such as "8 may 2023"."""
    day = datetime.fromisoformat(created_at)
    return f"{day.day} {_MONTHS[day.month - 1]} {day.year}"


class _Rule(NamedTuple):
    """A matching rule at one version: which rule, the words of a text (a query's), and
    whether a memory's words hold its date's too."""

    matching: Matching
    words: Callable[[str], set[str]]
    dated: bool = False

    def of_memory(self, text: str, created_at: str) -> set[str]:
        """The words a memory is indexed by: its text's, and its date's if dated."""
        found = self.words(text)  # a new set: grown in place, not copied
        if self.dated:
            found |= _words_of_date(self.words, created_at)
        return found


@functools.lru_cache(maxsize=1024)
def _words_of_date(words: Callable[[str], set[str]], created_at: str) -> frozenset[str]:
    """The words of a created_at's date under a rule's `words`: the memories of a batch,
    and of a day, share them."""
    return frozenset(words(_date_words(created_at)))


# The matching rules as a file records them: the rule, with the version of it the file's
# word index was built by ("stems" alone is the first version). A rule's newest version
# is what a new or reindexed file records. A file keeps the version it records, so its
# results do not change under it, until `reindex`; but the first stems version split
# words wrongly, so a file of it is reindexed when first opened to write (_SUPERSEDED).
_RULES: dict[str, _Rule] = {
    "exact": _Rule("exact", words),
    "stems": _Rule("stems", _stems_first),
    "stems-2": _Rule("stems", _stems_second),
    "stems-3": _Rule("stems", stems),
    "stems-4": _Rule("stems", stems, dated=True),
}
_RECORDED: dict[Matching, str] = {"exact": "exact", "stems": "stems-4"}
_SUPERSEDED = frozenset({"stems"})
# After the rule, since this code: from how many memories an owner's words are indexed
# (see INDEX_FROM). A file that records none indexes every owner's, as it always did.
_INDEX_FROM_MARK = ";index-from="


def _recording(matching: Matching) -> str:
    """What a new or reindexed file records: the rule's newest version and INDEX_FROM."""
    return f"{_RECORDED[matching]}{_INDEX_FROM_MARK}{INDEX_FROM:d}"


def _recorded_rule(recorded: str) -> tuple[str, int]:
    """The rule and the index's threshold a file records; SchemaError if this code does
    not know them. The one threshold this code writes is INDEX_FROM: under another, the
    owners it takes to be unindexed may hold rows and the others lack them, and recall
    would count a memory twice or miss it. (A release that changes INDEX_FROM keeps
    reading the thresholds earlier ones wrote.)"""
    rule, mark, index_from = recorded.partition(_INDEX_FROM_MARK)
    if rule not in _RULES or (mark and index_from != f"{INDEX_FROM:d}"):
        raise SchemaError("the file records a matching rule this code does not know")
    return rule, INDEX_FROM if mark else 0


def _rule_of(recorded: str) -> _Rule:
    """The rule a file records, by its recorded name; StoreError now if it cannot run
    here."""
    rule = _RULES[recorded]
    if rule.matching == "stems":
        _stemmer()
    return rule


# -- the word index --------------------------------------------------------------------

def _pack(ids: Iterable[int]) -> bytes:
    packed = array.array("q", ids)
    if sys.byteorder == "big":
        packed.byteswap()
    return packed.tobytes()


_DAMAGED_POSTINGS = "the word index is damaged: a postings row is not a run of ids"


def _checked(blob: object) -> bytes:
    """A postings row's ids as stored; SchemaError unless they are a run of whole ids."""
    if type(blob) is not bytes or len(blob) % 8:
        raise SchemaError(_DAMAGED_POSTINGS)
    return blob


def _unpack(blob: object) -> array.array[int]:
    ids = array.array("q")
    ids.frombytes(_checked(blob))
    if sys.byteorder == "big":
        ids.byteswap()
    return ids


_Owner = tuple[str, str | None]  # (user_id, task_id): whose postings a row of the index holds
_Newest = dict[str, tuple[int, int]]  # word: (first_id, bytes of ids) of its newest row


def _postings_of(rows: Iterable[tuple[int, str, str | None, str, str]],
                 rule: _Rule) -> dict[_Owner, dict[str, list[int]]]:
    """The postings of (id, user_id, task_id, text, created_at) rows, ids ascending: each
    owner's words, each with the ids of the rows that hold it."""
    owners: dict[_Owner, dict[str, list[int]]] = {}
    for memory_id, user_id, task_id, text, created_at in rows:
        by_word = owners.get((user_id, task_id))
        if by_word is None:
            by_word = owners[user_id, task_id] = collections.defaultdict(list)
        for word in rule.of_memory(text, created_at):
            by_word[word].append(memory_id)
    return owners


def _weight(text: str) -> int:
    """What a memory weighs toward its owner's index threshold: one for each _WEIGHED_BY
    characters of its text begun."""
    return 1 + (len(text) - 1) // _WEIGHED_BY


class _Held(NamedTuple):
    """What a write needs to know of an owner it writes for."""

    #: What the owner's memories weigh (_weight): its words are indexed from index_from.
    weight: int
    #: How many the scope of its task (of the user level alone for the user level) holds.
    in_scope: int
    #: The newest postings row of each of the written words that has one.
    newest: _Newest


def _ask_held(db: _Session, owners: dict[_Owner, dict[str, list[int]]],
              index_from: int) -> Callable[[], dict[_Owner, _Held]]:
    """What each owner holds, for the words it is written with, asked now and read when
    the returned function is called (in a batch, once the batch has gone). An engine
    that does not ask ahead reads the counts first and asks for the newest rows of the
    indexed owners alone (an owner weighing less than `index_from` has none)."""
    listed = list(owners)
    counted = db.ask_each(_SQL_SCOPE_COUNTS, [(user, task or "") for user, task in listed])

    def own(owner: _Owner, counts: list[Any]) -> int:  # its weight
        return sum(weight for key, _, weight in counts if key == (owner[1] or ""))

    indexed = listed
    if not db.asks_ahead:
        counted = counted().copy  # read now, and again when read
        indexed = [owner for owner, counts in zip(listed, counted(), strict=True)
                   if own(owner, counts) >= index_from]
    newest = db.ask_each(_SQL_NEWEST_POSTINGS, [
        (user, task, user, task, json.dumps(sorted(owners[user, task])), user, task or "",
         index_from) for user, task in indexed])

    @functools.cache  # read once, however often asked
    def read() -> dict[_Owner, _Held]:
        found = dict(zip(indexed, newest(), strict=True))
        return {owner: _Held(own(owner, counts), sum(n for _, n, _ in counts), {
            word: (first_id, size) for word, first_id, size in found.get(owner, ())
            if first_id is not None}) for owner, counts in zip(listed, counted(), strict=True)}
    return read


class _Group(NamedTuple):
    """One group of a write's users: its rows' positions, scopes (each user's first apart)
    and words (each owner's, by position), how many rows each owner gets and what they
    weigh, and what was asked for it: the first scopes' expired memories, and what its
    owners hold."""

    users: list[str]
    positions: list[int]
    scopes: list[_ScopeKey]
    firsts: list[_ScopeKey]
    words: dict[_Owner, dict[str, list[int]]]
    added: collections.Counter[_Owner]
    weighed: collections.Counter[_Owner]
    purgeable: Callable[[], dict[str, list[Any]]]
    held: Callable[[], dict[_Owner, _Held]]


def _add_postings(db: _Session, owners: dict[_Owner, dict[str, list[int]]],
                  newest: dict[_Owner, _Newest]) -> None:
    """Write new postings, extending each word's `newest` row where it has room."""
    appends, new_rows = [], []
    for (user_id, task_id), by_word in owners.items():
        their_newest = newest.get((user_id, task_id), {})
        for word in sorted(by_word):  # key order: the writes walk the index pages in turn
            ids = by_word[word]
            first_id, size = their_newest.get(word, (None, _MAX_ID))
            if size // 8 + len(ids) <= POSTINGS_PER_ROW:
                appends.append((_pack(ids), user_id, task_id, word, first_id))
                continue
            for start in range(0, len(ids), POSTINGS_PER_ROW):
                run = ids[start : start + POSTINGS_PER_ROW]
                new_rows.append((user_id, word, run[0], task_id, _pack(run)))
    db.executemany(_SQL_APPEND_POSTINGS, appends)
    db.executemany(_SQL_INSERT_POSTINGS, new_rows)


def _index_words(db: _Session, rows: Iterable[tuple[int, str, str | None, str, str]],
                 rule: _Rule, index_from: int) -> None:
    """Index (id, user_id, task_id, text, created_at) rows, ids ascending, whose owners
    have no postings yet and hold no other memories: those of owners whose rows weigh
    `index_from` or more."""
    rows = list(rows)
    held: collections.Counter[_Owner] = collections.Counter()
    for _, user_id, task_id, text, _ in rows:
        held[user_id, task_id] += _weight(text)
    _add_postings(db, _postings_of(
        (row for row in rows if held[row[1], row[2]] >= index_from), rule), {})


def _unindexing(db: _Session, user_id: str, rows: Sequence[tuple[Any, ...]], rule: _Rule,
                index_from: int) -> Callable[[], None]:
    """What deleting the user's memories `rows` (_MEMORY_COLUMNS) takes from the index, the
    counts and the sealed blocks, asked now (two round trips to a server: the owners'
    counts with where their blocks are, then the rows of the memories' words); the
    returned function writes it, in the caller's batch, before the memories' own rows go.
    An owner left weighing less than `index_from` loses all its postings; a block
    holding any of the memories is dropped, so that no block outlives a vector."""
    removed = collections.Counter(task_id for _, task_id, *_ in rows)
    lighter: collections.Counter[str | None] = collections.Counter()
    for _, task_id, text, *_ in rows:
        lighter[task_id] += _weight(text)
    with db.batch():
        counts = [db.ask(_SQL_OWNER_COUNT, (user_id, task_id or "")) for task_id in removed]
        drop_blocks = _ask_vector_blocks(db, user_id, [(row[0], row[1]) for row in rows])
    indexed, unindexed = set(), []
    for task_id, counted in zip(removed, counts, strict=True):
        weight = next(iter(counted()), (0, 0))[1]
        if weight - lighter[task_id] >= index_from:
            indexed.add(task_id)
        elif weight >= index_from:
            unindexed.append((user_id, task_id))
    groups: dict[tuple[str | None, str], set[int]] = collections.defaultdict(set)
    for memory_id, task_id, text, _, created_at, *_ in rows:
        for word in rule.of_memory(text, created_at) if task_id in indexed else ():
            groups[task_id, word].add(memory_id)
    # Every word's rows asked at once (one round trip to a server), then rewritten: each
    # row's ids are the (user, word, task)'s alone, so no rewrite changes another's.
    words = list(groups.items())
    with db.batch() if words else contextlib.nullcontext():
        asked = db.ask_each(_SQL_POSTINGS_SPAN, [
            (user_id, task_id, word, user_id, task_id, word, min(gone), min(gone), max(gone))
            for (task_id, word), gone in words])
    rewritten, dropped = [], []
    for ((task_id, word), gone), span in zip(words, asked(), strict=True):
        key = (user_id, task_id, word)
        for first_id, blob in span:
            ids = _unpack(blob)
            kept = [i for i in ids if i not in gone]
            if len(kept) == len(ids):
                continue
            if kept:
                rewritten.append((kept[0], _pack(kept), *key, first_id))
            else:
                dropped.append((*key, first_id))

    def write() -> None:
        db.executemany(_SQL_DROP_OWNER_POSTINGS, unindexed)
        db.executemany(_SQL_COUNT_SUBTRACT, [(n, lighter[task], user_id, task or "")
                                             for task, n in removed.items()])
        db.executemany(_SQL_COUNT_DROP_EMPTY, [(user_id, task or "") for task in removed])
        db.executemany(_SQL_REWRITE_POSTINGS, rewritten)
        db.executemany(_SQL_DROP_POSTINGS, dropped)
        drop_blocks()
    return write


# -- engines and sessions --------------------------------------------------------------
# The store talks to an engine through two narrow seams. An engine opens a database,
# lends each call a session, and closes; it names itself and the keyword arguments of
# MemoryStore it accepts. A session runs one call's statements: it begins, commits and
# rolls back, batches and asks, confines the transaction to its users, and reports on
# the database. Each translates its own driver's errors into the store's at its boundary,
# so the store never names a driver and never asks which engine it has. An engine for a
# URL lives in a module of its own beside this one, found by the URL's scheme (_ENGINES).

class _Session:
    """One call's statements on one connection to the database (see above)."""

    #: Recall reads its words' map of rows before any of their postings: a server sends
    #: a whole result at once, so reading every posting to find there are too many costs
    #: a common word's postings over the socket.
    reads_map_first = False
    #: Top-k recall reads the common words only where candidates are (MaxScore): each
    #: look-up is a statement, cheap in-process but a round trip to a server.
    skips_common_words = False
    #: How many users' rows a write for many users writes at once, each group's
    #: statements naming only its users (None: all at once): PostgreSQL's row guard
    #: costs, for each row, in proportion to the users the statement may see.
    users_per_batch: int | None = None
    #: A write asks what it needs to know of its owners all at once, read only once all
    #: is asked (a round trip saved over a network), rather than step by step, asking
    #: only what the counts show can be there (statements saved in-process).
    asks_ahead = False
    #: A write of at least this many rows sends them before it finds their words, so
    #: that a server inserts them while the client stems (their ids asked in a round trip
    #: of its own first); None: never (in-process, nothing would run meanwhile).
    sends_rows_first_from: int | None = None
    #: The dialect of the statement forms it runs (_Sql.forms); "" for the SQLite text.
    dialect = ""
    #: Whether the memories have their conversations (not in a file of a layout before
    #: version 6, read as it is when opened read-only).
    has_conversations = True
    #: Whether the store has the table of vectors (likewise, from version 7).
    has_vectors = True
    #: Whether the store holds its vectors in sealed blocks as well (likewise, from version
    #: 9 on SQLite), which its writes keep and its recalls read.
    has_vector_blocks = True
    #: Whether its owners are weighed (memory_counts.weight): an older file opened
    #: read-only has counts alone.
    has_weights = True
    #: Whether it keeps receipts (likewise, from version 12 on SQLite).
    has_receipts = True
    #: Whether it has the table of superseded versions (likewise, from version 13).
    has_history = True
    #: Whether a range of keys is read owner by owner (the key index leads with the
    #: owner), or for both owners of a scope at once (it leads with the key).
    keys_by_owner = True
    #: Set while a write's receipt is still to be recorded: the write's own last step
    #: leaves the commit to the end of its transaction, after the receipt.
    holding = False
    #: What a write gives _SQL_INSERT for a NULL: None, or '' where binding a None costs
    #: the driver more (sqlite3 looks it up in its registry of adapters, 0.5 µs a
    #: parameter against 0.1 for a str: a tenth of a bulk write's work in SQLite).
    null: str | None = None
    #: Run one statement of the store, or one with many rows of parameters.
    execute: Callable[..., Any]
    executemany: Callable[..., Any]

    @property
    def in_transaction(self) -> bool:
        raise NotImplementedError

    def begin(self, write: bool) -> None:
        raise NotImplementedError

    def commit(self) -> None:
        raise NotImplementedError

    def rollback(self) -> None:
        """Roll back; a failure to is StoreError."""
        raise NotImplementedError

    def finish(self) -> None:
        """Commit, as a write's last step does: unless a receipt is still to be recorded
        (holding), which the end of the transaction then commits with it."""
        if not self.holding:
            self.commit()

    def batch(self) -> contextlib.AbstractContextManager[object]:
        """The block's statements in order, sent together where the engine can: over a
        network each one's round trip is most of a small write's time."""
        return contextlib.nullcontext()

    def send_now(self) -> None:
        """In a batch, hand what it has queued to the engine now, not with its next
        statement or at its end, so that a server works on it meanwhile."""

    def last_statement(self, sql: str, parameters: Any) -> Any:
        """The cursor of a read transaction's last statement, committing with it where
        that saves a round trip (else _transaction commits once the rows are read)."""
        return self.execute(sql, parameters)

    def confine(self, users: set[str] | None, write: bool) -> Any:
        """Name the users a transaction may see (None: every user, an operator's call) and
        take a write's locks; a cursor that read the matching rule with them, or None."""
        return None

    def recorded_rule(self, found: Any = None) -> str | None:
        """The matching rule the store records, from `found` (a cursor that read it) or
        read now; None if it records none."""
        row = (found if found is not None else self.execute(_SQL_MATCHING)).fetchone()
        return None if row is None else str(row[0])

    def narrow(self, users: list[str]) -> None:
        """Within a write, let the statements that follow see only `users` (some of those
        the transaction named), where that makes the row guard cheaper."""

    #: Whether the store may keep a vectors file beside it (SQLite's), made for the token
    #: the database records.
    beside_a_file = False

    def vector_file(self, dimensions: int) -> _VectorFile | None:
        """The file of the store's sealed blocks, ready for vectors of these dimensions;
        None where the store keeps none (a server's, one in memory, one without numpy,
        one refused)."""
        return None

    def keeps_vector_file(self) -> bool:
        """Whether a vectors file lies beside the store, whose records a deletion zeroes."""
        return False

    def zero_vector_blocks(self, firsts: Iterable[int]) -> None:
        """Zero the vectors file's records of these dropped blocks, before the deletion
        commits (a file this store refuses is left as it is, said once in the log)."""

    def add_vectors(self, rows: list[tuple[int, str, str | None, bytes]],
                    dimensions: int) -> None:
        """Write memories' vectors: (id, user, task, its vectors of `dimensions`) each."""
        self.executemany(_SQL_INSERT_VECTORS, rows)

    def served_vectors(self, key: _ScopeKey, dimensions: int,
                       approximate: bool) -> _VectorSearch | None:
        """The scope's vectors as the database scores them itself (exactly, or by its
        approximate index), where it can; None where recall must read them."""
        return None

    def ask(self, sql: str, parameters: Any) -> Callable[[], list[Any]]:
        """A read's rows, asked now and read when the returned function is called: in a
        batch, once the batch has gone."""
        rows = self.execute(sql, parameters).fetchall()
        return lambda: rows

    def blocks(self, sql: str, parameters: Any, size: int) -> Iterator[list[Any]]:
        """A read's rows, `size` at a time, as they are fetched: the engine holds the rest
        (SQLite steps through the statement; a server keeps a cursor)."""
        cursor = self.execute(sql, parameters)
        while rows := cursor.fetchmany(size):
            yield rows

    def ask_each(self, sql: str, rows: list[tuple[Any, ...]]) -> Callable[[], list[list[Any]]]:
        """ask's rows for each row of parameters, in their order: in a batch, once it has
        gone."""
        asked = [self.ask(sql, parameters) for parameters in rows]
        return lambda: [ask() for ask in asked]

    def ask_new_ids(self, count: int) -> Callable[[], list[int]]:
        """`count` ids, each larger than any handed out before, never to be handed out
        again; asked now and read when the returned function is called: in a batch, once
        it has gone."""
        raise NotImplementedError

    def reserve_ids(self, count: int) -> list[int]:
        """`count` ids no memory will be given: for versions that were never memories
        here (an import's history)."""
        return self.ask_new_ids(count)()

    def version(self) -> int:
        raise NotImplementedError

    def size(self) -> int:
        """Bytes the store takes on disk."""
        raise NotImplementedError

    def scrub(self) -> None:
        """Push deleted text out of what the database keeps, where it can be at once."""

    def compact(self) -> None:
        raise NotImplementedError

    def check(self) -> dict[str, Any]:
        raise NotImplementedError

    def backup(self, destination: str) -> None:
        raise NotImplementedError


class _Engine:
    """A store's database: it opens, lends each call a session, and closes (see above)."""

    #: The database's name, for the log.
    name = ""
    #: MemoryStore's keyword arguments of this engine alone, which it checks itself.
    options: frozenset[str] = frozenset()
    #: (device, inode) of the file, for the fork guard; None where there is no file.
    file: tuple[int, int] | None = None
    #: Whether the database scores vectors itself, exactly or by its own approximate
    #: index, as it did when the store opened (_Session.served_vectors).
    serves_vectors = False

    @classmethod
    def refused(cls, option: str) -> MemoryInputError:
        """The error for a keyword argument this engine does not take."""
        return MemoryInputError(f"{option} is not an option of {cls.name} stores")

    @classmethod
    def open(cls, path: str, *, read_only: bool, durable: bool, matching: Matching | None,
             create: bool, **options: Any) -> _Engine:
        """The engine, its database created or upgraded as need be (SchemaError if it
        cannot read it; StoreNotFound if there is none and not `create`)."""
        raise NotImplementedError

    def session(self) -> contextlib.AbstractContextManager[_Session]:
        """What one call runs on, for the length of the call; the driver's errors leave
        it as the store's."""
        raise NotImplementedError

    def set_trace_callback(self, trace: Callable[[str], object] | None) -> None:
        """Call `trace` with the text of each statement sent."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


@contextlib.contextmanager
def _transaction(db: _Session, write: bool) -> Iterator[_Session]:
    """Run the block in one transaction: a write one taking the write lock up front, or a
    read one that sees a single snapshot."""
    # BEGIN inside the try: a signal handler's exception (KeyboardInterrupt, a timeout)
    # surfaces only once BEGIN returns, by then holding the lock, and must release it too.
    try:
        db.holding = False
        db.begin(write)
        yield db
        if db.in_transaction:  # not if the block's last statement committed
            db.commit()
    except BaseException:
        if db.in_transaction:
            with contextlib.suppress(StoreError):
                db.rollback()
        raise


# -- the SQLite engine -----------------------------------------------------------------

def _store_error(exc: sqlite3.Error) -> StoreError:
    """The module's error for a sqlite3 one: damage is a SchemaError, the rest StoreError.
    SQLite's messages name its own objects, never a bound value, so they are kept."""
    damaged = (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB)
    if getattr(exc, "sqlite_errorcode", 0) & 0xFF in damaged:
        return SchemaError(f"the file is not a readable memory store: {exc}")
    return StoreError(f"the store could not do it: {exc}")


def _execute_script(db: _SqliteEngine, statements: Iterable[str]) -> None:
    # executescript() would commit on its own, outside the caller's transaction.
    for statement in statements:
        db.execute(statement)


def _upgrade_to_2(db: _SqliteEngine) -> None:
    """Version 1 (the core layout: one table) gains AUTOINCREMENT ids and the word index."""
    create_memories, create_scope_index, create_words = _SQLITE_VERSION_2
    db.execute("ALTER TABLE memories RENAME TO memories_v1")
    db.execute(create_memories)
    db.execute(
        "INSERT INTO memories (id, user_id, task_id, text, source, created_at)"
        " SELECT id, user_id, task_id, text, source, created_at FROM memories_v1 ORDER BY id"
    )
    # Dropping the old table drops its index too, whatever a version-1 writer named it.
    db.execute("DROP TABLE memories_v1")
    db.execute(create_scope_index)
    db.execute(create_words)
    rows = db.execute("SELECT id, user_id, task_id, text, created_at FROM memories ORDER BY id")
    _index_words(db, rows, _RULES["exact"], 0)


def _upgrade_to_3(db: _SqliteEngine) -> None:
    """Version 2 gains the settings (its rule is `exact`) and the per-(user, task) counts."""
    create_settings, create_counts = _SQLITE_VERSION_3[len(_SQLITE_VERSION_2):]
    db.execute(create_settings)
    db.execute(_SQL_SET_MATCHING, ("exact",))
    db.execute(create_counts)
    db.execute("INSERT INTO memory_counts (user_id, task_key, memories)"
               " SELECT user_id, coalesce(task_id, ''), count(*) FROM memories"
               " GROUP BY user_id, task_id")


def _upgrade_to_4(db: _SqliteEngine) -> None:
    """Version 3 gains expiry: a column (NULL: never) and an index of what expires."""
    _execute_script(db, _SQLITE_VERSION_4_FIRST[len(_SQLITE_VERSION_3):])


def _cover_the_expiry_index(db: _SqliteEngine) -> None:
    """Version 4's first layout: its expiry index gains task_id, to cover the scope."""
    db.execute(_SQLITE_DROP_EXPIRY_INDEX)
    _execute_script(db, _SQLITE_VERSION_4[len(_SQLITE_VERSION_3) + 1:])


def _key_every_text(db: _Session) -> None:
    """Give every memory its text's key (version 5 on SQLite, 2 on PostgreSQL)."""
    db.executemany(_SQL_SET_TEXT_KEY, [(_text_key(text), user_id, memory_id)
                                       for user_id, memory_id, text
                                       in db.execute(_SQL_ALL_TEXTS).fetchall()])


def _upgrade_to_5(db: _SqliteEngine) -> None:
    """Version 4 gains the text keys that dedupe looks memories up by."""
    add_column, create_index = _SQLITE_VERSION_5[len(_SQLITE_VERSION_4):]
    db.execute(add_column)
    _key_every_text(db)
    db.execute(create_index)


def _give_every_conversation(db: _Session) -> None:
    """Give every memory its conversation (version 6 on SQLite, 3 on PostgreSQL)."""
    db.executemany(_SQL_SET_CONVERSATION, [(_conversation_of(source), user_id, memory_id)
                                           for user_id, memory_id, source
                                           in db.execute(_SQL_ALL_SOURCES).fetchall()])


def _upgrade_to_6(db: _SqliteEngine) -> None:
    """Version 5 gains the conversations that recall with context finds neighbours in."""
    add_column, create_index = _SQLITE_VERSION_6[len(_SQLITE_VERSION_5):]
    db.execute(add_column)
    _give_every_conversation(db)
    db.execute(create_index)


def _upgrade_to_7(db: _SqliteEngine) -> None:
    """Version 6 gains the table of vectors (empty: no embedder made any yet)."""
    _execute_script(db, _SQLITE_VERSION_7[len(_SQLITE_VERSION_6):])


def _upgrade_to_8(db: _SqliteEngine) -> None:
    """Version 7 gains keys, metadata and embedding choices (none yet: every memory is
    embedded from its text) and the table of metadata terms."""
    _execute_script(db, _SQLITE_VERSION_8[len(_SQLITE_VERSION_7):])


def _seal_every_owner(db: _Session) -> None:
    """Seal the blocks of every owner's vectors, as its writes would have (the upgrade that
    adds the blocks: SQLite's version 9, PostgreSQL's 7)."""
    recorded = db.execute(_SQL_EMBEDDER).fetchone()
    if recorded is None:  # no embedder made any vector
        return
    dimensions = json.loads(recorded[0])["dimensions"]
    for (user,) in db.execute(_SQL_USERS).fetchall():
        tasks = [task or None for (task,) in db.execute(_SQL_TASKS_COUNTED, (user,))]
        _seal_vector_blocks(db, user, tasks, dimensions)


def _upgrade_to_9(db: _SqliteEngine) -> None:
    """Version 8 gains the table of sealed blocks of vectors, and each owner's blocks of
    the vectors it holds."""
    _execute_script(db, _SQLITE_VERSION_9[len(_SQLITE_VERSION_8):])
    _seal_every_owner(db)


def _weigh_every_owner(db: _Session) -> None:
    """Weigh every owner's memories, and index the words of those their weight takes to
    the file's threshold where their count did not (the upgrade that adds the weights:
    SQLite's version 10, PostgreSQL's 9). Their postings are made as a write that takes an
    owner to the threshold makes them."""
    recorded = db.execute(_SQL_MATCHING).fetchone()[0]
    matching, index_from = _recorded_rule(recorded)
    rule = None
    for (user,) in db.execute(_SQL_USERS).fetchall():
        db.execute(_SQL_WEIGH_OWNERS, (user, user))
        if not index_from:  # every owner's words are indexed already
            continue
        for (task_key,) in db.execute(_SQL_NEWLY_INDEXED, (user, index_from, index_from)
                                      ).fetchall():
            rule = rule or _rule_of(matching)
            task = task_key or None
            rows = db.execute(_SQL_OWNER_TEXTS, (user, task_key, task)).fetchall()
            _index_words(db, ((memory_id, user, task, text, created_at)
                              for memory_id, text, created_at in rows), rule, index_from)


def _upgrade_to_10(db: _SqliteEngine) -> None:
    """Version 9 gains the weight of each owner's memories, by which its words are
    indexed."""
    _execute_script(db, _SQLITE_VERSION_10[len(_SQLITE_VERSION_9):])
    _weigh_every_owner(db)


def _upgrade_to_11(db: _SqliteEngine) -> None:
    """Version 10's memories gain their versions (NULL: 1)."""
    _execute_script(db, _SQLITE_VERSION_11[len(_SQLITE_VERSION_10):])


def _upgrade_to_12(db: _SqliteEngine) -> None:
    """Version 11 gains the table of receipts."""
    _execute_script(db, _SQLITE_VERSION_12[len(_SQLITE_VERSION_11):])


def _upgrade_to_13(db: _SqliteEngine) -> None:
    """Version 12 gains the table of superseded versions."""
    _execute_script(db, _SQLITE_VERSION_13[len(_SQLITE_VERSION_12):])


def _upgrade_to_14(db: _SqliteEngine) -> None:
    """Version 13's versions gain their indexes by id and by key."""
    _execute_script(db, _SQLITE_VERSION_14[len(_SQLITE_VERSION_13):])


def _upgrade_to_15(db: _SqliteEngine) -> None:
    """Version 14's memories and versions gain their windows of validity (none)."""
    _execute_script(db, _SQLITE_ADD_VALIDITY)


def _upgrade_to_16(db: _SqliteEngine) -> None:
    """Version 15's memories and versions gain their indexes by when each was written
    and superseded."""
    _execute_script(db, _SQLITE_INDEX_CHANGES)


# MIGRATIONS[n] brings a file of layout n (0: version 1, then SQLITE_LAYOUTS in order) to
# layout n + 1; a file runs every step after its own layout, in order, all in one
# transaction with the version stamp.
MIGRATIONS: list[Callable[[_SqliteEngine], None]] = [
    _upgrade_to_2, _upgrade_to_3, _upgrade_to_4, _cover_the_expiry_index, _upgrade_to_5,
    _upgrade_to_6, _upgrade_to_7, _upgrade_to_8, _upgrade_to_9, _upgrade_to_10,
    _upgrade_to_11, _upgrade_to_12, _upgrade_to_13, _upgrade_to_14, _upgrade_to_15,
    _upgrade_to_16,
]
_Objects = frozenset[tuple[str, str, str, str]]


def _objects(db: sqlite3.Connection) -> _Objects:
    """Every schema object of the file: (type, name, table, SQL with whitespace collapsed)."""
    return frozenset((kind, name, table, " ".join(sql.split()))
                     for kind, name, table, sql in db.execute(_SQLITE_OBJECTS))


@functools.cache
def _objects_of(layout: int) -> _Objects:
    """The objects of a file of SQLITE_LAYOUTS[layout]: what its statements make."""
    db = sqlite3.connect(":memory:")
    try:
        for statement in SQLITE_LAYOUTS[layout].statements:
            db.execute(statement)
        return _objects(db)
    finally:
        db.close()


def _is_version_1(db: sqlite3.Connection, objects: _Objects) -> bool:
    """The core layout: the memories table and indexes on it, nothing else."""
    columns = [tuple(column) for column in db.execute(_SQLITE_VERSION_1_COLUMNS)]
    return columns == _VERSION_1_COLUMNS and all(
        (kind == "table" and name in ("memories", "sqlite_sequence"))
        or (kind == "index" and table == "memories")
        for kind, name, table, _ in objects
    )


def _file_layout(db: sqlite3.Connection) -> int | None:
    """The file's layout: None for a new file, 0 for version 1, else 1 + its index in
    SQLITE_LAYOUTS; SchemaError unless every object in the file is exactly what that
    layout made: a planted trigger, view, table or index makes it foreign."""
    try:
        version, count = db.execute(_SQLITE_LAYOUT).fetchone()
        if version == 0 and count:
            raise SchemaError("the file holds tables but no schema version: not a memory store")
        if version == 0:
            return None
        if not 1 <= version <= SCHEMA_VERSION:
            raise SchemaError(
                f"the file has database schema version {version};"
                f" this code reads versions 1 to {SCHEMA_VERSION}"
            )
        objects = _objects(db)
        if version == 1 and _is_version_1(db, objects):
            return 0
        for n, layout in enumerate(SQLITE_LAYOUTS):
            if layout.version == version and objects == _objects_of(n):
                return n + 1
    except sqlite3.Error as exc:
        raise _store_error(exc) from exc
    raise SchemaError(
        f"the file is stamped schema version {version} but its tables, indexes or"
        " triggers are not exactly that version's: not a memory store this code trusts"
    )


def _create_private(path: str, *, existing: bool) -> None:
    """Create the file empty and readable by its owner alone. An existing file is used
    (`existing`) or refused; an existing empty one is made private, since the store is
    about to fill it. A symbolic link is followed only to a file that exists: through a
    dangling one, the exclusive create fails while SQLite would create the target."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags, 0o600)
    except FileExistsError:
        if not os.path.exists(path):
            raise StoreError("path is a symbolic link to a file that does not exist;"
                             " the store creates no file through a link") from None
        if not existing:
            raise StoreError("path exists; a backup never overwrites a file") from None
        if os.path.isfile(path) and os.path.getsize(path) == 0:
            with contextlib.suppress(OSError):
                os.chmod(path, 0o600)
        return
    except OSError as exc:
        raise StoreError(f"cannot create the file at path: {exc.strerror}") from None
    try:
        os.fchmod(fd, 0o600)  # the umask may have taken the owner's bits away
    finally:
        os.close(fd)


# (device, inode) of every file a store had open when this process, or one of its
# ancestors, forked. SQLite keeps one record of its locks on a file per process; fork()
# copies that record but not the POSIX locks it describes, so any connection to such a
# file in the child, new ones included, may write without a lock, and the parent's close
# then deletes the WAL under it: acknowledged writes lost, ids handed out twice. Python
# offers no way to reset that record, so the child refuses these files.
_FORKED_FILES: set[tuple[int, int]] = set()
_FORKED = (
    "SQLite's locks do not survive fork(): open stores only after forking (close them"
    " in the parent first, or use multiprocessing's 'spawn' or 'forkserver' method)"
)

# Connections a forked child inherited: never used, and never closed by this module,
# since closing one in the child could checkpoint the WAL and delete it under the parent.
_INHERITED: list[_Engine] = []


def _holds_a_file(path: str) -> bool:
    """Whether there is a file at `path` that may hold a store: an empty one holds none
    (SQLite would make one in it), unless a WAL beside it holds what is not yet in it."""
    if not os.path.isfile(path):
        return False
    wal = f"{path}-wal"
    return os.path.getsize(path) > 0 or (os.path.isfile(wal) and os.path.getsize(wal) > 0)


def _sqlite_uri(path: str, read_only: bool, create: bool) -> str:
    """The URI to open: the file, created first (privately) unless read-only or told not
    to create a store."""
    if path == ":memory:":
        return "file::memory:"
    if os.path.isdir(path):
        raise SchemaError("path is a directory, not a memory store")
    uri = pathlib.Path(path).absolute().as_uri()
    if (read_only or not create) and not _holds_a_file(path):
        raise StoreNotFound("no such memory store at path")
    if not read_only:
        _create_private(path, existing=True)
        return f"{uri}?mode=rwc"
    folder = os.path.dirname(os.path.abspath(path))
    if os.access(path, os.R_OK | os.W_OK) and os.access(folder, os.W_OK):
        # As any store: SQLite makes the -wal and -shm it needs and removes them when
        # the last connection closes. query_only, and the store's read_only, refuse
        # every write.
        return f"{uri}?mode=rw"
    if os.path.exists(f"{path}-wal"):
        return f"{uri}?mode=ro"
    # Nothing can be made here, and no WAL means no connection has the file open: read
    # it as unchanging, which needs no -shm (a writer that can create files here while
    # this store is open breaks that; README says so).
    return f"{uri}?mode=ro&immutable=1"


class _SqliteEngine(_Engine, _Session):
    """One SQLite file through one sqlite3 connection, in WAL mode: one call at a time,
    so the engine is its own session."""

    name = "SQLite"
    skips_common_words = True
    null = ""
    beside_a_file = True

    def __init__(self, connection: sqlite3.Connection, path: str) -> None:
        self.connection = connection
        self.path = path
        self._lock = threading.RLock()  # one connection: a call at a time
        self._writable, self._durable = False, True
        self._vectors: _VectorFile | None = None
        self._vectors_refused = False
        # Bound once: the store's hot path pays no call of its own per statement.
        self.execute = connection.execute
        self.executemany = connection.executemany

    @classmethod
    def refused(cls, option: str) -> MemoryInputError:
        return MemoryInputError(f"{option} is for a postgresql:// store; an SQLite file has"
                                " one connection, which waits for its lock up to"
                                f" {BUSY_TIMEOUT_SECONDS:g} seconds")

    @classmethod
    def open(cls, path: str, *, read_only: bool, durable: bool, matching: Matching | None,
             create: bool, **options: Any) -> _SqliteEngine:
        target = _sqlite_uri(path, read_only, create)
        file = None
        if path != ":memory:":
            stat = os.stat(path)
            file = (stat.st_dev, stat.st_ino)
            if file in _FORKED_FILES:
                raise StoreError(f"a store had this file open when this process forked; {_FORKED}")
        try:
            connection = sqlite3.connect(target, isolation_level=None,
                                         timeout=BUSY_TIMEOUT_SECONDS,
                                         check_same_thread=False, uri=True)
            # Before creating or upgrading: a build whose default is off would leave the
            # text of a table the upgrade drops in the file's free pages.
            connection.execute("PRAGMA secure_delete = ON")
        except sqlite3.Error as exc:
            raise _store_error(exc) from exc
        engine = cls(connection, path)
        engine.file = file
        try:
            # A failure to create or upgrade re-raises sqlite3's own error, as it came.
            engine._prepare(writable=not read_only, matching=matching)
            engine._configure(read_only, durable)
        except BaseException:
            connection.close()
            raise
        return engine

    def _prepare(self, writable: bool, matching: Matching | None) -> None:
        """Create or upgrade the file's schema; refuse a file this code cannot read. A
        new file gets the `matching` rule, `exact` if None."""
        layout = _file_layout(self.connection)
        if layout == len(SQLITE_LAYOUTS):
            return
        stamped = 0 if layout is None else 1 if layout == 0 else SQLITE_LAYOUTS[layout - 1].version
        if not writable and stamped >= _READS_AS_IT_IS:
            # Reads need nothing a later layout added, but for context and meaning.
            self.has_conversations = stamped >= _CONVERSATIONS_FROM
            self.has_vectors = stamped >= _VECTORS_FROM
            self.has_vector_blocks = stamped >= _VECTOR_BLOCKS_FROM
            self.has_weights = stamped >= _WEIGHTS_FROM
            self.has_receipts = stamped >= _RECEIPTS_FROM
            self.has_history = stamped >= _HISTORY_FROM
            if stamped < _RECORDS_FROM:
                _execute_script(self, _SQLITE_AS_RECORDS)
            elif stamped < _VERSIONS_FROM:
                _execute_script(self, _SQLITE_AS_VERSIONED)
            elif stamped < _VALIDITY_FROM:
                _execute_script(self, _SQLITE_AS_VALID)
            if self.has_history and stamped < _VALIDITY_FROM:
                _execute_script(self, _SQLITE_AS_VALID_HISTORY)
            return
        if not writable:
            raise SchemaError(f"the file is at schema version {stamped} and opened read-only")
        with _transaction(self, write=True):
            # Read again under the write lock: another process may have done it meanwhile.
            layout = _file_layout(self.connection)
            if layout is None:
                _execute_script(self, SCHEMA.split(";"))
                self.execute(_SQL_SET_MATCHING, (_recording(matching or "exact"),))
            else:
                for step in MIGRATIONS[layout:]:
                    step(self)
            self.execute(f"PRAGMA user_version = {SCHEMA_VERSION:d}")
        if layout is None:
            _log.info("created schema version %d", SCHEMA_VERSION)
        elif layout < len(SQLITE_LAYOUTS):
            _log.info("upgraded schema to version %d", SCHEMA_VERSION)

    def _configure(self, read_only: bool, durable: bool) -> None:
        # Only once the file is known to be ours: WAL changes the file's header. WAL lets
        # readers go on while one process writes; FULL syncs every commit to the disk.
        self._writable, self._durable = not read_only, durable
        try:
            self.execute(f"PRAGMA cache_size = -{_CACHE_KIB:d}")
            if read_only:
                self.execute("PRAGMA query_only = ON")
            elif self.path != ":memory:":
                self._when_not_busy("PRAGMA journal_mode = WAL")
            self.execute(f"PRAGMA synchronous = {'FULL' if durable else 'NORMAL'}")
        except sqlite3.Error as exc:
            raise _store_error(exc) from exc

    def _when_not_busy(self, sql: str) -> None:
        """Run `sql`, trying again while other connections hold the lock it needs, until
        the busy timeout: SQLite's busy handler does not wait for a change of journal
        mode, which processes opening a new file at once all make."""
        deadline = time.monotonic() + BUSY_TIMEOUT_SECONDS
        while True:
            try:
                self.execute(sql)
                return
            except sqlite3.OperationalError as exc:
                busy = exc.sqlite_errorcode & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
                if not busy or time.monotonic() >= deadline:
                    raise
            time.sleep(0.002)

    @contextlib.contextmanager
    def session(self) -> Iterator[_Session]:
        with self._lock:
            try:
                yield self
            except sqlite3.Error as exc:
                raise _store_error(exc) from exc

    @property
    def in_transaction(self) -> bool:
        return bool(self.connection.in_transaction)

    def set_trace_callback(self, trace: Callable[[str], object] | None) -> None:
        self.connection.set_trace_callback(trace)

    def close(self) -> None:
        self.connection.close()
        if self._vectors is not None:
            self._vectors.close()

    def vector_file(self, dimensions: int) -> _VectorFile | None:
        if _numpy() is None or self.path == ":memory:":
            return None
        token = self.execute(_SQL_VECTORS_TOKEN).fetchone()
        filed = None if token is None else self._vector_file(create=self._writable)
        try:
            return filed if filed is not None and filed.ready(token[0], dimensions) else None
        except OSError:  # a file that cannot be read or made again: the database serves
            return None

    def keeps_vector_file(self) -> bool:
        return self._vector_file(create=False) is not None

    def zero_vector_blocks(self, firsts: Iterable[int]) -> None:
        filed = self._vector_file(create=False)  # where there is no file, nothing is kept
        if filed is not None:
            filed.zero(firsts)

    def _vector_file(self, create: bool) -> _VectorFile | None:
        """The store's vectors file, opened once (and created, where `create`); None where
        there is none or it is refused."""
        if self._vectors is None and not self._vectors_refused and self.path != ":memory:":
            path = f"{self.path}-vectors"
            if not create and not os.path.lexists(path):
                return None
            try:
                self._vectors = _VectorFile.opened(path, self.path, self._writable,
                                                   self._durable)
            except StoreError as exc:
                self._vectors_refused = True
                _log.warning("the vectors file beside the store is refused: %s; recall"
                             " reads the vectors from the database", exc)
        return self._vectors

    def begin(self, write: bool) -> None:
        self.execute("BEGIN IMMEDIATE" if write else "BEGIN")

    def commit(self) -> None:
        self.execute("COMMIT")

    def rollback(self) -> None:
        try:
            self.execute("ROLLBACK")
        except sqlite3.Error as exc:
            raise _store_error(exc) from exc

    def ask_new_ids(self, count: int) -> Callable[[], list[int]]:
        # Past AUTOINCREMENT's record, under the write lock.
        (last_id,) = self.execute(_SQLITE_LAST_ID).fetchone()
        if last_id > _MAX_ID - count:
            raise StoreError(f"the store has used up its ids (the largest is {_MAX_ID})")
        return lambda: list(range(last_id + 1, last_id + 1 + count))

    def reserve_ids(self, count: int) -> list[int]:
        # AUTOINCREMENT records the largest id inserted: moved past them by hand.
        ids = self.ask_new_ids(count)()
        if ids and not self.execute(_SQLITE_RESERVE_IDS, (ids[-1],)).rowcount:
            self.execute(_SQLITE_FIRST_IDS, (ids[-1],))
        return ids

    def version(self) -> int:
        return int(self.execute(_SQLITE_VERSION).fetchone()[0])

    def size(self) -> int:
        files = [self.path, f"{self.path}-wal"]
        return sum(os.path.getsize(f) for f in files if os.path.isfile(f))

    def _checkpoint(self) -> bool:
        """Copy the WAL into the file and truncate it; whether a reader kept frames."""
        busy, _, _ = self.execute(_SQLITE_CHECKPOINT).fetchone()
        return bool(busy)

    def scrub(self) -> None:
        # secure_delete zeroed the deleted cells in the new page images; checkpointing
        # copies them over the old ones and truncating the WAL drops its older frames.
        if self._checkpoint():
            _log.warning("checkpoint blocked by a reader; deleted text stays in the WAL until"
                         " the next checkpoint")

    def compact(self) -> None:
        self.execute("VACUUM")
        filed = self._vector_file(create=False)
        if filed is not None:
            filed.clear()
        if self._checkpoint():
            raise StoreError("compact rebuilt the file, but a reader kept the old -wal frames;"
                             " run compact again once other connections are idle")
        _log.info("compacted the store")

    def check(self) -> dict[str, Any]:
        problems = [row[0] for row in self.execute("PRAGMA integrity_check")]
        return {"ok": problems == ["ok"], "integrity": problems,
                "schema_version": self.version()}

    def backup(self, destination: str) -> None:
        _create_private(destination, existing=False)
        try:
            target = sqlite3.connect(destination)
        except sqlite3.Error as exc:
            raise _store_error(exc) from exc
        try:
            self.connection.backup(target)  # all pages in one step: one read snapshot
            # The copy is another store: a vectors file beside it is not this one's.
            target.execute(_SQL_RENEW_VECTORS_TOKEN, (os.urandom(16).hex(),))
            target.commit()
        finally:
            target.close()
        _log.info("backed up the store")


# Engines beside this module, by the scheme of the URL that names their database, each a
# module's `Engine`, imported when a store is first opened there; any other path is an
# SQLite file. A third engine is a module and a line here.
# What a URL's scheme looks like (RFC 3986), told apart from a file's path.
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*")
_ENGINES = {"postgresql": ("memory_postgres", "postgres"),
            "postgres": ("memory_postgres", "postgres")}


def _satellite(module: str, extra: str) -> Any:
    """A module beside this one that needs an extra, imported when first needed: it raises
    StoreError naming the extra itself if that is what is missing."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name != module:
            raise
        raise StoreError(f"{module}.py is not beside memory.py: copy it there, or pip"
                         f" install '.[{extra}]' from a checkout, which installs both"
                         ) from None


def _engine_for(path: str) -> type[_Engine]:
    scheme, separator, _ = path.partition("://")
    if separator and _SCHEME.fullmatch(scheme) and scheme not in _ENGINES:
        raise MemoryInputError("path is a URL of a scheme no engine serves: a store is a"
                               " file's path or a postgresql:// URL")
    if not separator or scheme not in _ENGINES:
        return _SqliteEngine
    engine: type[_Engine] = _satellite(*_ENGINES[scheme]).Engine
    return engine


# -- vectors: the kept copies, the vector blocks, the approximate index ----------------

@functools.cache
def _numpy() -> Any:
    """numpy, where installed (the `vectors` extra), else None: pure Python scores."""
    try:  # by name, so that memory.py type-checks on the standard library alone
        return importlib.import_module("numpy")
    except ImportError:
        return None


def _held_bytes(*arrays: Any) -> int:
    """What numpy `arrays` (or None) hold: their data and each one's object, so that the
    kept budget bounds the process, however small the copies."""
    return sum(_ARRAY_BYTES + held.nbytes for held in arrays if held is not None)


class _VectorSearch(Protocol):
    """What recall by meaning asks of a scope's vectors, however they are held or read."""

    def best(self, query: bytes, limit: int, expired: set[int],
             bonus: tuple[Any, Any] = ((), ()), admitted: _Admitted | None = None
             ) -> tuple[list[tuple[float, int]], dict[int, float]]:
        """The `limit` best (score, id) pairs of the live ids (the `admitted` alone where
        given), ties to the newer, where a score is the cosine plus the id's `bonus` (ids
        and what each adds, each id once; an id without a vector scores its bonus alone);
        and the cosine of each id returned (0 without a vector)."""
        raise NotImplementedError


class _Vectors:
    """A scope's vectors, by ascending id, and their cosines with a query's: in numpy
    where installed, else in pure Python."""

    def __init__(self, rows: list[tuple[int, bytes]], dimensions: int) -> None:
        width = 4 * dimensions
        ids, blobs = zip(*rows, strict=True) if rows else ((), ())
        lengths = list(map(len, blobs))
        if any(not length or length % width for length in set(lengths)):
            raise SchemaError("a stored vector's length is not the embedder's dimensions")
        np = _numpy()
        # A memory embedded from several texts has their vectors in one row, one after
        # another: the rows of vectors beyond one a memory (`firsts`, where each memory's
        # first vector is, None while every memory has one).
        counts = [length // width for length in lengths]
        if np is None:
            self.ids: Any = list(ids)
            self.rows: Any = [_floats(blob[at : at + width]) for blob in blobs
                              for at in range(0, len(blob), width)]
            self.norms: Any = [math.sqrt(sum(x * x for x in row)) for row in self.rows]
            self.firsts: Any = list(itertools.accumulate(counts, initial=0))[:-1]
            self.size = sum(lengths)
            return
        self._hold(np.array(ids, dtype=np.int64),
                   np.frombuffer(b"".join(blobs), dtype="<f4").reshape(-1, dimensions),
                   None if sum(counts) == len(rows) else np.concatenate(
                       [[0], np.cumsum(counts)[:-1]]).astype(np.int64))

    def _hold(self, ids: Any, rows: Any, firsts: Any, norms: Any = None) -> None:
        """Hold these numpy arrays, the rows' norms (unless given), and what they take."""
        np = _numpy()
        self.ids, self.rows, self.firsts = ids, rows, firsts
        # Each row's own sum, as the cosines' (see cosines).
        self.norms = np.sqrt(np.einsum("ij,ij->i", rows, rows)) if norms is None else norms
        self.size = _held_bytes(self.ids, self.rows, self.norms, self.firsts)

    @classmethod
    def packed(cls, ids: bytes, vectors: bytes, dimensions: int) -> _Vectors:
        """A sealed block's vectors (memory_vector_blocks: an id for each vector)."""
        np = _numpy()
        if len(ids) % 8 or len(vectors) != len(ids) // 8 * 4 * dimensions:
            raise SchemaError("a block of vectors does not hold the embedder's dimensions")
        if np is None:
            each = struct.unpack(f"<{len(ids) // 8}q", ids)
            width, at, rows = 4 * dimensions, 0, []
            for memory_id, run in itertools.groupby(each):
                count = len(list(run))
                rows.append((memory_id, vectors[at * width : (at + count) * width]))
                at += count
            return cls(rows, dimensions)
        block = cls([], dimensions)
        each = np.frombuffer(ids, dtype="<i8")
        starts = np.flatnonzero(np.concatenate([[True], each[1:] != each[:-1]]))
        block._hold(each[starts], np.frombuffer(vectors, dtype="<f4").reshape(-1, dimensions),
                    None if len(starts) == len(each) else starts.astype(np.int64))
        return block

    def extended(self, rows: list[tuple[int, bytes]], dimensions: int) -> _Vectors:
        """These vectors (numpy's) and those of `rows` (id, vector), whose ids are above
        theirs. A new copy: another recall may be reading this one."""
        return _Vectors.joined([self, _Vectors(rows, dimensions)], dimensions)

    @classmethod
    def joined(cls, blocks: list[_Vectors], dimensions: int) -> _Vectors:
        """One copy of numpy `blocks` (each in ascending id order), in ascending id order: a
        new copy, whose arrays none of the blocks shares."""
        np = _numpy()
        whole = cls([], dimensions)
        if not blocks:
            return whole
        ids = np.concatenate([block.ids for block in blocks])
        rows = np.concatenate([block.rows for block in blocks])
        norms = np.concatenate([block.norms for block in blocks])
        at, starts = 0, []  # where each memory's first vector is in `rows`
        for block in blocks:
            starts.append(at + (np.arange(len(block.ids)) if block.firsts is None
                                else block.firsts))
            at += len(block.rows)
        firsts = np.concatenate(starts).astype(np.int64)
        if len(ids) > 1 and not np.all(ids[1:] > ids[:-1]):  # two owners' runs: merged
            counts = np.diff(firsts, append=len(rows))
            order = np.argsort(ids, kind="stable")
            counts = counts[order]
            # Each memory's vectors, in the new order: its first's place, then the next.
            taken = np.repeat(firsts[order], counts) + np.arange(len(rows)) - np.repeat(
                np.cumsum(counts) - counts, counts)
            ids, rows, norms = ids[order], rows[taken], norms[taken]
            firsts = (np.cumsum(counts) - counts).astype(np.int64)
        whole._hold(ids, rows, None if len(rows) == len(ids) else firsts, norms)
        return whole

    def cosines(self, query: bytes) -> tuple[Any, Any]:
        """The ids and each one's cosine with the query's vector (the best of its
        vectors')."""
        if isinstance(self.rows, list):
            asked = _floats(query)
            length = math.sqrt(sum(x * x for x in asked))
            each = [sum(map(operator.mul, row, asked)) / (norm * length)
                    for row, norm in zip(self.rows, self.norms, strict=True)]
            ends = [*self.firsts[1:], len(each)]
            return self.ids, [max(each[first:end])
                              for first, end in zip(self.firsts, ends, strict=True)]
        np = _numpy()
        asked = np.frombuffer(query, dtype="<f4")
        # By einsum, not `@`: BLAS sums a row's products in an order that depends on the
        # rows beside it, so a block's cosines would differ in their last bit from the
        # whole scope's, and a scope read in blocks could rank otherwise.
        each = np.einsum("ij,j->i", self.rows, asked) / (self.norms * np.linalg.norm(asked))
        if self.firsts is None or not len(self.ids):
            return self.ids, each
        return self.ids, np.maximum.reduceat(each, self.firsts)

    def best(self, query: bytes, limit: int, expired: set[int],
             bonus: tuple[Any, Any] = ((), ()), admitted: _Admitted | None = None
             ) -> tuple[list[tuple[float, int]], dict[int, float]]:
        """_VectorSearch.best over the vectors held here."""
        ids, scores = self.cosines(query)
        if isinstance(ids, list):
            cosines = dict(zip(ids, map(float, scores), strict=True))
            fused = dict(cosines)
            for memory_id, more in zip(*bonus, strict=True):
                fused[memory_id] = fused.get(memory_id, 0.0) + more
            best = heapq.nlargest(limit, ((score, memory_id) for memory_id, score
                                          in fused.items() if memory_id not in expired
                                          and (admitted is None or memory_id in admitted)))
            return best, {memory_id: cosines.get(memory_id, 0.0) for _, memory_id in best}
        np = _numpy()
        fused = scores.astype(np.float64)
        given = np.asarray(bonus[0], dtype=np.int64)
        more = np.asarray(bonus[1], dtype=np.float64)
        held = np.zeros(len(given), dtype=bool)  # the ids of the bonus that have a vector
        if len(given) and len(ids):
            at = np.minimum(np.searchsorted(ids, given), len(ids) - 1)
            held = ids[at] == given
            fused[at[held]] += more[held]  # ids are distinct: no place is added to twice
        if expired and len(ids):
            fused[np.isin(ids, np.fromiter(expired, dtype=np.int64))] = -np.inf
        if admitted is not None and len(ids):
            fused[~admitted.mask(ids)] = -np.inf
        apart = [(score, memory_id) for score, memory_id
                 in zip(more[~held].tolist(), given[~held].tolist(), strict=True)
                 if memory_id not in expired and (admitted is None or memory_id in admitted)]
        best = heapq.nlargest(limit, _top(ids, fused, limit) + apart)
        return best, dict(zip((memory_id for _, memory_id in best),
                              self.cosine_of([memory_id for _, memory_id in best], scores),
                              strict=True))

    def holds(self, wanted: Any) -> Any:
        """Which of the ascending `wanted` ids have vectors here (numpy's mask, or a list)."""
        if isinstance(self.ids, list):
            have = set(self.ids)
            return [memory_id in have for memory_id in wanted]
        np = _numpy()
        if not len(self.ids) or not len(wanted):
            return np.zeros(len(wanted), dtype=bool)
        at = np.minimum(np.searchsorted(self.ids, wanted), len(self.ids) - 1)
        return self.ids[at] == wanted

    def cosine_of(self, wanted: list[int], scores: Any) -> list[float]:
        """Each wanted id's cosine, of the `scores` of all (0 for an id without a vector)."""
        np = _numpy()
        if not len(self.ids):
            return [0.0] * len(wanted)
        at = np.minimum(np.searchsorted(self.ids, wanted), len(self.ids) - 1)
        return np.where(self.ids[at] == wanted, scores[at], 0.0).tolist()  # type: ignore[no-any-return]


class _Approximate:
    """An HNSW index (usearch) of one scope's vectors, in memory: recall by meaning that
    visits a few thousand of them, not all, at the cost of missing some of the best
    (docs/speed.md measures how many). Built from the scope's vectors and grown by the
    memories written after them; a deletion makes the next recall build it again."""

    def __init__(self, dimensions: int) -> None:
        index = importlib.import_module("usearch.index")
        # One key a vector, the memory's id: a memory of several texts has several.
        self.index = index.Index(ndim=dimensions, metric="cos", multi=True)
        self._lock = threading.Lock()  # usearch's add and search are not one another's

    @property
    def size(self) -> int:
        return int(self.index.memory_usage)

    def add(self, block: _Vectors) -> None:
        np = _numpy()
        if not len(block.ids):
            return
        keys = block.ids if block.firsts is None else np.repeat(
            block.ids, np.diff(block.firsts, append=len(block.rows)))
        with self._lock:
            self.index.add(keys.astype(np.uint64), np.ascontiguousarray(block.rows))

    def best(self, query: bytes, limit: int, expired: set[int],
             bonus: tuple[Any, Any] = ((), ()), admitted: _Admitted | None = None
             ) -> tuple[list[tuple[float, int]], dict[int, float]]:
        """_Vectors.best by the index: the best `limit` the index finds among the live
        ids the filter admits, asking it for more while too few of them are."""
        np = _numpy()
        asked = np.frombuffer(query, dtype="<f4")
        with self._lock:
            size = len(self.index)
            wanted = min(size, max(4 * limit, 64))
            while True:
                found = self.index.search(asked, wanted) if size else None
                scores: dict[int, float] = {}
                for key, distance in zip(() if found is None else found.keys.tolist(),
                                         () if found is None else found.distances.tolist(),
                                         strict=True):
                    if key not in scores and key not in expired \
                            and (admitted is None or key in admitted):
                        scores[key] = 1.0 - distance
                if len(scores) >= limit or wanted >= size:
                    break
                wanted = min(size, 4 * wanted)
        best = heapq.nlargest(limit, ((score, key) for key, score in scores.items()))
        return best, {key: score for score, key in best}


class _VectorStream:
    """A scope's vectors read a block at a time as they are scored, so that a scope past the
    kept budget costs the memory of a block, not of the scope; a scope that proves to fit
    is handed to `keep` whole, for the recalls after this one."""

    def __init__(self, blocks: Callable[[Callable[[], bool]], Iterator[_Vectors]],
                 dimensions: int, keep: Callable[[_Vectors], None]) -> None:
        # `blocks` reads them afresh for each call of best: an iterator would be spent.
        self.blocks, self.dimensions, self.keep = blocks, dimensions, keep

    def best(self, query: bytes, limit: int, expired: set[int],
             bonus: tuple[Any, Any] = ((), ()), admitted: _Admitted | None = None
             ) -> tuple[list[tuple[float, int]], dict[int, float]]:
        """_Vectors.best over the blocks: each block's best, with the bonus of the ids it
        holds, and the bonus of ids without a vector apart; the best of all of them."""
        np = _numpy()
        if np is None:
            given: Any = sorted(zip(*bonus, strict=True))  # by id: ids are distinct
            given_ids, more = [g for g, _ in given], [m for _, m in given]
            placed: Any = [False] * len(given_ids)  # whether each bonus id has a vector
        else:
            given_ids = np.asarray(bonus[0], dtype=np.int64)
            order = np.argsort(given_ids)
            given_ids, more = given_ids[order], np.asarray(bonus[1], dtype=np.float64)[order]
            placed = np.zeros(len(given_ids), dtype=bool)
        found: list[tuple[float, int]] = []
        cosines: dict[int, float] = {}
        whole: list[_Vectors] | None = [] if np is not None else None
        size, past = 0, [np is None]  # past the budget: blocks may share one buffer
        for block in self.blocks(lambda: past[0]):
            size += block.size
            if whole is not None and size > KEPT_BYTES:
                whole, past[0] = None, True  # past the budget: this recall keeps nothing
            if whole is not None:
                whole.append(block)
            # The bonus ids in the block's span, and which of them the block holds (the
            # other owner's ids lie between its own).
            first = bisect.bisect_left(given_ids, block.ids[0])
            end = bisect.bisect_right(given_ids, block.ids[-1])
            held = block.holds(given_ids[first:end])
            if np is None:
                placed[first:end] = map(operator.or_, placed[first:end], held)
                part = ([g for g, h in zip(given_ids[first:end], held, strict=True) if h],
                        [m for m, h in zip(more[first:end], held, strict=True) if h])
            else:
                placed[first:end] |= held
                part = (given_ids[first:end][held], more[first:end][held])
            best, scored = block.best(query, limit, expired, part, admitted)
            found = heapq.nlargest(limit, found + best)
            cosines.update(scored)
        lone = (zip(given_ids[~placed].tolist(), more[~placed].tolist(), strict=True)
                if np is not None else ((g, m) for g, m, has
                                        in zip(given_ids, more, placed, strict=True) if not has))
        apart = [(m, g) for g, m in lone
                 if g not in expired and (admitted is None or g in admitted)]
        best = heapq.nlargest(limit, found + apart)
        if whole is not None:
            self.keep(_Vectors.joined(whole, self.dimensions))
        return best, {memory_id: cosines.get(memory_id, 0.0) for _, memory_id in best}


def _vector_blocks(db: _Session, key: _ScopeKey, dimensions: int,
                   reuse: Callable[[], bool] = lambda: False, *, past: bool = False
                   ) -> Iterator[_Vectors]:
    """The scope's vectors, each owner's in ascending id order, a block at a time: its
    sealed blocks, and the rows no block holds in blocks of about _VECTOR_BLOCK_BYTES.
    For a scope `past` the kept budget, which every recall by meaning reads again, the
    sealed blocks come from the vectors file where it holds them, in its one buffer once
    `reuse` says no block is kept."""
    rows_per_block = max(1, _VECTOR_BLOCK_BYTES // (4 * dimensions))
    sealed_per_read = max(1, _VECTOR_BLOCK_BYTES // _SEALED_BLOCK_BYTES)
    filed = db.vector_file(dimensions) if past and db.has_vector_blocks else None
    for task in (None, key.task):
        rows, owner = _of_owner(
            key.user, task, _SQL_OWNER_VECTORS_BETWEEN, _SQL_TASK_VECTORS_BETWEEN)
        last = 0
        for first, next_last, after, block in _sealed_blocks(db, key.user, task, dimensions,
                                                              filed, reuse, sealed_per_read):
            if after != last:  # a block dropped before this one: the rows it held
                for between in db.blocks(rows, (*owner, last, first), rows_per_block):
                    yield _Vectors(between, dimensions)
            yield block
            last = next_last
        for between in db.blocks(rows, (*owner, last, _ID_LIMIT), rows_per_block):
            yield _Vectors(between, dimensions)


def _sealed_blocks(db: _Session, user: str, task: str | None, dimensions: int,
                   filed: _VectorFile | None, reuse: Callable[[], bool], per_read: int
                   ) -> Iterator[tuple[int, int, int, _Vectors]]:
    """The owner's sealed blocks in order, each with its first, last and after ids: from
    the database, or, with the vectors file, from the file where it holds them (the rest
    read from the database and added to it)."""
    if not db.has_vector_blocks:
        return
    if filed is None:
        sealed, owner = _of_owner(user, task, _SQL_OWNER_VECTOR_BLOCKS, _SQL_TASK_VECTOR_BLOCKS)
        for some in db.blocks(sealed, owner, per_read):
            for first, last, after, ids, vectors in some:
                yield first, last, after, _Vectors.packed(ids, vectors, dimensions)
        return
    listed, owner = _of_owner(
        user, task, _SQL_OWNER_VECTOR_BLOCK_IDS, _SQL_TASK_VECTOR_BLOCK_IDS)
    each, _ = _of_owner(user, task, _SQL_OWNER_BLOCK_VECTORS, _SQL_TASK_BLOCK_VECTORS)
    # The ids a page at a time: a million vectors' are 8 MB.
    for some in db.blocks(listed, owner, _ROWS_PER_READ // 10):
        for first, last, after, ids in some:
            block = filed.read(first, ids, dimensions, reuse())
            if block is None:
                (vectors,) = db.execute(each, (*owner, first)).fetchone()
                block = _Vectors.packed(ids, vectors, dimensions)
                filed.add(first, last, ids, block)
            yield first, last, after, block


def _seal_vector_blocks(db: _Session, user: str, tasks: Iterable[str | None],
                        dimensions: int) -> None:
    """Seal each owner's vectors past its newest block into blocks of _SEALED_BLOCK_BYTES,
    while a whole block's worth is there: the rest waits for the writes that fill one."""
    if not db.has_vector_blocks:
        return
    width = 4 * dimensions
    per_block = max(1, _SEALED_BLOCK_BYTES // width)
    for task in tasks:
        unsealed, owner = _of_owner(user, task, _SQL_OWNER_UNSEALED, _SQL_TASK_UNSEALED)
        after, past = db.execute(unsealed, (*owner, per_block, *owner)).fetchone()
        if past < per_block:
            continue
        rows, _ = _of_owner(
            user, task, _SQL_OWNER_VECTORS_BETWEEN, _SQL_TASK_VECTORS_BETWEEN)
        if db.beside_a_file:  # the token a vectors file is made for (see _VectorFile)
            db.execute(_SQL_SET_VECTORS_TOKEN, (os.urandom(16).hex(),))
        for some in db.blocks(rows, (*owner, after, _ID_LIMIT), per_block):
            if len(some) < per_block:
                break
            each = [memory_id for memory_id, vector in some for _ in range(len(vector) // width)]
            db.execute(_SQL_SEAL_VECTOR_BLOCK, (
                some[0][0], user, task, some[-1][0], after,
                struct.pack(f"<{len(each)}q", *each), b"".join(vector for _, vector in some)))
            after = some[-1][0]


def _ask_vector_blocks(db: _Session, user: str, memories: Iterable[tuple[int, str | None]]
                       ) -> Callable[[], None]:
    """Ask where the user's blocks are, now (in the caller's batch); the returned function
    drops those that hold any of these memories (id, task)."""
    if not db.has_vector_blocks:
        return lambda: None
    by_task: dict[str | None, list[int]] = collections.defaultdict(list)
    for memory_id, task in memories:
        by_task[task].append(memory_id)
    asked = []
    for task, ids in by_task.items():
        sealed, owner = _of_owner(
            user, task, _SQL_OWNER_VECTOR_SPANS, _SQL_TASK_VECTOR_SPANS)
        asked.append((task, ids, owner, db.ask(sealed, owner)))

    def drop() -> None:
        for task, ids, owner, spans_of in asked:
            spans = spans_of()
            firsts = [first for first, _ in spans]
            dropped = {firsts[at] for at, memory_id in (
                (bisect.bisect_right(firsts, memory_id) - 1, memory_id) for memory_id in ids)
                if at >= 0 and memory_id <= spans[at][1]}
            if dropped:
                sql, _ = _of_owner(
                    user, task, _SQL_OWNER_DROP_VECTOR_BLOCKS, _SQL_TASK_DROP_VECTOR_BLOCKS)
                db.execute(sql, (*owner, json.dumps(sorted(dropped))))
                db.zero_vector_blocks(dropped)
    return drop


def _erase_vectors(db: _Session, user: str) -> None:
    """Delete every vector of the user, and the blocks that hold them."""
    if db.has_vector_blocks:
        if db.keeps_vector_file():
            db.zero_vector_blocks(
                [first for (first,) in db.execute(_SQL_USER_VECTOR_BLOCK_FIRSTS, (user,))])
        db.execute(_SQL_ERASE_VECTOR_BLOCKS, (user,))
    db.execute(_SQL_ERASE_VECTORS, (user,))


# -- the vectors file beside an SQLite store -------------------------------------------

# Each owner's sealed blocks are also kept in a file beside an SQLite store (PATH-vectors),
# read with preadv: SQLite reads a 1 MiB blob through a chain of overflow pages, and a
# scope past the kept budget reads all its blocks at every recall by meaning (at 100,000
# vectors SQLite's reads took 73 of a recall's 105 ms, five times numpy's whole scoring).
# The database stays the truth: a block is read from the file only where the file's copy
# holds the ids the database's block holds (a memory's vectors never change under its id:
# revise gives a new one), in a file made for the token the database records (a file
# beside another copy of the store is not its copy) and the embedder's dimensions.
# Records are appended under an exclusive flock; a deletion zeroes those of the blocks it
# drops, header first, before its transaction commits; a reader reads a record's header
# again after its payload, so one zeroed meanwhile is read from the database instead.
# The file's header: magic, format, dimensions, the database's token, and the file's
# generation, new each time it is made again (emptied), so that a process that indexed
# the records of an earlier one indexes them again.
_VECTORS_FILE_HEADER = struct.Struct("<16sII32s8s")
_VECTORS_FILE_MAGIC = b"memory.py-vector"
_VECTORS_FILE_FORMAT = 1
# A record: its mark, its vectors' count, the block's first and last ids, the payload's
# bytes (its ids, each vector's norm as recall computes it, the vectors) and its CRC-32,
# checked once a process (a scope's first read past the budget). A zeroed record keeps
# its length alone, so that a scan steps over it.
_VECTORS_RECORD = struct.Struct("<4sIqqQI4x")
_VECTORS_RECORD_MARK = b"blk1"
_VECTORS_RECORD_GONE = b"\0\0\0\0"
_ZEROS = bytes(2**20)
_SQL_VECTORS_TOKEN = _sql("SELECT value FROM store_settings WHERE name = 'vectors_file'")
_SQL_SET_VECTORS_TOKEN = _sql(
    "INSERT OR IGNORE INTO store_settings (name, value) VALUES ('vectors_file', ?)",
    postgresql="INSERT INTO store_settings (name, value) VALUES ('vectors_file', %s)"
    " ON CONFLICT DO NOTHING")
_SQL_RENEW_VECTORS_TOKEN = _sql("UPDATE store_settings SET value = ? WHERE name = 'vectors_file'")
# An owner's blocks without their vectors, and one block's vectors, for a read that takes
# the vectors from the file where it holds them.
_SQL_OWNER_VECTOR_BLOCK_IDS, _SQL_TASK_VECTOR_BLOCK_IDS = _owner_forms(
    "SELECT first_id, last_id, after_id, ids FROM memory_vector_blocks"
    " WHERE user_id = ? AND task_id {task} ORDER BY first_id")
_SQL_OWNER_BLOCK_VECTORS, _SQL_TASK_BLOCK_VECTORS = _owner_forms(
    "SELECT vectors FROM memory_vector_blocks WHERE user_id = ? AND task_id {task}"
    " AND first_id = ?")
_SQL_USER_VECTOR_BLOCK_FIRSTS = _sql(
    "SELECT first_id FROM memory_vector_blocks WHERE user_id = ?")


class _VectorFile:
    """The file of an SQLite store's sealed blocks (see above): opened once a store reads
    or drops a block past the budget, 0600 and owned as the store is, never through a
    symbolic link; refused otherwise, and then recall reads the database."""

    def __init__(self, fd: int, writable: bool, durable: bool) -> None:
        self.fd, self.writable, self.durable = fd, writable, durable
        self._lock = threading.Lock()
        self._header: bytes | None = None  # the file header this copy was checked against
        self._records: dict[int, list[int]] = {}  # first id: offsets of its records
        self._end = _VECTORS_FILE_HEADER.size  # how far the records were scanned
        self._checked: set[int] = set()  # the records whose CRC this process checked
        self._buffer = bytearray()
        self._failed = False  # whether an append failed (said once)

    @classmethod
    def opened(cls, path: str, store: str, writable: bool, durable: bool) -> _VectorFile:
        """The file at `path` beside the store file `store`, created where `writable`;
        StoreError saying why it is refused."""
        if fcntl is None or not hasattr(os, "preadv"):
            raise StoreError("this platform has no preadv or flock")
        flags = (os.O_RDWR if writable else os.O_RDONLY) | os.O_CLOEXEC | os.O_NOFOLLOW
        try:
            fd = os.open(path, flags | (os.O_CREAT if writable else 0), 0o600)
        except OSError as exc:
            raise StoreError(f"it cannot be opened ({exc.strerror})") from None
        try:
            held, owner = os.fstat(fd), os.stat(store)
            if not stat.S_ISREG(held.st_mode):
                raise StoreError("it is not a regular file")
            if held.st_uid != owner.st_uid:
                raise StoreError("it is not owned by the store file's owner")
            if held.st_mode & 0o077:
                raise StoreError("others than its owner may read it")
        except BaseException:
            os.close(fd)
            raise
        return cls(fd, writable, durable)

    def close(self) -> None:
        os.close(self.fd)

    def ready(self, token: str, dimensions: int) -> bool:
        """Whether the file is for this token and dimensions, made so (emptied first)
        where it is writable and is not."""
        made_for = _VECTORS_FILE_HEADER.pack(_VECTORS_FILE_MAGIC, _VECTORS_FILE_FORMAT,
                                             dimensions, token.encode()[:32], b"")[:-8]
        header = os.pread(self.fd, _VECTORS_FILE_HEADER.size, 0)
        if header[:-8] != made_for or len(header) != _VECTORS_FILE_HEADER.size:
            if not self.writable:
                return False
            with self._exclusive():
                header = os.pread(self.fd, _VECTORS_FILE_HEADER.size, 0)
                if header[:-8] != made_for or len(header) != _VECTORS_FILE_HEADER.size:
                    self._zero_from(0)
                    os.ftruncate(self.fd, 0)
                    header = made_for + os.urandom(8)
                    os.pwrite(self.fd, header, 0)
                    self._synced()
        if header != self._header:
            with self._lock:
                self._indexed(header)
        return True

    def _indexed(self, header: bytes | None) -> None:
        """Forget what this process indexed of the file: it is (made again) under `header`."""
        self._header, self._records, self._checked = header, {}, set()
        self._end = _VECTORS_FILE_HEADER.size

    def read(self, first: int, ids: bytes, dimensions: int, reuse: bool) -> _Vectors | None:
        """The block that begins at `first` and holds `ids`, where the file holds it whole,
        in the one reused buffer if `reuse` (valid until the next read), else in its own;
        None where it does not."""
        np = _numpy()
        count = len(ids) // 8
        payload = count * (12 + 4 * dimensions)
        expected = _VECTORS_RECORD.pack(_VECTORS_RECORD_MARK, count, first,
                                        struct.unpack_from("<q", ids, len(ids) - 8)[0],
                                        payload, 0)[:-8]  # all but the CRC
        try:
            offsets = self._offsets(first)
        except OSError:
            return None
        for offset in offsets:
            if reuse:
                if len(self._buffer) < payload:
                    self._buffer = bytearray(payload)
                into = memoryview(self._buffer)[:payload]
            else:
                into = memoryview(bytearray(payload))
            header = bytearray(_VECTORS_RECORD.size)
            try:
                got = os.preadv(self.fd, [header, into], offset)
                again = os.pread(self.fd, _VECTORS_RECORD.size, offset)
            except OSError:
                return None
            if got != len(header) + payload or header[:-8] != expected or again != header \
                    or into[: len(ids)] != ids:
                continue
            if offset not in self._checked:
                if zlib.crc32(into) != _VECTORS_RECORD.unpack(header)[5]:
                    continue
                self._checked.add(offset)
            block = _Vectors([], dimensions)
            each = np.frombuffer(into, dtype="<i8", count=count)
            norms = np.frombuffer(into, dtype="<f4", count=count, offset=8 * count)
            rows = np.frombuffer(into, dtype="<f4", count=count * dimensions,
                                 offset=12 * count).reshape(-1, dimensions)
            starts = np.flatnonzero(np.concatenate([[True], each[1:] != each[:-1]]))
            block._hold(each[starts], rows, None if len(starts) == count
                        else starts.astype(np.int64), norms)
            return block
        return None

    def add(self, first: int, last: int, ids: bytes, block: _Vectors) -> None:
        """Append the block (as the database holds it, with its rows' norms); where the
        file cannot take it (a full disk), recall goes on from the database, said once."""
        if not self.writable:
            return
        try:
            self._append(first, last, ids, block)
        except OSError as exc:
            if not self._failed:
                self._failed = True
                _log.warning("the vectors file beside the store takes no more blocks (%s);"
                             " recall reads them from the database", exc.strerror)

    def _append(self, first: int, last: int, ids: bytes, block: _Vectors) -> None:
        payload = b"".join((ids, block.norms.astype("<f4").tobytes(),
                            block.rows.astype("<f4").tobytes()))
        header = _VECTORS_RECORD.pack(_VECTORS_RECORD_MARK, len(ids) // 8, first, last,
                                      len(payload), zlib.crc32(payload))
        with self._exclusive():
            # Past the last whole record, a cut or unreadable tail: gone, or the record
            # appended after it would be read as part of it.
            self._scan()
            size = os.fstat(self.fd).st_size
            if size > self._end:
                self._zero_span(self._end, size - self._end)
                os.ftruncate(self.fd, self._end)
            # The payload before its header: a reader that finds the header finds it whole.
            os.pwrite(self.fd, payload, self._end + len(header))
            os.pwrite(self.fd, header, self._end)

    def zero(self, firsts: Iterable[int]) -> None:
        """Zero the records of these blocks (header first), and sync where durable; a
        file that cannot be written is StoreError, so the deletion does not commit."""
        dropped = set(firsts)
        if not dropped:
            return
        try:
            self._zero(dropped)
        except OSError as exc:
            raise StoreError("the vectors file beside the store could not be zeroed"
                             f" ({exc.strerror}); nothing was deleted") from None

    def _zero(self, dropped: set[int]) -> None:
        with self._exclusive():
            header = os.pread(self.fd, _VECTORS_FILE_HEADER.size, 0)
            if header != self._header:  # made again since this process indexed it
                self._indexed(header)
            self._scan()
            zeroed = False
            for first in dropped:
                for offset in self._records.pop(first, []):
                    length = _VECTORS_RECORD.unpack(
                        os.pread(self.fd, _VECTORS_RECORD.size, offset))[4]
                    os.pwrite(self.fd, _VECTORS_RECORD.pack(_VECTORS_RECORD_GONE, 0, 0, 0,
                                                            length, 0), offset)
                    self._checked.discard(offset)
                    self._zero_span(offset + _VECTORS_RECORD.size, length)
                    zeroed = True
            if zeroed:
                self._synced()

    def clear(self) -> None:
        """Zero every byte and empty the file (compact): it is made again as recall reads."""
        try:
            with self._exclusive():
                self._zero_from(0)
                os.ftruncate(self.fd, 0)
                self._synced()
                self._indexed(None)
        except OSError as exc:
            raise StoreError("the vectors file beside the store could not be emptied"
                             f" ({exc.strerror})") from None

    def _offsets(self, first: int) -> list[int]:
        with self._lock:
            if first not in self._records:
                self._scan()
            return list(self._records.get(first, ()))

    def _scan(self) -> None:
        """Index the records appended since the last scan, up to the first that is cut
        or unreadable (the rest of the file is not read)."""
        size = os.fstat(self.fd).st_size
        while self._end + _VECTORS_RECORD.size <= size:
            mark, _, first, _, length, _ = _VECTORS_RECORD.unpack(
                os.pread(self.fd, _VECTORS_RECORD.size, self._end))
            if mark not in (_VECTORS_RECORD_MARK, _VECTORS_RECORD_GONE) \
                    or self._end + _VECTORS_RECORD.size + length > size:
                return
            if mark == _VECTORS_RECORD_MARK:
                self._records.setdefault(first, []).append(self._end)
            self._end += _VECTORS_RECORD.size + length

    @contextlib.contextmanager
    def _exclusive(self) -> Iterator[None]:
        with self._lock:
            assert fcntl is not None
            fcntl.flock(self.fd, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(self.fd, fcntl.LOCK_UN)

    def _zero_from(self, offset: int) -> None:
        self._zero_span(offset, os.fstat(self.fd).st_size - offset)

    def _zero_span(self, offset: int, length: int) -> None:
        for at in range(offset, offset + length, len(_ZEROS)):
            os.pwrite(self.fd, _ZEROS[: min(len(_ZEROS), offset + length - at)], at)

    def _synced(self) -> None:
        if self.durable:
            os.fsync(self.fd)


# -- recall ----------------------------------------------------------------------------
# A recall reads the map of its words' postings rows, then either scores every posting at
# once (few postings) or runs _TopK over the rows, newest first, reading as it asks.

class _Recall(NamedTuple):
    """One recall's inputs, read once at the start of its transaction."""

    key: _ScopeKey
    #: The statement parameters naming the query's words under the scope.
    listed: tuple[str, str, str]
    rank: str
    limit: int
    #: Memories the scope would see that are no longer live.
    expired: set[int]
    #: How many live memories the scope sees (idf's N; 0 for the shared rank).
    visible: int
    #: Each word's weight as the scoring used it, filled in as it scores (the idf rank;
    #: each word weighs 1 under the shared rank): what explain reports.
    weights: dict[str, float]
    #: The memories a filter admits to the best (None: every one): the others still
    #: count in N and df and lend to their neighbours, as without the filter.
    admitted: _Admitted | None = None


class _WordRows:
    """The postings rows of one query word under one task (or the user level): their
    first ids ascending, and from which of them on they have been read."""

    __slots__ = ("word", "firsts", "unread")

    def __init__(self, word: str, firsts: list[int]) -> None:
        self.word = word
        self.firsts = sorted(firsts)
        self.unread = len(self.firsts)  # rows [0, unread) are not read yet

    def rows_down_to(self, boundary: int) -> list[int]:
        """The unread rows that may hold an id at or above `boundary`, marked read."""
        if self.unread < len(self.firsts) and self.firsts[self.unread] <= boundary:
            return []  # the row holding `boundary` is read already
        start = max(0, bisect.bisect_right(self.firsts, boundary, 0, self.unread) - 1)
        rows, self.unread = self.firsts[start:self.unread], start
        return rows

    def row_holding(self, memory_id: int) -> int | None:
        """The first id of the only row that can hold `memory_id`."""
        at = bisect.bisect_right(self.firsts, memory_id) - 1
        return self.firsts[at] if at >= 0 else None

    def rows_for(self, ids: Collection[int]) -> set[int]:
        """The rows that can hold `ids`: every row across their span where those are no
        more than the ids, else each id's own row."""
        start = max(0, bisect.bisect_right(self.firsts, min(ids)) - 1)
        end = bisect.bisect_right(self.firsts, max(ids))
        if end - start <= len(ids):
            return set(self.firsts[start:end])
        return {first for first in map(self.row_holding, ids) if first is not None}


def _postings_map(rows: Iterable[tuple[str, str, str, int, int]]
                  ) -> tuple[collections.Counter[str], list[_WordRows]]:
    """Each query word's number of postings, and its rows grouped by task."""
    held: collections.Counter[str] = collections.Counter()
    groups: list[_WordRows] = []
    for word, *by_task, size, sound in rows:
        if not sound:
            raise SchemaError(_DAMAGED_POSTINGS)
        held[word] = size
        groups += [_WordRows(word, firsts) for firsts in map(json.loads, by_task) if firsts]
    return held, groups


# Recall's reader: the postings rows of each word's listed first ids.
_Fetch = Callable[[dict[str, list[int]]], Iterable[tuple[str, int, bytes]]]


def _expired_holders(groups: list[_WordRows], expired: set[int],
                     fetch: _Fetch) -> collections.Counter[str]:
    """How many of the `expired` ids each word's postings hold, from the rows that can
    hold them (at most all of the word's)."""
    wanted: dict[str, list[int]] = collections.defaultdict(list)
    for group in groups:
        wanted[group.word] += sorted(group.rows_for(expired))
    held: collections.Counter[str] = collections.Counter()
    for word, _, blob in fetch(wanted):
        held[word] += len(expired.intersection(_unpack(blob)))
    return held


def _idf(visible: int, df: int) -> float:
    """A word's weight under the idf rank: N the live memories the scope sees, df those
    of them holding the word."""
    return math.log(1 + (visible - df + 0.5) / (df + 0.5))


def _scores_of_all(postings: list[tuple[str, array.array[int]]],
                   recall: _Recall) -> list[tuple[float, int]]:
    """The `limit` best (score, id) pairs, best first, scoring every id of the query
    words' `postings` (all of their rows): the rule as written, counting at C speed."""
    scores = _own_scores(postings, recall)
    admitted = recall.admitted
    return heapq.nlargest(recall.limit, ((score, memory_id) for memory_id, score
                                         in scores.items()
                                         if admitted is None or memory_id in admitted))


def _own_scores(postings: list[tuple[str, array.array[int]]],
                recall: _Recall) -> Mapping[int, float]:
    """The score of every live id of the query words' `postings` (all of their rows)."""
    expired = recall.expired
    scores: dict[int, float] | collections.Counter[int]
    if recall.rank == "shared":  # an id sits in one row per word: its count is the words shared
        scores = collections.Counter(itertools.chain.from_iterable(ids for _, ids in postings))
        for memory_id in expired.intersection(scores):
            del scores[memory_id]
    else:  # each id's weights added in sorted word order, as the rule adds them
        by_word: dict[str, list[int]] = collections.defaultdict(list)
        for word, ids in postings:
            by_word[word] += ids
        scores = {}
        for word in sorted(by_word):
            held = [i for i in by_word[word] if i not in expired] if expired else by_word[word]
            weight = recall.weights[word] = _idf(recall.visible, len(held))
            for memory_id in held:
                scores[memory_id] = scores.get(memory_id, 0.0) + weight
    return scores


# The ids nearest a memory in its conversation, before it and after it, as _SQL_AROUND
# gives them (an aggregate's order is not promised); and where a memory sits among the
# ids of its conversation around it, ascending.
_Nearest = tuple[list[int], list[int]]
_Placed = tuple[list[int], int]


def _scores_in_context(own: Mapping[int, float], limit: int, nearest: _Nearby,
                       admitted: _Admitted | None = None
                       ) -> tuple[list[tuple[float, int]], dict[int, _Placed]]:
    """The `limit` best (score, id) pairs, best first, where a memory's score is its
    `own` (0 if absent) plus, for each of its neighbours in ascending id order, the
    neighbour's own times its side's weight; and where each memory scored sits.
    Only memories that match or neighbour one that does can score, and a memory whose
    own score and whose neighbours' are all below the limit-th best over _CONTEXT_REACH
    cannot reach it: so the memories are taken best own score first, a growing batch at
    a time (`nearest` gives the ids nearest each of a batch), until the next cannot.
    Only the `admitted` are among the best."""
    order = sorted(own, key=lambda memory_id: (own[memory_id], memory_id), reverse=True)
    mine = own.get
    window = _CONTEXT_WINDOW
    placed: dict[int, _Placed] = {}
    best: list[tuple[float, int]] = []  # a heap of the limit best so far
    at, step = 0, 2 * limit
    while at < len(order):
        if len(best) == limit and own[order[at]] * _CONTEXT_REACH * (1 + 1e-9) < best[0][0]:
            break
        batch, at, step = order[at : at + step], at + step, 2 * step
        for memory_id, (before, after) in nearest(batch).items():
            line = [*sorted(before), memory_id, *sorted(after)]
            here = len(before)
            for place in range(max(0, here - window), min(len(line), here + window + 1)):
                scored = line[place]
                if scored in placed:
                    continue
                placed[scored] = (line, place)
                score = float(mine(scored, 0))
                for neighbour, weight in _lenders((line, place)):
                    score += weight * mine(neighbour, 0)
                if score > 0 and (admitted is None or scored in admitted):
                    if len(best) < limit:
                        heapq.heappush(best, (score, scored))
                    else:
                        heapq.heappushpop(best, (score, scored))
    return sorted(best, reverse=True), placed


def _limit_th_best(scores: Any, limit: int) -> float:
    """The `limit`-th highest of more than `limit` scores (numpy), by the maxima of blocks
    of them: at least `limit` scores reach the `limit`-th highest maximum, so none below it
    can be among the best. np.partition alone is slow where most scores are equal and few
    above them, as where most of a scope scores 0: 13 ms against 0.1 ms on 100,000 here."""
    np = _numpy()
    while len(scores) > _BLOCK * limit:
        maxima = scores[: len(scores) // _BLOCK * _BLOCK].reshape(-1, _BLOCK).max(axis=1)
        least = np.partition(maxima, len(maxima) - limit)[len(maxima) - limit]
        above = scores[scores > least]
        if len(above) < limit:
            return float(least)
        scores = above
    return float(np.partition(scores, len(scores) - limit)[len(scores) - limit])


def _top(ids: Any, scores: Any, limit: int) -> list[tuple[float, int]]:
    """The `limit` best (score, id) pairs of numpy arrays, best first, ties to the newer;
    a score of -inf is left out. Only the ids that score as high as the limit-th best are
    taken out of numpy: all of them, so a tie at the limit goes to the newest."""
    np = _numpy()
    if len(ids) > limit:
        (near,) = np.nonzero(scores >= _limit_th_best(scores, limit))
        ids, scores = ids[near], scores[near]
    # By score, then by id, both descending: as (score, id) pairs compare.
    best = np.lexsort((ids, scores))[::-1][:limit]
    return [(score, memory_id) for score, memory_id
            in zip(scores[best].tolist(), ids[best].tolist(), strict=True)
            if score != -math.inf]


def _scored_at(postings: list[tuple[str, array.array[int]]], recall: _Recall,
               places: Callable[[Any], Any], size: int, evidence: bool = False) -> Any:
    """Each of `size` memories' own score (with `evidence`, 0 where it holds fewer than
    two informative words, as _evidence), 0 for one that holds no word or has expired,
    the memories where `places` puts their ids; weights noted as _own_scores notes them,
    and added in its order, to the bit."""
    np = _numpy()
    by_word: dict[str, list[array.array[int]]] = collections.defaultdict(list)
    for word, ids in postings:
        by_word[word].append(ids)
    expired = np.fromiter(recall.expired, dtype=np.int64, count=len(recall.expired))
    own = np.zeros(size)
    informing = np.zeros(size, dtype=np.int64) if evidence else None
    for word in sorted(by_word):
        held = np.concatenate([np.frombuffer(ids, dtype=np.int64) for ids in by_word[word]])
        if len(expired):
            held = held[~np.isin(held, expired)]
        weight = 1.0 if recall.rank == "shared" else _idf(recall.visible, len(held))
        if recall.rank != "shared":
            recall.weights[word] = weight
        at = places(held)
        own[at] += weight  # an id sits in one row per word: no place is added twice
        if informing is not None and weight >= _INFORMATIVE:
            informing[at] += 1
    return own if informing is None else np.where(informing >= 2, own, 0.0)


def _evidence_at_once(postings: list[tuple[str, array.array[int]]],
                      recall: _Recall) -> tuple[Any, Any]:
    """_evidence in numpy, to the bit: the ids (ascending) it keeps, and their evidence."""
    np = _numpy()
    held = [np.frombuffer(ids, dtype=np.int64) for _, ids in postings]
    # Sorted, not np.unique, which hashes them first, 30 times slower here: an id held
    # by several words is then placed at its first copy, and the others, scoring 0, are
    # left out with the rest that do.
    everyone = np.sort(np.concatenate(held)) if held else np.zeros(0, dtype=np.int64)
    left = _scored_at(postings, recall, functools.partial(np.searchsorted, everyone),
                      len(everyone), evidence=True)
    return everyone[left > 0], left[left > 0]


def _shares_of(conversation: Any) -> list[tuple[slice, slice, Any]]:
    """For each of _SHARES' neighbours (at `shift`, lending `weight`), the memories that
    have one there (`mine`), the neighbours (`theirs`), and each one's weight, 0.0 where
    the neighbour is of another conversation: memories in conversation order, each
    numbered by its `conversation`."""
    np = _numpy()
    shares = []
    for shift, weight in _SHARES:
        if abs(shift) < len(conversation):
            mine = slice(-shift, None) if shift < 0 else slice(None, -shift)
            theirs = slice(None, shift) if shift < 0 else slice(shift, None)
            shares.append((mine, theirs,
                           np.where(conversation[mine] == conversation[theirs], weight, 0.0)))
    return shares


class _Conversations:
    """A scope's memories in conversation order (each conversation's in write order, one
    after another; a memory of none alone) in numpy, expired ones too: recall with context
    scores every one of them at once, as _own_scores and _scores_in_context add up, to the
    bit (each word's weight in sorted word order, then the neighbours' shares in ascending
    id order, all in float64)."""

    def __init__(self, ids: Any, conversation: Any, numbers: dict[str, int],
                 named_bytes: int) -> None:
        """`ids` in conversation order, each one's `conversation` number (the same within
        a conversation, ascending from one conversation to the next), and the number of
        each named conversation (`numbers`, whose names take `named_bytes`)."""
        np = _numpy()
        self.ids, self.conversation, self.numbers = ids, conversation, numbers
        self.named_bytes = named_bytes
        self.shares = _shares_of(self.conversation)  # while nothing in the scope has expired
        # Where each id sits: a table of every id from the scope's least to its greatest
        # where that span is no more than _DENSE_SPAN times the scope (one user's file,
        # or one whose writes came in long runs), for one lookup an id; else the ids in
        # ascending order, searched.
        self.least = int(self.ids.min()) if len(self.ids) else 0
        span = int(self.ids.max()) - self.least + 1 if len(self.ids) else 0
        if span <= _DENSE_SPAN * len(self.ids):
            self.table = np.full(span, -1, dtype=np.int64)
            self.table[self.ids - self.least] = np.arange(len(self.ids))
            self.order = self.ascending = self.table[:0]
        else:
            self.table = self.ids[:0]
            self.order = np.argsort(self.ids)
            self.ascending = self.ids[self.order]
        self.size = (_held_bytes(self.ids, self.conversation, self.table, self.order,
                                 self.ascending, *(share for _, _, share in self.shares))
                     + sys.getsizeof(numbers) + named_bytes + _INT_BYTES * len(numbers))

    @classmethod
    def read(cls, blocks: Iterable[list[tuple[int, str | None]]]) -> _Conversations:
        """The conversations of the scope's (id, conversation) rows, in conversation order
        (_SQL_SCOPE_CONVERSATIONS), given a block at a time: a million rows held at once
        took ten times what the copy keeps."""
        np = _numpy()
        ids: list[Any] = []
        starts: list[Any] = []
        numbers: dict[str, int] = {}
        before: str | None = None  # the conversation of the row before (none before all)
        number = 0  # the conversation number of the last row so far
        for rows in filter(None, blocks):
            ids.append(np.fromiter((memory_id for memory_id, _ in rows), dtype=np.int64,
                                   count=len(rows)))
            # Neighbours share a number: each memory of no conversation starts one, as does
            # the first of each conversation.
            began = np.fromiter((this is None or this != that for that, this
                                 in itertools.pairwise([before, *(name for _, name in rows)])),
                                dtype=bool, count=len(rows))
            numbered = number + np.cumsum(began)
            numbers.update((name, at) for (_, name), at in zip(rows, numbered.tolist(),
                                                               strict=True) if name is not None)
            starts.append(numbered)
            number, before = int(numbered[-1]), rows[-1][1]
        conversation = np.concatenate(starts) if starts else np.zeros(0, dtype=np.int64)
        return cls(np.concatenate(ids) if ids else np.zeros(0, dtype=np.int64), conversation,
                   numbers, sum(map(sys.getsizeof, numbers)))

    def extended(self, rows: list[tuple[int, str | None]]) -> _Conversations:
        """These conversations and the memories of `rows` (id, conversation), written after
        all of them, in write order: each at the end of its conversation, or of all of them
        for a new one (the conversations' own order is no part of recall). A new copy:
        another recall may be reading this one."""
        np = _numpy()
        numbers, named_bytes = dict(self.numbers), self.named_bytes
        after = int(self.conversation[-1]) if len(self.ids) else 0
        places, conversations = [], []
        for _, name in rows:
            number = numbers.get(name) if name is not None else None
            if number is None:
                after += 1
                number = after
                if name is not None:
                    numbers[name] = number
                    named_bytes += sys.getsizeof(name)
            conversations.append(number)
            places.append(int(np.searchsorted(self.conversation, number, side="right")))
        ids = np.fromiter((memory_id for memory_id, _ in rows), dtype=np.int64,
                          count=len(rows))
        return _Conversations(np.insert(self.ids, places, ids),
                              np.insert(self.conversation, places, conversations), numbers,
                              named_bytes)

    def own(self, postings: list[tuple[str, array.array[int]]], recall: _Recall,
            evidence: bool = False) -> Any:
        """Each memory's own score, in conversation order (_scored_at)."""
        return _scored_at(postings, recall, self.places, len(self.ids), evidence)

    def places(self, ids: Any) -> Any:
        """Where each of `ids` that the scope holds sits."""
        np = _numpy()
        if len(self.table):
            # Masks only where needed: picking by a mask costs six times taking by index.
            offsets = ids - self.least
            if len(offsets) and (offsets.min() < 0 or offsets.max() >= len(self.table)):
                offsets = offsets[(offsets >= 0) & (offsets < len(self.table))]
            at = self.table[offsets]
            return at if not len(at) or at.min() >= 0 else at[at >= 0]
        if not len(self.ids):
            return np.zeros(0, dtype=np.int64)
        at = np.minimum(np.searchsorted(self.ascending, ids), len(self.ids) - 1)
        return self.order[at[self.ascending[at] == ids]]

    def in_context(self, own: Any, expired: set[int]) -> _InContext:
        """The live memories, each one's score its own plus its neighbours' shares."""
        np = _numpy()
        ids, conversation, shares = self.ids, self.conversation, self.shares
        places: Callable[[Any], Any] = self.places
        if expired:
            live = ~np.isin(ids, np.fromiter(expired, dtype=np.int64, count=len(expired)))
            ids, conversation, own = ids[live], conversation[live], own[live]
            shares = _shares_of(conversation)
            renumbered = np.cumsum(live) - 1

            def places_of_live(wanted: Any) -> Any:
                at = self.places(wanted)
                return renumbered[at[live[at]]]
            places = places_of_live
        scores, lent = own.copy(), np.empty_like(own)  # one buffer for every share
        for mine, theirs, share in shares:  # in _SHARES' order: ascending id order
            # A share of 0.0 (no neighbour there) adds 0.0, which leaves a score as it was.
            scores[mine] += np.multiply(share, own[theirs], out=lent[mine])
        return _InContext(ids, conversation, own, scores, places)


class _InContext(NamedTuple):
    """A recall's live memories in conversation order, with their own scores and their
    scores in context."""

    ids: Any
    conversation: Any
    own: Any
    scores: Any
    places: Callable[[Any], Any]  # where each of the ids given sits in these

    def best(self, limit: int, admitted: _Admitted | None = None) -> list[tuple[float, int]]:
        """The `limit` best (score, id) pairs that score above 0, best first, of the
        `admitted` alone where given."""
        np = _numpy()
        scores = self.scores
        if admitted is not None:
            scores = np.where(admitted.mask(self.ids), scores, 0.0)
        # Where the limit-th best scores, only those as high are taken out of the scope;
        # else those that score at all.
        if len(scores) > limit and (least := _limit_th_best(scores, limit)) > 0:
            (scored,) = np.nonzero(scores >= least)
        else:
            (scored,) = np.nonzero(scores > 0)
        return _top(self.ids[scored], scores[scored], limit)

    def explained(self, best: list[tuple[float, int]]
                  ) -> tuple[dict[int, _Placed], dict[int, float]]:
        """Where each of the `best` sits, and the own scores of it and its neighbours,
        as _Scoring explains them."""
        np = _numpy()
        placed: dict[int, _Placed] = {}
        own: dict[int, float] = {}
        wanted = np.fromiter((memory_id for _, memory_id in best), dtype=np.int64,
                             count=len(best))
        for at in sorted(self.places(wanted).tolist()):
            first = last = at
            while first > max(0, at - _CONTEXT_WINDOW) \
                    and self.conversation[first - 1] == self.conversation[at]:
                first -= 1
            while last < min(len(self.ids) - 1, at + _CONTEXT_WINDOW) \
                    and self.conversation[last + 1] == self.conversation[at]:
                last += 1
            line = self.ids[first : last + 1].tolist()
            placed[line[at - first]] = (line, at - first)
            own.update((memory_id, score) for memory_id, score
                       in zip(line, self.own[first : last + 1].tolist(), strict=True)
                       if score > 0)
        return placed, own


_Kept = TypeVar("_Kept", _Vectors, _Conversations)
# How recall with context finds neighbours: the scope's conversations at once, or the ids
# nearest each of a batch of memories (_SQL_AROUND).
_Nearby = Callable[[list[int]], dict[int, _Nearest]]
_Around = _Conversations | _Nearby


def _floats(blob: bytes) -> array.array[float]:
    floats = array.array("f", blob)
    if sys.byteorder == "big":
        floats.byteswap()
    return floats


def _lenders(placed: _Placed) -> list[tuple[int, float]]:
    """The neighbours of a memory sitting at `placed`, by id ascending, with weights."""
    line, place = placed
    before = line[max(0, place - _CONTEXT_WINDOW) : place]
    after = line[place + 1 : place + 1 + _CONTEXT_WINDOW]
    return [*zip(before, reversed(_CONTEXT_BEFORE[: len(before)]), strict=True),
            *zip(after, _CONTEXT_AFTER, strict=False)]


def _evidence(postings: list[tuple[str, array.array[int]]],
              recall: _Recall) -> dict[int, float]:
    """Each live id's idf score, where it holds at least two informative words of the
    question (_INFORMATIVE): one word shared, however rare, is as likely an accident as a
    sign (a fact of the same person that happens to use it), and a word most memories
    hold is no sign at all; where two inform, every word it holds counts."""
    scores = _own_scores(postings, recall)
    informing: collections.Counter[int] = collections.Counter()
    for word, ids in postings:
        if recall.weights[word] >= _INFORMATIVE:
            informing.update(ids)
    return {memory_id: score for memory_id, score in scores.items()
            if informing[memory_id] >= 2 and score > 0}


def _question(recall: _Recall, words_asked: int) -> float:
    """The question's own weight, once its words are scored: the idf of each of them,
    one that no memory holds at df 0."""
    absent = words_asked - len(recall.weights)
    return sum(recall.weights.values()) + absent * _idf(recall.visible, 0)


def _in_context(postings: list[tuple[str, array.array[int]]], recall: _Recall,
                around: _Around) -> _Scoring:
    """Recall with context's best: over all of the scope's conversations at once (numpy),
    else the best own scores first, their neighbours looked up (_scores_in_context)."""
    if isinstance(around, _Conversations):
        scored = around.in_context(around.own(postings, recall), recall.expired)
        best = scored.best(recall.limit, recall.admitted)
        return _Scoring(best, *scored.explained(best), in_context=True)
    own = _own_scores(postings, recall)
    return _Scoring(*_scores_in_context(own, recall.limit, around, recall.admitted), own,
                    in_context=True)


class _Scoring(NamedTuple):
    """What one recall scored: the best (score, id) pairs, and what explain tells of
    them (where each sits in its conversation, the own word scores, the cosines and the
    question's weight, where these were used)."""

    best: list[tuple[float, int]]
    placed: dict[int, _Placed] = {}
    own: Mapping[int, float] = {}
    cosines: dict[int, float] | None = None
    question: float = 0.0
    in_context: bool = False

    def why(self, memory_id: int, matched: dict[str, float]) -> Why:
        why = Why(matched=matched)
        if self.in_context:
            why["lent"] = {n: weight * self.own[n] for n, weight
                           in _lenders(self.placed[memory_id]) if n in self.own
                           } if memory_id in self.placed else {}
        if self.cosines is not None:
            why["meaning"] = self.cosines.get(memory_id, 0.0)
        if self.question:
            why["question"] = self.question
        return why


class _TopK:
    """The `limit` best (score, id) pairs, best first, over the postings rows `groups`:
    a memory's score is the number of query words it holds (weights None), or the sum
    of their weights in sorted word order. Expired ids are left out.

    The rows are read from the newest ids down, a window at a time: every id at or
    above the window's lower boundary has all its words read, so its score is final;
    every id below it is older, so on a tie it loses to every id finished before it.
    With `skip_common`, once the limit-th best is known, the most common words that
    together cannot lift an id past it are no longer read (MaxScore): a memory holding
    only those cannot win, and the ids the other words hold are looked up in their rows
    and intersected with them at C speed (a statement per window and word). Reading
    stops once nothing below can score more than the limit-th best: once the unread
    words together add up to no more, the ids seen below that still could are looked
    up the same way, newest first. While a rare word keeps that bound up, it is read
    through, if that costs no more than has been read. Each row is fetched at most
    once. The answer is the full scan's, to the bit: each bound is a score as the rule
    adds it up, and a float sum never drops when a positive weight joins it. search()
    gives None once the rounds have read more than `budget` postings in Python: then
    scoring them all at C speed costs less."""

    def __init__(self, groups: list[_WordRows], weights: dict[str, float] | None,
                 expired: set[int], limit: int, fetch: _Fetch, budget: int,
                 skip_common: bool) -> None:
        self.groups, self.weights, self.expired = groups, weights, expired
        self.limit, self.fetch, self.budget = limit, fetch, budget
        self.skip_common = skip_common
        self.order = sorted({group.word for group in groups})
        self.bits = {word: 1 << n for n, word in enumerate(self.order)}
        self.weighed = [0.0 if weights is None else weights[word] for word in self.order]
        # A word's rows, by task: a query may hold thousands of words, so no step may
        # look through every group for one word's.
        self.rows_by_word: dict[str, list[_WordRows]] = collections.defaultdict(list)
        for group in groups:
            self.rows_by_word[group.word].append(group)
        self.by_commonness = sorted(self.order, key=self.unread_rows, reverse=True)
        self.values: dict[int, float] = {}  # mask of words held -> its score
        self.read = 0  # postings the rounds have read
        self.rows_read = 0
        self.seen: dict[int, int] = {}  # id -> the words it was seen holding, below the boundary
        self.best: list[tuple[float, int]] = []  # a min-heap of the best finished (score, id)
        self.cache: dict[tuple[str, int], array.array[int]] = {}
        self.probed = 0  # the common words whose rows only meet candidates (MaxScore)

    # -- scores --

    def value(self, mask: int) -> float:
        """The score of holding the words of `mask`, added up as the rule adds them."""
        score = self.values.get(mask)
        if score is None:
            if self.weights is None:
                score = mask.bit_count()
            else:
                score, rest = 0.0, mask
                while rest:  # the words held, in sorted order: lowest bit first
                    lowest = rest & -rest
                    score += self.weighed[lowest.bit_length() - 1]
                    rest ^= lowest
            self.values[mask] = score
        return score

    def beaten(self, score: float) -> bool:
        """Whether `score` cannot enter: the best are full and their last scores more."""
        return len(self.best) == self.limit and score < self.best[0][0]

    def finish(self, memory_id: int, mask: int) -> None:
        entry = (self.value(mask), memory_id)
        if len(self.best) < self.limit:
            heapq.heappush(self.best, entry)
        elif entry > self.best[0]:
            heapq.heapreplace(self.best, entry)

    def finish_newest(self, held: dict[int, Any]) -> None:
        """Finish the ids of each mask in `held`, best masks first; of the ids holding the
        same words only the newest `limit` can enter."""
        for mask in sorted(held, key=self.value, reverse=True):
            if self.beaten(self.value(mask)):
                break
            for memory_id in heapq.nlargest(self.limit, held[mask]):
                self.finish(memory_id, mask)

    # -- reading rows --

    def unread_rows(self, word: str) -> int:
        return sum(group.unread for group in self.rows_by_word[word])

    def unread_words(self) -> int:
        """The mask of the words with rows not read yet, the skipped ones included."""
        unread = self.probed
        for group in self.groups:
            if group.unread:
                unread |= self.bits[group.word]
        return unread

    def rows_of(self, wanted: dict[str, list[int]]) -> list[tuple[str, array.array[int]]]:
        """The ids of each word's rows `wanted`, each row read from the store once."""
        missing = {word: [first for first in firsts if (word, first) not in self.cache]
                   for word, firsts in wanted.items()}
        for word, first, blob in self.fetch(missing):
            self.cache[word, first] = _unpack(blob)
        return [(word, self.cache[word, first]) for word, firsts in wanted.items()
                for first in firsts]

    def take(self, rows: Iterable[tuple[str, array.array[int]]]) -> int:
        """Note the ids of the words' `rows` as seen; the newest of them."""
        newest, was, seen, expired = 0, self.seen.get, self.seen, self.expired
        for word, ids in rows:
            bit = self.bits[word]
            self.read += len(ids)
            for memory_id in set(ids).difference(expired) if expired else ids:
                seen[memory_id] = was(memory_id, 0) | bit
            newest = max(newest, *ids[-1:])
        return newest

    def skip_common_words(self) -> None:
        """Words that together cannot lift an id past the limit-th best need not be read:
        the ids the others hold are looked up in their rows instead."""
        for word in self.by_commonness:
            if self.value(self.probed | self.bits[word]) > self.best[0][0]:
                break
            self.probed |= self.bits[word]

    def read_window(self, boundary: int) -> int:
        """Read the rows, of the words not skipped, that hold ids down to `boundary`; the
        newest id read."""
        wanted: dict[str, list[int]] = collections.defaultdict(list)
        for group in self.groups:
            if not self.probed & self.bits[group.word]:
                wanted[group.word] += group.rows_down_to(boundary)
        self.rows_read += sum(map(len, wanted.values()))
        return self.take(self.rows_of(wanted))

    def finish_window(self, boundary: int, unread: int) -> None:
        """Finish the ids at or above `boundary` (all seen, once nothing is unread)."""
        if self.probed:
            self.probe([i for i in self.seen if i >= boundary], self.probed)
            return
        done: dict[int, list[int]] = collections.defaultdict(list)
        for memory_id in [i for i in self.seen if i >= boundary] if unread else list(self.seen):
            done[self.seen.pop(memory_id)].append(memory_id)
        self.finish_newest(done)

    def read_rarest_through(self, unread: int) -> bool:
        """An id below the boundary holding the unread words could still win: read the
        rarest of them through, if that costs no more than has been read; whether read."""
        rarest = min((w for w in self.order if unread & ~self.probed & self.bits[w]),
                     key=self.unread_rows)
        if self.unread_rows(rarest) > self.rows_read:
            return False
        firsts = [first for group in self.rows_by_word[rarest]
                  for first in group.rows_down_to(-1)]
        self.rows_read += len(firsts)
        self.take(self.rows_of({rarest: firsts}))
        return True

    # -- finishing candidates at C speed --

    def finish_those_that_can_win(self, unread: int) -> None:
        """No id below the boundary that is not seen can win any more: finish those seen
        that still can, at C speed, rather than read on in Python."""
        floor = self.best[0][0]
        can_win = {mask for mask in set(self.seen.values())
                   if self.value(mask | unread) > floor}
        self.probe([i for i, mask in self.seen.items() if mask in can_win], unread)

    def probe(self, hopeful: list[int], unread: int) -> None:
        """Finish the `hopeful` ids, whose words but the `unread` ones are read: newest
        first, a batch at a time, look them up in the rows of the unread words that can
        hold them, rarest word first, dropping ids once they cannot beat the limit-th
        best. A batch's ids are kept in sets by the words they hold, so each word's rows
        meet them at C speed."""
        hopeful.sort(reverse=True)
        start, size = 0, 4 * self.limit
        while start < len(hopeful):
            batch, start, size = hopeful[start:start + size], start + size, 2 * size
            holding: dict[int, set[int]] = collections.defaultdict(set)
            for memory_id in batch:
                holding[self.seen.pop(memory_id)].add(memory_id)
            for mask, held in self.look_up(holding, unread).items():
                if not self.beaten(self.value(mask)):
                    for memory_id in heapq.nlargest(self.limit, held):
                        self.finish(memory_id, mask)

    def look_up(self, holding: dict[int, set[int]], unread: int) -> dict[int, set[int]]:
        """`holding` (the ids by the words they hold), with each of the `unread` words
        that can still matter looked up in its rows, rarest first."""
        left = unread
        for word in sorted((w for w in self.order if unread & self.bits[w]),
                           key=self.unread_rows):
            holding = {mask: ids for mask, ids in holding.items()
                       if self.value(mask | left) > self.best[0][0]}
            left &= ~self.bits[word]
            if not holding:
                break
            found = self.held_by(word, set().union(*holding.values()))
            moved: dict[int, set[int]] = collections.defaultdict(set)
            for mask, held in holding.items():
                hits = held & found
                if hits:
                    held -= hits
                    moved[mask | self.bits[word]] |= hits
            for mask, hits in moved.items():
                holding.setdefault(mask, set()).update(hits)
        return holding

    def held_by(self, word: str, ids: set[int]) -> set[int]:
        """Those of `ids` that the word's rows hold, reading only the rows that can."""
        firsts: set[int] = set()
        for group in self.rows_by_word[word]:
            firsts |= group.rows_for(ids)
        found: set[int] = set()
        for _, row in self.rows_of({word: sorted(firsts)}):
            found.update(ids.intersection(row))
        return found

    # -- the search --

    def search(self) -> list[tuple[float, int]] | None:
        boundary = max(group.firsts[-1] for group in self.groups)
        gap = 0
        while True:
            if self.skip_common and len(self.best) == self.limit:
                self.skip_common_words()
            newest = max(boundary, self.read_window(boundary))
            if self.read > self.budget:
                return None
            unread = self.unread_words()
            self.finish_window(boundary, unread)
            if not unread:
                break
            if len(self.best) == self.limit and self.value(unread) <= self.best[0][0]:
                self.finish_those_that_can_win(unread)
                break
            if len(self.best) == self.limit and self.read_rarest_through(unread):
                if self.read > self.budget:
                    return None
                continue
            gap = max(4 * gap, newest - boundary, self.limit)
            boundary -= gap
        return sorted(self.best, reverse=True)



# -- the store -------------------------------------------------------------------------

_Arguments = ParamSpec("_Arguments")
_Result = TypeVar("_Result")


def _read_again_if_cut_off(
    read: Callable[Concatenate[MemoryStore, _Arguments], _Result]
) -> Callable[Concatenate[MemoryStore, _Arguments], _Result]:
    """A read whose connection broke (a server restart, a terminated backend) runs once
    more, on a new connection: a read changes nothing, so this is always safe."""
    @functools.wraps(read)
    def run(store: MemoryStore, /, *args: _Arguments.args,
            **kwargs: _Arguments.kwargs) -> _Result:
        try:
            return read(store, *args, **kwargs)
        except ConnectionLost:
            _log.info("the connection to the server was lost during a read: reading again")
            return read(store, *args, **kwargs)
    return run


# Open stores, so that a forked child can give each a lock of its own (the parent's may
# have been held by a thread that does not exist in the child) and learn their files.
_OPEN_STORES: weakref.WeakSet[MemoryStore] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for store in list(_OPEN_STORES):
        store._lock = threading.RLock()
        store._idle = threading.Condition(store._lock)
        if store._file is not None:
            _FORKED_FILES.add(store._file)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _by_id_or_key(scope: Scope, memory_id: object, key: object, *, earlier: bool = False
                  ) -> tuple[str, tuple[Any, ...]]:
    """The read of one memory by its id or by its key, exactly one of them given (with
    `earlier`, the key's earlier holders too); the id or key its last argument."""
    if (memory_id is None) == (key is None):
        raise MemoryInputError("give memory_id or key, one of them")
    if key is not None:
        arguments = (scope.user, scope.task, scope.task, _check_key(key))
        return _key_holders(arguments) if earlier else (_SQL_VISIBLE_KEY, arguments)
    return _SQL_VISIBLE_ID, (scope.user, scope.task, _check_id(memory_id))


class _Version(NamedTuple):
    """A superseded version as memory_history gives it (_PAST_COLUMNS): the memory as it
    read, the live memory it leads to, when it was superseded, its vector and what it
    was embedded from."""

    row: _MemoryRow
    head_id: int
    superseded_at: str
    vector: bytes | None
    embed: str | None

    @classmethod
    def read(cls, columns: Sequence[Any]) -> _Version:
        width = len(_MemoryRow._fields)
        return cls(_MemoryRow(*columns[:width]), *columns[width:])


def _superseded(row: _MemoryRow, superseded_at: str | None) -> Memory:
    """A version as history gives it: the memory then, its version and when it was
    superseded (None: it is the live one)."""
    return cast(Memory, {**row.memory(), "version": row.current_version,
                         "superseded_at": superseded_at})


_UTC_SECOND = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00")


def _reading_instant(reading: str) -> str | None:
    """_utc_form of a stored reading; the system clock's (UTC, to the second) without
    parsing it, since an as-of read tells every memory of a scope by its times."""
    if len(reading) == 25 and _UTC_SECOND.fullmatch(reading):
        return f"{reading[:19]}.000000+00:00"
    return _utc_form("a memory's time", reading)


def _as_of_instant(as_of: object) -> str:
    """An as_of (an ISO time with a UTC offset) as the instant reads compare."""
    return _filter_instant("as_of", _check_timestamp("as_of", as_of))


def _live_at(row: _MemoryRow, superseded_at: str | None, instant: str) -> bool:
    """Whether the version was the live one at `instant`: written (or last replaced) by
    then, not yet superseded, not yet expired."""
    return _was_live(row.updated_at or row.created_at, superseded_at, row.expires_at, instant)


def _was_live(written: str, superseded_at: str | None, expires_at: str | None,
              instant: str) -> bool:
    """_live_at of a version written (or last replaced) at `written`."""
    start = _reading_instant(written)
    end = None if superseded_at is None else _reading_instant(superseded_at)
    if start is None or (superseded_at is not None and end is None):
        raise MemoryInputError("as_of compares instants, and the store's clock gave a"
                               " memory a time without a UTC offset")
    return start <= instant and (end is None or instant < end) \
        and (expires_at is None or expires_at > instant)


_Read = TypeVar("_Read", bound=Mapping[str, Any])


def _renumbered(found: _Read, ids: list[int]) -> _Read:
    """A memory read from an as-of store (_Time._as_it_read) with the ids it has here."""
    result: dict[str, Any] = {**found, "id": ids[found["id"] - 1]}
    why = result.get("why")
    if why is not None and "lent" in why:
        result["why"] = {**why, "lent": {ids[lender - 1]: share
                                         for lender, share in why["lent"].items()}}
    return cast(_Read, result)


def _by_key(found: dict[str, _MemoryRow], most: int | None,
            conditions: list[_Condition] | None) -> list[_MemoryRow]:
    """The memories `found` under their keys, in key order, those the filter admits, at
    most `most`."""
    listed = [found[name] for name in sorted(found)]
    if conditions is not None:
        admits = _admitting(conditions)
        listed = [row for row in listed if admits(row)]
    return listed if most is None else listed[:most]


# Above every key in code point order: a key is at most _MAX_KEY characters.
_ABOVE_EVERY_KEY = chr(sys.maxunicode) * (_MAX_KEY + 1)


def _key_range(prefix: str, after: str | None) -> tuple[str, bool, str]:
    """The keys that begin with `prefix` and come after `after`, as a range: its lower
    bound, whether the bound is left out, and its upper bound, left out, in code point
    order, which is SQLite's and PostgreSQL's "C" order of UTF-8 text."""
    # After a key is after its past holders too (_PAST_KEY), which no other key is among.
    low, strict = (after + _PAST_KEYS_END, False) if after is not None and after >= prefix \
        else (prefix, False)
    head = prefix.rstrip(chr(sys.maxunicode))
    if not head:
        return low, strict, _ABOVE_EVERY_KEY
    following = ord(head[-1]) + 1
    # No key holds a surrogate: past U+D7FF the next character a key may hold is U+E000.
    return low, strict, head[:-1] + chr(0xE000 if 0xD800 <= following <= 0xDFFF else following)


def _moved_on(held: _MemoryRow, row: _NewMemory) -> bool:
    """Whether a keyed write says that what its key held stopped holding: it holds from
    a time after the holder began to (a write without valid_from, or from the same time
    or before, corrects the holder, and replaces it)."""
    return row.valid_from is not None and (held.valid_from is None
                                           or held.valid_from < row.valid_from)


def _level_of(task_id: str | None) -> Level:
    return "user" if task_id is None else "task"


def _id_span(ids: list[int]) -> str:
    return f"{ids[0]}..{ids[-1]}" if ids else "none"


# Said at open by a writable store without an embedder on a file that records one.
_WITHOUT_ITS_EMBEDDER = (
    "the store records an embedder of %d dimensions but was opened without one: its writes"
    " leave memories without vectors, which recall by meaning never finds (stats counts"
    " them as without_vectors); open it with the embedder (--embedder or MEMORY_EMBEDDER"
    " on the command line), or fix them with reindex(embedder=...)")


def _engine_options(engine: type[_Engine], **options: Any) -> dict[str, Any]:
    """The options given (not None), each one the engine takes."""
    given = {name: value for name, value in options.items() if value is not None}
    for name in sorted(given.keys() - engine.options):
        raise engine.refused(name)
    return given


def _check_matching(matching: object) -> None:
    _check_choice("matching", matching, MATCHING)
    if matching == "stems":
        _stemmer()  # its extra, before anything is opened or created


def _check_clock(clock: object) -> Callable[[], str]:
    if isinstance(clock, dict):  # MemoryStore(path, RECOMMENDED): the ** forgotten
        raise MemoryInputError("clock must be callable, got a dict where the clock goes:"
                               " for settings such as RECOMMENDED, unpack them:"
                               " MemoryStore(path, **RECOMMENDED)")
    if not callable(clock):
        raise MemoryInputError(f"clock must be callable, got {type(clock).__name__}")
    return cast(Callable[[], str], clock)


def _recorded_embedder(db: _Session) -> str | None:
    """The embedder the file records (_embedder_record), if any."""
    if not db.has_vectors:
        return None
    row = db.execute(_SQL_EMBEDDER).fetchone()
    return None if row is None else str(row[0])


def _refuse_unless_recorded(embedder: Embedder, recorded: str | None) -> None:
    """StoreError unless `recorded` is the record of `embedder`."""
    if recorded is None:
        raise StoreError("the store records no embedder and was opened read-only: open"
                         " it once to write with one")
    if recorded != _embedder_record(embedder):
        kept = json.loads(recorded)
        raise StoreError(
            "the store's vectors come from another embedder than this one: the store"
            f" records {str(kept['name'])[:200]!r} of {kept['dimensions']} dimensions;"
            " open it with that one, or move it to this one with reindex(embedder=...)"
            " (memory reindex PATH --embedder MODULE:FACTORY)")


def _expired_of(db: _Session, key: _ScopeKey, now: str | None) -> set[int]:
    """The ids the scope would see but that are no longer live at `now` (none if None,
    see _Time.expiry_instant)."""
    return _ask_expired(db, key, now)()


def _ask_expired(db: _Session, key: _ScopeKey, now: str | None) -> Callable[[], set[int]]:
    """_expired_of, asked now and read when the returned function is called: in a batch,
    once the batch has gone."""
    if now is None:
        return set
    found = db.execute(_SQL_EXPIRED, (*key, now))
    return lambda: set(json.loads(found.fetchone()[0]))


# A filtered page newest first reads down the newest rows, this many times its size, then
# as many times more, _WALKS times in all, before it asks the index of terms instead: a
# filter that admits fewer than one memory in 20 is the index's (an adapter's mark on
# every item of it is the walk's).
_WALKED_PAGES = 4
_WALKS = 2


class _Page(NamedTuple):
    """Which of a scope's memories memories() lists, checked."""

    after: int
    before: int
    limit: int | None
    conversation: str | None
    newest_first: bool
    conditions: list[_Condition] | None
    #: Whether `after` or `limit` was given (a page of the oldest first).
    paged: bool
    #: Whether `before` was given (a page down from it).
    down: bool


class _Asked(NamedTuple):
    """What one recall asks, checked (MemoryStore.recall): the ranking from `start` to
    `stop` is read."""

    scope: Scope
    query: str
    rank: Rank
    context: bool
    explain: bool
    where: dict[str, Any] | None  # as given, for a recall as_of in its private store
    conditions: list[_Condition] | None
    meant: bytes | None  # the query's vector
    given: tuple[bytes, int] | None  # the caller's, with its dimensions
    approximate: bool
    as_of: str | None
    valid_at: str | None  # _check_valid_at's
    start: int
    stop: int


# -- the store's parts: each capability in one place -----------------------------------

class _Part:
    """A part of one store's work, reading its rule as the store follows it (another
    process may reindex the file, and the store adopts the rule at each transaction)."""

    def __init__(self, store: MemoryStore) -> None:
        self._store = store

    @property
    def _rule(self) -> _Rule:
        return self._store._rule

    @property
    def _index_from(self) -> int:
        return self._store._index_from


class _Recording(_Part):
    """What the file records of its store (the matching rule, the embedder, whether it
    keeps history), and the store's following of it: read at open and again in each
    transaction, since another process may reindex the file or move it to another
    embedder."""

    def connect(self, engine_type: type[_Engine], matching: Matching | None, create: bool,
                options: dict[str, Any]) -> _Engine:
        """Open and prepare the engine for the path, then follow its rule."""
        store = self._store
        engine = engine_type.open(store.path, read_only=store.read_only, durable=store.durable,
                                  matching=matching, create=create, **options)
        try:
            store._file = engine.file
            with engine.session() as db:
                self.adopt_rule(db)
                store._embedder_at_open = _recorded_embedder(db)
            if matching is not None and matching != store.matching:
                raise MemoryInputError(f"matching={matching!r} was asked for, but the store's"
                                       f" word index uses matching={store.matching!r};"
                                       " open it without matching, or run `memory reindex"
                                       " PATH --matching ...` to rebuild it by another rule")
        except BaseException:
            engine.close()
            raise
        _log.info("opened a store on %s read_only=%s", engine.name, store.read_only)
        return engine

    def take(self, keep_history: bool | None) -> None:
        """Bring the file to what the store was opened with: its embedder, its history,
        and a word index of the rule's current version."""
        store = self._store
        self._take_embedder()
        if keep_history is not None:
            self._take_history(keep_history)
        if _recorded_rule(store._recorded)[0] in _SUPERSEDED and not store.read_only:
            # Built by a version of its rule that split words wrongly: brought up to date
            # in one transaction, as `memory reindex` would. Read-only, it reads by that
            # version.
            _log.info("the word index was built by an earlier version of matching=%s:"
                      " reindexing", store.matching)
            store._writes.reindex_words(store.matching, None)

    def adopt_rule(self, db: _Session, found: Any = None) -> None:
        """Use the file's matching rule, from the first column of `found` (a cursor that
        has read it) or read now: another process may have reindexed it."""
        store = self._store
        recorded = db.recorded_rule(found)
        if recorded is None:
            raise SchemaError("the file records no matching rule")
        if recorded != store._recorded:
            rule, store._index_from = _recorded_rule(recorded)
            store._rule, store._recorded = _rule_of(rule), recorded

    def _take_embedder(self) -> None:
        """Record the store's embedder in a file that records none; StoreError, the file
        unchanged, if it records another. Without one, on a file that records one, say
        at open that writes will leave memories that meaning cannot find."""
        store = self._store
        if store.embedder is None:
            recorded = store._embedder_at_open
            kept = None if recorded is None else json.loads(recorded)
            if kept is not None and kept["name"] == _GIVEN:  # its callers' vectors
                store.embedder = _GivenVectors(kept["dimensions"])
            elif not store.read_only and kept is not None:
                _log.warning(_WITHOUT_ITS_EMBEDDER, kept["dimensions"])
            return
        with store._snapshot(None) as db:
            recorded = _recorded_embedder(db)
        if recorded is None and not store.read_only:
            with store._writing(None) as db:
                recorded = _recorded_embedder(db)  # again, under the write lock
                if recorded is None:
                    db.execute(_SQL_SET_EMBEDDER, (_embedder_record(store.embedder),))
                    _log.info("recorded the store's embedder (%d dimensions)",
                              store.embedder.dimensions)
                    return
        _refuse_unless_recorded(store.embedder, recorded)

    def _take_history(self, keep: bool) -> None:
        """Record in the file whether the store keeps history; MemoryInputError where a
        read-only store is asked for what its file does not record."""
        wanted = "on" if keep else "off"
        with self._store._snapshot(None) as db:
            found = db.execute(_SQL_HISTORY).fetchone() if db.has_history else None
        if (found[0] if found else "off") == wanted:
            return
        if self._store.read_only:
            raise MemoryInputError(f"history={keep}: the store is read-only and its file"
                                   f" records history {'off' if keep else 'on'}")
        with self._store._writing(None) as db:
            db.execute(_SQL_SET_HISTORY, (wanted,))
        _log.info("the store keeps history: %s", wanted)

    def take_given(self, db: _Session, given: set[int], write: bool = True) -> bool:
        """Check the dimensions of vectors callers give against the store's: a store
        without an embedder records them at the first write of some (then holds their
        space, _GivenVectors), read again in each call's transaction; else they must be
        its embedder's. MemoryInputError naming both where not. Whether the store has a
        space to compare them in (a read before any vector: none)."""
        store = self._store
        if len(given) > 1:
            raise MemoryInputError(f"the vectors given have {len(given)} dimension counts"
                                   f" ({', '.join(map(str, sorted(given)))}): one store holds one")
        (dimensions,) = given
        if store.embedder is None or isinstance(store.embedder, _GivenVectors):
            recorded = _recorded_embedder(db)
            kept = None if recorded is None else json.loads(recorded)
            if kept is not None and kept["name"] != _GIVEN:
                raise StoreError("the store's vectors come from an embedder: open it with that"
                                 " embedder to give vectors of its dimensions")
            if kept is None and not write:
                return False
            if kept is None:
                db.execute(_SQL_SET_EMBEDDER, (_embedder_record(_GivenVectors(dimensions)),))
                _log.info("recorded the vectors callers give (%d dimensions)", dimensions)
            store.embedder = _GivenVectors(dimensions if kept is None else kept["dimensions"])
        if dimensions != store.embedder.dimensions:
            raise MemoryInputError(f"the vectors given have {dimensions} dimensions; the"
                                   f" store's have {store.embedder.dimensions}")
        return True

    def check_embedder_of(self, db: _Session) -> None:
        """StoreError unless the file records the store's embedder (another process may
        have moved it to another by reindex)."""
        assert self._store.embedder is not None
        recorded = _recorded_embedder(db)
        if recorded is None and isinstance(self._store.embedder, _GivenVectors):
            return  # a write that recorded them rolled back: none holds a vector
        _refuse_unless_recorded(self._store.embedder, recorded)

    def stats(self) -> dict[str, Any]:
        """MemoryStore.stats: counts and what the file records; never text."""
        store = self._store
        with store._snapshot(None) as db:
            total, task_level, users = db.execute(_SQL_STATS).fetchone()
            version, size = db.version(), db.size()
            recorded = _recorded_embedder(db)
            (vectors,) = db.execute(_SQL_VECTOR_COUNT).fetchone() if db.has_vectors else (0,)
            keeps = db.execute(_SQL_HISTORY).fetchone() if db.has_history else None
        rule = _recorded_rule(store._recorded)[0]
        embedder = None if recorded is None else json.loads(recorded)
        return {
            "schema_version": version,
            "memories": total,
            "user_level": total - task_level,
            "task_level": task_level,
            "users": users,
            "file_bytes": size,
            "matching": store.matching,
            "matching_version": rule,
            "matching_outdated": rule != _RECORDED[store.matching],
            "ranks": list(RANKS),
            "rank": store.rank,
            "context": store.context,
            "embedder": None if embedder is None else embedder["name"],
            "dimensions": None if embedder is None else embedder["dimensions"],
            "without_vectors": int(total) - int(vectors),
            "history": keeps is not None and keeps[0] == "on",
        }


class _Time(_Part):
    """Time in one store: the instant a read judges expiry by, and a scope as it read at
    an instant before (history, as_of), from the versions a store that keeps history
    holds."""

    def read_instant(self) -> str | None:
        """The time for a read, without a tick: a fixed-width UTC instant, or None when the
        clock gives no UTC offset (then nothing can be judged expired)."""
        reading = _check_timestamp("clock reading", self._store._clock_for_reads())
        return _utc_form("clock reading", reading)

    def expiry_instant(self, db: _Session, key: _ScopeKey) -> str | None:
        """The time to judge the scope's memories at; None if none of them can expire."""
        now = self.read_instant()
        if now is None and db.execute(_SQL_ANY_EXPIRING, key).fetchone():
            raise MemoryInputError("the clock's reading has no UTC offset, so whether"
                                   " a memory has expired is unknown")
        return now

    def valid_instant(self, db: _Session, key: _ScopeKey, valid_at: str | None
                      ) -> str | None:
        """The instant a read judges the scope's windows at (_check_valid_at's `valid_at`:
        None for the clock's reading); None where none is judged (_ANY_TIME, or a clock
        without a UTC offset over a scope none of whose memories has a window)."""
        if valid_at == _ANY_TIME:
            return None
        if valid_at is not None:
            return valid_at
        now = self.read_instant()
        if now is None and db.execute(_SQL_ANY_WINDOW, (*key, *key)).fetchone():
            raise MemoryInputError("the clock's reading has no UTC offset, so what is valid"
                                   " now is unknown: give valid_at")
        return now

    def ask_unseen(self, db: _Session, key: _ScopeKey, now: str | None,
                   valid_at: str | None) -> Callable[[], set[int]]:
        """The ids a read leaves out of the scope, asked now and read when the returned
        function is called: those expired at `now` (expiry_instant) and those whose
        windows leave out `valid_at` (valid_instant: None, none)."""
        if valid_at is None:
            return _ask_expired(db, key, now)
        # A clock without an offset expires nothing, as _ask_expired has it.
        found = db.execute(_SQL_UNSEEN, (*key, now or "", *key, valid_at, *key, valid_at))
        return lambda: set(json.loads(found.fetchone()[0]))

    def unseen(self, db: _Session, key: _ScopeKey, valid_at: str | None) -> set[int]:
        """The ids a read leaves out of the scope (ask_unseen), now and at `valid_at`
        (_check_valid_at's)."""
        return self.ask_unseen(db, key, self.expiry_instant(db, key),
                               self.valid_instant(db, key, valid_at))()

    def receipt(self, scope: Scope, operation: str | tuple[str, str] | None, call: str,
                *arguments: Any) -> _Receipt | None:
        """The receipt a call under `operation` reads and records (None without one)."""
        if operation is None:
            return None
        wanted, fingerprint = _operation_of(operation)
        done = json.dumps([call, *arguments], sort_keys=True, separators=(",", ":"),
                          default=bytes.hex)  # a vector the caller gave
        now = self.read_instant()
        if now is None:
            raise MemoryInputError("operation= needs the clock's reading to have a UTC offset"
                                   " (a receipt expires)")
        return _Receipt(scope.user, scope.task, wanted,
                        fingerprint or hashlib.sha256(done.encode("utf-8")).hexdigest(), now,
                        self._store.receipts_ttl)

    def operation(self, scope: Scope, wanted: str) -> dict[str, Any] | None:
        """MemoryStore.operation: the receipt kept under `wanted`, while it is kept."""
        with self._store._snapshot({scope.user}) as db:
            found = db.execute(_SQL_RECEIPT, (scope.user, scope.task, wanted)).fetchone() \
                if db.has_receipts else None
        now = self.read_instant()
        if found is None or (now is not None and found[3] <= now):
            return None
        return {"operation": wanted, "fingerprint": found[0], "result": json.loads(found[1]),
                "created_at": found[2], "expires_at": found[3]}

    def get(self, scope: Scope, select: str, arguments: tuple[Any, ...], by_id: bool,
            as_of: str | None, valid_at: str | None) -> Memory | None:
        """MemoryStore.get: the memory the statement selects (by_id: by its id, else by
        its key, the last of the arguments), live now or at `as_of`, valid at `valid_at`
        (_check_valid_at's)."""
        if as_of is not None:
            return self._one_then(scope, select, arguments, by_id, _as_of_instant(as_of),
                                  valid_at)
        key = _ScopeKey(scope.user, scope.task)
        with self._store._snapshot({scope.user}) as db:
            # Its windows told by its rows, not the scope's every closed one.
            expired = _expired_of(db, key, self.expiry_instant(db, key))
            valid = self.valid_instant(db, key, valid_at)
            rows = db.execute(select, arguments).fetchall()
        return next((row.memory() for row in map(_MemoryRow._make, rows)
                     if row.id not in expired and row.valid_at(valid)), None)

    def _one_then(self, scope: Scope, select: str, arguments: tuple[Any, ...], by_id: bool,
                  instant: str, valid_at: str | None) -> Memory | None:
        """get as of `instant`: of the live memories the statement selects and the versions
        of the id or key (the last of the arguments), the one the scope saw live then, the
        task's own over the user level's, each a descent of an index."""
        key = _ScopeKey(scope.user, scope.task)
        ofs = (_SQL_OWNER_PAST_OF_ID, _SQL_TASK_PAST_OF_ID) if by_id \
            else (_SQL_OWNER_PAST_OF_KEY, _SQL_TASK_PAST_OF_KEY)
        with self._store._snapshot({scope.user}) as db:
            now, valid = self.expiry_instant(db, key), self.valid_instant(db, key, valid_at)
            seen = [*_live_then(db.execute(select, arguments).fetchall(), now, instant)]
            for task in (None, key.task) if db.has_history else ():
                sql, owner = _of_owner(key.user, task, *ofs)
                seen += _past_then(db.execute(sql, (*owner, *owner, arguments[-1],
                                                    arguments[-1], now)).fetchall(), instant)
        # The task's own over the user level's; under a key, its holder over its past
        # holders, the newest of those first.
        found = min((then for then in seen if then[1].valid_at(valid)), default=None,
                    key=lambda then: (then[1].task_id is None, then[1].key != arguments[-1],
                                      -then[1].id if then[1].key != arguments[-1] else 0,
                                      then[0]))
        return None if found is None else found[1].memory()

    def page_then(self, scope: Scope, page: _Page, as_of: str, valid_at: str | None
                  ) -> list[Memory]:
        """MemoryStore.memories as of a time: the page of the versions the scope saw live
        at `as_of`, read in runs from each owner's memories and versions in id order until
        it is full, so that it costs its rows and those it passes over (written or
        superseded since), not the scope."""
        instant = _as_of_instant(as_of)
        if page.limit == 0:
            return []
        key = _ScopeKey(scope.user, scope.task)
        admits = None if page.conditions is None else _admitting(page.conditions)
        run = _first_run(page.limit)
        found: list[_MemoryRow] = []
        with self._store._snapshot({scope.user}) as db:
            now, valid = self.expiry_instant(db, key), self.valid_instant(db, key, valid_at)
            runs = [owner_runs(db, key.user, task, page, run, now, instant)
                    for task in (None, key.task)
                    for owner_runs in ((_live_runs, _past_runs) if db.has_history
                                       else (_live_runs,))]
            for _, row in heapq.merge(*runs, key=operator.itemgetter(0),
                                      reverse=page.newest_first):
                if (page.conversation is None
                        or _conversation_of(row.source) == page.conversation) \
                        and row.valid_at(valid) and (admits is None or admits(row)):
                    found.append(row)
                    if len(found) == page.limit:
                        break
        return [row.memory() for row in found]

    def keyed_then(self, scope: Scope, prefix: str, after: str | None, most: int | None,
                   conditions: list[_Condition] | None, as_of: str, valid_at: str | None
                   ) -> list[Memory]:
        """MemoryStore.memories by key_prefix as of a time: the keyed versions the scope
        saw live at `as_of` in key order, each key as get found it then (the task's own
        over the user level's), read in runs from each owner's keyed memories and
        versions until the listing is full."""
        instant = _as_of_instant(as_of)
        bounds = _key_range(prefix, after)
        admits = None if conditions is None else _admitting(conditions)
        run = _first_run(most)
        key = _ScopeKey(scope.user, scope.task)
        found: list[_MemoryRow] = []
        with self._store._snapshot({scope.user}) as db:
            now, valid = self.expiry_instant(db, key), self.valid_instant(db, key, valid_at)
            runs = [_keyed_runs(db, key, *bounds, run, now, instant)]
            if db.has_history:
                runs += [_past_keyed_runs(db, key.user, task, *bounds, run, now, instant)
                         for task in (None, key.task)]
            by_key = operator.itemgetter(0)
            for _, held in itertools.groupby(heapq.merge(*runs, key=by_key), key=by_key):
                _, _, row = min(held, key=operator.itemgetter(1))
                if row.valid_at(valid) and (admits is None or admits(row)):
                    found.append(row)
                    if len(found) == most:
                        break
        return [row.memory() for row in found]

    def history(self, scope: Scope, select: str, arguments: tuple[Any, ...],
                by_id: bool) -> list[Memory]:
        """MemoryStore.history: the versions of the memory the statement selects (by_id:
        or whose version has the id), oldest first."""
        key = _ScopeKey(scope.user, scope.task)
        with self._store._snapshot({scope.user}) as db:
            expired = _expired_of(db, key, self.expiry_instant(db, key))
            rows = db.execute(select, arguments).fetchall()
            if not rows and by_id and db.has_history:  # a version's id
                head = db.execute(_SQL_HEAD_OF, (*key, arguments[-1])).fetchone()
                rows = [] if head is None else db.execute(
                    _SQL_VISIBLE_ID, (*key, head[0])).fetchall()
            rows = [row for row in rows if row[0] not in expired]
            if not rows:
                return []
            live = _MemoryRow(*rows[0])
            past = db.execute(_SQL_HISTORY_OF, (*key, live.id)).fetchall() \
                if db.has_history else []
        return [*(_superseded(version.row, version.superseded_at)
                  for version in map(_Version.read, past)), _superseded(live, None)]

    def then(self, scope: Scope, instant: str, meant: bytes | None, valid_at: str | None
             ) -> list[tuple[_MemoryRow, bytes | None]]:
        """The versions the scope saw live at `instant` (_as_of_instant) of its memories
        live now, valid at `valid_at` (_check_valid_at's), in id order (a forgotten or
        expired memory has no past), each with its vector where the query has one
        (`meant`)."""
        key = _ScopeKey(scope.user, scope.task)
        with self._store._snapshot({scope.user}) as db:
            now, valid = self.expiry_instant(db, key), self.valid_instant(db, key, valid_at)
            found = db.execute(_SQL_VISIBLE_WITH_VECTORS if meant and db.has_vectors
                               else _SQL_VISIBLE, key).fetchall()
            past = db.execute(_SQL_SCOPE_HISTORY, key).fetchall() if db.has_history else []
        width = len(_MemoryRow._fields)
        current = [(_MemoryRow(*row[:width]), row[width] if len(row) > width else None)
                   for row in found]
        live = {row.id for row, _ in current
                if now is None or row.expires_at is None or row.expires_at > now}
        then = [(row, vector) for row, vector in current
                if row.id in live and _live_at(row, None, instant)]
        then += [(version.row, version.vector if meant else None)
                 for version in map(_Version.read, past) if version.head_id in live
                 and _live_at(version.row, version.superseded_at, instant)]
        then.sort(key=lambda version: version[0].id)
        return [(row, vector) for row, vector in then if row.valid_at(valid)]

    def changed_since(self, db: _Session, key: _ScopeKey, instant: str, now: str | None,
                      valid: str | None) -> tuple[set[int], list[_MemoryRow]] | None:
        """How the scope as it read at `instant` (_as_of_instant), valid at `valid`
        (valid_instant), differs from its memories stored now (`now`: expiry_instant's,
        not before `instant`): the ids of those it leaves out (expired now, not valid, or
        written after `instant`), and the versions it holds in their place (those live then
        of memories live now), in id order; None where one of those versions has the id
        of a memory it holds as well (a rename's, by a clock set back), which ids alone
        cannot tell apart. A version shares an id only with the memory it leads to (ids
        are never given twice, and an import gives each version one of its own)."""
        left_out = self.ask_unseen(db, key, now, valid)()
        # The instant's second in the system clock's form: a time of that form after it
        # is after the instant.
        after = f"{instant[:19]}+00:00"
        written = db.execute(_SQL_WRITTEN_AFTER, (*key, after, *key, after, *key)).fetchall()
        left_out.update(memory_id for memory_id, at, expires_at in written
                        if not _was_live(at, None, expires_at, instant))
        if not db.has_history:
            return left_out, []
        then = list(_past_then(db.execute(_SQL_LIVE_THROUGH, (
            *key, after, instant, instant[:19], *key, *key, instant, instant[:19])
        ).fetchall(), instant))
        # The memories they lead to were written after the instant, as their successors,
        # but where times are out of order (imported, or a clock set back).
        heads = {place[2] for place, _ in then}
        expiring = {memory_id: expires_at for memory_id, _, expires_at in written}
        if unknown := sorted(heads - expiring.keys()):
            expiring.update((row.id, row.expires_at) for row in map(_MemoryRow._make, db.execute(
                _SQL_VISIBLE_IDS, (*key, json.dumps(unknown))).fetchall()))
        live = {head for head in heads if head in expiring
                and (now is None or expiring[head] is None or cast(str, expiring[head]) > now)}
        seen = [(place[2], row) for place, row in then if place[2] in live
                and row.valid_at(valid)]
        ids = {row.id for _, row in seen}
        if len(ids) < len(seen) or any(row.id == head and head not in left_out
                                       for head, row in seen):
            return None
        return left_out, sorted((row for _, row in seen), key=operator.attrgetter("id"))

    def recall(self, scope: Scope, as_of: str, valid_at: str | None, meant: bytes | None,
               query: str, start: int, stop: int, *, rank: Rank, **options: Any
               ) -> list[Recalled]:
        """recall as_of, the ranking from `start` to `stop` of the memories valid at
        `valid_at` (_check_valid_at's): in a store of the scope as it read then (whose
        ranking stays as it is from page to page), by the query's vector (`meant`) made
        here."""
        if meant is None and rank == "meaning":
            return []
        found: list[Recalled] = []
        with self._as_it_read(scope, as_of, meant, valid_at) as (past, ids):
            while start + len(found) < stop:
                asked = min(MAX_LIMIT, stop - start - len(found))
                page = past.recall(scope, query, asked, offset=start + len(found), rank=rank,
                                   valid_at=_ANY_TIME, **options, vector=None if meant is None
                                   else list(_floats(meant)))
                found += page
                if len(page) < asked:
                    break
        return [_renumbered(result, ids) for result in found]

    @contextlib.contextmanager
    def _as_it_read(self, scope: Scope, as_of: object, meant: bytes | None,
                    valid_at: str | None) -> Iterator[tuple[MemoryStore, list[int]]]:
        """A private store in memory holding the scope's memories as they read at `as_of`
        (then), with their vectors where the query has one (`meant`), and their ids here
        in order (the private store's ids are 1 on, in the same order): a recall there
        scores and ranks exactly as one here would have then."""
        instant = _as_of_instant(as_of)
        then = self.then(scope, instant, meant, valid_at)
        embedder = self._store.embedder
        dimensions = None if meant is None or embedder is None else embedder.dimensions
        store = MemoryStore(":memory:", clock=lambda: instant, matching=self._store.matching,
                            max_text=self._store.max_text, embedder=None if dimensions is None
                            else _GivenVectors(dimensions))
        # Read once: its words are found as recall asks for them (as a small owner's
        # are), not indexed at the write.
        store._index_from = _MAX_ID
        try:
            rows = [_NewMemory(scope.user, row.task_id, row.text, row.source,
                               created_at=row.created_at, expires_at=row.expires_at,
                               vector=vector, key=row.key, metadata=row.metadata,
                               updated_at=row.updated_at, version=row.version,
                               valid_from=row.valid_from, valid_to=row.valid_to)
                    for row, vector in then]
            if rows:
                with store._writing({scope.user}) as db:
                    store._writes.write(db, rows)
            yield store, [row.id for row, _ in then]
        finally:
            store.close()


# Where an as-of read's rows stand in its order: by id, a live memory before the versions
# of its id, those by the memory they lead to and their version (as _Time.then sorts them).
_ThenPlace = tuple[int, int, int, int]
_Then = tuple[_ThenPlace, _MemoryRow]
# An as-of page reads each owner's rows in runs, the first as long as the page (at least
# _FIRST_RUN), each after it twice the last up to _LONGEST_RUN, as it passes over the rows
# that were not live then.
_FIRST_RUN = 32
_LONGEST_RUN = 4096


def _first_run(most: int | None) -> int:
    """The first run of a read of at most `most` rows (None: all)."""
    return _LONGEST_RUN if most is None else min(_LONGEST_RUN, max(_FIRST_RUN, most))


def _live_then(rows: Iterable[Sequence[Any]], now: str | None, instant: str
               ) -> Iterator[_Then]:
    """The memories of `rows` (_MEMORY_COLUMNS) live now (`now`: None when none can have
    expired) that were live at `instant` as well, each with its place."""
    for row in map(_MemoryRow._make, rows):
        if (now is None or row.expires_at is None or row.expires_at > now) \
                and _live_at(row, None, instant):
            yield (row.id, 0, 0, 0), row


def _past_then(rows: Iterable[Sequence[Any]], instant: str) -> Iterator[_Then]:
    """The versions of `rows` (_THEN_COLUMNS) that were live at `instant`, each with its
    place."""
    width = len(_MemoryRow._fields)
    for columns in rows:
        row, (head_id, superseded_at) = _MemoryRow._make(columns[:width]), columns[width:]
        if _live_at(row, superseded_at, instant):
            yield (row.id, 1, head_id, row.current_version), row


def _live_runs(db: _Session, user: str, task: str | None, page: _Page, run: int,
               now: str | None, instant: str) -> Iterator[_Then]:
    """The owner's memories on the page's side of its bounds that were live at `instant`
    and are now, in the page's order, read a run at a time."""
    sql, owner = _of_owner(user, task, *(
        (_SQL_OWNER_THEN_DOWN, _SQL_TASK_THEN_DOWN) if page.newest_first
        else (_SQL_OWNER_THEN_UP, _SQL_TASK_THEN_UP)))
    after, before = page.after, page.before
    while True:
        rows = db.execute(sql, (*owner, after, before, instant, instant[:19], run)).fetchall()
        yield from _live_then(rows, now, instant)
        if len(rows) < run:
            return
        after, before = (after, rows[-1][0]) if page.newest_first else (rows[-1][0], before)
        run = min(_LONGEST_RUN, 2 * run)


def _past_runs(db: _Session, user: str, task: str | None, page: _Page, run: int,
               now: str | None, instant: str) -> Iterator[_Then]:
    """The owner's versions, of memories live now, between the page's bounds that were
    live at `instant`, in the page's order, read a run at a time: a run that ends among
    the versions of one id (a renamed memory's share its id) has that id's read whole."""
    down = page.newest_first
    sql, owner = _of_owner(user, task, *((_SQL_OWNER_PAST_DOWN, _SQL_TASK_PAST_DOWN) if down
                                         else (_SQL_OWNER_PAST_UP, _SQL_TASK_PAST_UP)))
    of_id, _ = _of_owner(user, task, _SQL_OWNER_PAST_OF_ID, _SQL_TASK_PAST_OF_ID)
    after, before = page.after, page.before
    while True:
        rows = db.execute(sql, (*owner, after, before, instant, instant[:19], instant[:19],
                                now, run, *owner)).fetchall()
        if len(rows) < run:
            yield from _past_then(rows, instant)
            return
        last = rows[-1][0]
        yield from _past_then([row for row in rows if row[0] != last], instant)
        whole = db.execute(of_id, (*owner, *owner, last, last, now)).fetchall()
        yield from sorted(_past_then(whole, instant), key=operator.itemgetter(0), reverse=down)
        after, before = (after, last) if down else (last, before)
        run = min(_LONGEST_RUN, 2 * run)


_KEY_COLUMN = _MemoryRow._fields.index("key")

def _keyed_runs(db: _Session, key: _ScopeKey, low: str, strict: bool, high: str, run: int,
                now: str | None, instant: str) -> Iterator[tuple[str, int, _MemoryRow]]:
    """The scope's live keyed memories in the key range that were live at `instant`, in
    key order, each with its owner's rank (the task's 0), read a run at a time: a full
    run's last key is read again by the next (on PostgreSQL one run holds both owners)."""
    owners = ("", key.task) if db.keys_by_owner else ("",)
    def of(owner: str) -> Iterator[tuple[str, int, _MemoryRow]]:
        after, leave_out, most = low, strict, run
        while True:
            rows = [_MemoryRow._make(row) for row in db.execute(
                _KEY_RANGES[leave_out], (*key, owner, after, high, most))]
            full = len(rows) == most
            last = rows[-1].key if full else None
            for row in rows:
                if row.key == last:
                    break
                if (now is None or row.expires_at is None or row.expires_at > now) \
                        and _live_at(row, None, instant):
                    yield cast(str, row.key), int(row.task_id is None), row
            if not full:
                return
            after, leave_out, most = cast(str, last), False, min(_LONGEST_RUN, 2 * most)
    return heapq.merge(*map(of, owners), key=operator.itemgetter(0))


def _past_keyed_runs(db: _Session, user: str, task: str | None, low: str, strict: bool,
                     high: str, run: int, now: str | None, instant: str
                     ) -> Iterator[tuple[str, int, _MemoryRow]]:
    """The owner's versions, of memories live now, in the key range that were live at
    `instant`, in key order with the owner's rank, read a run at a time: a run that ends
    among one key's versions has that key's read whole."""
    owner = (user,) if task is None else (user, task)
    of_key, _ = _of_owner(user, task, _SQL_OWNER_PAST_OF_KEY, _SQL_TASK_PAST_OF_KEY)
    rank = int(task is None)
    while True:
        rows = db.execute(_PAST_KEYS[strict][task is not None], (
            *owner, low, high, instant, instant[:19], instant[:19], now, run)).fetchall()
        last = rows[-1][_KEY_COLUMN] if len(rows) == run else None
        whole = [] if last is None else db.execute(
            of_key, (*owner, *owner, last, last, now)).fetchall()
        for _, row in _past_then([row for row in rows if row[_KEY_COLUMN] != last] + whole,
                                 instant):
            yield cast(str, row.key), rank, row
        if last is None:
            return
        low, strict, run = last, True, min(_LONGEST_RUN, 2 * run)


def _each_id(count: int, fresh_ids: list[int], same: dict[int, int]) -> list[int]:
    """Each row's id in turn: its new id, a held memory's (`same`, above 0), or an earlier
    row's (`same`, ~its position)."""
    if not same:
        return fresh_ids
    new_ids = iter(fresh_ids)
    ids: list[int] = []
    for position in range(count):
        kept = same.get(position)
        ids.append(next(new_ids) if kept is None else kept if kept > 0 else ids[~kept])
    return ids


class _Writes(_Part):
    """A store's write path: new memories embedded, deduplicated, replacing their keys'
    holders, dated, purging some expired ones of their scopes, and written with their
    postings, vectors, metadata terms and counts; deletes; the index and vectors rebuilt."""

    def insert(self, rows: list[_NewMemory], noun: str | None = None,
               dedupe: bool = False, receipt: _Receipt | None = None,
               one: bool = False) -> list[int]:
        """Write the checked `rows` in one transaction, all or none; their ids, in order
        (with `dedupe`, a live memory's where it holds the same text). With a `receipt`,
        once: the ids it records where it was done before (the first alone, for `one`
        row, as remember returns it)."""
        _one_key_each(rows, noun)
        rows = [row if row.past is None else row._replace(past=tuple(zip(
            self.with_vectors([version for version, _ in row.past]),
            [at for _, at in row.past], strict=True))) for row in self.with_vectors(rows)]
        pasts = [(position, row.past) for position, row in enumerate(rows) if row.past]
        if pasts and dedupe:
            raise MemoryInputError("records with a history are not deduplicated: import"
                                   " them without dedupe")
        with self._store._writing({row.user_id for row in rows}) as db:
            done, result = _Receipt.done_in(receipt, db)
            if done:
                return [result] if one else cast(list[int], result)
            version_ids = self._reserve_versions(db, pasts)
            self._check_vectors(db, rows, pasts)
            held_keys = self._held_keys(db, rows)
            # What the batch's keys replace is gone when the call returns: no row of it is
            # deduplicated to a memory it replaces.
            replaced = {held[0][0] for held in held_keys.values()}
            same = self._same_texts(db, rows, replaced) if dedupe else {}
            fresh = [position for position in range(len(rows)) if position not in same]
            written, succession = self._replace_keyed(db, rows, held_keys, noun, fresh)
            if succession or pasts:
                db.holding = True  # their versions are written before the commit
            fresh_ids = self.write(db, written, noun, fresh) if fresh else []
            if succession:
                self.link(db, [(_ScopeKey(written[at].user_id, written[at].task_id or ""),
                                old, fresh_ids[at]) for at, old in succession])
            ids = _each_id(len(rows), fresh_ids, same)
            if pasts:
                self._write_versions(db, ids, pasts, version_ids)
            _Receipt.record_in(receipt, db, ids[0] if one else ids)
        written = [rows[p] for p in fresh]
        task_level = sum(row.task_id is not None for row in written)
        _log.info("remembered %d memories (%d user level, %d task level), ids %s;"
                  " %d already held", len(written), len(written) - task_level, task_level,
                  _id_span(ids), len(same))
        return ids

    def _check_vectors(self, db: _Session, rows: list[_NewMemory],
                       pasts: list[tuple[int, Any]]) -> None:
        """The vectors callers give, and the store's embedder, checked against the file's."""
        given = {row.given for row in rows if row.given is not None} | {
            version.given for _, past in pasts for version, _ in past
            if version.given is not None}
        if given:
            self._store._recording.take_given(db, given)
        if self._store.embedder is not None:
            self._store._recording.check_embedder_of(db)

    @staticmethod
    def _write_versions(db: _Session, ids: list[int], pasts: list[tuple[int, Any]],
                        version_ids: Iterator[int]) -> None:
        """The versions imported records carry, each under its memory's new id."""
        db.executemany(_SQL_INSERT_VERSION, [
            (version.user_id, ids[position], version.version, next(version_ids),
             version.task_id, version.key, version.text, version.source,
             version.created_at, version.updated_at or (
                 version.created_at if version.key or version.metadata else None),
             version.expires_at, version.metadata, version.embed, version.vector,
             superseded_at, version.valid_from, version.valid_to)
            for position, past in pasts for version, superseded_at in past])

    def with_vectors(self, rows: list[_NewMemory]) -> list[_NewMemory]:
        """The rows with their vectors from the store's embedder, if it has one: embedded
        before the write's transaction and outside the store's lock, so that a slow model
        holds up no other call. A memory embedded from several texts keeps their vectors
        one after another in one blob; one embedded from none has none."""
        embedder = self._store.embedder
        asked = [] if embedder is None or isinstance(embedder, _GivenVectors) else [
            position for position, row in enumerate(rows) if row.given is None]
        if embedder is None or not asked:  # a store of given vectors: those alone
            return rows
        vectors = _memory_vectors(embedder, [(rows[p].text, rows[p].embed) for p in asked])
        embedded = list(rows)
        for position, vector in zip(asked, vectors, strict=True):
            embedded[position] = rows[position]._replace(vector=vector or None)
        return embedded

    def _held_keys(self, db: _Session, rows: list[_NewMemory]) -> dict[int, list[Any]]:
        """The memory each keyed row's owner holds under its key (live or not), by the
        row's position: the rows of _SQL_KEYED."""
        keyed = [(position, row) for position, row in enumerate(rows) if row.key is not None]
        if not keyed:
            return {}
        with db.batch():
            asked = db.ask_each(_SQL_KEYED, [
                (row.user_id, row.task_id or "", row.task_id, row.task_id or "", row.key)
                for _, row in keyed])
        return {position: held for (position, _), held in zip(keyed, asked(), strict=True)
                if held}

    def _replace_keyed(self, db: _Session, rows: list[_NewMemory],
                       held_keys: dict[int, list[Any]], noun: str | None,
                       fresh: list[int]) -> tuple[list[_NewMemory], list[tuple[int, int]]]:
        """The `fresh` rows (positions in the call), having forgotten, in the write's
        transaction, the memory each keyed one's owner holds under its key (`held_keys`);
        the row then keeps that memory's created_at, if it was live (an import refuses it
        instead: MemoryInputError naming the row's place in the call), and is its next
        version (1 where none was live). A row's if_version other than the live one's
        version (0: none) is VersionConflict, and nothing is written. Where the store
        keeps history, each live memory replaced is kept as a superseded version: with
        the rows, each such row's place among them and the id it supersedes (link)."""
        now = self._store._time.read_instant() if held_keys else None
        keep = bool(held_keys) and self.keeps_history(db)
        written: list[_NewMemory] = []
        succession: list[tuple[int, int]] = []  # (place in written, the id it supersedes)
        gone: dict[_ScopeKey, list[tuple[Any, ...]]] = collections.defaultdict(list)
        moved: list[tuple[_ScopeKey, _MemoryRow, str]] = []
        for position in fresh:
            row, held, current, first = rows[position], held_keys.get(position), 0, None
            if held is not None:
                old, owner = _MemoryRow(*held[0]), _ScopeKey(row.user_id, row.task_id or "")
                live = now is None or old.expires_at is None or old.expires_at > now
                if live and noun == "record":  # an import keeps what it is given, or nothing
                    raise MemoryInputError(f"record {position}: its owner holds its key"
                                           " already", position)
                if live and _moved_on(old, row):
                    moved.append((owner, old, cast(str, row.valid_from)))
                    current, first = old.current_version, 1
                else:
                    gone[owner] += held
                if live and first is None:
                    row, current = row._replace(first_created=old.created_at), old.current_version
                    if keep:
                        succession.append((len(written), old.id))
            if row.if_version is not None and row.if_version != current:
                raise VersionConflict(current, row.if_version,
                                      "the key" if noun is None else f"{noun} {position}'s key")
            if row.key is not None and row.version is None:
                row = row._replace(version=first or current + 1)
            written.append(row)
        superseded = {old_id for _, old_id in succession}
        for key, held in gone.items():
            self.delete(db, key, held, kept=self.supersede(
                db, key, [row[0] for row in held if row[0] in superseded]))
        for key, old, start in moved:
            self.move_to_past(db, key, old, start, keep)
        return written, succession

    def move_to_past(self, db: _Session, key: _ScopeKey, old: _MemoryRow, start: str,
                     keep: bool) -> None:
        """Keep `old`, the holder of its key, as a past holder whose window closes at
        `start` (or before, where it did already), at its next version."""
        reading = self.reading()
        if keep:
            self.supersede(db, key, [old.id], reading)
        end = start if old.valid_to is None else min(old.valid_to, start)
        db.execute(_SQL_MOVE_TO_PAST, (f"{old.key}{_PAST_KEY}{old.id}", old.current_version + 1,
                                       reading, end, *key, old.id))
        _log.info("moved memory %d of user %s into the past of its key", old.id, key.user)

    def _reserve_versions(self, db: _Session, pasts: list[tuple[int, Any]]) -> Iterator[int]:
        """Ids for an import's superseded versions (`pasts`: each record's place and
        versions), below its memories'; MemoryInputError where the store keeps no history."""
        if not pasts:
            return iter(())
        if not self.keeps_history(db):
            raise MemoryInputError(f"record {pasts[0][0]} has a history, which the store"
                                   " would drop: it keeps none (history=True keeps it)",
                                   pasts[0][0])
        return iter(db.reserve_ids(sum(len(past) for _, past in pasts)))

    def keeps_history(self, db: _Session) -> bool:
        """Whether the store keeps superseded versions, as its file says now (another
        process may have turned it on since this store opened)."""
        if not db.has_history:
            return False
        found = db.execute(_SQL_HISTORY).fetchone()
        return found is not None and found[0] == "on"

    def supersede(self, db: _Session, key: _ScopeKey, ids: list[int],
                  superseded_at: str | None = None) -> list[int]:
        """Keep the scope's memories `ids`, about to be replaced, as superseded versions
        (at `superseded_at`, or when their successors are written: link); their ids."""
        if ids:
            db.execute(_SQL_KEEP_SUPERSEDED, (superseded_at, *key, json.dumps(ids)))
        return ids

    def link(self, db: _Session, successors: list[tuple[_ScopeKey, int, int]]) -> None:
        """Move the versions each superseded memory led (owner, old id, new id) to its
        successor, superseded when the successor was written."""
        db.executemany(_SQL_LINK_SUCCESSOR, [(new, *key, new, *key, old)
                                             for key, old, new in successors])

    def _same_texts(self, db: _Session, rows: list[_NewMemory],
                    replaced: set[int]) -> dict[int, int]:
        """The rows (by position) whose text a live memory of the same user, level and task
        holds, in the same window of validity (another window is another fact), one the
        batch does not replace, each with that memory's id, or ~p for a repeat of the
        batch's row p."""
        now = self._store._time.read_instant()
        keys = [(row.user_id, row.task_id, _same_text(row.text), row.valid_from, row.valid_to)
                for row in rows]
        distinct = dict(zip(keys, rows, strict=True))  # each key's last row: the same key
        with db.batch():
            asked = db.ask_each(_SQL_SAME_TEXT, [
                (row.user_id, row.task_id or "", _text_key(row.text)) for row in distinct.values()])
        held: dict[tuple[str, str | None, str, str | None, str | None], int] = {}
        for wanted, found in zip(distinct, asked(), strict=True):
            for memory_id, their_task, their_text, expires_at, *window in found:
                live = now is None or expires_at is None or expires_at > now
                if (their_task, *window) == (wanted[1], *wanted[3:]) and live \
                        and memory_id not in replaced and _same_text(their_text) == wanted[2]:
                    held[wanted] = memory_id
                    break
        same: dict[int, int] = {}
        first: dict[tuple[str, str | None, str, str | None, str | None], int] = {}
        for position, key in enumerate(keys):
            if rows[position].key is not None:  # its key decides, not its text
                continue
            if key in held:
                same[position] = held[key]
            elif key in first:
                same[position] = ~first[key]
            else:
                first[key] = position
        return same

    def write(self, db: _Session, rows: list[_NewMemory], noun: str | None = None,
              places: list[int] | None = None) -> list[int]:
        """The last step of a write transaction: purge some expired memories of the rows'
        scopes, write the rows, reading the clock once for each that has no created_at,
        and commit (with the last statements, in one round trip on PostgreSQL). A bulk
        call names its rows' `noun`, so that an error names the row's position (in the
        call: `places`, where the rows are some of its own). Users go in groups of the
        engine's users_per_batch, each group's statements seeing only its users: on
        PostgreSQL one round trip asks what every group's write needs to know, and one
        more writes them all. A batch of the engine's sends_rows_first_from rows or more
        asks for its ids first and sends its rows with the asks, before their words are
        found, so that a server inserts them while the client stems."""
        now = self._store._time.read_instant()
        rows = self._dated(rows)  # before the words are asked for: a rule may read the date
        positions: dict[str, list[int]] = collections.defaultdict(list)
        for position, row in enumerate(rows):
            positions[row.user_id].append(position)
        users = sorted(positions)
        step = db.users_per_batch or len(users) or 1
        starts = range(0, len(users), step)
        group_positions = [sorted(p for user in users[start : start + step]
                                  for p in positions[user]) for start in starts]
        rows_first = (db.sends_rows_first_from is not None
                      and len(rows) >= db.sends_rows_first_from)
        values = None
        if rows_first:
            with db.batch():
                ask_ids = db.ask_new_ids(len(rows))
            values = self._values(ask_ids(), rows, noun, places, db.null)
        groups: list[_Group] = []
        with db.batch():
            if values is None:
                ask_ids = db.ask_new_ids(len(rows))
            for start, mine in zip(starts, group_positions, strict=True):
                some = users[start : start + step]
                db.narrow(some)
                if values is not None:
                    db.executemany(_SQL_INSERT, [values[p] for p in mine])
                    db.send_now()
                groups.append(self._ask_group(db, rows, some, mine, now))
        if values is None:
            values = self._values(ask_ids(), rows, noun, places, db.null)
        # The rows may be in already: whatever is read of their owners is of the others.
        older = values[0][0]
        known = [self._purge(db, group, now, older) for group in groups]
        postings = self._postings(db, groups, known, values, older)
        with db.batch():
            for group, held, added in zip(groups, known, postings, strict=True):
                db.narrow(group.users)
                if not rows_first:
                    db.executemany(_SQL_INSERT, [values[p] for p in group.positions])
                self._write_vectors_and_terms(db, rows, values, group.positions)
                _add_postings(db, added, {owner: held[owner].newest for owner in added})
                db.executemany(_SQL_COUNT_ADD, [(user, task or "", n, group.weighed[user, task])
                                                for (user, task), n in group.added.items()])
            db.finish()
        return [value[0] for value in values]

    def _write_vectors_and_terms(self, db: _Session, rows: list[_NewMemory],
                                 values: list[tuple[Any, ...]], positions: list[int]) -> None:
        """The vectors and metadata terms of the rows at `positions`, under their new ids."""
        vectors = [(values[p][0], rows[p].user_id, rows[p].task_id, vector)
                   for p in positions if (vector := rows[p].vector) is not None]
        if vectors:
            assert self._store.embedder is not None  # the vectors are its
            db.add_vectors(vectors, self._store.embedder.dimensions)
            for user, task in dict.fromkeys((row[1], row[2]) for row in vectors):
                _seal_vector_blocks(db, user, [task], self._store.embedder.dimensions)
        fields = [(rows[p].user_id, term, values[p][0], rows[p].task_id)
                  for p in positions if rows[p].metadata is not None
                  for term in sorted(set(_terms(json.loads(cast(str, rows[p].metadata)))))]
        if fields:
            db.executemany(_SQL_INSERT_FIELDS, fields)

    def _ask_group(self, db: _Session, rows: list[_NewMemory], users: list[str],
                   mine: list[int], now: str | None) -> _Group:
        """The write of the group of `users`, whose rows are at positions `mine`, with
        what it needs to know asked (in a batch: read once the batch has gone)."""
        added = collections.Counter((rows[p].user_id, rows[p].task_id) for p in mine)
        weighed: collections.Counter[_Owner] = collections.Counter()
        for p in mine:
            weighed[rows[p].user_id, rows[p].task_id] += _weight(rows[p].text)
        scopes = sorted({_ScopeKey(user, task or "") for user, task in added})
        # Each user's first scope is asked now, a later one once the earlier is purged:
        # a user's scopes overlap.
        firsts = sorted({key.user: key for key in reversed(scopes)}.values())
        # Postings by position until the ids come back.
        words = _postings_of(((p, *rows[p][:3], cast(str, rows[p].created_at)) for p in mine),
                             self._rule)
        held = _ask_held(db, words, self._index_from)
        asked = firsts if now is not None else []
        if asked and not db.asks_ahead:  # a scope that holds nothing has nothing expired
            known = held()
            asked = [key for key in firsts if known[key.user, key.task or None].in_scope]
        found = db.ask_each(_SQL_EXPIRED_ROWS, [(*key, now, PURGE_PER_WRITE)
                                                for key in asked])

        def purgeable() -> dict[str, list[Any]]:
            due: dict[str, list[Any]] = {key.user: [] for key in firsts}
            due.update(zip((key.user for key in asked), found(), strict=True))
            return due
        return _Group(users, mine, scopes, firsts, words, added, weighed, purgeable, held)

    def _postings(self, db: _Session, groups: list[_Group], known: list[dict[_Owner, _Held]],
                  values: list[tuple[Any, ...]],
                  older: int) -> list[dict[_Owner, dict[str, list[int]]]]:
        """The postings each group's write adds, given what its owners hold (`known`) and
        the rows' `values`: none for an owner left weighing less than the index's
        threshold, and those of all its memories (held before the write: ids below
        `older`) for one the write takes to it (read for all groups in one round trip)."""
        added: list[dict[_Owner, dict[str, list[int]]]] = []
        rising: list[tuple[list[str], list[_Owner]]] = []
        id_at = [value[0] for value in values].__getitem__
        for group, held in zip(groups, known, strict=True):
            postings, theirs = {}, []
            for owner, by_word in group.words.items():
                weight = held[owner].weight
                if weight + group.weighed[owner] < self._index_from:
                    continue
                postings[owner] = {word: list(map(id_at, at))
                                   for word, at in by_word.items()}
                if 0 < weight < self._index_from:
                    theirs.append(owner)
            added.append(postings)
            rising.append((group.users, theirs))
        asked = []
        with db.batch() if any(owners for _, owners in rising) else contextlib.nullcontext():
            for users, owners in rising:
                if owners:
                    db.narrow(users)
                    asked.append(db.ask_each(_SQL_OWNER_TEXTS, [(user, task or "", task)
                                                                for user, task in owners]))
        found = iter(asked)
        for postings, (_, owners) in zip(added, rising, strict=True):
            for (user, task), held_rows in zip(owners, next(found)() if owners else [],
                                                strict=True):
                # Its memories held already are older than the written ones.
                merged = _postings_of(((memory_id, user, task, text, created_at)
                                       for memory_id, text, created_at in held_rows
                                       if memory_id < older), self._rule)
                by_word = merged.get((user, task), collections.defaultdict(list))
                for word, ids in postings[user, task].items():
                    by_word[word] += ids
                postings[user, task] = by_word
        return added

    def _purge(self, db: _Session, group: _Group, now: str | None,
               older: int) -> dict[_Owner, _Held]:
        """Delete up to PURGE_PER_WRITE expired memories of each of the group's scopes
        held before the write (ids below `older`), those of each user's first scope asked
        already; what its owners hold then."""
        def held_before(found: list[Any]) -> list[Any]:  # the write's own rows may be in
            return [row for row in found if row[0] < older]

        held = group.held()
        due = {user: held_before(found)
               for user, found in (group.purgeable() if now is not None else {}).items()}
        if not any(due.values()) and len(group.scopes) == len(group.firsts):
            return held  # nothing to purge, and no later scope to ask
        db.narrow(group.users)
        purged = set()
        for key in group.scopes if now is not None else ():
            found = due.pop(key.user, None)
            if found is None:  # a later scope, asked after the earlier one's purge
                found = held_before(db.execute(
                    _SQL_EXPIRED_ROWS, (*key, now, PURGE_PER_WRITE)).fetchall())
            if self.delete(db, key, found):
                purged.add(key.user)
        again = {owner: by_word for owner, by_word in group.words.items()
                 if owner[0] in purged}
        return {**held, **(_ask_held(db, again, self._index_from)() if again else {})}

    def _dated(self, rows: list[_NewMemory]) -> list[_NewMemory]:
        """The rows, each that has no created_at given the clock's reading; one that
        replaces a keyed memory keeps its created_at and is updated at the reading."""
        dated, reading = [], None
        for row in rows:
            if row.first_created is not None:
                row = row._replace(created_at=row.first_created,
                                   updated_at=(reading := self.reading(reading)))
            elif row.created_at is None:  # _replace's dict of names is half its cost
                row = _NewMemory._make((*row[:_CREATED_AT], (reading := self.reading(reading)),
                                        *row[_CREATED_AT + 1:]))
            dated.append(row)
        return dated

    def _values(self, ids: list[int], rows: list[_NewMemory], noun: str | None,
                places: list[int] | None, null: str | None) -> list[tuple[Any, ...]]:
        """The dated rows as _SQL_INSERT takes them, `null` for NULL: each with its id, its
        expires_at and its text's key. An error names the row's position in the call
        (`places`, or its own)."""
        values = []
        for index, (memory_id, row) in enumerate(zip(ids, rows, strict=True)):
            position = index if places is None else places[index]
            created_at = cast(str, row.created_at)
            updated_at = row.updated_at
            if updated_at is None and (row.key is not None or row.metadata is not None):
                updated_at = created_at
            expires_at = row.expires_at
            if row.ttl is not None:
                try:
                    expires_at = _expiry(updated_at or created_at, row.ttl)
                except MemoryInputError as exc:
                    if noun is None:
                        raise
                    raise MemoryInputError(f"{noun} {position}: {exc}", position) from None
            values.append((memory_id, row.user_id, row.task_id or null, row.text, row.source,
                           created_at, expires_at or null, _text_key(row.text),
                           _conversation_of(row.source) or null,
                           _held_as(row.key, memory_id) or null,
                           row.metadata or null, updated_at or null, row.embed or null,
                           row.version or 1, row.valid_from or null, row.valid_to or null))
        return values

    def replace(self, db: _Session, key: _ScopeKey, old: _MemoryRow, new: _NewMemory) -> int:
        """Forget `old`, a memory of the scope, and write `new` at its level and task,
        expiring when it did (unless `new` has a ttl), with its key (and so its
        created_at), metadata and window's ends (unless `new` has its own); the new id."""
        start, end = _check_window(old.valid_from if new.valid_from is None else new.valid_from,
                                   old.valid_to if new.valid_to is None else new.valid_to)
        kept = self.supersede(db, key, [old.id]) if self.keeps_history(db) else []
        self.delete(db, key, [old], kept=kept)
        if kept:
            db.holding = True  # the successor's id is linked before the commit
        (revised,) = self.write(db, [new._replace(
            task_id=old.task_id, expires_at=old.expires_at, key=old.key,
            metadata=old.metadata if new.metadata is None else new.metadata,
            first_created=None if old.key is None else old.created_at,
            version=old.current_version + 1, valid_from=start, valid_to=end)])
        if kept:
            self.link(db, [(key, old.id, revised)])
        return revised

    def purge_expired(self, db: _Session, now: str) -> int:
        """Delete every memory no longer live at `now`, user by user; how many."""
        purged = 0
        for (user,) in db.execute(_SQL_EXPIRED_USERS, (now,)).fetchall():
            rows = db.execute(_SQL_EXPIRED_OF_USER, (user, now)).fetchall()
            remove = _unindexing(db, user, rows, self._rule, self._index_from)
            ids = json.dumps([row[0] for row in rows])
            with db.batch():
                remove()
                db.execute(_SQL_DELETE_VECTORS_OF_USER, (user, ids))
                db.execute(_SQL_DELETE_FIELDS_OF_USER, (user, ids))
                if db.has_history:
                    db.execute(_SQL_DELETE_HISTORY_OF_USER, (user, ids))
                deleted = db.execute(_SQL_DELETE_OF_USER, (user, ids))
            purged += deleted.rowcount
        return purged

    def delete(self, db: _Session, key: _ScopeKey, rows: Sequence[tuple[Any, ...]],
               last: bool = False, kept: Collection[int] = ()) -> int:
        """Delete the scope's memories `rows` (id, task_id, text, ...) with their postings,
        counts and past versions (but the pasts of those `kept`, superseded); how many.
        The `last` step of its transaction commits it, with the deletions."""
        if not rows:
            return 0
        remove = _unindexing(db, key[0], rows, self._rule, self._index_from)
        ids = json.dumps([row[0] for row in rows])
        with db.batch():  # one round trip to a server
            remove()
            db.execute(_SQL_FORGET_VECTORS, (*key, ids))
            if db.has_history:
                db.execute(_SQL_FORGET_HISTORY, (*key, json.dumps(
                    [row[0] for row in rows if row[0] not in kept]) if kept else ids))
            if any(row[7] is not None for row in rows):  # _MemoryRow.metadata
                db.execute(_SQL_FORGET_FIELDS, (*key, ids))
            forgotten = db.execute(_SQL_FORGET, (*key, ids))
            if last:
                db.finish()
        return int(forgotten.rowcount)

    def reading(self, previous: str | None = None) -> str:
        # A bad reading is the caller's input, like a bad text: MemoryInputError, and the
        # transaction it was read in rolls back, so nothing is written. A batch reads the
        # clock per memory, mostly getting the reading before it, checked already.
        reading = self._store.clock()
        if type(reading) is str and reading == previous:
            return previous
        return _check_timestamp("clock reading", reading)

    def reembed(self, embedder: Embedder,
                progress: Callable[[int, int], None] | None) -> None:
        """Give every memory a vector from `embedder` (see MemoryStore.reindex)."""
        self._store._writable()
        with self._store._snapshot(None) as db:
            users = [user for (user,) in db.execute(_SQL_USERS)]
            rows = [row for user in users for row in db.execute(_SQL_OWNED_EMBEDS, (user,))]
        vectors: dict[int, bytes] = {}

        def embedded(rows: list[tuple[Any, ...]]) -> dict[int, bytes]:
            """Each (id, user, task, text, embed) row's vectors, by id."""
            return dict(zip((row[0] for row in rows), _memory_vectors(
                embedder, [(text, embed) for *_, text, embed in rows]), strict=True))

        for start in range(0, len(rows), EMBED_BATCH):
            vectors.update(embedded(rows[start : start + EMBED_BATCH]))
            if progress is not None:
                progress(min(start + EMBED_BATCH, len(rows)), len(rows))
        with self._store._writing(None) as db:
            for (user,) in db.execute(_SQL_USERS).fetchall():
                owned = db.execute(_SQL_OWNED_EMBEDS, (user,)).fetchall()
                vectors.update(embedded([row for row in owned if row[0] not in vectors]))
                _erase_vectors(db, user)
                if db.beside_a_file:
                    # The same ids hold new vectors: a vectors file of the old ones is not
                    # the store's, even where a process that could not open it zeroed nothing.
                    db.execute(_SQL_RENEW_VECTORS_TOKEN, (os.urandom(16).hex(),))
                db.execute(_SQL_EMBEDDED_ANEW, (user, _GIVEN_EMBED))
                db.add_vectors([(memory_id, user, task_id, vectors[memory_id])
                                for memory_id, _, task_id, *_ in owned if vectors[memory_id]],
                               embedder.dimensions)
                _seal_vector_blocks(db, user, dict.fromkeys(task_id for _, _, task_id, *_
                                                            in owned), embedder.dimensions)
                if db.has_history:  # the versions kept, in the new embedder's space too
                    kept = db.execute(_SQL_OWNED_VERSION_EMBEDS, (user,)).fetchall()
                    db.executemany(_SQL_EMBED_VERSION, [
                        (vector or None, _GIVEN_EMBED, user, head_id, version)
                        for (head_id, version, *_), vector in zip(kept, _memory_vectors(
                            embedder, [(text, embed) for *_, text, embed in kept]),
                            strict=True)])
            db.execute(_SQL_SET_EMBEDDER, (_embedder_record(embedder),))
        self._store.embedder = embedder
        _log.info("embedded %d memories anew (%d dimensions)", len(vectors),
                  embedder.dimensions)

    def reindex_words(self, matching: Matching,
                      progress: Callable[[int, int], None] | None) -> None:
        """Rebuild every user's word index under `matching`, in one transaction."""
        recorded = _recording(_check_choice("matching", matching, MATCHING))
        rule = _rule_of(_RECORDED[matching])
        with self._store._writing(None) as db:
            users = [user for (user,) in db.execute(_SQL_USERS)]
            for done, user in enumerate(users, start=1):
                db.execute(_SQL_ERASE_POSTINGS, (user,))
                _index_words(db, db.execute(_SQL_OWNED_TEXTS, (user,)), rule, INDEX_FROM)
                if progress is not None:
                    progress(done, len(users))
            db.execute(_SQL_SET_MATCHING, (recorded,))
            store = self._store
            store._rule, store._recorded, store._index_from = rule, recorded, INDEX_FROM
        _log.info("reindexed %d users with matching=%s", len(users), matching)


    def revise(self, scope: Scope, wanted: int, checked: _NewMemory, expected: int | None,
               receipt: _Receipt | None) -> int | None:
        """MemoryStore.revise: the memory `wanted` replaced by `checked`, at its level and
        task; the new id, or None where the scope sees no such memory."""
        store, key = self._store, _ScopeKey(scope.user, scope.task)
        (new,) = self.with_vectors([checked])
        with store._writing({scope.user}) as db:
            done, result = _Receipt.done_in(receipt, db)
            if done:
                return cast(int | None, result)
            if store.embedder is not None:
                store._recording.check_embedder_of(db)
            expired = _expired_of(db, key, store._time.expiry_instant(db, key))
            found = db.execute(_SQL_VISIBLE_ID, (*key, wanted))
            rows = [row for row in found if row[0] not in expired]
            if not rows:
                _Receipt.record_in(receipt, db, None)
                return None
            old = _MemoryRow(*rows[0])
            old.expect_version(expected)
            if old.text == new.text:
                # Its vectors may be its caller's, which no embedder makes again.
                embed, vector = db.execute(_SQL_EMBEDDED_AS, (*key, old.id)).fetchone()
                new = new._replace(embed=embed, vector=vector)
            revised = self.replace(db, key, old, new)
            _Receipt.record_in(receipt, db, revised)
        store._lifecycle.scrub()
        _log.info("revised memory %d of user %s as %d", wanted, scope.user, revised)
        return revised

    def rename(self, scope: Scope, old: str, new: str, expected: int | None,
               receipt: _Receipt | None) -> int | None:
        """MemoryStore.rename: the memory under `old` moved to `new`; its id, or None where
        the scope sees none under `old`."""
        store, owners = self._store, _ScopeKey(scope.user, scope.task)
        with store._writing({scope.user}) as db:
            done, result = _Receipt.done_in(receipt, db)
            if done:
                return cast(int | None, result)
            expired = _expired_of(db, owners, store._time.expiry_instant(db, owners))
            found = db.execute(_SQL_VISIBLE_KEY, (scope.user, scope.task, scope.task, old))
            rows = [_MemoryRow(*row) for row in found if row[0] not in expired]
            held = rows[0] if rows else None
            if held is not None:
                held.expect_version(expected)
            _Receipt.record_in(receipt, db, None if held is None else held.id)
            if held is None or new == old:
                return None if held is None else held.id
            taken = db.execute(_SQL_KEYED, (scope.user, scope.task, held.task_id,
                                            held.task_id or "", new)).fetchall()
            if taken and taken[0][0] not in expired:
                raise VersionConflict(_MemoryRow(*taken[0]).current_version, 0, "the new key")
            self.delete(db, owners, taken)
            reading = self.reading()
            if self.keeps_history(db):
                self.supersede(db, owners, [held.id], reading)
            db.execute(_SQL_RENAME, (new, held.current_version + 1, reading, *owners, held.id))
        if taken:
            store._lifecycle.scrub()
        _log.info("renamed the key of memory %d of user %s", held.id, scope.user)
        return held.id

class _Planner(_Part):
    """How a store's recall reads a scope: its words' postings, its vectors and
    conversations (copies of them kept while the scope is unchanged), the memories a
    filter admits, and which search scores them."""

    def __init__(self, store: MemoryStore) -> None:
        super().__init__(store)
        # What recall read last of the scopes it served (_kept), by kind and scope.
        self._copies: collections.OrderedDict[
            tuple[type, _ScopeKey], tuple[Any, _Vectors | _Conversations]] = \
            collections.OrderedDict()
        self._kept_bytes = 0  # the sizes of the copies, together
        # The approximate indexes of scopes (recall's approximate=True), oldest first,
        # each with what its scope held when it was last brought up to date.
        self._indexes: collections.OrderedDict[_ScopeKey, tuple[Any, _Approximate]] = \
            collections.OrderedDict()

    def plan(self, db: _Session, key: _ScopeKey, wanted: set[str], meant: bytes | None,
             rank: Rank, context: bool, conditions: list[_Condition] | None,
             most: int, approximate: bool = False, valid_at: str | None = None
             ) -> tuple[_Recall, _Scoring] | None:
        """How recall scores the scope's memories valid at `valid_at` (_check_valid_at's)
        for the query's `wanted` words and its vector (`meant`), with its `most` best
        scored: what it asks of the scope, the scoring's best; None where the filter
        admits no memory."""
        by_words: Rank = "idf" if rank == "hybrid" else rank
        if meant is not None:
            self._store._recording.check_embedder_of(db)
        now = self._store._time.expiry_instant(db, key)
        valid = self._store._time.valid_instant(db, key, valid_at)
        listed = (json.dumps(sorted(wanted)), *key)
        with db.batch():  # sent together, the results read after
            # PostgreSQL sends a whole result at once, so there the rows' map comes
            # first; SQLite's postings are read until they are too many.
            row_map = (db.execute(_SQL_POSTINGS_MAP, listed)
                       if db.reads_map_first else None)
            counted = self._ask_counts(db, key)
            expired_ids = self._store._time.ask_unseen(db, key, now, valid)
            # What tells whether the store's copy of the scope is good (_kept).
            kept = meant is not None or (context and _numpy() is not None)
            newest = db.execute(_SQL_NEWEST_IN_SCOPE, (key.user, *key)) if kept else None
        expired = expired_ids()
        counts = counted.fetchall()
        held = {task_key: memories for task_key, memories, _ in counts}
        weights = {task_key: weight for task_key, _, weight in counts}
        # N and df count live memories only.
        visible = sum(held.values()) - len(expired) if by_words == "idf" else 0
        unindexed = self._unindexed(key, weights)
        admitted = None if conditions is None else self.admitted(db, key, conditions)
        if admitted is not None and admitted.allowed is not None \
                and not admitted.allowed - admitted.excluded:
            return None
        asked = _Recall(key, listed, by_words, most, expired, visible, {}, admitted)
        apart = self._read_unindexed(db, asked, unindexed) if wanted else {}
        scope_held = (*sorted(held.items()), *newest.fetchone()) if newest else ()
        around = (self._around(db, key, now, scope_held)
                  if context and rank != "meaning" else None)
        if meant is not None:
            vectors = self._vectors_of(db, key, scope_held) if not approximate \
                or rank != "meaning" or sum(count for _, count in scope_held[:-1]) < ANN_FROM \
                else self._approximate(db, key, scope_held)
            scoring = self._by_meaning(db, asked, rank, (vectors, meant), apart, around,
                                       len(wanted))
        elif around is not None:
            scoring = _in_context(self._all_postings(db, asked, apart), asked, around)
        else:
            scoring = _Scoring(self._best(db, asked, row_map, apart))
        return asked, scoring

    @staticmethod
    def _ask_counts(db: _Session, key: _ScopeKey) -> Any:
        """The scope's owners' counts and weights (_SQL_SCOPE_COUNTS), asked now: a file
        from before the weights gives each owner's count as its weight."""
        return db.execute(_SQL_SCOPE_COUNTS if db.has_weights
                          else _SQL_SCOPE_COUNTS_UNWEIGHED, key)

    def _unindexed(self, key: _ScopeKey, weights: dict[str, int]) -> list[str | None]:
        """The scope's owners (None: the user level) whose words are not indexed: those
        weighing less than the index begins at, by their weights (_SQL_SCOPE_COUNTS)."""
        return [task for task in (None, key.task)
                if 0 < weights.get(task or "", 0) < self._index_from]

    def page(self, db: _Session, key: _ScopeKey, page: _Page, valid_at: str | None
             ) -> list[Memory]:
        """The live memories of the scope on `page` valid at `valid_at` (see
        MemoryStore.memories)."""
        time = self._store._time
        now, valid = time.expiry_instant(db, key), time.valid_instant(db, key, valid_at)
        if page.conditions is not None:  # a filter's reads leave out the ids given
            expired, valid = time.ask_unseen(db, key, now, valid)(), None
        else:  # windows told by each row read, not the scope's every closed one
            expired = _expired_of(db, key, now)
        first, below, most, talk = page.after, page.before, page.limit, page.conversation
        if page.newest_first or page.down or page.conditions is not None:
            rarest = walked = None
            if page.conditions is not None and page.newest_first and most is not None \
                    and talk is None:
                rarest = self.rarest(db, key, page.conditions)
                # Where the index names few memories, reading them costs less than a walk.
                if rarest is None or rarest[1] > _WALKED_PAGES * most:
                    walked = self._walked(db, key, page, expired)
            if walked is not None:
                return walked
            if page.conditions is not None:
                rows = self.visible_where(db, key, page.conditions, expired,
                                          None if talk is not None else page, rarest)
            else:
                rows = _valid_run(self._down_or_between(db, key, page), most, expired, valid)
            found = [row.memory() for row in rows if first < row.id < below and (
                talk is None or _conversation_of(row.source) == talk)]
            if page.newest_first:
                found.sort(key=operator.itemgetter("id"), reverse=True)
            return found if most is None else found[:most]
        older = not db.has_conversations  # a file from before them, read as it is

        def read(asked: int, last: int | None) -> list[tuple[Any, ...]]:
            after = first if last is None else last
            if talk is not None and not older:
                return list(db.execute(_SQL_VISIBLE_CONVERSATION,
                                       (*key, talk, after, asked)).fetchall())
            if talk is None and page.paged:
                return _along_owners(db, key, after, _MAX_ID, asked, newest=False)
            # every memory of the scope, those of an older file filtered below
            return list(db.execute(_SQL_VISIBLE, key).fetchall())

        found = [row.memory() for row in _valid_run(read, most, expired, valid)]
        if talk is not None and older:
            found = [memory for memory in found if memory["id"] > first
                     and _conversation_of(memory["source"]) == talk]
        return found if most is None else found[:most]

    def keyed(self, db: _Session, key: _ScopeKey, prefix: str, after: str | None,
              most: int | None, conditions: list[_Condition] | None,
              valid_at: str | None) -> list[_MemoryRow]:
        """The live keyed memories of the scope valid at `valid_at` whose keys begin with
        `prefix` and come after `after`, in key order, each key as get finds it (the
        task's own over the user level's), at most `most`; with `conditions`, those the
        filter admits (every key of the range read)."""
        expired = self._store._time.unseen(db, key, valid_at)
        low, strict, high = _key_range(prefix, after)
        asked = _MAX_ID if most is None or conditions is not None \
            else min(_MAX_ID, most + len(expired))
        found: dict[str, _MemoryRow] = {}
        in_range = _KEY_RANGES[strict]
        # Both owners at once: a key twice at most.
        owners, each = (("", key.task), asked) if db.keys_by_owner \
            else (("",), min(_MAX_ID, 2 * asked))
        for owner in owners:  # the task's own read last, to stand over the other
            rows = db.execute(in_range, (*key, owner, low, high, each))
            found.update((cast(str, row.key), row) for row in map(_MemoryRow._make, rows)
                         if row.id not in expired)
        return _by_key(found, most, conditions)

    @staticmethod
    def _down_or_between(db: _Session, key: _ScopeKey, page: _Page) -> _PageRead:
        """The reads of a page down (newest first) or between its bounds."""
        talk = page.conversation

        def read(asked: int, last: int | None) -> list[tuple[Any, ...]]:
            first, below = page.after, page.before
            if last is not None:
                first, below = (first, last) if page.newest_first else (last, below)
            if talk is not None and db.has_conversations:  # its page from its index
                return list(db.execute(_SQL_CONVERSATION_DOWN if page.newest_first
                                       else _SQL_CONVERSATION_BETWEEN,
                                       (*key, talk, first, below, asked)).fetchall())
            if page.newest_first and talk is None:
                return _along_owners(db, key, first, below, asked)
            # an older file's conversations are told apart below, uncut
            return list(db.execute(
                _SQL_VISIBLE_DOWN if page.newest_first else _SQL_VISIBLE_BETWEEN,
                (*key, first, below, _MAX_ID if talk is not None else asked)).fetchall())
        return read

    def _walked(self, db: _Session, key: _ScopeKey, page: _Page,
                expired: set[int]) -> list[Memory] | None:
        """A filtered page, newest first, read down the scope's newest memories a few times
        the page's size and tested row by row: where the filter admits most of them (an
        adapter's mark on its every item), that is the page, not the index's every
        admitted id; None where those rows did not fill it (then the index decides)."""
        assert page.conditions is not None and page.limit is not None
        found: list[_MemoryRow] = []
        admits = _admitting(page.conditions)
        below, asked = page.before, _WALKED_PAGES * page.limit
        for _ in range(_WALKS):
            rows = _along_owners(db, key, page.after, below, min(_MAX_ID, asked))
            found += [row for row in map(_MemoryRow._make, rows) if row.id not in expired
                      and admits(row)]
            if len(found) >= page.limit or len(rows) < asked:
                return [row.memory() for row in found[:page.limit]]
            below, asked = rows[-1][0], asked * _WALKED_PAGES
        return None

    def query_vector(self, rank: Rank, query: str) -> bytes | None:
        """The query's vector where the rank reads meaning, made outside the lock as a
        write's are; None where it does not (hybrid without an embedder, a blank query)."""
        given = isinstance(self._store.embedder, _GivenVectors)
        if rank == "meaning" and (self._store.embedder is None or given):
            raise MemoryInputError("rank='meaning' needs a store opened with an embedder, or"
                                   " the query's vector (vector=)")
        if self._store.embedder is None or given or rank not in ("meaning", "hybrid") \
                or not query.strip():
            return None
        (meant,) = _embedded(self._store.embedder, [query])
        return meant

    def _vectors_of(self, db: _Session, key: _ScopeKey, held: tuple[Any, ...]
                    ) -> _VectorSearch:
        """The scope's vectors: the store's copy where it is good (_copy_of); past the kept
        budget, as the database scores them where it can; else read a block at a time as
        recall scores them."""
        assert self._store.embedder is not None
        dimensions, record = self._store.embedder.dimensions, _embedder_record(self._store.embedder)

        def extended(kept_held: tuple[Any, ...], kept: _Vectors) -> _Vectors | None:
            kept_scope, kept_record = kept_held
            if kept_record != record or _numpy() is None \
                    or not self._only_written_after(db, key, held, kept_scope):
                return None
            return kept.extended(db.execute(
                _SQL_SCOPE_VECTORS_AFTER, _owners_after(key, kept_scope[-1])).fetchall(),
                dimensions)

        kept = self._copy_of(_Vectors, key, (held, record), extended)
        if kept is not None:
            return kept
        # Past the budget by its count (a memory has one vector, most often).
        past = sum(count for _, count in held[:-1]) * 4 * dimensions > KEPT_BYTES
        served = db.served_vectors(key, dimensions, approximate=False) if past else None
        if served is not None:
            return served
        return _VectorStream(functools.partial(_vector_blocks, db, key, dimensions, past=past),
                             dimensions,
                             functools.partial(self._keep, _Vectors, key, (held, record)))

    @staticmethod

    def _only_written_after(db: _Session, key: _ScopeKey, held: tuple[Any, ...],
                            kept_held: tuple[Any, ...]) -> bool:
        """Whether the scope, which holds `held` (its counts and newest id) where a kept
        copy of it read `kept_held`, changed by writes alone: its counts grew by exactly
        the memories written after the copy's newest, so none left it (ids are never
        given twice)."""
        (written,) = db.execute(_SQL_SCOPE_WRITTEN_AFTER,
                                _owners_after(key, kept_held[-1])).fetchone()
        gained = sum(count for _, count in held[:-1]) - sum(count for _, count in kept_held[:-1])
        return bool(gained == written)

    def _kept(self, kind: type[_Kept], key: _ScopeKey, held: tuple[Any, ...],
              read: Callable[[], _Kept],
              extend: Callable[[tuple[Any, ...], _Kept], _Kept | None] | None = None
              ) -> _Kept:
        """What `read` reads of the scope: the store's copy where it is good (_copy_of),
        else read now and kept (_keep)."""
        copy = self._copy_of(kind, key, held, extend)
        if copy is None:
            copy = read()
            self._keep(kind, key, held, copy)
        return copy

    def _copy_of(self, kind: type[_Kept], key: _ScopeKey, held: tuple[Any, ...],
                 extend: Callable[[tuple[Any, ...], _Kept], _Kept | None] | None = None
                 ) -> _Kept | None:
        """The store's copy of the scope while the scope's counts and newest id (`held`,
        _SQL_NEWEST_IN_SCOPE, and what else it was read by) are as when it was read, else
        what `extend` makes of the copy (given what held then), kept in its place; None
        where there is no copy or `extend` cannot make one."""
        with self._store._lock:
            kept = self._copies.get((kind, key))
            if kept is not None and kept[0] == held:
                self._copies.move_to_end((kind, key))
                return cast(_Kept, kept[1])
        extended = None if kept is None or extend is None else extend(kept[0],
                                                                    cast(_Kept, kept[1]))
        if extended is not None:
            self._keep(kind, key, held, extended)
        return extended

    def _keep(self, kind: type[_Kept], key: _ScopeKey, held: tuple[Any, ...],
              copy: _Kept) -> None:
        """Keep `copy` of the scope (with numpy, where it fits the budget), the oldest read
        dropped while all of them take more than KEPT_BYTES."""
        if _numpy() is None or _COPY_BYTES + copy.size > KEPT_BYTES:
            return
        with self._store._lock:
            # A running total: summing every copy's size at each keep made a user's first
            # recall dearer the more users the process had served.
            before = self._copies.pop((kind, key), None)
            if before is not None:
                self._kept_bytes -= _COPY_BYTES + before[1].size
            self._copies[kind, key] = (held, copy)
            self._kept_bytes += _COPY_BYTES + copy.size
            while self._kept_bytes > KEPT_BYTES:
                _, (_, dropped) = self._copies.popitem(last=False)
                self._kept_bytes -= _COPY_BYTES + dropped.size

    def _approximate(self, db: _Session, key: _ScopeKey, held: tuple[Any, ...]
                     ) -> _VectorSearch:
        """The scope's vectors by an approximate index: the database's own where it has one
        (pgvector's), else the store's (_index_of)."""
        assert self._store.embedder is not None
        served = db.served_vectors(key, self._store.embedder.dimensions, approximate=True)
        return served if served is not None else self._index_of(db, key, held)

    def _index_of(self, db: _Session, key: _ScopeKey, held: tuple[Any, ...]) -> _Approximate:
        """The scope's approximate index: the one kept where the scope holds what it held
        (grown by the memories written since, where nothing else changed), else built
        from the scope's vectors; kept, the oldest dropped past ANN_BYTES in all."""
        assert self._store.embedder is not None
        dimensions, record = self._store.embedder.dimensions, _embedder_record(self._store.embedder)
        with self._store._lock:
            kept = self._indexes.pop(key, None)
        index = None if kept is None else kept[1]
        if kept is not None and kept[0] != (held, record):
            kept_held, kept_record = kept[0]
            if kept_record == record and self._only_written_after(db, key, held, kept_held):
                kept[1].add(_Vectors(db.execute(
                    _SQL_SCOPE_VECTORS_AFTER, _owners_after(key, kept_held[-1])).fetchall(),
                    dimensions))
            else:
                index = None
        if index is None:
            _check_usearch()  # the database, thought to serve at open, no longer does
            index = _Approximate(dimensions)
            for block in _vector_blocks(db, key, dimensions, past=True):
                index.add(block)
        with self._store._lock:
            self._indexes[key] = ((held, record), index)
            while sum(other.size for _, other in self._indexes.values()) > ANN_BYTES \
                    and len(self._indexes) > 1:
                self._indexes.popitem(last=False)
        return index

    def _by_meaning(self, db: _Session, recall: _Recall, rank: Rank,
                    asked: tuple[_VectorSearch, bytes],
                    unindexed: dict[str, array.array[int]], around: _Around | None,
                    words_asked: int) -> _Scoring:
        """The ranks by meaning: the cosines alone, or (hybrid) with every memory's word
        evidence (_evidence), in context where `around` finds neighbours, over the
        question's weight (_question)."""
        vectors, query = asked
        if rank == "meaning":
            best, cosines = vectors.best(query, recall.limit, recall.expired,
                                         admitted=recall.admitted)
            return _Scoring(best, cosines=cosines)
        postings = self._all_postings(db, recall, unindexed)
        if isinstance(around, _Conversations):
            scored = around.in_context(around.own(postings, recall, evidence=True),
                                       recall.expired)
            question = _question(recall, words_asked)
            lending = scored.scores > 0
            best, cosines = vectors.best(query, recall.limit, recall.expired, (
                scored.ids[lending], _HYBRID_WORDS * scored.scores[lending] / question),
                recall.admitted)
            return _Scoring(best, *scored.explained(best), cosines, question, True)
        if around is None and _numpy() is not None:
            ids, evidence = _evidence_at_once(postings, recall)
            question = _question(recall, words_asked)
            best, cosines = vectors.best(query, recall.limit, recall.expired,
                                         (ids, _HYBRID_WORDS * evidence / question),
                                         recall.admitted)
            return _Scoring(best, cosines=cosines, question=question)
        own = _evidence(postings, recall)
        said, placed = own, cast(dict[int, _Placed], {})
        if around is not None:
            everything = max(1, len(own)) * (1 + 2 * _CONTEXT_WINDOW)
            in_order, placed = _scores_in_context(own, everything, around)
            said = {memory_id: score for score, memory_id in in_order}
        question = _question(recall, words_asked)
        best, cosines = vectors.best(query, recall.limit, recall.expired, (
            list(said), [_HYBRID_WORDS * score / question for score in said.values()]),
            recall.admitted)
        return _Scoring(best, placed, own, cosines, question, around is not None)

    @staticmethod

    def _all_postings(db: _Session, recall: _Recall, unindexed: dict[str, array.array[int]]
                      ) -> list[tuple[str, array.array[int]]]:
        """All of the query words' postings: the `unindexed` ones and, one run a word,
        every index row's (joined once each is checked: a run of whole ids)."""
        words = json.loads(recall.listed[0])
        by_word: Iterable[tuple[str, Iterable[bytes | None]]]
        if len(words) <= _STATEMENT_A_WORD_UP_TO:
            found = db.ask_each(_SQL_WORD_POSTINGS, [(*recall.key, word) for word in words])()
            by_word = [(word, map(operator.itemgetter(0), rows))
                       for word, rows in zip(words, found, strict=True)]
        else:
            grouped: dict[str, list[bytes | None]] = collections.defaultdict(list)
            for word, _, blob in db.execute(_SQL_POSTINGS, recall.listed):
                grouped[word].append(blob)
            by_word = grouped.items()
        postings = list(unindexed.items())
        for word, blobs in by_word:
            try:
                joined = b"".join(blobs)  # type: ignore[arg-type]
            except TypeError:  # a NULL: a row that is not a run of whole ids
                raise SchemaError(_DAMAGED_POSTINGS) from None
            if joined:
                postings.append((word, _unpack(joined)))
        return postings

    def _around(self, db: _Session, key: _ScopeKey, now: str | None,
                held: tuple[Any, ...]) -> _Around:
        """Where recall with context finds the scope's neighbours: its conversations,
        read at once (_kept, with numpy and the scope's counts and newest id, `held`),
        else the ids nearest each memory asked about."""
        if not db.has_conversations:
            raise StoreError("recall with context needs the file's conversations,"
                             f" of schema version {_CONVERSATIONS_FROM}: open it"
                             " once to write, which upgrades it")
        if not held or _numpy() is None:
            return functools.partial(self._nearest, db, key, now)

        def extended(kept_held: tuple[Any, ...], kept: _Conversations) -> _Conversations | None:
            if not self._only_written_after(db, key, held, kept_held):
                return None
            return kept.extended(db.execute(_SQL_SCOPE_CONVERSATIONS_AFTER,
                                            _owners_after(key, kept_held[-1])).fetchall())

        return self._kept(_Conversations, key, held, lambda: _Conversations.read(
            db.blocks(_SQL_SCOPE_CONVERSATIONS, key, _ROWS_PER_READ)), extended)

    @staticmethod

    def _nearest(db: _Session, key: _ScopeKey, now: str | None,
                 ids: list[int]) -> dict[int, _Nearest]:
        """The ids nearest each of the memories `ids` in its conversation (_SQL_AROUND)."""
        (found,) = db.execute(_SQL_AROUND, (*key, now, *key, now, *key,
                                            json.dumps(sorted(ids)))).fetchone()
        return {memory_id: (before, after) for memory_id, before, after in json.loads(found)}

    def _read_unindexed(self, db: _Session, recall: _Recall, tasks: list[str | None]
                        ) -> dict[str, array.array[int]]:
        """The postings of the query's words among the memories of the scope's owners
        whose words are not indexed (`tasks`: None for the user level), each word's ids
        ascending, as one index row would hold them."""
        if not tasks:
            return {}
        wanted = set(json.loads(recall.listed[0]))
        found = db.ask_each(_SQL_OWNER_TEXTS, [(*recall.key, task) for task in tasks])()
        postings: dict[str, array.array[int]] = collections.defaultdict(
            functools.partial(array.array, "q"))
        for memory_id, text, created_at in sorted(itertools.chain.from_iterable(found)):
            for word in self._rule.of_memory(text, created_at) & wanted:
                postings[word].append(memory_id)
        return postings

    def _best(self, db: _Session, recall: _Recall, row_map: Any,
              unindexed: dict[str, array.array[int]]) -> list[tuple[float, int]]:
        """The best (score, id) pairs, over the index's postings and the `unindexed` ones:
        every posting scored at once where the words hold at most _READ_ALL_UP_TO, else a
        top-k search over the map of their rows (from `row_map` if it was read already),
        or, once that reads more than a third of them, all of them scored at once."""
        if recall.admitted is not None:  # the top-k search stops at the best of all
            return _scores_of_all(self._all_postings(db, recall, unindexed), recall)
        mapped = None if row_map is None else _postings_map(row_map)
        postings = list(unindexed.items())
        read = sum(len(ids) for _, ids in postings)
        if mapped is None or sum(mapped[0].values()) + read <= _READ_ALL_UP_TO:
            indexed = db.execute(_SQL_POSTINGS, recall.listed) if mapped is None or mapped[0] \
                else ()
            for word, _, blob in indexed:
                postings.append((word, _unpack(blob)))
                read += len(postings[-1][1])
                if read > _READ_ALL_UP_TO:
                    mapped = _postings_map(db.execute(_SQL_POSTINGS_MAP, recall.listed))
                    break
            else:
                return _scores_of_all(postings, recall)
        assert mapped is not None
        best = self._top(db, recall, *mapped, unindexed)
        if best is None:
            best = _scores_of_all(self._all_postings(db, recall, unindexed), recall)
        return best

    def _top(self, db: _Session, recall: _Recall, held: collections.Counter[str],
             groups: list[_WordRows], unindexed: dict[str, array.array[int]]
             ) -> list[tuple[float, int]] | None:
        """_TopK's search over the postings rows `groups` and the `unindexed` ones, each
        of those one row, read as it asks."""
        apart = {(word, ids[0]): ids for word, ids in unindexed.items()}
        for word, first_id in apart:
            held[word] += len(unindexed[word])
            groups.append(_WordRows(word, [first_id]))

        def fetch(wanted: dict[str, list[int]]) -> list[tuple[str, int, bytes]]:
            keys = sorted({(word, first) for word, firsts in wanted.items() for first in firsts})
            found = [(word, first, _pack(apart[word, first])) for word, first in keys
                     if (word, first) in apart]
            keys = [key for key in keys if key not in apart]
            if not keys:
                return found
            return found + list(db.execute(_SQL_POSTINGS_ROWS, (json.dumps(keys),
                                                                 *recall.key)))

        weights = None
        if recall.rank == "idf":
            if recall.expired:
                held.subtract(_expired_holders(groups, recall.expired, fetch))
            weights = {word: _idf(recall.visible, df) for word, df in held.items()}
            recall.weights.update(weights)
        return _TopK(groups, weights, recall.expired, recall.limit, fetch,
                     budget=sum(held.values()) // _TOP_K_BUDGET,
                     skip_common=db.skips_common_words).search()

    def admitted(self, db: _Session, key: _ScopeKey, conditions: list[_Condition],
                 rarest: tuple[_Condition, int] | None = None) -> _Admitted:
        """The memories of the scope a filter admits: equalities of metadata paths from the
        index of terms (those of $ne and $nin excluded), then the other tests on the facts
        of the memories left (the scope's, where no equality narrowed them)."""
        exact = [condition for condition in conditions if condition.indexed]
        terms = sorted({term for condition in exact for term in condition.terms()})
        holders: dict[str, set[int]] = collections.defaultdict(set)
        if rarest is None and len(exact) > 1:
            rarest = self.rarest(db, key, exact)
        first = terms if rarest is None or len(exact) < 2 else sorted(set(rarest[0].terms()))
        if first:
            for term, memory_id in db.execute(_SQL_FIELD_IDS, (*key, json.dumps(first))):
                holders[term].add(memory_id)
        rest = sorted(set(terms) - set(first))
        among = set().union(*(holders[term] for term in first))
        if rest and among:  # only the rarest's holders can be admitted
            for term, memory_id in db.execute(_SQL_FIELD_IDS_AMONG, (
                    *key, json.dumps(rest), json.dumps(sorted(among)))):
                holders[term].add(memory_id)
        allowed: set[int] | None = None
        excluded: set[int] = set()
        for condition in exact:
            held = set().union(*(holders[term] for term in condition.terms()))
            if condition.op in ("$eq", "$in"):
                allowed = held if allowed is None else allowed & held
            else:
                excluded |= held
        tested = [condition for condition in conditions if not condition.indexed]
        levels = [condition for condition in tested if condition.path == ("$level",)]
        if levels:
            tested = [condition for condition in tested if condition not in levels]
            allowed = self.by_level(db, key, levels, allowed, excluded)
        if tested:
            found = (db.execute(_SQL_SCOPE_FACTS, key) if allowed is None else
                     db.execute(_SQL_SOME_FACTS, (*key, json.dumps(sorted(allowed)))))
            # A test of the memory's own fields ($level, $key, ...) parses no metadata.
            read = _metadata_of if any(condition.reads_metadata for condition in tested) \
                else _unread
            allowed = {memory_id for memory_id, metadata, *fields in found
                       if all(condition.holds(_Facts(read(metadata), *fields))
                              for condition in tested)}
        return _Admitted(allowed, excluded)

    @staticmethod
    def by_level(db: _Session, key: _ScopeKey, levels: list[_Condition],
                 allowed: set[int] | None, excluded: set[int]) -> set[int] | None:
        """What tests of $level leave admitted, told from the index by owner (the scope's
        user-level ids) rather than from each memory's facts; `excluded` grows."""
        at_user = {memory_id for (memory_id,) in db.execute(_SQL_USER_LEVEL_IDS, key)}
        for condition in levels:
            if not condition.holds(_LEVEL_FACTS["task"]):
                allowed = at_user if allowed is None else allowed & at_user
            if not condition.holds(_LEVEL_FACTS["user"]):
                excluded |= at_user
        return allowed

    @staticmethod
    def rarest(db: _Session, key: _ScopeKey, conditions: list[_Condition]
               ) -> tuple[_Condition, int] | None:
        """The equality ($eq, $in) of a filter held by the fewest memories, with how many
        (counted to _COUNTED); None for a filter with none."""
        allowing = [condition for condition in conditions
                    if condition.indexed and condition.op in ("$eq", "$in")]
        if not allowing:
            return None
        terms = sorted({term for condition in allowing for term in condition.terms()})
        held = dict(db.execute(_SQL_FIELD_COUNTS, (*key, _COUNTED, json.dumps(terms))).fetchall())
        return min(((condition, sum(held.get(term, 0) for term in set(condition.terms())))
                    for condition in allowing), key=operator.itemgetter(1))

    def count(self, db: _Session, key: _ScopeKey, conditions: list[_Condition],
              valid_at: str | None) -> int:
        """How many live memories of the scope valid at `valid_at` a filter admits."""
        expired = self._store._time.unseen(db, key, valid_at)
        admitted = self.admitted(db, key, conditions)
        if admitted.allowed is not None:
            return sum(memory_id in admitted for memory_id in admitted.allowed - expired)
        return len(self.visible_where(db, key, conditions, expired))

    def visible_where(self, db: _Session, key: _ScopeKey, conditions: list[_Condition],
                      expired: set[int], page: _Page | None = None,
                      rarest: tuple[_Condition, int] | None = None) -> list[_MemoryRow]:
        """The live memories of the scope a filter admits, by id ascending; with a `page`,
        at least those of it, and where the filter's equalities name its memories, only
        those (a page of a user's thousands is a page's rows, not all of them)."""
        admitted = self.admitted(db, key, conditions, rarest)
        if admitted.allowed is None:
            rows = db.execute(_SQL_VISIBLE, key).fetchall()
        else:
            wanted = sorted(admitted.allowed - admitted.excluded - expired)
            if page is not None and page.limit is not None:
                wanted = [i for i in wanted if page.after < i < page.before]
                wanted = wanted[-page.limit:] if page.newest_first else wanted[:page.limit]
            rows = db.execute(_SQL_VISIBLE_IDS, (*key, json.dumps(wanted))).fetchall()
        return [_MemoryRow(*row) for row in rows
                if row[0] not in expired and row[0] in admitted]


    def recall(self, asked: _Asked) -> list[Recalled]:
        """The ranking MemoryStore.recall asks for, from asked.start to asked.stop, each as
        recall gives it: before a reranker's order and the cuts."""
        store, scope, meant = self._store, asked.scope, asked.meant
        if asked.as_of is not None:
            # By words alone, ranked where the memories are; with vectors or
            # neighbours, in a copy of the scope as it read.
            found = self.recalled_then(asked) if meant is None and not asked.context \
                and asked.rank != "meaning" else None
            if found is not None:
                return found
            return store._time.recall(scope, asked.as_of, asked.valid_at, meant, asked.query,
                                      asked.start, asked.stop, rank=asked.rank,
                                      explain=asked.explain, context=asked.context,
                                      where=asked.where)
        key = _ScopeKey(scope.user, scope.task)
        with store._snapshot({scope.user}) as db:
            if asked.given is not None and not store._recording.take_given(
                    db, {asked.given[1]}, write=False):
                meant = None  # nothing holds a vector yet
                if asked.rank == "meaning":
                    return []
            wanted = self._rule.words(asked.query)
            if not wanted and meant is None:
                return []
            planned = self.plan(db, key, wanted, meant, asked.rank, asked.context,
                                asked.conditions, asked.stop, asked.approximate,
                                asked.valid_at)
            if planned is None:  # the filter admits no memory
                return []
            weighed, scoring = planned
            page = scoring.best[asked.start:asked.stop]
            read = db.last_statement(_SQL_RECALLED, (*key, json.dumps([i for _, i in page])))
            rows = {row[0]: _MemoryRow(*row) for row in read}
        return self._results(page, rows, wanted, scoring.why if asked.explain else None,
                             weighed.weights)

    def _results(self, page: list[tuple[float, int]], rows: dict[int, _MemoryRow],
                 wanted: set[str], why: Callable[[int, dict[str, float]], Why] | None,
                 weights: dict[str, float]) -> list[Recalled]:
        """The ranking's `page` as recall gives it, each from its row (one gone since the
        ranking was read is left out), with `why` it scored where explain asks: the query
        words it holds, by their `weights` (1 under the shared rank)."""
        found = []
        for score, memory_id in page:
            row = rows.get(memory_id)
            if row is None:
                continue
            result = row.recalled(score)
            if why is not None:
                holds = sorted(wanted & self._rule.of_memory(row.text, row.created_at))
                result["why"] = why(memory_id, {word: weights.get(word, 1) for word in holds})
            found.append(result)
        return found

    def recalled_then(self, asked: _Asked) -> list[Recalled] | None:
        """recall as of a time by its words alone, as a store of the scope as it read then
        would rank it (_Time.recall): the index's postings of the scope's memories
        unchanged since, and the words of the versions live then in place of the others
        (_Time.changed_since), N and df those of the memories it held; None where those
        ids cannot tell its memories apart, or the time read is after the clock's."""
        assert asked.as_of is not None
        store, scope, instant = self._store, asked.scope, _as_of_instant(asked.as_of)
        key, time = _ScopeKey(scope.user, scope.task), store._time
        wanted = self._rule.words(asked.query)
        with store._snapshot({scope.user}) as db:
            now, valid = time.expiry_instant(db, key), time.valid_instant(db, key,
                                                                       asked.valid_at)
            changed = None if now is not None and instant > now \
                else time.changed_since(db, key, instant, now, valid)
            if changed is None:
                return None
            if not wanted:
                return []
            left_out, seen = changed
            counts = self._ask_counts(db, key).fetchall()
            by_words: Rank = "idf" if asked.rank == "hybrid" else asked.rank
            held = sum(memories for _, memories, _ in counts) - len(left_out) + len(seen)
            admitted = None if asked.conditions is None \
                else self._admitted_then(db, key, asked.conditions, seen)
            recall = _Recall(key, (json.dumps(sorted(wanted)), *key), by_words, asked.stop,
                             set(), held if by_words == "idf" else 0, {}, admitted)
            unindexed = self._unindexed(key, {task_key: weight for task_key, _, weight in counts})
            postings = [(word, array.array("q", (i for i in ids if i not in left_out)))
                        for word, ids in self._all_postings(
                            db, recall, self._read_unindexed(db, recall, unindexed))]
            for row in seen:
                postings += [(word, array.array("q", [row.id]))
                             for word in self._rule.of_memory(row.text, row.created_at) & wanted]
            page = _scores_of_all(postings, recall)[asked.start:asked.stop]
            versions = {row.id: row for row in seen}
            read = db.last_statement(_SQL_RECALLED, (*key, json.dumps(
                [memory_id for _, memory_id in page if memory_id not in versions])))
            rows = {**{row[0]: _MemoryRow(*row) for row in read}, **versions}
        return self._results(page, rows, wanted,
                             _Scoring(page).why if asked.explain else None, recall.weights)

    def _admitted_then(self, db: _Session, key: _ScopeKey, conditions: list[_Condition],
                       seen: list[_MemoryRow]) -> _Admitted:
        """The memories a filter admits of the scope as it read then: of its memories
        unchanged since, those the index admits; of the versions `seen` in the others'
        place (_Time.changed_since), those their own facts pass."""
        admitted, admits = self.admitted(db, key, conditions), _admitting(conditions)
        ids = {row.id for row in seen}
        passed = {row.id for row in seen if admits(row)}
        return _Admitted(None if admitted.allowed is None else admitted.allowed - ids | passed,
                         admitted.excluded - ids | ids - passed)

    def reranker_for(self, rerank: object, query: str) -> Reranker | None:
        """The reranker a recall reorders by: rerank=None asks for the store's where the
        query has words to read beside each memory."""
        reranker = self._store.reranker
        if rerank is None:
            return reranker if query.strip() else None
        if not _check_flag("rerank", rerank):
            return None
        if reranker is None:
            raise MemoryInputError("rerank=True needs the store's reranker:"
                                   " MemoryStore(..., reranker=...)")
        if not query.strip():
            raise MemoryInputError("rerank=True reads the query beside each memory: it"
                                   " must have words")
        return reranker

    @staticmethod
    def paged(reranker: Reranker | None, query: str, found: list[Recalled], offset: int,
              limit: int, min_score: float | None, budget: int | None) -> list[Recalled]:
        """Of the ranking's first memories (`found`), the page recall gives: reordered by
        the reranker, if any, and cut to its place; then those scoring `min_score` or
        more whose texts fit the `budget`, best first."""
        if reranker is not None:
            found = _reranked(reranker, query, found)[offset : offset + limit]
        kept, left = [], _MAX_ID if budget is None else budget
        for result in found:
            if (min_score is not None and result["score"] < min_score) \
                    or len(result["text"]) > left:
                continue
            left -= len(result["text"])
            kept.append(result)
        return kept

    def counted(self, scope: Scope, conditions: list[_Condition] | None,
                prefix: str | None, valid_at: str | None) -> int:
        """MemoryStore.count: the live memories of the scope valid at `valid_at`
        (_check_valid_at's), those the filter admits or those keyed under the prefix."""
        key, time = _ScopeKey(scope.user, scope.task), self._store._time
        with self._store._snapshot({scope.user}) as db:
            if prefix is not None:
                return len(self.keyed(db, key, prefix, None, None, conditions, valid_at))
            if conditions is not None:
                return self.count(db, key, conditions, valid_at)
            (stored,) = db.execute(_SQL_COUNT, key).fetchone()
            now, valid = time.expiry_instant(db, key), time.valid_instant(db, key, valid_at)
            if valid is not None:
                (unseen,) = db.execute(_SQL_UNSEEN_COUNT, (*key, now or "", *key, valid, *key,
                                                           valid)).fetchone()
                return int(stored) - int(unseen)
            if now is None:
                return int(stored)
            (expired,) = db.execute(_SQL_EXPIRED_COUNT, (*key, now)).fetchone()
            return int(stored) - int(expired)

    def listed_by_key(self, scope: Scope, prefix: str, since: str | None, most: int | None,
                      conditions: list[_Condition] | None, as_of: str | None,
                      valid_at: str | None) -> list[Memory]:
        """MemoryStore.memories by key_prefix: the keyed memories in key order."""
        if as_of is not None:
            return self._store._time.keyed_then(scope, prefix, since, most, conditions, as_of,
                                                valid_at)
        with self._store._snapshot({scope.user}) as db:
            return [row.memory() for row in self.keyed(
                db, _ScopeKey(scope.user, scope.task), prefix, since, most, conditions,
                valid_at)]

    def listed(self, scope: Scope, page: _Page, as_of: str | None, valid_at: str | None
               ) -> list[Memory]:
        """MemoryStore.memories: the page of the scope's live memories (at `as_of`), valid
        at `valid_at` (_check_valid_at's)."""
        if as_of is not None:
            return self._store._time.page_then(scope, page, as_of, valid_at)
        with self._store._snapshot({scope.user}) as db:
            return self.page(db, _ScopeKey(scope.user, scope.task), page, valid_at)


class _Lifecycle(_Part):
    """How memories end: forgotten (by id, key, filter, source or conversation), expired
    and purged, or erased with their user; what was deleted then scrubbed from the file's
    bytes, or the whole file compacted."""

    def forget(self, scope: Scope, select: str, arguments: tuple[Any, ...],
               first: bool = False, expected: int | None = None,
               receipt: _Receipt | None = None) -> int:
        """Delete the live memories the statement selects (`first`: the first of them,
        with the others of its owner, the earlier holders of a key); how many."""
        store, key = self._store, _ScopeKey(scope.user, scope.task)
        with store._writing({scope.user}) as db:
            done, result = _Receipt.done_in(receipt, db)
            if done:
                return int(result)
            now = store._time.expiry_instant(db, key)
            with db.batch():
                expired, found = _ask_expired(db, key, now), db.ask(select, arguments)
            gone = expired()
            rows = [row for row in found() if row[0] not in gone]
            if first:
                rows = [row for row in rows if row[1] == rows[0][1]]
            if rows:
                _MemoryRow(*rows[0]).expect_version(expected)
            deleted = store._writes.delete(db, key, rows, last=True)
            _Receipt.record_in(receipt, db, deleted)
        self.scrub()
        _log.info("forgot %d memories of user %s, ids %s", deleted, scope.user,
                  [row[0] for row in rows])
        return deleted

    def forget_where(self, scope: Scope, conditions: list[_Condition],
                     receipt: _Receipt | None) -> int:
        """Delete the live memories of the scope that the filter admits; how many."""
        store, key = self._store, _ScopeKey(scope.user, scope.task)
        with store._writing({scope.user}) as db:
            done, result = _Receipt.done_in(receipt, db)
            if done:
                return int(result)
            expired = _expired_of(db, key, store._time.expiry_instant(db, key))
            rows = store._planner.visible_where(db, key, conditions, expired)
            deleted = store._writes.delete(db, key, rows)
            _Receipt.record_in(receipt, db, deleted)
        self.scrub()
        _log.info("forgot %d memories of user %s by a filter", deleted, scope.user)
        return deleted

    def renew(self, scope: Scope, ids: list[int], seconds: float | None) -> int:
        """Give the live memories `ids` of the scope a new expiry; how many it renewed."""
        store, key = self._store, _ScopeKey(scope.user, scope.task)
        with store._writing({scope.user}) as db:
            now = store._time.expiry_instant(db, key)
            until = None if seconds is None else _expiry(store._writes.reading(), seconds)
            renewed = int(db.execute(_SQL_RENEW, (until, *key, json.dumps(ids), now)).rowcount)
        _log.info("renewed %d of %d memories of user %s", renewed, len(ids), scope.user)
        return renewed

    def purge_expired(self) -> int:
        """Delete every memory no longer live, and the expired receipts; how many."""
        store = self._store
        store._writable()
        now = store._time.read_instant()
        if now is None:
            raise MemoryInputError("the clock's reading has no UTC offset, so whether a memory"
                                   " has expired is unknown")
        with store._writing(None) as db:
            purged = store._writes.purge_expired(db, now)
            for (user,) in db.execute(_SQL_EXPIRED_RECEIPT_USERS, (now,)).fetchall():
                db.execute(_SQL_PURGE_RECEIPTS, (user, now))
        self.scrub()
        _log.info("purged %d expired memories", purged)
        return purged

    def erase_user(self, user: str) -> int:
        """Delete every row the user owns, in every table; how many memories."""
        with self._store._writing({user}) as db:
            db.execute(_SQL_ERASE_POSTINGS, (user,))
            _erase_vectors(db, user)
            db.execute(_SQL_ERASE_FIELDS, (user,))
            db.execute(_SQL_ERASE_COUNTS, (user,))
            db.execute(_SQL_ERASE_RECEIPTS, (user,))
            db.execute(_SQL_ERASE_HISTORY, (user,))
            erased = db.execute(_SQL_ERASE, (user,)).rowcount
        self.scrub()
        _log.info("erased %d memories of user %s", erased, user)
        return int(erased)

    def scrub(self) -> None:
        with self._store._reading() as db:
            db.scrub()


class _Transfer(_Part):
    """Export: a user's memories as records, their versions and vectors included (import
    reads them back through the write path)."""

    def export_user(self, user: str) -> list[Record]:
        """MemoryStore.export_user: every memory the user still stores, oldest first."""
        with self._store._snapshot({user}) as db:
            rows = db.execute(_SQL_OWNED, (user,)).fetchall()
            given = [row[0] for row in rows if row[-1] == _GIVEN_EMBED]
            vectors = dict(db.execute(_SQL_OWNED_VECTORS, (user, json.dumps(given)))
                           ) if given else {}
            past = db.execute(_SQL_OWNED_HISTORY, (user,)).fetchall() if db.has_history else []
        history: dict[int, list[_Version]] = collections.defaultdict(list)
        for version in map(_Version.read, past):
            history[version.head_id].append(version)
        records = []
        for *columns, embed in rows:
            row = _MemoryRow(*columns)
            record = Record(id=row.id, user=user, task=row.task_id,
                            level=_level_of(row.task_id), text=row.text, source=row.source,
                            created_at=row.created_at, expires_at=row.expires_at)
            record.update(cast(Record, row.record()))
            record.update(cast(Record, row.window()))
            if row.key is not None and _PAST_KEY in row.key:
                record["past_holder"] = True
            record.update(cast(Record, self._embedding(embed, vectors.get(row.id))))
            if row.id in history:
                record["version"] = row.current_version
                record["history"] = [
                    {"id": kept.row.id, "text": kept.row.text, "source": kept.row.source,
                     "created_at": kept.row.created_at, "expires_at": kept.row.expires_at,
                     "superseded_at": kept.superseded_at, **kept.row.record(),
                     **kept.row.window(),
                     "version": kept.row.current_version,
                     **self._embedding(kept.embed, kept.vector)}
                    for kept in history[row.id]]
            records.append(record)
        return records

    def _embedding(self, embed: str | None, vector: bytes | None) -> dict[str, Any]:
        """What a record says of a memory's vectors: those its caller gave, or what its
        embedder embedded other than its text; nothing for its text."""
        if embed == _GIVEN_EMBED:
            return {"vectors": self._unpacked(vector)}
        if embed is not None:
            return {"embed": False if embed == "false" else json.loads(embed)}
        return {}

    def _unpacked(self, blob: bytes | None) -> list[list[float]]:
        """A memory's vectors as lists of numbers (none where it holds none)."""
        embedder = self._store.embedder
        if blob is None or embedder is None:
            return []
        numbers = array.array("f", blob)
        if sys.byteorder == "big":
            numbers.byteswap()
        width = embedder.dimensions
        return [list(numbers[start:start + width]) for start in range(0, len(numbers), width)]


# -- the store: its verbs --------------------------------------------------------------

class MemoryStore:
    """Memories of many users in one SQLite file or one PostgreSQL database (a
    postgresql:// URL), each operation confined to a scope.

    One store may be shared by threads; processes each open their own on the same file.
    `read_only` opens an existing store without writing to it. `durable=False` trades the
    last commits before a power loss (never before a process crash) for faster writes.
    `create=False` refuses a path or database that holds no store yet, instead of making
    one (a mistyped name then fails rather than starting an empty store). Each method
    checks its arguments and hands the work to one part: _Writes, _Planner, _Time,
    _Lifecycle, _Transfer, _Recording (docs/architecture.md); docs/api.md says each call
    in full.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        clock: Callable[[], str] = system_clock,
        *,
        read_only: bool = False,
        durable: bool = True,
        matching: Matching | None = None,
        create: bool = True,
        statement_timeout: float | None = None,
        pool_size: int | None = None,
        pool_timeout: float | None = None,
        rank: Rank | None = None,
        context: bool | None = None,
        embedder: Embedder | None = None,
        max_text: int = MAX_TEXT,
        receipts_ttl: float = 86_400,
        history: bool | None = None,
        reranker: Reranker | None = None,
    ) -> None:
        self.path = _check_path(path)
        keep_history = None if history is None else _check_flag("history", history)
        #: How long a receipt of an operation (operation=) is kept, in seconds.
        self.receipts_ttl = _check_seconds("receipts_ttl", receipts_ttl)
        #: The longest text (in characters) this store takes.
        self.max_text = _check_within("max_text", max_text, MAX_TEXT, _LONGEST_TEXT)
        #: What turns texts into vectors for recall by meaning (None: words alone).
        self.embedder = None if embedder is None else _check_embedder(embedder)
        #: What reorders each recall's best RERANK_DEPTH memories (None: the rank's order).
        self.reranker = None if reranker is None else _check_reranker(reranker)
        #: The rank recall uses when a call names none: "shared" (the literal rule's) or
        #: "idf", the better one for most text.
        self.rank: Rank = "shared" if rank is None else _check_choice("rank", rank, RANKS)
        if self.rank == "meaning" and self.embedder is None:
            raise MemoryInputError("rank='meaning' needs an embedder")
        #: Whether recall scores a memory with its conversation's when a call says not.
        self.context = False if context is None else _check_flag("context", context)
        engine = _engine_for(self.path)
        given = _engine_options(engine, statement_timeout=statement_timeout,
                                pool_size=pool_size, pool_timeout=pool_timeout)
        if matching is not None:
            _check_matching(matching)
        self.clock = _check_clock(clock)
        # Reads need the time (to tell what has expired) but must not take a tick.
        self._clock_for_reads: Callable[[], str] = getattr(clock, "now", clock)
        self.read_only, self.durable = bool(read_only), bool(durable)
        self._parts()
        self._db: _Engine | None = self._recording.connect(engine, matching, bool(create),
                                                           given)
        _OPEN_STORES.add(self)
        try:
            self._recording.take(keep_history)
        except BaseException:
            self.close()
            raise

    def _parts(self) -> None:
        """The parts that do the store's work, and what they share: the calls in flight,
        and the rule the file records (read at open)."""
        self._writes, self._planner = _Writes(self), _Planner(self)
        self._time, self._lifecycle = _Time(self), _Lifecycle(self)
        self._recording, self._transfer = _Recording(self), _Transfer(self)
        self._recorded = "exact"  # the rule as the file records it, with its version
        self._rule = _RULES["exact"]
        self._index_from = 0  # the file's: from how many memories an owner is indexed
        self._embedder_at_open: str | None = None  # what the file recorded when opened
        self._file: tuple[int, int] | None = None
        self._lock = threading.RLock()
        # close() waits for the calls in flight (but those of its own thread, which would
        # wait for it), so a call another thread started ends as it would have.
        self._idle = threading.Condition(self._lock)
        self._calls = 0
        self._own = threading.local()
        self._pid = os.getpid()

    # -- the object ----------------------------------------------------------------

    @property
    def matching(self) -> Matching:
        """The matching rule the file's word index serves (its version aside)."""
        return self._rule.matching

    @property
    def db(self) -> Any:
        """The open engine, which tests trace (set_trace_callback) and, on SQLite, where
        the engine is its own session, run statements on."""
        with self._lock:
            if self._db is None:
                raise StoreError("MemoryStore is closed")
            if self._pid != os.getpid():
                raise StoreError(f"this store was opened before this process forked; {_FORKED}")
            return self._db

    def close(self) -> None:
        """Close the store once the calls other threads are running have ended; a call
        after it raises StoreError. Closing again does nothing."""
        with self._lock:
            engine, self._db = self._db, None
            _OPEN_STORES.discard(self)
            if engine is not None and self._pid != os.getpid():
                _INHERITED.append(engine)
                return
            self._idle.wait_for(lambda: self._calls <= getattr(self._own, "calls", 0))
            if engine is not None:
                engine.close()

    def __del__(self) -> None:
        # A store dropped open is ended here, in the thread that dropped it: left to its
        # pool's own finalizer, which may run in one of the pool's threads, it fails there
        # ("cannot join current thread") and prints a traceback.
        if getattr(self, "_db", None) is not None and self._pid == os.getpid():
            warnings.warn("a MemoryStore was dropped without close()", ResourceWarning,
                          source=self, stacklevel=2)
            with contextlib.suppress(Exception):
                self.close()

    def __enter__(self) -> MemoryStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @contextlib.contextmanager
    def _reading(self) -> Iterator[_Session]:
        """The session one call runs on (SQLite's connection, one call at a time, or a
        pooled PostgreSQL connection); close() waits for it to end."""
        with self._lock:
            engine = self.db
            self._calls += 1
        own = self._own
        own.calls = getattr(own, "calls", 0) + 1
        try:
            with engine.session() as db:
                yield db
        finally:
            own.calls -= 1
            with self._lock:
                self._calls -= 1
                self._idle.notify_all()

    @contextlib.contextmanager
    def _writing(self, users: set[str] | None) -> Iterator[_Session]:
        """A write transaction for `users` (None: every user, an operator's call)."""
        self._writable()
        with self._reading() as db, _transaction(db, write=True):
            self._recording.adopt_rule(db, db.confine(users, write=True))
            yield db

    @contextlib.contextmanager
    def _snapshot(self, users: set[str] | None) -> Iterator[_Session]:
        """A read transaction for `users`: one consistent view, under the current rule."""
        with self._reading() as db, _transaction(db, write=False):
            self._recording.adopt_rule(db, db.confine(users, write=False))
            yield db

    def _receipt(self, scope: Scope, operation: str | tuple[str, str] | None, call: str,
                 *arguments: Any) -> _Receipt | None:
        """The receipt a call under `operation` reads and records (None without one)."""
        return self._time.receipt(scope, operation, call, *arguments)

    def _writable(self) -> None:
        if self.read_only:
            raise StoreError("the store was opened with read_only=True and does not write;"
                             " open it without read_only to change it")

    # -- memories ------------------------------------------------------------------

    def remember(self, scope: Scope, level: Level, text: str, source: str, *,
                 ttl: float | None = None, dedupe: bool = False, key: str | None = None,
                 metadata: dict[str, Any] | None = None,
                 embed: bool | Sequence[str] = True, if_version: int | None = None,
                 operation: str | tuple[str, str] | None = None,
                 vectors: Sequence[Sequence[float]] | None = None,
                 valid_from: str | None = None, valid_to: str | None = None) -> int:
        """Keep `text` at `level` for the scope's user; return its new id. `ttl`: live for
        that many seconds. `dedupe`: a live memory of the same owner and text is kept
        instead. `key` names it within its owner, replacing the memory held there (at its
        next version; `if_version` compares first). `metadata`, a JSON object, for `where`
        filters; `embed` what is embedded (or `vectors`, its own). `valid_from` and
        `valid_to`: when what it says began and stopped holding (ISO times with a UTC
        offset). With `operation`, done at most once. docs/api.md says each in full."""
        row = _new_row(scope, level, text, source, ttl, key=key, metadata=metadata,
                       embed=embed, if_version=if_version, vectors=vectors,
                       valid_from=valid_from, valid_to=valid_to, max_text=self.max_text)
        receipt = self._receipt(scope, operation, "remember", _given(row), dedupe)
        (memory_id,) = self._writes.insert([row], dedupe=dedupe, receipt=receipt, one=True)
        return memory_id

    def remember_many(self, items: Iterable[tuple[Any, ...] | dict[str, Any]], *,
                      dedupe: bool = False,
                      operation: str | tuple[str, str] | None = None) -> list[int]:
        """Keep many items in one transaction, all or none: each a tuple (scope, level,
        text, source[, ttl[, key[, metadata[, embed]]]]) or a dict of remember's
        arguments. With `dedupe`, as remember's, for every item: an item repeating an
        earlier one of the batch gets that one's id. Two items giving one owner the same
        key are refused. With `operation`, at most once (see remember), every item of
        one scope."""
        if operation is not None:
            items = list(items) if isinstance(items, Iterable) else items
        rows = _each_valid(items, lambda item: _item_row(item, self.max_text), "item")
        receipt = None if operation is None else self._receipt(
            _one_scope(cast(list[Any], items)), operation, "remember_many",
            [_given(row) for row in rows], dedupe)
        return self._writes.insert(rows, "item", dedupe, receipt)

    def import_memories(self, records: Iterable[Record | dict[str, Any]], *,
                        dedupe: bool = False) -> list[int]:
        """Keep records as export_user writes them, each with its own created_at and
        expires_at, in one transaction; all or none. Their ids are not kept: the store
        gives new ones. A record already expired is kept, and is not live. With `dedupe`,
        as remember_many's. A keyed record whose owner holds its key live, or two records
        giving one owner the same key, refuse the whole import."""
        return self._writes.insert(_each_valid(records, lambda record: _record_row(
            record, self.max_text), "record"), "record", dedupe)

    @_read_again_if_cut_off
    def recall(self, scope: Scope, query: str, limit: int = 3, *, rank: Rank | None = None,
               min_score: float | None = None, budget: int | None = None,
               explain: bool = False, context: bool | None = None,
               where: dict[str, Any] | None = None, offset: int = 0,
               vector: Sequence[float] | None = None,
               as_of: str | None = None, rerank: bool | None = None,
               approximate: bool = False, valid_at: str | None = None) -> list[Recalled]:
        """The memories visible in the scope that match `query` best, at most `limit`,
        best first (a tie: the newer first), scored by `rank` (None: the store's):
        "shared", "idf", "meaning" or "hybrid". `min_score` and `budget` cut the results;
        `explain` says why each scored; `context` lends a memory its conversation's
        scores; `where` filters by metadata; `offset` pages; `vector` is the query's
        meaning; `as_of` recalls as the store read then; `rerank` reorders by the store's
        reranker; `approximate` ranks a large scope by an HNSW index; `valid_at` ranks
        the memories valid then (None: now; "any": whenever). docs/api.md says each in
        full."""
        scope = _check_scope(scope)
        _check_limit(limit)
        conditions = _check_where(where)
        offset = _check_within("offset", offset, 0, _MAX_OFFSET)
        ranked = self.rank if rank is None else _check_choice("rank", rank, RANKS)
        in_context = self.context if context is None else _check_flag("context", context)
        _check_text("query", query, MAX_QUERY, blank=True)
        reranker = self._planner.reranker_for(rerank, query)
        _check_approximate(approximate, ranked, as_of,
                           self._db is not None and self._db.serves_vectors)
        min_score, budget = _check_cuts(min_score, budget, reranker is not None)
        _check_flag("explain", explain)
        given = None if vector is None else _caller_vectors([vector], "vector")
        if given is not None and ranked not in ("meaning", "hybrid"):
            raise MemoryInputError("vector= is the query's meaning: it ranks by 'meaning' or"
                                   " 'hybrid'")
        meant = self._planner.query_vector(ranked, query) if given is None else given[0]
        # The ranking's place to begin and to stop: a reranker reorders its first ones.
        start, stop = (offset, offset + limit) if reranker is None else (0, RERANK_DEPTH)
        found = self._planner.recall(_Asked(scope, query, ranked, in_context, explain, where,
                                            conditions, meant, given, approximate, as_of,
                                            _check_valid_at(valid_at), start, stop))
        return self._planner.paged(reranker, query, found, offset, limit, min_score, budget)

    @_read_again_if_cut_off
    def count(self, scope: Scope, *, where: dict[str, Any] | None = None,
              key_prefix: str | None = None, valid_at: str | None = None) -> int:
        """How many live memories are visible in the scope and valid now: the stored count
        less the expired ones not yet purged and those whose windows leave now out, each
        found through its index. With `where`, those whose metadata the filter admits (see
        recall). With `key_prefix`, the keys that begin with it (see memories). With
        `valid_at`, those valid then ("any": whenever)."""
        scope = _check_scope(scope)
        conditions = _check_where(where)
        prefix = None if key_prefix is None else _check_text("key_prefix", key_prefix,
                                                             _MAX_KEY, blank=True)
        return self._planner.counted(scope, conditions, prefix, _check_valid_at(valid_at))

    def reindex(self, matching: Matching | None = None,
                progress: Callable[[int, int], None] | None = None, *,
                embedder: Embedder | None = None) -> None:
        """Rebuild the word index under the `matching` rule, user by user, in one
        transaction; `progress(users done, users)` is called after each user. With
        `embedder`, first give every memory a vector from it, EMBED_BATCH at a time
        outside any transaction, then replace every vector and record the embedder in
        one; until it commits, the old vectors serve (docs/api.md)."""
        if matching is None and embedder is None:
            raise MemoryInputError("reindex needs matching, embedder or both")
        if embedder is not None:
            self._writes.reembed(_check_embedder(embedder), progress)
        if matching is not None:
            self._writes.reindex_words(matching, progress)

    # -- seeing and forgetting -------------------------------------------------------

    @_read_again_if_cut_off
    def get(self, scope: Scope, memory_id: int | None = None, *,
            key: str | None = None, as_of: str | None = None,
            valid_at: str | None = None) -> Memory | None:
        """The memory `memory_id` (or the one holding `key`: the task's own, else the user
        level's) if the scope can see it, it is live and valid now (the keys of
        memories()); None for any other id or key, whatever the reason: all answer alike.
        With `as_of` (an ISO time with a UTC offset), as the scope saw it then (see
        history); with `valid_at`, valid then ("any": whenever)."""
        scope = _check_scope(scope)
        # The key's earlier holders too, for a time they held at.
        select, arguments = _by_id_or_key(scope, memory_id, key, earlier=True)
        return self._time.get(scope, select, arguments, memory_id is not None, as_of,
                              _check_valid_at(valid_at))

    @_read_again_if_cut_off
    def history(self, scope: Scope, memory_id: int | None = None, *,
                key: str | None = None) -> list[Memory]:
        """The versions of the live memory `memory_id` (the id of any of its versions) or
        of the one holding `key` (as get finds it), oldest first: those it superseded,
        each with `superseded_at`, then itself (superseded_at None); [] for any id or key
        the scope cannot see. Versions are kept where the store keeps history, until the
        memory goes (docs/api.md)."""
        scope = _check_scope(scope)
        select, arguments = _by_id_or_key(scope, memory_id, key)
        return self._time.history(scope, select, arguments, memory_id is not None)

    @_read_again_if_cut_off
    def operation(self, scope: Scope, operation: str) -> dict[str, Any] | None:
        """The receipt of the operation done in the scope under this id, while it is kept:
        {"operation", "fingerprint" (the call's: its caller's, or the store's digest of
        its arguments), "result" (what the call returned), "created_at", "expires_at"};
        None for any other id, another scope's included."""
        scope = _check_scope(scope)
        return self._time.operation(scope, _check_operation(operation))

    @_read_again_if_cut_off
    def memories(self, scope: Scope, *, after: int | None = None, limit: int | None = None,
                 conversation: str | None = None, before: int | None = None,
                 newest_first: bool = False, where: dict[str, Any] | None = None,
                 key_prefix: str | None = None, after_key: str | None = None,
                 as_of: str | None = None, valid_at: str | None = None) -> list[Memory]:
        """Every live memory visible in the scope and valid now, oldest first, with its
        expires_at; or a page of them: ids above `after`, at most `limit`;
        `conversation`'s alone; `newest_first`, paging down with `before`; those `where`
        admits. With `key_prefix` (or `after_key`), the keyed memories in key order, paged
        by `after_key` and `limit`. With `as_of`, as the scope saw them then; with
        `valid_at`, those valid then ("any": whenever). docs/api.md says each."""
        scope = _check_scope(scope)
        valid = _check_valid_at(valid_at)
        if key_prefix is not None or after_key is not None:
            if (after, before, conversation, newest_first) != (None, None, None, False):
                raise MemoryInputError("a listing by key_prefix pages with after_key and limit,"
                                       " not after, before, conversation or newest_first")
            prefix = _check_text("key_prefix", "" if key_prefix is None else key_prefix,
                                 _MAX_KEY, blank=True)
            most = None if limit is None else _check_id(limit, "limit")
            conditions = _check_where(where)
            since = None if after_key is None else _check_key(after_key)
            return self._planner.listed_by_key(scope, prefix, since, most, conditions, as_of,
                                               valid)
        page = _Page(0 if after is None else _check_id(after, "after", least=0),
                     _MAX_ID if before is None else _check_id(before, "before"),
                     None if limit is None else _check_id(limit, "limit"),
                     None if conversation is None else _check_conversation(conversation),
                     _check_flag("newest_first", newest_first), _check_where(where),
                     after is not None or limit is not None,
                     before is not None)
        return self._planner.listed(scope, page, as_of, valid)

    def forget(self, scope: Scope, memory_id: int | None = None, *,
               key: str | None = None, if_version: int | None = None,
               operation: str | tuple[str, str] | None = None) -> bool:
        """Delete the memory (or the one holding `key`, as get finds it, with the key's
        earlier holders of its owner) if the scope can see it. False for any id or key it
        cannot see, whether unknown, another task's, another user's or expired: all answer
        alike. With `if_version`, only where the memory is at that version: else
        VersionConflict, and nothing is deleted."""
        scope = _check_scope(scope)
        # The key's earlier holders go with it.
        select, arguments = _by_id_or_key(scope, memory_id, key, earlier=True)
        expected = _check_if_version(if_version)
        receipt = self._receipt(scope, operation, "forget", memory_id, key, expected)
        return bool(self._lifecycle.forget(scope, select, arguments, first=True,
                                           expected=expected, receipt=receipt))

    def forget_where(self, scope: Scope, where: dict[str, Any], *,
                     operation: str | tuple[str, str] | None = None) -> int:
        """Delete every live memory visible in the scope whose metadata the filter admits
        (as recall's `where`), in one transaction; how many. With `operation`, at most
        once (see remember)."""
        scope = _check_scope(scope)
        conditions = _check_where(where)
        if conditions is None:
            raise MemoryInputError("forget_where needs a filter (a dict of paths)")
        receipt = self._receipt(scope, operation, "forget_where", where)
        return self._lifecycle.forget_where(scope, conditions, receipt)

    def forget_source(self, scope: Scope, source: str) -> int:
        """Delete every memory visible in the scope that came from `source`."""
        scope = _check_scope(scope)
        arguments = (scope.user, scope.task, _check_text("source", source, MAX_TEXT))
        return self._lifecycle.forget(scope, _SQL_VISIBLE_SOURCE, arguments)

    def forget_conversation(self, scope: Scope, conversation: str) -> int:
        """Delete every memory visible in the scope from one conversation: those whose
        source, up to its last "/", is `conversation` ("chat-42" forgets "chat-42/turn-1"
        and "chat-42/turn-2"; a trailing "/" is the same), in one transaction."""
        scope = _check_scope(scope)
        arguments = (scope.user, scope.task, _check_conversation(conversation), 0, _MAX_ID)
        return self._lifecycle.forget(scope, _SQL_VISIBLE_CONVERSATION, arguments)

    def revise(self, scope: Scope, memory_id: int, text: str, source: str, *,
               ttl: float | None = None, if_version: int | None = None,
               operation: str | tuple[str, str] | None = None,
               metadata: dict[str, Any] | None = None, valid_from: str | None = None,
               valid_to: str | None = None) -> int | None:
        """Correct a memory: in one transaction, forget `memory_id` if the scope can see
        it and remember `text` at its level and task, as its next version, keeping its
        key, metadata, expiry and window's ends (unless `metadata`, `ttl`, `valid_from`
        or `valid_to` is given: `valid_to` ends its validity, the memory kept); the new
        id, or None, nothing changed, for an id the scope cannot see. With `if_version`
        and `operation`, as remember's (docs/api.md)."""
        scope = _check_scope(scope)
        wanted = _check_id(memory_id)
        expected = _check_if_version(if_version)
        # Validated before the transaction; its level (task) is the old memory's.
        checked = _new_row(scope, "user", text, source, ttl, metadata=metadata,
                           valid_from=valid_from, valid_to=valid_to, max_text=self.max_text)
        receipt = self._receipt(scope, operation, "revise", wanted, _given(checked), expected)
        return self._writes.revise(scope, wanted, checked, expected, receipt)

    def rename(self, scope: Scope, key: str, new_key: str, *,
               if_version: int | None = None,
               operation: str | tuple[str, str] | None = None) -> int | None:
        """Move the memory holding `key` (as get finds it) to `new_key` in its owner, in
        one transaction, at its next version and updated now; its id, or None, with
        nothing changed, where the scope sees no memory under `key`. With `if_version`,
        only where it is at that version. VersionConflict, and nothing changed, where the
        owner holds `new_key` live (an expired holder is forgotten). With `operation`, at
        most once (see remember)."""
        scope = _check_scope(scope)
        old, new = _check_key(_required("key", key)), _check_key(_required("new_key", new_key))
        expected = _check_if_version(if_version)
        receipt = self._receipt(scope, operation, "rename", old, new, expected)
        return self._writes.rename(scope, cast(str, old), cast(str, new), expected, receipt)

    def renew(self, scope: Scope, memory_ids: Sequence[int], ttl: float | None) -> int:
        """Make the live memories `memory_ids` that the scope sees stop being live `ttl`
        seconds from now (None: never), in one transaction; how many it renewed. An id the
        scope cannot see, or no longer live, is left as it is and not counted. Their ids,
        texts, keys and updated_at stay as they are."""
        scope = _check_scope(scope)
        if isinstance(memory_ids, (str, bytes)) or not isinstance(memory_ids, Sequence):
            raise MemoryInputError("memory_ids must be a sequence of ints, got"
                                   f" {_described(memory_ids)}")
        ids = sorted({_check_id(memory_id) for memory_id in memory_ids})
        return self._lifecycle.renew(scope, ids, _check_ttl(ttl))

    def purge_expired(self) -> int:
        """Delete every memory that is no longer live, with its postings and counts; how
        many. Their text leaves the file's bytes as a forgotten memory's does."""
        return self._lifecycle.purge_expired()

    def erase_user(self, user: str) -> int:
        """Delete every memory the user owns, at every level and in every task."""
        return self._lifecycle.erase_user(_check_identifier("user", user))

    @_read_again_if_cut_off
    def export_user(self, user: str) -> list[Record]:
        """Every memory the user still stores, oldest first, expired ones not yet purged
        included, as records `import_memories` reads (keys RECORD_KEYS; task None at user
        level, expires_at None for never)."""
        return self._transfer.export_user(_check_identifier("user", user))

    def compact(self) -> None:
        """Rebuild the file so that no byte of what was deleted before remains in it or in
        its -wal. It rewrites the whole file (every user's memories) under the write lock.
        On PostgreSQL: VACUUM FULL of the store's tables (see README for what it leaves)."""
        self._writable()
        with self._reading() as db:
            db.compact()

    # -- operating -------------------------------------------------------------------

    @_read_again_if_cut_off
    def stats(self) -> dict[str, Any]:
        """Counts by level and users, schema version and bytes on disk (PostgreSQL: of the
        store's tables and indexes), the matching rule and its version (outdated where
        `reindex` would move it to a newer one), the ranks recall offers (with the
        store's default), the embedder the file records, how many memories have no
        vector from it, and whether it keeps history; never text."""
        return self._recording.stats()

    def check(self) -> dict[str, Any]:
        """The engine's integrity check of the whole store, and its schema version
        (SQLite's of the file; PostgreSQL has none and says where to look)."""
        with self._reading() as db:
            return db.check()

    def backup(self, destination: str | os.PathLike[str]) -> None:
        """Copy the store, as one consistent snapshot, to a new file readable by its owner
        alone; other processes may go on writing meanwhile."""
        target_path = _check_path(destination)
        with self._reading() as db:
            db.backup(target_path)



# -- the store from asyncio --------------------------------------------------------------

_Awaited = Callable[Concatenate["AsyncMemoryStore", _Arguments], Coroutine[Any, Any, _Result]]


def _in_a_thread(call: Callable[Concatenate[MemoryStore, _Arguments], _Result]
                 ) -> _Awaited[_Arguments, _Result]:
    """MemoryStore's `call` as a coroutine that runs it in a worker thread."""
    @functools.wraps(call)
    async def run(store: AsyncMemoryStore, /, *args: _Arguments.args,
                  **kwargs: _Arguments.kwargs) -> _Result:
        return await store._run(functools.partial(call, store.store, *args, **kwargs))
    return run


def _taking_the_arguments_of(source: Callable[Concatenate[Any, _Arguments], None]
                             ) -> Callable[[Callable[..., None]],
                                           Callable[Concatenate[Any, _Arguments], None]]:
    """An __init__ that takes `source`'s arguments: a type checker checks a call's against
    them, and inspect.signature (help()) gives them."""
    def taking(init: Callable[..., None]) -> Callable[Concatenate[Any, _Arguments], None]:
        return functools.wraps(source, assigned=())(init)
    return taking


class AsyncMemoryStore:
    """MemoryStore's calls as coroutines, for asyncio: each runs in a worker thread over
    one MemoryStore (on PostgreSQL the pool runs them side by side; on SQLite the store's
    lock takes them one at a time, as from threads). Takes MemoryStore's arguments; the
    store opens in a thread, in `async with AsyncMemoryStore(path) as store:` or at
    `await store.open()` (then `await store.close()`). It belongs to no event loop: tasks
    of several loops, in several threads, may share it.

    A call whose task is cancelled while it runs still runs to its end in its thread: a
    write commits or rolls back as a whole, and the cancelled caller is not told which.
    """

    @_taking_the_arguments_of(MemoryStore.__init__)
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._opening = functools.partial(MemoryStore, *args, **kwargs)
        self._store: MemoryStore | None = None
        # Thread primitives, not asyncio's: open, the calls and close may come from any
        # loop. One store is opened whoever opens it, and close() waits for the calls
        # handed to threads, those of cancelled tasks too.
        self._once = threading.Lock()
        self._idle = threading.Condition()
        self._calls = 0

    @property
    def store(self) -> MemoryStore:
        """The MemoryStore every call runs on."""
        if self._store is None:
            raise StoreError("AsyncMemoryStore is not open: use `async with` or"
                             " `await store.open()`")
        return self._store

    @classmethod
    def _over(cls, store: MemoryStore) -> AsyncMemoryStore:
        """Coroutines over a store already open (`memory mcp` opens its store before it
        speaks the protocol, so that a failure to open is one line on stderr)."""
        served = cls(store.path)
        served._store = store
        return served

    def _open_once(self) -> None:
        with self._once:
            if self._store is None:
                self._store = self._opening()

    async def open(self) -> AsyncMemoryStore:
        """Open the store, in a worker thread; opening again, or from several tasks at
        once, opens one store. An open whose task is cancelled goes on in its thread, and
        close() closes the store it opened."""
        await asyncio.to_thread(self._open_once)
        return self

    async def _run(self, call: Callable[[], _Result]) -> _Result:
        def run() -> _Result:
            with self._idle:
                self._calls += 1
            try:
                return call()
            finally:
                with self._idle:
                    self._calls -= 1
                    self._idle.notify_all()
        # Shielded: a thread that has the call goes on if the caller is cancelled.
        return await asyncio.shield(asyncio.to_thread(run))

    def _close_once(self) -> None:
        with self._once:
            with self._idle:
                self._idle.wait_for(lambda: self._calls == 0)
            if self._store is not None:
                self._store.close()

    async def close(self) -> None:
        """Wait for the calls still running (those of cancelled tasks too), then close the
        store, from any event loop; closing again does nothing."""
        await asyncio.to_thread(self._close_once)

    async def __aenter__(self) -> AsyncMemoryStore:
        return await self.open()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    remember = _in_a_thread(MemoryStore.remember)
    remember_many = _in_a_thread(MemoryStore.remember_many)
    import_memories = _in_a_thread(MemoryStore.import_memories)
    recall = _in_a_thread(MemoryStore.recall)
    count = _in_a_thread(MemoryStore.count)
    get = _in_a_thread(MemoryStore.get)
    memories = _in_a_thread(MemoryStore.memories)
    history = _in_a_thread(MemoryStore.history)
    forget = _in_a_thread(MemoryStore.forget)
    forget_where = _in_a_thread(MemoryStore.forget_where)
    forget_source = _in_a_thread(MemoryStore.forget_source)
    forget_conversation = _in_a_thread(MemoryStore.forget_conversation)
    revise = _in_a_thread(MemoryStore.revise)
    rename = _in_a_thread(MemoryStore.rename)
    operation = _in_a_thread(MemoryStore.operation)
    renew = _in_a_thread(MemoryStore.renew)
    purge_expired = _in_a_thread(MemoryStore.purge_expired)
    erase_user = _in_a_thread(MemoryStore.erase_user)
    export_user = _in_a_thread(MemoryStore.export_user)
    reindex = _in_a_thread(MemoryStore.reindex)
    compact = _in_a_thread(MemoryStore.compact)
    stats = _in_a_thread(MemoryStore.stats)
    check = _in_a_thread(MemoryStore.check)
    backup = _in_a_thread(MemoryStore.backup)


def _best_matching() -> Matching:
    return "stems" if importlib.util.find_spec("snowballstemmer") else "exact"


def _recommended_here() -> _Settings:
    """RECOMMENDED, with the exact rule where the stems extra is not installed."""
    return {**RECOMMENDED, "matching": _best_matching()}


# -- the command line ----------------------------------------------------------------

# Usage errors, like the library's, name the rule and never repeat what was typed.

def _identifier(value: str) -> str:
    if IDENTIFIER.fullmatch(value) is None:
        raise argparse.ArgumentTypeError(
            f"must match {IDENTIFIER.pattern}, got {_described(value)}")
    return value


def _one_of(choices: tuple[str, ...]) -> Callable[[str], str]:
    """argparse's `choices`, without its message that repeats what was typed."""
    def parse(value: str) -> str:
        if value not in choices:
            raise argparse.ArgumentTypeError(
                f"must be one of {', '.join(choices)}, got {_described(value)}")
        return value

    return parse


def _bounded_int(low: int, high: int) -> Callable[[str], int]:
    def parse(value: str) -> int:
        digits = value.removeprefix("-")
        if not digits.isascii() or not digits.isdigit() or len(digits) > 20:
            raise argparse.ArgumentTypeError(f"must be a whole number from {low} to {high},"
                                             f" got {_described(value)}")
        if not low <= int(value) <= high:
            raise argparse.ArgumentTypeError(f"must be from {low} to {high}")
        return int(value)

    return parse


def _json_argument(value: str) -> dict[str, Any]:
    """A JSON object given on the command line (its text never in the error)."""
    try:
        parsed = json.loads(value, object_pairs_hook=_unique_keys)
    except (ValueError, MemoryInputError):
        raise argparse.ArgumentTypeError(f"must be a JSON object, got {_described(value)}"
                                         " that is not JSON (or names a key twice)") from None
    except RecursionError:
        raise argparse.ArgumentTypeError("must be a JSON object, got JSON nested too"
                                         " deeply") from None
    if not isinstance(parsed, dict):
        raise argparse.ArgumentTypeError(f"must be a JSON object, got JSON of type"
                                         f" {type(parsed).__name__}")
    return parsed


def _emit(value: object) -> None:
    print(json.dumps(value, ensure_ascii=False))


def _run_stats(store: MemoryStore, args: argparse.Namespace) -> int:
    print(json.dumps(store.stats(), indent=2))
    return 0


def _run_list(store: MemoryStore, args: argparse.Namespace) -> int:
    for memory in store.memories(Scope(args.user, args.task), after=args.after,
                                 limit=args.limit, conversation=args.conversation,
                                 before=args.before, newest_first=args.newest_first,
                                 where=args.where, key_prefix=args.key_prefix,
                                 after_key=args.after_key, as_of=args.as_of,
                                 valid_at=args.valid_at):
        _emit(memory)
    return 0


def _run_history(store: MemoryStore, args: argparse.Namespace) -> int:
    versions = store.history(Scope(args.user, args.task), args.id, key=args.key)
    if not versions:
        raise StoreError("no memory with that id or key in this scope")
    for version in versions:
        _emit(version)
    return 0


def _run_recall(store: MemoryStore, args: argparse.Namespace) -> int:
    for memory in store.recall(Scope(args.user, args.task), args.query, args.limit,
                               rank=args.rank, budget=args.budget, explain=args.explain,
                               context=args.context, where=args.where, offset=args.offset,
                               as_of=args.as_of, rerank=args.rerank,
                               valid_at=args.valid_at):
        _emit(memory)
    return 0


def _run_export(store: MemoryStore, args: argparse.Namespace) -> int:
    for memory in store.export_user(args.user):
        _emit(memory)
    return 0


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    record = dict(pairs)
    if len(record) != len(pairs):
        raise MemoryInputError("a key appears twice in one object")
    return record


def _json_line(number: int, line: bytes) -> Any:
    """One JSON Lines record, or MemoryInputError naming the line and the problem."""
    try:
        return json.loads(line.decode("utf-8"), object_pairs_hook=_unique_keys)
    except UnicodeDecodeError:
        problem = "not UTF-8"
    except json.JSONDecodeError as exc:
        problem = f"not JSON: {exc.msg}"
    except MemoryInputError as exc:
        problem = str(exc)
    except RecursionError:
        problem = "JSON nested too deeply"
    except ValueError:  # int() refuses numbers of thousands of digits
        problem = "a number too long"
    raise MemoryInputError(f"line {number}: {problem}")


def _json_lines(file: str | None) -> Iterator[tuple[int, Any]]:
    """The JSON value of each line that is not blank, with its number from 1: of FILE,
    or of standard input where FILE is - or none is given and the input is piped."""
    if file is None:  # `memory import DB < records.jsonl`; at a terminal, say what to give
        if sys.stdin is None or sys.stdin.isatty():
            raise MemoryInputError("FILE required: a JSON Lines file, or - (or a pipe) for"
                                   " standard input")
        file = "-"
    if file == "-" and sys.stdin is None:
        raise MemoryInputError("FILE is -, but standard input is closed")
    try:
        opened = open(file, "rb") if file != "-" else contextlib.nullcontext(sys.stdin.buffer)
    except OSError as exc:  # named by its argument: what was typed is never repeated
        raise MemoryInputError(f"cannot read FILE, the file to import:"
                               f" {exc.strerror or type(exc).__name__}") from None
    with opened as source:
        for number, line in enumerate(source, start=1):
            if line.strip():
                yield number, _json_line(number, line)


def _longest_text(args: argparse.Namespace) -> int:
    """The longest text the command's store takes: its --max-text, where it has one."""
    return getattr(args, "max_text", None) or MAX_TEXT


def _load_records(args: argparse.Namespace) -> None:
    """Read and check import's records before the store is opened, so that bad input
    does not even create the file; a bad record is named by its line."""
    if args.format == _SERVER_MEMORY:
        _load_server_memory(args)
        return
    if args.user is not None or args.task is not None:
        raise MemoryInputError("--user and --task are for --from server-memory: records"
                               " name their own user and task")
    numbered = list(_json_lines(args.file))
    args.lines, records = [n for n, _ in numbered], [record for _, record in numbered]
    longest = _longest_text(args)
    try:
        _one_key_each(_each_valid(records, lambda record: _record_row(record, longest),
                                  "record"), "record")
    except MemoryInputError as exc:
        assert exc.position is not None
        failure = _at_lines(exc, args.lines)
        if _server_memory_kind(records[exc.position]) is not None:  # the server's file
            failure = MemoryInputError(f"{failure}; this looks like memory.jsonl of the MCP"
                                       " memory server: add --from server-memory --user U")
        raise failure from None
    args.records = records


_RECORDS_NAMED = re.compile(r"^records? (\d+)(?: and (\d+))?")


def _at_lines(exc: MemoryInputError, lines: list[int]) -> MemoryInputError:
    """The import's error naming the lines of the file, where the library's names the
    records' places in the call (from 0)."""
    def named(found: re.Match[str]) -> str:
        places = [int(place) for place in found.groups() if place is not None]
        return f"line{'s' if len(places) > 1 else ''} " + " and ".join(
            str(lines[place]) for place in places)
    return MemoryInputError(_RECORDS_NAMED.sub(named, str(exc), count=1), exc.position)


# The reference MCP memory server's file (memory.jsonl): a line an entity, {"type":
# "entity", "name", "entityType", "observations": [...]}, or a relation, {"type":
# "relation", "from", "to", "relationType"}. Each observation and each relation becomes
# one memory naming its entity, with the source server-memory:<entity>/<n>: the entity is
# its conversation, so recall with context reads an entity's facts together.
_SERVER_MEMORY = "server-memory"
_SERVER_MEMORY_KEYS = {"entity": {"type", "name", "entityType", "observations"},
                       "relation": {"type", "from", "to", "relationType"}}
_SERVER_MEMORY_NOUNS = {"entity": "an entity", "relation": "a relation"}


def _server_memory_kind(line: Any) -> str | None:
    """"entity" or "relation" for a line of memory.jsonl that is one, else None."""
    kind = line.get("type") if isinstance(line, dict) else None
    return kind if isinstance(kind, str) and kind in _SERVER_MEMORY_KEYS else None


def _server_memory_texts(line: Any, longest: int) -> list[tuple[str, str]]:
    """The (text, entity) of each memory one line of memory.jsonl holds."""
    kind = _server_memory_kind(line)
    if kind is None:
        raise MemoryInputError("not an entity or a relation (an object whose type is"
                               " 'entity' or 'relation')")
    wanted = _SERVER_MEMORY_KEYS[kind]
    if not wanted <= line.keys():
        raise MemoryInputError(f"{_SERVER_MEMORY_NOUNS[kind]} needs"
                               f" {', '.join(sorted(wanted - {'type'}))}")
    named = {key: line[key] for key in wanted - {"type", "observations"}}
    for key, value in named.items():
        _check_text(key, value, MAX_TEXT)
    if kind == "relation":
        return [(f"{named['from']} {named['relationType']} {named['to']}", named["from"])]
    observations = line["observations"]
    if not isinstance(observations, list):
        raise MemoryInputError(f"observations must be a list, got {_described(observations)}")
    return [(f"{named['name']}: {_check_text('an observation', observation, longest)}",
             named["name"]) for observation in observations]


def _load_server_memory(args: argparse.Namespace) -> None:
    """memory.jsonl's entities and relations as memories of --user (at user level, or at
    task level in --task), every line checked before the store is opened."""
    if args.user is None:
        raise MemoryInputError("--from server-memory needs --user: the file names no user")
    scope = Scope(args.user, args.task or _MCP_DEFAULT_TASK)
    level = "user" if args.task is None else "task"
    args.items = []
    longest = _longest_text(args)
    facts: collections.Counter[str] = collections.Counter()  # each entity's, so far
    for number, line in _json_lines(args.file):
        try:
            for text, entity in _server_memory_texts(line, longest):
                facts[entity] += 1
                row = _new_row(scope, level, text,
                               f"{_SERVER_MEMORY}:{entity}/{facts[entity]}", max_text=longest)
                args.items.append((scope, level, row.text, row.source))
        except MemoryInputError as exc:
            raise MemoryInputError(f"line {number}: {exc}") from None


def _load_text(args: argparse.Namespace) -> None:
    """The memory to remember, its text from stdin for `-`, checked whole (scope, level,
    text, source, how far its ttl reaches) before the store is opened: bad input creates
    nothing, as in the library."""
    if args.text == "-":
        if sys.stdin is None:
            raise MemoryInputError("TEXT is -, but standard input is closed")
        try:
            args.text = sys.stdin.buffer.read().decode("utf-8").removesuffix("\n")
        except UnicodeDecodeError:
            raise MemoryInputError("standard input is not UTF-8") from None
    row = _new_row(Scope(args.user, args.task), args.level, args.text, args.source, args.ttl,
                   max_text=_longest_text(args))
    if row.ttl is not None:
        _expiry(system_clock(), row.ttl)


def _run_remember(store: MemoryStore, args: argparse.Namespace) -> int:
    print(store.remember(Scope(args.user, args.task), args.level, args.text, args.source,
                         ttl=args.ttl, key=args.key, metadata=args.metadata,
                         embed=args.embed, if_version=args.if_version,
                         valid_from=args.valid_from, valid_to=args.valid_to))
    return 0


def _run_import(store: MemoryStore, args: argparse.Namespace) -> int:
    if args.format == _SERVER_MEMORY:  # a memory already held is kept: twice is once
        before = store.count(args.items[0][0]) if args.items else 0
        store.remember_many(args.items, dedupe=True)
        added = (store.count(args.items[0][0]) if args.items else 0) - before
        print(f"imported {added} memories ({len(args.items) - added} already held)")
        return 0
    try:
        ids = store.import_memories(args.records)
    except MemoryInputError as exc:
        if exc.position is None:
            raise
        raise _at_lines(exc, args.lines) from None
    print(f"imported {len(ids)} memories")
    return 0


_NOT_IN_SCOPE = "no memory with that id in this scope"
#: The task of `memory mcp` when neither --task nor MEMORY_TASK names one.
_MCP_DEFAULT_TASK = "default"


def _beside(module: str, name: str, extra: str) -> Callable[..., Any]:
    """A command's step that lives in a module beside this one, imported when it runs."""
    def step(*args: Any) -> Any:
        return getattr(_satellite(module, extra), name)(*args)
    return step


def _run_forget_conversation(store: MemoryStore, args: argparse.Namespace) -> int:
    forgotten = store.forget_conversation(Scope(args.user, args.task), args.conversation)
    print(f"forgot {forgotten} memories of the conversation")
    return 0


def _run_forget(store: MemoryStore, args: argparse.Namespace) -> int:
    if not store.forget(Scope(args.user, args.task), args.id, if_version=args.if_version):
        raise StoreError(_NOT_IN_SCOPE)
    print(f"forgot memory {args.id}")
    return 0


def _run_forget_key(store: MemoryStore, args: argparse.Namespace) -> int:
    if not store.forget(Scope(args.user, args.task), key=args.key, if_version=args.if_version):
        raise StoreError("no memory with that key in this scope")
    print("forgot the memory with that key")
    return 0


def _run_rename(store: MemoryStore, args: argparse.Namespace) -> int:
    renamed = store.rename(Scope(args.user, args.task), args.key, args.new_key,
                           if_version=args.if_version)
    if renamed is None:
        raise StoreError("no memory with that key in this scope")
    print(f"renamed the key of memory {renamed}")
    return 0


def _run_forget_where(store: MemoryStore, args: argparse.Namespace) -> int:
    print(f"forgot {store.forget_where(Scope(args.user, args.task), args.where)} memories")
    return 0


def _run_erase_user(store: MemoryStore, args: argparse.Namespace) -> int:
    erased = store.erase_user(args.user)
    print(f"erased {erased} memories of {args.user}")
    return 0


def _run_check(store: MemoryStore, args: argparse.Namespace) -> int:
    report = store.check()
    print(json.dumps(report, indent=2))
    return 0 if report["ok"] else 1


def _run_compact(store: MemoryStore, args: argparse.Namespace) -> int:
    store.compact()
    print("compacted: nothing deleted before remains in the file or its -wal")
    return 0


def _run_revise(store: MemoryStore, args: argparse.Namespace) -> int:
    revised = store.revise(Scope(args.user, args.task), args.id, args.text, args.source,
                           ttl=args.ttl, if_version=args.if_version,
                           valid_from=args.valid_from, valid_to=args.valid_to)
    if revised is None:
        raise StoreError(_NOT_IN_SCOPE)
    print(f"revised memory {args.id} as {revised}")
    return 0


def _run_purge(store: MemoryStore, args: argparse.Namespace) -> int:
    purged = store.purge_expired()
    print(f"purged {purged} expired memories")
    return 0


def _seconds(value: str) -> float:
    try:
        return _check_ttl(float(value)) or 0.0
    except (ValueError, MemoryInputError):
        raise argparse.ArgumentTypeError(
            f"must be a number of seconds above 0, got {_described(value)}") from None


def _run_reindex(store: MemoryStore, args: argparse.Namespace) -> int:
    started = last = time.monotonic()

    def progress(done: int, of: int) -> None:
        nonlocal last
        if time.monotonic() - last >= 1.0 or (done == of and last > started):
            print(f"reindexed {done} of {of}", file=sys.stderr, flush=True)
            last = time.monotonic()

    store.reindex(args.matching, progress, embedder=args.embedder_made)
    done = [] if args.matching is None else [f"matching={args.matching}"]
    if args.embedder_made is not None:
        done.append(f"embedder dimensions={args.embedder_made.dimensions}")
    print(f"reindexed with {', '.join(done)}")
    return 0


def _run_backup(store: MemoryStore, args: argparse.Namespace) -> int:
    store.backup(args.destination)
    print(f"backed up {args.path} to {args.destination}")
    return 0


# How a command opens its store: to read; to write one that must already exist (no
# command but remember, import and mcp may create a store from a mistyped path); or to
# write, creating it if need be, with the RECOMMENDED settings (the exact rule where the
# stems extra is not installed): one that exists keeps its rule.
_READS, _WRITES, _CREATES = "reads", "writes", "creates"


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """Send what the block writes to stdout (print, or a C library's write to fd 1) to
    stderr: model libraries print while they load, and stdout is the command's output,
    or for `memory mcp` the protocol."""
    with contextlib.suppress(AttributeError, ValueError, OSError):
        sys.stdout.flush()
    try:
        kept = os.dup(1)
        os.dup2(2, 1)
    except OSError:  # no stdout, or no stderr, to move: nothing to keep apart
        yield
        return
    try:
        yield
    finally:
        with contextlib.suppress(AttributeError, ValueError, OSError):
            sys.stdout.flush()
        os.dup2(kept, 1)
        os.close(kept)


def _made_by(spec: str, named: str) -> object:
    """What a launch setting names as MODULE:FACTORY (an embedder, a reranker): that
    module's FACTORY(), the module importable as any other (installed, or on PYTHONPATH)."""
    module, _, factory = spec.partition(":")
    if not module or not factory.isidentifier():
        raise MemoryInputError(f"{named} must be MODULE:FACTORY, a module and a callable in it")
    failure = None
    try:
        with _stdout_to_stderr():
            found = importlib.import_module(module)
    except ModuleNotFoundError as exc:  # the module typed, or one it imports: a name
        failure = f"no module named {str(exc.name)[:200]!r} (installed, or on PYTHONPATH?)"
    except Exception as exc:
        failure = f"importing {module[:200]!r} raised {type(exc).__name__}"
    if failure is None and not callable(getattr(found, factory, None)):
        failure = f"module {module[:200]!r} has no callable {factory!r}"
    if failure is None:
        try:
            with _stdout_to_stderr():
                made = getattr(found, factory)()
        except Exception as exc:
            failure = f"calling {factory!r} raised {type(exc).__name__}"
    if failure is not None:  # raised out here: the module's own error may quote anything
        raise MemoryInputError(f"{named}: {failure}")
    return made


def _embedder_of(args: argparse.Namespace) -> Embedder | None:
    """The command's embedder, for the commands that embed: --embedder, else
    $MEMORY_EMBEDDER, else none (reindex takes --embedder alone, as the one to embed
    every memory with anew)."""
    if args.embedder is not None:
        return _check_embedder(_made_by(args.embedder, "--embedder"))
    spec = os.environ.get("MEMORY_EMBEDDER")
    if spec and args.embeds and args.command != "reindex":
        return _check_embedder(_made_by(spec, "MEMORY_EMBEDDER"))
    return None


def _reranker_of(args: argparse.Namespace) -> Reranker | None:
    """The command's reranker, for the commands that recall: --reranker, else
    $MEMORY_RERANKER, else none."""
    if not args.reranks:
        return None
    if args.reranker is not None:
        return _check_reranker(_made_by(args.reranker, "--reranker"))
    spec = os.environ.get("MEMORY_RERANKER")
    return _check_reranker(_made_by(spec, "MEMORY_RERANKER")) if spec else None


class _NotTheAdvice(logging.Filter):
    """Leaves out the open's advice to reindex, for the reindex that follows the open."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.msg is not _WITHOUT_ITS_EMBEDDER


def _open_for(args: argparse.Namespace) -> MemoryStore:
    embedder = args.embedder_made = _embedder_of(args)
    if args.command == "reindex" and embedder is not None:
        # The store's vectors are another's until reindex has run, which is the fix the
        # open would advise.
        advice = _NotTheAdvice()
        _log.addFilter(advice)
        try:
            return _open_ranked(args, None)
        finally:
            _log.removeFilter(advice)
    return _open_ranked(args, embedder)


def _open_ranked(args: argparse.Namespace, embedder: Embedder | None) -> MemoryStore:
    # Every command ranks as `memory mcp` does, RECOMMENDED's way, and stats says so; a
    # store that exists keeps its rule.
    ranking = RECOMMENDED.copy()
    del ranking["matching"]
    longest = _longest_text(args)
    keep = True if getattr(args, "history", False) else None  # --history: on from now
    reranker = _reranker_of(args)
    if args.opens == _READS:
        return MemoryStore(args.path, read_only=True, embedder=embedder, reranker=reranker,
                           **ranking)
    if args.opens == _CREATES:
        try:
            return MemoryStore(args.path, create=False, embedder=embedder, max_text=longest,
                               history=keep, reranker=reranker, **ranking)
        except StoreNotFound:
            settings = _recommended_here()
            if settings["matching"] == "exact":
                print("memory: creating the store with matching=exact: the stems extra is"
                      " not installed (pip install snowballstemmer PyStemmer), and a store"
                      " keeps its rule until reindex", file=sys.stderr)
            return MemoryStore(args.path, embedder=embedder, max_text=longest, history=keep,
                               reranker=reranker, **settings)
    return MemoryStore(args.path, create=False, embedder=embedder, max_text=longest,
                       history=keep, reranker=reranker, **ranking)


_HELP_EMBEDDER = ("the embedder for recall by meaning: FACTORY() of the importable module"
                  " MODULE (default: $MEMORY_EMBEDDER)")
_HELP_RERANKER = (f"the reranker that reorders recall's best {RERANK_DEPTH}: FACTORY() of the"
                  " importable module MODULE (default: $MEMORY_RERANKER)")
_HELP_WHERE = ("only the memories the JSON filter admits: {\"path\": value}, or"
               " {\"path\": {\"$op\": value}} with $eq $ne $gt $gte $lt $lte $in $nin"
               " $contains; paths $created_at $updated_at $valid_from $valid_to $key $source"
               " $level; $and $or $not")
_HELP_AS_OF = ("as the scope read at TIME (ISO 8601 with a UTC offset): superseded versions"
               " the store keeps included, forgotten memories never")
_HELP_HISTORY = ("keep, from now on, the version each memory replaced or revised supersedes,"
                 " until the memory goes (recorded in the store: later opens keep it too)")
_HELP_IF_VERSION = ("only where the memory is at version N (with --key, 0: where the key"
                    " holds none); else exit 1, nothing changed")
_HELP_MAX_TEXT = (f"the longest text the store takes ({MAX_TEXT} to {_LONGEST_TEXT},"
                  f" default {MAX_TEXT})")


_HELP_VALID_AT = ("only the memories valid at TIME (ISO 8601 with a UTC offset; default now;"
                  " any: whenever)")


def _takes_window(command: argparse.ArgumentParser, kept: str) -> None:
    command.add_argument("--valid-from", metavar="TIME", help="when what it says began to hold"
                         f" (ISO 8601 with a UTC offset; {kept})")
    command.add_argument("--valid-to", metavar="TIME", help="when it stopped holding (ISO 8601"
                         f" with a UTC offset; {kept})")


def _takes_if_version(command: argparse.ArgumentParser) -> None:
    command.add_argument("--if-version", type=_bounded_int(0, _MAX_ID), metavar="N",
                         help=_HELP_IF_VERSION)


class _Commands:
    """The subcommands of `memory`, added in the order --help lists them."""

    def __init__(self, commands: Any) -> None:
        self._commands = commands

    def add(self, name: str, run: Callable[[MemoryStore, argparse.Namespace], int], opens: str,
                summary: str, user: bool = False, task: bool = False, embeds: bool = False,
                reranks: bool = False) -> argparse.ArgumentParser:
        sub: argparse.ArgumentParser = self._commands.add_parser(name, help=summary,
                                                                 description=summary)
        sub.add_argument("path", metavar="PATH",
                         help="the store: an SQLite file, or a postgresql:// URL")
        if user:
            sub.add_argument("--user", required=True, type=_identifier, help="the user id")
        if task:
            sub.add_argument("--task", required=True, type=_identifier, help="the task id")
        if embeds:
            sub.add_argument("--embedder", metavar="MODULE:FACTORY", help=_HELP_EMBEDDER)
        if reranks:
            sub.add_argument("--reranker", metavar="MODULE:FACTORY", help=_HELP_RERANKER)
        sub.set_defaults(run=run, opens=opens, load=None, usage=sub, embedder=None,
                         embeds=embeds, reranker=None, reranks=reranks)
        return sub

    def listing(self) -> None:
        """stats, list and history."""
        command = self.add
        command("stats", _run_stats, _READS, "counts by level and users, schema version, file size")
        listing = command("list", _run_list, _READS,
                          "every memory the scope sees, oldest first, as JSON Lines (or a page of"
                          " them, with --after and --limit)", user=True, task=True)
        listing.add_argument("--after", type=_bounded_int(0, _MAX_ID), metavar="ID",
                             help="only those with ids above ID (the last of the page before;"
                             " 0 for the first)")
        listing.add_argument("--limit", type=_bounded_int(1, _MAX_ID), help="at most this many")
        listing.add_argument("--conversation", metavar="CONVERSATION", help="only the memories"
                             " whose source, up to its last /, is CONVERSATION")
        listing.add_argument("--newest-first", action="store_true", help="newest first (page"
                             " down with --before)")
        listing.add_argument("--before", type=_bounded_int(1, _MAX_ID), metavar="ID",
                             help="only those with ids below ID (the last of the page before)")
        listing.add_argument("--where", type=_json_argument, metavar="JSON", help=_HELP_WHERE)
        listing.add_argument("--key-prefix", metavar="PREFIX", help="only keyed memories whose"
                             " keys begin with PREFIX, in key order (page with --after-key)")
        listing.add_argument("--after-key", metavar="KEY", help="with --key-prefix: only keys after"
                             " KEY (the last of the page before)")
        listing.add_argument("--as-of", metavar="TIME", help=_HELP_AS_OF)
        listing.add_argument("--valid-at", metavar="TIME", help=_HELP_VALID_AT)
        past = command("history", _run_history, _READS, "the versions of the memory --id ID (or"
                       " of the one the scope sees under --key), oldest first, as JSON Lines:"
                       " those it superseded, where the store keeps history, then itself",
                       user=True, task=True)
        which = past.add_mutually_exclusive_group(required=True)
        which.add_argument("--id", type=_bounded_int(1, _MAX_ID), metavar="ID",
                           help="the id of the memory or of any of its versions")
        which.add_argument("--key", metavar="KEY", help="the key the scope sees it under")

    def recalling(self) -> None:
        """recall and export."""
        command = self.add
        recall = command("recall", _run_recall, _READS,
                         "the memories that best match QUERY, as JSON Lines", user=True, task=True,
                         embeds=True, reranks=True)
        recall.add_argument("query", metavar="QUERY")
        recall.add_argument("--limit", type=_bounded_int(1, MAX_LIMIT), default=3,
                            help=f"at most this many (1 to {MAX_LIMIT}, default 3)")
        recall.add_argument("--rank", type=_one_of(RANKS), metavar="{" + ",".join(RANKS) + "}",
                            help="hybrid (default, as memory mcp): words by idf, and meaning given"
                            " an embedder; idf: weigh rare words more; shared: count shared"
                            " words; meaning: the embedder's cosine alone")
        recall.add_argument("--budget", type=_bounded_int(1, _MAX_ID), metavar="CHARACTERS",
                            help="the texts total at most this many characters, best first")
        recall.add_argument("--context", action=argparse.BooleanOptionalAction,
                            help="score each memory with its neighbours in its conversation too"
                            " (default, as memory mcp; --no-context: alone)")
        recall.add_argument("--where", type=_json_argument, metavar="JSON", help=_HELP_WHERE)
        recall.add_argument("--offset", type=_bounded_int(0, _MAX_OFFSET), default=0,
                            help=f"the ranking from this place on (0 to {_MAX_OFFSET}, default 0)")
        recall.add_argument("--as-of", metavar="TIME", help=_HELP_AS_OF)
        recall.add_argument("--valid-at", metavar="TIME", help=_HELP_VALID_AT)
        recall.add_argument("--explain", action="store_true",
                            help="give each memory `why`: the query words it matched, with what"
                            " each added to its score")
        recall.add_argument("--rerank", action=argparse.BooleanOptionalAction,
                            help="reorder the best by the reranker (default: where one is given)")
        command("export", _run_export, _READS, "every memory of the user, as JSON Lines on stdout",
                user=True)

    def keeping(self) -> None:
        """remember and import."""
        command = self.add
        remember = command("remember", _run_remember, _CREATES,
                           "keep TEXT for the user (or the task, with --level task) and print its"
                           " id; creates the store if it does not exist", user=True, task=True,
                           embeds=True)
        remember.add_argument("text", metavar="TEXT", help="the text, or - to read it from stdin")
        remember.add_argument("--history", action="store_true", help=_HELP_HISTORY)
        remember.add_argument("--level", type=_one_of(LEVELS), default="user",
                              metavar="{" + ",".join(LEVELS) + "}", help="user (default) or task")
        remember.add_argument("--source", default="cli", help="where it came from (default cli)")
        remember.add_argument("--ttl", type=_seconds,
                              help="seconds until it expires (default never)")
        remember.add_argument("--key", help="the memory's key within its owner: a memory the owner"
                              " holds under it is replaced")
        remember.add_argument("--metadata", type=_json_argument, metavar="JSON",
                              help="a JSON object kept with it, for --where")
        remember.add_argument("--no-embed", dest="embed", action="store_false",
                              help="give it no vector: recall by meaning never finds it")
        _takes_window(remember, "default: since always, and still; a --key holder that began"
                      " before --valid-from is kept, its window closed there")
        _takes_if_version(remember)
        remember.add_argument("--max-text", type=_bounded_int(MAX_TEXT, _LONGEST_TEXT),
                              metavar="CHARACTERS", help=_HELP_MAX_TEXT)
        remember.set_defaults(load=_load_text)
        importing = command("import", _run_import, _CREATES,
                            "add JSON Lines records (as export writes them), all or none;"
                            " creates the store if it does not exist", embeds=True)
        importing.add_argument("file", metavar="FILE", nargs="?",
                               help="a JSON Lines file, or - for standard input (the default"
                               " where that is not a terminal)")
        sources = ("records", _SERVER_MEMORY)
        importing.add_argument("--from", dest="format", type=_one_of(sources), default="records",
                               metavar="{" + ",".join(sources) + "}",
                               help="records (default, as export writes them) or server-memory"
                               " (the reference MCP memory server's memory.jsonl, for --user:"
                               " each observation and relation a memory, none twice)")
        importing.add_argument("--user", type=_identifier, help="with --from server-memory: whose")
        importing.add_argument("--task", type=_identifier, help="with --from server-memory: task"
                               " memories of this task (default: the user's own level)")
        importing.add_argument("--max-text", type=_bounded_int(MAX_TEXT, _LONGEST_TEXT),
                               metavar="CHARACTERS", help=_HELP_MAX_TEXT)
        importing.set_defaults(load=_load_records)
        importing.add_argument("--history", action="store_true", help=_HELP_HISTORY)

    def forgetting(self) -> None:
        """The calls that forget or rename."""
        command = self.add
        forget = command("forget", _run_forget, _WRITES, "forget one memory the scope sees",
                         user=True, task=True)
        forget.add_argument("id", metavar="ID", type=_bounded_int(1, _MAX_ID))
        _takes_if_version(forget)
        by_key = command("forget-key", _run_forget_key, _WRITES, "forget the memory the scope"
                         " sees under KEY (the task's, else the user level's)", user=True,
                         task=True)
        by_key.add_argument("key", metavar="KEY")
        _takes_if_version(by_key)
        rename = command("rename", _run_rename, _WRITES, "move the memory the scope sees under KEY"
                         " to NEW_KEY in its owner, in one transaction; exit 1 where NEW_KEY is"
                         " held", user=True, task=True)
        rename.add_argument("key", metavar="KEY")
        rename.add_argument("new_key", metavar="NEW_KEY")
        _takes_if_version(rename)
        by_filter = command("forget-where", _run_forget_where, _WRITES, "forget every memory the"
                            " scope sees whose metadata the JSON filter admits, in one"
                            " transaction", user=True, task=True)
        by_filter.add_argument("where", metavar="JSON", type=_json_argument, help=_HELP_WHERE)
        conversation = command("forget-conversation", _run_forget_conversation, _WRITES,
                               "forget every memory the scope sees of one conversation, in one"
                               " transaction", user=True, task=True)
        conversation.add_argument("conversation", metavar="CONVERSATION", help="the sources up to"
                                  " their last /: chat-42 for chat-42/turn-1 and chat-42/turn-2")

    def operating(self) -> None:
        """revise, and the operator's calls."""
        command = self.add
        revise = command("revise", _run_revise, _WRITES,
                         "correct one memory the scope sees: forget it and remember TEXT at its"
                         " level and task, in one transaction", user=True, task=True, embeds=True)
        revise.add_argument("id", metavar="ID", type=_bounded_int(1, _MAX_ID))
        revise.add_argument("text", metavar="TEXT")
        revise.add_argument("--source", required=True, help="where the correction came from")
        revise.add_argument("--ttl", type=_seconds, help="seconds until it expires (default never)")
        _takes_window(revise, "default: the memory's own")
        _takes_if_version(revise)
        revise.add_argument("--max-text", type=_bounded_int(MAX_TEXT, _LONGEST_TEXT),
                            metavar="CHARACTERS", help=_HELP_MAX_TEXT)
        command("purge", _run_purge, _WRITES, "delete every memory that has expired")
        erase = command("erase-user", _run_erase_user, _WRITES,
                        "forget every memory of the user, in every task", user=True)
        erase.add_argument("--yes", action="store_true", help="confirm the erasure")
        command("check", _run_check, _READS, "integrity check and schema version; exit 1 unless ok")
        reindex = command("reindex", _run_reindex, _WRITES,
                          "rebuild the word index under another matching rule, in one"
                          " transaction; with --embedder, first give every memory a vector from"
                          " that embedder, which the store then records", embeds=True)
        reindex.add_argument("--matching", type=_one_of(MATCHING),
                             metavar="{" + ",".join(MATCHING) + "}")
        command("compact", _run_compact, _WRITES,
                "rebuild the file so that no byte of anything deleted remains in it")
        backup = command("backup", _run_backup, _READS,
                         "copy the store, consistently, while others may write to it")
        backup.add_argument("destination", metavar="DEST", help="a file that does not exist yet")

    def serving(self) -> None:
        """mcp: the store served to an assistant."""
        serving = ("serve the store to an assistant as MCP tools, on stdio for one user and task"
                   " fixed here, or with --http over Streamable HTTP; creates the store if it does"
                   " not exist")
        serve = self._commands.add_parser("mcp", help=serving, description=serving)
        serve.add_argument("path", metavar="PATH", nargs="?",
                           help="an SQLite file or a postgresql:// URL (default: $MEMORY_STORE)")
        serve.add_argument("--user", type=_identifier, help="the user id (default: $MEMORY_USER)")
        serve.add_argument("--task", type=_identifier, help="the task id (default: $MEMORY_TASK,"
                           f" else {_MCP_DEFAULT_TASK})")
        serve.add_argument("--http", metavar="HOST:PORT", help="serve Streamable HTTP at"
                           " http://HOST:PORT/mcp instead of stdio: with --issuer, for the users"
                           " its tokens name; without it, on a loopback address alone")
        serve.add_argument("--issuer", metavar="URL", help="with --http: accept bearer JWTs of"
                           " this issuer only, each request's user the token's")
        serve.add_argument("--audience", metavar="AUD", help="with --issuer: the audience tokens"
                           " must name (aud)")
        serve.add_argument("--jwks", metavar="FILE_OR_URL", help="with --issuer: the issuer's"
                           " signing keys, a JWKS file or URL")
        serve.add_argument("--user-claim", default="sub", metavar="CLAIM", help="with --issuer:"
                           " the claim that names the user (default sub)")
        serve.add_argument("--embedder", metavar="MODULE:FACTORY", help=_HELP_EMBEDDER)
        serve.add_argument("--reranker", metavar="MODULE:FACTORY", help=_HELP_RERANKER)
        serve.add_argument("--max-text", type=_bounded_int(MAX_TEXT, _LONGEST_TEXT),
                           metavar="CHARACTERS", help=_HELP_MAX_TEXT)
        serve.add_argument("--history", action="store_true", help=_HELP_HISTORY)
        serve.add_argument("--print-config", action="store_true",
                           help="print the mcpServers entry that starts this server as these"
                           " settings say (this interpreter's memory command, the store's"
                           " absolute path), and exit without opening the store")
        serve.set_defaults(run=_beside("memory_mcp", "run", "mcp"), opens=_CREATES, embeds=True,
                           reranks=True, load=_beside("memory_mcp", "settings", "mcp"),
                           usage=serve)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="memory",
        description="Inspect, export, import, back up and erase a memory.py store.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="log what the store does (ids, levels, counts) on stderr")

    commands = _Commands(parser.add_subparsers(dest="command", required=True,
                                               metavar="COMMAND"))
    commands.listing()
    commands.recalling()
    commands.keeping()
    commands.forgetting()
    commands.operating()
    commands.serving()
    return parser

def main(argv: list[str] | None = None) -> int:
    """The `memory` command: 0 on success, 2 on a usage error, 1 on a store error."""
    if sys.stdout is None:  # started with it closed: what a command prints would be lost
        print("memory: error: standard output is closed", file=sys.stderr)
        return 1
    # JSON Lines out in UTF-8 whatever the locale: an ASCII stdout would cut an export short.
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(encoding="utf-8")
    parser = _parser()
    args, extra = parser.parse_known_args(argv)
    if args.command == "import" and args.file is None and len(extra) == 1 and (
            extra[0] == "-" or not extra[0].startswith("-")):
        # argparse gives an optional positional nothing where an option follows PATH
        # (`import DB --from server-memory FILE`): FILE is what it left over.
        args.file = extra.pop()
    if extra:  # argparse would print them, and they may be a mis-quoted memory text
        parser.error(f"{len(extra)} unrecognized arguments (quote a text that has spaces)")
    if args.command == "erase-user" and not args.yes:
        args.usage.error("erase-user removes every memory of the user; add --yes to confirm")
    if args.verbose:
        logging.basicConfig(level=logging.DEBUG, format="%(name)s: %(levelname)s: %(message)s")
    try:
        # A command's loading step may end it, with its status, before a store is opened.
        ended = args.load(args) if args.load is not None else None
        if ended is not None:
            return int(ended)
        with _open_for(args) as store:
            return int(args.run(store, args))
    except BrokenPipeError:  # e.g. `memory export ... | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except (StoreError, MemoryInputError) as exc:
        print(f"memory: error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:  # its str() would name the file, which may be anything typed
        print(f"memory: error: {exc.strerror or type(exc).__name__}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    # `python3 -m memory`: the modules beside this one import `memory`, which must be this
    # module, not a second copy with classes (StoreError, _Sql) of its own.
    sys.modules.setdefault("memory", sys.modules[__name__])
    sys.exit(main())

