"""The PostgreSQL engine, on a throw-away server the tests start and stop themselves.

The server: initdb into a temporary folder (as the `postgres` user when the tests run as
root, since initdb refuses root), pg_ctl start on a Unix socket in that folder only, with
fsync off, stopped by its pid at the end. The store connects as a role that is neither a
superuser nor BYPASSRLS, so row-level security binds it. Where the server's binaries are
missing the tests skip, saying so; with MEMORY_REQUIRE_POSTGRES=1 (CI) they fail instead.
"""

from __future__ import annotations

import collections
import itertools
import json
import logging
import multiprocessing
import os
import pathlib
import random
import re
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import initialize, invariant, rule, run_state_machine_as_test

import memory
from helpers import (
    ALICE,
    ALICE_WORK,
    BOB,
    PG_BEFORE_SCOPE_ONCE,
    PG_BEFORE_VALIDITY,
    TOUCHES_MEMORY_DATA,
    WORD_RANKS,
    SetClock,
    cli,
)
from machine import INDEX_FROMS, WEIGHED_BYS, StoreMatchesModel
from memory import (
    MemoryInputError,
    MemoryStore,
    SchemaError,
    Scope,
    StoreError,
    StoreNotFound,
    fixed_clock,
)
from model import (
    RULES_HERE,
    Memory,
    Model,
    index_problems_at,
    owner_connection,
    transactions_left,
)
from pg_server import APP_ROLE, PORT, Pooler, Server, database_of

# The engine needs the `postgres` extra; the server fixture fails instead of skipping
# where CI requires it.
pytest.importorskip("psycopg", reason="the PostgreSQL engine needs the `postgres` extra")
import memory_postgres  # noqa: E402

# The tests of the engine's contract and its concurrency marked so run a second time through
# PgBouncer, pooling by transaction over two server connections (`url`, and the store
# made of it), as users who outgrow one host run the server.
pooled = pytest.mark.parametrize("url", ["direct", "pooled"], indirect=True)


@pytest.fixture
def store(url: str) -> Iterator[MemoryStore]:
    with MemoryStore(url, clock=fixed_clock()) as opened:
        yield opened


def ids(results: list[memory.Recalled] | list[memory.Memory]) -> list[int]:
    return [result["id"] for result in results]


# -- the same behaviour --------------------------------------------------------------

@pooled
def test_scope_rule_holds_on_postgres(store: MemoryStore) -> None:
    own = store.remember(ALICE, "user", "Alice is vegetarian.", "s")
    task = store.remember(ALICE, "task", "Book the hotel by the river.", "s")
    other_task = store.remember(ALICE_WORK, "task", "The hotel budget is fixed.", "s")
    bobs = store.remember(BOB, "user", "Bob is vegetarian and likes hotels.", "s")
    assert ids(store.recall(ALICE, "vegetarian hotel")) == [task, own]
    assert ids(store.recall(ALICE_WORK, "vegetarian hotel")) == [other_task, own]
    assert ids(store.recall(BOB, "vegetarian hotel")) == [bobs]
    assert store.count(ALICE) == 2 and store.count(BOB) == 1
    assert [m["id"] for m in store.memories(ALICE)] == [own, task]
    assert store.forget(BOB, own) is False  # another user's id is "not found"
    assert store.forget(ALICE_WORK, task) is False  # another task's too
    assert store.forget(ALICE, task) is True
    assert store.erase_user("alice") == 2
    assert store.count(ALICE) == 0 and store.count(BOB) == 1


@pooled
def test_results_match_sqlite_on_the_same_writes(url: str, tmp_path: pathlib.Path) -> None:
    """Every call, on both engines, from the same writes: the same answers."""
    answers = []
    for target in (url, str(tmp_path / "m.db")):
        with MemoryStore(target, clock=fixed_clock()) as opened:
            opened.remember_many([(scope, level, f"{word} note {n} river", "s", ttl)
                                  for n, (scope, level, word, ttl) in enumerate(
                                      itertools.product([ALICE, ALICE_WORK, BOB],
                                                        ["user", "task"],
                                                        ["hotel", "train", "vegetarian"],
                                                        [None, 90]))])
            opened.clock()
            opened.clock()  # the ttl of 90 s has run out
            first = opened.memories(ALICE)[0]["id"]
            answers.append([
                opened.recall(ALICE, "hotel river vegetarian", 20),
                opened.recall(ALICE, "hotel river vegetarian", 5, rank="idf"),
                opened.count(ALICE), opened.memories(ALICE_WORK),
                opened.revise(ALICE, first, "The hotel is by the station.", "fix"),
                opened.forget_source(ALICE_WORK, "s"), opened.purge_expired(),
                opened.memories(BOB, conversation="talk"),
                opened.forget_conversation(BOB, "talk"),
                opened.export_user("bob"), opened.stats()["memories"],
            ])
    assert answers[0] == answers[1]


@pooled
def test_every_statement_carries_the_user_filter(store: MemoryStore) -> None:
    statements: list[str] = []
    store.db.set_trace_callback(statements.append)
    store.remember(ALICE, "user", "Alice is vegetarian.", "s", ttl=30)
    store.remember_many([(BOB, "user", "Bob reads with a screen reader.", "s"),
                         (ALICE_WORK, "task", "Conference hotel.", "s")] * memory.INDEX_FROM)
    store.recall(ALICE_WORK, "vegetarian hotel reader")  # indexed, and one not (user level)
    store.recall(ALICE, "vegetarian hotel reader", rank="idf")
    store.recall(ALICE_WORK, "vegetarian hotel reader", context=True)
    store.recall(BOB, "reader", context=True)
    store.remember(BOB, "user", "A new screen reader.", "talk/turn-2")
    store.recall(BOB, "reader", context=True)  # the kept copy grows
    store.count(ALICE)
    store.memories(ALICE)
    memory_id = store.remember(ALICE, "task", "Book the hotel.", "s")
    store.revise(ALICE, memory_id, "Book the hotel by the river.", "s")
    store.forget(ALICE, memory_id)
    store.forget_source(ALICE_WORK, "s")
    store.memories(BOB, conversation="talk")
    store.forget_conversation(BOB, "talk")
    store.export_user("alice")
    store.erase_user("bob")
    store.db.set_trace_callback(None)
    touching = [s for s in statements if TOUCHES_MEMORY_DATA.search(s)]
    assert len(touching) >= 15
    assert sum("AND conversation = %s" in s for s in touching) == 2
    grown = {s.split(" FROM ")[0] for s in touching
             if "AND id > " in s and "conversation = " not in s}
    assert grown == {"SELECT (SELECT count(*)", "SELECT id, conversation"}
    for statement in touching:
        # A read for many owners at once runs its body once for each row of its arrays;
        # an update of many rows joins the rows of its arrays, each naming its owner.
        each = statement.startswith("SELECT wanted.n, found.* FROM (SELECT listed.n,")
        many = re.match(r"(UPDATE memory_words SET [^;]* FROM|DELETE FROM memory_words USING)"
                        r" unnest\(%b::", statement) is not None
        assert ("WHERE user_id = wanted.user_id" if each else "WHERE user_id = given.owner"
                if many else "WHERE user_id = %s") in statement, statement
        assert ("%b" if many else "%s") in statement
        assert "alice" not in statement and "bob" not in statement
    assert any(s.startswith("UPDATE memory_words SET ids = ids || given") for s in touching)
    assert any(s.startswith("UPDATE memory_words SET first_id = given") for s in touching)
    assert any(s.startswith("SELECT wanted.n") for s in touching)


@pooled
def test_row_level_security_confines_a_statement_without_the_user_filter(
        store: MemoryStore) -> None:
    """A statement deliberately written without `WHERE user_id = ` still sees only the
    users its transaction named."""
    store.remember(ALICE, "user", "Alice is vegetarian.", "s")
    store.remember(BOB, "user", "Bob is vegetarian.", "s")
    unfiltered = memory._sql("SELECT user_id, text FROM memories")
    with store._snapshot({"alice"}) as db:
        seen = db.execute(unfiltered).fetchall()
    with store._snapshot(set()) as db:
        nobody = db.execute(unfiltered).fetchall()
    with store._writing({"alice"}) as db, pytest.raises(StoreError):
        db.execute(memory._SQL_INSERT, (99, "bob", None, "planted", "s",
                                        "2026-10-20T09:00:00+00:00", None))
    assert seen == [("alice", "Alice is vegetarian.")]
    assert nobody == []
    assert [m["text"] for m in store.memories(BOB)] == ["Bob is vegetarian."]


def test_a_statement_without_a_postgres_form_is_refused(store: MemoryStore) -> None:
    with store._snapshot({"alice"}) as db, pytest.raises(StoreError, match="no PostgreSQL"):
        db.execute("SELECT text FROM memories")


def test_schema_keys_begin_with_user_id(url: str, server: Server) -> None:
    MemoryStore(url).close()
    database = url.split("@/", 1)[1].split("?")[0]
    keys = server.admin(
        "SELECT conrelid::regclass::text, pg_get_constraintdef(oid) FROM pg_constraint"
        " WHERE contype IN ('p', 'u') AND conrelid::regclass::text LIKE 'memor%'", database)
    assert len(keys) == 8
    assert all(definition.startswith("PRIMARY KEY (user_id,") for _, definition in keys)
    forced = server.admin("SELECT relname, relrowsecurity, relforcerowsecurity FROM pg_class"
                          " WHERE relname LIKE 'memor%' AND relkind = 'r'", database)
    assert sorted(forced) == [(name, True, True)
                              for name in ("memories", "memory_counts", "memory_fields",
                                           "memory_history", "memory_receipts",
                                           "memory_vector_blocks",
                                           "memory_vectors", "memory_words")]


def test_newer_schema_is_refused_and_the_version_is_read(url: str, server: Server) -> None:
    MemoryStore(url).close()
    database = url.split("@/", 1)[1].split("?")[0]
    server.admin("UPDATE store_settings SET value = '99' WHERE name = 'schema_version'",
                 database)
    with pytest.raises(SchemaError, match="newer"):
        MemoryStore(url)


