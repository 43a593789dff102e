"""The PostgreSQL engine of memory.py: MemoryStore("postgresql://...").

memory.py finds this module by the URL's scheme and uses its `Engine`; nothing else here
is for callers. It holds what PostgreSQL runs for itself (the schema and its upgrades,
row-level security, advisory locks, timeouts), the translation of the driver's errors,
the pool of connections and the session each call runs on. The statements of the store's
own calls are memory.py's, in both dialects, side by side. Needs the `postgres` extra
(psycopg 3 and psycopg_pool).
"""

from __future__ import annotations

import array
import contextlib
import heapq
import itertools
import json
import logging
import re
import select
import struct
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import Any, NamedTuple, cast

from memory import (
    _IN_SCOPE_PG,
    _INDEX_WRITTEN,
    _PG_SUPERSEDED_OTHERWISE,
    _PG_WRITTEN_OTHERWISE,
    _RECEIPTS_TABLE,
    _SQL_EMBEDDER,
    _SQL_MATCHING,
    _SQL_SET_MATCHING,
    _SQL_USERS,
    _SQLITE_ADD_VALIDITY,
    _SYSTEM_FORM,
    _WRITTEN,
    ConnectionLost,
    Matching,
    MemoryInputError,
    OutcomeUnknown,
    SchemaError,
    StoreError,
    StoreNotFound,
    _Admitted,
    _check_seconds,
    _described,
    _Engine,
    _give_every_conversation,
    _history_table,
    _key_every_text,
    _log,
    _recording,
    _ScopeKey,
    _seal_every_owner,
    _Session,
    _Sql,
    _transaction,
    _Vectors,
    _weigh_every_owner,
)

try:
    import psycopg
    import psycopg_pool
except ImportError:
    raise StoreError("a postgresql:// store needs psycopg 3 and psycopg_pool: pip install"
                     " 'psycopg[binary]' psycopg-pool (or '.[postgres]' from a checkout)"
                     ) from None

# -- PostgreSQL's own statements -------------------------------------------------------
# Every table's primary key begins with user_id, so each can be distributed by it.

POSTGRES_SCHEMA_VERSION = 16

# The policy of a table of memory data: a statement sees the rows of the users its
# transaction named (memory.user_ids, comma-separated: no identifier holds a comma), or
# every row in an operator's call (memory.operator). Each setting is read in a scalar
# subquery, once a statement (an InitPlan): read in the condition, the server read and
# split it again for every row, a third of a 100,000-row scan's time (23.8 ms against
# 15.6, 14.4 without the policy). Versions 1 to 15 read them so.
_PG_SCOPE_POLICY = (
    "user_id = ANY ((SELECT string_to_array(current_setting('memory.user_ids', true),"
    " ','))::text[]) OR (SELECT current_setting('memory.operator', true) = 'on')")


def _guarded(table: str) -> tuple[str, ...]:
    """Row-level security on a table of memory data, forced on its owner too, by the
    store's policy (as the newest version has it: an upgrade alters the older ones)."""
    return (f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY",
            f"ALTER TABLE {table} FORCE ROW LEVEL SECURITY",
            f"CREATE POLICY {table}_scope ON {table} USING ({_PG_SCOPE_POLICY})")


# Version 1, to the letter but for its policies (_guarded: the newest version's). A new
# database is made by it and the steps after it, as an upgraded one will be.
_PG_SCHEMA = (
    "CREATE TABLE store_settings (name TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE SEQUENCE memories_id_seq AS BIGINT",
    """CREATE TABLE memories (
    user_id TEXT NOT NULL,
    id BIGINT NOT NULL,
    task_id TEXT,
    text TEXT NOT NULL,
    source TEXT NOT NULL,
    created_at TEXT NOT NULL,
    expires_at TEXT,
    PRIMARY KEY (user_id, id)
)""",
    "CREATE INDEX memories_scope ON memories (user_id, task_id, id)",
    "CREATE INDEX memories_expiry ON memories (user_id, expires_at, task_id, id)"
    " WHERE expires_at IS NOT NULL",
    """CREATE TABLE memory_words (
    user_id TEXT NOT NULL,
    word TEXT NOT NULL,
    first_id BIGINT NOT NULL,
    task_id TEXT,
    ids BYTEA NOT NULL,
    PRIMARY KEY (user_id, word, first_id)
)""",
    """CREATE TABLE memory_counts (
    user_id TEXT NOT NULL,
    task_key TEXT NOT NULL,
    memories BIGINT NOT NULL,
    PRIMARY KEY (user_id, task_key)
)""",
    # The second guard: row-level security, forced on the tables' owner too (_guarded).
    *(statement for table in ("memories", "memory_words", "memory_counts")
      for statement in _guarded(table)),
)
# From pg_class under the statement's snapshot, not the catalog cache (to_regclass), which
# may not yet know of a table another process created while this one waited for the lock.
_PG_TABLE_EXISTS = (
    "SELECT EXISTS (SELECT 1 FROM pg_class WHERE relname = 'store_settings'"
    " AND relnamespace = current_schema()::regnamespace)"
)
_PG_VERSION = "SELECT value FROM store_settings WHERE name = 'schema_version'"
# Read before anything is created: the database's encoding (text is stored as it
# encodes it), as bytes (a SQL_ASCII database sends no text); whether the server is a
# standby (replaying a primary's WAL: it refuses every write); and the server process
# serving the connection (another than the one libpq connected to: a pooler's).
_PG_ENCODING = (
    "SELECT convert_to(pg_encoding_to_char(encoding), 'SQL_ASCII'), pg_is_in_recovery(),"
    " pg_backend_pid() FROM pg_database WHERE datname = current_database()")
# What the store trusts, as SQLite's layout check does for a file: its objects, each owned
# by the connecting role or a role whose privileges it has (a schema owned by a migration
# role, the application's role a member of it), its tables of memory data (each with the
# version that made it) with row-level security enabled and forced, and exactly the
# store's policies on them.
_PG_GUARDED = (("memories", 1), ("memory_words", 1), ("memory_counts", 1),
               ("memory_vectors", 4), ("memory_fields", 5), ("memory_vector_blocks", 7),
               ("memory_receipts", 11), ("memory_history", 12))
_PG_STORE_OBJECTS = ("store_settings", "memories_id_seq", *(table for table, _ in _PG_GUARDED))
_PG_OBJECTS = (
    "SELECT relname, relkind, relrowsecurity, relforcerowsecurity,"
    " pg_has_role(relowner, 'USAGE') FROM pg_class"
    " WHERE relnamespace = current_schema()::regnamespace AND relname = ANY (%s)"
    " ORDER BY relname"
)
_PG_POLICIES = (
    "SELECT tablename, policyname, permissive, roles::text, cmd, qual, with_check"
    " FROM pg_policies WHERE schemaname = current_schema() ORDER BY tablename, policyname"
)
# Each version's policies as the server gives them back (pg_get_expr's form).
_PG_POLICY = (
    "((user_id = ANY (string_to_array(current_setting('memory.user_ids'::text, true),"
    " ','::text))) OR (current_setting('memory.operator'::text, true) = 'on'::text))")
_PG_POLICY_TEXTS = {**dict.fromkeys(range(1, 16), _PG_POLICY), 16: (
    "((user_id = ANY (( SELECT string_to_array(current_setting('memory.user_ids'::text,"
    " true), ','::text) AS string_to_array)::text[])) OR ( SELECT (current_setting("
    "'memory.operator'::text, true) = 'on'::text)))")}
# Version 2: the text keys, as SQLite's version 5 has them; the upgrade reads every
# memory, so it sees all users, as an operator's call does.
_PG_ADD_TEXT_KEY = (
    "SELECT set_config('memory.operator', 'on', true)",
    "ALTER TABLE memories ADD COLUMN text_key TEXT",
)
_PG_TEXT_KEY_INDEX = "CREATE INDEX memories_text_key ON memories (user_id, text_key)"
# Version 3: the conversations, as SQLite's version 6 has them.
_PG_ADD_CONVERSATION = (
    "SELECT set_config('memory.operator', 'on', true)",
    "ALTER TABLE memories ADD COLUMN conversation TEXT",
)
_PG_CONVERSATION_INDEX = (
    "CREATE INDEX memories_conversation ON memories (user_id, conversation, id)"
    " INCLUDE (task_id, expires_at)")
