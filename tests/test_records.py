"""The records agent frameworks keep: a caller's key, metadata and filters over it, paging
both ways, recall's offset, embedding control and longer texts, on both engines."""

from __future__ import annotations

import json
import math
import pathlib
import sqlite3
import threading
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, cast

import pytest
from embedders import ConceptEmbedder
from hypothesis import given, settings
from hypothesis import strategies as st

import memory
from helpers import ALICE, ALICE_WORK, BOB, SetClock, all_finish
from memory import MemoryInputError, MemoryStore, Scope, fixed_clock
from model import Model, owner_connection, rows_of_user

SECRET = "s3cr3t-VALUE"


def test_a_key_names_one_memory_of_its_owner_and_replacing_it_keeps_created_at(
        store: MemoryStore, clock: SetClock) -> None:
    first = store.remember(ALICE, "user", "Alice likes tea.", "chat/1", key="drink",
                           metadata={"kind": "preference"})
    created = store.get(ALICE, first)
    assert created is not None and created["updated_at"] == created["created_at"]
    clock.advance(60)
    second = store.remember(ALICE, "user", "Alice likes coffee.", "chat/2", key="drink",
                            metadata={"kind": "preference", "since": 2026})
    assert second > first and store.get(ALICE, first) is None
    replaced = store.get(ALICE, key="drink")
    assert replaced is not None and replaced["id"] == second
    assert replaced["created_at"] == created["created_at"] < replaced["updated_at"]
    assert replaced["metadata"] == {"kind": "preference", "since": 2026}
    assert store.count(ALICE) == 1 and store.recall(ALICE, "tea") == []
    assert store.count(ALICE, where={"kind": "preference"}) == 1  # the old one's terms went
    # The same key in a task is another owner's; the task's own comes first in it.
    in_task = store.remember(ALICE, "task", "For this trip: green tea.", "chat/3", key="drink")
    assert store.get(ALICE, key="drink")["id"] == in_task  # type: ignore[index]
    assert store.get(ALICE_WORK, key="drink")["id"] == second  # type: ignore[index]
    # Another user's or another task's key is invisible, as their ids are.
    assert store.get(BOB, key="drink") is None and not store.forget(BOB, key="drink")
    assert store.forget(ALICE, key="drink")
    assert store.get(ALICE, key="drink")["id"] == second  # type: ignore[index]
    assert store.forget(ALICE, key="drink") and store.get(ALICE, key="drink") is None
    assert store.count(ALICE) == 0


def test_a_memory_without_key_or_metadata_keeps_the_seed_s_keys(store: MemoryStore) -> None:
    plain = store.remember(ALICE, "user", "Alice likes jazz.", "s")
    assert list(store.get(ALICE, plain)) == [  # type: ignore[arg-type]
        "id", "level", "text", "source", "created_at", "expires_at"]
    assert list(store.recall(ALICE, "jazz")[0]) == [
        "id", "level", "text", "source", "created_at", "score"]
    tagged = store.remember(ALICE, "user", "Alice likes blues.", "s", metadata={"a": [1, None]})
    assert store.get(ALICE, tagged)["key"] is None  # type: ignore[index]
    assert store.recall(ALICE, "blues")[0]["metadata"] == {"a": [1, None]}


def test_an_expired_key_holder_is_replaced_by_a_new_memory(store: MemoryStore,
                                                            clock: SetClock) -> None:
    store.remember(ALICE, "user", "A code for today.", "s", key="code", ttl=30)
    clock.advance(60)
    assert store.get(ALICE, key="code") is None
    fresh = store.remember(ALICE, "user", "A code for tomorrow.", "s", key="code", ttl=3600)
    shown = store.get(ALICE, key="code")
    assert shown is not None and shown["id"] == fresh
    assert shown["created_at"] == shown["updated_at"]
    # A ttl counts from the write, not from the key's first created_at.
    clock.advance(60)
    store.remember(ALICE, "user", "A code for the week.", "s", key="code", ttl=30)
    assert store.get(ALICE, key="code") is not None


def test_remember_many_takes_keys_metadata_and_embed_as_tuples_or_dicts(
        store: MemoryStore) -> None:
    ids = store.remember_many([
        (ALICE, "user", "One.", "s", None, "k1", {"n": 1}),
        {"scope": ALICE, "level": "task", "text": "Two.", "source": "s", "key": "k1",
         "metadata": {"n": 2}, "embed": False},
        (BOB, "user", "Three.", "s", None, "k1"),
    ])
    shown = [store.get(scope, key="k1") for scope in (ALICE_WORK, ALICE, BOB)]
    assert [memory["id"] for memory in shown] == ids  # type: ignore[index]
    duplicate = [(ALICE, "user", "a", "s", None, "k"), (ALICE, "user", "b", "s", None, "k")]
    with pytest.raises(MemoryInputError, match="items 0 and 1 give one owner the same key"):
        store.remember_many(duplicate)
    with pytest.raises(MemoryInputError, match="item 0"):
        store.remember_many([{"scope": ALICE, "level": "user", "text": "x", "source": "s",
                              "color": "red"}])
    assert store.count(ALICE) == 2


