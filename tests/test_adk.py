"""memory_frameworks.adk: Google ADK's memory service over the store, on each engine, with ADK's own
Session and Event types and its Runner driving an agent that needs no model."""

from __future__ import annotations

import asyncio
import functools
from datetime import datetime
from typing import TYPE_CHECKING, Any

import pytest
from deferred import deferred, module, needs

from memory import MemoryStore
from memory_frameworks import identifier

pytestmark = needs("google.adk", "adk")
if TYPE_CHECKING:
    import google.genai.types as types
    from google.adk.events.event import Event
    from google.adk.memory.base_memory_service import BaseMemoryService
    from google.adk.runners import Runner
    from google.adk.sessions.in_memory_session_service import InMemorySessionService
    from google.adk.sessions.session import Session
    from scripted_adk import Recaller

    import memory_frameworks.adk as ours
    from memory_frameworks.adk import ADKMemoryService
else:
    types, ours = module("google.genai.types"), module("memory_frameworks.adk")
    Event, = deferred("google.adk.events.event", "Event")
    BaseMemoryService, = deferred("google.adk.memory.base_memory_service", "BaseMemoryService")
    Runner, = deferred("google.adk.runners", "Runner")
    InMemorySessionService, = deferred("google.adk.sessions.in_memory_session_service",
                                       "InMemorySessionService")
    Session, = deferred("google.adk.sessions.session", "Session")
    Recaller, = deferred("scripted_adk", "Recaller")
    ADKMemoryService, = deferred("memory_frameworks.adk", "ADKMemoryService")


def event(author: str, text: str, at: float, *, event_id: str | None = None,
          **more: Any) -> Event:
    role = "user" if author == "user" else "model"
    return Event(id=event_id or Event.new_id(), author=author, timestamp=at,
                 content=types.Content(role=role, parts=[types.Part(text=text)]), **more)


def session(events: list[Event], *, user: str = "alice", app: str = "travel",
            session_id: str = "s1") -> Session:
    return Session(id=session_id, app_name=app, user_id=user, events=events)


def texts(found: Any) -> list[str]:
    return [entry.content.parts[0].text for entry in found.memories]


@functools.cache
def trip() -> list[Event]:
    """A session's four events, the same ids at every call (a test adds them again)."""
    return [event("user", "I am flying to Lisbon in May.", 1_700_000_000.0),
            event("travel_agent", "Noted: Lisbon, May.", 1_700_000_005.0),
            event("user", "I only eat vegetarian food.", 1_700_000_010.0),
            event("travel_agent", "Noted: vegetarian meals.", 1_700_000_015.0)]


def test_a_growing_session_is_kept_once_per_event(target: str) -> None:
    async def run() -> None:
        service = ADKMemoryService(target)
        assert isinstance(service, BaseMemoryService)
        scope = service.scope("travel", "alice")
        await service.add_session_to_memory(session(trip()[:2]))
        first = [m["id"] for m in service.store.memories(scope)]
        await service.add_session_to_memory(session(trip()[:2]))
        assert [m["id"] for m in service.store.memories(scope)] == first  # none rewritten
        await service.add_session_to_memory(session(trip()))  # ADK adds the whole session
        assert [m["text"] for m in service.store.memories(scope)] == [
            e.content.parts[0].text for e in trip() if e.content and e.content.parts]
        # Two adds at once of one session keep each event once: its key decides.
        grown = trip() + [event("user", "Book a window seat.", 1_700_000_020.0)]
        await asyncio.wait_for(asyncio.gather(
            *(service.add_session_to_memory(session(grown)) for _ in range(4))), 60)
        assert service.store.count(scope) == 5
        service.close()
        service.close()

    asyncio.run(run())


def numbered(count: int, start: int = 0) -> list[Event]:
    return [event("user", f"turn {n} of the trip", float(n), event_id=f"e{n}")
            for n in range(start, start + count)]