# Version 4: the vectors, as SQLite's version 7 has them, under the same guard.
_PG_ADD_VECTORS = (
    """CREATE TABLE memory_vectors (
    user_id TEXT NOT NULL,
    id BIGINT NOT NULL,
    task_id TEXT,
    vector BYTEA NOT NULL,
    PRIMARY KEY (user_id, id)
)""",
    *_guarded("memory_vectors"),
)
# Version 5: keys, metadata and embedding choices, as SQLite's version 8 has them, the
# metadata as jsonb; the table of metadata terms under the same guard.
_PG_ADD_RECORDS = (
    "ALTER TABLE memories ADD COLUMN key TEXT, ADD COLUMN metadata JSONB,"
    " ADD COLUMN updated_at TEXT, ADD COLUMN embed TEXT",
    "CREATE UNIQUE INDEX memories_key ON memories (user_id, coalesce(task_id, ''), key)"
    " WHERE key IS NOT NULL",
    """CREATE TABLE memory_fields (
    user_id TEXT NOT NULL,
    term TEXT NOT NULL,
    id BIGINT NOT NULL,
    task_id TEXT,
    PRIMARY KEY (user_id, term, id)
)""",
    "CREATE INDEX memory_fields_id ON memory_fields (user_id, id)",
    *_guarded("memory_fields"),
)
# Version 6: the key index leads with the key after the user. Under row-level security a
# condition on coalesce(task_id, '') is not leakproof, so it cannot bound an index scan:
# with the key third, a look-up by key read every index entry of the user.
_PG_KEY_AFTER_USER = (
    "DROP INDEX memories_key",
    "CREATE UNIQUE INDEX memories_key ON memories (user_id, key, coalesce(task_id, ''))"
    " WHERE key IS NOT NULL",
)
# Version 7: the vectors in sealed blocks as well, as SQLite's version 9 has them, sealed
# for every user's owners by the upgrade (which reads every user's vectors). A block's
# bytes are stored out of line uncompressed: float32 vectors do not compress, and trying
# costs every write of one.
_PG_ADD_VECTOR_BLOCKS = (
    "SELECT set_config('memory.operator', 'on', true)",
    """CREATE TABLE memory_vector_blocks (
    user_id TEXT NOT NULL,
    first_id BIGINT NOT NULL,
    task_id TEXT,
    last_id BIGINT NOT NULL,
    after_id BIGINT NOT NULL,
    ids BYTEA NOT NULL,
    vectors BYTEA NOT NULL,
    PRIMARY KEY (user_id, first_id)
)""",
    "ALTER TABLE memory_vector_blocks ALTER COLUMN ids SET STORAGE EXTERNAL,"
    " ALTER COLUMN vectors SET STORAGE EXTERNAL",
    "CREATE INDEX memory_vector_blocks_scope ON memory_vector_blocks"
    " (user_id, task_id, first_id) INCLUDE (last_id)",
    *_guarded("memory_vector_blocks"),
)
# Version 8: the text keys in a hash index. A key is a hash, so each new memory's entry
# in a B-tree of them lands on a random page: it added 3.3-4.2 us to a bulk-inserted row
# here, a hash index 0.3-2 (the dedupe look-up names the key; its statement keeps the
# planner off the user's other indexes, statistics or none: _SQL_SAME_TEXT).
_PG_HASH_TEXT_KEYS = (
    "DROP INDEX memories_text_key",
    "CREATE INDEX memories_text_key ON memories USING hash (text_key)",
)
# Version 9: the weight of each owner's memories, as SQLite's version 10 has it; the
# upgrade weighs every user's, as an operator's call does.
_PG_ADD_WEIGHTS = (
    "SELECT set_config('memory.operator', 'on', true)",
    "ALTER TABLE memory_counts ADD COLUMN weight BIGINT NOT NULL DEFAULT 0",
)
# Version 10: each memory's version, as SQLite's version 11 has it; keys compared byte by
# byte (the "C" collation), so that the key index serves a range of keys by prefix in the
# order SQLite gives, whatever the database's locale.
_PG_ADD_VERSIONS = (
    "ALTER TABLE memories ADD COLUMN version BIGINT",
    'ALTER TABLE memories ALTER COLUMN key TYPE TEXT COLLATE "C"',
)
# Version 11: the receipts of operations, as SQLite's version 12 keeps them, guarded.
_PG_ADD_RECEIPTS = (_RECEIPTS_TABLE, *_guarded("memory_receipts"))
# Version 12: the superseded versions, as SQLite's version 13 keeps them, guarded.
_PG_ADD_HISTORY = (_history_table("BIGINT", "BYTEA", "JSONB"), *_guarded("memory_history"))
# Version 13: the versions indexed by their own ids and by their keys, as SQLite's
# version 14 has them (a B-tree here holds no primary key but the columns it names).
_PG_INDEX_HISTORY = (
    "CREATE INDEX memory_history_ids ON memory_history (user_id, task_id, id, head_id,"
    " version)",
    "CREATE INDEX memory_history_keys ON memory_history (user_id, task_id, key)"
    " WHERE key IS NOT NULL",
)
# Version 14: the windows of validity, as SQLite's version 15 has them.
_PG_ADD_VALIDITY = _SQLITE_ADD_VALIDITY
# Version 15: the memories by when each was written and the versions by when each was
# superseded, as SQLite's version 16 has them, each form of time in an index of its own
# (the reads' forms here test the predicates, _changed_after).
_PG_INDEX_CHANGES = (
    f"ALTER TABLE memories ADD COLUMN {_PG_WRITTEN_OTHERWISE} BOOLEAN GENERATED ALWAYS AS"
    f" ({_WRITTEN} NOT LIKE {_SYSTEM_FORM}) STORED",
    f"ALTER TABLE memory_history ADD COLUMN {_PG_SUPERSEDED_OTHERWISE} BOOLEAN GENERATED"
    f" ALWAYS AS (superseded_at NOT LIKE {_SYSTEM_FORM}) STORED",
    *_INDEX_WRITTEN[:2],
    "CREATE INDEX memories_written_otherwise ON memories (user_id, task_id)"
    f" WHERE {_PG_WRITTEN_OTHERWISE}",
    "CREATE INDEX memory_history_superseded ON memory_history (user_id, superseded_at, task_id)"
    f" WHERE superseded_at LIKE {_SYSTEM_FORM}",
    "CREATE INDEX memory_history_superseded_otherwise ON memory_history (user_id, task_id)"
    f" WHERE {_PG_SUPERSEDED_OTHERWISE}",
)

# pgvector, where a superuser has installed it in the database (CREATE EXTENSION vector:
# it is not a trusted extension, so the store never installs it): every vector is also a
# row of memory_embeddings, so that a scope past the kept budget is scored on the server,
# under the same scope predicate and guard, not read through the driver (a million
# vectors are 1.5 GB). A memory embedded from several texts has a row for each (`part`).
# Its rows go with their memory_vectors row: a deletion of that cascades, whichever call
# makes it. Not a schema version: the store makes it whenever it opens a database that
# has the extension and not the table, and store_settings records that it did, which
# every transaction reads with its matching rule (another process may have made it).
_PG_EMBEDDINGS = "memory_embeddings"
_PG_EMBEDDINGS_MADE = "SELECT EXISTS (SELECT 1 FROM store_settings WHERE name = 'embeddings')"
# At open: whether the table is made, the extension installed, and the role may create
# the table beside the store's (a role that may not opens the store as before).
_PG_PGVECTOR = (f"SELECT ({_PG_EMBEDDINGS_MADE}), EXISTS (SELECT 1 FROM pg_extension"
                " WHERE extname = 'vector'), has_schema_privilege(current_schema(), 'CREATE')")