BAD_CALLS: list[tuple[str, dict[str, Any], str]] = [
    ("key", {"key": ""}, "key must be a str of 1 to 512"),
    ("key", {"key": "k" * 513}, "key must be a str of 1 to 512"),
    ("key", {"key": 5}, "key must be a str"),
    ("key", {"key": f"{SECRET}\n"}, "control characters"),
    ("key", {"key": f"{SECRET}\x00"}, "control characters"),
    ("metadata", {"metadata": [SECRET]}, "metadata must be a dict"),
    ("metadata", {"metadata": {"x": float("nan")}}, "not finite"),
    ("metadata", {"metadata": {"x": float("inf")}}, "not finite"),
    ("metadata", {"metadata": {"x": 2**60}}, "beyond 2\\*\\*53"),
    ("metadata", {"metadata": {1: SECRET}}, "a key that is not a str"),
    ("metadata", {"metadata": {"x": {SECRET}}}, "type set"),
    ("metadata", {"metadata": {"x": SECRET * 10_000}}, "more than 65536"),
    ("metadata", {"metadata": {"x": SECRET + "\x00"}}, "NUL"),
    ("metadata", {"metadata": json.loads('{"x":' + "[" * 40 + "]" * 40 + "}")},
     "deeper than 32"),
    ("embed", {"embed": SECRET}, "embed must be True, False or a list"),
    ("embed", {"embed": []}, "embed must be True, False or a list"),
    ("embed", {"embed": [SECRET] * 17}, "embed must be True, False or a list"),
    ("embed", {"embed": [""]}, "must not be blank"),
]


@pytest.mark.parametrize(("kind", "options", "message"), BAD_CALLS,
                         ids=[f"{kind}-{n}" for n, (kind, _, _) in enumerate(BAD_CALLS)])
def test_bad_keys_metadata_and_embed_are_refused_before_anything_is_written(
        store: MemoryStore, kind: str, options: dict[str, Any], message: str) -> None:
    with pytest.raises(MemoryInputError, match=message) as refused:
        store.remember(ALICE, "user", "Alice likes tea.", "s", **options)
    assert SECRET not in str(refused.value)
    with pytest.raises(MemoryInputError, match=message):
        store.remember_many([(ALICE, "user", "Fine.", "s"),
                             {"scope": ALICE, "level": "user", "text": "Bad.", "source": "s",
                              **options}])
    assert store.count(ALICE) == 0


BAD_FILTERS: list[tuple[object, str]] = [
    ([SECRET], "where must be a dict"),
    ({"kind": {"$regex": SECRET}}, "unknown operator"),
    ({"kind": {"$gt": True}}, r"\$gt compares a number or a str"),
    ({"kind": {"$lte": [SECRET]}}, r"\$lte compares a number or a str"),
    ({"kind": {"$in": SECRET}}, r"\$in takes a list"),
    ({"kind": {"$nin": [SECRET] * 101}}, r"\$nin takes a list"),
    ({"": SECRET}, "a path of where must be a str of 1"),
    ({f"{SECRET}..x": 1}, "empty key"),
    ({"x": float("nan")}, "not finite"),
    ({"x": {"$eq": {SECRET}}}, "type set"),
    ({f"k{n}": 1 for n in range(17)}, "more than 16"),
    ({5: SECRET}, "a path of where must be a str"),
]


@pytest.mark.parametrize(("where", "message"), BAD_FILTERS,
                         ids=[str(n) for n in range(len(BAD_FILTERS))])
def test_a_bad_filter_is_refused_naming_the_problem_never_the_value(
        store: MemoryStore, where: Any, message: str) -> None:
    store.remember(ALICE, "user", "Alice likes tea.", "s", metadata={"kind": "x"})
    for call in (lambda: store.recall(ALICE, "tea", where=where),
                 lambda: store.memories(ALICE, where=where),
                 lambda: store.count(ALICE, where=where),
                 lambda: store.forget_where(ALICE, where)):
        with pytest.raises(MemoryInputError, match=message) as refused:
            call()
        assert SECRET not in str(refused.value)
    assert store.count(ALICE) == 1


@pytest.mark.parametrize("hostile", ["it's", 'a"b', "x') OR 1=1 --", "a)", "--", "; DROP",
                                     "\\", "%s", "?", "$eq"])
def test_filter_paths_and_values_reach_sql_only_as_parameters(
        store: MemoryStore, hostile: str) -> None:
    # Nested: a top-level path beginning with "$" is a combination or a field's.
    given = {"m": {hostile: hostile}, "n": 1}
    path = f"m.{hostile}"
    held = store.remember(ALICE, "user", "Alice likes tea.", "s", metadata=given)
    store.remember(BOB, "user", "Bob likes tea.", "s", metadata=given)
    store.remember(ALICE_WORK, "task", "Tea at work.", "s", metadata={"m": {hostile: hostile}})
    assert [m["id"] for m in store.memories(ALICE, where={path: hostile})] == [held]
    assert store.count(ALICE, where={path: hostile}) == 1  # not the other task's
    found = store.recall(ALICE, "tea", where={path: {"$gte": hostile}})
    assert [r["id"] for r in found] == [held]
    assert store.count(ALICE, where={path: {"$ne": hostile}}) == 0
    assert store.count(ALICE, where={"$or": [{path: hostile}, {"$key": hostile}]}) == 1
    assert store.count(ALICE, where={"$source": hostile}) == 0
    assert store.forget_where(ALICE, {path: {"$in": [hostile]}}) == 1
    assert store.count(BOB) == 1 and store.count(ALICE_WORK, where={path: hostile}) == 1


