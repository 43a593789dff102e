"""Threads, processes, fork and sudden death: nothing lost, nothing leaked.

Every thread and subprocess here is joined with a timeout; a test that would hang fails.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import pathlib
import queue
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from helpers import ROOT, WRITER, scalar
from memory import BUSY_TIMEOUT_SECONDS, MemoryStore, Scope, StoreError

JOIN_SECONDS = 60


@pytest.fixture
def path(tmp_path: pathlib.Path) -> pathlib.Path:
    return tmp_path / "memory.db"


def integrity(path: pathlib.Path) -> str:
    return str(scalar(path, "PRAGMA integrity_check"))


def run_children(code: str, arguments: list[list[str]]) -> list[subprocess.CompletedProcess[str]]:
    """Start one `python -c code` per argument list at once; wait for all, bounded."""
    children = [subprocess.Popen([sys.executable, "-c", code, *args], cwd=ROOT, text=True,
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


def open_new_files_together(folder: str, rounds: int, barrier: Any, errors: Any) -> None:
    """Open (and close) a store on each round's new file the moment every opener is
    ready; put the messages of the errors seen, as a list, on `errors`."""
    seen = []
    for n in range(rounds):
        barrier.wait(timeout=JOIN_SECONDS)
        try:
            MemoryStore(os.path.join(folder, f"new-{n}.db")).close()
        except StoreError as exc:
            seen.append(str(exc))
    errors.put(seen)


# 8 openers on each of 80 new files: 640 opens. Were 1 open in 100 to fail, all would
# succeed by luck with a probability of 0.99 ** 640, under 0.2%.
OPENERS, ROUNDS = 8, 80


def test_processes_opening_new_files_at_once_all_succeed(tmp_path: pathlib.Path) -> None:
    context = multiprocessing.get_context("spawn")
    barrier, errors = context.Barrier(OPENERS), context.Queue()
    openers = [context.Process(target=open_new_files_together,
                               args=(str(tmp_path), ROUNDS, barrier, errors))
               for _ in range(OPENERS)]
    for opener in openers:
        opener.start()
    try:
        seen = [errors.get(timeout=JOIN_SECONDS * 2) for _ in openers]
    finally:
        for opener in openers:
            opener.join(timeout=JOIN_SECONDS)
            if opener.is_alive():
                opener.kill()
    assert seen == [[]] * OPENERS


def test_threads_opening_new_files_at_once_all_succeed(tmp_path: pathlib.Path) -> None:
    barrier, errors = threading.Barrier(OPENERS), queue.Queue[list[str]]()
    openers = [threading.Thread(target=open_new_files_together,
                                args=(str(tmp_path), ROUNDS, barrier, errors))
               for _ in range(OPENERS)]
    for opener in openers:
        opener.start()
    for opener in openers:
        opener.join(timeout=JOIN_SECONDS * 2)
    assert not any(opener.is_alive() for opener in openers)
    assert [errors.get(timeout=1) for _ in openers] == [[]] * OPENERS


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
                                 cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
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


def attempt(call: Callable[[], int]) -> list[Any]:
    """["id", n] for a write that returned, ["error", class, message] for one refused."""
    try:
        return ["id", call()]
    except StoreError as exc:
        return ["error", type(exc).__name__, str(exc)]


def child_writes(store: MemoryStore, path: pathlib.Path, tag: str) -> list[list[Any]]:
    """What a forked child gets when it writes through the parent's store and a new one."""
    scope = Scope("child", "t")

    def through_new_store() -> int:
        with MemoryStore(path) as fresh:
            return fresh.remember(scope, "user", f"{tag} through a new store", "s")

    return [attempt(lambda: store.remember(scope, "user", f"{tag} through the parent's", "s")),
            attempt(through_new_store)]


