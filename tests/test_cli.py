"""The operator's command line, driven in subprocesses, and what the logs may carry."""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import logging
import os
import pathlib
import pty
import shlex
import subprocess
import sys
import tempfile
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import memory
from helpers import ROOT, WRITER, cli, stamp_version, write_version_1
from memory import MemoryStore, Scope, fixed_clock
from model import Memory

COMMANDS = ["stats", "list", "recall", "export", "remember", "import", "forget",
            "forget-conversation", "revise",
            "purge",
            "erase-user", "check", "compact", "reindex", "backup"]


def filled(target: str) -> str:
    """The store at `target`, holding four memories of two users."""
    with MemoryStore(target, clock=fixed_clock()) as store:
        store.remember(Scope("alice", "trip"), "user", "Alice is vegetarian.", "trip/turn-3")
        store.remember(Scope("alice", "trip"), "task", "Book the Lisbon hotel.", "trip/turn-5")
        store.remember(Scope("alice", "work"), "task", "Report due Friday.", "work/turn-1")
        store.remember(Scope("bob", "trip"), "user", "Bob uses a screen reader.", "on/turn-2")
    return target


@pytest.fixture
def store_at(target: str) -> str:
    """A filled store on each engine."""
    return filled(target)


@pytest.fixture
def store_path(tmp_path: pathlib.Path) -> pathlib.Path:
    """A filled SQLite file, for what only a file has (its bytes, check, backup)."""
    return pathlib.Path(filled(str(tmp_path / "memory.db")))


def lines(output: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in output.splitlines()]


def assert_clean_failure(done: subprocess.CompletedProcess[str]) -> None:
    """A store error: exit 1 and exactly one line on stderr, no traceback."""
    assert done.returncode == 1, done
    assert done.stderr.startswith("memory: error: "), done.stderr
    assert done.stderr.count("\n") == 1, done.stderr


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help(command: str) -> None:
    done = cli(command, "--help")
    assert done.returncode == 0
    assert done.stdout.startswith(f"usage: memory {command}")


def test_console_script_is_declared() -> None:
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert 'memory = "memory:main"' in text
    with pytest.raises(SystemExit) as done:
        memory.main(["--version"])
    assert done.value.code == 0
    script = pathlib.Path(sys.executable).with_name("memory")
    if not script.exists():
        pytest.skip("the package is not installed here (pip install -e .)")
    installed = subprocess.run([str(script), "--version"], capture_output=True, text=True,
                               timeout=60)
    assert installed.returncode == 0
    assert installed.stdout.strip() == f"memory {memory.__version__}"


def test_stats_counts_and_never_shows_text(store_at: str) -> None:
    done = cli("stats", store_at)
    assert done.returncode == 0, done.stderr
    stats = json.loads(done.stdout)
    version = (importlib.import_module("memory_postgres").POSTGRES_SCHEMA_VERSION
               if store_at.startswith("postgresql://") else memory.SCHEMA_VERSION)
    assert {k: stats[k] for k in ("schema_version", "memories", "user_level", "task_level",
                                  "users")} == {"schema_version": version,
                                                "memories": 4, "user_level": 2,
                                                "task_level": 2, "users": 2}
    assert stats["file_bytes"] > 0
    for word in ("vegetarian", "Lisbon", "reader", "turn"):
        assert word not in done.stdout


def test_list_and_recall_are_scoped(store_at: str) -> None:
    listed = lines(cli("list", store_at, "--user", "alice", "--task", "work").stdout)
    assert [m["text"] for m in listed] == ["Alice is vegetarian.", "Report due Friday."]
    done = cli("recall", store_at, "--user", "bob", "--task", "trip",
               "vegetarian hotel reader", "--limit", "5")
    assert done.returncode == 0
    assert [m["text"] for m in lines(done.stdout)] == ["Bob uses a screen reader."]


def test_the_command_line_ranks_as_the_mcp_server_and_stats_says_so(store_at: str) -> None:
    stats = json.loads(cli("stats", store_at).stdout)
    assert (stats["rank"], stats["context"]) == ("hybrid", True)
    done = cli("recall", store_at, "--user", "alice", "--task", "trip", "vegetarian hotel",
               "--limit", "5")
    assert done.returncode == 0, done.stderr
    with MemoryStore(store_at, read_only=True) as store:
        assert lines(done.stdout) == store.recall(Scope("alice", "trip"), "vegetarian hotel",
                                                  5, rank="hybrid", context=True)


