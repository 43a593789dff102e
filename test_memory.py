"""The core suite: SPEC Part 1, on the standard library alone.

    python3 -m unittest -v test_memory.py
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import typing
import unittest
from collections.abc import Callable
from typing import Any
from unittest import mock

import memory
from memory import (
    MAX_TEXT,
    MemoryInputError,
    MemoryStore,
    SchemaError,
    Scope,
    StoreError,
    fixed_clock,
    words,
)

HERE = pathlib.Path(__file__).resolve().parent
# The helpers the suites share (standard library only), as `python3 -m unittest` runs it.
sys.path.insert(0, str(HERE / "tests"))
from helpers import (  # noqa: E402
    TOUCHES_MEMORY_DATA,
    row_count,
    stamp_version,
    tables,
    user_version,
)

ALICE_TRIP = Scope("alice", "trip-planning")
ALICE_CONF = Scope("alice", "conference-trip")
BOB = Scope("bob", "onboarding")
INJECTION = "Robert'); DROP TABLE memories;--"
class StoreTestCase(unittest.TestCase):
    """A fresh file in a temporary folder, and a store on it closed after the test."""

    def setUp(self) -> None:
        folder = tempfile.TemporaryDirectory()
        self.addCleanup(folder.cleanup)
        self.folder = pathlib.Path(folder.name)
        self.path = self.folder / "memory.db"
        self.store = self.open()

    def open(self, path: pathlib.Path | None = None) -> MemoryStore:
        store = MemoryStore(path or self.path, clock=fixed_clock())
        self.addCleanup(store.close)
        return store

    def ids(self, results: list[memory.Recalled] | list[memory.Memory]) -> list[int]:
        return [result["id"] for result in results]


class TestNames(unittest.TestCase):
    def test_public_constants(self) -> None:
        self.assertIsInstance(memory.SCHEMA_VERSION, int)
        self.assertIsInstance(memory.SCHEMA, str)
        self.assertEqual(memory.IDENTIFIER.pattern, "[a-z0-9][a-z0-9-]{0,63}")
        self.assertEqual(memory.MAX_TEXT, 2000)
        self.assertEqual(memory.WORD.pattern, "[a-z0-9]+")
        self.assertIsInstance(memory.STOPWORDS, frozenset)
        self.assertTrue(issubclass(MemoryInputError, ValueError))
        self.assertTrue(issubclass(SchemaError, RuntimeError))

    def test_all_lists_the_api_and_every_other_public_name_is_known(self) -> None:
        """__all__ is what a user calls or implements (at most 33 names); the other public
        names are settings and tables tests and operators read, or the command's entry
        point."""
        defined = {name for name, value in vars(memory).items()
                   if not name.startswith("_") and not isinstance(value, type(memory))
                   and (not callable(value) or value.__module__ == "memory"
                        or typing.get_origin(value) is typing.Literal)
                   and name not in ("annotations", "UTC")}  # imported
        internal = {"BUSY_TIMEOUT_SECONDS", "INDEX_FROM", "LEVELS", "MATCHING", "MIGRATIONS",
                    "POSTINGS_PER_ROW", "PURGE_PER_WRITE", "RANKS", "RECORD_KEYS", "EMBED_BATCH",
                    "KEPT_BYTES", "RERANK_DEPTH", "ANN_FROM", "ANN_BYTES", "SCHEMA",
                    "SQLITE_LAYOUTS", "main"}
        self.assertLessEqual(len(memory.__all__), 33)
        self.assertEqual(sorted(memory.__all__), sorted(defined - internal))
        self.assertLessEqual(internal, defined)

    def test_the_module_stands_on_the_standard_library_alone(self) -> None:
        # -S: no site-packages, as for a copied memory.py on a bare Python.
        code = ("import sys, memory; print(memory._best_matching()); print(sorted("
                "{m.partition('.')[0] for m in sys.modules} - sys.stdlib_module_names"
                " - set(sys.builtin_module_names) - {'__main__'}))")
        done = subprocess.run([sys.executable, "-S", "-c", code], cwd=HERE, text=True,
                              capture_output=True, timeout=60)
        self.assertEqual((done.stdout, done.stderr), ("exact\n['memory']\n", ""))

    def test_the_module_names_nothing_of_the_framework_adapters(self) -> None:
        # They stand on memory.py; it knows none of them or their frameworks.
        import ast
        tree = ast.parse((HERE / "memory.py").read_text(encoding="utf-8"))
        imported = {alias.name.partition(".")[0] for node in ast.walk(tree)
                    if isinstance(node, ast.Import) for alias in node.names}
        imported |= {(node.module or "").partition(".")[0] for node in ast.walk(tree)
                     if isinstance(node, ast.ImportFrom)}
        named = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
        named |= {node.value for node in ast.walk(tree)
                  if isinstance(node, ast.Constant) and isinstance(node.value, str)}
        self.assertNotIn("memory_frameworks", imported | named)
        for adapter, framework in [("langgraph", "langgraph"), ("agents", "agents"),
                                   ("adk", "google")]:
            self.assertTrue((HERE / "memory_frameworks" / f"{adapter}.py").exists())
            self.assertNotIn(framework, imported)

    def test_memory_py_copied_alone_is_the_whole_sqlite_store_and_its_command(self) -> None:
        with tempfile.TemporaryDirectory() as folder:
            shutil.copy(HERE / "memory.py", folder)
            code = ("import memory; s = memory.MemoryStore('m.db');"
                    " s.remember(memory.Scope('alice', 't'), 'user', 'Alice is vegetarian.', 's');"
                    " print(s.recall(memory.Scope('alice', 'u'), 'vegetarian')[0]['text']);"
                    " s.close()")
            # -B: the folder holds what the store wrote, not the interpreter's bytecode
            # (written wherever PYTHONDONTWRITEBYTECODE is unset, as on a fresh machine).
            for command in ([sys.executable, "-S", "-B", "-c", code],
                            [sys.executable, "-S", "-B", "-m", "memory", "stats", "m.db"]):
                done = subprocess.run(command, cwd=folder, text=True, capture_output=True,
                                      timeout=60)
                self.assertEqual(done.returncode, 0, done.stderr)
                self.assertEqual(done.stderr, "")
            self.assertEqual(json.loads(done.stdout)["memories"], 1)
            self.assertEqual(sorted(os.listdir(folder))[:2], ["m.db", "memory.py"])
            # Without its module beside it, a postgresql:// URL says what it needs.
            done = subprocess.run([sys.executable, "-S", "-m", "memory", "stats",
                                   "postgresql:///x"], cwd=folder, text=True,
                                  capture_output=True, timeout=60)
            self.assertEqual((done.returncode, done.stderr), (1, (
                "memory: error: memory_postgres.py is not beside memory.py: copy it there,"
                " or pip install '.[postgres]' from a checkout, which installs both\n")))

    def test_stopwords_are_exactly_the_listed_ones(self) -> None:
        # SPEC calls these "42 words" but lists 37; the list is the contract.
        listed = (
            "a an and are as at be by did do does for from how i in is it my of on or that"
            " the this to was we what when where which who will with you your"
        )
        self.assertEqual(memory.STOPWORDS, frozenset(listed.split()))

    def test_words(self) -> None:
        self.assertEqual(words("Which hotel should I book, and is my meal vegetarian?"),
                         {"book", "hotel", "meal", "should", "vegetarian"})
        self.assertEqual(words("Likes LIKE like."), {"likes", "like"})
        self.assertEqual(words(""), set())
        self.assertEqual(words("café naïve"), {"caf", "na", "ve"})

    def test_fixed_clock_steps_from_its_start(self) -> None:
        clock = fixed_clock()
        self.assertEqual([clock(), clock(), clock()], [
            "2026-10-20T09:00:00+00:00", "2026-10-20T09:01:00+00:00", "2026-10-20T09:02:00+00:00"])
        other = fixed_clock("2030-01-01T00:00:00+00:00", step_seconds=1)
        self.assertEqual([other(), other()],
                         ["2030-01-01T00:00:00+00:00", "2030-01-01T00:00:01+00:00"])

    def test_system_clock_is_utc_to_the_second(self) -> None:
        self.assertRegex(memory.system_clock(), r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00$")

    def test_scope_accepts_identifiers(self) -> None:
        scope = Scope("alice", "trip-planning")
        self.assertEqual((scope.user, scope.task), ("alice", "trip-planning"))
        Scope("a" * 64, "0-")
        with self.assertRaises(AttributeError):
            scope.user = "bob"  # type: ignore[misc]

    def test_scope_rejects_non_identifiers(self) -> None:
        for user, task in [("", "t"), ("Alice", "t"), (None, "t"), ("alice", "trip planning"),
                           ("-alice", "t"), ("a" * 65, "t"), ("alice\n", "t"), ("alice", None),
                           ("alice", 7), (b"alice", "t"), ("alice", "")]:
            with self.subTest(user=user, task=task):
                with self.assertRaises(MemoryInputError):
                    Scope(user, task)  # type: ignore[arg-type]


class TestScopeRule(StoreTestCase):
    def test_restart_recalls_the_memory(self) -> None:
        memory_id = self.store.remember(ALICE_TRIP, "user", "Alice is vegetarian.", "t/turn-1")
        self.store.close()
        reopened = self.open()
        self.assertEqual(reopened.recall(ALICE_CONF, "vegetarian meal"), [{
            "id": memory_id, "level": "user", "text": "Alice is vegetarian.",
            "source": "t/turn-1", "created_at": "2026-10-20T09:00:00+00:00", "score": 1}])

    def test_another_users_matching_memory_is_never_returned(self) -> None:
        self.store.remember(ALICE_TRIP, "user", "Alice is vegetarian.", "s")
        self.store.remember(ALICE_TRIP, "task", "Vegetarian hotel breakfast.", "s")
        for bob in (BOB, Scope("bob", "trip-planning")):
            self.assertEqual(self.store.recall(bob, "vegetarian hotel breakfast"), [])
            self.assertEqual(self.store.count(bob), 0)
        bob_id = self.store.remember(BOB, "user", "Bob is vegetarian too.", "s")
        self.assertEqual(self.ids(self.store.recall(Scope("bob", "trip-planning"), "vegetarian")),
                         [bob_id])

    def test_task_memory_stays_in_its_task(self) -> None:
        user_id = self.store.remember(ALICE_TRIP, "user", "Alice likes river views.", "s")
        task_id = self.store.remember(ALICE_TRIP, "task", "Book the river hotel.", "s")
        self.assertEqual(self.ids(self.store.recall(ALICE_TRIP, "river")), [task_id, user_id])
        self.assertEqual(self.ids(self.store.recall(ALICE_CONF, "river")), [user_id])
        self.assertEqual(self.store.count(ALICE_TRIP), 2)
        self.assertEqual(self.store.count(ALICE_CONF), 1)

    def test_levels_are_stored_as_the_spec_says(self) -> None:
        self.store.remember(ALICE_TRIP, "user", "one", "s")
        self.store.remember(ALICE_TRIP, "task", "two", "s")
        rows = self.store.db.execute("SELECT text, task_id FROM memories ORDER BY id").fetchall()
        self.assertEqual(rows, [("one", None), ("two", "trip-planning")])

    def test_every_statement_touching_memories_carries_the_user_filter(self) -> None:
        statements: list[str] = []
        self.store.db.set_trace_callback(statements.append)
        self.store.remember(ALICE_TRIP, "user", "Alice is vegetarian.", "s")
        self.store.remember(ALICE_TRIP, "task", "Book the hotel.", "s")
        self.store.remember(ALICE_TRIP, "task", "Hotel is vegetarian friendly.", "s")
        self.store.remember_many([(BOB, "user", "Bob reads with a screen reader.", "s"),
                                  (ALICE_CONF, "task", "Conference hotel.", "s")] * 10)
        self.store.recall(ALICE_CONF, "vegetarian hotel reader")
        self.store.recall(ALICE_TRIP, "vegetarian hotel reader", limit=20)
        self.store.count(ALICE_TRIP)
        self.store.db.set_trace_callback(None)
        touching = [s for s in statements if TOUCHES_MEMORY_DATA.search(s)]
        self.assertGreaterEqual(len(touching), 5, statements)
        for statement in touching:
            self.assertIn("WHERE user_id = ", statement)
            self.assertRegex(statement, r"WHERE user_id = .*\btask_(id|key) (IS|=|IN) ")

    def test_every_statement_of_both_engines_has_its_postgres_twin(self) -> None:
        """Each statement the store runs on both engines carries a PostgreSQL text with as
        many placeholders and none of SQLite's own syntax, in each shape it has."""
        shared = {name: value for name, value in vars(memory).items()
                  if name.startswith("_SQL_")}
        self.assertGreaterEqual(len(shared), 30)
        for name, statement in shared.items():
            with self.subTest(name):
                self.assertIsInstance(statement, memory._Sql)
                self.assertEqual({dialect for dialect, _ in statement.forms}, {"postgresql"})
                self.assertIsNotNone(statement.form("postgresql"))
                for (_, shape), pg in statement.forms.items():
                    if shape == "each":  # one JSON list of the rows' values
                        self.assertEqual(pg.count("%s"), 1)
                        self.assertEqual(statement.count("?"), pg.count("item ->>"))
                    else:  # a text placeholder each, or a binary one (an array of them)
                        self.assertEqual(statement.count("?"), pg.count("%s") + pg.count("%b"))
                    for sqlite_only in ("?", "json_each", "NOT INDEXED", "INSERT OR", " IS ?"):
                        self.assertNotIn(sqlite_only, pg)
        with self.assertRaisesRegex(TypeError, "no form"):
            memory._sql("SELECT 1", postgresql_sideways="SELECT 1")

    def test_sql_in_text_is_stored_as_text(self) -> None:
        memory_id = self.store.remember(ALICE_TRIP, "user", INJECTION, "turn'--")
        self.assertEqual(self.store.recall(ALICE_TRIP, "robert drop table"), [{
            "id": memory_id, "level": "user", "text": INJECTION, "source": "turn'--",
            "created_at": "2026-10-20T09:00:00+00:00", "score": 3}])
        self.assertIn("memories", tables(self.path))
        self.assertEqual(row_count(self.path), 1)

    def test_values_reach_sql_only_through_placeholders(self) -> None:
        executed: list[str] = []
        real_connect = sqlite3.connect

        class Recording(sqlite3.Connection):
            def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
                executed.append(sql)
                return super().execute(sql, *args)

            def executemany(self, sql: str, *args: Any) -> sqlite3.Cursor:
                executed.append(sql)
                return super().executemany(sql, *args)

        def connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
            return real_connect(*args, factory=Recording, **kwargs)

        with mock.patch.object(sqlite3, "connect", connect):
            store = self.open(self.folder / "recorded.db")
        marker = "zqxmarker"
        scope = Scope("userzqx", "taskzqx")
        first = store.remember(scope, "task", f"text {marker}", f"source{marker}")
        store.remember_many([(scope, "user", f"more {marker}", f"source{marker}")] * 3)
        store.import_memories([{"user": "userzqx", "task": None, "level": "user",
                                "text": f"imported {marker}", "source": f"import{marker}",
                                "created_at": "2026-10-20T09:00:00+00:00"}])
        store.recall(scope, f"query {marker}")
        store.count(scope)
        store.memories(scope)
        store.export_user("userzqx")
        store.forget(scope, first)
        store.forget_source(scope, f"source{marker}")
        store.erase_user("userzqx")
        self.assertGreater(len(executed), 10)
        for sql in executed:
            self.assertNotIn("zqx", sql)