_PG_ADD_EMBEDDINGS = (
    "SELECT set_config('memory.operator', 'on', true)",
    """CREATE TABLE memory_embeddings (
    user_id TEXT NOT NULL,
    id BIGINT NOT NULL,
    part INTEGER NOT NULL,
    task_id TEXT,
    embedding vector NOT NULL,
    PRIMARY KEY (user_id, id, part),
    FOREIGN KEY (user_id, id) REFERENCES memory_vectors ON DELETE CASCADE
)""",
    *_guarded("memory_embeddings"),
)
_PG_SET_EMBEDDINGS = ("INSERT INTO store_settings (name, value) VALUES ('embeddings',"
                      " 'pgvector')")
# Each vector of the rows' blobs, from one array of all their numbers (in binary: its
# slices cast to vector on the server, so the driver needs no type of pgvector's).
_PG_INSERT_EMBEDDINGS = (
    "INSERT INTO memory_embeddings (user_id, id, part, task_id, embedding)"
    " SELECT given.owner, given.id, given.part, given.task,"
    " (%b::float4[])[given.at + 1 : given.at + %s]::vector"
    " FROM unnest(%b::text[], %b::bigint[], %b::int[], %b::text[], %b::int[])"
    " AS given (owner, id, part, task, at)")
# What filling the table reads of a user's vectors, a page at a time.
_PG_USER_VECTORS = ("SELECT id, task_id, vector FROM memory_vectors WHERE user_id = %s"
                    " ORDER BY id")
_PG_FILL_ROWS = 2_000
# The scope's nearest vectors to the query's, best first (ties to the newer), with the
# live ids the filter admits (`{admitted}`): exactly, every row of the scope compared
# (the server's parallel workers share them). Each row's (id, part) alone: its vector
# cast to an array for each row of the scope cost 4 µs a row, most of the scan.
_PG_ADMITTED_ALL = ""
_PG_ADMITTED_SOME = " AND id = ANY (%b::bigint[])"
_PG_NEAREST = (
    "SELECT id, part FROM memory_embeddings"
    f" {_IN_SCOPE_PG} AND id <> ALL (%b::bigint[])"
    "{admitted} ORDER BY embedding <=> %b::float4[]::vector, id DESC LIMIT %s")
# Hybrid's: each cosine with the words' evidence of its id added (`given`), and the ids
# of the evidence that have no vector, scored by it alone (no part).
_PG_NEAREST_WITH = (
    "WITH given (id, more) AS (SELECT * FROM unnest(%b::bigint[], %b::float8[]))"
    " SELECT id, part FROM (SELECT id, part,"
    " 1 - (embedding <=> %b::float4[]::vector) + coalesce(more, 0) AS score"
    " FROM memory_embeddings LEFT JOIN given USING (id)"
    f" {_IN_SCOPE_PG} AND id <> ALL (%b::bigint[])"
    "{admitted} UNION ALL SELECT id, NULL, more FROM given WHERE id <> ALL (%b::bigint[])"
    "{admitted} AND NOT EXISTS (SELECT 1 FROM memory_embeddings"
    f" {_IN_SCOPE_PG} AND id = given.id)) AS scored"
    " ORDER BY score DESC, id DESC LIMIT %s")
# By an HNSW index of the DBA's on the vectors of the store's dimensions (the cast is
# the index's expression; a type modifier cannot be a parameter), scanned on past the
# rows the predicate refuses (relaxed_order: not quite in order; the store sorts them),
# with ef_search candidates kept at each step.
_PG_NEAREST_INDEXED = (
    "SELECT id, part FROM memory_embeddings"
    f" {_IN_SCOPE_PG} AND id <> ALL (%b::bigint[])"
    "{admitted} ORDER BY embedding::vector({dimensions}) <=>"
    " %b::float4[]::vector({dimensions}) LIMIT %s")
# The memories one of those chose, each with its vectors as memory_vectors holds them
# (none for an id without one), so that the store scores the few it returns as it scores
# vectors it reads; and how many rows it chose.
_PG_CHOSEN = (
    "WITH best AS MATERIALIZED ({nearest}) SELECT id, vector, (SELECT count(*) FROM best)"
    f" FROM memory_vectors {_IN_SCOPE_PG} AND id IN (SELECT id FROM best)"
    " UNION ALL SELECT id, NULL, (SELECT count(*) FROM best) FROM best WHERE part IS NULL")
_PG_HNSW_SCAN = ("SELECT set_config('hnsw.iterative_scan', 'relaxed_order', true),"
                 " set_config('hnsw.ef_search', %s, true)")
# The type oids of float4 and float4[], for the vectors a statement is given.
_PG_FLOAT4, _PG_FLOAT4_ARRAY = 700, 1021
# What hnsw.ef_search may be set to, at most.
_PG_MOST_EF_SEARCH = 1000
_PG_SET_VERSION = (
    "INSERT INTO store_settings (name, value) VALUES ('schema_version', %s)"
    " ON CONFLICT (name) DO UPDATE SET value = excluded.value"
)
# A write takes its locks after BEGIN; a read sees one snapshot.
_PG_BEGIN_WRITE = "BEGIN"
_PG_BEGIN_READ = "BEGIN ISOLATION LEVEL REPEATABLE READ"
# Writers hold the store's lock shared and each user's they write for exclusively, so
# writers of different users go on together; a call for every user (purge_expired,
# reindex, the schema) holds the store's lock exclusively. Users in sorted order.
_PG_LOCK_CLASS = 0x6D656D  # "mem"
_PG_LOCK_STORE = f"SELECT pg_advisory_xact_lock({_PG_LOCK_CLASS}, 0)"
# A transaction's first statement: the users it may see, and for a write its locks, in
# one round trip (a write would otherwise spend three more on them). A read also reads
# the matching rule there, in its snapshot; a write must read it after its locks, in a
# statement of its own, since a reindex may commit while the write waits for them.
_PG_USERS = "set_config('memory.user_ids', %s, true), set_config('memory.operator', %s, true)"
_PG_SCOPE = f"SELECT ({_SQL_MATCHING}), {_PG_USERS}, ({_PG_EMBEDDINGS_MADE})"
_PG_RULE = f"SELECT ({_SQL_MATCHING}), ({_PG_EMBEDDINGS_MADE})"
_PG_NARROW = "SELECT set_config('memory.user_ids', %s, true)"
_PG_SCOPE_WRITE = (
    f"SELECT {_PG_USERS}, pg_advisory_xact_lock_shared({_PG_LOCK_CLASS}, 0), (SELECT"
    f" count(pg_advisory_xact_lock({_PG_LOCK_CLASS} + 1, hashtext(name))) FROM (SELECT"
    " DISTINCT unnest(string_to_array(%s, ',')) AS name ORDER BY name) AS users)"
)
_PG_SCOPE_WRITE_ALL = f"SELECT {_PG_USERS}, pg_advisory_xact_lock({_PG_LOCK_CLASS}, 0)"
# A write for more users takes the store's lock instead of theirs: each lock held takes a
# slot of the server's shared lock table (about max_locks_per_transaction times
# max_connections in all), which a batch for thousands of users would fill.
_PG_MOST_USER_LOCKS = 64
_PG_NEXT_IDS = "SELECT nextval('memories_id_seq') FROM generate_series(1, %s)"
_PG_PRIVILEGED = "SELECT rolsuper OR rolbypassrls FROM pg_roles WHERE rolname = current_user"
_PG_SIZE = (
    "SELECT sum(pg_total_relation_size(to_regclass(name)))::bigint FROM unnest("
    "ARRAY['memories', 'memory_words', 'memory_counts', 'memory_vectors', 'memory_fields',"
    " 'memory_vector_blocks', 'memory_receipts', 'memory_history', 'memory_embeddings',"
    " 'store_settings'])"
    " AS name"
)
_PG_VACUUM = ("VACUUM (FULL, ANALYZE) memories, memory_words, memory_counts, memory_vectors,"
              " memory_fields, memory_vector_blocks, memory_receipts, memory_history")