def test_export_then_import_round_trips_every_field_but_the_id(store_at: str,
                                                               tmp_path: pathlib.Path) -> None:
    exported = cli("export", store_at, "--user", "alice")
    assert exported.returncode == 0
    records = lines(exported.stdout)
    assert len(records) == 3
    assert list(records[0]) == list(memory.RECORD_KEYS)
    dump = tmp_path / "alice.jsonl"
    dump.write_text(exported.stdout, encoding="utf-8")
    fresh = tmp_path / "fresh.db"
    done = cli("import", str(fresh), str(dump))
    assert done.returncode == 0, done.stderr
    without_ids = [{k: v for k, v in r.items() if k != "id"} for r in records]
    assert [{k: v for k, v in r.items() if k != "id"}
            for r in lines(cli("export", str(fresh), "--user", "alice").stdout)] == without_ids
    with MemoryStore(fresh) as store:
        assert store.recall(Scope("alice", "trip"), "lisbon")[0]["created_at"] == \
            "2026-10-20T09:01:00+00:00"
    again = cli("import", str(fresh), "-", stdin=exported.stdout)
    assert again.returncode == 0
    assert len(lines(cli("export", str(fresh), "--user", "alice").stdout)) == 6
    # `memory import DB < file`: no FILE, and a pipe, not a terminal, is standard input.
    piped = cli("import", str(fresh), stdin=exported.stdout)
    assert piped.returncode == 0, piped.stderr
    assert len(lines(cli("export", str(fresh), "--user", "alice").stdout)) == 9
    # At a terminal, no FILE says what to give, and reads nothing.
    terminal, other_end = pty.openpty()
    try:
        asked = subprocess.run([sys.executable, "-m", "memory", "import", str(fresh)],
                               cwd=ROOT, stdin=other_end, capture_output=True, text=True,
                               timeout=120)
    finally:
        os.close(terminal)
        os.close(other_end)
    assert asked.returncode == 1 and "FILE required" in asked.stderr
    assert len(lines(cli("export", str(fresh), "--user", "alice").stdout)) == 9


@pytest.mark.parametrize("bad_line, reason", [
    ('{"user": "alice", "task": null, "level": "user", "text": "  ", "source": "s",'
     ' "created_at": "2026-10-20T09:00:00+00:00"}', "blank"),
    ('{"user": "Alice", "task": null, "level": "user", "text": "x", "source": "s",'
     ' "created_at": "2026-10-20T09:00:00+00:00"}', "user"),
    ('{"user": "alice", "task": "trip", "level": "user", "text": "x", "source": "s",'
     ' "created_at": "2026-10-20T09:00:00+00:00"}', "task null"),
    ('{"user": "alice", "task": null, "level": "user", "text": "x", "source": "s",'
     ' "created_at": "yesterday"}', "ISO-8601"),
    ('{"user": "alice", "task": null, "level": "user", "text": "x", "source": "s"}', "keys"),
    ('["not", "an", "object"]', "JSON object"),
    ('{"user": "alice", oops}', "not JSON"),
])
def test_import_is_all_or_nothing_and_names_the_line(tmp_path: pathlib.Path, bad_line: str,
                                                     reason: str) -> None:
    good = json.dumps({"user": "alice", "task": None, "level": "user", "text": "Fine.",
                       "source": "s", "created_at": "2026-10-20T09:00:00+00:00"})
    dump = tmp_path / "in.jsonl"
    dump.write_text("\n".join([good, "", good, bad_line, good]) + "\n", encoding="utf-8")
    target = tmp_path / "target.db"
    done = cli("import", str(target), str(dump))
    assert_clean_failure(done)
    assert "line 4" in done.stderr and reason in done.stderr
    assert not target.exists()
    with MemoryStore(target) as store:
        store.remember(Scope("alice", "x"), "user", "already here", "s")
    assert cli("import", str(target), str(dump)).returncode == 1
    with MemoryStore(target) as store:
        assert store.count(Scope("alice", "x")) == 1


def test_forget_and_erase_user(store_at: str) -> None:
    assert_clean_failure(cli("forget", store_at, "--user", "bob", "--task", "trip", "2"))
    done = cli("forget", store_at, "--user", "alice", "--task", "trip", "2")
    assert done.returncode == 0, done.stderr
    refused = cli("erase-user", store_at, "--user", "alice")
    assert refused.returncode == 2 and "--yes" in refused.stderr
    assert len(lines(cli("export", store_at, "--user", "alice").stdout)) == 2
    done = cli("erase-user", store_at, "--user", "alice", "--yes")
    assert done.returncode == 0 and "erased 2" in done.stdout
    assert cli("export", store_at, "--user", "alice").stdout == ""
    assert len(lines(cli("export", store_at, "--user", "bob").stdout)) == 1
    compacted = cli("compact", store_at)
    assert compacted.returncode == 0, compacted.stderr


def test_compact_leaves_no_byte_of_an_erased_user(store_path: pathlib.Path) -> None:
    done = cli("erase-user", str(store_path), "--user", "alice", "--yes")
    assert done.returncode == 0 and "erased 3" in done.stdout
    compacted = cli("compact", str(store_path))
    assert compacted.returncode == 0, compacted.stderr
    assert b"Alice is vegetarian" not in store_path.read_bytes()
    assert not pathlib.Path(f"{store_path}-wal").exists() or \
        b"Alice is vegetarian" not in pathlib.Path(f"{store_path}-wal").read_bytes()
    assert_clean_failure(cli("compact", str(store_path.with_name("typo.db"))))


def test_commands_never_create_a_store_by_typo(tmp_path: pathlib.Path) -> None:
    missing = tmp_path / "typo.db"
    for args in (["stats"], ["list", "--user", "a", "--task", "b"], ["check"],
                 ["forget", "--user", "a", "--task", "b", "1"],
                 ["forget-conversation", "--user", "a", "--task", "b", "chat"],
                 ["erase-user", "--user", "a", "--yes"], ["export", "--user", "a"]):
        done = cli(args[0], str(missing), *args[1:])
        assert_clean_failure(done)
        assert "no such memory store" in done.stderr
    assert not missing.exists()