class TestRecall(StoreTestCase):
    def test_ties_go_to_the_newer_memory_and_zero_scores_are_dropped(self) -> None:
        older = self.store.remember(ALICE_TRIP, "user", "Lisbon trip in May.", "s")
        newer = self.store.remember(ALICE_TRIP, "task", "Lisbon hotel near river.", "s")
        self.store.remember(ALICE_TRIP, "user", "Alice is vegetarian.", "s")
        best = self.store.remember(ALICE_TRIP, "user", "Lisbon hotel in May.", "s")
        results = self.store.recall(ALICE_TRIP, "lisbon hotel may", limit=20)
        self.assertEqual(self.ids(results), [best, newer, older])
        self.assertEqual([r["score"] for r in results], [3, 2, 2])

    def test_results_have_exactly_the_contract_keys(self) -> None:
        self.store.remember(ALICE_TRIP, "task", "Book the Lisbon hotel.", "trip/turn-5")
        (result,) = self.store.recall(ALICE_TRIP, "hotel")
        self.assertEqual(list(result), ["id", "level", "text", "source", "created_at", "score"])
        self.assertEqual(result["level"], "task")

    def test_limit_bounds_the_results(self) -> None:
        ids = [self.store.remember(ALICE_TRIP, "user", f"hotel note {n}", "s") for n in range(25)]
        self.assertEqual(self.ids(self.store.recall(ALICE_TRIP, "hotel")), ids[::-1][:3])
        self.assertEqual(self.ids(self.store.recall(ALICE_TRIP, "hotel", limit=1)), ids[-1:])
        self.assertEqual(self.ids(self.store.recall(ALICE_TRIP, "hotel", limit=20)), ids[::-1][:20])

    def test_matching_is_literal(self) -> None:
        self.store.remember(ALICE_TRIP, "user", "Alice likes jazz.", "s")
        self.assertEqual(self.store.recall(ALICE_TRIP, "like"), [])
        self.assertEqual(self.store.recall(ALICE_TRIP, "what is it"), [])
        self.assertEqual(len(self.store.recall(ALICE_TRIP, "LIKES")), 1)

    def test_empty_store_and_empty_query(self) -> None:
        self.assertEqual(self.store.recall(ALICE_TRIP, "anything"), [])
        self.store.remember(ALICE_TRIP, "user", "something", "s")
        self.assertEqual(self.store.recall(ALICE_TRIP, ""), [])
        self.assertEqual(self.store.count(ALICE_TRIP), 1)


