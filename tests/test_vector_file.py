"""The vectors file beside an SQLite store (PATH-vectors): a second copy of the sealed
blocks that a scope past the kept budget reads at every recall by meaning. It gives what
the database gives, holds nothing a deletion took, is private to the store's owner, and a
file that is not right is read around, never trusted."""

from __future__ import annotations

import array
import hashlib
import logging
import os
import pathlib
import zlib
from collections.abc import Sequence
from typing import Any

import pytest

import memory
from helpers import ALICE, ALICE_WORK, BOB, SetClock
from memory import MemoryStore

pytest.importorskip("numpy")

DIMENSIONS = 16
QUERIES = ["note 3", "note 40", "a note of bob", "note 77 of work"]


class Unique:
    """Each text's own vector, from its digest: no two memories share their bytes."""

    name, dimensions = "unique-1", DIMENSIONS

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [[b - 127.5 for b in hashlib.sha256(text.encode()).digest()[:DIMENSIONS]]
                for text in texts]


def vector_bytes(text: str) -> bytes:
    return array.array("f", Unique().embed([text])[0]).tobytes()


@pytest.fixture
def path(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, clock: SetClock) -> str:
    """A store of three owners' notes, sealed in blocks of 4 vectors, every scope past a
    budget of one byte."""
    monkeypatch.setattr(memory, "_SEALED_BLOCK_BYTES", 4 * 4 * DIMENSIONS)
    where = str(tmp_path / "m.db")
    with MemoryStore(where, embedder=Unique(), clock=clock) as store:
        store.remember_many([(scope, "user" if n % 5 else "task", f"note {n} of {scope.task}",
                              "chat") for n in range(90)
                             for scope in [(ALICE, ALICE_WORK, BOB)[n % 3]]])
    monkeypatch.setattr(memory, "KEPT_BYTES", 1)
    return where


def recalled(store: MemoryStore) -> list[list[tuple[int, float]]]:
    return [[(r["id"], r["score"]) for r in store.recall(scope, query, 10, rank="meaning")]
            for scope in (ALICE, ALICE_WORK, BOB) for query in QUERIES]


def from_the_database(path: str, monkeypatch: pytest.MonkeyPatch) -> list[list[Any]]:
    with monkeypatch.context() as patched:
        patched.setattr(memory._SqliteEngine, "vector_file", lambda self, dimensions: None)
        with MemoryStore(path, embedder=Unique()) as store:
            return recalled(store)


