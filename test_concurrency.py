"""Threads, processes, fork and sudden death: nothing lost, nothing leaked.

Every thread and subprocess here is joined with a timeout; a test that would hang fails.
"""

from __future__ import annotations

import os
import pathlib
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from memory import MemoryStore, Scope
from test_memory import scalar

HERE = pathlib.Path(__file__).resolve().parent
JOIN_SECONDS = 60


@pytest.fixture
def path(tmp_path: pathlib.Path) -> pathlib.Path:
    return tmp_path / "memory.db"


def integrity(path: pathlib.Path) -> str:
    return str(scalar(path, "PRAGMA integrity_check"))


def run_children(code: str, arguments: list[list[str]]) -> list[subprocess.CompletedProcess[str]]:
    """Start one `python -c code` per argument list at once; wait for all, bounded."""
    children = [subprocess.Popen([sys.executable, "-c", code, *args], cwd=HERE, text=True,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                for args in arguments]
    done = []
    deadline = time.monotonic() + JOIN_SECONDS
    try:
        for child in children:
            out, err = child.communicate(timeout=max(1.0, deadline - time.monotonic()))
            done.append(subprocess.CompletedProcess(child.args, child.returncode, out, err))
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait(timeout=10)
    return done


def test_sixteen_threads_share_one_store(path: pathlib.Path) -> None:
    errors: list[BaseException] = []
    written: dict[str, list[int]] = {}
    leaked: list[str] = []
    with MemoryStore(path) as store:
        start = threading.Barrier(16)

        def work(n: int) -> None:
            user = f"user-{n}"
            scope = Scope(user, "shared-task")
            try:
                start.wait(timeout=JOIN_SECONDS)
                ids = written.setdefault(user, [])
                for k in range(40):
                    ids.append(store.remember(scope, "user" if k % 2 else "task",
                                              f"hotel note {k} of {user}", "turn"))
                    for result in store.recall(scope, "hotel note of user", limit=20):
                        if not result["text"].endswith(f"of {user}"):
                            leaked.append(result["text"])
            except BaseException as exc:  # reported below, in the main thread
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(n,)) for n in range(16)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=JOIN_SECONDS)
            assert not thread.is_alive()
        assert errors == []
        assert leaked == []
        for n in range(16):
            scope = Scope(f"user-{n}", "shared-task")
            assert store.count(scope) == 40
            found = {m["id"] for m in store.recall(scope, "hotel note", limit=20)}
            assert found <= set(written[f"user-{n}"])
        all_ids = [i for ids in written.values() for i in ids]
        assert len(set(all_ids)) == 16 * 40
    assert integrity(path) == "ok"


WRITER = textwrap.dedent("""
    import sys
    from memory import MemoryStore, Scope
    path, user, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    scope = Scope(user, "work")
    with MemoryStore(path) as store:
        for n in range(count):
            store.remember(scope, "task" if n % 3 else "user", f"note {n} from {user}", "t")
            if n % 10 == 0:
                for found in store.recall(scope, f"note from {user}", limit=5):
                    assert found["text"].endswith(user), found
        print(store.count(scope))
""")


def test_eight_processes_write_one_file(path: pathlib.Path) -> None:
    MemoryStore(path).close()
    done = run_children(WRITER, [[str(path), f"proc-{n}", "500"] for n in range(8)])
    for child in done:
        assert child.returncode == 0, child.stderr
        assert "locked" not in child.stderr
        assert child.stdout.split() == ["500"]
    db = sqlite3.connect(path)
    try:
        assert db.execute("SELECT count(*) FROM memories").fetchone()[0] == 4000
        per_user = dict(db.execute("SELECT user_id, count(*) FROM memories GROUP BY user_id"))
        assert per_user == {f"proc-{n}": 500 for n in range(8)}
    finally:
        db.close()
    assert integrity(path) == "ok"


def test_processes_racing_to_create_the_file(path: pathlib.Path) -> None:
    done = run_children(WRITER, [[str(path), f"proc-{n}", "5"] for n in range(6)])
    for child in done:
        assert child.returncode == 0, child.stderr
    with MemoryStore(path) as store:
        assert sum(store.count(Scope(f"proc-{n}", "work")) for n in range(6)) == 30


CRASHER = textwrap.dedent("""
    import sys
    from memory import MemoryStore, Scope
    path, start = sys.argv[1], int(sys.argv[2])
    store = MemoryStore(path)
    scope = Scope("crash", "test")
    n = start
    while True:
        memory_id = store.remember(scope, "user", f"durable memory number {n}", f"turn-{n}")
        print(memory_id, n, flush=True)
        n += 1
""")


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_sigkill_never_loses_a_returned_memory(path: pathlib.Path) -> None:
    rng = random.Random(20261020)
    reported: dict[int, int] = {}
    for round_ in range(20):
        child = subprocess.Popen([sys.executable, "-c", CRASHER, str(path), str(round_ * 10**6)],
                                 cwd=HERE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True)
        watchdog = threading.Timer(JOIN_SECONDS, child.kill)  # readline has no timeout
        watchdog.start()
        try:
            assert child.stdout is not None
            first = child.stdout.readline()  # the store is open and has written once
            assert first, child.stderr.read() if child.stderr else ""
            time.sleep(rng.uniform(0, 0.25))
            child.send_signal(signal.SIGKILL)
            out, _ = child.communicate(timeout=JOIN_SECONDS)
        finally:
            watchdog.cancel()
            if child.poll() is None:
                child.kill()
                child.wait(timeout=10)
        assert child.returncode == -signal.SIGKILL
        for line in (first + out).splitlines():
            parts = line.split()
            if len(parts) == 2:  # a line cut by the kill was never a report
                reported[int(parts[0])] = int(parts[1])
        assert integrity(path) == "ok"
        db = sqlite3.connect(path)
        try:
            stored = dict(db.execute("SELECT id, text FROM memories"))
        finally:
            db.close()
        for memory_id, n in reported.items():
            assert stored.get(memory_id) == f"durable memory number {n}"
    assert len(reported) >= 20
    with MemoryStore(path) as store:
        assert store.count(Scope("crash", "test")) >= len(reported)


def wait_for_child(pid: int) -> int:
    """waitpid with a deadline: a child still running then is killed and the test fails."""
    deadline = time.monotonic() + JOIN_SECONDS
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        time.sleep(0.01)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    pytest.fail(f"child {pid} still running after {JOIN_SECONDS} s")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_forked_child_opens_its_own_connection(path: pathlib.Path) -> None:
    store = MemoryStore(path)
    try:
        scope = Scope("parent", "t")
        store.remember(scope, "user", "written before the fork", "s")
        parent_connection = store.db
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report through the pipe, leave without cleanup
            code = 1
            try:
                os.close(read_end)
                child_scope = Scope("child", "t")
                store.remember(child_scope, "user", "written by the child", "s")
                fresh = store.db is not parent_connection
                seen = store.count(scope) == 1 and store.count(child_scope) == 1
                os.write(write_end, b"ok" if fresh and seen else b"no")
                code = 0
            finally:
                os._exit(code)
        os.close(write_end)
        status = wait_for_child(pid)
        with os.fdopen(read_end, "rb") as report:
            assert report.read() == b"ok"
        assert os.waitstatus_to_exitcode(status) == 0
        assert store.db is parent_connection
        assert store.count(Scope("child", "t")) == 1
        store.remember(scope, "user", "parent still writes", "s")
        assert store.count(scope) == 2
    finally:
        store.close()
    assert integrity(path) == "ok"
