"""memory_frameworks.langgraph: LangGraph's BaseStore over the store, on each engine, through
BaseStore's own methods and inside a compiled graph."""

from __future__ import annotations

import asyncio
import operator
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any, TypedDict

import pytest
from deferred import deferred, module, needs
from embedders import ConceptEmbedder

from helpers import SetClock
from memory import MemoryStore, Scope
from memory_frameworks import record_key

pytestmark = needs("langgraph.store", "langgraph")
if TYPE_CHECKING:
    import langgraph.store.base as base
    from langgraph.store.base import GetOp, ListNamespacesOp, MatchCondition, PutOp, SearchOp

    from memory_frameworks.langgraph import AsyncLangGraphStore, LangGraphStore
else:
    base = module("langgraph.store.base")
    GetOp, ListNamespacesOp, MatchCondition, PutOp, SearchOp = deferred(
        "langgraph.store.base", "GetOp", "ListNamespacesOp", "MatchCondition", "PutOp",
        "SearchOp")
    AsyncLangGraphStore, LangGraphStore = deferred(
        "memory_frameworks.langgraph", "AsyncLangGraphStore", "LangGraphStore")


@pytest.fixture
def clock() -> SetClock:
    return SetClock()


@pytest.fixture
def lg(target: str, clock: SetClock) -> Iterator[LangGraphStore]:
    with LangGraphStore.from_conn_string(target, user="alice", clock=clock) as store:
        yield store


def concepts_index(fields: list[str] | None = None) -> Any:
    embedder = ConceptEmbedder()
    return {"dims": embedder.dimensions, "embed": embedder.embed,
            **({"fields": fields} if fields else {})}


def test_put_get_update_and_delete_keep_langgraph_s_item(lg: LangGraphStore,
                                                        clock: SetClock) -> None:
    lg.put(("docs", "trips"), "lisbon", {"text": "Hotel by the river", "nights": 3})
    first = lg.get(("docs", "trips"), "lisbon")
    assert first is not None and first.value == {"text": "Hotel by the river", "nights": 3}
    assert (first.namespace, first.key) == (("docs", "trips"), "lisbon")
    clock.advance(60)
    lg.put(("docs", "trips"), "lisbon", {"text": "Hotel by the sea", "nights": 4})
    again = lg.get(("docs", "trips"), "lisbon")
    assert again is not None and again.value["nights"] == 4
    assert again.created_at == first.created_at and again.updated_at > first.updated_at
    assert lg.get(("docs",), "lisbon") is None and lg.get(("docs", "trips"), "porto") is None
    lg.delete(("docs", "trips"), "lisbon")
    assert lg.get(("docs", "trips"), "lisbon") is None
    assert lg.store.count(Scope("alice", "langgraph")) == 0


def test_a_batch_reads_before_it_writes_and_answers_in_order(lg: LangGraphStore) -> None:
    lg.put(("test", "foo"), "key1", {"data": "value1"})
    results = lg.batch([
        GetOp(("test", "foo"), "key1"),
        PutOp(("test", "bar"), "key2", {"data": "value2"}),
        SearchOp(("test",), filter={"data": "value1"}),
        ListNamespacesOp(),
        GetOp(("test", "bar"), "key2"),
        PutOp(("test", "bar"), "key2", {"data": "value3"}),  # the last put of a key wins
    ])
    assert results[0] is not None and results[0].value == {"data": "value1"}  # type: ignore
    assert results[1] is None and results[4] is None and results[5] is None
    assert [item.key for item in results[2]] == ["key1"]  # type: ignore[union-attr]
    assert results[3] == [("test", "foo")]
    stored = lg.get(("test", "bar"), "key2")
    assert stored is not None and stored.value == {"data": "value3"}


