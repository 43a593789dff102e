"""`memory mcp --http`: Streamable HTTP through the SDK's own client, the user of each call
the verified token's; bad tokens refused, no argument that changes the user, many clients
at once, SIGTERM, the loopback rule, on each engine.

Every server is a subprocess on a free loopback port, stopped (and waited for, bounded)
by the test that started it.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import json
import os
import pathlib
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import types
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Any

import pytest
from deferred import deferred, module, needs

from helpers import ROOT
from memory import MemoryStore, Scope

# The tests' tokens are signed here with PyJWT, which the mcp extra brings.
jwt = pytest.importorskip("jwt", reason="needs the `mcp` extra (python3 -m pip install -e"
                          " '.[mcp]')")
from tokens import AUDIENCE, ISSUER, Issuer, hmac_signed, unsigned  # noqa: E402

pytestmark = needs("mcp", "mcp")
if TYPE_CHECKING:
    import httpx2
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
    from mcp.server.auth.provider import AccessToken

    import memory_mcp
else:
    httpx2, memory_mcp = module("httpx2"), module("memory_mcp")
    ClientSession, = deferred("mcp", "ClientSession")
    streamable_http_client, = deferred("mcp.client.streamable_http", "streamable_http_client")
    AuthenticatedUser, = deferred("mcp.server.auth.middleware.bearer_auth", "AuthenticatedUser")
    AccessToken, = deferred("mcp.server.auth.provider", "AccessToken")

START_SECONDS = 60
SECRET_TEXT = "Alice's diagnosis is private-zq7"


class Running:
    """A `memory -v mcp --http` subprocess: its URL once its log names its port, its log,
    and how to stop it."""

    def __init__(self, process: subprocess.Popen[bytes], log: pathlib.Path) -> None:
        self.process, self.log, self.port = process, log, 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        try:
            return self.process.wait(60)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait(10)


SERVING = re.compile(rb"mcp: serving on 127\.0\.0\.1 port (\d+),")


@contextlib.contextmanager
def serving(target: str, log: pathlib.Path, *args: str) -> Iterator[Running]:
    """The server on port 0, the one the system picks: a port probed free here could be
    taken by another test's server before this one binds it. Its log names the port."""
    start = log.stat().st_size if log.exists() else 0
    with log.open("ab") as errors:
        running = Running(subprocess.Popen(
            [sys.executable, "-m", "memory", "-v", "mcp", target, "--http", "127.0.0.1:0",
             *args], cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=errors), log)
    try:
        deadline = time.monotonic() + START_SECONDS
        while (bound := SERVING.search(log.read_bytes()[start:])) is None:
            assert running.process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.05)
        running.port = int(bound[1])
        while True:
            try:
                socket.create_connection(("127.0.0.1", running.port), 0.5).close()
                break
            except OSError:
                assert running.process.poll() is None, log.read_text()
                assert time.monotonic() < deadline, "the server did not answer"
                time.sleep(0.05)
        yield running
    finally:
        running.stop()


@pytest.fixture
def issuer(tmp_path: pathlib.Path) -> Issuer:
    return Issuer(tmp_path)


def token_args(issuer: Issuer) -> list[str]:
    return ["--issuer", ISSUER, "--audience", AUDIENCE, "--jwks", str(issuer.jwks)]


@contextlib.asynccontextmanager
async def client(url: str, token: str | None) -> AsyncIterator[ClientSession]:
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    async with httpx2.AsyncClient(headers=headers, timeout=60) as http:
        async with streamable_http_client(url, http_client=http) as (reading, writing, *_):
            async with ClientSession(reading, writing) as session:
                await session.initialize()
                yield session


