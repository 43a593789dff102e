"""remember(..., dedupe=True): a live memory of the same user, level and task with the
same text (NFKC, case folded, whitespace collapsed) is kept instead of a second one."""

from __future__ import annotations

import importlib
import itertools
import pathlib
import sqlite3
import unicodedata

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import memory
from helpers import ALICE, ALICE_WORK, BEFORE_VALIDITY, BOB, PG_BEFORE_VALIDITY, SetClock
from memory import MemoryInputError, MemoryStore, Scope
from model import index_problems_at, owner_connection, transactions_left

_USERS = itertools.count()


def test_the_same_text_is_kept_once(store: MemoryStore) -> None:
    first = store.remember(ALICE, "user", "Alice is vegetarian.", "chat/1", dedupe=True)
    for same in ("alice  IS\tvegetarian.", " ALICE IS VEGETARIAN. ", "Ａｌｉｃｅ is vegetarian."):
        assert store.remember(ALICE, "user", same, "chat/2", dedupe=True) == first
    # Seen from another task, a user-level memory is the same user and level.
    assert store.remember(ALICE_WORK, "user", "alice is vegetarian.", "s", dedupe=True) == first
    assert store.count(ALICE) == 1
    assert [m["source"] for m in store.memories(ALICE)] == ["chat/1"]  # nothing rewritten


@given(st.text(st.characters(max_codepoint=0x7f), max_size=40)
       | st.text(st.sampled_from("  aaＡß\t\x85\xa0\u3000"), max_size=12)
       | st.text(max_size=30))
@example("alice  likes jazz").via("two spaces")
@example(" alice").via("a space first")
@example("jazz ").via("a space last")
@example("alice\u2028likes").via("a separator, not a space")
def test_the_same_text_is_the_normal_form_with_one_space_between_words(text: str) -> None:
    assert memory._same_text(text) == " ".join(
        unicodedata.normalize("NFKC", text).casefold().split())


def test_what_is_not_the_same(store: MemoryStore, clock: SetClock) -> None:
    user = store.remember(ALICE, "user", "Book the hotel.", "s", dedupe=True)
    task = store.remember(ALICE, "task", "Book the hotel.", "s", dedupe=True)
    other_task = store.remember(ALICE_WORK, "task", "Book the hotel.", "s", dedupe=True)
    bobs = store.remember(BOB, "user", "Book the hotel.", "s", dedupe=True)
    other_words = store.remember(ALICE, "user", "Book the hotel!", "s", dedupe=True)
    assert len({user, task, other_task, bobs, other_words}) == 5
    assert store.remember(ALICE, "task", "book the HOTEL.", "s", dedupe=True) == task
    # Without dedupe (the default) every call writes.
    assert store.remember(ALICE, "user", "Book the hotel.", "s") not in (user, task)


def test_an_expired_memory_is_not_kept_instead(store: MemoryStore, clock: SetClock) -> None:
    old = store.remember(ALICE, "user", "The gate code is 4417.", "s", ttl=60, dedupe=True)
    assert store.remember(ALICE, "user", "the gate code is 4417.", "s", dedupe=True) == old
    clock.at = "2026-10-20T09:01:00+00:00"
    new = store.remember(ALICE, "user", "The gate code is 4417.", "s", dedupe=True)
    assert new != old and [m["id"] for m in store.memories(ALICE)] == [new]


def test_a_forgotten_memory_is_not_kept_instead(store: MemoryStore) -> None:
    old = store.remember(ALICE, "user", "Alice likes jazz.", "s", dedupe=True)
    assert store.forget(ALICE, old)
    assert store.remember(ALICE, "user", "Alice likes jazz.", "s", dedupe=True) != old