def test_search_filters_by_prefix_and_langgraph_s_operators(lg: LangGraphStore,
                                                            clock: SetClock) -> None:
    items = [(("a", "b"), "1", {"kind": "note", "n": 1, "who": {"team": "x"}}),
             (("a", "b", "c"), "2", {"kind": "note", "n": 2, "who": {"team": "y"}}),
             (("a", "bb"), "3", {"kind": "plan", "n": 3, "tags": ["p", "q"]}),
             (("z",), "4", {"kind": "note", "n": 4})]
    for namespace, key, value in items:
        clock.advance(1)
        lg.put(namespace, key, value)

    def keys(prefix: tuple[str, ...], **asked: Any) -> list[str]:
        return [item.key for item in lg.search(prefix, **asked)]

    assert keys(()) == ["4", "3", "2", "1"]  # newest updated first
    assert keys(("a",)) == ["3", "2", "1"] and keys(("a", "b")) == ["2", "1"]
    assert keys(("a", "b"), filter={"n": {"$gt": 1}}) == ["2"]
    assert keys((), filter={"kind": "note", "n": {"$lte": 2}}) == ["2", "1"]
    assert keys((), filter={"kind": {"$ne": "note"}}) == ["3"]
    assert keys((), filter={"who": {"team": "y"}}) == ["2"]  # a nested object, path by path
    assert keys((), filter={"who.team": "x"}) == ["1"]
    assert keys((), filter={"tags": ["p", "q"]}) == ["3"]
    assert keys((), limit=2, offset=1) == ["3", "2"]
    assert keys(("a", "b", "c", "d")) == [] and keys(("A",)) == []


def test_a_query_finds_by_words_and_leaves_unindexed_items_out(lg: LangGraphStore) -> None:
    lg.put(("notes",), "veg", {"text": "Alice is vegetarian and loves hiking"})
    lg.put(("notes",), "jazz", {"text": "Alice plays jazz on Sundays"})
    lg.put(("notes",), "hidden", {"text": "Alice hiking diary"}, index=False)
    found = lg.search(("notes",), query="hiking")
    assert [item.key for item in found] == ["veg"] and found[0].score is not None
    assert {item.key for item in lg.search(("notes",))} == {"veg", "jazz", "hidden"}


def test_with_an_index_a_query_finds_by_meaning_and_each_field_counts(target: str) -> None:
    with LangGraphStore.from_conn_string(target, user="alice",
                                         index=concepts_index(["title", "body"])) as lg:
        lg.put(("docs",), "a", {"title": "vegan supper places", "body": "long text"})
        lg.put(("docs",), "b", {"title": "band practice", "body": "a jazz concert"})
        lg.put(("docs",), "c", {"title": "plant dinner", "body": "x"}, index=False)
        assert [item.key for item in lg.search(("docs",), query="meat-free restaurant",
                                               limit=2)][0] == "a"
        assert lg.search(("docs",), query="music")[0].key == "b"  # by its body, one field
        assert "c" not in {item.key for item in lg.search(("docs",), query="vegan dinner")}
        assert lg.store.stats()["embedder"].startswith("langgraph:")


def test_list_namespaces_with_conditions_wildcards_and_depth(lg: LangGraphStore) -> None:
    for namespace in [("a", "b", "c"), ("a", "b", "d"), ("a", "e"), ("f", "b", "c")]:
        lg.put(namespace, "k", {"v": 1})
    assert lg.list_namespaces() == [("a", "b", "c"), ("a", "b", "d"), ("a", "e"),
                                    ("f", "b", "c")]
    assert lg.list_namespaces(prefix=("a", "*", "c")) == [("a", "b", "c")]
    assert lg.list_namespaces(suffix=("b", "c")) == [("a", "b", "c"), ("f", "b", "c")]
    assert lg.list_namespaces(prefix=("a",), max_depth=2) == [("a", "b"), ("a", "e")]
    assert lg.list_namespaces(limit=2, offset=1) == [("a", "b", "d"), ("a", "e")]
    assert lg.batch([ListNamespacesOp(match_conditions=(
        MatchCondition("prefix", ("a",)), MatchCondition("suffix", ("d",))))])[0] == [
        ("a", "b", "d")]


def test_ttl_in_minutes_refreshed_on_read_unless_asked_not(target: str,
                                                           clock: SetClock) -> None:
    with LangGraphStore.from_conn_string(target, user="alice", clock=clock,
                                         ttl={"default_ttl": 10, "refresh_on_read": True}) as lg:
        lg.put(("s",), "kept", {"v": 1})
        lg.put(("s",), "short", {"v": 2}, ttl=1)
        lg.put(("s",), "never", {"v": 3}, ttl=None)
        clock.advance(9 * 60)
        assert lg.get(("s",), "kept") is not None  # read: 10 more minutes
        assert lg.get(("s",), "short") is None
        clock.advance(9 * 60)
        assert lg.get(("s",), "kept", refresh_ttl=False) is not None
        clock.advance(2 * 60)  # 11 minutes after the refreshing read
        assert lg.get(("s",), "kept") is None
        assert [item.key for item in lg.search(("s",))] == ["never"]
        assert lg.sweep_ttl() == 2