def test_a_memory_s_metadata_terms_leave_with_it(target: str, clock: SetClock) -> None:
    with MemoryStore(target, clock=clock) as store:
        store.remember(ALICE, "user", "Kept a while.", "s", metadata={"code": "s3cr3t"},
                       ttl=30)
        gone = store.remember(ALICE, "user", "Forgotten.", "s", metadata={"code": "s3cr3t"})
        store.remember(BOB, "user", "Bob's.", "s", metadata={"code": "s3cr3t"})
        store.forget(ALICE, gone)
        clock.advance(60)
        assert store.purge_expired() == 1
        assert rows_of_user(target, "memory_fields", "alice") == 0
        assert rows_of_user(target, "memory_fields", "bob") == 1
        store.erase_user("bob")
        assert rows_of_user(target, "memory_fields", "bob") == 0



def test_each_operator_and_dotted_paths(store: MemoryStore) -> None:
    given = {
        "a": {"kind": "pref", "n": 1, "who": {"team": "red"}, "tags": ["x", "y"]},
        "b": {"kind": "pref", "n": 2.5, "who": {"team": "blue"}},
        "c": {"kind": "fact", "n": "2", "flag": True},
        "d": {"kind": "fact", "n": 3.0, "flag": False, "who.team": "red"},
        "e": None,
    }
    ids = {name: store.remember(ALICE, "user", f"memory {name} about tea", "s",
                                metadata=metadata) for name, metadata in given.items()}

    def found(where: dict[str, Any]) -> set[str]:
        listed = {m["id"] for m in store.memories(ALICE, where=where)}
        recalled = {r["id"] for r in store.recall(ALICE, "tea", 20, where=where)}
        assert listed == recalled and store.count(ALICE, where=where) == len(listed)
        return {name for name, memory_id in ids.items() if memory_id in listed}

    assert found({"kind": "pref"}) == found({"kind": {"$eq": "pref"}}) == {"a", "b"}
    assert found({"kind": {"$ne": "pref"}}) == {"c", "d", "e"}  # a missing path is unequal
    assert found({"n": 3}) == {"d"}  # 3 and 3.0 are one number
    assert found({"n": {"$gt": 1}}) == {"b", "d"}  # "2" is a str: no number compares with it
    assert found({"n": {"$lte": "2"}}) == {"c"}
    assert found({"n": {"$gte": 1, "$lt": 3}}) == {"a", "b"}
    assert found({"who.team": "red"}) == {"a"}  # a path descends; the key "who.team" is not one
    assert found({"who": {"team": "blue"}}) == {"b"}  # an object is compared whole
    assert found({"tags": ["x", "y"]}) == {"a"} and found({"tags": "x"}) == set()
    assert found({"flag": True}) == {"c"} and found({"flag": 1}) == set()  # true is not 1
    assert found({"kind": {"$in": ["fact", "other"]}}) == {"c", "d"}
    assert found({"kind": {"$nin": ["fact"]}}) == {"a", "b", "e"}
    assert found({"kind": "fact", "flag": {"$ne": True}}) == {"d"}
    assert found({"kind": {"$in": []}}) == set()
    assert found({"missing": None}) == set()


def test_or_and_not_contains_and_the_memory_s_own_fields(target: str, clock: SetClock) -> None:
    with MemoryStore(target, clock=clock) as store:
        ids = {
            "a": store.remember(ALICE, "user", "a about tea", "chat/1",
                                metadata={"kind": "pref", "tags": ["x", 1]}),
            "b": store.remember(ALICE, "user", "b about tea", "chat/2", key="notes/b",
                                metadata={"kind": "fact", "tags": ["y"]}),
        }
        clock.advance(3600)
        ids["c"] = store.remember(ALICE, "task", "c about tea", "mail/1", key="notes/c")
        ids["d"] = store.remember(ALICE, "task", "d about tea", "chat/3",
                                  metadata={"kind": "pref", "tags": "x"})
        clock.advance(3600)
        ids["b"] = store.remember(ALICE, "user", "b again about tea", "chat/4", key="notes/b",
                                  metadata={"kind": "fact"})
        first = store.get(ALICE, ids["a"])["created_at"]  # type: ignore[index]
        later = (datetime.fromisoformat(first) + timedelta(minutes=30)).astimezone(
            timezone(timedelta(hours=5))).isoformat()  # another offset, one instant

        def found(where: dict[str, Any]) -> set[str]:
            listed = {m["id"] for m in store.memories(ALICE, where=where)}
            recalled = {r["id"] for r in store.recall(ALICE, "tea", 20, where=where)}
            newest = {m["id"] for m in store.memories(ALICE, where=where, newest_first=True,
                                                      limit=2)}
            assert listed == recalled and store.count(ALICE, where=where) == len(listed)
            assert newest == set(sorted(listed)[-2:])
            return {name for name, memory_id in ids.items() if memory_id in listed}

        assert found({"$or": [{"kind": "fact"}, {"$source": "mail/1"}]}) == {"b", "c"}
        assert found({"$and": [{"kind": "pref"}, {"$not": {"$source": "chat/1"}}]}) == {"d"}
        assert found({"$not": {"kind": {"$in": ["pref", "fact"]}}}) == {"c"}
        assert found({"$or": [{"$and": [{"kind": "pref"}, {"tags": {"$contains": 1.0}}]},
                              {"$key": {"$gte": "notes/c"}}]}) == {"a", "c"}
        assert found({"tags": {"$contains": "x"}}) == {"a"}  # d's "x" is no list
        assert found({"$key": {"$ne": "notes/c"}}) == {"a", "b", "d"}  # no key is unequal
        assert found({"$key": {"$in": ["notes/b", "other"]}}) == {"b"}
        assert found({"$source": {"$gt": "chat/3"}}) == {"b", "c"}
        assert found({"$created_at": {"$lt": later}}) == {"a", "b"}  # b keeps a's time
        assert found({"$created_at": {"$gte": later}, "kind": "pref"}) == {"d"}
        assert found({"$updated_at": {"$gt": later}}) == {"b", "c", "d"}
        assert found({"$created_at": first}) == {"a", "b"}
        assert found({"$level": "task"}) == {"c", "d"}
        assert found({"$level": {"$ne": "task"}, "kind": "pref"}) == {"a"}
        assert store.forget_where(ALICE, {"$or": [{"$key": "notes/c"}, {"kind": "fact"}]}) == 2
        assert found({}) == {"a", "d"}