# What the store sets holds for one transaction (set_config's local form, a BEGIN's READ
# ONLY), sent in the BEGIN's round trip: a transaction pooler (PgBouncer, the managed
# services' poolers) gives the server connection to another client once a transaction
# ends, with whatever was set for the session still on it.
_PG_READ_ONLY = " READ ONLY"
# Every statement of the store is short: compiling one to machine code, which the server
# does once a plan's estimated cost is high (a read for 64 owners' words is estimated
# for 100 words apiece), takes longer than running it (14 ms against 0.2 ms).
_PG_NO_JIT = "set_config('jit', 'off', true)"
_PG_ASYNC_COMMIT = "set_config('synchronous_commit', 'off', true)"
# A statement, and a wait for a lock, past the store's statement_timeout is cancelled by
# the server (milliseconds).
_PG_TIMEOUTS = ("set_config('statement_timeout', %s, true),"
                " set_config('lock_timeout', %s, true)")
# libpq waits for a connection without end by default; a URL may set its own.
_PG_CONNECT_SECONDS = 30
# psycopg prepares a statement on the server once a connection has run it this often (its
# default): planned once, a recall and a durable write take about 0.56 of the time. Not
# through a pooler: a prepared statement belongs to one server connection, which a pooler
# by transaction gives other clients, and is not on the one it gives this.
_PG_PREPARE_AFTER = 5


class _Settings(NamedTuple):
    """How each of a store's transactions begins: its BEGIN for a write and for a read,
    then the settings it holds (a statement of set_config calls, and its values)."""

    write: str = _PG_BEGIN_WRITE
    read: str = _PG_BEGIN_READ
    local: str = f"SELECT {_PG_NO_JIT}"
    values: tuple[str, ...] = ()

    @classmethod
    def of(cls, read_only: bool, durable: bool, statement_timeout: float | None
           ) -> _Settings:
        calls = [_PG_NO_JIT] + [_PG_ASYNC_COMMIT] * (not durable)
        values: tuple[str, ...] = ()
        if statement_timeout is not None:
            ms = str(max(1, round(statement_timeout * 1000)))
            calls, values = [*calls, _PG_TIMEOUTS], (ms, ms)
        only = _PG_READ_ONLY * read_only
        return cls(_PG_BEGIN_WRITE + only, _PG_BEGIN_READ + only,
                   f"SELECT {', '.join(calls)}", values)


_PG_WRITABLE = _Settings()  # a durable, writable store's, with no timeout


# The kinds of failure a caller can act on, by SQLSTATE (a class is its first two
# characters); anything else is named by its class and SQLSTATE alone.
_PG_FAILURES = {
    "08": "the connection to the server failed",
    "28": "the server refused the role's credentials",
    "3D": "the database does not exist",
    "40001": "a serialization failure (the transaction was rolled back; try again)",
    "40P01": "a deadlock (the transaction was rolled back; try again)",
    "42501": "permission denied: the role needs to own the database, or to have CREATE on"
             " its schema to create the store and to own the store's tables to use them",
    "53": "the server ran out of a resource (disk, memory or connections)",
    "55P03": "timed out waiting for a lock (lock_timeout)",
    "57014": "timed out (statement_timeout), or cancelled",
    "57P": "the server is shutting down or restarting",
}


# What PgBouncer says, and hangs up, when a client begins a transaction in statement
# pooling mode.
_PG_POOLED_BY_STATEMENT = "transaction blocks not allowed in statement pooling mode"
# libpq reports a failed connection as text alone: no SQLSTATE reaches the driver. The
# server's reason (with the SQLSTATE it sent), or which of socket or host could not be
# reached, is read from libpq's words, which name the role, database or host: only the
# kind goes on. A server whose messages are not in English gives the general one.
_PG_CONNECT_FAILURES = (
    (r'FATAL:  database ".*" does not exist', "3D000", "the database does not exist"),
    (r'FATAL:  role ".*" does not exist', "28000", "the role does not exist"),
    (r"password authentication failed", "28P01", "the server refused the password"),
    (r"no pg_hba.conf entry", "28000",
     "the server's pg_hba.conf lets this role not connect to this database from here"),
    (r"(Peer|Ident) authentication failed", "28000",
     "the server's peer or ident check refused the role for this login"),
    (r"no password supplied", "", "the server asks for a password and the URL gives none"),
    (r"the database system is (starting up|shutting down|in recovery mode)", "57P03",
     "the server is starting up or shutting down"),
    (r'on socket ".*" failed: No such file or directory', "",
     "no server socket in the folder the URL names (is the server running, with its"
     " socket there?)"),
    (r"Connection refused", "", "nothing accepts connections at the host and port"),
    (r"session is read-only|server is in hot standby mode", "",
     "no host the URL names takes writes (target_session_attrs=read-write found each a"
     " standby or read-only)"),
    (r"could not translate host name", "", "the host name does not resolve"),
    (r"timeout expired", "", "no answer from the host within connect_timeout"),
)


def _postgres_error(exc: Exception, connecting: bool = False) -> StoreError:
    # The driver's messages can quote a value (a duplicate key, the URL's user), so only
    # the kind of failure, the error's class and its SQLSTATE go on.
    state = getattr(exc, "sqlstate", None) or ""
    kind = next((_PG_FAILURES[key] for key in (state, state[:3], state[:2])
                 if key in _PG_FAILURES), None)
    failed = "the PostgreSQL server could not do it"
    if connecting and not state:
        failed = "could not connect to the PostgreSQL server"
        said = str(exc)
        state, kind = next(((code, meaning) for pattern, code, meaning in _PG_CONNECT_FAILURES
                            if re.search(pattern, said)),
                           ("", "it is down or unreachable, or refused the role or the"
                                " database"))
    return StoreError(f"{failed}{': ' + kind if kind else ''}"
                      f" ({type(exc).__name__}, SQLSTATE {state or 'none'})")


# (version a database is at after the step, the step), in order; each runs in the
# transaction that creates or upgrades the schema, under the store's lock, with the
# version bump.


def _add_text_keys(db: _PostgresSession) -> None:
    """Version 1 gains the text keys that dedupe looks memories up by."""
    for statement in _PG_ADD_TEXT_KEY:
        db._send(statement)
    _key_every_text(db)
    db._send(_PG_TEXT_KEY_INDEX)


def _add_conversations(db: _PostgresSession) -> None:
    """Version 2 gains the conversations that recall with context finds neighbours in."""
    for statement in _PG_ADD_CONVERSATION:
        db._send(statement)
    _give_every_conversation(db)
    db._send(_PG_CONVERSATION_INDEX)


def _add_vectors(db: _PostgresSession) -> None:
    """Version 3 gains the table of vectors (empty: no embedder made any yet)."""
    for statement in _PG_ADD_VECTORS:
        db._send(statement)


def _add_records(db: _PostgresSession) -> None:
    """Version 4 gains keys, metadata and embedding choices (none yet) and the table of
    metadata terms."""
    for statement in _PG_ADD_RECORDS:
        db._send(statement)


def _key_after_user(db: _PostgresSession) -> None:
    """Version 5's key index is made again with the key before the owner's task."""
    for statement in _PG_KEY_AFTER_USER:
        db._send(statement)


def _add_vector_blocks(db: _PostgresSession) -> None:
    """Version 6 gains the table of sealed blocks of vectors, and every owner's blocks."""
    for statement in _PG_ADD_VECTOR_BLOCKS:
        db._send(statement)
    _seal_every_owner(db)


def _hash_text_keys(db: _PostgresSession) -> None:
    """Version 7's text key index is made again as a hash index."""
    for statement in _PG_HASH_TEXT_KEYS:
        db._send(statement)


def _add_weights(db: _PostgresSession) -> None:
    """Version 8 gains the weight of each owner's memories, by which its words are
    indexed."""
    for statement in _PG_ADD_WEIGHTS:
        db._send(statement)
    _weigh_every_owner(db)


def _add_versions(db: _PostgresSession) -> None:
    """Version 9's memories gain their versions (NULL: 1), and byte-ordered keys."""
    for statement in _PG_ADD_VERSIONS:
        db._send(statement)