@pytest.mark.parametrize("command", [
    ["purge"], ["compact"], ["erase-user", "--user", "a", "--yes"],
    ["reindex", "--matching", "exact"], ["stats"], ["forget", "--user", "a", "--task", "b", "1"],
])
def test_commands_never_make_a_store_of_an_empty_file(tmp_path: pathlib.Path,
                                                      command: list[str]) -> None:
    empty = tmp_path / "typo.db"
    empty.touch()
    done = cli(command[0], str(empty), *command[1:])
    assert_clean_failure(done)
    assert "no such memory store" in done.stderr
    assert empty.stat().st_size == 0


def test_check(store_path: pathlib.Path, tmp_path: pathlib.Path) -> None:
    done = cli("check", str(store_path))
    assert done.returncode == 0
    assert json.loads(done.stdout) == {"ok": True, "integrity": ["ok"],
                                       "schema_version": memory.SCHEMA_VERSION}
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"\x13" * 8192)
    assert_clean_failure(cli("check", str(garbage)))


def test_check_finds_damage_inside_a_readable_file(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "damaged.db"
    with MemoryStore(path) as store:
        store.remember_many([(Scope("alice", "t"), "user", f"note {n} " + "pad " * 50, "s")
                             for n in range(400)])
    data = bytearray(path.read_bytes())
    page = 4096
    middle = (len(data) // page // 2) * page
    data[middle + 8: middle + page] = b"\xff" * (page - 8)
    path.write_bytes(bytes(data))
    done = cli("check", str(path))
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    if done.stdout:  # the file opened: the report names the damage
        assert json.loads(done.stdout)["ok"] is False


@pytest.mark.parametrize("args", [
    [], ["nonsense"], ["recall"], ["recall", "x.db", "--user", "a", "--task", "b"],
    ["recall", "x.db", "--user", "a", "--task", "b", "q", "--limit", "21"],
    ["forget", "x.db", "--user", "a", "--task", "b", "zero"],
    ["list", "x.db", "--user", "a b", "--task", "t"],
])
def test_usage_errors_exit_2_without_traceback(args: list[str]) -> None:
    done = cli(*args)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert "usage:" in done.stderr


def test_store_errors_exit_1_with_one_line(tmp_path: pathlib.Path) -> None:
    newer = tmp_path / "newer.db"
    MemoryStore(newer).close()
    stamp_version(newer, memory.SCHEMA_VERSION + 5)
    done = cli("stats", str(newer))
    assert_clean_failure(done)
    assert "database schema version" in done.stderr
    done = cli("import", str(tmp_path / "new.db"), str(tmp_path / "no-such-file.jsonl"))
    assert_clean_failure(done)


def test_backup_is_consistent_while_another_process_writes(store_path: pathlib.Path,
                                                           tmp_path: pathlib.Path) -> None:
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(store_path), "writer", "3000"],
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    try:
        copies = []
        for n in range(3):
            time.sleep(0.2)
            destination = tmp_path / f"copy-{n}.db"
            done = cli("backup", str(store_path), str(destination))
            assert done.returncode == 0, done.stderr
            copies.append(destination)
        out, err = writer.communicate(timeout=120)
        assert writer.returncode == 0, err
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait(timeout=10)
    counts = []
    for copy in copies:
        assert json.loads(cli("check", str(copy)).stdout)["ok"] is True
        assert copy.stat().st_mode & 0o777 == 0o600
        with MemoryStore(copy, read_only=True) as store:
            scope = Scope("writer", "work")
            listed = store.memories(scope)
            counts.append(len(listed))
            assert store.count(scope) == len(listed)
            for found in listed[-3:]:  # the newest rows of the snapshot have their postings
                number = found["text"].split()[1]
                hits = store.recall(scope, f"note {number} from writer", limit=20)
                assert found["id"] in [hit["id"] for hit in hits]
    assert counts == sorted(counts)
    assert 0 < counts[-1]


def test_backup_refuses_to_overwrite(store_path: pathlib.Path, tmp_path: pathlib.Path) -> None:
    taken = tmp_path / "taken.db"
    taken.write_bytes(b"precious")
    assert_clean_failure(cli("backup", str(store_path), str(taken)))
    assert taken.read_bytes() == b"precious"


# -- logs ---------------------------------------------------------------------------------

class Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_logs_carry_ids_levels_and_counts_never_text(tmp_path: pathlib.Path) -> None:
    texts = ["Alice is vegetarian zucchini.", "Book the Lisbon hotel quokka.",
             "Old version one memory walrus.", "Imported memory narwhal.",
             "Bulk memory platypus."]
    queries = ["vegetarian zucchini please", "lisbon quokka?", "walrus narwhal platypus"]
    capture = Capture()
    logger = logging.getLogger("memory")
    logger.addHandler(capture)
    previous = logger.level
    logger.setLevel(logging.DEBUG)
    try:
        old = tmp_path / "old.db"
        write_version_1(old, [Memory(1, "alice", None, texts[2], "old/turn-1", "2026-01-01")])
        with MemoryStore(old) as store:
            alice = Scope("alice", "trip")
            store.remember(alice, "user", texts[0], "trip/turn-3")
            store.remember(alice, "task", texts[1], "trip/turn-5")
            store.remember_many([(alice, "user", texts[4], "bulk/turn-1")])
            store.import_memories([{"user": "alice", "task": None, "level": "user",
                                    "text": texts[3], "source": "import/turn-1",
                                    "created_at": "2026-01-02T00:00:00+00:00"}])
            for query in queries:
                store.recall(alice, query)
            store.count(alice)
            store.memories(alice)
            store.export_user("alice")
            store.stats()
            store.check()
            store.backup(tmp_path / "copy.db")
            store.forget(alice, 2)
            store.forget_source(alice, "trip/turn-5")
            store.erase_user("alice")
            store.compact()
    finally:
        logger.removeHandler(capture)
        logger.setLevel(previous)
    messages = [record.getMessage() for record in capture.records]
    assert any("upgraded" in m for m in messages)
    assert any("remembered" in m for m in messages)
    assert any("forgot" in m for m in messages)
    assert any("erased" in m for m in messages)
    assert any("opened" in m for m in messages)
    markers = ["vegetarian", "zucchini", "lisbon", "quokka", "walrus", "narwhal", "platypus",
               "please"]
    for record, message in zip(capture.records, messages, strict=True):
        assert str(tmp_path) not in message and str(tmp_path) not in repr(record.args)
        for text in texts + queries + markers:
            assert text.lower() not in message.lower(), (text, message)
            assert text not in repr(record.args)


# -- any bytes in, one line out: never a traceback ------------------------------------------

def run_import(tmp_path: pathlib.Path, content: bytes) -> tuple[int, str, bool]:
    """`memory import` in this process on a file holding `content`: exit status, what it
    printed on stderr, and whether the store exists afterwards."""
    source, target = tmp_path / "in.jsonl", tmp_path / "imported.db"
    source.write_bytes(content)
    for stale in (target, pathlib.Path(f"{target}-wal"), pathlib.Path(f"{target}-shm")):
        stale.unlink(missing_ok=True)
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        try:
            status = memory.main(["import", str(target), str(source)])
        except SystemExit as exc:
            status = int(exc.code or 0)
    return status, err.getvalue(), target.exists()


def assert_refused_cleanly(status: int, err: str, created: bool) -> None:
    assert status == 1 and err.startswith("memory: error: line ") and err.count("\n") == 1, err
    assert not created


@settings(max_examples=150)
@given(content=st.binary(max_size=300))
def test_import_of_any_bytes_exits_cleanly(content: bytes) -> None:
    with tempfile.TemporaryDirectory() as name:
        status, err, created = run_import(pathlib.Path(name), content)
    assert status in (0, 1), err
    if status:
        assert_refused_cleanly(status, err, created)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats() | st.text(max_size=8) | st.sampled_from(memory.RECORD_KEYS),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.sampled_from(memory.RECORD_KEYS) | st.text(max_size=4), inner,
                      max_size=8),
    max_leaves=12,
)