@pytest.mark.parametrize(("where", "message"), [
    ({"$Or": [{"a": 1}]}, "unknown combination or field"),
    ({"$or": []}, "takes a list of 1 to"),
    ({"$or": {"a": 1}}, "takes a list of 1 to"),
    ({"$not": {}}, r"\$not takes a filter"),
    ({"$not": [{"a": 1}]}, r"\$not takes a filter"),
    ({"$created_at": {"$lt": "2026-01-01"}}, "ISO 8601 time with a UTC offset"),
    ({"$created_at": {"$lt": "yesterday"}}, "ISO 8601 time with a UTC offset"),
    ({"$key": 3}, r"\$key compares a str"),
    ({"$source": {"$contains": "x"}}, r"\$contains tests a list"),
    ({"tags": {"$has": 1}}, "unknown operator"),
])
def test_a_bad_combination_or_field_is_refused(store: MemoryStore, where: Any,
                                               message: str) -> None:
    store.remember(ALICE, "user", "kept", "s", metadata={"a": 1})
    with pytest.raises(MemoryInputError, match=message):
        store.memories(ALICE, where=where)
    with pytest.raises(MemoryInputError, match=message):
        store.forget_where(ALICE, where)
    assert store.count(ALICE) == 1


def test_a_filter_nests_and_counts_within_bounds(store: MemoryStore) -> None:
    deep: dict[str, Any] = {"a": 1}
    for _ in range(8):
        deep = {"$and": [deep]}
    assert store.count(ALICE, where=deep) == 0
    with pytest.raises(MemoryInputError, match="more than 8 levels deep"):
        store.count(ALICE, where={"$and": [deep]})
    wide = {"$or": [{f"p{n}": n for n in range(16)} for _ in range(4)]}
    with pytest.raises(MemoryInputError, match="more than 64 conditions"):
        store.count(ALICE, where=wide)


def test_recall_with_a_filter_finds_a_match_that_many_newer_ones_would_hide(
        target: str) -> None:
    with MemoryStore(target, clock=fixed_clock(), **memory._recommended_here()) as store:
        wanted = store.remember(ALICE, "user", "The hotel in Lisbon has a pool.", "a/1",
                                metadata={"ns": ["memories", "lisbon"]})
        store.remember_many([(ALICE, "user", f"The hotel in Lisbon, note {n}.", f"b/{n}",
                              None, None, {"ns": ["memories", "other"]}) for n in range(40)])
        unfiltered = store.recall(ALICE, "hotel lisbon", 20)
        assert wanted not in [r["id"] for r in unfiltered]
        (found,) = store.recall(ALICE, "hotel lisbon", 5,
                                where={"ns": ["memories", "lisbon"]})
        assert found["id"] == wanted


def test_a_filter_holds_where_recall_searches_for_the_best_without_reading_all(
        store: MemoryStore) -> None:
    """Thousands of postings for one word: words alone (no context) then search the rows
    for the best, which must see the filter too."""
    store.remember_many([(ALICE, "user", f"hotel note {n}", "s", None, None,
                          {"n": n % 7}) for n in range(5_000)])
    found = store.recall(ALICE, "hotel note", 5, rank="idf", context=False,
                         where={"n": 3})
    assert len(found) == 5 and all((r["metadata"] or {}).get("n") == 3 for r in found)


def test_a_key_is_looked_up_in_the_writer_s_owner_alone(store: MemoryStore) -> None:
    at_user = store.remember(ALICE, "user", "Alice likes tea.", "s", key="drink")
    in_work = store.remember(ALICE_WORK, "task", "At work: coffee.", "s", key="drink")
    in_trip = store.remember(ALICE, "task", "On the trip: juice.", "s", key="drink")
    assert [store.get(scope, key="drink")["id"] for scope in (ALICE, ALICE_WORK)] == [  # type: ignore[index]
        in_trip, in_work]
    assert store.count(ALICE) == 2 and store.count(ALICE_WORK) == 2
    assert store.get(Scope("alice", "other"), key="drink")["id"] == at_user  # type: ignore[index]