def test_the_user_comes_from_its_label_and_no_namespace_reaches_another(target: str) -> None:
    with LangGraphStore.from_conn_string(target, user_label=1) as lg:
        lg.put(("memories", "alice"), "food", {"text": "Alice is vegetarian"})
        lg.put(("memories", "bob"), "food", {"text": "Bob eats everything"})
        alice = lg.get(("memories", "alice"), "food")
        assert alice is not None and alice.value["text"] == "Alice is vegetarian"
        assert [i.value["text"] for i in lg.search(("memories", "bob"), query="vegetarian")
                ] == []
        assert [i.key for i in lg.search(("memories", "bob"))] == ["food"]
        for refused in (lambda: lg.search(("memories",)), lambda: lg.search(()),
                        lambda: lg.list_namespaces(), lambda: lg.list_namespaces(
                            prefix=("memories", "*"))):
            with pytest.raises(base.InvalidNamespaceError, match="user"):
                refused()
        assert lg.list_namespaces(prefix=("memories", "bob")) == [("memories", "bob")]
        store = lg.store
        assert store.count(Scope("alice", "langgraph")) == 1
        assert store.count(Scope("bob", "langgraph")) == 1


def test_a_store_of_one_user_sees_nothing_of_another_on_the_same_database(
        target: str) -> None:
    with MemoryStore(target) as shared:
        alice, bob = LangGraphStore(shared, user="alice"), LangGraphStore(shared, user="bob")
        alice.put(("prefs",), "food", {"text": "vegetarian"})
        assert bob.get(("prefs",), "food") is None
        assert bob.search(()) == [] and bob.list_namespaces() == []
        assert bob.search((), query="vegetarian") == []
        bob.delete(("prefs",), "food")  # bob's key: alice's item stays
        assert alice.get(("prefs",), "food") is not None
        # Memories the user keeps elsewhere (another tool, the user level) are not items.
        shared.remember(Scope("alice", "chat"), "user", "vegetarian since 2019", "mcp")
        assert [item.key for item in alice.search((), query="vegetarian")] == ["food"]
        assert [item.key for item in alice.search(())] == ["food"]
        assert alice.list_namespaces() == [("prefs",)]


def test_bad_namespaces_and_values_are_refused_and_write_nothing(lg: LangGraphStore) -> None:
    for namespace in [("a.b",), ("",), ("langgraph", "x")]:
        with pytest.raises(base.InvalidNamespaceError):
            lg.put(namespace, "k", {"v": 1})
    with pytest.raises(ValueError):
        lg.batch([PutOp(("ok",), "k", {"v": 1}), PutOp((), "k", {"v": 1})])
    with pytest.raises(ValueError):
        lg.batch([PutOp(("ok",), "k", ["not", "a", "mapping"])])  # type: ignore[arg-type]
    assert lg.search(()) == []
    # Labels with line breaks and a key past a record key's length still round-trip.
    lg.put(("line\n",), "k" * 600, {"v": "'; DROP TABLE memories; --"})
    found = lg.get(("line\n",), "k" * 600)
    assert found is not None and found.value == {"v": "'; DROP TABLE memories; --"}


class State(TypedDict):
    said: Annotated[list[str], operator.add]


def test_a_graph_node_keeps_each_user_s_memories_apart(target: str) -> None:
    from langgraph.config import get_config, get_store
    from langgraph.graph import END, START, StateGraph

    def remember(state: State) -> dict[str, list[str]]:
        user = get_config()["configurable"]["user_id"]
        store = get_store()
        store.put(("memories", user), state["said"][-1], {"text": state["said"][-1]})
        found = store.search(("memories", user), query=state["said"][-1])
        return {"said": [f"{user} holds {len(store.search(('memories', user)))}"
                         f" found {len(found)}"]}

    builder = StateGraph(State)
    builder.add_node("remember", remember)
    builder.add_edge(START, "remember")
    builder.add_edge("remember", END)
    with LangGraphStore.from_conn_string(target, user_label=1) as lg:
        graph = builder.compile(store=lg)
        first = graph.invoke({"said": ["Alice is vegetarian"]},
                             {"configurable": {"user_id": "alice"}})
        second = graph.invoke({"said": ["Bob likes jazz"]}, {"configurable": {"user_id": "bob"}})
        again = graph.invoke({"said": ["Alice hikes"]}, {"configurable": {"user_id": "alice"}})
        assert first["said"][-1] == "alice holds 1 found 1"
        assert second["said"][-1] == "bob holds 1 found 1"
        assert again["said"][-1] == "alice holds 2 found 2"  # both of hers hold "alice"
        assert lg.search(("memories", "bob"), query="vegetarian") == []