class TestValidation(StoreTestCase):
    def assertNothingWritten(self) -> None:
        self.assertEqual(self.store.count(ALICE_TRIP), 0)
        self.assertEqual(row_count(self.path), 0)

    def test_bad_writes_are_rejected_before_writing(self) -> None:
        bad: list[tuple[Any, Any, Any, Any]] = [
            (ALICE_TRIP, "global", "text", "s"),
            (ALICE_TRIP, "USER", "text", "s"),
            (ALICE_TRIP, None, "text", "s"),
            (ALICE_TRIP, "user", "", "s"),
            (ALICE_TRIP, "user", " \n\t ", "s"),
            (ALICE_TRIP, "user", "x" * (MAX_TEXT + 1), "s"),
            (ALICE_TRIP, "user", None, "s"),
            (ALICE_TRIP, "user", b"bytes", "s"),
            (ALICE_TRIP, "user", "nul\x00inside", "s"),
            (ALICE_TRIP, "user", "lone \ud800 surrogate", "s"),
            (ALICE_TRIP, "user", "text", "source\x00"),
            (ALICE_TRIP, "user", "text", "x" * (MAX_TEXT + 1)),
            (ALICE_TRIP, "user", "text", ""),
            (ALICE_TRIP, "user", "text", "   "),
            (ALICE_TRIP, "user", "text", None),
            ("alice/trip", "user", "text", "s"),
            (None, "user", "text", "s"),
            (("alice", "trip"), "user", "text", "s"),
        ]
        for args in bad:
            with self.subTest(args=repr(args)[:80]):
                with self.assertRaises(MemoryInputError):
                    self.store.remember(*args)
                self.assertNothingWritten()

    def test_longest_text_is_accepted(self) -> None:
        self.store.remember(ALICE_TRIP, "user", "x" * MAX_TEXT, "s")
        self.assertEqual(self.store.count(ALICE_TRIP), 1)

    def test_bad_limits_are_rejected(self) -> None:
        self.store.remember(ALICE_TRIP, "user", "hotel", "s")
        for limit in [0, 21, -1, True, False, 3.0, "3", None]:
            with self.subTest(limit=limit):
                with self.assertRaises(MemoryInputError):
                    self.store.recall(ALICE_TRIP, "hotel", limit=limit)  # type: ignore[arg-type]

    def test_bad_scope_and_query_on_reads(self) -> None:
        for call in (lambda: self.store.recall("alice", "hotel"),  # type: ignore[arg-type]
                     lambda: self.store.count(None),  # type: ignore[arg-type]
                     lambda: self.store.recall(ALICE_TRIP, None),  # type: ignore[arg-type]
                     lambda: self.store.recall(ALICE_TRIP, "\ud800"),
                     lambda: self.store.recall(ALICE_TRIP, "x" * (memory.MAX_QUERY + 1))):
            with self.assertRaises(MemoryInputError):
                call()