def test_adding_a_grown_session_reads_its_newest_memories_not_all(target: str) -> None:
    # A runner adds the whole session after each turn: one new event of a long session
    # costs a page of its newest memories, not a read of every one it keeps.
    async def run() -> None:
        service = ADKMemoryService(target)
        scope = service.scope("travel", "alice")
        events = numbered(200)
        await service.add_session_to_memory(session(events))
        reads: list[int] = []
        memories = service.store.memories

        def counted(*args: Any, **kwargs: Any) -> Any:
            found = memories(*args, **kwargs)
            reads.append(len(found))
            return found

        service.store.memories = counted  # type: ignore[method-assign]
        events += numbered(1, 200)
        await service.add_session_to_memory(session(events))
        assert sum(reads) < 40
        service.store.memories = memories  # type: ignore[method-assign]
        assert [m["text"] for m in service.store.memories(scope)] == [
            f"turn {n} of the trip" for n in range(201)]
        service.close()

    asyncio.run(run())


def test_more_new_events_than_a_page_and_old_ones_given_again_are_each_kept_once(
        target: str) -> None:
    async def run() -> None:
        service = ADKMemoryService(target)
        scope = service.scope("travel", "alice")
        await service.add_session_to_memory(session(numbered(10)))
        await service.add_session_to_memory(session(numbered(250)))  # 240 new at once
        first = [m["id"] for m in service.store.memories(scope)]
        for again in (numbered(60, 20), numbered(5, 3), numbered(150)):  # none rewritten
            await service.add_events_to_memory(app_name="travel", user_id="alice",
                                               events=again, session_id="s1")
        assert [m["id"] for m in service.store.memories(scope)] == first
        # An event given twice in one add is kept once, in its first place.
        await service.add_events_to_memory(app_name="travel", user_id="alice", events=[
            *numbered(1, 250), *numbered(1, 251), *numbered(1, 250)], session_id="s1")
        assert [m["text"] for m in service.store.memories(scope)] == [
            f"turn {n} of the trip" for n in range(252)]
        service.close()

    asyncio.run(run())


def test_a_search_gives_the_best_first_with_author_and_time(target: str) -> None:
    async def run() -> Any:
        service = ADKMemoryService(target)
        await service.add_session_to_memory(session(trip()))
        found = await service.search_memory(app_name="travel", user_id="alice",
                                            query="what food do I eat")
        blank = await service.search_memory(app_name="travel", user_id="alice", query="  ")
        service.close()
        return found, blank

    found, blank = asyncio.run(run())
    best = found.memories[0]
    assert best.content.parts[0].text == "I only eat vegetarian food."
    assert best.content.role == "user" and best.author == "user"
    assert best.timestamp == datetime.fromtimestamp(1_700_000_010.0).isoformat()
    assert best.custom_metadata == {"session_id": "s1"}
    assert blank.memories == []


def test_a_search_returns_what_matches_and_no_neighbour_for_its_neighbour_s_words(
        target: str) -> None:
    # "vegetarian" is said in two of the session's four turns: those two come back, as
    # ADK's own services give them, not their neighbours for their sake (context ranks).
    async def run() -> list[str]:
        service = ADKMemoryService(target)
        await service.add_session_to_memory(session(trip()))
        found = await service.search_memory(app_name="travel", user_id="alice",
                                            query="vegetarian")
        service.close()
        return texts(found)

    assert sorted(asyncio.run(run())) == ["I only eat vegetarian food.",
                                          "Noted: vegetarian meals."]


def test_only_text_said_is_kept(tmp_path: Any) -> None:
    call = Event(author="travel_agent", content=types.Content(role="model", parts=[
        types.Part(function_call=types.FunctionCall(name="book", args={"seat": "12A"}))]))
    thought = Event(author="travel_agent", content=types.Content(role="model", parts=[
        types.Part(text="The user wants a seat.", thought=True),
        types.Part(text="Booked 12A.")]))
    partial = event("travel_agent", "Book", 1.0, partial=True)
    empty = Event(author="user")

    async def run() -> list[str]:
        service = ADKMemoryService(str(tmp_path / "m.db"))
        await service.add_session_to_memory(session([call, thought, partial, empty]))
        kept = [m["text"] for m in service.store.memories(service.scope("travel", "alice"))]
        service.close()
        return kept

    assert asyncio.run(run()) == ["Booked 12A."]