def test_newest_first_pages_down_with_before(store: MemoryStore) -> None:
    ids = store.remember_many([(ALICE, "user", f"note {n}", "s") for n in range(7)])
    store.remember(BOB, "user", "Bob's note.", "s")
    assert [m["id"] for m in store.memories(ALICE, newest_first=True, limit=3)] == ids[::-1][:3]
    pages, before = [], None
    while page := store.memories(ALICE, newest_first=True, limit=2, before=before):
        pages += page
        before = page[-1]["id"]
    assert pages == store.memories(ALICE)[::-1]
    assert store.memories(ALICE, before=ids[2]) == store.memories(ALICE)[:2]
    talk = store.remember_many([(ALICE, "user", f"chat {n}", f"chat/{n}") for n in range(3)])
    store.remember_many([(ALICE, "user", f"later {n}", "other/1") for n in range(3)])
    assert [m["id"] for m in store.memories(ALICE, conversation="chat", newest_first=True,
                                            limit=2)] == talk[::-1][:2]
    assert [m["id"] for m in store.memories(ALICE, conversation="chat", before=talk[2],
                                            limit=5)] == talk[:2]
    for bad in (0, -1, True, "3"):
        with pytest.raises(MemoryInputError, match="before"):
            store.memories(ALICE, before=bad)  # type: ignore[arg-type]
    with pytest.raises(MemoryInputError, match="newest_first"):
        store.memories(ALICE, newest_first="yes")  # type: ignore[arg-type]


def test_offset_pages_concatenate_to_the_ranking(store: MemoryStore) -> None:
    store.remember_many([(ALICE, "user", f"tea {'green ' * (n % 4)}number {n}", f"c/{n}")
                         for n in range(45)])
    whole = [r["id"] for r in store.recall(ALICE, "green tea", 20)]
    paged = [r["id"] for offset in (0, 7, 14) for r in store.recall(ALICE, "green tea", 7,
                                                                   offset=offset)]
    assert paged[:20] == whole
    assert store.recall(ALICE, "green tea", 5, offset=10_000) == []
    for bad in (-1, 10_001, True, 1.0):
        with pytest.raises(MemoryInputError, match="offset"):
            store.recall(ALICE, "tea", offset=bad)  # type: ignore[arg-type]


def test_embed_false_is_never_found_by_meaning_and_a_list_scores_its_best(
        target: str) -> None:
    with MemoryStore(target, embedder=ConceptEmbedder()) as store:
        hidden = store.remember(ALICE, "user", "Alice rides trains.", "s", embed=False)
        chosen = store.remember(ALICE, "user", "Item 7 of the list.", "s",
                                embed=["a note", "Alice rides trains."])
        plain = store.remember(ALICE, "user", "Alice rides trains daily.", "s")
        by_meaning = [r["id"] for r in store.recall(ALICE, "railway journey", 5,
                                                    rank="meaning")]
        assert hidden not in by_meaning and {chosen, plain} <= set(by_meaning)
        hybrid = [r["id"] for r in store.recall(ALICE, "rides trains", 5, rank="hybrid")]
        assert hidden in hybrid  # by its words alone
        (exported,) = [r for r in store.export_user("alice") if r["id"] == chosen]
        assert exported["embed"] == ["a note", "Alice rides trains."]
        assert [r["embed"] for r in store.export_user("alice") if r["id"] == hidden] == [False]
        store.reindex(embedder=ConceptEmbedder(name="concepts-2"))
        again = [r["id"] for r in store.recall(ALICE, "railway journey", 5, rank="meaning")]
        assert hidden not in again and {chosen, plain} <= set(again)
        assert store.stats()["without_vectors"] == 1


def test_export_and_import_carry_keys_metadata_updated_at_and_embed(
        target: str, tmp_path: pathlib.Path) -> None:
    with MemoryStore(target, embedder=ConceptEmbedder()) as store:
        store.remember(ALICE, "user", "Alice rides trains.", "s", key="k",
                       metadata={"n": 1}, embed=["trains"])
        store.remember(ALICE, "user", "Alice rides trains daily.", "s", key="k",
                       metadata={"n": 2}, embed=False)
        store.remember(ALICE, "task", "Plain.", "s")
        records = store.export_user("alice")
    with MemoryStore(tmp_path / "copy.db", embedder=ConceptEmbedder()) as copy:
        copy.import_memories(records)
        again = copy.export_user("alice")
        assert [{k: v for k, v in r.items() if k != "id"} for r in again] == [
            {k: v for k, v in r.items() if k != "id"} for r in records]
        with pytest.raises(MemoryInputError, match="record 1: its owner holds its key"):
            copy.import_memories([records[1], records[0]])
        with pytest.raises(MemoryInputError, match="records 0 and 1 give one owner the same key"):
            MemoryStore(tmp_path / "other.db").import_memories([records[0], records[0]])
        assert copy.count(ALICE) == 2