def test_the_async_twin_opens_answers_and_closes(target: str) -> None:
    async def run() -> list[Any]:
        async with AsyncLangGraphStore.from_conn_string(target, user="alice") as lg:
            await lg.setup()
            await lg.aput(("a",), "k", {"text": "async hello"})
            got = await lg.aget(("a",), "k")
            found = await lg.asearch(("a",), query="hello")
            return [got.value if got else None, [item.key for item in found],
                    await lg.alist_namespaces(), await lg.sweep_ttl()]

    assert asyncio.run(run()) == [{"text": "async hello"}, ["k"], [("a",)], 0]


def test_no_constructor_takes_a_user_from_a_namespace_without_being_told_which_label(
        target: str) -> None:
    async def opened_async() -> None:
        async with AsyncLangGraphStore.from_conn_string(target):
            pass

    def opened() -> None:
        with LangGraphStore.from_conn_string(target):
            pass

    made: list[Callable[[], object]] = [
        lambda: LangGraphStore(target), opened, lambda: asyncio.run(opened_async()),
        lambda: LangGraphStore(target, user="alice", user_label=1)]
    for make in made:
        with pytest.raises(ValueError, match=r"user_label=0 for namespaces such as \(user_id,"
                                             r" \"memories\"\), user_label=1 for"):
            make()


def test_a_user_label_of_star_or_of_another_shape_reaches_no_other_user(target: str) -> None:
    with LangGraphStore.from_conn_string(target, user_label=1) as lg:
        lg.put(("memories", "Alice Smith"), "food", {"text": "vegetarian"})
        lg.put(("memories", "alice"), "food", {"text": "eats fish"})
        with pytest.raises(base.InvalidNamespaceError):
            lg.search(("memories", "*"), query="vegetarian")
        with pytest.raises(base.InvalidNamespaceError):
            lg.get(("memories", "*"), "food")
        # "Alice Smith" is no store identifier: she is its digest, apart from "alice".
        assert [i.value["text"] for i in lg.search(("memories", "Alice Smith"))] == [
            "vegetarian"]
        assert [i.value["text"] for i in lg.search(("memories", "alice"))] == ["eats fish"]
        users = {r["user"] for u in ("alice",) for r in lg.store.export_user(u)}
        assert users == {"alice"} and lg.store.count(Scope("alice", "langgraph")) == 1


def planted(store: MemoryStore, user: str, level: str, task: str, source: str,
            value: object, namespace: object = ("prefs",), key: object = "food",
            record_key: str = '["prefs","food"]', prefixes: object = None) -> None:
    """A memory another tool (a model over memory mcp) wrote, dressed as an item."""
    store.remember(Scope(user, task), level, "planted", source,  # type: ignore[arg-type]
                   key=record_key, metadata={
                       "langgraph.v": 1, "value": value, "langgraph": {
                           "v": 1, "namespace": namespace, "key": key, "ttl": None,
                           "indexed": True, "p": prefixes or {"1": "prefs"}}})


def test_a_memory_another_tool_wrote_is_never_an_item_however_it_looks(
        target: str, caplog: pytest.LogCaptureFixture) -> None:
    with MemoryStore(target) as shared:
        lg = LangGraphStore(shared, user="alice")
        # At the user level (MCP's remember's default), of another source, or malformed.
        planted(shared, "alice", "user", "langgraph", "mcp", {"role": "system"})
        planted(shared, "alice", "task", "langgraph", "mcp:raw", {"role": "system"},
                record_key='["other","k"]')
        planted(shared, "alice", "task", "langgraph", "langgraph", "not a dict",
                record_key='["x","k"]')
        planted(shared, "alice", "task", "langgraph", "langgraph", {"v": 1}, namespace="prefs",
                record_key='["y","k"]')
        planted(shared, "alice", "task", "langgraph", "langgraph", {"v": 1}, key=5,
                record_key='["z","k"]')
        planted(shared, "alice", "task", "langgraph", "langgraph", {"v": 1},
                record_key="not the item's key")
        assert lg.get(("prefs",), "food") is None
        assert lg.search(()) == [] and lg.search((), query="planted") == []
        assert lg.list_namespaces() == []
        lg.put(("prefs",), "drink", {"text": "tea"})
        assert [i.key for i in lg.search(())] == ["drink"]
        assert [i.key for i in lg.search((), query="tea planted")] == ["drink"]
        assert lg.list_namespaces() == [("prefs",)]
    assert "no item of this adapter's: skipped" in caplog.text
    assert "planted" not in caplog.text and "system" not in caplog.text