@given(values=st.lists(JSON_VALUES, min_size=1, max_size=3))
def test_import_of_any_json_values_exits_cleanly(values: list[Any]) -> None:
    content = "\n".join(json.dumps(value) for value in values).encode()
    with tempfile.TemporaryDirectory() as name:
        status, err, created = run_import(pathlib.Path(name), content)
    if status:
        assert_refused_cleanly(status, err, created)
    else:  # only records a store accepts
        assert created and all(isinstance(value, dict) for value in values)


GOOD = ('{"user": "alice", "task": null, "level": "user", "text": "x", "source": "s",'
        ' "created_at": "2026-10-20T09:00:00+00:00"}')


@pytest.mark.parametrize("content, problem", [
    (GOOD.encode() + b"\n" + GOOD.encode().replace(b'"x"', b'"\xff\xfe"'), "line 2: not UTF-8"),
    (b"[" * 100_000, "line 1: JSON nested too deeply"),
    (GOOD.replace('"x"', '"x", "id": ' + "9" * 5000).encode(), "line 1: a number too long"),
    (GOOD.replace('"x"', f'"x", "id": {2**63}').encode(), "line 1: id must be from 1"),
    (GOOD.replace('"user": "alice"', '"user": "alice", "user": "bob"').encode(),
     "line 1: a key appears twice"),
    (GOOD.replace('"task": null, "level": "user"', '"task": null, "level": "task"').encode(),
     "line 1: a task-level record needs a task"),
])
def test_import_refuses_hostile_lines_naming_them(tmp_path: pathlib.Path, content: bytes,
                                                  problem: str) -> None:
    source = tmp_path / "hostile.jsonl"
    source.write_bytes(content)
    done = cli("import", str(tmp_path / "m.db"), str(source))
    assert_clean_failure(done)
    assert problem in done.stderr
    assert not (tmp_path / "m.db").exists()


def test_export_writes_utf8_whatever_the_locale(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "m.db"
    with MemoryStore(path) as store:
        store.remember(Scope("alice", "trip"), "user", "Alice loves 🍣 and café au lait.", "s")
    done = subprocess.run([sys.executable, "-m", "memory", "export", str(path), "--user",
                           "alice"], cwd=ROOT, capture_output=True, timeout=120,
                          env={**os.environ, "PYTHONIOENCODING": "ascii", "LC_ALL": "C"})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.decode("utf-8"))["text"] == "Alice loves 🍣 and café au lait."