def test_a_batch_keeps_each_text_once(target: str, store: MemoryStore) -> None:
    held = store.remember(ALICE, "user", "Alice likes jazz.", "s")
    ids = store.remember_many([
        (ALICE, "user", "alice likes JAZZ.", "s"),
        (ALICE, "user", "Alice likes tea.", "s"),
        (BOB, "user", "Alice likes tea.", "s"),
        (ALICE, "user", "Alice  likes tea.", "s"),
        (ALICE, "task", "Alice likes tea.", "s"),
    ], dedupe=True)
    assert ids[0] == held and ids[3] == ids[1]
    assert len({held, ids[1], ids[2], ids[4]}) == 4 and ids[1] < ids[2] < ids[4]
    assert store.count(ALICE) == 3 and store.count(BOB) == 1
    assert index_problems_at(target) == []
    records = store.export_user("alice")
    assert store.import_memories(records, dedupe=True) == [r["id"] for r in records]
    assert store.count(ALICE) == 3


def test_an_error_names_the_item_of_the_call(store: MemoryStore) -> None:
    store.remember(ALICE, "user", "Alice likes jazz.", "s")
    with pytest.raises(MemoryInputError, match="item 2: ttl") as raised:
        store.remember_many([(ALICE, "user", "Alice likes jazz.", "s"),
                             (ALICE, "user", "Alice likes tea.", "s"),
                             (ALICE, "user", "Alice likes rain.", "s", 1e15)], dedupe=True)
    assert raised.value.position == 2
    assert store.count(ALICE) == 1 and transactions_left(store) == 0


def test_every_look_up_names_the_user_and_uses_the_key_index(tmp_path: pathlib.Path) -> None:
    with MemoryStore(tmp_path / "m.db") as store:
        store.remember_many([(ALICE, "user", f"note {n}", "s") for n in range(200)])
        plan = " ".join(row[3] for row in store.db.execute(
            f"EXPLAIN QUERY PLAN {memory._SQL_SAME_TEXT}", ("alice", "trip", "k")))
        assert "memories_text_key (user_id=? AND text_key=?)" in plan
        assert memory._SQL_SAME_TEXT.startswith(
            "SELECT id, task_id, text, expires_at, valid_from, valid_to FROM memories"
            " WHERE user_id = ?")