def test_max_text_bounds_texts_per_store(target: str) -> None:
    long = "word " * 5_000
    with MemoryStore(target) as store:
        with pytest.raises(MemoryInputError, match="longer than 2000"):
            store.remember(ALICE, "user", long, "s")
    with MemoryStore(target, max_text=memory._LONGEST_TEXT) as store:
        kept = store.remember(ALICE, "user", long + "zebra", "s")
        assert store.recall(ALICE, "zebra")[0]["id"] == kept
        assert store.get(ALICE, kept)["text"] == long + "zebra"  # type: ignore[index]
    for bad in (1999, 1_000_001, True, "5000"):
        with pytest.raises(MemoryInputError, match="max_text"):
            MemoryStore(target, max_text=bad)  # type: ignore[arg-type]


def test_the_database_itself_refuses_a_second_memory_under_one_owner_s_key(
        store: MemoryStore, target: str) -> None:
    kept = store.remember(ALICE, "user", "Alice likes tea.", "s", key="drink")
    store.remember(ALICE, "task", "In this task: coffee.", "s", key="drink")
    with owner_connection(target) as db:
        columns = "id, user_id, task_id, text, source, created_at, key"
        with pytest.raises(Exception, match="(?i)unique"):
            db.execute(f"INSERT INTO memories ({columns}) VALUES (10000, 'alice', NULL,"
                       " 'x', 's', '2026-10-20T09:00:00+00:00', 'drink')")
    assert store.get(ALICE_WORK, key="drink")["id"] == kept  # type: ignore[index]


def test_two_writers_racing_on_one_key_leave_one_memory(target: str) -> None:
    stores = [MemoryStore(target) for _ in range(2)]
    failures: list[BaseException] = []

    def write(store: MemoryStore, n: int) -> None:
        try:
            for round_ in range(15):
                store.remember(ALICE, "user", f"writer {n} round {round_}", "s", key="one")
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)
    ended = all_finish([threading.Thread(target=write, args=(store, n))
                        for n, store in enumerate(stores)])
    try:
        assert ended and not failures
        assert stores[0].count(ALICE) == 1
        assert stores[1].get(ALICE, key="one") is not None
    finally:
        for store in stores:
            store.close()


# -- the filter and the pages against the slow, obvious way -------------------------------

KINDS = st.sampled_from(["pref", "fact", "note"])
SOURCES = st.sampled_from(["c/1", "c/2", "d/1", "plain"])
TIMES = st.sampled_from(["2026-10-20T09:05:00+00:00", "2026-10-20T11:10:00+02:00",
                         "2026-10-20T09:20:30Z"])
METADATA = st.one_of(st.none(), st.fixed_dictionaries(
    {"kind": KINDS}, optional={
        "n": st.sampled_from([0, 1, 1.0, 2.5, 3, "2"]),
        "who": st.fixed_dictionaries({"team": st.sampled_from(["a", "b"])}),
        "tags": st.lists(st.sampled_from(["x", "y", 1, 1.0]), max_size=2)}))
TESTS = st.one_of(
    st.builds(lambda k: {"kind": k}, KINDS),
    st.builds(lambda k: {"kind": {"$ne": k}}, KINDS),
    st.builds(lambda ks: {"kind": {"$in": ks}}, st.lists(KINDS, max_size=2)),
    st.builds(lambda ks: {"kind": {"$nin": ks}}, st.lists(KINDS, max_size=2)),
    st.builds(lambda op, v: {"n": {op: v}}, st.sampled_from(["$gt", "$gte", "$lt", "$lte"]),
              st.sampled_from([0, 1, 2, "2", "1"])),
    st.builds(lambda t: {"who.team": t}, st.sampled_from(["a", "b"])),
    st.builds(lambda k, t: {"kind": k, "who.team": {"$ne": t}}, KINDS, st.sampled_from(["a", "b"])),
    st.builds(lambda v: {"tags": {"$contains": v}}, st.sampled_from(["x", 1, 1.5])),
    st.builds(lambda op, v: {"$source": {op: v}}, st.sampled_from(["$eq", "$ne", "$gt"]),
              SOURCES),
    st.builds(lambda vs: {"$source": {"$in": vs}}, st.lists(SOURCES, max_size=2)),
    st.builds(lambda op: {"$key": {op: "k"}}, st.sampled_from(["$eq", "$ne", "$lt"])),
    st.builds(lambda field, op, t: {field: {op: t}},
              st.sampled_from(["$created_at", "$updated_at"]),
              st.sampled_from(["$gt", "$gte", "$lt", "$lte", "$eq", "$ne"]), TIMES),
)
FILTERS = st.recursive(TESTS, lambda inner: st.one_of(
    st.builds(lambda parts: {"$or": parts}, st.lists(inner, min_size=1, max_size=3)),
    st.builds(lambda parts: {"$and": parts}, st.lists(inner, min_size=1, max_size=3)),
    st.builds(lambda part: {"$not": part}, inner),
    st.builds(lambda one, other: {**one, **other}, inner, inner)), max_leaves=5)
WORDS = ["hotel", "lisbon", "tea", "train", "seat"]


def admits(where: dict[str, Any], memory: dict[str, Any]) -> bool:
    """The filter's rule, written out: every path holds, and every combination."""
    for path, test in where.items():
        if path in ("$and", "$or", "$not"):
            met = [admits(part, memory) for part in (test if path != "$not" else [test])]
            if not {"$and": all(met), "$or": any(met), "$not": not all(met)}[path]:
                return False
            continue
        found, value = value_at(path, memory)
        tests = test if isinstance(test, dict) else {"$eq": test}
        for op, operand in tests.items():
            if path in ("$created_at", "$updated_at"):
                operand = instant(operand)
            if not holds(op, found, value, operand):
                return False
    return True