def test_errors_carry_no_value_and_no_driver_error(url: str, server: Server) -> None:
    secret = "hunter2-secret"
    with pytest.raises(StoreError) as caught:
        MemoryStore(url.replace(APP_ROLE, secret))
    assert secret not in str(caught.value) and caught.value.__cause__ is None
    with MemoryStore(url) as opened:
        with pytest.raises(MemoryInputError):
            opened.remember(ALICE, "user", "x\x00" + secret, "s")
        assert opened.count(ALICE) == 0


@pooled
def test_read_only_and_operator_calls(url: str) -> None:
    with MemoryStore(url, clock=fixed_clock()) as opened:
        opened.remember(ALICE, "user", "Alice is vegetarian.", "s")
        opened.remember(BOB, "task", "Bob reads.", "s")
        assert opened.stats()["memories"] == 2 and opened.stats()["users"] == 2
        assert opened.stats()["schema_version"] == memory_postgres.POSTGRES_SCHEMA_VERSION
        opened.reindex("stems")
        opened.compact()
        with pytest.raises(StoreError, match="amcheck"):
            opened.check()
        with pytest.raises(StoreError, match="pg_dump"):
            opened.backup("/nonexistent/x.db")
    with MemoryStore(url, read_only=True) as reader:
        assert reader.matching == "stems"
        assert ids(reader.recall(ALICE, "vegetarians")) == [1]
        with pytest.raises(StoreError, match="read_only"):
            reader.remember(ALICE, "user", "more", "s")


def test_cli_moves_a_user_between_engines(url: str, tmp_path: pathlib.Path) -> None:
    path = tmp_path / "m.db"
    with MemoryStore(path) as opened:
        opened.remember(ALICE, "user", "Alice is vegetarian.", "s")
        opened.remember(ALICE, "task", "Book the hotel.", "s")
    MemoryStore(url).close()
    command = [sys.executable, "-m", "memory"]
    exported = subprocess.run([*command, "export", str(path), "--user", "alice"],
                              capture_output=True, timeout=60, check=True)
    imported = subprocess.run([*command, "import", url, "-"], input=exported.stdout,
                              capture_output=True, timeout=60)
    assert imported.returncode == 0, imported.stderr
    stats = subprocess.run([*command, "stats", url], capture_output=True, text=True,
                           timeout=60, check=True)
    assert json.loads(stats.stdout)["memories"] == 2
    with MemoryStore(url) as opened:
        assert [m["text"] for m in opened.memories(ALICE)] == [
            "Alice is vegetarian.", "Book the hotel."]


# -- processes -----------------------------------------------------------------------

def open_and_write(target: str, user: str, count: int) -> list[int]:
    written = []
    with MemoryStore(target) as opened:
        for n in range(count):
            written.append(opened.remember(Scope(user, "t"), "user", f"note {n} of {user}", "s"))
    return written


@pooled
def test_concurrent_first_opens_create_the_schema_once(url: str) -> None:
    with multiprocessing.get_context("spawn").Pool(8) as pool:
        results = [pool.apply_async(open_and_write, (url, f"user-{n}", 1)) for n in range(8)]
        written = [result.get(timeout=120) for result in results]
    assert len({i for ids in written for i in ids}) == 8
    with MemoryStore(url) as opened:
        assert opened.stats()["memories"] == 8


@pooled
def test_eight_processes_write_250_each_with_exact_counts(url: str) -> None:
    """Two processes per user, so a user's writes contend for its lock; the word index
    must come out exact, as one writer at a time would leave it."""
    MemoryStore(url).close()
    with multiprocessing.get_context("spawn").Pool(8) as pool:
        results = [pool.apply_async(open_and_write, (url, f"user-{n % 4}", 250))
                   for n in range(8)]
        written = [result.get(timeout=300) for result in results]
    every = [i for ids in written for i in ids]
    assert len(set(every)) == 2000
    assert all(ids == sorted(ids) for ids in written)
    with MemoryStore(url) as opened:
        for n in range(4):
            assert opened.count(Scope(f"user-{n}", "t")) == 500
        found = opened.recall(Scope("user-1", "t"), "note 7 of user-1", 20)
        assert len(found) == 20
    assert index_problems_at(url) == []


def write_forever(target: str, user: str, acknowledged: Any) -> None:
    with MemoryStore(target) as opened:
        for n in itertools.count():
            memory_id = opened.remember(Scope(user, "t"), "user", f"note {n}", "s")
            acknowledged.put(memory_id)


@pooled
def test_sigkill_of_writers_loses_nothing_acknowledged(url: str) -> None:
    MemoryStore(url).close()
    context = multiprocessing.get_context("spawn")
    acknowledged = context.Queue()
    writers = [context.Process(target=write_forever, args=(url, f"user-{n}", acknowledged))
               for n in range(4)]
    for writer in writers:
        writer.start()
    seen: list[int] = []
    deadline = time.monotonic() + 60
    while len(seen) < 200 and time.monotonic() < deadline:
        seen.append(acknowledged.get(timeout=60))
    for writer in writers:
        os.kill(writer.pid or 0, signal.SIGKILL)
    for writer in writers:
        writer.join(timeout=30)
    while not acknowledged.empty():
        seen.append(acknowledged.get(timeout=5))
    with MemoryStore(url) as opened:
        stored = {m["id"] for n in range(4) for m in opened.memories(Scope(f"user-{n}", "t"))}
        total = sum(opened.count(Scope(f"user-{n}", "t")) for n in range(4))
        opened.remember(ALICE, "user", "still writable", "s")
    assert len(seen) >= 200
    assert set(seen) <= stored
    assert total == len(stored)


# -- the model -----------------------------------------------------------------------

ROWS_FIRST_FROM = memory_postgres._PostgresSession.sends_rows_first_from


class PostgresMatchesModel(StoreMatchesModel):
    """The state machine of test_properties.py, on a new database per example: the same
    rules, the same model, the same invariants (the index read by the server's owner)."""

    server: Server

    @initialize(matching=st.sampled_from(RULES_HERE), index_from=INDEX_FROMS,
                weighed_by=WEIGHED_BYS, rows_first_from=st.sampled_from([1, ROWS_FIRST_FROM]))
    def open_a_new_store(self, matching: memory.Matching, index_from: int, weighed_by: int,
                         rows_first_from: int) -> None:
        memory.INDEX_FROM, memory._WEIGHED_BY = index_from, weighed_by
        # Every write sends its rows first, or only a batch of the store's size does.
        memory_postgres._PostgresSession.sends_rows_first_from = rows_first_from
        self.url = self.server.new_database()
        self.store = MemoryStore(self.url, clock=self.clock, matching=matching)
        self.model = Model(matching)

    def purged_text_is_gone(self, gone: list[Memory]) -> None:
        pass  # PostgreSQL keeps dead rows' bytes until VACUUM and in its WAL: README says

    @rule(name_the_rule=st.booleans())
    def reopen(self, name_the_rule: bool) -> None:
        self.store.close()
        self.store = MemoryStore(self.url, clock=self.clock,
                                 matching=self.model.matching if name_the_rule else None)
        assert self.store.matching == self.model.matching

    @invariant()
    def index_matches_the_memories(self) -> None:
        assert index_problems_at(self.url) == []

    def teardown(self) -> None:
        memory_postgres._PostgresSession.sends_rows_first_from = ROWS_FIRST_FROM
        super().teardown()


def test_state_machine_against_the_model(server: Server) -> None:
    PostgresMatchesModel.server = server
    # Typed from hypothesis 6.16x on, untyped before: the ignore holds for both.
    run_state_machine_as_test(  # type: ignore[no-untyped-call, unused-ignore]
        PostgresMatchesModel, settings=settings(
            max_examples=25, stateful_step_count=30, deadline=None,
            suppress_health_check=[HealthCheck.too_slow]))


def test_top_k_reads_newest_first_and_agrees_with_the_model(url: str) -> None:
    """Small postings rows and no reading everything at once: recall on PostgreSQL crosses
    row boundaries, probes and reads rare words through, with the model's answers."""
    rng = random.Random(7)
    words = "sun sun sun sun sun sea sea sea sky sky owl elk fig".split()
    clock, created = fixed_clock(), fixed_clock()
    model = Model()
    scopes = [ALICE, ALICE_WORK, BOB]
    with mock.patch.object(memory, "POSTINGS_PER_ROW", 3), \
            mock.patch.object(memory, "_READ_ALL_UP_TO", 0), \
            MemoryStore(url, clock=clock) as opened:
        for batch in range(12):
            items = [(rng.choice(scopes), rng.choice(["user", "task"]),
                      " ".join(rng.choices(words, k=rng.randint(1, 5))), "s",
                      rng.choice([None, None, None, 30.0])) for _ in range(1 + 3 * (batch % 4))]
            model.remembered(opened.remember_many(items), items, created)
            clock()
            model.now = created()
        for _ in range(60):
            query = " ".join(rng.choices(words, k=rng.randint(1, 4)))
            limit, rank, scope = rng.randint(1, 20), rng.choice(WORD_RANKS), rng.choice(scopes)
            assert opened.recall(scope, query, limit, rank=rank) == \
                model.recall(scope, query, limit, rank)


@pooled
def test_a_server_error_inside_a_write_is_a_store_error_and_writes_nothing(
        url: str, server: Server) -> None:
    """A write's last statements go to the server together; one of them failing still
    raises StoreError (no driver error), rolls the whole write back, and frees the store."""
    database = url.split("@/", 1)[1].split("?")[0]
    with MemoryStore(url, clock=fixed_clock()) as opened:
        opened.remember(ALICE, "user", "Alice is vegetarian.", "s")
        server.admin("ALTER TABLE memory_counts ADD CONSTRAINT at_most_one"
                     " CHECK (memories <= 1)", database)
        with pytest.raises(StoreError, match="SQLSTATE 23514") as caught:
            opened.remember(ALICE, "user", "Alice likes trains.", "s")
        assert caught.value.__cause__ is None
        assert [m["text"] for m in opened.memories(ALICE)] == ["Alice is vegetarian."]
        assert ids(opened.recall(ALICE, "trains")) == []
        opened.remember(BOB, "user", "Bob is next.", "s")
        assert opened.count(BOB) == 1


