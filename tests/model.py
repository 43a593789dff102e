"""The model: a plain in-memory oracle of the recall rule, with its own copy of both word
rules and both ranks, and the hypothesis strategies the property tests draw from. The
store is held to it. Not a test module."""

from __future__ import annotations

import array
import collections
import contextlib
import dataclasses
import functools
import importlib
import importlib.util
import itertools
import math
import re
import sqlite3
import unicodedata
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from hypothesis import strategies as st

import memory
from helpers import WORD_RANKS
from memory import MATCHING, MAX_TEXT, Matching, Scope
from pg_server import APP_ROLE

# The matching rules this environment can run: `stems` needs the `stems` extra.
RULES_HERE = tuple(rule for rule in MATCHING
                   if rule != "stems" or importlib.util.find_spec("snowballstemmer"))

MODEL_STOPWORDS = frozenset(
    "a an and are as at be by did do does for from how i in is it my of on or that"
    " the this to was we what when where which who will with you your".split()
)


# The stems rule's from its third version: NLTK's English stopwords, the entries with an
# apostrophe left out (no word of the rule holds one), written out as NLTK lists them.
MODEL_STEMS_STOPWORDS = frozenset("""
i me my myself we our ours ourselves you your yours yourself yourselves he him his himself
she her hers herself it its itself they them their theirs themselves what which who whom
this that these those am is are was were be been being have has had having do does did
doing a an the and but if or because as until while of at by for with about against
between into through during before after above below to from up down in out on off over
under again further then once here there when where why how all any both each few more
most other some such no nor not only own same so than too very s t can will just don
should now d ll m o re ve y ain aren couldn didn doesn hadn hasn haven isn ma mightn
mustn needn shan shouldn wasn weren won wouldn""".split())


def model_words(text: str) -> set[str]:
    return set(re.findall("[a-z0-9]+", text.lower())) - MODEL_STOPWORDS


@functools.cache
def stem() -> Callable[[str], str]:
    """Snowball's English stemmer, imported only by a test of the stems rule: without the
    `stems` extra, the tests that need it skip (see conftest.py)."""
    snowball = importlib.import_module("snowballstemmer")
    stem_word: Callable[[str], str] = snowball.stemmer("english").stemWord
    return stem_word
CJK_NAMES = ("CJK UNIFIED IDEOGRAPH", "CJK COMPATIBILITY IDEOGRAPH", "HIRAGANA", "KATAKANA",
             "HANGUL", "HALFWIDTH KATAKANA", "HALFWIDTH HANGUL")


def is_cjk(character: str) -> bool:
    """Han, Hiragana, Katakana or Hangul, told by the character's Unicode name."""
    return character.isalnum() and unicodedata.name(character, "").startswith(CJK_NAMES)


# Blocks the model reads by code point: scripts written without spaces, split into
# pairs as CJK is (Thai, Lao, Myanmar and its extensions, Khmer and its symbols), and the
# Latin and Greek letters whose nonspacing marks the rule drops.
UNSPACED_BLOCKS = ((0x0E00, 0x0E7F), (0x0E80, 0x0EFF), (0x1000, 0x109F), (0x1780, 0x17FF),
                   (0x19E0, 0x19FF), (0xA9E0, 0xA9FF), (0xAA60, 0xAA7F))
FOLDED_BLOCKS = ((0x0000, 0x02AF), (0x0370, 0x03FF), (0x1D00, 0x1DBF), (0x1E00, 0x1FFF),
                 (0x2C60, 0x2C7F), (0xA720, 0xA7FF), (0xAB30, 0xAB6F))


def in_blocks(character: str, blocks: tuple[tuple[int, int], ...]) -> bool:
    return any(low <= ord(character) <= high for low, high in blocks)


def is_paired(character: str) -> bool:
    return is_cjk(character) or in_blocks(character, UNSPACED_BLOCKS)


def without_latin_and_greek_marks(run: str) -> str:
    kept, after_folded = [], False
    for character in unicodedata.normalize("NFD", run):
        if unicodedata.category(character) == "Mn" and after_folded:
            continue
        kept.append(character)
        after_folded = in_blocks(character, FOLDED_BLOCKS)
    return unicodedata.normalize("NFC", "".join(kept))