def _add_receipts(db: _PostgresSession) -> None:
    """Version 10 gains the table of receipts."""
    for statement in _PG_ADD_RECEIPTS:
        db._send(statement)


def _add_history(db: _PostgresSession) -> None:
    """Version 11 gains the table of superseded versions."""
    for statement in _PG_ADD_HISTORY:
        db._send(statement)


def _index_history(db: _PostgresSession) -> None:
    """Version 12's versions gain their indexes by id and by key."""
    for statement in _PG_INDEX_HISTORY:
        db._send(statement)


def _add_validity(db: _PostgresSession) -> None:
    """Version 13's memories and versions gain their windows of validity (none)."""
    for statement in _PG_ADD_VALIDITY:
        db._send(statement)


def _index_changes(db: _PostgresSession) -> None:
    """Version 14's memories and versions gain their indexes by when each was written
    and superseded."""
    for statement in _PG_INDEX_CHANGES:
        db._send(statement)


def _scope_once(db: _PostgresSession) -> None:
    """Version 15's policies read the scope's settings once a statement."""
    (embedded,) = db._send(_PG_EMBEDDINGS_MADE).fetchone()
    for table in [*(table for table, _ in _PG_GUARDED), *[_PG_EMBEDDINGS] * embedded]:
        db._send(f"ALTER POLICY {table}_scope ON {table} USING ({_PG_SCOPE_POLICY})")


POSTGRES_MIGRATIONS: list[tuple[int, Callable[[_PostgresSession], None]]] = [
    (2, _add_text_keys),
    (3, _add_conversations),
    (4, _add_vectors),
    (5, _add_records),
    (6, _key_after_user),
    (7, _add_vector_blocks),
    (8, _hash_text_keys),
    (9, _add_weights),
    (10, _add_versions),
    (11, _add_receipts),
    (12, _add_history),
    (13, _index_history),
    (14, _add_validity),
    (15, _index_changes),
    (16, _scope_once),
]


def _check_pool_size(size: object) -> int:
    if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= 100:
        raise MemoryInputError(f"pool_size must be an int from 1 to 100, got {_described(size)}"
                               + (" out of range" if type(size) is int else ""))
    return size


def _connection_options(url: str, prepared: bool = False) -> dict[str, Any]:
    """How the store connects: autocommit (it begins its own transactions), statements
    `prepared` on the server or not, the wait bounded by libpq's connect_timeout unless the
    URL sets its own."""
    bounded = {} if "connect_timeout" in url else {"connect_timeout": _PG_CONNECT_SECONDS}
    return {"autocommit": True, "prepare_threshold": _PG_PREPARE_AFTER if prepared else None,
            **bounded}


class _Float4s(bytes):
    """A float4[] parameter in PostgreSQL's binary form, made from little-endian float32:
    psycopg dumps a list of floats a number at a time, 200 µs a vector of 384 dimensions
    (this, 10)."""

    @classmethod
    def of(cls, packed: bytes) -> _Float4s:
        count = len(packed) // 4
        numbers = array.array("I", packed)
        numbers.byteswap()  # each number big-endian, as the server reads it
        each = array.array("I", [int.from_bytes(struct.pack(">i", 4), sys.byteorder)])
        body = array.array("I", bytes(8 * count))
        body[0::2] = each * count  # an element's length before each
        body[1::2] = numbers
        return cls(struct.pack(">iiIii", 1, 0, _PG_FLOAT4, count, 1) + body.tobytes())


class _Float4sDumper(psycopg.adapt.Dumper):
    format = psycopg.pq.Format.BINARY
    oid = _PG_FLOAT4_ARRAY

    def dump(self, obj: Any) -> bytes:
        return bytes(obj)


def _configure(connection: Any) -> None:
    """Metadata comes back on a new connection as the JSON text the store reads on either
    engine (psycopg would parse jsonb itself); vectors go as float4[] in binary."""
    connection.adapters.register_loader("jsonb", psycopg.types.string.TextLoader)
    connection.adapters.register_dumper(_Float4s, _Float4sDumper)


def _postgres_connection(url: str) -> Any:
    """A new connection to the store's database."""
    connection = None
    try:
        connection = psycopg.connect(url, **_connection_options(url))
        _configure(connection)
        return connection
    except psycopg.Error as exc:
        error = _postgres_error(exc, connecting=connection is None)
    if connection is not None:
        connection.close()
    raise error