def test_a_role_that_bypasses_row_level_security_is_warned_of(
        url: str, caplog: pytest.LogCaptureFixture) -> None:
    MemoryStore(url).close()
    with caplog.at_level("WARNING", logger="memory"):
        MemoryStore(url).close()
        assert not caplog.records
        MemoryStore(url.replace(APP_ROLE, "postgres")).close()
    assert [r.getMessage() for r in caplog.records] == [
        "connected as a role that bypasses row-level security: only each statement's"
        " user filter confines the store's calls"]


@pooled
def test_durable_read_only_and_timeouts_hold_for_each_transaction_and_no_longer(
        url: str) -> None:
    """Set for the transaction, not the session: a transaction pooler gives the server
    connection to other clients between two of the store's transactions."""
    MemoryStore(url).close()
    shows = [memory._sql("", postgresql=f"SHOW {name}") for name in (
        "synchronous_commit", "transaction_read_only", "statement_timeout", "jit")]
    found, after = {}, {}
    for options in ({}, {"durable": False}, {"read_only": True}, {"statement_timeout": 2.5}):
        with MemoryStore(url, pool_size=1, **options) as opened:
            with opened._snapshot({"alice"}) as db:
                found[tuple(options)] = [db.execute(show).fetchone()[0] for show in shows]
            with opened._reading() as db:  # the same connection, between transactions
                after[tuple(options)] = [db.execute(show).fetchone()[0] for show in shows]
    assert found == {(): ["on", "off", "0", "off"], ("durable",): ["off", "off", "0", "off"],
                     ("read_only",): ["on", "on", "0", "off"],
                     ("statement_timeout",): ["on", "off", "2500ms", "off"]}
    assert set(map(tuple, after.values())) == {("on", "off", "0", "on")}


@pytest.fixture
def one_connection(url: str) -> Iterator[MemoryStore]:
    """A store whose pool holds one connection: the one a protocol trace is set on."""
    with MemoryStore(url, clock=fixed_clock(), pool_size=1) as opened:
        yield opened


def round_trips(store: MemoryStore, call: Any, folder: pathlib.Path) -> int:
    """How many times `call` waited on the server: in libpq's protocol trace, each turn
    from messages sent to messages received."""
    import psycopg

    with store._reading() as db:  # the pool's one connection, which the call will take
        assert isinstance(db, memory_postgres._PostgresSession)
        connection = db.connection.pgconn
    with open(folder / "protocol.trace", "w") as trace:
        connection.trace(trace.fileno())
        connection.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS)
        try:
            call()
        finally:
            connection.untrace()
    directions = [line[:1] for line in (folder / "protocol.trace").read_text().splitlines()]
    return sum(1 for sent, received in itertools.pairwise(directions)
               if (sent, received) == ("F", "B"))


@pooled
def test_a_recall_waits_on_the_server_four_times(
        one_connection: MemoryStore,
                                                 tmp_path: pathlib.Path) -> None:
    """BEGIN with the scope; the rows' map with the expired ids (and, for idf, the count);
    the postings; the recalled memories with COMMIT. Over a network each wait is most of
    a recall's time."""
    store = one_connection
    for n in range(20):
        store.remember(ALICE, "user", f"Alice likes trains {n}.", "s", ttl=3600)
    found: dict[str, list[memory.Recalled]] = {}
    for rank in WORD_RANKS:
        assert round_trips(store, lambda r=rank: found.update(
            {r: store.recall(ALICE, "likes trains", 3, rank=r)}), tmp_path) == 4
    assert [ids(found[rank]) for rank in WORD_RANKS] == [[20, 19, 18]] * len(WORD_RANKS)
    assert transactions_left(store) == 0


def test_the_stores_statements_are_not_compiled(url: str) -> None:
    """The server compiles a statement whose plan looks costly to machine code (JIT),
    which for a write's read of 64 owners' words took 14 ms where running it took 0.2:
    the store's connections turn it off."""
    with MemoryStore(url) as store, store._snapshot({"alice"}) as db:
        assert db.execute(memory._sql("", postgresql="SHOW jit")).fetchone() == ("off",)


def test_a_write_looks_its_words_newest_rows_up_by_key(url: str) -> None:
    """The look-up every write makes descends the primary key once per word; a join the
    planner could turn into a scan of the user's whole index (as one version of this
    statement did: 12.8 ms a write at 50,000 memories) is not there to choose. Nor, on an
    index of 1,600 pages the server has no statistics of yet (as a bulk load leaves it until
    autovacuum analyzes it), a read of all the word's rows sorted (2.4-3.5 ms a durable
    write at 50,000 memories of the user, 1.4-1.7 descending)."""
    with MemoryStore(url) as opened:
        opened.remember_many([(ALICE, "user", f"note{n % 500} word{n % 7} hotel", "s")
                              for n in range(5_000)])
        many_words = " ".join(f"w{n}" for n in range(120))
        opened.remember_many([(ALICE, "user", many_words, "s")] * 12_000)
        newest = memory._SQL_NEWEST_POSTINGS
        explain = memory._sql("", postgresql=f"EXPLAIN {newest.form('postgresql')}")
        with opened._snapshot({"alice"}) as db:
            parameters = ("alice", None, "alice", None, '["hotel", "word3"]', "alice", "",
                          memory.INDEX_FROM)
            plan = "\n".join(row[0] for row in db.execute(explain, parameters))
            explain_each = memory._sql(
                "", postgresql=f"EXPLAIN {newest.form('postgresql', 'each')}")
            plan_each = "\n".join(row[0] for row in db.execute(
                explain_each, (json.dumps([parameters] * 3),)))
    assert plan.count("Index Scan Backward using memory_words_pkey") == 2, plan
    assert "Join" not in plan and "Seq Scan" not in plan and "Bitmap" not in plan, plan
    # For many owners at once: the same descents, for each row of the arrays.
    assert plan_each.count("Index Scan Backward using memory_words_pkey") == 2, plan_each
    assert "Seq Scan" not in plan_each and "Bitmap" not in plan_each, plan_each


def test_a_scopes_newest_id_is_one_descent_for_each_owner(url: str) -> None:
    """The newest id of a scope's two owners, which every recall of a kept copy asks: two
    backward steps down the scope index, even before the server has statistics of the
    table (a max() over `task_id IS NULL` read all 66,000 user-level ids of a user, 69 ms)."""
    with MemoryStore(url) as opened:
        opened.remember_many([(ALICE, "user" if n % 3 else "task", f"note {n}", "s")
                              for n in range(3_000)])
        opened.remember(ALICE_WORK, "task", "Another task's newer note.", "s")
        newest_form = memory._SQL_NEWEST_IN_SCOPE.form("postgresql")
        assert newest_form is not None
        explain = memory._sql("", postgresql="EXPLAIN (ANALYZE) " + newest_form)
        with opened._snapshot({"alice"}) as db:
            plan = "\n".join(row[0] for row in db.execute(explain, ("alice", "alice", "trip")))
        newest = max(m["id"] for m in opened.memories(ALICE))
    assert plan.count("Index Only Scan Backward using memories_scope") == 2, plan
    assert "Sort" not in plan and "Aggregate" not in plan, plan
    assert plan.count("rows=1 loops=1)") >= 4, plan  # each scan stops at its first row
    with MemoryStore(url) as opened, opened._snapshot({"alice"}) as db:
        assert db.execute(memory._SQL_NEWEST_IN_SCOPE, ("alice", "alice", "trip")
                          ).fetchone() == (newest,)


def test_a_look_up_by_key_descends_to_the_key(url: str) -> None:
    """Under row-level security a condition on coalesce(task_id, '') cannot bound an
    index scan, so the key index leads with the key after the user: a get by key or a
    keyed write's look-up reads the key's entries, not every keyed memory of the user
    (version 5's index, the key third, read 10,000 for one at 10,000 items)."""
    with MemoryStore(url) as opened:
        opened.remember_many([{"scope": ALICE, "level": "task", "text": f"note {n}",
                               "source": "s", "key": f"k{n}"} for n in range(3_000)])
        keyed = memory._SQL_KEYED
        with opened._snapshot({"alice"}) as db:
            parameters = ("alice", "trip", "trip", "trip", "k7")
            explain = "EXPLAIN (ANALYZE, BUFFERS) "
            plan = "\n".join(row[0] for row in db.execute(memory._sql(
                "", postgresql=f"{explain}{keyed.form('postgresql')}"), parameters))
            plan_each = "\n".join(row[0] for row in db.execute(memory._sql(
                "", postgresql=f"{explain}{keyed.form('postgresql', 'each')}"),
                (json.dumps([parameters] * 3),)))
        assert opened.get(ALICE, key="k7") is not None
    for read in (plan, plan_each):
        assert "AND (key = " in read and "Bitmap" not in read, read
        # The pages the scan reads, each time it runs: the index's root and leaf and the
        # row's (version 5's index read 24 here).
        scan = re.search(r"Index Scan using memories_key .* loops=(\d+)\)(\n.*)*?"
                         r"\n\s*Buffers: shared hit=(\d+)", read)
        assert scan is not None and int(scan[3]) <= 4 * int(scan[1]), read