async def call(session: ClientSession, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await session.call_tool(tool, arguments)
    assert not result.is_error, result.content
    assert isinstance(result.structured_content, dict)
    return result.structured_content


def run(coroutine: Any) -> Any:
    async def bounded() -> Any:
        return await asyncio.wait_for(coroutine, 120)
    return asyncio.run(bounded())


def test_each_request_is_the_user_its_token_names(target: str, tmp_path: pathlib.Path,
                                                  issuer: Issuer) -> None:
    """alice writes and recalls; bob, on the same server, sees nothing of hers, and no
    argument (a `user`, a `scope`) changes whose memories a call reads."""
    log = tmp_path / "log"

    async def session(url: str) -> None:
        async with client(url, issuer.token("alice")) as alice:
            mine = (await call(alice, "remember", text=SECRET_TEXT))["id"]
            found = (await call(alice, "recall", query="diagnosis private-zq7"))["memories"]
            assert [m["id"] for m in found] == [mine]
            injected = await alice.call_tool("remember", {"text": "planted", "user": "bob"})
            assert injected.is_error
        async with client(url, issuer.token("bob")) as bob:
            assert await call(bob, "recall", query="diagnosis private-zq7") == {"memories": []}
            assert (await call(bob, "list_memories"))["total"] == 0
            for tool, arguments in (("forget", {"memory_id": mine}),
                                    ("revise", {"memory_id": mine, "text": "changed"})):
                refused = await bob.call_tool(tool, arguments)
                assert refused.is_error or refused.structured_content == {"forgotten": False}
            for extra in ({"user": "alice"}, {"scope": "alice/default"}, {"task": "default"}):
                refused = await bob.call_tool("recall", {"query": "diagnosis", **extra})
                assert refused.is_error

    with serving(target, log, *token_args(issuer)) as server:
        run(session(server.url))
        assert server.stop() == 0
    with MemoryStore(target, read_only=True) as store:
        assert [m["text"] for m in store.memories(Scope("alice", "default"))] == [SECRET_TEXT]
        assert store.count(Scope("bob", "default")) == 0
    written = log.read_text()
    assert "user alice" in written and "user bob" in written  # the log names users ...
    assert "zq7" not in written and "planted" not in written  # ... never text
    assert issuer.token("alice").split(".")[1] not in written  # nor tokens


def test_bad_tokens_are_refused_with_401_and_an_invalid_user_with_403(
        tmp_path: pathlib.Path, issuer: Issuer) -> None:
    (tmp_path / "other").mkdir()
    other = Issuer(tmp_path / "other")  # the same key id, another key: a forged signature
    bad = {
        "none": None,
        "expired": issuer.token("alice", lifetime=-3600),
        "not yet valid": issuer.token("alice", nbf=int(time.time()) + 3600),
        "wrong audience": issuer.token("alice", audience="someone-else"),
        "wrong issuer": issuer.token("alice", issuer="https://elsewhere.example.test/"),
        "forged signature": other.token("alice"),
        "garbage": "not.a.token",
        "alg none": unsigned("alice"),
        "HS256": hmac_signed("a-shared-secret-of-thirty-two-bytes-x", "alice"),
    }
    # exp and nbf are judged with 30 s of grace, on each side of its edge.
    now = int(time.time())
    bad["expired past the grace"] = issuer.token("alice", exp=now - 50)
    bad["not yet valid past the grace"] = issuer.token("alice", nbf=now + 50)
    graced = {"expired within the grace": issuer.token("alice", exp=now - 10),
              "not yet valid within the grace": issuer.token("alice", nbf=now + 10)}
    body = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"}}}
    headers = {"Accept": "application/json, text/event-stream"}

    why: dict[str, str] = {}

    async def statuses(url: str) -> dict[str, tuple[int, str]]:
        found = {}
        async with httpx2.AsyncClient(timeout=60) as http:
            for name, token in bad.items():
                sent = {**headers, **({} if token is None else
                                      {"Authorization": f"Bearer {token}"})}
                answer = await http.post(url, json=body, headers=sent)
                found[name] = (answer.status_code, answer.headers.get("www-authenticate", ""))
                why[name] = answer.json()["error_description"]
            for n, user in enumerate(("Alice", "bob smith", "x" * 65, "")):
                answer = await http.post(url, json=body, headers={
                    **headers, "Authorization": f"Bearer {issuer.token(user)}"})
                found[f"user {n}"] = (answer.status_code, "")
            for name, token in graced.items():
                answer = await http.post(url, json=body, headers={
                    **headers, "Authorization": f"Bearer {token}"})
                found[name] = (answer.status_code, "")
            unnamed = await http.post(url, json=body, headers={  # the JWKS has one key
                **headers, "Authorization": f"Bearer {issuer.token('alice', named=False)}"})
            found["no key id"] = (unnamed.status_code, "")
            metadata = await http.get(url.replace("/mcp", "/.well-known/oauth-protected-resource"
                                                  "/mcp"))
            found["metadata"] = (metadata.status_code, json.dumps(metadata.json()))
        return found

    with serving(str(tmp_path / "m.db"), tmp_path / "log", *token_args(issuer)) as server:
        found = run(statuses(server.url))
    metadata_url = f"http://127.0.0.1:{server.port}/.well-known/oauth-protected-resource/mcp"
    for name in bad:
        status, challenge = found[name]
        assert status == 401, name
        assert challenge.startswith("Bearer ") and f'resource_metadata="{metadata_url}"' in (
            challenge), name
    # Why, by its class (RFC 6750's error_description), in the body and the challenge.
    assert why == {
        "none": "a bearer token is required",
        "expired": "the token has expired", "expired past the grace": "the token has expired",
        "not yet valid": "the token is not valid yet",
        "not yet valid past the grace": "the token is not valid yet",
        "wrong audience": "the token is for another audience",
        "wrong issuer": "the token is of another issuer",
        "forged signature": "the token's signature does not verify",
        "garbage": "the token is not a well-formed JWT",
        "alg none": "the token is not signed with an asymmetric algorithm",
        "HS256": "the token is not signed with an asymmetric algorithm"}
    for name, said in why.items():
        assert f'error_description="{said}"' in found[name][1], name
    assert [status for name, (status, _) in found.items() if name.startswith("user")] == [403] * 4
    assert found["no key id"][0] == 200
    assert {name: found[name][0] for name in graced} == dict.fromkeys(graced, 200)
    status, metadata = found["metadata"]
    assert status == 200 and json.loads(metadata)["authorization_servers"] == [ISSUER]
    assert "a-shared-secret-of" not in (tmp_path / "log").read_text()


INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {},
    "clientInfo": {"name": "t", "version": "1"}}}