def model_stems(text: str, stopwords: frozenset[str] = MODEL_STEMS_STOPWORDS) -> set[str]:
    """The stems rule, read one character at a time: letters, digits and marks make
    words; Latin and Greek marks go; paired scripts split in two-character words."""
    found: set[str] = set()
    folded = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold())
    in_word = [c.isalnum() or unicodedata.category(c).startswith("M") for c in folded]
    for wordy, run in itertools.groupby(zip(folded, in_word, strict=True), key=lambda p: p[1]):
        if not wordy:
            continue
        word = without_latin_and_greek_marks("".join(c for c, _ in run))
        for paired, characters in itertools.groupby(word, key=is_paired):
            part = "".join(characters)
            if paired and len(part) == 1:
                found.add(part)
            elif paired:
                found.update(part[i] + part[i + 1] for i in range(len(part) - 1))
            elif part not in stopwords:
                found.add(stem()(part))
    return found


# By the rule's name, and by the name a file records (with the stems rule's version).
MODEL_RULES: dict[str, Callable[[str], set[str]]] = {
    "exact": model_words, "stems": model_stems, "stems-3": model_stems, "stems-4": model_stems,
    "stems-2": functools.partial(model_stems, stopwords=MODEL_STOPWORDS)}
# The rules under which a memory also holds the words of its date: the stems rule's
# newest version, by its name and as a file records it.
MODEL_DATED = frozenset({"stems", "stems-4"})
MONTHS = "January February March April May June July August September October November" \
    " December"


def memory_terms(rule: str, text: str, created_at: str) -> set[str]:
    """A memory's words under `rule`: its text's, and under a dated rule those of its
    created_at's day, month name and year too, as written."""
    terms = MODEL_RULES[rule]
    if rule not in MODEL_DATED:
        return terms(text)
    when = datetime.fromisoformat(created_at)
    return terms(text) | terms(f"{when.day} {MONTHS.split()[when.month - 1]} {when.year}")


def utc(reading: str) -> datetime:
    return datetime.fromisoformat(reading).astimezone(UTC)


@dataclasses.dataclass
class Memory:
    id: int
    user: str
    task: str | None
    text: str
    source: str
    created_at: str
    expires_at: datetime | None = None

    def visible_in(self, scope: Scope) -> bool:
        return self.user == scope.user and (self.task is None or self.task == scope.task)

    def live_at(self, now: str) -> bool:
        return self.expires_at is None or utc(now) < self.expires_at

    def as_record(self) -> dict[str, Any]:
        expires = None if self.expires_at is None else self.expires_at.isoformat(
            timespec="microseconds")
        return {"id": self.id, "user": self.user, "task": self.task,
                "level": "user" if self.task is None else "task", "text": self.text,
                "source": self.source, "created_at": self.created_at, "expires_at": expires}

    def as_result(self, score: float) -> dict[str, Any]:
        return {"id": self.id, "level": "user" if self.task is None else "task",
                "text": self.text, "source": self.source, "created_at": self.created_at,
                "score": score}


def conversation(m: Memory) -> str:
    """The conversation of a memory's source: what comes before its last slash ("": none)."""
    return m.source[:m.source.rfind("/")] if "/" in m.source else ""


# The weights of the two neighbours before a memory and the two after it, the nearest
# first (a test sets others, and the store's alike, to try weights that fall with distance).
CONTEXT_WEIGHTS = {"before": (0.6, 0.6), "after": (0.4, 0.4)}


def neighbours(m: Memory, talks: dict[str, list[Memory]]) -> list[tuple[Memory, float]]:
    """The memories that lend `m` a share of their score under context, in id order,
    with their weights: of the visible ones in m's conversation (`talks`, each
    conversation's live memories in id order), the two just before it (0.6 each) and the
    two just after it (0.4 each)."""
    if not conversation(m):
        return []
    talk = talks[conversation(m)]
    at = talk.index(m)
    before, after = CONTEXT_WEIGHTS["before"], CONTEXT_WEIGHTS["after"]
    return ([(talk[at - d], before[d - 1]) for d in (2, 1) if at - d >= 0]
            + [(talk[at + d], after[d - 1]) for d in (1, 2) if at + d < len(talk)])