def test_as_of_reads_walk_their_owner_s_index_before_statistics(url: str) -> None:
    """An as-of page's runs, a listing's by key (as of a time and now), and a page of the
    user level, walk the owner's range of an index in order and look each version's
    memory up by its key, even before the server has statistics of the tables (as a bulk
    load leaves them): a listing of all keys read the scope whole, sorted; the user level's ranges
    were the user's primary key walked past every task memory (32 ms a page of 20 at
    100,000 memories), and a memory's liveness a join that read every memory of the user
    for each version (2 s a page at 1,000 memories with 200 versions)."""
    clock = SetClock()
    with MemoryStore(url, clock=clock, history=True) as opened:
        opened.remember_many([{"scope": ALICE, "level": "task", "text": f"note {n}",
                               "source": "s", "key": f"k{n}"} for n in range(3_000)])
        clock.advance(60)
        instant = clock.at
        clock.advance(60)
        opened.remember_many([{"scope": ALICE, "level": "task", "text": f"note {n} again",
                               "source": "s", "key": f"k{n}"} for n in range(300)])
        now = memory._utc_form("now", clock.at)
        assert now is not None
        every = (0, memory._MAX_ID)
        run = (*every, instant, instant[:19])
        reads = [(memory._SQL_OWNER_THEN_UP, ("alice", *run, 32)),
                 (memory._SQL_OWNER_THEN_DOWN, ("alice", *run, 32)),
                 (memory._SQL_OWNER_DOWN, ("alice", *every, 20)),
                 (memory._SQL_OWNER_UP, ("alice", *every, 20)),
                 (memory._SQL_TASK_UP, ("alice", "trip", *every, 20)),
                 (memory._SQL_OWNER_PAST_UP, ("alice", *run, instant[:19], now, 32, "alice")),
                 (memory._SQL_OWNER_PAST_DOWN, ("alice", *run, instant[:19], now, 32, "alice")),
                 (memory._SQL_TASK_PAST_UP, ("alice", "trip", *run, instant[:19], now, 32,
                                             "alice", "trip")),
                 (memory._SQL_TASK_PAST_DOWN, ("alice", "trip", *run, instant[:19], now, 32,
                                               "alice", "trip")),
                 (memory._SQL_TASK_PAST_OF_KEY, ("alice", "trip", "alice", "trip", "k7", "k7",
                                                 now)),
                 (memory._SQL_TASK_PAST_OF_ID, ("alice", "trip", "alice", "trip", 7, 7, now)),
                 (memory._SQL_KEYS_FROM_BELOW, ("alice", "trip", "", "",
                                                memory._ABOVE_EVERY_KEY, 40)),
                 *((keys, (*owner, "k", "l", instant, instant[:19], instant[:19], now, 32))
                   for keys, owner in zip(memory._PAST_KEYS[False],
                                          (("alice",), ("alice", "trip")), strict=True))]
        with opened._snapshot({"alice"}) as db:
            plans = ["\n".join(row[0] for row in db.execute(memory._sql(
                "", postgresql=f"EXPLAIN (ANALYZE) {statement.form('postgresql')}"), arguments))
                for statement, arguments in reads]
        assert len(opened.memories(ALICE, limit=20, as_of=instant)) == 20
    for plan in plans:
        assert "Rows Removed by Filter" not in plan and "Sort" not in plan, plan
        assert "Seq Scan" not in plan and "Bitmap" not in plan and "Hash" not in plan, plan
        assert "memories_pkey" not in plan or "SubPlan" in plan, plan
    for plan in plans[3:7]:  # a run: one range of the index, then each memory's look-up
        assert "Nested Loop" not in plan, plan



def test_a_scope_s_expired_memories_are_a_range_of_the_expiry_index_before_statistics(
        url: str) -> None:
    """Every read by key or id first asks which of the scope's memories have expired. With
    the range one-sided, the server, before it had statistics (as a bulk load leaves it),
    read the scope's every row through the scope index and filtered them (2.3 ms a
    LangGraph get at 10,000 items)."""
    clock = SetClock()
    with MemoryStore(url, clock=clock) as opened:
        opened.remember_many([(ALICE, "task", f"note {n} " + "and more " * 40, "s",
                               None, f"k{n}") for n in range(10_000)])
        clock.advance(120)
        now = memory._utc_form("now", clock.at)
        reads = [(memory._SQL_EXPIRED, ("alice", "trip", now)),
                 (memory._SQL_EXPIRED_COUNT, ("alice", "trip", now)),
                 (memory._SQL_UNSEEN, ("alice", "trip", now, "alice", "trip", now,
                                       "alice", "trip", now))]
        with opened._snapshot({"alice"}) as db:
            plans = ["\n".join(row[0] for row in db.execute(memory._sql(
                "", postgresql=f"EXPLAIN (ANALYZE) {statement.form('postgresql')}"), arguments))
                for statement, arguments in reads]
            assert db.execute(memory._SQL_EXPIRED, reads[0][1]).fetchone() == ("[]",)
    for plan in plans:
        assert "memories_expiry" in plan, plan
        assert "memories_scope" not in plan and "Seq Scan" not in plan, plan

def test_version_5_s_key_index_is_made_again_key_first(url: str, server: Server) -> None:
    with MemoryStore(url) as store:
        store.remember(ALICE, "task", "Alice's seat: aisle.", "s", key="seat")
    with owner_connection(url) as db:  # version 5's index, as its release made it
        for statement in PG_BEFORE_VALIDITY:
            db.execute(statement)
        db.execute("DROP TABLE memory_history")
        db.execute("DROP TABLE memory_receipts")
        db.execute("ALTER TABLE memories DROP COLUMN version")
        db.execute("ALTER TABLE memory_counts DROP COLUMN weight")
        db.execute("DROP TABLE memory_vector_blocks")
        db.execute("DROP INDEX memories_key")
        db.execute("CREATE UNIQUE INDEX memories_key ON memories (user_id,"
                   " coalesce(task_id, ''), key) WHERE key IS NOT NULL")
        db.execute("UPDATE store_settings SET value = '5' WHERE name = 'schema_version'")
    with MemoryStore(url) as store:
        assert store.stats()["schema_version"] == memory_postgres.POSTGRES_SCHEMA_VERSION
        store.remember(ALICE, "task", "Alice's seat: window.", "s", key="seat")
        assert [m["text"] for m in store.memories(ALICE)] == ["Alice's seat: window."]
    (definition,) = server.admin("SELECT indexdef FROM pg_indexes WHERE indexname ="
                                 " 'memories_key'", database_of(url))
    assert "(user_id, key, COALESCE(task_id, ''::text)) WHERE (key IS NOT NULL)" \
        in definition[0]


def test_keys_by_prefix_are_a_range_of_the_key_index_in_byte_order(server: Server) -> None:
    """Version 10 compares keys byte by byte ("C"), whatever the database's locale (here
    ICU's English, which sorts "a" before "B"): the key index then serves a prefix's
    range, in the order SQLite gives."""
    url = server.new_database("TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE 'en-US'"
                              " LOCALE 'C.UTF-8' ENCODING 'UTF8'")
    with MemoryStore(url) as store:
        store.remember_many([(ALICE, "task", f"note {n}", "s", None, f"notes/{n:04}")
                             for n in range(3_000)])
        store.remember_many([(ALICE, "task", key, "s", None, key)
                             for key in ("a", "B", "b", "\u00e9", "Z", "_")])
        assert [m["key"] for m in store.memories(ALICE, after_key="notes9")] == [
            "\u00e9"]
        assert [m["key"] for m in store.memories(ALICE, key_prefix="", limit=4)] == [
            "B", "Z", "_", "a"]
        with store._snapshot({"alice"}) as db:
            plan = "\n".join(row[0] for row in db.execute(memory._sql("", postgresql=(
                f"EXPLAIN {memory._SQL_KEYS_AFTER_BELOW.form('postgresql')}")),
                ("alice", "trip", "trip", "notes/1000", "notes0", 5)))
    assert "Index Scan using memories_key" in plan, plan
    assert "(key > 'notes/1000'::text) AND (key < 'notes0'::text)" in plan, plan


def test_version_7_s_text_key_index_is_made_again_a_hash_index(url: str,
                                                                server: Server) -> None:
    with MemoryStore(url) as store:
        old = store.remember(ALICE, "user", "Alice likes jazz.", "s")
    server.admin("DROP INDEX memories_text_key", database_of(url))  # version 7's, as made
    server.admin("CREATE INDEX memories_text_key ON memories (user_id, text_key)",
                 database_of(url))
    server.admin("ALTER TABLE memory_counts DROP COLUMN weight", database_of(url))
    server.admin("ALTER TABLE memories DROP COLUMN version", database_of(url))
    for statement in PG_BEFORE_VALIDITY:
        server.admin(statement, database_of(url))
    server.admin("DROP TABLE memory_history", database_of(url))
    server.admin("DROP TABLE memory_receipts", database_of(url))
    server.admin("UPDATE store_settings SET value = '7' WHERE name = 'schema_version'",
                 database_of(url))
    with MemoryStore(url) as store:
        assert store.stats()["schema_version"] == memory_postgres.POSTGRES_SCHEMA_VERSION
        assert store.remember(ALICE, "user", "alice LIKES  jazz.", "s", dedupe=True) == old
    (definition,) = server.admin("SELECT indexdef FROM pg_indexes WHERE indexname ="
                                 " 'memories_text_key'", database_of(url))
    assert "USING hash (text_key)" in definition[0]


def test_a_dedupe_look_up_reads_the_text_keys_hash_index(url: str, server: Server) -> None:
    """A text key is a hash: in a B-tree each new memory's entry would land on a random
    page, so the keys are in a hash index, and a dedupe look-up reads it, not the scope's
    index, before the server has statistics of the table (as a bulk load leaves it until
    autovacuum analyzes it) and after."""
    with MemoryStore(url) as opened:
        ids = opened.remember_many([(ALICE, "user" if n % 3 else "task", f"note {n}", "s")
                                    for n in range(3_000)])
        same = memory._SQL_SAME_TEXT
        wanted = ("alice", "trip", memory._text_key("note 7"))
        plans = []
        for analyzed in (False, True):
            if analyzed:
                server.admin("ANALYZE memories", database_of(url))
            with opened._snapshot({"alice"}) as db:
                plans.append("\n".join(row[0] for row in db.execute(memory._sql(
                    "", postgresql=f"EXPLAIN {same.form('postgresql')}"), wanted)))
                plans.append("\n".join(row[0] for row in db.execute(memory._sql(
                    "", postgresql=f"EXPLAIN {same.form('postgresql', 'each')}"),
                    (json.dumps([wanted] * 3),))))
        assert opened.remember(ALICE, "user", "NOTE  7", "s", dedupe=True) == ids[7]
    for plan in plans:
        assert re.search(r"Index Scan (using|on) memories_text_key", plan), plan
        assert "memories_scope" not in plan and "Seq Scan on memories" not in plan, plan