def instant(reading: str) -> str:
    return datetime.fromisoformat(reading).astimezone(UTC).isoformat()


def value_at(path: str, memory: dict[str, Any]) -> tuple[bool, Any]:
    if path in ("$source", "$key"):
        return memory.get(path[1:]) is not None, memory.get(path[1:])
    if path in ("$created_at", "$updated_at"):
        return True, instant(memory.get(path[1:]) or memory["created_at"])
    value: Any = memory.get("metadata")
    for part in path.split("."):
        if not (isinstance(value, dict) and part in value):
            return False, None
        value = value[part]
    return True, value


def holds(op: str, found: bool, value: Any, operand: Any) -> bool:
    def same(a: Any, b: Any) -> bool:
        return (type(a) is type(b) or {type(a), type(b)} <= {int, float}) and a == b

    equal = found and same(value, operand)
    inside = found and op in ("$in", "$nin") and any(same(value, o) for o in operand)
    numbers = {type(value), type(operand)} <= {int, float}
    strings = type(value) is str and type(operand) is str
    ordered = found and (numbers or strings)
    return {"$eq": equal, "$ne": not equal, "$in": inside, "$nin": not inside,
            "$gt": ordered and value > operand, "$gte": ordered and value >= operand,
            "$lt": ordered and value < operand, "$lte": ordered and value <= operand,
            "$contains": found and isinstance(value, list)
            and any(same(item, operand) for item in value)}[op]


@settings(max_examples=40)
@given(memories=st.lists(st.tuples(st.lists(st.sampled_from(WORDS), min_size=1, max_size=3),
                                   st.sampled_from(["user", "task"]), METADATA,
                                   SOURCES),
                         min_size=1, max_size=25),
       where=FILTERS, query=st.lists(st.sampled_from(WORDS), min_size=1, max_size=3),
       rank=st.sampled_from(["shared", "idf"]), context=st.booleans(),
       limit=st.integers(1, 6), offset=st.integers(0, 8))
def test_recall_with_a_filter_is_the_filtered_ranking_and_pages_are_its_slices(
        memories: list[Any], where: dict[str, Any], query: list[str], rank: str,
        context: bool, limit: int, offset: int) -> None:
    model, held = Model(), {}
    with MemoryStore(":memory:", clock=fixed_clock()) as store:
        for words, level, metadata, source in memories:
            text = " ".join(words)
            memory_id = store.remember(ALICE, level, text, source, metadata=metadata)
            held[memory_id] = cast(dict[str, Any], store.get(ALICE, memory_id))
            model.memories.append(model_memory(memory_id, level, text, source,
                                               store.get(ALICE, memory_id)))
        everything = model.recall(ALICE, " ".join(query), 10**6, rank, context)
        wanted = [r for r in everything if admits(where, held[r["id"]])]
        found = store.recall(ALICE, " ".join(query), limit, rank=rank,  # type: ignore[arg-type]
                             context=context, where=where, offset=offset)
        assert [r["id"] for r in found] == [r["id"] for r in wanted[offset:offset + limit]]
        assert [r["score"] for r in found] == pytest.approx(
            [r["score"] for r in wanted[offset:offset + limit]])
        listed = [m["id"] for m in store.memories(ALICE, where=where)]
        assert listed == sorted(m for m in held if admits(where, held[m]))
        assert store.count(ALICE, where=where) == len(listed)
        pages, before = [], None
        while page := store.memories(ALICE, where=where, newest_first=True, limit=limit,
                                     before=before):
            pages += [m["id"] for m in page]
            before = page[-1]["id"]
        assert pages == listed[::-1]


def model_memory(memory_id: int, level: str, text: str, source: str,
                 shown: Any) -> Any:
    from model import Memory as ModelMemory
    return ModelMemory(memory_id, "alice", "trip" if level == "task" else None, text, source,
                       shown["created_at"])


def test_the_newest_of_a_conversation_is_read_from_its_index(store: MemoryStore) -> None:
    """A session's last item (a framework's get_items(limit=1)) is one statement on the
    conversation's index, its LIMIT the page's, whatever the rest of the scope holds."""
    store.remember_many([(ALICE, "user", f"other turn {n}", f"other/{n}") for n in range(300)])
    mine = store.remember_many([(ALICE, "user", f"my turn {n}", f"mine/{n}") for n in range(3)])
    store.remember_many([(ALICE, "user", f"later turn {n}", f"later/{n}") for n in range(300)])
    statements: list[str] = []
    store.db.set_trace_callback(statements.append)
    newest = store.memories(ALICE, conversation="mine", newest_first=True, limit=1)
    below = store.memories(ALICE, conversation="mine", before=mine[2], limit=1)
    store.db.set_trace_callback(None)
    assert [m["id"] for m in newest] == [mine[2]] and [m["id"] for m in below] == [mine[0]]
    reads = [s for s in statements if "FROM memories" in s and "conversation = " in s]
    assert len(reads) == 2 and "ORDER BY id DESC LIMIT" in reads[0]