def test_library_export_imports_again(tmp_path: pathlib.Path) -> None:
    with MemoryStore(tmp_path / "a.db") as source, MemoryStore(tmp_path / "b.db") as target:
        source.remember(Scope("alice", "trip"), "user", "Alice is vegetarian.", "turn-1")
        source.remember(Scope("alice", "trip"), "task", "Book the hotel.", "turn-2")
        exported = source.export_user("alice")
        assert len(target.import_memories(exported)) == 2  # ids are the target's own
        assert [{**r, "id": 0} for r in target.export_user("alice")] == \
            [{**r, "id": 0} for r in exported]


def test_remember_prints_the_new_id_and_reads_stdin(store_at: str, tmp_path: pathlib.Path) -> None:
    done = cli("remember", store_at, "--user", "alice", "--task", "trip", "Alice likes jazz.")
    assert done.returncode == 0 and done.stdout == "5\n", done.stderr
    done = cli("remember", store_at, "--user", "alice", "--task", "trip", "--level", "task",
               "--source", "chat/turn-9", "-", stdin="Jazz bar on Friday.\n")
    assert done.returncode == 0 and done.stdout == "6\n", done.stderr
    listed = lines(cli("list", store_at, "--user", "alice", "--task", "trip").stdout)
    assert [(m["text"], m["level"], m["source"]) for m in listed][-2:] == [
        ("Alice likes jazz.", "user", "cli"), ("Jazz bar on Friday.", "task", "chat/turn-9")]
    missing = tmp_path / "new.db"
    assert_clean_failure(cli("remember", str(missing), "--user", "alice", "--task", "t", " "))
    assert not missing.exists()  # checked before the store is opened
    assert cli("remember", str(missing), "--user", "alice", "--task", "t", "x").stdout == "1\n"


@pytest.mark.parametrize("problem", [
    ["--source", " "], ["--source", "s" * 2001], ["--ttl", str(10**13)], ["--ttl", "inf"]])
def test_remember_checks_every_input_before_it_creates_the_store(
        tmp_path: pathlib.Path, problem: list[str]) -> None:
    missing = tmp_path / "new.db"
    done = cli("remember", str(missing), "--user", "alice", "--task", "t", *problem, "x")
    assert done.returncode in (1, 2) and "Traceback" not in done.stderr, done.stderr
    # The error is the last line; argparse's usage errors print the usage before it.
    assert done.stderr.splitlines()[-1].startswith(("memory: error: ", "memory remember: error:"))
    assert not missing.exists()


def test_remember_from_a_closed_standard_input_is_one_line(tmp_path: pathlib.Path) -> None:
    missing = tmp_path / "new.db"
    command = (f"{shlex.quote(sys.executable)} -m memory remember {shlex.quote(str(missing))}"
               " --user alice --task t - <&-")
    done = subprocess.run(["bash", "-c", command], cwd=ROOT, text=True, capture_output=True,
                          timeout=120)
    assert_clean_failure(done)
    assert done.stderr == "memory: error: TEXT is -, but standard input is closed\n"
    assert not missing.exists()
    not_utf8 = subprocess.run([sys.executable, "-m", "memory", "remember", str(missing),
                               "--user", "alice", "--task", "t", "-"], cwd=ROOT,
                              input=b"caf\xe9\n", capture_output=True, timeout=120)
    assert not_utf8.returncode == 1
    assert not_utf8.stderr == b"memory: error: standard input is not UTF-8\n"
    assert not missing.exists()


SERVER_MEMORY = [
    {"type": "entity", "name": "Alice", "entityType": "person",
     "observations": ["prefers aisle seats", "is vegetarian"]},
    {"type": "entity", "name": "Lisbon trip", "entityType": "event", "observations": []},
    {"type": "relation", "from": "Alice", "to": "Lisbon trip", "relationType": "plans"},
]


def test_import_from_the_reference_memory_servers_file(store_at: str,
                                                       tmp_path: pathlib.Path) -> None:
    """memory.jsonl of the reference MCP memory server: each observation and relation is
    one user-level memory of --user naming its entity; importing twice changes nothing."""
    file = tmp_path / "memory.jsonl"
    file.write_text("\n".join(json.dumps(line) for line in SERVER_MEMORY) + "\n")
    command = ["import", store_at, "--from", "server-memory", str(file), "--user", "carol"]
    done = cli(*command)
    assert done.returncode == 0 and done.stdout == "imported 3 memories (0 already held)\n", (
        done.stderr)
    again = cli(*command)
    assert again.returncode == 0 and again.stdout == "imported 0 memories (3 already held)\n"
    listed = [json.loads(line) for line in cli("list", store_at, "--user", "carol",
                                                "--task", "any").stdout.splitlines()]
    # Each entity is a conversation, its facts numbered in the file's order.
    assert [(m["text"], m["source"], m["level"]) for m in listed] == [
        ("Alice: prefers aisle seats", "server-memory:Alice/1", "user"),
        ("Alice: is vegetarian", "server-memory:Alice/2", "user"),
        ("Alice plans Lisbon trip", "server-memory:Alice/3", "user")]
    assert len(lines(cli("list", store_at, "--user", "carol", "--task", "any",
                         "--conversation", "server-memory:Alice").stdout)) == 3
    tasked = cli(*command, "--task", "trip")
    assert tasked.returncode == 0, tasked.stderr
    assert {json.loads(line)["level"] for line in cli(
        "list", store_at, "--user", "carol", "--task", "trip").stdout.splitlines()} == {
        "user", "task"}
    assert cli("list", store_at, "--user", "dave", "--task", "trip").stdout == ""


