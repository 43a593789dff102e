"""The benchmarks' one way to time a call and to open the stores they compare: a median
of many calls, and each engine's new store (SQLite files, databases of a throw-away
PostgreSQL server)."""

from __future__ import annotations

import contextlib
import itertools
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path


def p50_ms(call: Callable[[], object], repeat: int) -> float:
    """The median of `repeat` calls, in milliseconds."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


@contextlib.contextmanager
def store_engines(sqlite_only: bool, prefix: str
                  ) -> Iterator[list[tuple[str, Callable[[], str]]]]:
    """Each engine's name and where its next new store goes: a new SQLite file in a new
    folder, and (unless `sqlite_only`) a new database of a server started here and
    stopped on the way out."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    files = (str(folder / f"{n}.db") for n in itertools.count())
    engines: list[tuple[str, Callable[[], str]]] = [("SQLite", lambda: next(files))]
    server = None
    if not sqlite_only:
        from pg_server import bench_server
        server = bench_server()
        engines.append(("PostgreSQL", server.new_database))
    try:
        yield engines
    finally:
        if server is not None:
            server.stop()