def test_a_batch_sent_before_its_words_indexes_and_purges_only_what_it_should(
        url: str) -> None:
    """A batch of sends_rows_first_from rows or more is sent before its words are found,
    so that the server inserts it while the client stems: what the write then reads of
    its owners must leave its own rows out. An owner it takes past the index's threshold
    is indexed once for each memory; a memory expired as soon as it is written (a ttl
    shorter than the clock's step) is not purged by its own write, which has not yet
    counted or indexed it."""
    clock = SetClock()
    size = memory_postgres._PostgresSession.sends_rows_first_from
    assert size is not None
    with MemoryStore(url, clock=clock) as store:
        held = store.remember_many([(ALICE, "task", f"older hotel {n}", "s")
                                    for n in range(3)])
        clock.advance(60)
        store.remember(ALICE, "task", "An expired hotel note.", "s", ttl=1)
        clock.advance(60)
        # Both of the user's scopes, the user level and the task (asked after it).
        ids = store.remember_many([(ALICE, "task" if n % 2 else "user", f"hotel note {n}",
                                    "s", 1e-9 if n > 1 else None) for n in range(size)])
        assert index_problems_at(url) == []
        assert store.count(ALICE) == 5  # the expired ones neither counted nor kept live
        assert {m["id"] for m in store.recall(ALICE, "older hotel", limit=3)} == set(held)
        assert [m["id"] for m in store.recall(ALICE, "hotel note 0", limit=1)] == [ids[0]]


@pooled
def test_a_batch_for_many_users_names_a_group_of_them_at_a_time(url: str) -> None:
    """The policy checks each row against every user the statement may see, so a batch
    for 130 users narrows what its statements see to 64 users at a time (3 groups), once
    to ask what it needs to know and once to write: the cost per row stays that of a
    small group, whatever the batch's number of users."""
    users = [f"user-{n:03d}" for n in range(130)]
    session = memory_postgres._PostgresSession
    with MemoryStore(url) as store:
        with mock.patch.object(session, "_send", autospec=True,
                               side_effect=session._send) as sent:
            store.remember_many([(Scope(user, "t"), "user", "a note", "s") for user in users])
        narrowed = [call.args[2][0].split(",") for call in sent.call_args_list
                    if call.args[1] == memory_postgres._PG_NARROW]
        assert narrowed == [users[:64], users[64:128], users[128:]] * 2
        assert all(store.count(Scope(user, "t")) == 1 for user in users)
    assert index_problems_at(url) == []


def test_a_batch_for_more_users_than_the_lock_table_holds(url: str) -> None:
    """Each user's lock takes a slot of the server's lock table (here about 800): a
    batch for 3,000 users takes the store's lock instead, and is written."""
    users = [f"user-{n}" for n in range(3000)]
    with MemoryStore(url) as store:
        ids = store.remember_many([(Scope(user, "t"), "user", "a", "s") for user in users])
        assert len(ids) == 3000
        assert [store.count(Scope(user, "t")) for user in users[::749]] == [1] * 5


@pooled
def test_a_write_never_widens_the_users_it_sees(url: str) -> None:
    with MemoryStore(url) as store:
        with pytest.raises(StoreError, match="did not name"), store._writing({"alice"}) as db:
            db.narrow(["alice", "bob"])
        assert transactions_left(store) == 0
        store.remember(ALICE, "user", "still writes", "s")


@pooled
def test_a_remember_waits_on_the_server_three_times(
        one_connection: MemoryStore, tmp_path: pathlib.Path) -> None:
    """BEGIN with the scope, the locks and the matching rule; the new id with the expired
    memories to purge and its words' newest index rows; the row, the index rows, the
    count and COMMIT."""
    store = one_connection
    store.remember(ALICE, "user", "Alice likes trains.", "s")
    assert round_trips(store, lambda: store.remember(
        ALICE, "user", "Alice likes night trains.", "s"), tmp_path) == 3
    assert transactions_left(store) == 0
    assert ids(store.recall(ALICE, "night trains")) == [2, 1]


def test_a_forget_waits_on_the_server_five_times(
        one_connection: MemoryStore, tmp_path: pathlib.Path) -> None:
    """BEGIN with the scope, the locks and the matching rule; the memory with the expired
    ids; its owner's count with where its sealed blocks are; its words' index rows; their
    rewrites, the count, the memory's rows and COMMIT."""
    store = one_connection
    store.remember_many([(ALICE, "user", f"Alice likes trains {n}.", "s")
                         for n in range(memory.INDEX_FROM + 1)])
    assert round_trips(store, lambda: store.forget(ALICE, 3), tmp_path) == 5
    assert transactions_left(store) == 0
    assert store.get(ALICE, 3) is None
    assert len(store.recall(ALICE, "likes trains", memory.INDEX_FROM + 1)) == memory.INDEX_FROM


def test_a_top_k_recall_waits_three_times_and_once_per_read_of_index_rows(
        one_connection: MemoryStore, tmp_path: pathlib.Path) -> None:
    """Past the words' read-all limit: BEGIN with the scope; the rows' map with the count
    and the expired ids; the recalled memories with COMMIT; and one wait per statement
    that reads index rows (a window, a read-through, a probe)."""
    store = one_connection
    reads: list[str] = []
    rows_statement = memory._SQL_POSTINGS_ROWS.form("postgresql")
    with mock.patch.object(memory, "_READ_ALL_UP_TO", 0), \
            mock.patch.object(memory, "POSTINGS_PER_ROW", 4):
        store.remember_many([(ALICE, "user", f"sun owl {n}", "s") for n in range(3)]
                            + [(ALICE, "user", f"sun day {n}", "s") for n in range(300)])
        store.db.set_trace_callback(lambda sql: reads.append(sql) if sql == rows_statement
                                    else None)
        found: list[list[memory.Recalled]] = []
        waits = round_trips(store, lambda: found.append(
            store.recall(ALICE, "owl sun", 3, rank="idf")), tmp_path)
        store.db.set_trace_callback(None)
    assert ids(found[0]) == [3, 2, 1]
    assert len(reads) >= 2
    assert waits == 3 + len(reads)


# -- what the store trusts (hardening, round two) --------------------------------------

# The tables of memory data: version 1's, and from version 4 the vectors.
VERSION_1_TABLES = ("memories", "memory_words", "memory_counts")
STORE_TABLES = (*VERSION_1_TABLES, "memory_vectors")


def layout_of(server: Server, database: str) -> list[Any]:
    """The store's objects, their flags and owners, and the policies: what must not change."""
    objects = server.admin("SELECT relname, relkind, relrowsecurity, relforcerowsecurity,"
                           " relowner::regrole::text FROM pg_class WHERE relnamespace ="
                           " 'public'::regnamespace ORDER BY relname", database)
    policies = server.admin("SELECT tablename, policyname, qual FROM pg_policies"
                            " ORDER BY 1, 2", database)
    return [objects, policies]


@pytest.mark.parametrize("tamper", [
    "ALTER TABLE memories NO FORCE ROW LEVEL SECURITY",
    "ALTER TABLE memory_words DISABLE ROW LEVEL SECURITY",
    "CREATE POLICY everyone ON memory_counts USING (true)",
    "DROP POLICY memories_scope ON memories",
    "ALTER TABLE memory_vectors NO FORCE ROW LEVEL SECURITY",
    "DROP POLICY memory_vectors_scope ON memory_vectors",
])
def test_tables_without_the_second_guard_are_refused(url: str, server: Server,
                                                     tamper: str) -> None:
    MemoryStore(url).close()
    database = database_of(url)
    server.admin(tamper, database)
    before = layout_of(server, database)
    for read_only in (False, True):
        with pytest.raises(SchemaError, match="row-level security"):
            MemoryStore(url, read_only=read_only)
    assert layout_of(server, database) == before


def test_tables_another_role_planted_are_refused_and_written_nothing(
        url: str, server: Server) -> None:
    """mallory made the store's tables herself, stamped them, left FORCE off and let
    everyone in: the store must not write Alice's memories there."""
    database = database_of(url)
    server.admin("DO $$ BEGIN CREATE ROLE mallory LOGIN; EXCEPTION WHEN duplicate_object"
                 " THEN NULL; END $$")
    server.admin("GRANT CREATE ON SCHEMA public TO mallory", database)
    planted = ";".join([*memory_postgres._PG_SCHEMA,
                        "INSERT INTO store_settings VALUES ('matching', 'exact')",
                        "INSERT INTO store_settings VALUES ('schema_version', '1')",
                        *(f"ALTER TABLE {table} NO FORCE ROW LEVEL SECURITY"
                          for table in VERSION_1_TABLES),
                        "GRANT ALL ON ALL TABLES IN SCHEMA public TO PUBLIC",
                        "GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO PUBLIC"])
    server.admin(f"SET ROLE mallory; {planted}", database)
    for forced in (False, True):
        if forced:  # the guard on, but the tables still hers
            server.admin(";".join(f"SET ROLE mallory; ALTER TABLE {table} FORCE ROW LEVEL"
                                  " SECURITY" for table in VERSION_1_TABLES), database)
        with pytest.raises(SchemaError, match="owned by the connecting role"):
            MemoryStore(url)
    assert server.admin("SELECT count(*) FROM memories", database) == [(0,)]