def test_events_added_alone_join_their_session(target: str) -> None:
    async def run() -> tuple[list[str], list[str]]:
        service = ADKMemoryService(target)
        await service.add_events_to_memory(app_name="travel", user_id="alice",
                                           events=trip()[:2], session_id="s1")
        await service.add_session_to_memory(session(trip()))
        await service.add_events_to_memory(app_name="travel", user_id="alice",
                                           events=trip()[:1])
        scope = service.scope("travel", "alice")
        in_s1 = [m["text"] for m in service.store.memories(scope, conversation="s1")]
        alone = [m["text"] for m in service.store.memories(scope, conversation=ours.NO_SESSION)]
        service.close()
        return in_s1, alone

    in_s1, alone = asyncio.run(run())
    assert len(in_s1) == 4 and alone == ["I am flying to Lisbon in May."]


def test_users_and_apps_never_see_each_other_s_memories(target: str) -> None:
    async def run() -> dict[tuple[str, str], list[str]]:
        service = ADKMemoryService(target)
        await service.add_session_to_memory(session(
            [event("user", "My passport number is X1234567.", 1.0)]))
        # The same session and event ids, another user; and another app of alice's.
        copy = [event("user", "My passport is renewed.", 2.0, event_id=trip()[0].id)]
        await service.add_session_to_memory(session(copy, user="bob"))
        await service.add_session_to_memory(session(copy, app="banking"))
        seen = {}
        for app, user in [("travel", "alice"), ("travel", "bob"), ("banking", "alice"),
                          ("travel", "carol")]:
            found = await service.search_memory(app_name=app, user_id=user,
                                                query="passport number")
            seen[app, user] = texts(found)
        service.close()
        return seen

    seen = asyncio.run(run())
    assert seen["travel", "alice"] == ["My passport number is X1234567."]
    assert seen["travel", "bob"] == seen["banking", "alice"] == ["My passport is renewed."]
    assert seen["travel", "carol"] == []


def test_names_that_are_not_identifiers_stay_apart(tmp_path: Any) -> None:
    names = ["user_1", "User-1", "user-1", "h-" + "0" * 62]
    assert len({identifier(name, "user_id") for name in names}) == 4
    assert identifier("user-1", "user_id") == "user-1"
    forged = identifier("user_1", "user_id")  # a user who calls themself by a digest
    assert identifier(forged, "user_id") != forged

    async def run() -> list[list[str]]:
        service = ADKMemoryService(str(tmp_path / "m.db"))
        for n, name in enumerate(names):
            await service.add_session_to_memory(session(
                [event("user", f"secret {n}", 1.0)], user=name, app="my_app"))
        await service.add_session_to_memory(session(
            [event("user", "secret forged", 1.0)], user=forged, app="my_app"))
        seen = [texts(await service.search_memory(app_name="my_app", user_id=name,
                                                  query="secret")) for name in names]
        service.close()
        return seen

    assert asyncio.run(run()) == [["secret 0"], ["secret 1"], ["secret 2"], ["secret 3"]]


def test_a_deleted_memory_is_gone_and_a_foreign_id_deletes_nothing(target: str) -> None:
    async def run() -> tuple[list[str], list[str]]:
        service = ADKMemoryService(target)
        await service.add_session_to_memory(session(trip()))
        await service.add_session_to_memory(session(trip(), user="bob"))
        (bobs, *_) = (await service.search_memory(app_name="travel", user_id="bob",
                                                  query="vegetarian food")).memories
        for foreign in [bobs.id, "12x", "", None, "9" * 40, "-1"]:
            await service.delete_memory(app_name="travel", user_id="alice",
                                        memory_id=foreign)
        assert service.store.count(service.scope("travel", "alice")) == 4
        (mine, *_) = (await service.search_memory(app_name="travel", user_id="alice",
                                                  query="vegetarian food")).memories
        await service.delete_memory(app_name="travel", user_id="alice", memory_id=mine.id)
        alice = await service.search_memory(app_name="travel", user_id="alice",
                                            query="vegetarian food")
        bob = await service.search_memory(app_name="travel", user_id="bob",
                                          query="vegetarian food")
        service.close()
        return texts(alice), texts(bob)

    alice, bob = asyncio.run(run())
    assert "I only eat vegetarian food." not in alice
    assert bob[0] == "I only eat vegetarian food."