def assert_nothing_acknowledged_was_lost(path: pathlib.Path, outcomes: list[list[Any]]) -> None:
    handed = [outcome[1] for outcome in outcomes if outcome[0] == "id"]
    with MemoryStore(path) as store:
        stored = {m["id"] for m in store.export_user("child")}
        assert set(handed) <= stored
        newest = store.remember(Scope("late", "t"), "user", "after the child", "s")
    assert newest > max([0, *handed])  # never an id the child was handed
    assert integrity(path) == "ok"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_never_loses_a_write_or_reuses_an_id(path: pathlib.Path) -> None:
    store = MemoryStore(path)
    store.remember(Scope("parent", "t"), "user", "written before the fork", "s")
    to_parent, from_child = os.pipe()
    to_child, from_parent = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report through the pipe, leave without cleanup
        code = 1
        try:
            first = child_writes(store, path, "before the parent closed")
            os.write(from_child, b"1")
            os.read(to_child, 1)  # the parent has closed its store by now
            second = child_writes(store, path, "after the parent closed")
            os.write(from_child, json.dumps(first + second).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(from_child)
    os.close(to_child)
    assert os.read(to_parent, 1) == b"1"
    store.close()  # the close whose checkpoint used to delete the WAL under the child
    os.write(from_parent, b"1")
    status = wait_for_child(pid)
    with os.fdopen(to_parent, "rb") as report:
        outcomes = json.loads(report.read())
    os.close(from_parent)
    assert os.waitstatus_to_exitcode(status) == 0
    assert_nothing_acknowledged_was_lost(path, outcomes)
    for outcome in outcomes:  # refused, saying what to do instead
        assert outcome[:2] == ["error", "StoreError"]
        assert "fork" in outcome[2] and "spawn" in outcome[2]


def report_child_writes(store: MemoryStore, path: pathlib.Path, queue: Any) -> None:
    queue.put(json.dumps(child_writes(store, path, "multiprocessing")))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_multiprocessing_fork_children_are_refused_too(path: pathlib.Path) -> None:
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    with MemoryStore(path) as store:
        store.remember(Scope("parent", "t"), "user", "written before the fork", "s")
        child = context.Process(target=report_child_writes, args=(store, path, queue))
        child.start()
        outcomes = json.loads(queue.get(timeout=JOIN_SECONDS))
        child.join(timeout=JOIN_SECONDS)
        assert child.exitcode == 0
    assert_nothing_acknowledged_was_lost(path, outcomes)
    assert [outcome[:2] for outcome in outcomes] == [["error", "StoreError"]] * 2


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_child_forked_mid_write_is_refused_at_once(path: pathlib.Path) -> None:
    inside, release = threading.Event(), threading.Event()

    def slow_clock() -> str:  # holds the write transaction open until released
        inside.set()
        assert release.wait(JOIN_SECONDS)
        return "2026-10-20T09:00:00+00:00"

    with MemoryStore(path, clock=slow_clock) as store:
        writer = threading.Thread(
            target=store.remember, args=(Scope("parent", "t"), "user", "mid-write", "s"))
        writer.start()
        assert inside.wait(JOIN_SECONDS)
        to_parent, from_child = os.pipe()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                started = time.monotonic()
                outcomes = child_writes(store, path, "mid-write")
                quick = time.monotonic() - started < BUSY_TIMEOUT_SECONDS
                os.write(from_child, json.dumps([quick, outcomes]).encode())
                code = 0
            finally:
                os._exit(code)
        os.close(from_child)
        status = wait_for_child(pid)
        release.set()
        writer.join(timeout=JOIN_SECONDS)
        assert not writer.is_alive()
        with os.fdopen(to_parent, "rb") as report:
            quick, outcomes = json.loads(report.read())
        assert os.waitstatus_to_exitcode(status) == 0
        assert quick  # refused, not left waiting on a lock nobody in the child holds
        assert store.count(Scope("parent", "t")) == 1
    assert_nothing_acknowledged_was_lost(path, outcomes)
    assert [outcome[:2] for outcome in outcomes] == [["error", "StoreError"]] * 2


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_store_opened_after_the_fork_works_in_the_child(path: pathlib.Path) -> None:
    with MemoryStore(path) as store:
        store.remember(Scope("parent", "t"), "user", "written before the fork", "s")
    pid = os.fork()  # no store of this process has the file open now
    if pid == 0:
        code = 1
        try:
            with MemoryStore(path) as own:
                own.remember(Scope("child", "t"), "user", "the child's own store", "s")
                code = 0 if own.count(Scope("parent", "t")) == 1 else 2
        finally:
            os._exit(code)
    assert os.waitstatus_to_exitcode(wait_for_child(pid)) == 0
    with MemoryStore(path) as store:
        assert store.count(Scope("child", "t")) == 1
    assert integrity(path) == "ok"


# -- signals ------------------------------------------------------------------------------

HOLDER = textwrap.dedent("""
    import sqlite3, sys
    db = sqlite3.connect(sys.argv[1], isolation_level=None)
    db.execute("BEGIN IMMEDIATE")
    print("locked", flush=True)
    sys.stdin.readline()
    db.execute("COMMIT")
""")


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs setitimer")
def test_a_signal_while_waiting_for_the_write_lock_leaves_no_transaction(
        path: pathlib.Path) -> None:
    store = MemoryStore(path)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(path)], text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert holder.stdin is not None and holder.stdout is not None

    def let_go() -> None:
        assert holder.stdin is not None
        holder.stdin.write("go\n")
        holder.stdin.flush()

    release = threading.Timer(1.0, let_go)

    def timed_out(signum: int, frame: object) -> None:
        raise TimeoutError("the caller's own deadline")

    previous = signal.signal(signal.SIGALRM, timed_out)
    try:
        assert holder.stdout.readline() == "locked\n"
        release.start()
        signal.setitimer(signal.ITIMER_REAL, 0.2)  # fires while BEGIN IMMEDIATE waits
        with pytest.raises(TimeoutError):
            store.remember(Scope("alice", "t"), "user", "never acknowledged", "s")
        assert not store.db.in_transaction
        assert holder.wait(timeout=JOIN_SECONDS) == 0
        # The next call, and another process, proceed.
        store.remember(Scope("alice", "t"), "user", "the next call", "s")
        other = run_children(WRITER, [[str(path), "other", "3"]])[0]
        assert other.returncode == 0, other.stderr
        assert store.count(Scope("other", "work")) == 3
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        release.cancel()
        if holder.poll() is None:
            holder.kill()
            holder.wait(timeout=10)
        store.close()
    assert integrity(path) == "ok"