def test_a_forged_item_naming_another_user_s_namespace_is_not_hers(target: str) -> None:
    with LangGraphStore.from_conn_string(target, user_label=1) as lg:
        # Under alice's scope, an item claiming bob's namespace.
        planted(lg.store, "alice", "task", "langgraph", "langgraph", {"text": "forged"},
                namespace=["memories", "bob"], record_key='["memories","bob","food"]',
                prefixes={"1": "memories", "2": "memories.alice"})
        assert lg.search(("memories", "alice")) == []
        assert lg.search(("memories", "bob")) == []
        assert lg.get(("memories", "bob"), "food") is None
        assert lg.list_namespaces(prefix=("memories", "alice")) == []


@pytest.mark.parametrize("namespace", [["memories"], ["memories", "*"], ["memories", ""]])
def test_a_forged_item_whose_namespace_names_no_user_is_skipped_not_raised(
        target: str, namespace: list[str]) -> None:
    with LangGraphStore.from_conn_string(target, user_label=1) as lg:
        planted(lg.store, "alice", "task", "langgraph", "langgraph", {"text": "forged"},
                namespace=namespace, record_key=record_key(*namespace, "food"),
                prefixes={"1": "memories", "2": "memories.alice"})
        assert lg.search(("memories", "alice")) == []
        assert lg.list_namespaces(prefix=("memories", "alice")) == []


def test_a_search_pages_past_memories_that_are_no_items(target: str) -> None:
    with MemoryStore(target) as shared:
        lg = LangGraphStore(shared, user="alice")
        for n in range(6):
            lg.put(("prefs",), f"k{n}", {"text": f"tea {n}"})
            planted(shared, "alice", "user", "langgraph", "mcp", {"text": "tea"},
                    record_key=f'["prefs","p{n}"]')
        keys = [[i.key for i in lg.search(("prefs",), limit=2, offset=offset)]
                for offset in (0, 2, 4, 6)]
        assert keys == [["k5", "k4"], ["k3", "k2"], ["k1", "k0"], []]
        found = [[i.key for i in lg.search(("prefs",), query="tea", limit=2, offset=offset)]
                 for offset in (0, 2, 4)]
        assert sorted(sum(found, [])) == [f"k{n}" for n in range(6)]


def test_a_search_gives_more_than_a_page_of_recall(lg: LangGraphStore) -> None:
    lg.batch([PutOp(("prefs",), f"k{n}", {"text": f"tea number {n}"}) for n in range(30)])
    found = lg.search(("prefs",), query="tea number", limit=25)
    assert len(found) == 25 and len({item.key for item in found}) == 25


def test_a_ttl_of_a_fraction_of_a_minute_is_kept_to_the_microsecond(target: str) -> None:
    with LangGraphStore.from_conn_string(target, user="alice",
                                         ttl={"default_ttl": 5 / 60}) as lg:
        lg.put(("s",), "k", {"v": 1})
        (kept,) = lg.store.memories(Scope("alice", "langgraph"))
    created = datetime.fromisoformat(kept["created_at"])
    expires = datetime.fromisoformat(kept["expires_at"])  # type: ignore[arg-type]
    assert "." in kept["created_at"]  # read to the microsecond
    assert (expires - created).total_seconds() == pytest.approx(5.0, abs=1e-6)


def test_the_async_twin_s_sweeper_starts_and_stops_as_coroutines(target: str) -> None:
    async def run() -> bool:
        async with AsyncLangGraphStore.from_conn_string(target, user="alice") as lg:
            stopped = await lg.start_ttl_sweeper(sweep_interval_minutes=1)
            assert not stopped.done()
            assert await lg.stop_ttl_sweeper(timeout=30)
            await asyncio.wait_for(stopped, 30)
            return stopped.done()

    assert asyncio.run(run())


def test_a_raw_batch_takes_what_the_public_calls_refuse_as_langgraph_s_own_stores_do(
        lg: LangGraphStore) -> None:
    with pytest.raises(base.InvalidNamespaceError):
        lg.put(("langgraph", "x"), "k", {"v": 1})  # BaseStore's own check
    lg.batch([PutOp(("langgraph", "x"), "k", {"v": 1})])
    found = lg.batch([GetOp(("langgraph", "x"), "k")])[0]
    assert found is not None and found.value == {"v": 1}  # type: ignore[union-attr]