class TestOpening(unittest.TestCase):
    def setUp(self) -> None:
        folder = tempfile.TemporaryDirectory()
        self.addCleanup(folder.cleanup)
        self.path = pathlib.Path(folder.name) / "memory.db"

    def test_new_file_gets_the_schema_and_version(self) -> None:
        MemoryStore(self.path).close()
        self.assertIn("memories", tables(self.path))
        self.assertEqual(user_version(self.path), memory.SCHEMA_VERSION)

    def test_failed_creation_is_rolled_back_and_the_error_reraised(self) -> None:
        broken = memory.SCHEMA + ";\nCREATE TABLE broken (id INTEGER PRIMARY KEY,"
        closed: list[sqlite3.Connection] = []
        real_connect = sqlite3.connect

        def connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
            connection: sqlite3.Connection = real_connect(*args, **kwargs)
            closed.append(connection)
            return connection

        with mock.patch.object(memory, "SCHEMA", broken), \
                mock.patch.object(sqlite3, "connect", connect):
            with self.assertRaises(sqlite3.OperationalError):
                MemoryStore(self.path)
        self.assertEqual(tables(self.path), [])
        self.assertEqual(user_version(self.path), 0)
        for connection in closed:
            with self.assertRaises(sqlite3.ProgrammingError):
                connection.execute("SELECT 1")
        with MemoryStore(self.path) as store:
            store.remember(ALICE_TRIP, "user", "works now", "s")
            self.assertEqual(store.count(ALICE_TRIP), 1)

    def test_schema_is_the_newest_layout_to_the_letter(self) -> None:
        self.assertEqual(memory.SCHEMA.split(";\n"), list(memory.SQLITE_LAYOUTS[-1].statements))

    def test_unknown_version_is_refused(self) -> None:
        MemoryStore(self.path).close()
        for version in (memory.SCHEMA_VERSION + 1, 99, -1):
            with self.subTest(version=version):
                stamp_version(self.path, version)
                with self.assertRaisesRegex(SchemaError, f"database schema version {version}"):
                    MemoryStore(self.path)

    def test_foreign_database_at_version_zero_is_refused(self) -> None:
        with sqlite3.connect(self.path) as db:
            db.execute("CREATE TABLE notes (body TEXT)")
            db.execute("INSERT INTO notes VALUES ('keep me')")
        db.close()
        before = self.path.read_bytes()
        with self.assertRaises(SchemaError):
            MemoryStore(self.path)
        self.assertEqual(self.path.read_bytes(), before)
        self.assertEqual(tables(self.path), ["notes"])

    def test_empty_file_is_a_new_store(self) -> None:
        self.path.touch()
        with MemoryStore(self.path) as store:
            self.assertEqual(store.count(ALICE_TRIP), 0)