class _PostgresSession(_Session):
    """One call's transaction on one psycopg 3 connection: each statement's form in its
    dialect, its errors as StoreError, row-level security and advisory locks."""

    dialect = "postgresql"
    reads_map_first = True
    asks_ahead = True
    keys_by_owner = False
    users_per_batch = 64
    # 256 rows' stemming is milliseconds: more than the round trip the ids then take.
    sends_rows_first_from = 256

    def __init__(self, connection: Any, trace: Callable[[str], object] | None = None,
                 settings: _Settings = _PG_WRITABLE) -> None:
        self.connection = connection
        self._trace = trace
        self._settings = settings
        self.pooled = False  # whether a pooler stands between (open_store tells)
        self._named: set[str] = set()  # the users the transaction under way named
        self._seen = ""  # memory.user_ids, as the last statement set it
        self._begin: str | None = None  # a BEGIN not sent yet: it goes with the next one
        self._batching = False
        self._write = self._commit_sent = False  # what the transaction under way is
        self._cursors = itertools.count()
        # Whether the transaction under way sees memory_embeddings (None: not asked yet).
        self._embeddings: bool | None = None

    def open_store(self, read_only: bool, matching: Matching | None, create: bool) -> bool:
        """Check, create or upgrade the store in the database, as the store opens; whether
        its vectors are scored on the server (pgvector's memory_embeddings)."""
        # In a transaction begun alone: a pooler by statement refuses one, in words a
        # pipeline loses as the pooler hangs up.
        self._send(_PG_BEGIN_READ)
        encoded, standby, serving = self._send(_PG_ENCODING).fetchone()
        self._send("COMMIT")
        self.pooled = serving != self.connection.info.backend_pid
        encoding = bytes(encoded).decode("ascii")
        if encoding != "UTF8":
            raise StoreError(f"the database's encoding is {encoding}; a memory store needs"
                             " a UTF8 database (CREATE DATABASE ... ENCODING 'UTF8')")
        if standby and not read_only:
            raise StoreError("the server is a standby (in recovery), which refuses every"
                             " write: open the primary, or name every host with"
                             " target_session_attrs=read-write in the URL; read_only=True"
                             " reads here")
        version = self.version()
        if version in _PG_POLICY_TEXTS:  # a version this code wrote: before any change
            self._check_layout(version)
        self._prepare(writable=not read_only, matching=matching, create=create)
        if version != POSTGRES_SCHEMA_VERSION:
            self._check_layout(POSTGRES_SCHEMA_VERSION)  # what was made
        (privileged,) = self._send(_PG_PRIVILEGED).fetchone()
        if privileged:
            _log.warning("connected as a role that bypasses row-level security: only"
                         " each statement's user filter confines the store's calls")
        made, installed, creates = self._send(_PG_PGVECTOR).fetchone()
        if installed and not made and not read_only and creates:
            made = self._add_embeddings()
        if not made and installed:
            _log.info("the database has pgvector, but the store's vectors are not in it yet:"
                      " a writable open by a role that may create tables in the schema puts"
                      " them there; until then recall by meaning past the kept budget reads"
                      " the vectors into this process")
        elif not made:
            _log.info("the database has no pgvector (CREATE EXTENSION vector, by a"
                      " superuser): recall by meaning past the kept budget reads the vectors"
                      " into this process")
        return bool(made)

    def _add_embeddings(self) -> bool:
        """Make memory_embeddings and give it every vector the store holds, in one
        transaction under the store's lock; whether the table is there after it."""
        with _transaction(self, write=True):
            self._send(_PG_LOCK_STORE)
            (made,) = self._send(_PG_EMBEDDINGS_MADE).fetchone()  # again, under the lock
            if made:
                return True
            for statement in _PG_ADD_EMBEDDINGS:
                self._send(statement)
            self._embeddings = True
            recorded = self.execute(_SQL_EMBEDDER).fetchone()
            users = [user for (user,) in self.execute(_SQL_USERS).fetchall()]
            given = 0
            if recorded is not None:
                dimensions = int(json.loads(recorded[0])["dimensions"])
                for user in users:
                    for rows in self._pages(_PG_USER_VECTORS, (user,), _PG_FILL_ROWS):
                        self.add_embeddings([(memory_id, user, task, vector)
                                             for memory_id, task, vector in rows], dimensions)
                        given += len(rows)
            self._send(_PG_SET_EMBEDDINGS)
        _log.info("made memory_embeddings for pgvector, with the vectors of %d memories", given)
        return True

    def _prepare(self, writable: bool, matching: Matching | None, create: bool) -> None:
        """Create or upgrade the database's schema in one transaction under the store's
        lock, so processes opening a new database at once create it once; refuse a newer
        one, and with `create` False a database that holds none."""
        version = self.version()
        if version > POSTGRES_SCHEMA_VERSION:
            raise SchemaError(f"the database is at schema version {version}, newer than this"
                              f" code's {POSTGRES_SCHEMA_VERSION}")
        if version == POSTGRES_SCHEMA_VERSION:
            return
        if version == 0 and not (create and writable):
            raise StoreNotFound("the database holds no memory store")
        if not writable:
            raise StoreError("the database holds no memory store at this version and was"
                             " opened read-only")
        with _transaction(self, write=True):
            self._send(_PG_LOCK_STORE)
            version = self.version()  # again, under the lock
            if version in _PG_POLICY_TEXTS:
                self._check_layout(version)
            if version == 0:
                for statement in _PG_SCHEMA:
                    self._send(statement)
                self.execute(_SQL_SET_MATCHING, (_recording(matching or "exact"),))
                version = 1
            for target, step in POSTGRES_MIGRATIONS:
                if 0 < version < target:
                    step(self)
            self._send(_PG_SET_VERSION, (str(POSTGRES_SCHEMA_VERSION),))
        _log.info("prepared PostgreSQL schema version %d", POSTGRES_SCHEMA_VERSION)

    def _check_layout(self, version: int) -> None:
        """SchemaError unless the store's objects are the store's own (_PG_OBJECTS) at
        `version`."""
        guarded = {table for table, since in _PG_GUARDED if version >= since}
        # Every object the store may have is asked for: one of a later version is foreign.
        objects = self._send(_PG_OBJECTS, ([*_PG_STORE_OBJECTS, _PG_EMBEDDINGS],)).fetchall()
        if any(name == _PG_EMBEDDINGS for name, *_ in objects):  # made where pgvector is
            guarded.add(_PG_EMBEDDINGS)
        trusted = len(objects) == len(guarded) + 2 and all(
            owned and (name not in guarded or (kind == "r" and secured and forced))
            for name, kind, secured, forced, owned in objects)
        policies = [tuple(row) for row in self._send(_PG_POLICIES)]
        expected = [(table, f"{table}_scope", "PERMISSIVE", "{public}", "ALL",
                     _PG_POLICY_TEXTS[version], None) for table in sorted(guarded)]
        if not trusted or policies != expected:
            raise SchemaError(
                "the database's store tables are not exactly the store's: each must be owned"
                " by the connecting role (or a role whose privileges it has), with row-level"
                " security enabled and forced and only the store's policies")

    def _driver(self, call: Callable[[], Any]) -> Any:
        """call(), a driver error raised as StoreError outside its handler, so that no
        driver error (whose text may quote a value or the URL) hangs on it as context;
        an exception of the caller's that broke a wait on the server, as it came."""
        try:
            return call()
        except psycopg.Error as exc:
            error: BaseException = self._interruption(exc) or self._failure(exc)
        except BaseException:
            self._abandon()
            raise
        raise error

    def _interruption(self, exc: BaseException) -> BaseException | None:
        """The caller's own exception (a signal handler's timeout, KeyboardInterrupt) in
        `exc` or in the context of the driver errors it gave way to, the connection then
        given up; None for a driver error alone."""
        seen: BaseException | None = exc
        while isinstance(seen, psycopg.Error):
            seen = seen.__context__
        if seen is not None:
            self._abandon()
        return seen

    def _failure(self, exc: Exception) -> StoreError:
        """The StoreError for a driver error: a lost connection says what became of the
        transaction; any other names its class and SQLSTATE."""
        if _PG_POOLED_BY_STATEMENT in str(exc):
            return StoreError("the connection pooler pools by statement, and each of the"
                              " store's calls is a transaction of several: pool by"
                              " transaction (PgBouncer's pool_mode = transaction) or by"
                              " session")
        if not self.connection.closed:
            return _postgres_error(exc)
        if self._write and self._commit_sent:
            return OutcomeUnknown(
                "the connection to the PostgreSQL server was lost after the write's COMMIT"
                " was sent: it may or may not have been applied; check (memories, count or"
                " its source) before writing it again")
        if self._write:
            return ConnectionLost("the connection to the PostgreSQL server was lost before"
                                   " the write's COMMIT: the write was not applied")
        return ConnectionLost("the connection to the PostgreSQL server was lost")

    def _abandon(self) -> None:
        """Give up a connection whose wait on the server was broken off: cancel what the
        server runs and close it, so that the server rolls the transaction back and frees
        its locks at once, whatever state the driver was left in. The next call connects
        anew."""
        with contextlib.suppress(Exception):
            self.connection.cancel()
        with contextlib.suppress(Exception):
            self.connection.close()
        self._begin, self._batching = None, False

    def _send(self, text: str, parameters: Any = ()) -> Any:
        """Run PostgreSQL text, with a BEGIN not sent yet going before it."""
        if self._trace is not None:
            self._trace(text)
        begin, self._begin = self._begin, None
        if begin is None:
            return self._driver(lambda: self.connection.execute(text, parameters))
        return self._driver(lambda: self._send_after(begin, text, parameters))

    def _send_after(self, begin: str, text: str, parameters: Any) -> Any:
        # In a batch already, BEGIN joins it: a pipeline of its own would wait here.
        with contextlib.nullcontext() if self._batching else self.connection.pipeline():
            self._began(begin)
            return self.connection.execute(text, parameters)

    def _began(self, begin: str) -> None:
        """Send the BEGIN and the transaction's settings, without reading their results."""
        self.connection.execute(begin)
        self.connection.execute(self._settings.local, self._settings.values)

    def _began_together(self, begin: str) -> None:
        with self.connection.pipeline():
            self._began(begin)

    def _form(self, sql: str) -> str:
        form = sql.form(self.dialect) if isinstance(sql, _Sql) else None
        if form is None:
            raise StoreError("the store has no PostgreSQL form of a statement it needs")
        return form

    def _shaped(self, sql: str, shape: str) -> str | None:
        """The statement's form in this dialect of another shape (_SHAPES), if it has one."""
        self._form(sql)  # one with no form at all is refused as it is
        return cast(_Sql, sql).form(self.dialect, shape)

    def execute(self, sql: str, parameters: Any = ()) -> Any:
        return self._send(self._form(sql), parameters)

    def executemany(self, sql: str, parameters: Iterable[Any]) -> None:
        text, rows = self._form(sql), list(parameters)
        many = self._shaped(sql, "many")
        # One row's values dumped alone: as arrays of one they cost psycopg several times
        # more (0.06 ms against 0.01 for a memory's row), a durable write's every statement.
        if len(rows) == 1:
            self._send(text, rows[0])
            return
        if many is not None:
            if rows:
                self._send(many, [list(column) for column in zip(*rows, strict=True)])
            return
        cursor = self.connection.cursor()
        if self._trace is not None:
            self._trace(text)
        self._driver(lambda: cursor.executemany(text, rows))

    def blocks(self, sql: str, parameters: Any, size: int) -> Iterator[list[Any]]:
        # A server-side cursor: the server keeps what is not fetched yet, and plans for the
        # first rows (cursor_tuple_fraction), so an index's order rather than a sort.
        text = self._form(sql)
        # No cursor is declared in a pipeline: there a write reads the rows it wrote to
        # seal (and the owner's fewer than a block before them), all at once.
        if self._batching:
            cursor = self._send(text, parameters)
            while rows := self._driver(lambda: cursor.fetchmany(size)):
                yield rows
            return
        if self._begin is not None:  # a cursor is declared in the transaction
            begin, self._begin = self._begin, None
            self._driver(lambda: self._began_together(begin))
        if self._trace is not None:
            self._trace(text)
        # Named apart: a read goes through one owner's blocks while it reads rows between.
        name = f"memory_blocks_{next(self._cursors)}"
        with self.connection.cursor(name=name, binary=True) as cursor:
            self._driver(lambda: cursor.execute(text, parameters))
            while rows := self._driver(lambda: cursor.fetchmany(size)):
                yield rows

    @contextlib.contextmanager
    def _pipeline(self) -> Iterator[None]:
        """Send the block's statements without waiting for each one's result (psycopg's
        pipeline); a statement whose result is read waits for all before it."""
        error: BaseException | None = None
        try:
            with self.connection.pipeline():
                self._batching = True
                yield
        except psycopg.Error as exc:
            error = self._interruption(exc) or self._failure(exc)
        except BaseException:
            self._abandon()
            raise
        finally:
            self._batching = False
        if error is not None:
            raise error

    def batch(self) -> contextlib.AbstractContextManager[object]:
        return self._pipeline()

    def send_now(self) -> None:
        # psycopg hands libpq a statement whole but sends only what the socket takes,
        # leaving the rest (most of a batch's rows: megabytes) until its next call.
        pgconn = self.connection.pgconn

        def flush() -> None:
            while pgconn.flush():
                select.select([], [pgconn.socket], [])
        self._driver(flush)

    @property
    def in_transaction(self) -> bool:
        if self.connection.closed:  # given up: the server rolled back
            return False
        return self._begin is not None or bool(
            self.connection.info.transaction_status != psycopg.pq.TransactionStatus.IDLE)

    def begin(self, write: bool) -> None:
        self._write, self._commit_sent = write, False
        self._embeddings = None
        # Sent with the transaction's first statement: a round trip saved.
        self._begin = self._settings.write if write else self._settings.read

    def _end(self, text: str) -> None:
        if self._begin is not None:
            self._begin = None  # nothing was sent
        else:
            self._send(text)

    def commit(self) -> None:
        self._commit_sent = True
        self._end("COMMIT")

    def rollback(self) -> None:
        self._end("ROLLBACK")

    def last_statement(self, sql: str, parameters: Any) -> Any:
        with self.batch():  # the COMMIT goes in the same round trip
            found = self.execute(sql, parameters)
            self.commit()
        return found

    def confine(self, users: set[str] | None, write: bool) -> Any:
        named = ",".join(sorted(users or ()))
        operator = "off" if users is not None else "on"
        self._named, self._seen = set(users or ()), named
        if not write:
            return self._send(_PG_SCOPE, (named, operator))
        with self.batch():  # the rule is read after the locks, but in the same round trip
            if users is None or len(users) > _PG_MOST_USER_LOCKS:
                self._send(_PG_SCOPE_WRITE_ALL, (named, operator))
            else:
                self._send(_PG_SCOPE_WRITE, (named, operator, named))
            return self._send(_PG_RULE)

    def recorded_rule(self, found: Any = None) -> str | None:
        if found is None:
            return super().recorded_rule()
        row = found.fetchone()  # the rule first, and whether memory_embeddings is made last
        self._embeddings = bool(row[-1])
        return None if row[0] is None else str(row[0])

    def _has_embeddings(self) -> bool:
        """Whether the transaction under way sees memory_embeddings: as it read with its
        matching rule, else asked now."""
        if self._embeddings is None:
            (self._embeddings,) = self._send(_PG_EMBEDDINGS_MADE).fetchone()
        return bool(self._embeddings)

    def add_vectors(self, rows: list[tuple[int, str, str | None, bytes]],
                    dimensions: int) -> None:
        super().add_vectors(rows, dimensions)
        if rows and self._has_embeddings():
            self.add_embeddings(rows, dimensions)

    def add_embeddings(self, rows: list[tuple[int, str, str | None, bytes]],
                       dimensions: int) -> None:
        """Write each vector of the rows (id, user, task, vectors) to memory_embeddings."""
        owners, ids, parts, tasks, starts = [], [], [], [], []
        at = 0
        for memory_id, user, task, vector in rows:
            for part in range(len(vector) // (4 * dimensions)):
                owners.append(user)
                ids.append(memory_id)
                parts.append(part)
                tasks.append(task)
                starts.append(at)
                at += dimensions
        self._send(_PG_INSERT_EMBEDDINGS, (_Float4s.of(b"".join(row[3] for row in rows)),
                                           dimensions, owners, ids, parts, tasks, starts))

    def served_vectors(self, key: _ScopeKey, dimensions: int,
                       approximate: bool) -> _ServedVectors | None:
        if not self._has_embeddings():
            return None
        return _ServedVectors(self, key, dimensions, approximate)

    def _pages(self, text: str, parameters: Any, size: int) -> Iterator[list[Any]]:
        """The rows of PostgreSQL text, `size` at a time, from a server-side cursor."""
        if self._trace is not None:
            self._trace(text)
        with self.connection.cursor(name=f"memory_pages_{next(self._cursors)}",
                                    binary=True) as cursor:
            self._driver(lambda: cursor.execute(text, parameters))
            while rows := self._driver(lambda: cursor.fetchmany(size)):
                yield rows

    def narrow(self, users: list[str]) -> None:
        if not self._named.issuperset(users):  # a narrowing never widens what it sees
            raise StoreError("the store tried to see users its transaction did not name")
        seen = ",".join(sorted(users))
        if seen != self._seen:
            self._send(_PG_NARROW, (seen,))
            self._seen = seen

    def ask(self, sql: str, parameters: Any) -> Callable[[], list[Any]]:
        return self.execute(sql, parameters).fetchall  # type: ignore[no-any-return]

    def ask_each(self, sql: str, rows: list[tuple[Any, ...]]) -> Callable[[], list[list[Any]]]:
        each = self._shaped(sql, "each")
        # One row's parameters given as they are: a statement reading rows of JSON, joined
        # laterally, takes longer to plan (0.1 to 0.3 ms) than the plain one (a write's
        # three reads, each planned again where no statement is prepared: behind a pooler).
        if each is None or len(rows) < 2:
            return super().ask_each(sql, rows)
        found = self._send(each, (json.dumps(rows),))

        def read() -> list[list[Any]]:
            results: list[list[Any]] = [[] for _ in rows]
            for position, *row in found.fetchall():
                results[position - 1].append(tuple(row))
            return results
        return read

    def ask_new_ids(self, count: int) -> Callable[[], list[int]]:
        found = self._send(_PG_NEXT_IDS, (count,))
        return lambda: sorted(i for (i,) in found)

    def version(self) -> int:
        (exists,) = self._send(_PG_TABLE_EXISTS).fetchone()
        if not exists:
            return 0
        row = self._send(_PG_VERSION).fetchone()
        if row is None or re.fullmatch(r"[1-9][0-9]{0,8}", row[0]) is None:
            raise SchemaError("the database's store_settings record no schema version this"
                              " code wrote: not a memory store")
        return int(row[0])

    def size(self) -> int:
        return int(self._send(_PG_SIZE).fetchone()[0])

    def compact(self) -> None:
        # VACUUM skips, with only a warning, a table its role may not vacuum.
        objects = self._send(_PG_OBJECTS, ([*_PG_STORE_OBJECTS, _PG_EMBEDDINGS],)).fetchall()
        owned = [row[4] for row in objects]
        if not (owned and all(owned)):
            raise StoreError("compact needs the connecting role to own the store's tables"
                             " (or to have the privileges of their owner)")
        embedded = any(row[0] == _PG_EMBEDDINGS for row in objects)
        self._send(_PG_VACUUM + f", {_PG_EMBEDDINGS}" * embedded)
        _log.info("vacuumed the store's tables")

    def check(self) -> dict[str, Any]:
        raise StoreError("check() is SQLite's integrity check of the file; on PostgreSQL"
                         " use the amcheck extension")

    def backup(self, destination: str) -> None:
        raise StoreError("backup() copies an SQLite file; on PostgreSQL use pg_dump")



class _ServedVectors:
    """A scope's vectors as the server scores them (pgvector): recall's best of them, each
    returned vector scored again here as the store scores those it reads, so that a scope
    scores alike on either side of the kept budget."""

    def __init__(self, db: _PostgresSession, key: _ScopeKey, dimensions: int,
                 approximate: bool) -> None:
        self.db, self.key, self.dimensions, self.approximate = db, key, dimensions, approximate

    def best(self, query: bytes, limit: int, expired: set[int],
             bonus: tuple[Any, Any] = ((), ()), admitted: _Admitted | None = None
             ) -> tuple[list[tuple[float, int]], dict[int, float]]:
        asked = _Float4s.of(query)
        refused = sorted(expired | (admitted.excluded if admitted is not None else set()))
        allowed = None if admitted is None or admitted.allowed is None \
            else sorted(admitted.allowed)
        more = dict(zip(map(int, bonus[0]), map(float, bonus[1]), strict=True))
        # More rows than `limit`: the server's distances round otherwise than the store's
        # cosines, so the store orders a margin past the last of them itself; and a
        # memory of several texts has a row for each, so more are asked for while the
        # rows returned hold fewer than `limit` memories.
        wanted = 2 * limit + 16
        while True:
            rows = self._nearest(asked, refused, allowed, more, wanted)
            held = {memory_id for memory_id, *_ in rows}
            if len(held) >= limit or not rows or rows[0][2] < wanted:
                break
            wanted *= 4
        if self.approximate and len(held) < limit:  # the index's scan stopped short
            self.approximate = False
            return self.best(query, limit, expired, bonus, admitted)
        ids, cosines = _Vectors(sorted((memory_id, bytes(vector)) for memory_id, vector, _ in rows
                                       if vector is not None), self.dimensions).cosines(query)
        scored = dict(zip(map(int, ids), map(float, cosines), strict=True))
        best = heapq.nlargest(limit, ((scored.get(memory_id, 0.0) + more.get(memory_id, 0.0),
                                       memory_id) for memory_id in held))
        return best, {memory_id: scored.get(memory_id, 0.0) for _, memory_id in best}

    def _nearest(self, asked: _Float4s, refused: list[int], allowed: list[int] | None,
                 more: dict[int, float], wanted: int) -> list[tuple[int, bytes | None, int]]:
        """The memories of the server's `wanted` best rows, each with its vectors (None
        without) and how many rows there were, in no order."""
        key = self.key
        filtered = _PG_ADMITTED_ALL if allowed is None else _PG_ADMITTED_SOME
        admitted = () if allowed is None else (allowed,)
        if more:
            nearest = _PG_NEAREST_WITH.format(admitted=filtered)
            asking: tuple[Any, ...] = (list(more), list(more.values()), asked, *key, refused,
                                       *admitted, refused, *admitted, *key, wanted)
        elif not self.approximate:
            nearest = _PG_NEAREST.format(admitted=filtered)
            asking = (*key, refused, *admitted, asked, wanted)
        else:
            self.db._send(_PG_HNSW_SCAN, (str(min(_PG_MOST_EF_SEARCH, max(64, wanted))),))
            nearest = _PG_NEAREST_INDEXED.format(admitted=filtered, dimensions=self.dimensions)
            asking = (*key, refused, *admitted, asked, wanted)
        return self.db._send(_PG_CHOSEN.format(nearest=nearest),  # type: ignore[no-any-return]
                             (*asking, *key)).fetchall()


def _dropped(connection: Any) -> bool:
    """Whether the server has ended an idle connection (a restart, a terminated backend,
    a proxy's idle timeout): its last words, or the end of the stream, are already waiting
    to be read. One poll of the socket, no round trip."""
    if connection.closed:
        return True
    try:
        readable, _, _ = select.select([connection.pgconn.socket], [], [], 0)
    except (OSError, ValueError, psycopg.Error):
        return True
    return bool(readable)


class _QuietRecoveries(logging.Filter):
    """Drops psycopg's warnings about a connection the store gives up and recovers from
    (it logs the recovery itself, at INFO), and about a server the pool cannot reach (the
    call that waited for it raises StoreError saying so): their text may name the URL's
    host or user, and the caller's log shows no failure for what recovers."""

    RECOVERED = ("discarding closed connection", "error ignored terminating",
                 "error ignored exiting", "error connecting in")

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.RECOVERED)