def test_filter_operands_the_store_cannot_hold_compare_as_langgraph_s_stores_compare_them(
        lg: LangGraphStore) -> None:
    for n, price in enumerate([10, 20, 30]):
        lg.put(("items",), f"i{n}", {"price": price, "name": f"a{n}"})
    cases: list[tuple[dict[str, Any], list[str]]] = [
        ({"price": {"$lt": float("inf")}}, ["i0", "i1", "i2"]),
        ({"price": {"$gt": float("-inf")}}, ["i0", "i1", "i2"]),
        ({"price": {"$gt": float("inf")}}, []), ({"price": {"$lt": float("-inf")}}, []),
        ({"price": {"$eq": float("nan")}}, []), ({"price": {"$ne": float("nan")}},
                                                 ["i0", "i1", "i2"]),
        ({"price": {"$lt": 10**100}}, ["i0", "i1", "i2"]),
        ({"price": {"$gt": 15, "$lt": float("inf")}}, ["i1", "i2"]),
        ({"name": "a0\x00' OR '1'='1"}, []), ({"name": {"$ne": "a0\x00"}}, ["i0", "i1", "i2"]),
        ({"name": {"$lt": "a1\x00"}}, ["i0", "i1"]), ({"name": {"$gt": "a1\x00"}}, ["i2"]),
        ({"name": {"$in": ["a2", "a0\x00"]}}, ["i2"]),
    ]
    for where, keys in cases:
        assert sorted(i.key for i in lg.search(("items",), filter=where)) == keys, where


def test_the_async_twin_s_synchronous_calls_refuse_the_event_loop_s_thread(
        target: str) -> None:
    async def run() -> Any:
        async with AsyncLangGraphStore.from_conn_string(target, user="alice") as lg:
            with pytest.raises(asyncio.InvalidStateError):
                lg.put(("a",), "k", {"v": 1})
            await lg.aput(("a",), "k", {"v": 1})
            # From a thread of its own, a synchronous call is served.
            return await asyncio.to_thread(lg.get, ("a",), "k")

    found = asyncio.run(run())
    assert found is not None and found.value == {"v": 1}


def test_text_fields_as_sqlite_store_s_index_config_names_them(target: str) -> None:
    index: Any = {**concepts_index(), "text_fields": ["about"]}
    with LangGraphStore.from_conn_string(target, user="alice", index=index) as lg:
        lg.put(("n",), "k", {"about": "jazz concert", "where": "lisbon portugal"})
        by_field = lg.search(("n",), query="jazz")
        by_other = lg.search(("n",), query="lisbon portugal")
    assert by_field[0].score is not None and by_other[0].score is not None
    assert by_field[0].score > 0.9 > by_other[0].score  # "where" is neither embedded nor text


@pytest.mark.parametrize("value", [{"v": "a\x00b"}, {"k" * 513: 1}, {"v": 2**60},
                                   {"v": float("nan")}])
def test_a_value_the_store_cannot_hold_is_a_value_error_and_writes_nothing(
        lg: LangGraphStore, value: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        lg.batch([PutOp(("n",), "ok", {"v": 1}), PutOp(("n",), "bad", value)])
    assert lg.search(("n",)) == []


def test_an_item_whose_window_was_closed_elsewhere_is_read_no_more(target: str,
                                                                   clock: SetClock) -> None:
    """LangGraph's items have no window of validity: the adapter reads what is valid now,
    so an item's memory that the library (or MCP) ended is no longer an item."""
    with MemoryStore(target, clock=clock) as shared:
        lg = LangGraphStore(shared, user="alice")
        lg.put(("prefs",), "home", {"text": "Alice lives in Lisbon"})
        lg.put(("prefs",), "drink", {"text": "tea"})
        scope = Scope("alice", "langgraph")
        (held,) = [m for m in shared.memories(scope) if "Lisbon" in m["text"]]
        ended = shared.revise(scope, held["id"], held["text"], held["source"],
                              valid_to="2025-06-01T00:00:00+00:00")
        assert ended is not None
        assert lg.get(("prefs",), "home") is None
        assert [i.key for i in lg.search(("prefs",))] == ["drink"]
        assert [i.key for i in lg.search(("prefs",), query="Lisbon tea")] == ["drink"]
        kept = shared.get(scope, ended, valid_at="2025-01-01T00:00:00+00:00")
        assert kept is not None and kept["text"] == "Alice lives in Lisbon"