def test_a_rare_value_beside_a_mark_on_every_memory_is_read_from_the_index_alone(
        tmp_path: pathlib.Path) -> None:
    """An adapter's filter: its mark, on all 1,200 memories, and a value one holds. The
    rarest equality's ids are read, the others tested on those alone; the page comes
    from the index, not from walking down the newest; the memories by their ids."""
    path = str(tmp_path / "memory.db")
    with MemoryStore(path) as store:
        ids = store.remember_many([(ALICE, "user", f"note {n}", "s", None, None,
                                    {"mark": 1, "n": n, "odd": n % 2}) for n in range(1_200)])
        statements: list[str] = []
        store.db.set_trace_callback(statements.append)
        rare = {"mark": 1, "n": {"$in": [600, 601, 5_000]}, "odd": {"$ne": 0}}
        listed = store.memories(ALICE, where=rare, newest_first=True, limit=5)
        recalled = store.recall(ALICE, "note", 5, where=rare)
        counted = store.count(ALICE, where=rare)
        store.db.set_trace_callback(None)
    assert [m["id"] for m in listed] == [r["id"] for r in recalled] == [ids[601]]
    assert counted == 1
    db = sqlite3.connect(path)
    fields = [s for s in statements if s.startswith("SELECT term, id FROM memory_fields")]
    # Per call: the two ids of n, then the mark of each and the one even n among them.
    assert fields and sum(len(db.execute(s).fetchall()) for s in fields) == 3 * 5
    assert not any("ORDER BY id DESC LIMIT" in s for s in statements)
    by_ids = [s for s in statements if s.startswith("SELECT id,") and "json_each" in s]
    assert by_ids
    for statement in by_ids:
        plan = " ".join(row[3] for row in db.execute(f"EXPLAIN QUERY PLAN {statement}"))
        assert "memories USING INTEGER PRIMARY KEY" in plan, plan
    db.close()


def test_a_blank_metadata_key_is_reached_by_a_filter(store: MemoryStore) -> None:
    kept = store.remember(ALICE, "user", "x", "s", metadata={"   ": 1, "a": {"  ": "b"}})
    store.remember(ALICE, "user", "y", "s", metadata={"   ": 2})
    assert [m["id"] for m in store.memories(ALICE, where={"   ": 1})] == [kept]
    assert [m["id"] for m in store.memories(ALICE, where={"a.  ": "b"})] == [kept]
    assert store.count(ALICE, where={"   ": {"$lt": 2}}) == 1


class Shifting(dict):  # type: ignore[type-arg]
    """A dict whose items change once they have been read: as another thread's."""

    def __init__(self, later: list[tuple[Any, Any]], **given: Any) -> None:
        super().__init__(**given)
        self.later, self.reads = later, 0

    def items(self) -> Any:
        self.reads += 1
        return super().items() if self.reads == 1 else self.later


@pytest.mark.parametrize("later", [[(1, object())], [("a", math.inf)],
                                   [("a", json.loads("[" * 40 + "]" * 40))]],
                         ids=["an object", "infinity", "too deep"])
def test_a_value_that_changes_as_it_is_checked_is_refused_and_nothing_is_written(
        store: MemoryStore, later: list[tuple[Any, Any]]) -> None:
    with pytest.raises(MemoryInputError, match="metadata changed while it was checked|metadata"):
        store.remember(ALICE, "user", "x", "s", metadata=Shifting(later, a=1))
    with pytest.raises(MemoryInputError, match="where"):
        store.memories(ALICE, where=Shifting(later, a=1))
    assert store.count(ALICE) == 0


def test_an_embedder_class_for_an_instance_is_refused_at_open(target: str) -> None:
    class Model:  # its name and dimensions on the class, as memory_minilm's MiniLM has
        name, dimensions = "model-1", 3

        def embed(self, texts: list[str]) -> list[list[float]]:
            return [[1.0, 0.0, 0.0] for _ in texts]

    with pytest.raises(MemoryInputError, match="embedder must be an instance, got the class"
                                               " Model: call it, Model()"):
        MemoryStore(target, embedder=Model)  # type: ignore[arg-type]


def test_newest_first_pages_with_and_without_a_filter_agree_with_the_whole_listing(
        store: MemoryStore) -> None:
    """A newest-first page reads each owner's newest rows down its own index range and
    merges them; a filtered one tests rows read so, a few pages' worth, then asks the
    index of terms where those held too few (a filter that admits one memory in 97)."""
    store.remember_many([(ALICE, "task" if n % 3 else "user", f"note {n}", "s", None, None,
                          {"rare": n % 97 == 0, "n": n}) for n in range(600)])
    store.remember(Scope("alice", "other"), "task", "another task's", "s",
                   metadata={"rare": True})
    everything = [m["id"] for m in store.memories(ALICE)]
    for where, limit in [(None, 7), ({"rare": True}, 3), ({"rare": False}, 50),
                         ({"n": {"$gte": 590}}, 4)]:
        wanted = [m["id"] for m in store.memories(ALICE, where=where)][::-1]
        pages, before = [], None
        while page := store.memories(ALICE, newest_first=True, limit=limit, before=before,
                                     where=where):
            assert len(page) <= limit
            pages += [m["id"] for m in page]
            before = page[-1]["id"]
        assert pages == wanted, where
    assert len(everything) == 600