def test_a_keyboard_interrupt_from_the_clock_leaves_no_transaction(path: pathlib.Path) -> None:
    class Clock:  # the second reading a write takes is interrupted, as by Ctrl-C
        readings = iter(["2026-10-20T09:00:00+00:00"])

        def __call__(self) -> str:
            for reading in self.readings:
                return reading
            raise KeyboardInterrupt

        def now(self) -> str:  # what reads use
            return "2026-10-20T09:00:00+00:00"

    with MemoryStore(path, clock=Clock()) as store:
        with pytest.raises(KeyboardInterrupt):
            store.remember_many([(Scope("alice", "t"), "user", f"memory {n}", "s")
                                 for n in range(3)])
        assert not store.db.in_transaction
        assert store.count(Scope("alice", "t")) == 0
        store.clock = lambda: "2026-10-20T10:00:00+00:00"
        store.remember(Scope("alice", "t"), "user", "the next call", "s")
        other = run_children(WRITER, [[str(path), "other", "2"]])[0]
        assert other.returncode == 0, other.stderr
        assert store.count(Scope("other", "work")) == 2
    assert integrity(path) == "ok"


class HeldClock:
    """A clock that, once armed, holds the write reading it until the test lets it go."""

    def __init__(self) -> None:
        self.armed = False
        self.reading = threading.Event()
        self.go_on = threading.Event()

    def __call__(self) -> str:
        if self.armed:
            self.reading.set()
            assert self.go_on.wait(JOIN_SECONDS)
        return "2026-10-20T09:00:00+00:00"


def test_close_from_another_thread_waits_for_a_running_call(target: str) -> None:
    """A remember in flight when another thread closes the store is stored and returns its
    id; close() returns after it, and a call after close() is the closed-store error."""
    clock = HeldClock()
    store = MemoryStore(target, clock=clock)
    scope = Scope("alice", "trip")
    results: list[object] = []
    clock.armed = True
    writer = threading.Thread(target=lambda: results.append(
        _outcome(lambda: store.remember(scope, "user", "Alice is vegetarian.", "t"))))
    closer = threading.Thread(target=store.close)
    writer.start()
    assert clock.reading.wait(JOIN_SECONDS)
    closer.start()
    closer.join(0.5)
    closing_waited = closer.is_alive()
    clock.go_on.set()
    for thread in (writer, closer):
        thread.join(JOIN_SECONDS)
        assert not thread.is_alive()
    assert closing_waited
    assert results == [1]
    with pytest.raises(StoreError, match="closed"):
        store.count(scope)
    store.close()  # again: nothing
    with MemoryStore(target) as reopened:
        assert [m["text"] for m in reopened.memories(scope)] == ["Alice is vegetarian."]


def _outcome(call: Callable[[], object]) -> object:
    try:
        return call()
    except Exception as exc:  # the test compares what came back
        return exc