def test_a_fresh_store_passes_its_own_check_as_a_member_of_the_owner(
        url: str, server: Server) -> None:
    """The tables may belong to a role the store's role is a member of (a migration role
    owning the schema): its privileges are the owner's."""
    database = database_of(url)
    MemoryStore(url).close()
    server.admin("DO $$ BEGIN CREATE ROLE memory_owner; EXCEPTION WHEN duplicate_object"
                 " THEN NULL; END $$")
    server.admin(f"GRANT memory_owner TO {APP_ROLE}")
    server.admin(";".join(f"ALTER TABLE {table} OWNER TO memory_owner"
                          for table in (*STORE_TABLES, "store_settings")), database)
    server.admin("ALTER SEQUENCE memories_id_seq OWNER TO memory_owner", database)
    with MemoryStore(url) as opened:
        opened.remember(ALICE, "user", "Alice is vegetarian.", "s")
        opened.compact()
        assert opened.count(ALICE) == 1


def test_compact_refuses_when_the_role_may_not_vacuum_the_tables(
        url: str, server: Server) -> None:
    database = database_of(url)
    server.admin("DO $$ BEGIN CREATE ROLE mallory LOGIN; EXCEPTION WHEN duplicate_object"
                 " THEN NULL; END $$")
    with MemoryStore(url) as opened:
        opened.remember(ALICE, "user", "Alice is vegetarian.", "s")
        server.admin("ALTER TABLE memory_words OWNER TO mallory", database)
        with pytest.raises(StoreError, match="compact needs the connecting role to own"):
            opened.compact()


@pytest.mark.parametrize("encoding", ["LATIN1", "SQL_ASCII"])
def test_a_database_not_in_utf8_is_refused_before_anything_is_created(
        server: Server, encoding: str) -> None:
    url = server.new_database(f"ENCODING '{encoding}' LC_COLLATE 'C' LC_CTYPE 'C'"
                              " TEMPLATE template0")
    with pytest.raises(StoreError, match=f"encoding is {encoding}; a memory store needs"):
        MemoryStore(url)
    assert server.admin("SELECT count(*) FROM pg_class WHERE relnamespace ="
                        " 'public'::regnamespace", database_of(url)) == [(0,)]


@pytest.mark.parametrize("version", ["-3", "abc", "0", "", "1.0", " 1"])
def test_a_schema_version_this_code_never_wrote_is_refused(url: str, server: Server,
                                                           version: str) -> None:
    MemoryStore(url).close()
    database = database_of(url)
    server.admin(f"UPDATE store_settings SET value = '{version}'"
                 " WHERE name = 'schema_version'", database)
    before = layout_of(server, database)
    with pytest.raises(SchemaError, match="no schema version this code wrote"):
        MemoryStore(url)
    assert server.admin("SELECT value FROM store_settings WHERE name = 'schema_version'",
                        database) == [(version,)]
    assert layout_of(server, database) == before


@pytest.mark.parametrize("command", [
    ["forget", "--user", "alice", "--task", "trip", "1"],
    ["revise", "--user", "alice", "--task", "trip", "1", "text", "--source", "s"],
    ["purge"], ["erase-user", "--user", "alice", "--yes"], ["reindex", "--matching", "exact"],
    ["compact"],
])
def test_commands_that_must_not_create_a_store_do_not(url: str, server: Server,
                                                      command: list[str]) -> None:
    done = cli(command[0], url, *command[1:])
    assert done.returncode == 1 and done.stderr == (
        "memory: error: the database holds no memory store\n"), done.stderr
    assert server.admin("SELECT count(*) FROM pg_class WHERE relnamespace ="
                        " 'public'::regnamespace", database_of(url)) == [(0,)]
    refusing: list[dict[str, Any]] = [{"create": False}, {"read_only": True}]
    for options in refusing:
        with pytest.raises(StoreNotFound, match="holds no memory store"):
            MemoryStore(url, **options)


def chain(error: BaseException) -> list[str]:
    """The text of the error and of every exception reachable from it: causes, contexts,
    their arguments and the formatted traceback, less the frames of this file (whose source
    lines hold the secrets the test made)."""
    texts, seen, pending = [], set(), [error]
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        texts += [repr(current), *map(repr, current.args)]
        frames = [f for f in traceback.extract_tb(current.__traceback__) if f.filename != __file__]
        texts += [*traceback.format_list(frames), *traceback.format_exception_only(current)]
        pending += [e for e in (current.__cause__, current.__context__) if e is not None]
    return texts


@pytest.mark.parametrize("secret_part", [
    "pa%zzhunter2",  # a bad percent-escape: the driver cannot even parse the URL
    "hunter2",  # a good URL to a database that does not exist
])
def test_no_part_of_the_url_reaches_any_exception(server: Server, secret_part: str) -> None:
    url = f"postgresql://{APP_ROLE}:{secret_part}@/no_such_db_quokka?host={server.folder}"
    with pytest.raises(StoreError) as caught:
        MemoryStore(url)
    assert caught.value.__cause__ is None and caught.value.__context__ is None
    for text in chain(caught.value):
        assert "hunter2" not in text and "quokka" not in text and APP_ROLE not in text, text


def test_a_timeout_signal_while_a_write_waits_for_its_user_leaves_nothing_held(
        store: MemoryStore, url: str, server: Server) -> None:
    """A SIGALRM handler raises while the write waits for its user's advisory lock: the
    caller gets its own exception, no transaction stays open, the server holds no lock of
    the store's once the other holder lets go, and the next call works."""
    import psycopg

    store.remember(ALICE, "user", "first", "s")
    holder = psycopg.connect(url)
    holder.execute(f"SELECT pg_advisory_xact_lock({memory_postgres._PG_LOCK_CLASS} + 1,"
                   " hashtext('alice'))")

    def alarm(*_: Any) -> None:
        raise TimeoutError("the caller's own timeout")

    previous = signal.signal(signal.SIGALRM, alarm)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.5)
        with pytest.raises(TimeoutError, match="the caller's own timeout"):
            store.remember(ALICE, "user", "second", "s")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        holder.rollback()
        holder.close()
    assert transactions_left(store) == 0
    deadline = time.monotonic() + 10
    while server.admin("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'") != [(0,)]:
        assert time.monotonic() < deadline, "an advisory lock is still held"
        time.sleep(0.05)
    assert store.remember(ALICE, "user", "third", "s") == 2
    assert [m["text"] for m in store.memories(ALICE)] == ["first", "third"]


# -- a server that restarts or drops the connection ------------------------------------

def end_connections(store: MemoryStore, server: Server) -> None:
    """Terminate every connection of the store's database, as a restart would, waiting
    (up to 10 s each) until each backend has exited: its last words are then on the
    socket, so the call that follows meets a connection that has ended, not one ending."""
    server.admin("SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity WHERE"
                 f" datname = '{database_of(store.path)}' AND pid <> pg_backend_pid()")


@pooled
def test_an_idle_store_works_on_after_a_server_restart(store: MemoryStore,
                                                        server: Server) -> None:
    kept = store.remember(ALICE, "user", "Alice is vegetarian.", "s")
    server.restart()
    assert [m["id"] for m in store.recall(ALICE, "vegetarian")] == [kept]
    assert store.count(ALICE) == 1
    assert store.remember(ALICE, "user", "Alice likes trains.", "s") > kept
    assert store.count(ALICE) == 2


def test_a_backend_terminated_between_calls_is_replaced(
        store: MemoryStore, server: Server, caplog: pytest.LogCaptureFixture) -> None:
    kept = store.remember(ALICE, "user", "Alice is vegetarian.", "s")
    with caplog.at_level("INFO"):
        for call in range(2):
            end_connections(store, server)
            if call == 0:
                assert [m["id"] for m in store.memories(ALICE)] == [kept]
            else:
                store.remember(ALICE, "user", "Alice likes trains.", "s")
    assert store.count(ALICE) == 2
    # The recovery is logged at INFO, by the store alone; psycopg's warnings are not shown.
    assert "ended a pooled connection: taking another" in caplog.text
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []


def terminate_at(store: MemoryStore, server: Server, statement: str) -> list[str]:
    """Terminate the store's backend once, the moment `statement` starts being sent
    (the trace sees each statement's text just before it goes); what was traced."""
    seen: list[str] = []

    def trace(sql: str) -> None:
        seen.append(sql)
        if sql.startswith(statement) and seen.count(sql) == 1:
            end_connections(store, server)

    store.db.set_trace_callback(trace)
    return seen


@pooled
def test_a_read_cut_off_midway_is_read_again(store: MemoryStore, server: Server,
                                             caplog: pytest.LogCaptureFixture) -> None:
    kept = store.remember(ALICE, "user", "Alice is vegetarian.", "s")
    terminate_at(store, server, "SELECT word, coalesce(json_agg(first_id)")
    with caplog.at_level("INFO", logger="memory"):
        assert [m["id"] for m in store.recall(ALICE, "vegetarian")] == [kept]
    store.db.set_trace_callback(None)
    assert "lost during a read: reading again" in caplog.text


@pooled
def test_a_write_cut_off_before_its_commit_was_not_applied(store: MemoryStore,
                                                           server: Server) -> None:
    store.remember(ALICE, "user", "Alice is vegetarian.", "s")
    terminate_at(store, server, "INSERT INTO memories")
    with pytest.raises(StoreError, match="before the write's COMMIT: the write was not"
                                         " applied") as caught:
        store.remember(ALICE, "user", "Alice likes trains.", "s")
    store.db.set_trace_callback(None)
    assert not isinstance(caught.value, memory.OutcomeUnknown)
    assert store.count(ALICE) == 1
    store.remember(ALICE, "user", "Alice likes trains.", "s")
    assert store.count(ALICE) == 2


