"""Matching rules (exact, stems) chosen per file, ranks (shared, idf) chosen per query,
reindexing, and the counts that give idf its N."""

from __future__ import annotations

import math
import pathlib
import sqlite3
import sys
import unicodedata
from typing import Any, cast

import pytest
from hypothesis import given
from hypothesis import strategies as st

import memory
from helpers import ALICE, BOB, WORD_RANKS, cli, digest, write_version_1
from memory import MemoryInputError, MemoryStore, Scope, StoreError, stems, words
from model import Memory, Model, index_problems, index_problems_at, is_cjk, model_stems, model_words


@pytest.mark.parametrize("text, expected", [
    ("Alice likes hiking", {"alic", "like", "hike"}),
    ("She liked the LIKES", {"like"}),
    ("Why not dinner before the concert?", {"dinner", "concert"}),
    ("café CAFÉS", {"cafe"}),
    ("İstanbul", {"istanbul"}),
    ("𝐇𝐞𝐥𝐥𝐨 ℌello ㎒ 🄰pple ™", {"hello", "mhz", "appl", "tm"}),
    ("हिन्दी भाषा", {"हिन्दी", "भाषा"}),
    ("ภาษาไทย", {"ภา", "าษ", "ษา", "าไ", "ไท", "ทย"}),
    ("Ελληνικά", {"ελληνικα"}),
    ("йод Ёж", {"йод", "ёж"}),
    ("Ｈｏｔｅｌ ﬁsh", {"hotel", "fish"}),
    ("東京都に住む", {"東京", "京都", "都に", "に住", "住む"}),
    ("서울 tower", {"서울", "tower"}),
    ("京abc 日", {"京", "abc", "日"}),
    ("x_z is a test", {"x", "z", "test"}),
])
@pytest.mark.stems
def test_the_stems_rule(text: str, expected: set[str]) -> None:
    assert stems(text) == expected == model_stems(text)


@pytest.mark.stems
@given(st.text(st.characters(max_codepoint=0x7f), max_size=60)
       | st.text(st.sampled_from("aeiouy sThe-_'.,1İé京ภ"), max_size=30) | st.text(max_size=30))
def test_the_stems_rule_as_the_model_has_it(text: str) -> None:
    """Any text, ASCII alone (stemmed at once) or not, has the model's words."""
    assert stems(text) == model_stems(text)


def test_the_cjk_ranges_are_exactly_the_named_scripts() -> None:
    # The store's regular expression against the model's reading of Unicode names, over
    # every code point this Python knows (a newer Unicode version may add some).
    part = memory._CJK_PART
    wrong = [hex(cp) for cp in range(sys.maxunicode + 1)
             if bool(part.match(chr(cp))) != is_cjk(chr(cp))]
    assert wrong == [], f"Unicode {unicodedata.unidata_version}: {wrong[:10]}"


def test_the_exact_rule_is_unchanged() -> None:
    assert words("Alice likes the café") == {"alice", "likes", "caf"}


@given(st.text(st.characters(max_codepoint=0x7f), max_size=60)
       | st.text(st.sampled_from("aZ09 _-'.\x00\u212aİé京"), max_size=30) | st.text(max_size=30))
def test_the_exact_rule_as_the_model_has_it(text: str) -> None:
    """Any text, ASCII alone (split at once) or not, has the model's words."""
    assert words(text) == model_words(text)


@pytest.mark.stems
def test_a_file_records_its_rule(target: str, tmp_path: pathlib.Path) -> None:
    path = target
    with MemoryStore(path, matching="stems") as store:
        store.remember(ALICE, "user", "Alice likes hiking.", "s")
        assert store.recall(ALICE, "she liked a hike")[0]["score"] == 2
    with MemoryStore(path) as store:  # None: the file's rule
        assert store.matching == "stems"
        assert store.recall(ALICE, "hiked")[0]["text"] == "Alice likes hiking."
    with pytest.raises(MemoryInputError, match="'exact'.*'stems'"):
        MemoryStore(path, matching="exact")
    with MemoryStore(tmp_path / "new.db") as store:
        assert store.matching == "exact"
    with pytest.raises(MemoryInputError, match="matching must be one of"):
        MemoryStore(tmp_path / "other.db", matching=cast(Any, "porter"))
    assert not (tmp_path / "other.db").exists()