_QUIET = _QuietRecoveries()


class Engine(_Engine):
    """A PostgreSQL database through a pool of connections (psycopg_pool), one per call in
    flight, so that threads sharing a store run their calls side by side."""

    name = "PostgreSQL"
    options = frozenset({"statement_timeout", "pool_size", "pool_timeout"})

    def __init__(self, url: str, settings: _Settings, pool_size: int,
                 pool_timeout: float, prepared: bool = False) -> None:
        self._trace: Callable[[str], object] | None = None
        self._settings = settings
        self._pool_timeout = pool_timeout
        for name in ("psycopg", "psycopg.pool"):
            logging.getLogger(name).addFilter(_QUIET)  # once: a filter is added once

        self._pool = psycopg_pool.ConnectionPool(
            url, min_size=1, max_size=pool_size, timeout=pool_timeout, open=True,
            kwargs=_connection_options(url, prepared), name="memory",
            configure=_configure)
        self._pool_errors = (psycopg_pool.PoolTimeout, psycopg_pool.PoolClosed)

    @classmethod
    def open(cls, path: str, *, read_only: bool, durable: bool, matching: Matching | None,
             create: bool, **options: Any) -> Engine:
        url = path
        statement_timeout = options.get("statement_timeout")
        if statement_timeout is not None:
            statement_timeout = _check_seconds("statement_timeout", statement_timeout)
        pool_size = _check_pool_size(options.get("pool_size", 10))
        pool_timeout = _check_seconds("pool_timeout", options.get("pool_timeout", 30.0))
        settings = _Settings.of(read_only, durable, statement_timeout)
        # One connection of its own first, so that a server out of reach, or a database
        # this code must refuse, fails the open at once with the reason.
        connection = _postgres_connection(url)
        try:
            first = _PostgresSession(connection, settings=settings)
            served = first.open_store(read_only, matching, create)
        finally:
            connection.close()
        if first.pooled:
            _log.info("the server is reached through a pooler: no statement is prepared"
                      " on it")
        engine = cls(url, settings, pool_size, pool_timeout, prepared=not first.pooled)
        engine.serves_vectors = served
        return engine

    def set_trace_callback(self, trace: Callable[[str], object] | None) -> None:
        self._trace = trace

    @contextlib.contextmanager
    def session(self) -> Iterator[_Session]:
        """A connection from the pool for one call, given back after it: a broken one is
        discarded by the pool, which connects anew."""
        try:
            connection = self._live_connection()
        except self._pool_errors:
            error = StoreError(f"no connection to the PostgreSQL server within"
                               f" {self._pool_timeout:g} s: it is down or out of reach, or"
                               " every connection of the pool is in use")
        except psycopg.Error as exc:
            error = _postgres_error(exc, connecting=True)
        else:
            try:
                yield _PostgresSession(connection, self._trace, self._settings)
            finally:
                self._pool.putconn(connection)
            return
        raise error

    def _live_connection(self) -> Any:
        """A connection from the pool that the server has not ended. One it has, closed
        and given back, the pool discards and replaces; this takes the next at once (the
        pool's own check hook would wait a second between tries)."""
        for _ in range(self._pool.max_size):
            connection = self._pool.getconn()
            if not _dropped(connection):
                return connection
            connection.close()
            self._pool.putconn(connection)
            _log.info("the PostgreSQL server had ended a pooled connection: taking another")
        return self._pool.getconn()

    def close(self) -> None:
        self._pool.close()