class Model:
    """Memories in a list. `now` is the clock's last reading: what is live is decided at it."""

    def __init__(self, matching: Matching = "exact") -> None:
        self.memories: list[Memory] = []
        self.matching = matching
        self.now = "2026-10-20T09:00:00+00:00"

    def visible(self, scope: Scope) -> list[Memory]:
        return [m for m in self.memories if m.visible_in(scope) and m.live_at(self.now)]

    def purge_before_writing(self, user: str, task: str | None, most: int) -> None:
        """What a write does first: the oldest-expiring expired memories of its scope go."""
        due = sorted((m for m in self.memories if m.user == user and m.task in (None, task)
                      and not m.live_at(self.now)), key=lambda m: (m.expires_at, m.id))
        gone = {m.id for m in due[:most]}
        self.memories = [m for m in self.memories if m.id not in gone]

    def recall(self, scope: Scope, query: str, limit: int, rank: str = "shared",
               context: bool = False) -> list[dict[str, Any]]:
        terms = MODEL_RULES[self.matching]
        wanted = terms(query)
        visible = sorted(self.visible(scope), key=lambda m: m.id)
        held = {m.id: memory_terms(self.matching, m.text, m.created_at) for m in visible}

        @functools.cache
        def idf(word: str) -> float:
            df = sum(word in words for words in held.values())
            return math.log(1 + (len(visible) - df + 0.5) / (df + 0.5))

        own: dict[int, float] = {}
        for m in visible:
            shared = wanted & held[m.id]
            if shared:
                own[m.id] = len(shared) if rank == "shared" else sum(
                    idf(w) for w in sorted(shared))
        scored = [(own[m.id], m) for m in visible if m.id in own]
        if context and wanted:
            scored = []
            talks: dict[str, list[Memory]] = collections.defaultdict(list)
            for m in visible:
                talks[conversation(m)].append(m)
            for m in visible:
                score = own.get(m.id, 0)
                for neighbour, weight in neighbours(m, talks):
                    score += weight * own.get(neighbour.id, 0)
                if score > 0:
                    scored.append((score, m))
        ranked = sorted(scored, key=lambda p: (-p[0], -p[1].id))
        return [m.as_result(s) for s, m in ranked[:limit]]

    def count(self, scope: Scope) -> int:
        return len(self.visible(scope))

    def remembered(self, ids: list[int], items: list[tuple[Scope, str, str, str, float | None]],
                   created: Callable[[], str]) -> None:
        """What a remember_many of (scope, level, text, source, ttl) `items` that returned
        `ids` wrote, each memory taking the next reading of the clock `created`."""
        for memory_id, (scope, level, text, source, ttl) in zip(ids, items, strict=True):
            stamp = created()
            expires = None if ttl is None else utc(stamp) + timedelta(seconds=ttl)
            self.memories.append(Memory(memory_id, scope.user,
                                        scope.task if level == "task" else None,
                                        text, source, stamp, expires))


class Statements(Protocol):
    """What runs a statement: a sqlite3 or psycopg connection, or a store's engine."""

    def execute(self, sql: str, parameters: Any = ..., /) -> Any: ...


def index_problems(db: Statements) -> list[str]:
    """How the word index and the counts differ from the memories they describe: every
    (user, word, task, id) once under the file's rule, nothing for a memory that is gone,
    nothing for an owner (user, task) whose memories weigh less than the file's threshold
    (every owner where it records none; a memory weighs one for each _WEIGHED_BY characters
    of its text begun), and each (user, task)'s count and weight exact."""
    (recorded,) = db.execute("SELECT value FROM store_settings WHERE name = 'matching'"
                             ).fetchone()
    matching, _, index_from = recorded.partition(";index-from=")
    counted = {(u, t): (n, w) for u, t, n, w in db.execute(
        "SELECT user_id, task_key, memories, weight FROM memory_counts")}
    memories = db.execute("SELECT id, user_id, task_id, text, created_at FROM memories"
                          ).fetchall()
    actual: dict[tuple[str, str], tuple[int, int]] = {}
    for _, user, task, text, _ in memories:
        n, weight = actual.get((user, task or ""), (0, 0))
        weighs = 1 + (len(text) - 1) // memory._WEIGHED_BY
        actual[user, task or ""] = (n + 1, weight + weighs)
    if counted != actual:
        return [f"counts and weights {counted} where the memories give {actual}"]
    least = int(index_from or 0)
    expected = {(user, word, task, memory_id)
                for memory_id, user, task, text, created_at in memories
                if actual[user, task or ""][1] >= least
                for word in memory_terms(matching, text, created_at)}
    found: list[tuple[str, str, str | None, int]] = []
    for user, word, task, first_id, blob in db.execute(
            "SELECT user_id, word, task_id, first_id, ids FROM memory_words"):
        ids = array.array("q", blob)
        if not ids or ids[0] != first_id or list(ids) != sorted(set(ids)):
            return [f"malformed row {user}/{word}/{first_id}: {list(ids)}"]
        found += [(user, word, task, memory_id) for memory_id in ids]
    problems = [f"posting twice: {p}" for p in set(found) if found.count(p) > 1]
    problems += [f"stale posting: {p}" for p in set(found) - expected]
    problems += [f"missing posting: {p}" for p in expected - set(found)]
    return problems


