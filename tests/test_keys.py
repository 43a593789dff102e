"""Keys as a notebook's paths: each keyed memory's version, writes and deletions that
compare it first (compare-and-set), on both engines, under threads and processes; keys
listed by prefix and renamed; and a state machine of keyed writes against a model."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

import memory
from helpers import ALICE, ALICE_WORK, BOB, ROOT, SetClock, all_finish
from memory import MemoryInputError, MemoryStore, Scope, VersionConflict

SECRET = "s3cr3t-TEXT"


def version(store: MemoryStore, scope: Scope, key: str) -> int | None:
    found = store.get(scope, key=key)
    return None if found is None else found["version"]


def test_a_key_s_version_counts_its_replaces_and_revisions(store: MemoryStore) -> None:
    first = store.remember(ALICE, "task", "Seat: aisle.", "s", key="seat")
    assert version(store, ALICE, "seat") == 1
    store.remember(ALICE, "task", "Seat: window.", "s", key="seat")
    assert version(store, ALICE, "seat") == 2
    (latest,) = store.memories(ALICE)
    revised = store.revise(ALICE, latest["id"], "Seat: aisle, near the front.", "s")
    assert revised is not None and revised > first
    now = store.get(ALICE, revised)
    assert now is not None and now == {**latest, "id": revised, "version": 3,
                                       "text": "Seat: aisle, near the front.",
                                       "updated_at": now["updated_at"]}
    # Another owner's key is its own: the user level's, the other task's.
    store.remember(ALICE, "user", "Seat anywhere.", "s", key="seat")
    store.remember(ALICE_WORK, "task", "Desk by the window.", "s", key="seat")
    assert version(store, Scope("alice", "other"), "seat") == 1
    assert version(store, ALICE_WORK, "seat") == 1 and version(store, ALICE, "seat") == 3
    # A memory with metadata but no key has a version too; one with neither shows none.
    noted = store.remember(ALICE, "task", "Likes tea.", "s", metadata={"kind": "pref"})
    plain = store.remember(ALICE, "task", "Likes jazz.", "s")
    assert store.get(ALICE, noted)["version"] == 1  # type: ignore[index]
    assert "version" not in store.get(ALICE, plain)  # type: ignore[operator]
    renoted = store.revise(ALICE, noted, "Likes green tea.", "s")
    assert renoted is not None and store.get(ALICE, renoted)["version"] == 2  # type: ignore[index]


def test_revise_keeps_the_metadata_or_replaces_it(store: MemoryStore) -> None:
    first = store.remember(ALICE, "task", "Seat: aisle.", "s", key="seat",
                           metadata={"kind": "seat", "by": "agent-1"})
    kept = store.revise(ALICE, first, "Seat: aisle, row 3.", "s")
    assert kept is not None and store.get(ALICE, kept)["metadata"] == {  # type: ignore[index]
        "kind": "seat", "by": "agent-1"}
    replaced = store.revise(ALICE, kept, "Seat: window.", "s", metadata={"by": "agent-2"})
    assert replaced is not None
    assert store.get(ALICE, replaced)["metadata"] == {"by": "agent-2"}  # type: ignore[index]
    assert store.memories(ALICE, where={"kind": "seat"}) == []  # its terms replaced too
    assert [m["id"] for m in store.memories(ALICE, where={"by": "agent-2"})] == [replaced]
    with pytest.raises(MemoryInputError, match="metadata"):
        store.revise(ALICE, replaced, "Seat: x.", "s", metadata=["not", "an", "object"])  # type: ignore[arg-type]
    assert store.get(ALICE, replaced)["text"] == "Seat: window."  # type: ignore[index]


def test_if_version_writes_only_over_the_version_it_names(store: MemoryStore,
                                                           clock: SetClock) -> None:
    store.remember(ALICE, "task", "Seat: aisle.", "s", key="seat", if_version=0)
    for wrong in (0, 2, 7):
        with pytest.raises(VersionConflict, match=f"at version 1, not version {wrong}$") \
                as conflict:
            store.remember(ALICE, "task", f"{SECRET} window", "s", key="seat",
                           if_version=wrong)
        assert conflict.value.current == 1 and conflict.value.expected == wrong
        assert SECRET not in str(conflict.value) and "aisle" not in str(conflict.value)
    assert [m["text"] for m in store.memories(ALICE)] == ["Seat: aisle."]
    store.remember(ALICE, "task", "Seat: window.", "s", key="seat", if_version=1)
    assert version(store, ALICE, "seat") == 2
    with pytest.raises(VersionConflict, match="holds no live memory \\(version 0\\), not"
                                              " version 1"):
        store.remember(ALICE, "task", "Meal: vegetarian.", "s", key="meal", if_version=1)
    assert store.get(ALICE, key="meal") is None
    # An expired holder is no live memory: version 0, and the key starts again at 1.
    store.remember(ALICE, "task", "Gate: 12.", "s", key="gate", ttl=60)
    clock.advance(61)
    store.remember(ALICE, "task", "Gate: 14.", "s", key="gate", if_version=0)
    assert version(store, ALICE, "gate") == 1 and store.count(ALICE) == 2


def test_forget_and_revise_compare_the_version_first(store: MemoryStore) -> None:
    store.remember(ALICE, "task", "Seat: aisle.", "s", key="seat")
    store.remember(ALICE, "task", "Seat: window.", "s", key="seat")
    (held,) = store.memories(ALICE)
    with pytest.raises(VersionConflict, match="the memory holds a live memory at version 2"
                                              ", not version 1"):
        store.forget(ALICE, key="seat", if_version=1)
    with pytest.raises(VersionConflict):
        store.forget(ALICE, held["id"], if_version=3)
    with pytest.raises(VersionConflict):
        store.revise(ALICE, held["id"], "Seat: middle.", "s", if_version=1)
    assert store.memories(ALICE) == [held]
    revised = store.revise(ALICE, held["id"], "Seat: middle.", "s", if_version=2)
    assert revised is not None and version(store, ALICE, "seat") == 3
    # What the scope cannot see is not found, whatever version is named.
    assert store.forget(BOB, key="seat", if_version=3) is False
    assert store.forget(ALICE, key="none", if_version=5) is False
    assert store.revise(BOB, revised, "Seat: aisle.", "s", if_version=3) is None
    assert store.forget(ALICE, key="seat", if_version=3) is True
    assert store.count(ALICE) == 0


@pytest.mark.parametrize(("options", "message"), [
    ({"if_version": 1}, "if_version needs a key"),
    ({"key": "k", "if_version": -1}, "if_version must be from 0"),
    ({"key": "k", "if_version": True}, "if_version must be an int"),
    ({"key": "k", "if_version": "1"}, "if_version must be an int"),
])
def test_a_bad_if_version_is_refused_before_anything_is_written(
        store: MemoryStore, options: dict[str, Any], message: str) -> None:
    with pytest.raises(MemoryInputError, match=message):
        store.remember(ALICE, "task", "text", "s", **options)
    with pytest.raises(MemoryInputError, match=message):
        store.remember_many([{"scope": ALICE, "level": "task", "text": "t", "source": "s",
                              **options}])
    if "key" in options:
        with pytest.raises(MemoryInputError, match=message):
            store.forget(ALICE, key="k", if_version=options["if_version"])
    assert store.count(ALICE) == 0


def test_one_conflict_refuses_the_whole_batch(store: MemoryStore) -> None:
    store.remember(ALICE, "task", "Seat: aisle.", "s", key="seat")
    with pytest.raises(VersionConflict, match="item 1's key holds a live memory at version 1"):
        store.remember_many([
            {"scope": ALICE, "level": "task", "text": "Meal: vegetarian.", "source": "s",
             "key": "meal", "if_version": 0},
            {"scope": ALICE, "level": "task", "text": "Seat: window.", "source": "s",
             "key": "seat", "if_version": 0}])
    assert [m["text"] for m in store.memories(ALICE)] == ["Seat: aisle."]


def test_export_and_import_carry_the_version(target: str, tmp_path: Any) -> None:
    with MemoryStore(target) as store:
        for text in ("Seat: aisle.", "Seat: window.", "Seat: middle."):
            store.remember(ALICE, "task", text, "s", key="seat")
        exported = store.export_user("alice")
        store.erase_user("alice")
        store.import_memories(exported)
        assert version(store, ALICE, "seat") == 3
        store.remember(ALICE, "task", "Seat: aisle.", "s", key="seat", if_version=3)
        assert version(store, ALICE, "seat") == 4
        with pytest.raises(MemoryInputError, match="version must be from 1"):
            store.import_memories([{**exported[0], "version": 0, "key": "other"}])


def test_writers_racing_on_one_version_leave_exactly_one_winner(target: str) -> None:
    """Eight threads, each its own store, all read version n and write over it at once,
    round after round: the database decides, as its key index does."""
    stores = [MemoryStore(target) for _ in range(8)]
    stores[0].remember(ALICE, "task", "round 0", "s", key="turn")
    wins: list[list[int]] = [[] for _ in stores]
    failures: list[BaseException] = []
    barrier = threading.Barrier(len(stores))

    def write(n: int) -> None:
        try:
            for round_ in range(1, 6):
                barrier.wait(timeout=60)
                try:
                    stores[n].remember(ALICE, "task", f"round {round_} by {n}", "s",
                                       key="turn", if_version=round_)
                    wins[n].append(round_)
                except VersionConflict:
                    pass
                barrier.wait(timeout=60)
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)

    ended = all_finish([threading.Thread(target=write, args=(n,)) for n in range(len(stores))])
    try:
        assert ended and not failures
        assert sorted(round_ for won in wins for round_ in won) == [1, 2, 3, 4, 5]
        assert version(stores[0], ALICE, "turn") == 6 and stores[0].count(ALICE) == 1
    finally:
        for store in stores:
            store.close()


RACER = textwrap.dedent("""
    import sys
    from memory import MemoryStore, Scope, VersionConflict
    with MemoryStore(sys.argv[1]) as store:
        try:
            store.remember(Scope("alice", "trip"), "task", sys.argv[2], "s", key="turn",
                           if_version=1)
            print("won")
        except VersionConflict:
            print("lost")