def test_the_memory_server_s_file_without_from_is_told_to_add_it(
        tmp_path: pathlib.Path) -> None:
    file = tmp_path / "memory.jsonl"
    file.write_text("\n".join(json.dumps(line) for line in SERVER_MEMORY) + "\n")
    missing = tmp_path / "new.db"
    done = cli("import", str(missing), str(file))
    assert_clean_failure(done)
    assert "line 1: " in done.stderr and "add --from server-memory --user U" in done.stderr
    assert not missing.exists()


@pytest.mark.parametrize("bad, problem", [
    ('{"type": "entity", "name": "Alice"}', "line 2: an entity needs entityType, name,"),
    ('{"type": "person"}', "line 2: not an entity or a relation"),
    ("[1, 2]", "line 2: not an entity or a relation"),
    ('{"type": ["entity"]}', "line 2: not an entity or a relation"),
    ('{"type": {"secret": 1}}', "line 2: not an entity or a relation"),
    ("{not json", "line 2: not JSON"),
    ('{"type": "entity", "name": "A", "entityType": "p", "observations": "x"}',
     "line 2: observations must be a list"),
    ('{"type": "entity", "name": "A", "entityType": "p", "observations": [" "]}',
     "line 2: an observation must not be blank"),
    ('{"type": "relation", "from": "A", "to": 5, "relationType": "r"}', "line 2: to must be"),
])
def test_a_malformed_server_memory_line_is_named_and_nothing_is_written(
        tmp_path: pathlib.Path, bad: str, problem: str) -> None:
    file = tmp_path / "memory.jsonl"
    file.write_text(json.dumps(SERVER_MEMORY[0]) + "\n" + bad + "\n")
    missing = tmp_path / "new.db"
    done = cli("import", str(missing), "--from", "server-memory", str(file), "--user", "carol")
    assert_clean_failure(done)
    assert done.stderr.startswith(f"memory: error: {problem}"), done.stderr
    assert not missing.exists()
    assert "secret" not in done.stderr
    no_user = cli("import", str(missing), "--from", "server-memory", str(file))
    assert_clean_failure(no_user)
    assert "needs --user" in no_user.stderr and not missing.exists()