def test_bad_arguments_are_refused(tmp_path: Any) -> None:
    path = str(tmp_path / "m.db")
    limits: list[Any] = [0, 21, 2.5, True]
    for limit in limits:
        with pytest.raises(ValueError):
            ADKMemoryService(path, limit=limit)
    with MemoryStore(str(tmp_path / "open.db")) as store, pytest.raises(ValueError):
        ADKMemoryService(store, matching="stems")

    async def run() -> None:
        service = ADKMemoryService(path)
        with pytest.raises(ValueError):
            await service.search_memory(app_name="", user_id="alice", query="x")
        with pytest.raises(ValueError):
            await service.search_memory(app_name="travel", user_id=None,  # type: ignore
                                        query="x")
        with pytest.raises(ValueError):
            await service.search_memory(app_name="travel", user_id="alice",
                                        query=5)  # type: ignore
        assert service.store.count(service.scope("travel", "alice")) == 0
        service.close()

    asyncio.run(run())


def test_a_runner_s_sessions_keep_one_user_s_memories_from_another(target: str) -> None:
    async def run() -> dict[str, list[str]]:
        memory_service = ADKMemoryService(target)
        sessions = InMemorySessionService()
        runner = Runner(agent=Recaller(name="recaller"), app_name="travel",
                        session_service=sessions, memory_service=memory_service)
        answers: dict[str, list[str]] = {}

        async def say(user: str, session_id: str, text: str) -> None:
            message = types.Content(role="user", parts=[types.Part(text=text)])
            async for step in runner.run_async(user_id=user, session_id=session_id,
                                               new_message=message):
                if step.content and step.content.parts and step.author == "recaller":
                    answers.setdefault(user, []).append(step.content.parts[0].text or "")
            done = await sessions.get_session(app_name="travel", user_id=user,
                                              session_id=session_id)
            assert done is not None
            await memory_service.add_session_to_memory(done)

        for user in ["alice", "bob"]:
            await sessions.create_session(app_name="travel", user_id=user, session_id="a")
            await sessions.create_session(app_name="travel", user_id=user, session_id="b")
        await say("alice", "a", "My seat preference is the aisle.")
        await say("alice", "b", "Which seat preference did I give?")
        await say("bob", "b", "Which seat preference did I give?")
        memory_service.close()
        return answers

    answers = asyncio.run(run())
    assert answers["alice"][1] == "My seat preference is the aisle."
    assert answers["bob"] == ["nothing"]


@pytest.mark.parametrize("session_id", ["", "   ", "ends/", "x" * 3000, "a/b/"])
def test_any_session_id_is_added_again_without_a_rewrite(target: str, session_id: str) -> None:
    async def run() -> None:
        service = ADKMemoryService(target)
        scope = service.scope("travel", "alice")
        await service.add_session_to_memory(session(trip()[:2], session_id=session_id))
        first = [m["id"] for m in service.store.memories(scope)]
        found = await service.search_memory(app_name="travel", user_id="alice",
                                            query="Lisbon")
        await service.add_session_to_memory(session(trip(), session_id=session_id))
        ids = [m["id"] for m in service.store.memories(scope)]
        assert ids[:2] == first and len(ids) == 4  # the two kept are not written again
        # An id a search gave still names its memory.
        await service.delete_memory(app_name="travel", user_id="alice",
                                    memory_id=found.memories[0].id)
        assert service.store.count(scope) == 3
        assert [e.custom_metadata for e in found.memories][0] == {"session_id": session_id}
        service.close()

    asyncio.run(run())


def test_an_event_time_no_datetime_holds_never_breaks_a_search(target: str) -> None:
    async def run() -> list[Any]:
        service = ADKMemoryService(target)
        events = [event("user", f"Lisbon trip {n}", at) for n, at in
                  enumerate([1e20, -1e20, 253402300800.0, 1_700_000_000.0])]
        await service.add_session_to_memory(session(events))
        found = await service.search_memory(app_name="travel", user_id="alice",
                                            query="Lisbon trip")
        service.close()
        return list(zip(texts(found), [entry.timestamp for entry in found.memories],
                        strict=True))

    found = sorted(asyncio.run(run()))
    assert [text for text, _ in found] == [f"Lisbon trip {n}" for n in range(4)]
    assert [at is None for _, at in found] == [True, True, True, False]