""")


def test_processes_racing_on_one_version_leave_exactly_one_winner(target: str) -> None:
    with MemoryStore(target) as store:
        store.remember(ALICE, "task", "first", "s", key="turn")
    racers = [subprocess.Popen([sys.executable, "-c", RACER, target, f"by {n}"],
                               stdout=subprocess.PIPE, text=True, cwd=ROOT)
              for n in range(4)]
    said = [racer.communicate(timeout=120)[0].strip() for racer in racers]
    assert sorted(said) == ["lost", "lost", "lost", "won"]
    with MemoryStore(target) as store:
        assert version(store, ALICE, "turn") == 2 and store.count(ALICE) == 1


# -- keys by prefix, and rename ----------------------------------------------------------

NOTES = ["notes/a", "notes/b/1", "notes/b/2", "notes/c", "notes0", "notesX", "todo",
         "notes/\u00e9t\u00e9", "notes/\U0001f600", "notes/\ud7ff", "notes/\ue000",
         "notes/\U0010ffff", "notes/\U0010ffff\U0010ffff"]


def keys(memories: list[Any]) -> list[str]:
    return [m["key"] for m in memories]


def test_keys_by_prefix_in_order_each_as_get_finds_it(store: MemoryStore,
                                                       clock: SetClock) -> None:
    for key in NOTES:
        store.remember(ALICE, "task", f"task's {key}", "s", key=key)
    store.remember(ALICE, "user", "user's notes/a", "s", key="notes/a")  # the task's wins
    store.remember(ALICE, "user", "user's notes/aa", "s", key="notes/aa")
    store.remember(ALICE_WORK, "task", "work's notes/ab", "s", key="notes/ab")
    store.remember(BOB, "task", "bob's notes/a", "s", key="notes/a")
    store.remember(ALICE, "task", "unkeyed notes/", "notes/x")
    store.remember(ALICE, "task", "gone", "s", key="notes/gone", ttl=60)
    clock.advance(61)
    mine = sorted([k for k in NOTES if k.startswith("notes/")] + ["notes/aa"])
    assert keys(store.memories(ALICE, key_prefix="notes/")) == mine
    assert store.count(ALICE, key_prefix="notes/") == len(mine)
    assert store.get(ALICE, key="notes/a")["text"] == "task's notes/a"  # type: ignore[index]
    assert [m["text"] for m in store.memories(ALICE, key_prefix="notes/a")] == [
        "task's notes/a", "user's notes/aa"]
    for prefix in ("notes/\U0010ffff", "notes/b/", "notes", "n", "", "zzz", "notes/\ud7ff"):
        expected = sorted(k for k in [*NOTES, "notes/aa"] if k.startswith(prefix))
        assert keys(store.memories(ALICE, key_prefix=prefix)) == expected, prefix
        assert store.count(ALICE, key_prefix=prefix) == len(expected)
    # A page is full where there is more: notes/a is held at both levels, and counts once.
    assert keys(store.memories(ALICE, key_prefix="notes/", limit=3)) == mine[:3]
    # Pages by after_key and limit concatenate to the whole listing.
    pages: list[str] = []
    after: str | None = None
    for _ in range(len(mine)):  # a page that repeats could go on for ever
        page = store.memories(ALICE, key_prefix="notes/", after_key=after, limit=3)
        if not page:
            break
        assert len(page) <= 3
        pages += keys(page)
        after = page[-1]["key"]
    assert pages == mine
    assert keys(store.memories(ALICE, after_key="notes/c")) == [
        k for k in sorted([*NOTES, "notes/aa"]) if k > "notes/c"]
    assert keys(store.memories(ALICE, key_prefix="notes/", where={"$key": {"$lt": "notes/b"}}
                               )) == ["notes/a", "notes/aa"]
    assert store.count(ALICE, key_prefix="notes/", where={"$source": "s"}) == len(mine)
    assert keys(store.memories(BOB, key_prefix="notes/")) == ["notes/a"]


def test_a_key_at_both_levels_is_listed_once_the_task_s_and_pages_stay_full(
        store: MemoryStore) -> None:
    for n in range(4):
        store.remember(ALICE, "user", f"user's k{n}", "s", key=f"k{n}")
        store.remember(ALICE, "task", f"task's k{n}", "s", key=f"k{n}")
    for after in (None, "k0", "k1"):
        page = store.memories(ALICE, key_prefix="k", after_key=after, limit=2)
        start = 0 if after is None else int(after[1]) + 1
        assert [m["text"] for m in page] == [f"task's k{n}" for n in range(start, start + 2)]
    assert store.count(ALICE, key_prefix="k") == 4


def test_a_listing_by_prefix_reads_a_range_of_the_key_index(tmp_path: Any) -> None:
    with MemoryStore(str(tmp_path / "m.db")) as store:
        store.remember_many([(ALICE, "task", f"note {n}", "s", None, f"notes/{n:04}")
                             for n in range(2_000)])
        store.remember_many([(ALICE, "user", f"memo {n}", "s", None, f"memo/{n:04}")
                             for n in range(2_000)])
        statements: list[str] = []
        store.db.set_trace_callback(statements.append)
        page = store.memories(ALICE, key_prefix="notes/", after_key="notes/1000", limit=5)
        store.db.set_trace_callback(None)
        assert keys(page) == [f"notes/{n:04}" for n in range(1001, 1006)]
        ranges = [s for s in statements if "ORDER BY key LIMIT" in s]
        assert len(ranges) == 2
        for statement in ranges:
            plan = " ".join(row[3] for row in store.db.execute(
                f"EXPLAIN QUERY PLAN {statement}"))
            assert "USING INDEX memories_key" in plan and "key>?" in plan, plan


@pytest.mark.parametrize(("options", "message"), [
    ({"key_prefix": "n", "after": 0}, "pages with after_key and limit"),
    ({"key_prefix": "n", "newest_first": True}, "pages with after_key and limit"),
    ({"key_prefix": "n", "conversation": "c"}, "pages with after_key and limit"),
    ({"key_prefix": 3}, "key_prefix must be a str"),
    ({"key_prefix": "a\x00"}, "key_prefix"),
    ({"key_prefix": "n" * 513}, "longer than 512"),
    ({"after_key": ""}, "key must be a str of 1 to"),
    ({"key_prefix": "n", "limit": 0}, "limit must be from 1"),
])
def test_a_bad_listing_by_prefix_is_refused(store: MemoryStore, options: dict[str, Any],
                                            message: str) -> None:
    with pytest.raises(MemoryInputError, match=message):
        store.memories(ALICE, **options)


def test_rename_moves_a_key_in_its_owner_and_refuses_a_live_one(store: MemoryStore,
                                                                clock: SetClock) -> None:
    first = store.remember(ALICE, "task", "Draft of the plan.", "s", key="drafts/plan",
                           metadata={"kind": "plan"})
    created = store.get(ALICE, first)["created_at"]  # type: ignore[index]
    clock.advance(5)
    assert store.rename(ALICE, "drafts/plan", "plans/trip") == first
    moved = store.get(ALICE, key="plans/trip")
    assert moved is not None and moved["id"] == first and moved["version"] == 2
    assert moved["created_at"] == created and moved["updated_at"] > created
    assert store.get(ALICE, key="drafts/plan") is None
    assert store.memories(ALICE, where={"kind": "plan"}) == [moved]
    assert [r["id"] for r in store.recall(ALICE, "plan draft")] == [first]
    # A live holder of the new key refuses it; an expired one is forgotten.
    store.remember(ALICE, "task", "Another.", "s", key="plans/other")
    with pytest.raises(VersionConflict, match="the new key holds a live memory at version 1"):
        store.rename(ALICE, "plans/trip", "plans/other")
    with pytest.raises(VersionConflict, match="at version 2, not version 1"):
        store.rename(ALICE, "plans/trip", "plans/new", if_version=1)
    store.remember(ALICE, "task", "Stale.", "s", key="plans/stale", ttl=1)
    clock.advance(2)
    assert store.rename(ALICE, "plans/trip", "plans/stale", if_version=2) == first
    assert keys(store.memories(ALICE, key_prefix="plans/")) == ["plans/other", "plans/stale"]
    # Not found: another user's, another task's, the user level's key under a task's name.
    assert store.rename(BOB, "plans/stale", "x") is None
    assert store.rename(ALICE_WORK, "plans/stale", "x") is None
    assert store.rename(ALICE, "nothing", "x") is None
    # The user level's key moves within the user level.
    store.remember(ALICE, "user", "Prefers aisle seats.", "s", key="seat")
    store.rename(ALICE, "seat", "seats/preferred")
    assert store.get(Scope("alice", "other"), key="seats/preferred") is not None
    with pytest.raises(MemoryInputError, match="new_key is required"):
        store.rename(ALICE, "seats/preferred", None)  # type: ignore[arg-type]
    assert store.rename(ALICE, "seats/preferred", "seats/preferred") is not None


# -- the state machine: keyed writes, replaces, forgets and revisions against a model ----

KEYS = st.sampled_from(["a", "b", "notes/c", "notes/d"])
VERSIONS = st.one_of(st.none(), st.integers(0, 4))


class KeysMatchModel(RuleBasedStateMachine):
    """Each key's live memory and version, kept by hand: every call the store answers as
    the model says, a conflict exactly where the model's version differs."""

    def __init__(self) -> None:
        super().__init__()
        self.store = MemoryStore(":memory:")
        self.model: dict[str, tuple[str, int]] = {}  # key: (text, version)
        self.written = 0

    def conflict(self, key: str, expected: int | None) -> bool:
        return expected is not None and expected != self.model.get(key, ("", 0))[1]

    @rule(key=KEYS, expected=VERSIONS)
    def remember(self, key: str, expected: int | None) -> None:
        self.written += 1
        text = f"text {self.written}"
        if self.conflict(key, expected):
            with pytest.raises(VersionConflict):
                self.store.remember(ALICE, "task", text, "s", key=key, if_version=expected)
            return
        self.store.remember(ALICE, "task", text, "s", key=key, if_version=expected)
        self.model[key] = (text, self.model.get(key, ("", 0))[1] + 1)

    @rule(key=KEYS, expected=VERSIONS)
    def forget(self, key: str, expected: int | None) -> None:
        if key in self.model and self.conflict(key, expected):
            with pytest.raises(VersionConflict):
                self.store.forget(ALICE, key=key, if_version=expected)
            return
        assert self.store.forget(ALICE, key=key, if_version=expected) == (key in self.model)
        self.model.pop(key, None)

    @rule(key=KEYS, expected=VERSIONS)
    def revise(self, key: str, expected: int | None) -> None:
        held = self.store.get(ALICE, key=key)
        assert (held is None) == (key not in self.model)
        if held is None:
            return
        self.written += 1
        text = f"text {self.written}"
        if self.conflict(key, expected):
            with pytest.raises(VersionConflict):
                self.store.revise(ALICE, held["id"], text, "s", if_version=expected)
            return
        self.store.revise(ALICE, held["id"], text, "s", if_version=expected)
        self.model[key] = (text, self.model[key][1] + 1)

    @rule(key=KEYS, new=KEYS, expected=VERSIONS)
    def rename(self, key: str, new: str, expected: int | None) -> None:
        if key not in self.model:
            assert self.store.rename(ALICE, key, new, if_version=expected) is None
        elif self.conflict(key, expected) or (new != key and new in self.model):
            with pytest.raises(VersionConflict):
                self.store.rename(ALICE, key, new, if_version=expected)
        else:
            assert self.store.rename(ALICE, key, new, if_version=expected) is not None
            if new != key:
                text, at = self.model.pop(key)
                self.model[new] = (text, at + 1)

    @invariant()
    def every_key_reads_as_the_model_says(self) -> None:
        held = {m["key"]: (m["text"], m["version"]) for m in self.store.memories(ALICE)}
        assert held == self.model
        listed = self.store.memories(ALICE, key_prefix="notes/")
        assert [m["key"] for m in listed] == sorted(k for k in self.model if k[:6] == "notes/")
        assert self.store.count(ALICE, key_prefix="") == len(self.model)

    def teardown(self) -> None:
        self.store.close()


TestKeysMatchModel = KeysMatchModel.TestCase
TestKeysMatchModel.settings = settings(max_examples=60, stateful_step_count=30,
                                       deadline=None)

assert memory.SCHEMA_VERSION >= 11