ACCEPT = {"Accept": "application/json, text/event-stream"}


def test_one_user_s_flood_of_sessions_leaves_the_others_served(tmp_path: pathlib.Path,
                                                               issuer: Issuer) -> None:
    limit = memory_mcp._SESSIONS_PER_USER
    alice = {**ACCEPT, "Authorization": f"Bearer {issuer.token('alice')}"}
    bob = {**ACCEPT, "Authorization": f"Bearer {issuer.token('bob')}"}

    async def flood(url: str) -> None:
        async with httpx2.AsyncClient(timeout=60) as http:
            opened = await asyncio.gather(*(http.post(url, json=INITIALIZE, headers=alice)
                                            for _ in range(limit + 8)))
            statuses = sorted(answer.status_code for answer in opened)
            assert statuses == [200] * limit + [429] * 8
            refused = next(answer for answer in opened if answer.status_code == 429)
            assert refused.json()["error"] == "too_many_sessions"
            bobs = await http.post(url, json=INITIALIZE, headers=bob)
            assert bobs.status_code == 200
            sessions = [a.headers["mcp-session-id"] for a in opened if a.status_code == 200]
            # Her open sessions still serve her; ending one frees its place.
            listed = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
            served = await http.post(url, json=listed,
                                     headers={**alice, "mcp-session-id": sessions[0]})
            assert served.status_code == 200, served.text
            ended = await http.delete(url, headers={**alice, "mcp-session-id": sessions[0]})
            assert ended.status_code == 200
            again = [await http.post(url, json=INITIALIZE, headers=alice) for _ in range(2)]
            assert [answer.status_code for answer in again] == [200, 429]
            # bob's session id in alice's hands is no session of hers and frees nothing.
            bobs_id = bobs.headers["mcp-session-id"]
            foreign = await http.delete(url, headers={**alice, "mcp-session-id": bobs_id})
            assert foreign.status_code == 404
            assert (await http.post(url, json=INITIALIZE, headers=alice)).status_code == 429
            still = await http.post(url, json=listed, headers={**bob, "mcp-session-id": bobs_id})
            assert still.status_code == 200, still.text

    with serving(str(tmp_path / "m.db"), tmp_path / "log", *token_args(issuer)) as server:
        run(flood(server.url))
    assert "refused a session of user alice" in (tmp_path / "log").read_text()