@pooled
def test_a_write_cut_off_once_its_commit_was_sent_has_an_unknown_outcome(
        store: MemoryStore, server: Server) -> None:
    store.remember(ALICE, "user", "Alice is vegetarian.", "s")
    terminate_at(store, server, "COMMIT")
    with pytest.raises(memory.OutcomeUnknown, match="may or may not have been applied"):
        store.remember(ALICE, "user", "Alice likes trains.", "s")
    store.db.set_trace_callback(None)
    assert store.count(ALICE) in (1, 2)  # the caller checks, as the message says
    assert store.remember(ALICE, "user", "Alice likes jazz.", "s")


def test_a_server_that_is_down_fails_a_call_within_the_pool_timeout_and_then_works(
        url: str, server: Server, caplog: pytest.LogCaptureFixture) -> None:
    store = MemoryStore(url, pool_timeout=1)
    kept = store.remember(ALICE, "user", "Alice is vegetarian.", "s")
    server.halt()
    calls: list[Callable[[], object]] = [lambda: store.count(ALICE),
                                         lambda: store.remember(ALICE, "user", "lost", "s")]
    try:
        with caplog.at_level("WARNING"):
            for call in calls:
                with pytest.raises(StoreError, match="no connection to the PostgreSQL server"
                                                     " within 1 s"):
                    call()
            with pytest.raises(StoreError, match="could not connect"):
                MemoryStore(url)  # opening fails at once, with its own connection
        assert [r.getMessage() for r in caplog.records if r.name.startswith("psycopg")] == []
    finally:
        server.launch()
    with store:
        # The pool connects anew on its own schedule (1 s after a failure, then 2, 4...):
        # with pool_timeout=1 the first calls may still time out, until it has.
        deadline = time.monotonic() + 60
        while True:
            try:
                found = store.memories(ALICE)
                break
            except StoreError:
                if time.monotonic() > deadline:
                    raise
        assert [m["id"] for m in found] == [kept]
        store.remember(ALICE, "user", "Alice likes trains.", "s")
        assert store.count(ALICE) == 2


@pooled
def test_statement_timeout_bounds_a_wait_for_a_lock(url: str) -> None:
    import psycopg

    with pytest.raises(MemoryInputError, match="statement_timeout is for a postgresql"):
        MemoryStore("m.db", statement_timeout=1)
    for bad in (0, -1, float("nan"), True, "1"):
        with pytest.raises(MemoryInputError, match="statement_timeout must be"):
            MemoryStore(url, statement_timeout=bad)  # type: ignore[arg-type]
    with MemoryStore(url, statement_timeout=0.2) as opened:
        opened.remember(ALICE, "user", "first", "s")
        holder = psycopg.connect(url)
        holder.execute(f"SELECT pg_advisory_xact_lock({memory_postgres._PG_LOCK_CLASS} + 1,"
                       " hashtext('alice'))")
        try:
            with pytest.raises(StoreError, match="timed out"):
                opened.remember(ALICE, "user", "second", "s")
        finally:
            holder.rollback()
            holder.close()
        assert transactions_left(opened) == 0
        opened.remember(ALICE, "user", "third", "s")
        assert [m["text"] for m in opened.memories(ALICE)] == ["first", "third"]


def use_after_fork(store: MemoryStore, report: Any) -> None:
    try:
        store.count(ALICE)
        report.put("used the parent's connection")
    except StoreError as exc:
        report.put(str(exc))


def test_a_forked_child_is_refused_the_parents_store(store: MemoryStore) -> None:
    store.remember(ALICE, "user", "Alice is vegetarian.", "s")
    context = multiprocessing.get_context("fork")
    report = context.Queue()
    child = context.Process(target=use_after_fork, args=(store, report))
    child.start()
    child.join(timeout=60)
    assert "opened before this process forked" in report.get(timeout=10)
    assert store.count(ALICE) == 1  # the parent's connection is untouched


def test_a_password_in_the_url_appears_nowhere(url: str, server: Server,
                                               caplog: pytest.LogCaptureFixture) -> None:
    secret = "quokka-password-4471"
    with_password = url.replace(f"{APP_ROLE}@", f"{APP_ROLE}:{secret}@")
    texts = []
    with caplog.at_level("DEBUG"):
        with MemoryStore(with_password) as opened:
            texts.append(repr(opened))
            opened.remember(ALICE, "user", "Alice is vegetarian.", "s")
            end_connections(opened, server)
            opened.recall(ALICE, "vegetarian")
        server.halt()
        try:
            with pytest.raises(StoreError) as caught:
                MemoryStore(with_password)
            texts += chain(caught.value)
        finally:
            server.launch()
    texts += [record.getMessage() for record in caplog.records]
    assert all(secret not in text for text in texts)


def test_pool_options_are_checked_and_refused_for_a_file(url: str) -> None:
    for name in ("pool_size", "pool_timeout"):
        with pytest.raises(MemoryInputError, match=f"{name} is for a postgresql"):
            MemoryStore("m.db", **{name: 2})  # type: ignore[arg-type]
    for bad in (0, 101, True, 2.5, "4"):
        with pytest.raises(MemoryInputError, match="pool_size must be an int from 1 to 100"):
            MemoryStore(url, pool_size=bad)  # type: ignore[arg-type]
    for wait in (0, -1, float("inf"), "1"):
        with pytest.raises(MemoryInputError, match="pool_timeout must be"):
            MemoryStore(url, pool_timeout=wait)  # type: ignore[arg-type]


@pooled
def test_sixteen_threads_sharing_a_store_run_on_their_own_connections(
        url: str, server: Server) -> None:
    """Each call takes a connection of the pool: calls of different threads overlap on
    the server (several connections busy at once), and every count comes out exact."""
    errors: list[BaseException] = []
    with MemoryStore(url, pool_size=8) as shared:
        def work(n: int) -> None:
            scope = Scope(f"user-{n % 4}", f"task-{n}")
            try:
                for k in range(25):
                    shared.remember(scope, "task", f"note {k} of thread {n}", "s")
                    shared.recall(scope, f"note {k}")
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(n,)) for n in range(16)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        assert not any(thread.is_alive() for thread in threads)
        assert errors == []
        for n in range(16):
            assert shared.count(Scope(f"user-{n % 4}", f"task-{n}")) == 25
        connections = server.admin(
            "SELECT count(*) FROM pg_stat_activity WHERE datname ="
            f" '{database_of(url)}' AND pid <> pg_backend_pid()")
        assert connections[0][0] > 1  # the pool grew: threads did not take turns on one
    assert index_problems_at(url) == []



@pooled
def test_writers_and_read_only_readers_share_the_server_s_connections(url: str) -> None:
    """Behind a transaction pooler two stores' calls take turns on the same two server
    connections: what one store's transaction set (read-only, a prepared statement) must
    not be there for the other's next. Run direct, the same calls on the store's own."""
    MemoryStore(url).close()
    errors: list[BaseException] = []
    with MemoryStore(url) as writer, MemoryStore(url, read_only=True) as reader:
        def write(n: int) -> None:
            try:
                for k in range(25):  # past psycopg's five runs before it prepares
                    writer.remember(Scope(f"user-{n}", "t"), "user", f"train {k} of {n}", "s")
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        def read(n: int) -> None:
            try:
                for _ in range(25):
                    reader.recall(Scope(f"user-{n}", "t"), "train", 3)
                    reader.count(Scope(f"user-{n}", "t"))
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=call, args=(n,)) for n in range(6)
                   for call in (write, read)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        assert not any(thread.is_alive() for thread in threads)
        assert [type(error).__name__ + str(error) for error in errors] == []
        assert [reader.count(Scope(f"user-{n}", "t")) for n in range(6)] == [25] * 6
    assert index_problems_at(url) == []