def test_a_memory_another_tool_wrote_is_never_an_adk_memory(
        target: str, caplog: pytest.LogCaptureFixture) -> None:
    async def run() -> tuple[list[str], int]:
        service = ADKMemoryService(target)
        scope = service.scope("travel", "alice")
        await service.add_session_to_memory(session(trip()[:1]))
        store = service.store
        # At the user level (memory mcp's default), with odd adk metadata, a forged key.
        store.remember(scope, "user", "Lisbon planted at user level", "s1/event")
        for planted in ([1, 2], {"v": 1, "session": ["s1"], "event": "e"}, "adk",
                        {"v": 1, "session": "s1", "event": "e", "at": 1e20}):
            store.remember(scope, "task", "Lisbon planted", "s1/event",
                           metadata={"adk": planted, "adk.v": 1})
        store.remember(scope, "task", "Lisbon forged", "s1/event", key='["s1","other"]',
                       metadata={"adk": {"v": 1, "session": "s1", "event": "e"}})
        found = await service.search_memory(app_name="travel", user_id="alice",
                                            query="Lisbon planted forged flying")
        for memory in store.memories(scope):  # a delete by any id forgets only its own
            await service.delete_memory(app_name="travel", user_id="alice",
                                        memory_id=str(memory["id"]))
        left = store.count(scope)
        service.close()
        return texts(found), left

    found, left = asyncio.run(run())
    assert found == ["I am flying to Lisbon in May."] and left == 6
    assert "no event of this service's: skipped" in caplog.text
    assert "planted" not in caplog.text



def test_a_search_pages_past_a_page_of_memories_that_are_no_adk_memory(target: str) -> None:
    async def run() -> list[str]:
        service = ADKMemoryService(target)
        scope = service.scope("travel", "alice")
        await service.add_session_to_memory(session(trip()[:1]))
        for n in range(25):  # more than a page of recall, each ranked first, none its own
            service.store.remember(scope, "task", f"Lisbon planted {n}", f"other-{n}/event",
                                   metadata={"adk": {"v": 1, "session": ["s1"], "event": "e"}})
        found = await service.search_memory(app_name="travel", user_id="alice",
                                            query="Lisbon planted")
        service.close()
        return texts(found)

    assert asyncio.run(run()) == ["I am flying to Lisbon in May."]


def test_explicit_memories_are_kept_with_their_custom_metadata(target: str) -> None:
    from google.adk.memory.memory_entry import MemoryEntry

    async def run() -> tuple[list[Any], list[Any], int]:
        service = ADKMemoryService(target)
        entry = MemoryEntry(id="diet", author="user", timestamp="2026-12-01T10:00:00",
                            custom_metadata={"source": "onboarding"},
                            content=types.Content(role="user", parts=[
                                types.Part(text="Alice is vegetarian.")]))
        await service.add_memory(app_name="travel", user_id="alice", memories=[entry],
                                 custom_metadata={"source": "call", "team": "trips"})
        first = await service.search_memory(app_name="travel", user_id="alice",
                                            query="vegetarian")
        again = entry.model_copy(update={"content": types.Content(
            role="user", parts=[types.Part(text="Alice is vegan now.")])})
        await service.add_memory(app_name="travel", user_id="alice", memories=[again])
        second = await service.search_memory(app_name="travel", user_id="alice",
                                             query="vegan")
        bob = await service.search_memory(app_name="travel", user_id="bob", query="vegan")
        count = service.store.count(service.scope("travel", "alice"))
        service.close()
        return first.memories, second.memories + bob.memories, count

    first, second, count = asyncio.run(run())
    (found,) = first
    assert found.content.parts is not None and found.content.parts[0].text == (
        "Alice is vegetarian.")
    assert found.custom_metadata == {"source": "onboarding", "team": "trips"}
    assert (found.author, found.timestamp) == ("user", "2026-12-01T10:00:00")
    assert [m.content.parts[0].text for m in second if m.content.parts] == [
        "Alice is vegan now."] and count == 1  # the same id replaced it, for alice alone
