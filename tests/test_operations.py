"""Operations done at most once: a call under an operation id records its result in its
own transaction, a replay with the same arguments returns it and writes nothing, the id
with other arguments is refused; receipts are scoped, expire, and leave with the user. On
both engines."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from typing import Any

import pytest

import memory
from helpers import ALICE, ALICE_WORK, BOB, TOUCHES_MEMORY_DATA, SetClock, all_finish
from memory import MemoryInputError, MemoryStore, OperationConflict, VersionConflict
from model import rows_of_user


def test_each_call_replayed_returns_its_result_and_writes_nothing(store: MemoryStore) -> None:
    kept = store.remember(ALICE, "task", "Seat: aisle.", "s", key="seat", operation="op-1")
    assert store.remember(ALICE, "task", "Seat: aisle.", "s", key="seat",
                          operation="op-1") == kept
    assert store.get(ALICE, key="seat")["version"] == 1  # type: ignore[index]
    many = store.remember_many([(ALICE, "task", f"note {n}", "s") for n in range(3)],
                               operation="op-2")
    assert store.remember_many([(ALICE, "task", f"note {n}", "s") for n in range(3)],
                               operation="op-2") == many
    assert store.count(ALICE) == 4
    revised = store.revise(ALICE, many[0], "note zero", "s", operation="op-3")
    assert store.revise(ALICE, many[0], "note zero", "s", operation="op-3") == revised
    assert store.rename(ALICE, "seat", "seats/1", operation="op-4") == kept
    assert store.rename(ALICE, "seat", "seats/1", operation="op-4") == kept
    assert store.get(ALICE, key="seats/1")["version"] == 2  # type: ignore[index]
    assert store.forget_where(ALICE, {"$source": "s", "$key": {"$ne": "seats/1"}},
                              operation="op-5") == 3
    store.remember(ALICE, "task", "note 9", "s")  # a replay deletes nothing new
    assert store.forget_where(ALICE, {"$source": "s", "$key": {"$ne": "seats/1"}},
                              operation="op-5") == 3
    assert store.forget(ALICE, key="seats/1", operation="op-6") is True
    store.remember(ALICE, "task", "Seat: window.", "s", key="seats/1")
    assert store.forget(ALICE, key="seats/1", operation="op-6") is True  # as recorded
    assert [m["text"] for m in store.memories(ALICE)] == ["note 9", "Seat: window."]
    assert store.revise(BOB, 1, "x", "s", operation="op-7") is None  # not found: recorded
    assert store.operation(BOB, "op-7")["result"] is None  # type: ignore[index]


def test_an_id_used_for_another_call_is_refused_and_nothing_is_written(
        store: MemoryStore) -> None:
    store.remember(ALICE, "task", "Seat: aisle.", "s", operation="op")
    others: list[Callable[[], object]] = [
        lambda: store.remember(ALICE, "task", "Seat: window.", "s", operation="op"),
        lambda: store.remember(ALICE, "user", "Seat: aisle.", "s", operation="op"),
        lambda: store.forget(ALICE, 1, operation="op"),
        lambda: store.rename(ALICE, "a", "b", operation="op")]
    for other in others:
        with pytest.raises(OperationConflict, match="used for another call") as refused:
            other()
        assert "aisle" not in str(refused.value) and "window" not in str(refused.value)
    assert [m["text"] for m in store.memories(ALICE)] == ["Seat: aisle."]


def test_a_receipt_is_the_scope_s_and_a_failed_call_records_none(store: MemoryStore) -> None:
    kept = store.remember(ALICE, "task", "Seat: aisle.", "s", key="seat", operation="op")
    shown = store.operation(ALICE, "op")
    assert shown is not None and shown["result"] == kept and shown["operation"] == "op"
    assert shown["expires_at"] > shown["created_at"]
    assert store.operation(BOB, "op") is None and store.operation(ALICE_WORK, "op") is None
    # The same id is another operation in another scope.
    other = store.remember(BOB, "task", "Seat: window.", "s", key="seat", operation="op")
    assert other != kept and store.operation(BOB, "op")["result"] == other  # type: ignore[index]
    with pytest.raises(VersionConflict):
        store.remember(ALICE, "task", "Seat: mid.", "s", key="seat", if_version=0,
                       operation="op-2")
    assert store.operation(ALICE, "op-2") is None
    store.remember(ALICE, "task", "Seat: mid.", "s", key="seat", if_version=1,
                   operation="op-2")
    assert store.get(ALICE, key="seat")["text"] == "Seat: mid."  # type: ignore[index]


def test_receipts_expire_and_go_with_the_user(target: str, clock: SetClock) -> None:
    with MemoryStore(target, clock=clock, receipts_ttl=60) as store:
        first = store.remember(ALICE, "task", "note", "s", operation="op")
        clock.advance(61)
        assert store.operation(ALICE, "op") is None
        again = store.remember(ALICE, "task", "note", "s", operation="op")  # done anew
        assert again != first and store.count(ALICE) == 2
        store.remember(ALICE, "task", "other", "s", operation="op-2")
        clock.advance(61)
        store.remember(ALICE, "task", "third", "s", operation="op-3")  # drops the expired
        assert rows_of_user(target, "memory_receipts", "alice") == 1
        clock.advance(61)
        store.remember(BOB, "task", "bob's", "s", operation="op")
        assert store.purge_expired() == 0
        assert rows_of_user(target, "memory_receipts", "alice") == 0
        assert rows_of_user(target, "memory_receipts", "bob") == 1
        store.erase_user("bob")
        assert rows_of_user(target, "memory_receipts", "bob") == 0


def test_the_receipt_and_the_call_s_writes_commit_together(
        store: MemoryStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """A failure as the receipt is recorded leaves none of the call's writes (the call's
    own last step does not commit first)."""
    store.remember(ALICE, "task", "Seat: aisle.", "s", key="seat")

    def failing(*args: Any) -> None:
        raise OSError("disk full (simulated)")

    monkeypatch.setattr(memory._Receipt, "record", failing)
    calls: list[Callable[[], object]] = [
             lambda: store.remember(ALICE, "task", "new", "s", operation="a"),
             lambda: store.remember_many([(ALICE, "task", "new", "s")], operation="b"),
             lambda: store.forget(ALICE, key="seat", operation="c"),
             lambda: store.forget_where(ALICE, {"$key": "seat"}, operation="d"),
             lambda: store.revise(ALICE, 1, "Seat: window.", "s", operation="e"),
             lambda: store.rename(ALICE, "seat", "seats/1", operation="f")]
    for call in calls:
        with pytest.raises(OSError, match="simulated"):
            call()
    monkeypatch.undo()
    assert [(m["key"], m["text"], m["version"]) for m in store.memories(ALICE)] == [
        ("seat", "Seat: aisle.", 1)]
    assert all(store.operation(ALICE, op) is None for op in "abcdef")


@pytest.mark.parametrize(("operation", "message"), [
    ("", "operation must be a str of 1 to 128"), ("x" * 129, "operation must be a str of 1"),
    ("a\nb", "printable"), (7, "operation must be a str"), (None, None)])
def test_a_bad_operation_id_is_refused_before_anything_is_written(
        store: MemoryStore, operation: Any, message: str | None) -> None:
    if message is None:  # none: no receipt
        store.remember(ALICE, "task", "note", "s", operation=operation)
        assert store.count(ALICE) == 1
        return
    with pytest.raises(MemoryInputError, match=message):
        store.remember(ALICE, "task", "note", "s", operation=operation)
    with pytest.raises(MemoryInputError, match=message):
        store.operation(ALICE, operation)
    assert store.count(ALICE) == 0


def test_a_batch_under_one_id_is_of_one_scope(store: MemoryStore) -> None:
    with pytest.raises(MemoryInputError, match="every item is of one scope"):
        store.remember_many([(ALICE, "task", "a", "s"), (BOB, "task", "b", "s")],
                            operation="op")
    with pytest.raises(MemoryInputError, match="every item is of one scope"):
        store.remember_many([], operation="op")
    assert store.count(ALICE) == 0 and store.count(BOB) == 0


def test_replays_racing_write_once(target: str) -> None:
    stores = [MemoryStore(target) for _ in range(6)]
    results: list[int] = []
    failures: list[BaseException] = []
    barrier = threading.Barrier(len(stores))

    def replay(store: MemoryStore) -> None:
        try:
            barrier.wait(timeout=60)
            results.append(store.remember(ALICE, "task", "once", "s", operation="op"))
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)

    ended = all_finish([threading.Thread(target=replay, args=(store,)) for store in stores])
    try:
        assert ended and not failures
        assert len(results) == 6 and len(set(results)) == 1
        assert stores[0].count(ALICE) == 1
    finally:
        for store in stores:
            store.close()


def test_every_statement_on_receipts_names_the_user_and_the_task(tmp_path: Any) -> None:
    statements: list[str] = []
    with MemoryStore(str(tmp_path / "m.db")) as store:
        store.db.set_trace_callback(statements.append)
        store.remember(ALICE, "task", "note", "s", operation="op")
        store.remember(ALICE, "task", "note", "s", operation="op")
        store.forget(ALICE, 1, operation="op-2")
        store.operation(ALICE, "op")
        store.db.set_trace_callback(None)
    touching = [s for s in statements if TOUCHES_MEMORY_DATA.search(s)
                and "memory_receipts" in s]
    assert len(touching) >= 4
    for statement in touching:
        assert re.search(r"WHERE user_id = .*\btask_key = ", statement), statement


def test_a_caller_s_own_fingerprint_decides_what_a_replay_is(store: MemoryStore) -> None:
    """A framework that fingerprints its calls: the receipt keeps its fingerprint, which
    operation() gives back, and the id with another fingerprint is another call."""
    kept = store.remember(ALICE, "task", "Seat: aisle.", "s", key="seat",
                          operation=("call-1", "fp-a"))
    assert store.operation(ALICE, "call-1") == {
        "operation": "call-1", "fingerprint": "fp-a", "result": kept,
        "created_at": store.operation(ALICE, "call-1")["created_at"],  # type: ignore[index]
        "expires_at": store.operation(ALICE, "call-1")["expires_at"]}  # type: ignore[index]
    # The same fingerprint is a replay, even where the arguments differ: the caller's
    # fingerprint names the call.
    assert store.remember(ALICE, "task", "Seat: aisle!", "s", key="seat",
                          operation=("call-1", "fp-a")) == kept
    with pytest.raises(OperationConflict):
        store.remember(ALICE, "task", "Seat: aisle.", "s", key="seat",
                       operation=("call-1", "fp-b"))
    with pytest.raises(OperationConflict):  # the store's digest is not the caller's
        store.remember(ALICE, "task", "Seat: aisle.", "s", key="seat", operation="call-1")
    assert store.forget(ALICE, kept, operation=("call-2", "fp-c"))
    assert store.forget(ALICE, kept, operation=("call-2", "fp-c"))  # replayed: True
    assert store.count(ALICE) == 0
    digest = store.operation(ALICE, "call-2")
    assert digest is not None and digest["fingerprint"] == "fp-c"
    store.remember(ALICE, "task", "x", "s", operation="call-3")
    (stored,) = [r for r in [store.operation(ALICE, "call-3")] if r is not None]
    assert re.fullmatch("[0-9a-f]{64}", stored["fingerprint"])


@pytest.mark.parametrize("operation", [("op",), ("op", ""), ("op", "a\nb"), ("op", 7),
                                       ("op", "x" * 129), ("", "fp"), ["op", "fp"]])
def test_a_bad_caller_fingerprint_is_refused(operation: Any) -> None:
    with MemoryStore(":memory:") as store, pytest.raises(MemoryInputError, match="operation"):
        store.remember(ALICE, "task", "note", "s", operation=operation)
    with MemoryStore(":memory:") as store:
        assert store.count(ALICE) == 0


def test_a_receipt_s_digest_is_of_the_arguments_given_by_name() -> None:
    """A receipt written by this release is replayed by a later one that adds an option:
    the digest is of the named arguments the call gave, options left at None left out.
    The value is this release's: a change of it strands every receipt kept."""
    with MemoryStore(":memory:") as store:
        receipt = store._receipt(ALICE, "op", "remember", memory._given(memory._new_row(
            ALICE, "task", "Seat: aisle.", "s", key="seat")), False)
    assert receipt is not None and receipt.fingerprint == (
        "4c2330eb7b26f77abce85f447ab6ada685fd5a10f3ce7c0b5760e495a84fb771")