def test_an_upgraded_sqlite_file_keys_its_old_memories(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "m.db"
    with MemoryStore(path) as store:
        old = store.remember(ALICE, "user", "Alice likes jazz.", "s")
    db = sqlite3.connect(path)  # back to version 4's layout, as its release wrote it
    db.executescript(";".join(BEFORE_VALIDITY) + "; DROP TABLE memory_history;"
                     " DROP TABLE memory_receipts; ALTER TABLE memories DROP COLUMN version;"
                     " ALTER TABLE memory_counts DROP COLUMN weight;"
                     " DROP TABLE memory_fields; DROP INDEX memories_key;"
                     + "".join(f" ALTER TABLE memories DROP COLUMN {column};" for column
                               in ("key", "metadata", "updated_at", "embed"))
                     + " DROP TABLE memory_vector_blocks; DROP TABLE memory_vectors;"
                     " DROP INDEX memories_conversation; ALTER TABLE memories DROP COLUMN"
                     " conversation; DROP INDEX memories_text_key; ALTER TABLE memories DROP"
                     " COLUMN text_key; PRAGMA user_version = 4;")
    db.close()
    with MemoryStore(path) as store:
        assert store.stats()["schema_version"] == memory.SCHEMA_VERSION == 16
        assert store.remember(ALICE, "user", "ALICE likes jazz.", "s", dedupe=True) == old


def test_an_upgraded_postgres_database_keys_its_old_memories(url: str) -> None:
    with MemoryStore(url) as store:
        old = store.remember(ALICE, "user", "Alice likes jazz.", "s")
        store.remember(Scope("bob", "trip"), "user", "Bob likes jazz.", "s")
    with owner_connection(url) as db:  # back to version 1, as its release made it
        for statement in PG_BEFORE_VALIDITY:
            db.execute(statement)
        db.execute("DROP TABLE memory_history")
        db.execute("DROP TABLE memory_receipts")
        db.execute("ALTER TABLE memories DROP COLUMN version")
        db.execute("ALTER TABLE memory_counts DROP COLUMN weight")
        db.execute("DROP TABLE memory_vector_blocks")
        db.execute("DROP TABLE memory_fields")
        db.execute("ALTER TABLE memories DROP COLUMN key, DROP COLUMN metadata,"
                   " DROP COLUMN updated_at, DROP COLUMN embed")
        db.execute("DROP TABLE memory_vectors")
        db.execute("DROP INDEX memories_conversation")
        db.execute("ALTER TABLE memories DROP COLUMN conversation")
        db.execute("DROP INDEX memories_text_key")
        db.execute("ALTER TABLE memories DROP COLUMN text_key")
        db.execute("UPDATE store_settings SET value = '1' WHERE name = 'schema_version'")
    with MemoryStore(url) as store:
        postgres = importlib.import_module("memory_postgres")
        assert store.stats()["schema_version"] == postgres.POSTGRES_SCHEMA_VERSION == 16
        assert store.remember(ALICE, "user", "ALICE likes jazz.", "s", dedupe=True) == old
        assert store.count(BOB) == 1
    with owner_connection(url) as db:
        assert db.execute("SELECT count(*) FROM memories WHERE text_key IS NULL"
                          ).fetchone() == (0,)


def test_a_batch_never_acknowledges_a_memory_its_own_key_replaces(store: MemoryStore) -> None:
    held = store.remember(ALICE, "user", "Alice likes tea", "c/1", key="drink")
    ids = store.remember_many([(ALICE, "user", "Alice likes tea", "c/2"),
                               (ALICE, "user", "Alice likes coffee", "c/3", None, "drink")],
                              dedupe=True)
    assert held not in ids
    assert [store.get(ALICE, memory_id)["text"] for memory_id in ids] == [  # type: ignore[index]
        "Alice likes tea", "Alice likes coffee"]
    # The key first, then the text it held: the same.
    held = store.remember(ALICE, "user", "Alice likes rain", "c/4", key="weather")
    ids = store.remember_many([(ALICE, "user", "Alice likes sun", "c/5", None, "weather"),
                               (ALICE, "user", "alice likes RAIN", "c/6")], dedupe=True)
    assert held not in ids and all(store.get(ALICE, memory_id) for memory_id in ids)


_TEXTS = ("tea", "Tea", "coffee", "rain")
_BATCH = st.lists(st.tuples(st.sampled_from(_TEXTS), st.sampled_from(["user", "task"]),
                            st.sampled_from([None, None, "drink", "food"])),
                  min_size=1, max_size=6)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=40)
@given(batches=st.lists(_BATCH, min_size=1, max_size=4))
def test_mixed_keyed_and_unkeyed_batches_keep_what_a_model_keeps(
        store: MemoryStore, batches: list[list[tuple[str, str, str | None]]]) -> None:
    user = f"u{next(_USERS)}"  # the store is the test's: each example a user of its own
    scope = Scope(user, "trip")
    model: dict[int, tuple[str, str, str | None]] = {}  # id -> (level, text, key)
    for batch in batches:
        one_key_each = {(level, key): item for item in batch
                        for _, level, key in [item] if key is not None}
        batch = [item for item in batch
                 if item[2] is None or one_key_each[item[1], item[2]] is item]
        ids = store.remember_many([(scope, level, text, "c/1", None, key)
                                   for text, level, key in batch], dedupe=True)
        replaced = {memory_id for memory_id, (level, _, key) in model.items()
                    if key is not None and (level, key) in one_key_each}
        for memory_id in replaced:
            del model[memory_id]
        for memory_id, (text, level, key) in zip(ids, batch, strict=True):
            if memory_id in model:  # kept instead: the same text, at the same level
                assert model[memory_id][:2] == (level, text.casefold()) and key is None
            else:
                model[memory_id] = (level, text.casefold(), key)
        # Everything acknowledged is there when the call returns.
        found = {m["id"]: (m["level"], m["text"].casefold(), m.get("key"))
                 for m in store.memories(scope)}
        assert found == model
    store.erase_user(user)