def test_another_client_of_the_user_asking_about_her_sessions_frees_no_place(
        tmp_path: pathlib.Path, issuer: Issuer) -> None:
    limit = memory_mcp._SESSIONS_PER_USER
    first = {**ACCEPT, "Authorization": f"Bearer {issuer.token('alice', azp='desktop')}"}
    second = {**ACCEPT, "Authorization": f"Bearer {issuer.token('alice', azp='phone')}"}
    listed = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}

    async def attack(url: str) -> None:
        async with httpx2.AsyncClient(timeout=60) as http:
            opened = [await http.post(url, json=INITIALIZE, headers=first)
                      for _ in range(limit)]
            assert [answer.status_code for answer in opened] == [200] * limit
            sessions = [answer.headers["mcp-session-id"] for answer in opened]
            for _ in range(3):  # each round: the second client asks about every one of them
                for session in sessions:
                    for ask in (http.post(url, json=listed,
                                          headers={**second, "mcp-session-id": session}),
                                http.delete(url, headers={**second, "mcp-session-id": session})):
                        assert (await ask).status_code == 404
                more = await http.post(url, json=INITIALIZE, headers=second)
                assert more.status_code == 429, more.text
            for session in sessions:  # they stay open for the client that opened them
                served = await http.post(url, json=listed,
                                         headers={**first, "mcp-session-id": session})
                assert served.status_code == 200, served.text
            ended = await http.delete(url, headers={**first, "mcp-session-id": sessions[0]})
            assert ended.status_code == 200
            assert (await http.post(url, json=INITIALIZE, headers=second)).status_code == 200

    with serving(str(tmp_path / "m.db"), tmp_path / "log", *token_args(issuer)) as server:
        run(attack(server.url))


def test_a_user_s_idle_sessions_stop_counting_when_the_server_closes_them() -> None:
    """The count forgets a session idle past the timeout, never one with a request in
    flight (the SDK closes neither sooner)."""
    now = [0.0]
    opened = iter(range(100))
    release = asyncio.Event()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope.get("method") == "GET":
            await release.wait()  # a long request: an event stream
        headers = [] if scope["headers"] else [(b"mcp-session-id", b"s%d" % next(opened))]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b""})

    sessions = memory_mcp._SessionsPerUser(app, clock=lambda: now[0])
    user = AuthenticatedUser(AccessToken(token="t", client_id="c", scopes=[], subject="alice"))

    async def request(method: str, session: bytes | None = None) -> None:
        headers = [] if session is None else [(b"mcp-session-id", session)]
        await sessions({"user": user, "method": method, "headers": headers}, None,
                       lambda message: asyncio.sleep(0))

    async def scenario() -> None:
        await request("POST")
        await request("POST")
        assert sessions.held("alice") == 2
        streaming = asyncio.create_task(request("GET", b"s0"))
        await asyncio.sleep(0)
        now[0] = memory_mcp._IDLE_SESSION_SECONDS + 1.0
        assert sessions.held("alice") == 1  # s1 idled out; s0 has its stream open
        release.set()
        await streaming
        now[0] += memory_mcp._IDLE_SESSION_SECONDS - 1.0
        assert sessions.held("alice") == 1
        now[0] += 1.0
        assert sessions.held("alice") == 0

    run(scenario())


def test_four_clients_of_two_users_write_at_once_and_every_write_is_kept(
        target: str, tmp_path: pathlib.Path, issuer: Issuer) -> None:
    async def writer(url: str, user: str, n: int) -> list[int]:
        async with client(url, issuer.token(user)) as session:
            return [(await call(session, "remember", text=f"fact {k} of writer {n}"))["id"]
                    for k in range(20)]

    async def all_at_once(url: str) -> list[list[int]]:
        return list(await asyncio.gather(*(writer(url, ("alice", "bob")[n % 2], n)
                                           for n in range(4))))

    with serving(target, tmp_path / "log", *token_args(issuer)) as server:
        ids = run(all_at_once(server.url))
        assert server.stop() == 0
    assert len({i for written in ids for i in written}) == 80
    with MemoryStore(target, read_only=True) as store:
        for user, writers in (("alice", (0, 2)), ("bob", (1, 3))):
            texts = sorted(m["text"] for m in store.memories(Scope(user, "default")))
            assert texts == sorted(f"fact {k} of writer {n}" for n in writers for k in range(20))


