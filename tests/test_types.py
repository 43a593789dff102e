"""The types a user's checker sees: TypedDicts that match what calls return, and mypy
--strict on a user's script against the installed distribution, configured as docs/api.md says."""

from __future__ import annotations

import importlib.util
import pathlib
import subprocess
import sys
import typing

import pytest
from embedders import ConceptEmbedder, ShortestFirst

import memory
from helpers import ALICE, BOB, ROOT
from memory import MemoryStore

# docs/api.md's lines for a user's mypy configuration (pyproject.toml form there; the same
# keys here in mypy.ini form, since the script's folder has no project).
USER_CONFIG = """\
[mypy]
strict = true

[mypy-memory]
follow_untyped_imports = true
"""

GOOD = """\
import asyncio

from memory import AsyncMemoryStore, Memory, MemoryStore, Recalled, Record, Scope


def remembered(path: str) -> list[Recalled]:
    with MemoryStore(path, matching="stems", rank="idf") as store:
        scope = Scope("alice", "trip")
        store.remember(scope, "user", "Alice is vegetarian.", "chat/1", ttl=3600)
        exported: list[Record] = store.export_user("alice")
        print(exported[0]["task"], exported[0]["expires_at"])
        return store.recall(scope, "vegetarian", limit=3, min_score=0.5)


async def listed(path: str) -> list[Memory]:
    async with AsyncMemoryStore(path) as store:
        return await store.memories(Scope("alice", "trip"))


for found in remembered("memory.db"):
    print(found["id"], found["level"], found["text"], round(found["score"], 2))
print(len(asyncio.run(listed("memory.db"))))
"""

BAD = """\
from memory import AsyncMemoryStore, MemoryStore, Scope

with MemoryStore("memory.db", rank="bm25") as store:
    store.remember(Scope("alice", "trip"), "team", "text", "s")
    print(store.recall(Scope("alice", "trip"), "text")[0]["txt"])
AsyncMemoryStore("memory.db", rnk="idf")
"""


def test_the_typed_dicts_name_exactly_the_keys_calls_return(tmp_path: pathlib.Path) -> None:
    with MemoryStore(tmp_path / "m.db", embedder=ConceptEmbedder()) as store:
        memory_id = store.remember(ALICE, "task", "Book the hotel.", "s", ttl=60)
        (recalled,) = store.recall(ALICE, "hotel")
        (explained,) = store.recall(ALICE, "hotel", explain=True)
        (in_context,) = store.recall(ALICE, "hotel", explain=True, context=True)
        store.remember_many([(BOB, "user", "Bob's hotel in Lisbon.", "chat/1"),
                             (BOB, "user", "Bob's Lisbon hotel has a pool.", "chat/2")])
        hybrid = store.recall(BOB, "lisbon hotel", explain=True, context=True,
                              rank="hybrid")[0]
        shown = store.get(ALICE, memory_id)
        (record,) = store.export_user("alice")
        keyed_id = store.remember(BOB, "user", "Bob's hotel key.", "s", key="hotel",
                                  metadata={"kind": "travel"}, embed=False,
                                  valid_from="2026-01-01T00:00:00+00:00")
        keyed, (keyed_recalled,) = store.get(BOB, keyed_id), store.recall(BOB, "key")
        (keyed_record,) = [r for r in store.export_user("bob") if r["id"] == keyed_id]
        (version,) = store.history(BOB, keyed_id)
    with MemoryStore(tmp_path / "m.db", embedder=ConceptEmbedder(),
                     reranker=ShortestFirst()) as store:
        reranked = store.recall(BOB, "lisbon hotel", explain=True, context=True,
                                rank="hybrid")[0]
    assert shown is not None and keyed is not None
    # A memory with a key or metadata has the optional keys too, one with a window its
    # ends; one without, none; a version of history has superseded_at as well.
    optional = [*typing.get_type_hints(memory._Keyed), *typing.get_type_hints(memory._Window),
                "superseded_at"]
    assert list(version) == list(typing.get_type_hints(memory.Memory))
    assert list(keyed) == list(typing.get_type_hints(memory.Memory))[:-1]
    assert list(keyed_recalled) == [key for key in typing.get_type_hints(memory.Recalled)
                                    if key != "why"]
    # A record has `embed` or `vectors` (what its vectors come from), never both.
    assert list(keyed_record) == [key for key in typing.get_type_hints(memory.Record)
                                  if key not in ("vectors", "history", "past_holder")]
    fields = [key for key in typing.get_type_hints(memory.Recalled) if key not in optional]
    assert list(recalled) == [key for key in fields if key in memory.Recalled.__required_keys__]
    why = list(typing.get_type_hints(memory.Why))
    assert list(explained) == fields and list(explained["why"]) == [
        key for key in why if key in memory.Why.__required_keys__]
    assert list(in_context["why"]) == why[:2]
    assert list(hybrid["why"]) == why[:-1]
    assert list(reranked["why"]) == why  # and the rank's score, `ranked`
    assert list(shown) == [key for key in typing.get_type_hints(memory.Memory)
                           if key not in optional]
    assert list(record) == list(typing.get_type_hints(memory._RecordFields)) == list(
        memory.RECORD_KEYS)
    assert memory.LEVELS == typing.get_args(memory.Level)
    assert memory.RANKS == typing.get_args(memory.Rank)
    assert memory.MATCHING == typing.get_args(memory.Matching)


def test_mypy_strict_on_a_users_script_reads_the_installed_module(
        tmp_path: pathlib.Path) -> None:
    if importlib.util.find_spec("mypy") is None:
        pytest.skip("mypy is not installed (pip install -e '.[test]')")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    python = venv / "bin" / "python"
    # Installed as a user installs it (not editable: mypy cannot follow an editable finder).
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q",
                    "--no-deps", str(ROOT)], check=True, timeout=300, capture_output=True)
    assert (venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}"
            / "site-packages" / "memory.py").exists()
    (tmp_path / "mypy.ini").write_text(USER_CONFIG, encoding="utf-8")
    (tmp_path / "good.py").write_text(GOOD, encoding="utf-8")
    (tmp_path / "bad.py").write_text(BAD, encoding="utf-8")

    def mypy(*files: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "mypy", "--config-file", "mypy.ini", "--python-executable",
             str(python), "--no-incremental", *files],
            cwd=tmp_path, capture_output=True, text=True, timeout=300)

    good = mypy("good.py")
    assert good.returncode == 0, good.stdout + good.stderr
    bad = mypy("bad.py")
    assert bad.returncode == 1
    found = bad.stdout
    assert 'bad.py:3: error: Argument "rank" to "MemoryStore"' in found
    assert 'bad.py:4: error: Argument 2 to "remember" of "MemoryStore"' in found
    assert 'bad.py:5: error: "txt" is not a valid TypedDict key' in found
    assert 'bad.py:6: error: Unexpected keyword argument "rnk" for "AsyncMemoryStore"' in found


def test_memory_py_copied_alone_type_checks_on_the_standard_library(
        tmp_path: pathlib.Path) -> None:
    if importlib.util.find_spec("mypy") is None:
        pytest.skip("mypy is not installed (pip install -e '.[test]')")
    (tmp_path / "memory.py").write_bytes((ROOT / "memory.py").read_bytes())
    checked = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-site-packages", "--no-incremental",
         "memory.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert checked.returncode == 0, checked.stdout + checked.stderr