@pytest.mark.stems
def test_a_stems_file_without_the_package_names_the_extra(tmp_path: pathlib.Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "m.db"
    MemoryStore(path, matching="stems").close()
    before = digest(path)
    memory._stemmer.cache_clear()
    monkeypatch.setitem(sys.modules, "snowballstemmer", None)  # import fails
    try:
        with pytest.raises(StoreError, match=r"pip install snowballstemmer PyStemmer"):
            MemoryStore(path)
        with pytest.raises(StoreError, match=r"pip install snowballstemmer PyStemmer"):
            MemoryStore(tmp_path / "new.db", matching="stems")
    finally:
        memory._stemmer.cache_clear()
    assert digest(path) == before
    assert not (tmp_path / "new.db").exists()  # the extra is asked for before the file


def fill(store: MemoryStore) -> None:
    store.remember_many([
        (ALICE, "user", "Alice likes green tea and jazz.", "s1"),
        (ALICE, "user", "Alice likes long walks.", "s2"),
        (ALICE, "task", "The hotel has a jazz bar.", "s3"),
        (ALICE, "user", "Alice likes tea.", "s4"),
        (Scope("alice", "work"), "task", "Jazz jazz jazz at the office party.", "s5"),
    ])


def test_idf_weighs_rare_words_more(target: str) -> None:
    with MemoryStore(target) as store:
        fill(store)
        visible = 4  # the work task's memory is not visible in the trip task
        results = store.recall(ALICE, "alice jazz", limit=5, rank="idf")
        idf = {w: math.log(1 + (visible - df + 0.5) / (df + 0.5))
               for w, df in {"alice": 3, "jazz": 2}.items()}
        assert [(r["text"], r["score"]) for r in results] == [
            ("Alice likes green tea and jazz.", idf["alice"] + idf["jazz"]),
            ("The hotel has a jazz bar.", idf["jazz"]),
            ("Alice likes tea.", idf["alice"]),
            ("Alice likes long walks.", idf["alice"]),
        ]
        assert isinstance(results[0]["score"], float)
        assert [r["score"] for r in store.recall(ALICE, "alice jazz", limit=5)] == [2, 1, 1, 1]
        with pytest.raises(MemoryInputError, match="rank must be one of"):
            store.recall(ALICE, "jazz", rank=cast(Any, "bm25"))


def test_another_users_memories_never_change_a_score(target: str) -> None:
    with MemoryStore(target) as store:
        fill(store)
        before = store.recall(ALICE, "alice likes jazz tea", limit=10, rank="idf")
        store.remember_many([(BOB, "user", f"Bob likes jazz {n}", "b") for n in range(50)])
        store.remember_many([(Scope("alice", "work"), "task", "Alice likes jazz.", "w")] * 5)
        assert store.recall(ALICE, "alice likes jazz tea", limit=10, rank="idf") == before


@pytest.mark.parametrize("rank", WORD_RANKS)
@pytest.mark.stems
def test_reindex_switches_the_rule_in_one_step(target: str, rank: memory.Rank) -> None:
    path = target
    with MemoryStore(path) as store:
        fill(store)
        store.remember(BOB, "user", "Bob liked hiking.", "b")
        model = Model("exact")
        model.memories = [Memory(m["id"], m["user"], m["task"], m["text"], m["source"],
                                 m["created_at"]) for u in ("alice", "bob")
                          for m in store.export_user(u)]
        progress: list[tuple[int, int]] = []
        store.reindex("stems", lambda done, users: progress.append((done, users)))
        assert progress == [(1, 2), (2, 2)]
        model.matching = "stems"
        assert index_problems_at(path) == []
        for scope in (ALICE, BOB, Scope("alice", "work")):
            for query in ("liking jazz", "hike", "alice walk tea"):
                assert store.recall(scope, query, 5, rank=rank) == \
                    model.recall(scope, query, 5, rank)
    with MemoryStore(path) as store:
        assert store.matching == "stems"
        store.reindex("exact")
        assert index_problems_at(path) == []


@pytest.mark.stems
def test_a_store_follows_a_reindex_made_by_another(target: str) -> None:
    path = target
    with MemoryStore(path) as first, MemoryStore(path) as second:
        first.remember(ALICE, "user", "Alice likes hiking.", "s")
        second.reindex("stems")
        first.remember(ALICE, "user", "Alice hiked again.", "s")  # indexed under stems
        assert first.matching == "stems"
        assert index_problems_at(path) == []
        assert len(first.recall(ALICE, "hike")) == 2


def test_version_2_file_upgrades_keeping_results_and_counting(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "v1.db"
    old = [Memory(n, user, task, text, "s", "2026-10-20T09:00:00+00:00") for n, (user, task, text)
           in enumerate([("alice", None, "Alice likes tea."), ("alice", "trip", "Hotel tea."),
                         ("bob", None, "Bob likes tea.")], start=1)]
    write_version_1(path, old)
    db = sqlite3.connect(path)  # a version-2 file, as the previous release left it
    memory._upgrade_to_2(memory._SqliteEngine(db, str(path)))
    db.execute("PRAGMA user_version = 2")
    db.commit()
    db.close()
    with MemoryStore(path) as store:
        assert store.matching == "exact"
        assert store.count(ALICE) == 2 and store.count(BOB) == 1
        assert index_problems(store.db) == []
        model = Model()
        model.memories = old
        assert store.recall(ALICE, "tea", 5, rank="idf") == model.recall(ALICE, "tea", 5, "idf")



@pytest.mark.stems
def test_command_line_reindex_and_rank(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "m.db"
    with MemoryStore(path) as store:
        fill(store)
    assert cli("recall", str(path), "--user", "alice", "--task", "trip", "liking").stdout == ""
    done = cli("reindex", str(path), "--matching", "stems")
    assert done.returncode == 0 and "matching=stems" in done.stdout, done.stderr
    found = cli("recall", str(path), "--user", "alice", "--task", "trip", "liking jazz",
                "--rank", "idf", "--limit", "1")
    assert found.returncode == 0 and "green tea and jazz" in found.stdout
    assert cli("reindex", str(path), "--matching", "porter").returncode == 2


@pytest.mark.stems
def test_every_word_the_stems_rule_yields_is_folded_and_stable() -> None:
    """Over every assigned code point: each word is case-folded and NFKC-stable, and a
    text normalized first (NFKC, NFC or NFD) has the same words."""
    wrong = []
    for code_point in range(sys.maxunicode + 1):
        character = chr(code_point)
        if unicodedata.category(character) in ("Cn", "Cs"):
            continue
        found = stems(character)
        unstable = [w for w in found
                    if w.casefold() != w or unicodedata.normalize("NFKC", w) != w]
        renormalized = [form for form in ("NFKC", "NFC", "NFD")
                        if stems(unicodedata.normalize(form, character)) != found]
        if unstable or renormalized:
            wrong.append((hex(code_point), unstable, renormalized))
    assert wrong == [], f"Unicode {unicodedata.unidata_version}: {wrong[:10]}"


@pytest.mark.stems
def test_words_keep_their_marks_and_drop_latin_ones_in_recall(target: str) -> None:
    with MemoryStore(target, matching="stems") as store:
        istanbul = store.remember(ALICE, "user", "Flight to İstanbul on Friday.", "s")
        cafe = store.remember(ALICE, "user", "The café by the harbour.", "s")
        bold = store.remember(ALICE, "user", "𝐇𝐞𝐥𝐥𝐨 from the math alphabet.", "s")
        hindi = store.remember(ALICE, "user", "हिन्दी भाषा", "s")
        thai = store.remember(ALICE, "user", "ภาษาไทย", "s")
        assert [r["id"] for r in store.recall(ALICE, "istanbul")] == [istanbul]
        assert [r["id"] for r in store.recall(ALICE, "cafe")] == [cafe]
        assert [r["id"] for r in store.recall(ALICE, "hello")] == [bold]
        assert store.recall(ALICE, "हाथ") == []  # no longer a shared letter
        assert [r["id"] for r in store.recall(ALICE, "भाषा")] == [hindi]
        assert [r["id"] for r in store.recall(ALICE, "ภาษา")] == [thai]
    assert index_problems_at(target) == []


@pytest.mark.stems
def test_a_file_indexed_by_the_first_stems_rule_is_reindexed_when_opened_to_write(
        target: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    with monkeypatch.context() as first_release:  # as the first version wrote its files
        first_release.setitem(memory._RECORDED, "stems", "stems")
        with MemoryStore(target, matching="stems") as store:
            old = store.remember(ALICE, "user", "𝐇𝐞𝐥𝐥𝐨 and İstanbul", "s")
    with MemoryStore(target, read_only=True) as reader:  # read by the rule it was built by
        assert reader.matching == "stems"
        assert [r["id"] for r in reader.recall(ALICE, "stanbul")] == [old]
        assert reader.recall(ALICE, "istanbul") == []
    with caplog.at_level("INFO", logger="memory"), MemoryStore(target) as writer:
        assert writer.matching == "stems"
        assert [r["id"] for r in writer.recall(ALICE, "istanbul hello")] == [old]
        assert writer.recall(ALICE, "stanbul") == []
    assert any("earlier version of matching=stems: reindexing" in r.getMessage()
               for r in caplog.records)
    assert index_problems_at(target) == []
    with MemoryStore(target, read_only=True) as reader:
        assert [r["id"] for r in reader.recall(ALICE, "istanbul")] == [old]


@pytest.mark.stems
def test_recommended_opens_a_store_of_every_lever_on_both_engines(target: str) -> None:
    assert memory.RECOMMENDED == {"matching": "stems", "rank": "hybrid", "context": True}
    with MemoryStore(target, **memory.RECOMMENDED) as store:
        kept, answer = store.remember_many([
            (ALICE, "user", "Alice never eats meat: she is vegetarian.", "chat/1"),
            (ALICE, "user", "Since last May.", "chat/2")])
        store.remember(ALICE, "user", "Alice likes the window seat.", "notes")
        assert (store.matching, store.rank, store.context) == ("stems", "hybrid", True)
        assert [r["id"] for r in store.recall(ALICE, "vegetarians?")] == [kept, answer]
    with MemoryStore(target, **memory.RECOMMENDED) as store:  # reopened, as it is
        stats = store.stats()
        assert (stats["matching"], stats["rank"], stats["context"]) == ("stems", "hybrid", True)


@pytest.mark.stems
def test_the_commands_create_a_store_with_the_recommended_rule(tmp_path: pathlib.Path) -> None:
    created, existing = tmp_path / "new.db", tmp_path / "old.db"
    MemoryStore(existing).close()  # the exact rule: a store that exists keeps its own
    for path in (created, existing):
        done = cli("remember", str(path), "--user", "alice", "--task", "t", "--level", "user",
                   "Alice is vegetarian.", "--source", "s")
        assert done.returncode == 0, done.stderr
    with MemoryStore(created, read_only=True) as store:
        assert store.matching == "stems"
    with MemoryStore(existing, read_only=True) as store:
        assert store.matching == "exact"


@pytest.mark.stems
def test_a_file_of_the_second_stems_rule_keeps_its_results_until_reindexed(
        target: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The third version drops NLTK's stopwords ("before", "she", "not", ...): a file the
    second built still finds them, written to and reopened, until `reindex` moves it."""
    with monkeypatch.context() as second_release:  # as the previous release wrote its files
        second_release.setitem(memory._RECORDED, "stems", "stems-2")
        with MemoryStore(target, matching="stems") as store:
            old = store.remember(ALICE, "user", "She booked dinner before the concert.", "s")
    assert memory._stems_second("She was not before") == {"she", "not", "befor"}
    for _ in range(2):  # opened to write, then written to: still the second version
        with MemoryStore(target, rank="idf") as store:
            assert [r["id"] for r in store.recall(ALICE, "she before")] == [old]
            newer = store.remember(ALICE, "user", "Not before noon, she said.", "s")
            assert [r["id"] for r in store.recall(ALICE, "not")] == [newer]
            store.forget(ALICE, newer)
        assert index_problems_at(target) == []
    with MemoryStore(target) as store:
        assert store.stats()["matching_version"] == "stems-2"
        assert store.stats()["matching_outdated"] is True
        store.reindex("stems")
        assert (store.stats()["matching_version"], store.stats()["matching_outdated"]) == (
            "stems-4", False)
        assert store.recall(ALICE, "she before") == []
        assert [r["id"] for r in store.recall(ALICE, "she booked dinner")] == [old]
    with MemoryStore(target, read_only=True) as reader:
        assert reader.recall(ALICE, "before") == []
    assert index_problems_at(target) == []


@pytest.mark.stems
def test_the_stems_rule_finds_a_memory_by_the_words_of_its_date(target: str) -> None:
    """Its fourth version indexes a memory's day, month name and year (of its created_at
    as written, in its own offset) with its words; a query's words are its own alone."""
    with MemoryStore(target, matching="stems", rank="idf",
                     clock=lambda: "2023-05-08T13:56:00+00:00") as store:
        may = store.remember(ALICE, "user", "Alice said the pottery class starts.", "c/1")
        store.clock = lambda: "2023-06-01T04:30:00+00:00"
        june = store.remember(ALICE, "user", "Alice said she loves the pottery.", "c/2")
        (late,) = store.import_memories([{
            "id": 1, "user": "alice", "task": None, "level": "user", "text": "Alice said yes.",
            "source": "c/3", "created_at": "2023-05-31T23:30:00-05:00", "expires_at": None}])
        assert store.stats()["matching_version"] == "stems-4"
        assert [r["id"] for r in store.recall(ALICE, "What did Alice say in May 2023?")] \
            == [late, may, june]  # june holds "2023" and the words, not "may"
        assert [(r["id"], sorted(r["why"]["matched"])) for r in store.recall(
            ALICE, "on 8 May", explain=True)] == [(may, ["8", "may"]), (late, ["may"])]
        assert [r["id"] for r in store.recall(ALICE, "june 1")] == [june]
        assert [r["id"] for r in store.recall(ALICE, "31 may")] == [late, may]
        assert store.recall(ALICE, "2022") == []
        store.forget(ALICE, may)
        assert [r["id"] for r in store.recall(ALICE, "8 may")] == [late]
    assert index_problems_at(target) == []


@pytest.mark.stems
def test_a_file_of_the_third_stems_rule_keeps_its_results_until_reindexed(
        target: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file the third version built holds no date's words, written to and reopened,
    until `reindex` moves it to the fourth."""
    clock = lambda: "2023-05-08T13:56:00+00:00"  # noqa: E731
    with monkeypatch.context() as third_release:
        third_release.setitem(memory._RECORDED, "stems", "stems-3")
        with MemoryStore(target, matching="stems", clock=clock) as store:
            old = store.remember(ALICE, "user", "Alice started the pottery class.", "c/1")
    for _ in range(2):
        with MemoryStore(target, clock=clock) as store:
            assert store.recall(ALICE, "may 2023") == []
            newer = store.remember(ALICE, "user", "Alice liked it.", "c/2")
            assert store.recall(ALICE, "may 2023") == []
            store.forget(ALICE, newer)
        assert index_problems_at(target) == []
    with MemoryStore(target, clock=clock) as store:
        assert (store.stats()["matching_version"], store.stats()["matching_outdated"]) == (
            "stems-3", True)
        store.reindex("stems")
        assert store.stats()["matching_version"] == "stems-4"
        assert [r["id"] for r in store.recall(ALICE, "may 2023")] == [old]
    assert index_problems_at(target) == []


@pytest.mark.stems
@pytest.mark.parametrize("newest", ["stems-2", "stems-3", "stems-4"])
def test_code_that_knows_only_earlier_stems_rules_refuses_a_file_of_a_later_one(
        target: str, monkeypatch: pytest.MonkeyPatch, newest: str) -> None:
    """As an earlier release would: a recorded rule it does not know is a SchemaError,
    so it never writes its own words into a later rule's index."""
    monkeypatch.setitem(memory._RECORDED, "stems", newest)
    MemoryStore(target, matching="stems").close()
    monkeypatch.delitem(memory._RULES, newest)  # that earlier release's table of rules
    with pytest.raises(memory.SchemaError, match="matching rule this code does not know"):
        MemoryStore(target)