def test_sigterm_mid_load_loses_nothing_acknowledged(target: str, tmp_path: pathlib.Path,
                                                     issuer: Issuer) -> None:
    """Writers keep writing while the server is told to stop: every write it answered is
    in the store, the server ends with status 0, and closed the store behind it."""
    acknowledged: list[str] = []

    async def writer(url: str, n: int, stop_after: asyncio.Event) -> None:
        with contextlib.suppress(Exception):  # the server going away ends the writer
            async with client(url, issuer.token("alice")) as session:
                for k in range(1000):
                    text = f"load {n}/{k}"
                    result = await session.call_tool("remember", {"text": text})
                    if result.is_error:
                        return
                    acknowledged.append(text)
                    if len(acknowledged) >= 20:
                        stop_after.set()

    async def load(server: Running) -> int:
        stop_after = asyncio.Event()
        writers = [asyncio.create_task(writer(server.url, n, stop_after)) for n in range(3)]
        await asyncio.wait_for(stop_after.wait(), 60)
        status = await asyncio.to_thread(server.stop)
        await asyncio.wait_for(asyncio.gather(*writers), 60)
        return status

    with serving(target, tmp_path / "log", *token_args(issuer)) as server:
        status = run(load(server))
    assert status == 0, (tmp_path / "log").read_text()
    assert "closing the store" in (tmp_path / "log").read_text()
    with MemoryStore(target, read_only=True) as store:
        kept = {m["text"] for m in store.memories(Scope("alice", "default"))}
    assert len(acknowledged) >= 20 and set(acknowledged) <= kept


