"""PostgreSQL as a primary with a hot standby (pg_basebackup's copy, streaming its WAL):
a store opened on the standby, read-your-writes there, and failover through a multi-host
URL with nothing acknowledged lost where the standby is synchronous.

Each pair of servers is the tests' own, started in folders of their own and stopped by
their pids; a failover test stops its primary as a crash does (immediate shutdown).
"""

from __future__ import annotations

import pathlib
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator

import pytest

from helpers import ALICE, BOB
from memory import ConnectionLost, MemoryStore, Scope, StoreError
from pg_server import Server, Standby, database_of, replicating

JOIN_SECONDS = 120


def running_pair(binaries: pathlib.Path, synchronous: bool
                 ) -> Iterator[tuple[Server, Standby]]:
    """A primary and its standby, streaming (synchronous or not), stopped after."""
    primary = Server(pathlib.Path(tempfile.mkdtemp(prefix="memory-primary-")), binaries)
    standby = Standby(primary, pathlib.Path(tempfile.mkdtemp(prefix="memory-standby-")))
    try:
        primary.start()
        standby.start()
        replicating(primary, standby, synchronous)
        yield primary, standby
    finally:
        for server in (standby, primary):
            if (server.data / "postmaster.pid").exists():
                server.stop()
            shutil.rmtree(server.folder, ignore_errors=True)


@pytest.fixture(scope="module")
def shared_pair(binaries: pathlib.Path) -> Iterator[tuple[Server, Standby]]:
    """A primary and its synchronous standby for the tests that stop neither (each on a
    database of its own)."""
    yield from running_pair(binaries, synchronous=True)


@pytest.fixture
def synchronous_pair(binaries: pathlib.Path) -> Iterator[tuple[Server, Standby]]:
    yield from running_pair(binaries, synchronous=True)


@pytest.fixture
def asynchronous_pair(binaries: pathlib.Path) -> Iterator[tuple[Server, Standby]]:
    yield from running_pair(binaries, synchronous=False)


def both(primary: Server, standby: Standby, database: str) -> str:
    """The URL of a database on either host, the writable one chosen (libpq's multi-host
    form)."""
    return (f"postgresql://memory_app@/{database}?host={primary.folder},{standby.folder}"
            "&target_session_attrs=read-write")


def replayed(primary: Server, standby: Standby) -> None:
    """Wait until the standby has replayed all the primary has written so far."""
    (position,) = primary.admin("SELECT pg_current_wal_lsn()::text")[0]
    deadline = time.monotonic() + 60
    while not standby.admin(f"SELECT pg_last_wal_replay_lsn() >= '{position}'::pg_lsn")[0][0]:
        assert time.monotonic() < deadline, "the standby did not replay within a minute"
        time.sleep(0.02)


def test_a_writable_open_on_a_standby_is_refused_and_a_read_only_one_reads_its_scope(
        shared_pair: tuple[Server, Standby]) -> None:
    primary, standby = shared_pair
    url = primary.new_database()
    with MemoryStore(url) as store:
        alices = store.remember(ALICE, "user", "Alice is vegetarian.", "s")
        store.remember(BOB, "user", "Bob is vegetarian.", "s")
    replayed(primary, standby)
    on_standby = standby.url(database_of(url))
    with pytest.raises(StoreError, match=r"the server is a standby \(in recovery\)"):
        MemoryStore(on_standby)
    with MemoryStore(on_standby, read_only=True) as reader:
        assert [m["id"] for m in reader.recall(ALICE, "vegetarian")] == [alices]
        assert reader.count(ALICE) == 1 and reader.get(BOB, alices) is None
    # Row-level security replicates with the tables: a statement that names no user
    # sees none of them.
    import psycopg

    with psycopg.connect(on_standby) as db:
        assert db.execute("SELECT count(*) FROM memories").fetchone() == (0,)


def test_a_url_of_standbys_alone_is_refused_a_writable_store_saying_why(
        shared_pair: tuple[Server, Standby]) -> None:
    primary, standby = shared_pair
    url = primary.new_database()
    MemoryStore(url).close()
    replayed(primary, standby)
    only_standbys = (f"postgresql://memory_app@/{database_of(url)}?host={standby.folder},"
                     f"{standby.folder}&target_session_attrs=read-write")
    with pytest.raises(StoreError, match="could not connect to the PostgreSQL server: no"
                       " host the URL names takes writes") as caught:
        MemoryStore(only_standbys)
    assert str(standby.folder) not in str(caught.value)
    with MemoryStore(standby.url(database_of(url)), read_only=True) as reader:
        assert reader.count(ALICE) == 0