def test_the_policies_read_the_scope_once_a_statement_from_version_16_on(
        url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Version 15's policies read memory.user_ids and split it again for every row a
    statement read; version 16's read each setting once (an InitPlan). The upgrade is one
    transaction: a step that fails leaves version 15's policies as they were."""
    with MemoryStore(url) as store:
        own = store.remember(ALICE, "user", "Alice likes trains.", "s")
        store.remember(BOB, "user", "Bob likes trains.", "s")
    scan = memory._sql("", postgresql="EXPLAIN SELECT id FROM memories WHERE user_id = %s")
    policies = "SELECT DISTINCT qual FROM pg_policies WHERE schemaname = current_schema()"
    with owner_connection(url) as db:
        for statement in PG_BEFORE_SCOPE_ONCE:
            db.execute(statement)
        db.execute("UPDATE store_settings SET value = '15' WHERE name = 'schema_version'")
        before = db.execute(policies).fetchall()
    assert before == [(memory_postgres._PG_POLICY_TEXTS[15],)]

    def failing(db: Any) -> None:
        memory_postgres._scope_once(db)
        raise StoreError("disk full (simulated)")

    monkeypatch.setattr(memory_postgres, "POSTGRES_MIGRATIONS", [
        (target, failing if target == 16 else step)
        for target, step in memory_postgres.POSTGRES_MIGRATIONS])
    with pytest.raises(StoreError, match="simulated"):
        MemoryStore(url)
    monkeypatch.undo()
    with owner_connection(url) as db:
        assert db.execute(policies).fetchall() == before
    with MemoryStore(url) as store:
        assert store.stats()["schema_version"] == 16
        assert ids(store.recall(ALICE, "trains")) == [own]
        with store._snapshot({"alice"}) as db:
            plan = "\n".join(row[0] for row in db.execute(scan, ("alice",)).fetchall())
    # Once a statement, not in the condition each row is read by.
    assert "InitPlan" in plan and "current_setting" not in plan, plan
    with owner_connection(url) as db:
        assert db.execute(policies).fetchall() == [(memory_postgres._PG_POLICY_TEXTS[16],)]

@pooled
def test_statements_are_prepared_on_the_store_s_own_connections_and_never_through_a_pooler(
        url: str, caplog: pytest.LogCaptureFixture) -> None:
    """Planned once, a recall and a durable write take about half the time; a pooler gives
    the server connection a statement was prepared on to other clients. The store tells
    a pooler by the server process serving it: not the one libpq connected to."""
    through_pooler = f"port={PORT}" in url
    with caplog.at_level("INFO", logger="memory"), MemoryStore(url, pool_size=1) as store:
        for n in range(8):
            store.remember(ALICE, "user", f"Alice likes trains {n}.", "s")
            store.recall(ALICE, "trains")
        with store._snapshot({"alice"}) as db:
            (prepared,) = db.execute(memory._sql("", postgresql="SELECT count(*) FROM"
                                                 " pg_prepared_statements")).fetchone()
    assert (prepared == 0) is through_pooler, prepared
    said = "the server is reached through a pooler: no statement is prepared on it"
    assert (said in caplog.messages) is through_pooler

@pytest.mark.parametrize("mode", ["session", "statement"])
def test_a_pooler_by_session_serves_the_store_and_one_by_statement_is_refused_at_open(
        server: Server, mode: str) -> None:
    """Pooling by session, a client keeps its server connection: the store works as on
    its own. By statement, a pooler refuses any transaction of several statements, which
    every call is: the open says so (the pooler hangs up, and a pipeline loses its words)."""
    with Pooler(server, mode=mode) as pooler:
        url = pooler.new_database()
        if mode == "statement":
            with pytest.raises(StoreError, match="the connection pooler pools by statement"):
                MemoryStore(url)
            return
        with MemoryStore(url) as store:
            written = store.remember(ALICE, "user", "Alice likes trains.", "s")
            assert ids(store.recall(ALICE, "trains")) == [written]

# Each worker goes on until it has made this many calls after the restart (or is told
# to stop): on a loaded machine the pool may take a while to connect again.
CALLS_AFTER = 5


def write_through_a_restart(url: str, user: str, started: Any, restarted: Any, done: Any,
                            report: Any) -> None:
    """Remember notes until CALLS_AFTER writes succeeded once the server was back (or
    until told to stop), reporting each id acknowledged, each failure's class, and how
    many writes succeeded after the restart. Says on `started` once its first write is
    acknowledged (or why it could not start), so the restart comes under load."""
    acknowledged, failures, after = [], [], 0
    try:
        store = MemoryStore(url)
    except StoreError as exc:
        started.put(type(exc).__name__)
        return
    with store:
        try:
            acknowledged.append(store.remember(Scope(user, "t"), "user", "a note", "s"))
        except StoreError as exc:
            started.put(type(exc).__name__)
            return
        started.put("writing")
        while not done.is_set() and after < CALLS_AFTER:
            try:
                acknowledged.append(store.remember(Scope(user, "t"), "user", "a note", "s"))
                after += restarted.is_set()
            except StoreError as exc:
                failures.append(type(exc).__name__)
    report.put((acknowledged, failures, after))


@pooled
def test_a_restart_under_load_loses_nothing_acknowledged(url: str, server: Server) -> None:
    """4 writer processes and 4 reader threads through a pg_ctl restart: every id a write
    returned is stored; every failure is a documented StoreError; all go on afterwards."""
    MemoryStore(url).close()
    context = multiprocessing.get_context("spawn")
    started, report = context.Queue(), context.Queue()
    restarted, done = context.Event(), context.Event()
    writers = [context.Process(target=write_through_a_restart,
                               args=(url, f"user-{n}", started, restarted, done, report))
               for n in range(4)]
    read_failures: list[str] = []
    reads_after = collections.Counter[int]()
    stop_reading = threading.Event()
    with MemoryStore(url) as shared:
        def read(n: int) -> None:
            while not stop_reading.is_set() and reads_after[n] < CALLS_AFTER:
                try:
                    shared.recall(Scope(f"user-{n}", "t"), "note")
                    reads_after[n] += restarted.is_set()
                except StoreError as exc:
                    read_failures.append(type(exc).__name__)

        readers = [threading.Thread(target=read, args=(n,)) for n in range(4)]
        for writer in writers:
            writer.start()
        for reader in readers:
            reader.start()
        try:
            # Spawned processes take a while to start on a loaded machine: restart only
            # once every writer has a write acknowledged, so none opens mid-restart.
            assert [started.get(timeout=120) for _ in writers] == ["writing"] * 4
            time.sleep(0.5)
            server.restart()
            restarted.set()
            results = [report.get(timeout=120) for _ in writers]  # each stops by itself
            for reader in readers:
                reader.join(timeout=120)
        finally:
            done.set()
            stop_reading.set()
            for writer in writers:
                writer.join(timeout=60)
            for reader in readers:
                reader.join(timeout=60)
        stored = {m["id"] for n in range(4) for m in shared.memories(Scope(f"user-{n}", "t"))}
    acknowledged = [i for ids, _, _ in results for i in ids]
    assert acknowledged and set(acknowledged) <= stored
    failures = [name for _, names, _ in results for name in names] + read_failures
    assert set(failures) <= {"StoreError", "ConnectionLost", "OutcomeUnknown"}, failures
    assert all(after == CALLS_AFTER for _, _, after in results)
    assert all(reads_after[n] == CALLS_AFTER for n in range(4))


def test_a_role_that_may_not_create_the_store_is_told_what_it_needs(server: Server) -> None:
    """Since PostgreSQL 15 a role may not create tables in a database another role owns."""
    url = server.new_database()
    server.admin(f"ALTER DATABASE {database_of(url)} OWNER TO postgres")
    with pytest.raises(StoreError, match="permission denied: the role needs to own the"
                                         " database.*SQLSTATE 42501"):
        MemoryStore(url)


def test_a_store_dropped_open_ends_its_pool_quietly_with_a_resource_warning(
        url: str, server: Server) -> None:
    """Dropped while its pool still connects in the background (the moment psycopg_pool's
    own finalizer fails in the pool's thread): one ResourceWarning a store, no traceback,
    and no session of the store left on the server."""
    code = (f"import time\nfrom memory import MemoryStore\nfor n in range(5):\n"
            f"    MemoryStore({url!r})\n    time.sleep(0.2)\n")
    done = subprocess.run([sys.executable, "-W", "always::ResourceWarning", "-c", code],
                          cwd=memory_folder(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "Exception ignored" not in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.count("ResourceWarning: a MemoryStore was dropped without close()") == 5
    assert server.admin("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                        " AND pid <> pg_backend_pid()", database_of(url)) == [(0,)]


def memory_folder() -> str:
    return os.path.dirname(os.path.abspath(memory.__file__))


def test_a_statement_without_a_postgresql_form_is_refused_before_it_is_sent() -> None:
    session = memory_postgres._PostgresSession.__new__(memory_postgres._PostgresSession)
    with pytest.raises(StoreError, match="no PostgreSQL form"):
        session.execute("SELECT text FROM memories")  # a str, not one of the store's


def test_each_kind_of_connection_failure_is_named_without_the_url(server: Server) -> None:
    """A missing database, a missing role, a wrong password, a missing socket and a port
    nobody listens on are told apart (with the SQLSTATE the server sent, where it sent
    one); no message repeats the URL, the role, the database or the password."""
    role, secret = "pw_quokka", "hunter2secret"
    server.admin(f"DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{role}')"
                 f" THEN CREATE ROLE {role} LOGIN PASSWORD '{secret}'; END IF; END $$")
    hba = server.data / "pg_hba.conf"
    kept = hba.read_text()
    hba.write_text(f"local all {role} scram-sha-256\n{kept}")  # the first line that fits
    server.admin("SELECT pg_reload_conf()")
    try:
        cases = {
            server.url("no_such_db_quokka"): "the database does not exist (OperationalError,"
                                             " SQLSTATE 3D000)",
            server.url("postgres", "no_such_role_quokka"): "the role does not exist"
                                                           " (OperationalError, SQLSTATE 28000)",
            f"postgresql://{role}:wrong_{secret}@/postgres?host={server.folder}":
                "the server refused the password (OperationalError, SQLSTATE 28P01)",
            f"postgresql://{APP_ROLE}@/quokka_db?host={server.folder}/no_such_quokka_folder":
                "no server socket in the folder the URL names",
            f"postgresql://{APP_ROLE}@127.0.0.1:1/quokka_db": "nothing accepts connections at"
                                                             " the host and port",
        }
        for url, reason in cases.items():
            with pytest.raises(StoreError) as caught:
                MemoryStore(url)
            message = str(caught.value)
            assert message.startswith(f"could not connect to the PostgreSQL server: {reason}"), (
                message)
            assert "quokka" not in message and secret not in message and role not in message
    finally:
        hba.write_text(kept)
        server.admin("SELECT pg_reload_conf()")


@pytest.mark.parametrize("words", [1, memory._STATEMENT_A_WORD_UP_TO + 1],
                         ids=["a statement a word", "one statement for all"])
def test_damaged_index_rows_whose_lengths_add_up_to_whole_ids_are_a_schema_error(
        url: str, server: Server, words: int) -> None:
    with MemoryStore(url) as store:
        store.remember_many([(ALICE, "user", f"hotel note {n}", "s")
                             for n in range(2 * memory.POSTINGS_PER_ROW + 1)])  # three rows
        # One row a byte short, the next a byte long: joined, a whole number of ids.
        server.admin("UPDATE memory_words SET ids = CASE WHEN first_id = (SELECT min(first_id)"
                     " FROM memory_words WHERE word = 'hotel') THEN substring(ids FROM 1 FOR"
                     " length(ids) - 1) ELSE ids || '\\x00'::bytea END WHERE word = 'hotel' AND"
                     " first_id < (SELECT max(first_id) FROM memory_words WHERE word = 'hotel')",
                     database_of(url))
        assert server.admin("SELECT sum(length(ids)) % 8, count(*) FROM memory_words WHERE"
                            " word = 'hotel'", database_of(url)) == [(0, 3)]
        query = " ".join(["hotel", *(f"absent{n}" for n in range(words - 1))])
        for context in (False, True):
            with pytest.raises(SchemaError, match="damaged"):
                store.recall(ALICE, query, rank="idf", context=context)