def test_without_an_issuer_only_loopback_is_served_for_the_one_user(
        tmp_path: pathlib.Path) -> None:
    path = str(tmp_path / "m.db")
    for host in ("0.0.0.0", "192.0.2.10", "example.test"):
        done = subprocess.run([sys.executable, "-m", "memory", "mcp", path, "--user", "alice",
                               "--http", f"{host}:8000"], cwd=ROOT, capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 1 and done.stderr == (
            "memory: error: --http on an address other than loopback needs --issuer: without"
            " tokens, anyone who reaches it would be the user\n"), done.stderr
    assert not os.path.exists(path)

    async def session(url: str) -> list[Any]:
        async with client(url, None) as alice:
            kept = (await call(alice, "remember", text="Alice likes tea"))["id"]
            return [kept, (await call(alice, "recall", query="tea"))["memories"]]

    with serving(path, tmp_path / "log", "--user", "alice") as server:
        kept, found = run(session(server.url))
        assert server.stop() == 0
    assert [m["id"] for m in found] == [kept]
    with MemoryStore(path, read_only=True) as store:
        assert store.count(Scope("alice", "default")) == 1


@pytest.mark.parametrize("args, message", [
    (["--issuer", ISSUER], "--issuer needs --audience"),
    (["--issuer", ISSUER, "--audience", AUDIENCE], "--issuer needs --jwks"),
    (["--issuer", ISSUER, "--audience", AUDIENCE, "--jwks", "https://x.test/k", "--user",
      "alice"],
     "--user is for a server without --issuer"),
    (["--issuer", ISSUER, "--audience", AUDIENCE, "--jwks", "no-such-file.json"],
     "--jwks names no readable JWKS file"),
    (["--http", "nonsense"], "--http must be HOST:PORT"),
    (["--http", "127.0.0.1:99999"], "--http must be HOST:PORT"),
])
def test_http_settings_are_checked_before_anything_is_opened(
        tmp_path: pathlib.Path, args: list[str], message: str) -> None:
    path = tmp_path / "m.db"
    http = [] if "--http" in args else ["--http", "127.0.0.1:8000"]
    done = subprocess.run([sys.executable, "-m", "memory", "mcp", str(path), *http, *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and done.stderr.startswith(f"memory: error: {message}"), (
        done.stderr)
    assert not path.exists()


OCT_KEY = {"kty": "oct", "kid": "shared", "k": "c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LXh4"}


@pytest.mark.parametrize("jwks, message", [
    ("[]", "--jwks names no readable JWKS file"),
    ("5", "--jwks names no readable JWKS file"),
    ('"keys"', "--jwks names no readable JWKS file"),
    ('{"keys": 5}', "--jwks names no readable JWKS file"),
    (json.dumps({"keys": [OCT_KEY]}), "--jwks holds no asymmetric key"),
])
def test_a_jwks_file_that_is_no_set_of_signing_keys_stops_the_start_in_one_line(
        tmp_path: pathlib.Path, jwks: str, message: str) -> None:
    (tmp_path / "jwks.json").write_text(jwks)
    path = tmp_path / "m.db"
    done = subprocess.run([sys.executable, "-m", "memory", "mcp", str(path), "--http",
                           "127.0.0.1:0", "--issuer", ISSUER, "--audience", AUDIENCE,
                           "--jwks", str(tmp_path / "jwks.json")],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and done.stderr.startswith(f"memory: error: {message}"), (
        done.stderr)
    assert done.stderr.count("\n") == 1 and not path.exists()


def test_keys_that_cannot_be_read_while_serving_refuse_the_request_with_401(
        tmp_path: pathlib.Path, issuer: Issuer) -> None:
    (tmp_path / "rotated").mkdir()
    rotated = Issuer(tmp_path / "rotated", key_id="test-key-2")  # unseen: the file is read
    log = tmp_path / "log"

    async def statuses(url: str) -> list[int]:
        found = []
        async with httpx2.AsyncClient(timeout=60) as http:
            for broken in ("[]", "5", "{not json", json.dumps({"keys": [OCT_KEY]})):
                issuer.jwks.write_text(broken)
                answer = await http.post(url, json=INITIALIZE, headers={
                    **ACCEPT, "Authorization": f"Bearer {rotated.token('alice')}"})
                found.append(answer.status_code)
        return found

    with serving(str(tmp_path / "m.db"), log, *token_args(issuer)) as server:
        assert run(statuses(server.url)) == [401] * 4
        assert server.process.poll() is None
    assert "Traceback" not in log.read_text()


def test_a_jwks_url_is_fetched_once_and_again_for_a_rotated_key_after_30_s(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The issuer's keys from a URL (a server of the test's own on loopback): the server
    fetches them once for tokens of the first key. After the issuer rotates to a second
    key, they are fetched again for the key id not seen before, but not within 30 s of
    the last fetch (PyJWT's guard against a flood of made-up key ids): the server's keys
    in process, on PyJWT's clock, which the test moves on rather than waiting 30 s."""
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    old, new = Issuer(first, "key-1"), Issuer(second, "key-2")
    published = {"jwks": old.jwks.read_bytes()}
    fetches: list[str] = []

    class Keys(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the handler's name)
            fetches.append(self.path)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(published["jwks"])

        def log_message(self, *args: Any) -> None:
            pass

    keys = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Keys)
    thread = threading.Thread(target=keys.serve_forever, daemon=True)
    thread.start()
    jwks_url = f"http://127.0.0.1:{keys.server_address[1]}/jwks.json"

    async def recall(url: str, issuer: Issuer) -> dict[str, Any]:
        async with client(url, issuer.token("alice")) as alice:
            return await call(alice, "list_memories")

    try:
        with serving(str(tmp_path / "m.db"), tmp_path / "log", "--issuer", ISSUER,
                     "--audience", AUDIENCE, "--jwks", jwks_url) as server:
            for _ in range(2):
                assert run(recall(server.url, old))["total"] == 0
            assert len(fetches) == 1  # kept
        seconds = [1000.0]
        monkeypatch.setattr(jwt.jwks_client, "time",
                            types.SimpleNamespace(monotonic=lambda: seconds[0]))
        verifier = memory_mcp._Keys(jwks_url)
        assert verifier.key_for(old.token("alice")).key_id == "key-1"
        published["jwks"] = new.jwks.read_bytes()  # the issuer rotates its key
        seconds[0] += 29
        with pytest.raises(jwt.PyJWKClientError):
            verifier.key_for(new.token("alice"))
        assert len(fetches) == 2
        seconds[0] += 2
        assert verifier.key_for(new.token("alice")).key_id == "key-2"
        assert len(fetches) == 3
    finally:
        keys.shutdown()
        keys.server_close()
        thread.join(30)
    assert not thread.is_alive()