def test_remote_apply_makes_a_write_readable_on_the_standby_when_it_returns(
        shared_pair: tuple[Server, Standby]) -> None:
    """With synchronous_commit = remote_apply (the role's setting in this database here:
    the server's or the role's, never the store's), a commit returns once the synchronous
    standby has applied it, so a reader there sees every write that returned."""
    primary, standby = shared_pair
    url = primary.new_database()
    MemoryStore(url).close()
    primary.admin(f"ALTER ROLE memory_app IN DATABASE {database_of(url)}"
                  " SET synchronous_commit = remote_apply")
    replayed(primary, standby)
    # The standby applies each commit half a second after it has it: a commit that waited
    # only for the standby to have it (synchronous_commit = on) is not there yet.
    standby.admin("ALTER SYSTEM SET recovery_min_apply_delay = 500")
    standby.admin("SELECT pg_reload_conf()")
    try:
        with MemoryStore(url) as writer, \
                MemoryStore(standby.url(database_of(url)), read_only=True) as reader:
            for n in range(3):
                written = writer.remember(ALICE, "user", f"Alice's note {n}.", "s")
                assert reader.get(ALICE, written) is not None, n
    finally:
        standby.admin("ALTER SYSTEM RESET recovery_min_apply_delay")
        standby.admin("SELECT pg_reload_conf()")


def write_until_told(store: MemoryStore, scope: Scope, acknowledged: list[int],
                     failures: list[str], after: threading.Event, enough: threading.Event,
                     stop: threading.Event) -> None:
    """Remember notes until `stop`, each id whose write returned in `acknowledged` and each
    failure's class in `failures`; `enough` once ten writes returned after `after`."""
    since = 0
    while not stop.is_set():
        try:
            acknowledged.append(store.remember(scope, "user", f"note {len(acknowledged)}", "s"))
        except StoreError as exc:
            failures.append(type(exc).__name__)
            time.sleep(0.05)
            continue
        if after.is_set():
            since += 1
            if since >= 10:
                enough.set()


def test_a_promoted_synchronous_standby_holds_every_write_the_store_acknowledged(
        synchronous_pair: tuple[Server, Standby]) -> None:
    """The primary crashes (immediate shutdown) under a writer of durable writes and its
    synchronous standby is promoted: the same store writes on there within seconds, and
    every write that returned is on it."""
    primary, standby = synchronous_pair
    database = database_of(primary.new_database())
    acknowledged: list[int] = []
    failures: list[str] = []
    promoted, enough, stop = threading.Event(), threading.Event(), threading.Event()
    with MemoryStore(both(primary, standby, database), durable=True,
                     pool_timeout=5) as store:
        writer = threading.Thread(target=write_until_told, args=(
            store, ALICE, acknowledged, failures, promoted, enough, stop))
        writer.start()
        try:
            deadline = time.monotonic() + 60
            while len(acknowledged) < 50 and time.monotonic() < deadline:
                time.sleep(0.01)
            primary.stop()  # SIGQUIT: immediate shutdown, as a crash
            standby.promote()
            promoted.set()
            began = time.monotonic()
            assert enough.wait(60), failures[-5:]
            resumed = time.monotonic() - began
        finally:
            stop.set()
            writer.join(JOIN_SECONDS)
        assert not writer.is_alive()
    assert resumed < 30
    assert set(failures) <= {ConnectionLost.__name__, StoreError.__name__, "OutcomeUnknown"}
    with MemoryStore(standby.url(database), read_only=True) as promoted_store:
        held = {m["id"] for m in promoted_store.memories(ALICE, limit=None)}
    assert set(acknowledged) <= held and len(acknowledged) >= 60


def test_an_asynchronous_standby_promoted_after_a_cut_off_lacks_what_was_acknowledged_since(
        asynchronous_pair: tuple[Server, Standby]) -> None:
    """What durable=True cannot promise where the standby is asynchronous: a write the
    primary committed (and the store acknowledged) before the standby received it is not
    on the standby promoted after the primary crashed."""
    primary, standby = asynchronous_pair
    database = database_of(primary.new_database())
    with MemoryStore(both(primary, standby, database), durable=True) as store:
        kept = [store.remember(ALICE, "user", f"kept {n}", "s") for n in range(5)]
        replayed(primary, standby)
        standby.cut_off()
        lost = [store.remember(ALICE, "user", f"lost {n}", "s") for n in range(5)]
        assert {m["id"] for m in store.memories(ALICE, limit=None)} == {*kept, *lost}
    primary.stop()
    standby.promote()
    with MemoryStore(standby.url(database), read_only=True) as promoted_store:
        assert {m["id"] for m in promoted_store.memories(ALICE, limit=None)} == set(kept)