def test_a_write_without_the_recorded_embedder_says_so_and_reindex_fixes_it(
        target: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", str(ROOT / "tests"))
    scope = ["--user", "alice", "--task", "trip"]
    first = cli("remember", target, *scope, "Alice is vegetarian.", "--embedder",
                "embedders:concepts")
    assert first.returncode == 0 and first.stderr == "", first.stderr
    without = cli("remember", target, *scope, "Alice likes jazz.")
    assert without.returncode == 0
    assert "opened without one" in without.stderr and "reindex" in without.stderr
    assert json.loads(cli("stats", target).stdout)["without_vectors"] == 1
    fixed = cli("reindex", target, "--embedder", "embedders:concepts")
    assert fixed.returncode == 0 and "opened without one" not in fixed.stderr, fixed.stderr
    assert json.loads(cli("stats", target).stdout)["without_vectors"] == 0


def test_a_conversation_is_listed_and_forgotten_as_one(target: str) -> None:
    scope = ["--user", "alice", "--task", "trip"]
    for n, source in enumerate(("chat-42/turn-1", "chat-42/turn-2", "chat-43/turn-1")):
        assert cli("remember", target, *scope, f"note {n}", "--source", source).returncode == 0
    assert cli("remember", target, "--user", "bob", "--task", "trip", "bob's",
               "--source", "chat-42/turn-1").returncode == 0
    listed = lines(cli("list", target, *scope, "--conversation", "chat-42").stdout)
    assert [m["source"] for m in listed] == ["chat-42/turn-1", "chat-42/turn-2"]
    done = cli("forget-conversation", target, *scope, "chat-42/")
    assert done.returncode == 0 and done.stdout == "forgot 2 memories of the conversation\n"
    assert [m["source"] for m in lines(cli("list", target, *scope).stdout)] == [
        "chat-43/turn-1"]
    assert len(lines(cli("list", target, "--user", "bob", "--task", "trip").stdout)) == 1


def test_the_command_line_keeps_keys_and_metadata_and_filters_and_pages_by_them(
        target: str) -> None:
    scope = ("--user", "alice", "--task", "trip")
    for text, metadata in (("Alice likes tea.", '{"kind": "preference", "n": 1}'),
                           ("Alice likes coffee.", '{"kind": "preference", "n": 2}'),
                           ("Tea at five.", '{"kind": "plan"}')):
        assert cli("remember", target, *scope, "--key", text[:9], "--metadata", metadata,
                   text).returncode == 0
    assert cli("remember", target, *scope, "--key", "Alice lik", "--metadata",
               '{"kind": "preference", "n": 3}', "Alice likes mint tea.").returncode == 0

    def lines(*args: str) -> list[dict[str, Any]]:
        done = cli(*args)
        assert done.returncode == 0, done.stderr
        return [json.loads(line) for line in done.stdout.splitlines()]

    listed = lines("list", target, *scope, "--where", '{"kind": "preference"}')
    assert [m["text"] for m in listed] == ["Alice likes mint tea."]
    assert [m["text"] for m in lines("list", target, *scope, "--newest-first", "--limit",
                                     "1")] == ["Alice likes mint tea."]
    ranked = lines("recall", target, *scope, "tea", "--limit", "1", "--offset", "1")
    assert len(ranked) == 1 and ranked[0]["text"] == "Tea at five."
    assert lines("recall", target, *scope, "tea", "--where", '{"n": {"$gte": 3}}')[0][
        "metadata"]["n"] == 3
    bad = cli("list", target, *scope, "--where", "[\"s3cr3t\"]")
    assert bad.returncode == 2 and "must be a JSON object" in bad.stderr
    assert "s3cr3t" not in bad.stderr
    assert cli("forget-key", target, *scope, "Alice lik").returncode == 0
    forgot = cli("forget-where", target, *scope, '{"kind": "plan"}')
    assert forgot.returncode == 0 and "forgot 1 memories" in forgot.stdout
    assert lines("list", target, *scope) == []
    assert cli("forget-key", target, *scope, "Alice lik").returncode == 1


def test_the_command_line_writes_over_a_version_lists_keys_by_prefix_and_renames(
        target: str) -> None:
    scope = ("--user", "alice", "--task", "trip")

    def lines(*args: str) -> list[dict[str, Any]]:
        done = cli(*args)
        assert done.returncode == 0, done.stderr
        return [json.loads(line) for line in done.stdout.splitlines()]

    for key in ("notes/b", "notes/a", "todo"):
        assert cli("remember", target, *scope, "--level", "task", "--key", key,
                   "--if-version", "0", f"text of {key}").returncode == 0
    refused = cli("remember", target, *scope, "--level", "task", "--key", "notes/a",
                  "--if-version", "0", "s3cr3t text")
    assert refused.returncode == 1 and "at version 1, not version 0" in refused.stderr
    assert "s3cr3t" not in refused.stderr
    assert cli("remember", target, *scope, "--level", "task", "--key", "notes/a",
               "--if-version", "1", "notes a, again").returncode == 0
    listed = lines("list", target, *scope, "--key-prefix", "notes/")
    assert [(m["key"], m["version"]) for m in listed] == [("notes/a", 2), ("notes/b", 1)]
    assert [m["key"] for m in lines("list", target, *scope, "--key-prefix", "notes/",
                                    "--after-key", "notes/a", "--limit", "1")] == ["notes/b"]
    assert cli("rename", target, *scope, "notes/b", "notes/a").returncode == 1  # held
    renamed = cli("rename", target, *scope, "notes/b", "notes/c", "--if-version", "1")
    assert renamed.returncode == 0 and renamed.stdout.startswith("renamed the key of memory")
    assert cli("rename", target, *scope, "notes/b", "notes/d").returncode == 1  # gone
    (moved,) = lines("list", target, *scope, "--key-prefix", "notes/c")
    assert moved["version"] == 2
    assert cli("revise", target, *scope, str(moved["id"]), "new text", "--source", "s",
               "--if-version", "1").returncode == 1
    assert cli("forget-key", target, *scope, "notes/c", "--if-version", "1").returncode == 1
    assert cli("forget-key", target, *scope, "notes/c", "--if-version", "2").returncode == 0
    assert cli("forget", target, *scope, str(listed[0]["id"]), "--if-version",
               "1").returncode == 1
    assert [m["key"] for m in lines("list", target, *scope, "--key-prefix", "")] == [
        "notes/a", "todo"]
    mixed = cli("list", target, *scope, "--key-prefix", "n", "--newest-first")
    assert mixed.returncode == 1 and "pages with after_key and limit" in mixed.stderr


def test_the_command_line_keeps_history_and_reads_as_of_a_time(target: str) -> None:
    scope = ("--user", "alice", "--task", "trip")

    def lines(*args: str) -> list[dict[str, Any]]:
        done = cli(*args)
        assert done.returncode == 0, done.stderr
        return [json.loads(line) for line in done.stdout.splitlines()]

    assert cli("remember", target, *scope, "--key", "seat", "--history",
               "Seat: aisle.").returncode == 0
    (first,) = lines("list", target, *scope)
    time.sleep(1.1)  # the system clock's readings are seconds apart
    assert cli("remember", target, *scope, "--key", "seat", "Seat: window.").returncode == 0
    versions = lines("history", target, *scope, "--key", "seat")
    assert [(v["text"], v["version"]) for v in versions] == [
        ("Seat: aisle.", 1), ("Seat: window.", 2)]
    assert versions[0]["superseded_at"] == versions[1]["updated_at"]
    assert lines("history", target, *scope, "--id", str(first["id"])) == versions
    missing = cli("history", target, *scope, "--key", "nothing")
    assert missing.returncode == 1 and "no memory with that id or key" in missing.stderr
    then = first["updated_at"]
    assert [m["text"] for m in lines("list", target, *scope, "--as-of", then)] == [
        "Seat: aisle."]
    assert [m["text"] for m in lines("recall", target, *scope, "seat", "--as-of", then)] == [
        "Seat: aisle."]
    bad = cli("list", target, *scope, "--as-of", "yesterday")
    assert bad.returncode == 1 and "as_of" in bad.stderr


def run_main(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """memory.main(ARGS) in this process: its status (2 for argparse's exit), stdout and
    stderr."""
    try:
        status = memory.main(list(args))
    except SystemExit as exit:
        status = int(exit.code or 0)
    said = capsys.readouterr()
    return status, said.out, said.err


@pytest.mark.parametrize("option", [["list", "--where"], ["recall", "q", "--where"],
                                    ["remember", "text", "--metadata"], ["forget-where"]])
@pytest.mark.parametrize("depth", [2_000, 30_000])
def test_deeply_nested_json_options_are_one_line_and_exit_2(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], option: list[str],
        depth: int) -> None:
    command, *rest = option
    nested = "[" * depth + "]" * depth
    status, _, said = run_main(capsys, command, str(tmp_path / "m.db"), "--user", "a",
                               "--task", "t", *rest, nested)
    assert status == 2 and "nested too deeply" in said and "Traceback" not in said
    assert said.strip().splitlines()[-1].startswith("memory ")
    assert not (tmp_path / "m.db").exists()


def test_max_text_reaches_the_checks_before_the_store_opens(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, long = str(tmp_path / "m.db"), "a" * 5_000
    status, out, said = run_main(capsys, "remember", path, "--user", "a", "--task", "t", long,
                                 "--max-text", "10000")
    assert (status, said) == (0, "") and out.strip() == "1"
    records = tmp_path / "records.jsonl"
    records.write_text(json.dumps({"user": "a", "task": None, "level": "user", "text": long,
                                   "source": "s", "created_at": "2026-10-20T09:00:00+00:00"})
                       + "\n")
    status, _, said = run_main(capsys, "import", path, str(records))
    assert status == 1 and "line 1: text is 5000 characters" in said
    status, out, said = run_main(capsys, "import", path, str(records), "--max-text", "10000")
    assert (status, said) == (0, "") and "imported 1 memories" in out
    server = tmp_path / "memory.jsonl"
    server.write_text(json.dumps({"type": "entity", "name": "Alice", "entityType": "person",
                                  "observations": [long]}) + "\n")
    status, out, said = run_main(capsys, "import", path, str(server), "--from",
                                 "server-memory", "--user", "b", "--max-text", "10000")
    assert (status, said) == (0, "") and "imported 1 memories" in out


def test_import_names_lines_from_1_for_held_keys_and_keys_given_twice(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = str(tmp_path / "m.db")
    with MemoryStore(path) as store:
        store.remember(Scope("a", "t"), "user", "held", "s", key="k")

    def record(key: str) -> str:
        return json.dumps({"user": "a", "task": None, "level": "user", "text": "x",
                           "source": "s", "created_at": "2026-10-20T09:00:00+00:00",
                           "key": key})

    records = tmp_path / "records.jsonl"
    records.write_text(f"{record('j')}\n\n{record('k')}\n")
    status, _, said = run_main(capsys, "import", path, str(records))
    assert status == 1 and said == "memory: error: line 3: its owner holds its key already\n"
    records.write_text(f"{record('j')}\n\n{record('j')}\n")
    status, _, said = run_main(capsys, "import", path, str(records))
    assert status == 1 and said == (
        "memory: error: lines 1 and 3 give one owner the same key\n")


def test_frictions_of_the_first_hour_are_named(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = str(tmp_path / "m.db")
    status, _, said = run_main(capsys, "recall", path, "--user", "a", "--task", "t", "q",
                               "--offset", "-1")
    assert status == 2 and "must be from 0 to 10000" in said
    status, _, said = run_main(capsys, "import", path, str(tmp_path / "nosuch.jsonl"))
    assert status == 1 and "cannot read FILE, the file to import: No such file" in said
    status, _, said = run_main(capsys, "remember", path, "--user", "a", "--task", "t", "x",
                               "--embedder", "nosuch_module_here:Model")
    assert status == 1 and "no module named 'nosuch_module_here'" in said
    status, _, said = run_main(capsys, "remember", path, "--user", "a", "--task", "t", "x",
                               "--embedder", "json:NoSuchFactory")
    assert status == 1 and "module 'json' has no callable 'NoSuchFactory'" in said
    assert not os.path.exists(path)


def test_a_store_created_without_the_stems_extra_says_so(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memory, "_best_matching", lambda: "exact")
    path = str(tmp_path / "m.db")
    status, _, said = run_main(capsys, "remember", path, "--user", "a", "--task", "t", "x")
    assert status == 0 and "matching=exact" in said and "snowballstemmer" in said
    status, _, said = run_main(capsys, "remember", path, "--user", "a", "--task", "t", "y")
    assert status == 0 and said == ""  # said once, when it is created