@contextlib.contextmanager
def owner_connection(target: str) -> Iterator[Statements]:
    """A plain connection to the store at `target` that sees every row: sqlite3 on a file,
    or psycopg as the server's owner (row-level security binds the store's own role)."""
    if target.startswith("postgresql://"):
        psycopg = importlib.import_module("psycopg")
        with psycopg.connect(target.replace(APP_ROLE, "postgres"), autocommit=True) as db:
            yield db
        return
    db = sqlite3.connect(target)
    try:
        yield db
    finally:
        db.close()


def rows_of_user(target: str, table: str, user: str) -> int:
    """The user's rows in one of the store's tables, read behind the store's back."""
    placeholder = "%s" if target.startswith("postgresql://") else "?"
    with owner_connection(target) as db:
        (rows,) = db.execute(f"SELECT count(*) FROM {table} WHERE user_id = {placeholder}",
                             (user,)).fetchone()
    return int(rows)


def transactions_left(store: Any) -> int:
    """How many transactions the store left open: its SQLite connection's, or on
    PostgreSQL the sessions of its database idle in one, as the server sees them."""
    if not store.path.startswith("postgresql://"):
        return int(store.db.in_transaction)
    with owner_connection(store.path) as db:
        return int(db.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND state LIKE 'idle in transaction%' AND pid <> pg_backend_pid()").fetchone()[0])


def index_problems_at(target: str) -> list[str]:
    """index_problems of the store at `target`, on either engine."""
    with owner_connection(target) as db:
        return index_problems(db)


USERS = st.sampled_from(["alice", "bob", "carol-2"])
TASKS = st.sampled_from(["trip", "work", "t-3"])
SCOPES = st.builds(Scope, USERS, TASKS)
# Shared words make matches likely; the odd letters are ones whose lower() is ASCII
# (KELVIN SIGN -> k, LATIN CAPITAL I WITH DOT -> i + combining dot) or is not.
VOCABULARY = ["hotel", "Hotel", "HOTEL", "book", "vegetarian", "lisbon", "seat", "seats",
              "the", "is", "which", "my", "42", "caf\u00e9", "\u212aelvin", "\u0130stanbul",
              "stra\u00dfe", "\uff28otel", "\u00fcber", "na\u00efve", "x-ray", "a1b2",
              "likes", "liked", "running", "\u6771\u4eac\u90fd", "\u6771\u4eac",
              "\u3068\u3046\u304d\u3087\u3046", "\uc11c\uc6b8", "\u4eacabc",
              "\uff76\uff80\uff76\uff85"]
FRAGMENTS = st.one_of(
    st.sampled_from(VOCABULARY),
    st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"),
            min_size=1, max_size=8),
)
TEXTS = (st.lists(FRAGMENTS, min_size=1, max_size=8).map(" ".join)
         .filter(lambda t: bool(t.strip()) and len(t) <= MAX_TEXT))
QUERIES = st.lists(FRAGMENTS, max_size=8).map(" ".join)
# Conversations "trip", "onboarding" and "trip/day-2"; none for "notes" and "/turn-1".
SOURCES = st.sampled_from(["trip/turn-1", "trip/turn-2", "onboarding/turn-4",
                           "trip/day-2/turn-1", "notes", "/turn-1", "trip/"])
LIMITS = st.integers(min_value=1, max_value=20)
RANK = st.sampled_from(WORD_RANKS)
# Seconds to live: a step of the clock is 60 s, so some lapse at the next tick, some later.
TTLS = st.sampled_from([None, None, None, 0.5, 30, 60, 90, 150, 600])