def test_past_the_budget_the_file_gives_what_the_database_gives(
        path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    expected = from_the_database(path, monkeypatch)
    assert not os.path.exists(f"{path}-vectors")
    with MemoryStore(path, embedder=Unique()) as store:
        assert recalled(store) == expected  # the file made as the blocks are read
        statements: list[str] = []
        store.db.set_trace_callback(statements.append)
        assert recalled(store) == expected  # and read from it
        store.db.set_trace_callback(None)
    held = os.stat(f"{path}-vectors")
    assert held.st_mode & 0o777 == 0o600 and held.st_size > 0
    assert not [s for s in statements if s.startswith("SELECT vectors FROM")]
    assert [s for s in statements if s.startswith("SELECT first_id, last_id, after_id, ids")]
    # Within the budget, nothing is written beside the store.
    monkeypatch.setattr(memory, "KEPT_BYTES", 2**30)
    os.remove(f"{path}-vectors")
    with MemoryStore(path, embedder=Unique()) as store:
        assert recalled(store) == expected
    assert not os.path.exists(f"{path}-vectors")


def test_a_deletion_zeroes_what_the_file_holds_of_it_and_compact_empties_it(
        path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with MemoryStore(path, embedder=Unique()) as store, \
            MemoryStore(path, embedder=Unique()) as other:
        recalled(store)
        filed = pathlib.Path(f"{path}-vectors")
        gone = store.memories(ALICE)[2]
        assert vector_bytes(gone["text"]) in filed.read_bytes()
        other.forget(ALICE, gone["id"])  # another store on the file: its own descriptor
        assert vector_bytes(gone["text"]) not in filed.read_bytes()
        assert recalled(store) == from_the_database(path, monkeypatch)
        bobs = [m["text"] for m in store.memories(BOB)]
        assert any(vector_bytes(text) in filed.read_bytes() for text in bobs)
        store.erase_user("bob")
        assert not any(vector_bytes(text) in filed.read_bytes() for text in bobs)
        store.compact()
        assert filed.stat().st_size == 0
        assert recalled(store) == from_the_database(path, monkeypatch)


def test_a_link_a_file_of_another_owner_or_one_others_may_read_is_refused(
        path: str, monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path,
        caplog: pytest.LogCaptureFixture) -> None:
    expected = from_the_database(path, monkeypatch)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_bytes(b"")
    os.chmod(elsewhere, 0o600)  # a file the store would take, but for the link
    os.symlink(elsewhere, f"{path}-vectors")
    with caplog.at_level(logging.WARNING, logger="memory"), \
            MemoryStore(path, embedder=Unique()) as store:
        assert recalled(store) == expected
    assert elsewhere.read_bytes() == b""
    assert "the vectors file beside the store is refused" in caplog.text
    os.remove(f"{path}-vectors")
    spoils: list[Any] = [lambda f: os.chmod(f, 0o644)]
    if os.geteuid() == 0:  # only root gives a file away
        spoils.append(lambda f: os.chown(f, 4321, 4321))
    for spoil in spoils:
        with MemoryStore(path, embedder=Unique()) as store:
            recalled(store)
        spoil(f"{path}-vectors")
        size = os.path.getsize(f"{path}-vectors")
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="memory"), \
                MemoryStore(path, embedder=Unique()) as store:
            assert recalled(store) == expected
        assert "refused" in caplog.text and os.path.getsize(f"{path}-vectors") == size
        os.remove(f"{path}-vectors")


def test_a_cut_or_corrupt_file_is_read_around(
        path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    expected = from_the_database(path, monkeypatch)
    with MemoryStore(path, embedder=Unique()) as store:
        recalled(store)
    filed = pathlib.Path(f"{path}-vectors")
    whole = filed.read_bytes()
    header, record = memory._VECTORS_FILE_HEADER.size, memory._VECTORS_RECORD.size
    first = header + record  # the first record's payload: 4 ids, 4 norms, 4 vectors
    ids, vectors = first, first + 4 * 12
    # Another block's ids in the first record, its CRC made right: not the database's.
    other = whole[:first] + (whole[ids:ids + 32][::-1]) + whole[ids + 32:]
    mark, count, begins, ends, length, _ = memory._VECTORS_RECORD.unpack(
        other[header:first])
    crc = zlib.crc32(other[first:first + length])
    other = other[:header] + memory._VECTORS_RECORD.pack(
        mark, count, begins, ends, length, crc) + other[first:]
    spoiled = [whole[: len(whole) // 2 + 7],  # cut inside a record
               whole[:header] + b"\xff" * record + whole[header + record:],  # a record's header
               whole[:vectors + 3] + b"\x7f" * 20 + whole[vectors + 23:],  # its vectors
               other,
               b"\x00" * header + whole[header:]]  # the file's header
    for bytes_ in spoiled:
        filed.write_bytes(bytes_)
        with MemoryStore(path, embedder=Unique()) as store:
            assert recalled(store) == expected
            assert recalled(store) == expected  # with what the first recall added
        # Mended as it was read: the next store reads every block from the file.
        with MemoryStore(path, embedder=Unique()) as store:
            statements: list[str] = []
            store.db.set_trace_callback(statements.append)
            assert recalled(store) == expected
            store.db.set_trace_callback(None)
        assert not [s for s in statements if s.startswith("SELECT vectors FROM")]


def test_a_scope_its_count_puts_past_the_budget_whose_vectors_fit_is_kept_whole(
        path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Most of its memories have no vector: the blocks read from the file are kept, each
    in its own buffer, never in the one a recall past the budget reuses."""
    def found(store: MemoryStore) -> list[list[tuple[int, float]]]:
        return [[(r["id"], r["score"]) for r in store.recall(ALICE, query, 10,
                                                             rank="meaning")]
                for query in QUERIES]

    with MemoryStore(path, embedder=Unique()) as store:
        store.remember_many([{"scope": ALICE, "level": "user", "text": f"plain {n}",
                              "source": "chat", "embed": False} for n in range(400)])
        expected = found(store)
    # Its count says 30 KiB of vectors; they take about 5.
    monkeypatch.setattr(memory, "KEPT_BYTES", 16 * 1024)
    with MemoryStore(path, embedder=Unique()) as store:
        assert found(store) == expected  # the blocks from the database, into the file
    with MemoryStore(path, embedder=Unique()) as store:
        assert found(store) == expected  # from the file, kept
        assert found(store) == expected  # from the kept copy


class Other(Unique):
    """Another model of the same dimensions: the same ids, other vectors."""

    name = "unique-2"

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [[-x for x in vector] for vector in super().embed(texts)]


def test_a_reindex_to_another_model_is_not_read_from_the_old_file(
        path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with MemoryStore(path, embedder=Unique()) as store:
        recalled(store)
    with monkeypatch.context() as patched:  # as a process that cannot open the file would
        patched.setattr(memory._SqliteEngine, "zero_vector_blocks", lambda self, firsts: None)
        with MemoryStore(path) as plain:
            plain.reindex(embedder=Other())
    with MemoryStore(path, embedder=Other()) as store:
        found = recalled(store)
    with monkeypatch.context() as patched:
        patched.setattr(memory._SqliteEngine, "vector_file", lambda self, dimensions: None)
        with MemoryStore(path, embedder=Other()) as store:
            assert found == recalled(store)


def test_a_read_only_store_writes_no_file_and_a_backup_is_another_store(
        path: str, monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path) -> None:
    expected = from_the_database(path, monkeypatch)
    with MemoryStore(path, embedder=Unique(), read_only=True) as store:
        assert recalled(store) == expected
    assert not os.path.exists(f"{path}-vectors")
    with MemoryStore(path, embedder=Unique()) as store:
        recalled(store)
        store.backup(str(tmp_path / "copy.db"))
    # Beside the copy, the store's file is not the copy's: made again for it.
    (tmp_path / "copy.db-vectors").write_bytes(pathlib.Path(f"{path}-vectors").read_bytes())
    os.chmod(tmp_path / "copy.db-vectors", 0o600)
    with MemoryStore(str(tmp_path / "copy.db"), embedder=Unique()) as copy:
        assert recalled(copy) == expected
    assert (tmp_path / "copy.db-vectors").read_bytes()[:memory._VECTORS_FILE_HEADER.size] \
        != pathlib.Path(f"{path}-vectors").read_bytes()[:memory._VECTORS_FILE_HEADER.size]


def test_a_file_that_takes_no_more_is_read_around_and_one_that_cannot_be_zeroed_stops_the_deletion(
        path: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    expected = from_the_database(path, monkeypatch)

    def full(*args: Any) -> None:
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as patched:
        patched.setattr(memory._VectorFile, "_append", full)
        with caplog.at_level(logging.WARNING, logger="memory"), \
                MemoryStore(path, embedder=Unique()) as store:
            assert recalled(store) == expected
            assert recalled(store) == expected
    assert caplog.text.count("takes no more blocks (No space left on device)") == 1
    with MemoryStore(path, embedder=Unique()) as store:
        recalled(store)  # the file holds the blocks now
        kept = store.memories(ALICE)[2]
        with monkeypatch.context() as patched:
            patched.setattr(memory._VectorFile, "_zero", full)
            with pytest.raises(memory.StoreError, match="could not be zeroed"):
                store.forget(ALICE, kept["id"])
        assert store.get(ALICE, kept["id"]) is not None
        assert vector_bytes(kept["text"]) in pathlib.Path(f"{path}-vectors").read_bytes()
        assert recalled(store) == expected