class TestStoreObject(StoreTestCase):
    def test_context_manager_closes(self) -> None:
        with MemoryStore(self.folder / "other.db") as store:
            store.remember(ALICE_TRIP, "user", "x", "s")
        with self.assertRaises(StoreError):
            store.count(ALICE_TRIP)

    def test_close_twice_is_harmless(self) -> None:
        self.store.close()
        self.store.close()

    def test_use_after_close_raises_a_clear_error(self) -> None:
        self.store.close()
        calls: list[Callable[[], object]] = [
                 lambda: self.store.remember(ALICE_TRIP, "user", "x", "s"),
                 lambda: self.store.recall(ALICE_TRIP, "x"),
                 lambda: self.store.count(ALICE_TRIP),
                 lambda: self.store.db]
        for call in calls:
            with self.assertRaisesRegex(StoreError, "closed") as caught:
                call()
            self.assertNotIsInstance(caught.exception, sqlite3.Error)


class TestDemo(unittest.TestCase):
    def test_demo_reproduces_the_recording(self) -> None:
        done = subprocess.run([sys.executable, str(HERE / "demo.py")], capture_output=True,
                              text=True, timeout=60, check=True, cwd=HERE)
        recorded = json.loads((HERE / "memory-result.json").read_text(encoding="utf-8"))
        self.assertEqual(json.loads(done.stdout), recorded)

    def test_recording_matches_the_shared_scenario(self) -> None:
        shared = HERE.parent / "shared" / "scenario"
        if not shared.is_dir():
            self.skipTest("no ../shared/scenario beside this checkout")
        for name in ("scenario.json", "memory-result.json"):
            self.assertEqual((HERE / name).read_bytes(), (shared / name).read_bytes())


if __name__ == "__main__":
    unittest.main()
