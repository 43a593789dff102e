"""Small deterministic embedders for the tests: no model, no download. Not a test module.

ConceptEmbedder puts each word on an axis of its own, except the words of one concept,
which share one: "vegetarian" and "meat-free" point the same way while sharing no word,
as a model's vectors do for a paraphrase. The rest of the embedders misbehave on purpose;
ShortestFirst is a reranker as plain."""

from __future__ import annotations

import hashlib
import math
import threading
from collections.abc import Sequence

import memory

# Words of one concept share an axis.
CONCEPTS = (
    ("vegetarian", "vegan", "meat", "free", "plant"),
    ("dinner", "supper", "restaurant", "places", "eat"),
    ("jazz", "music", "concert", "band"),
    ("lisbon", "portugal"),
)
_AXIS_OF = {word: axis for axis, words in enumerate(CONCEPTS) for word in words}


class ConceptEmbedder:
    """Each word of a text adds 1 on its axis: a concept's, or one of the rest chosen by
    the word's hash. `calls` keeps each call's number of texts."""

    def __init__(self, name: str = "concepts-1", dimensions: int = 16) -> None:
        self.name = name
        self.dimensions = dimensions
        self.calls: list[int] = []

    def axis(self, word: str) -> int:
        if word in _AXIS_OF:
            return _AXIS_OF[word]
        spread = self.dimensions - len(CONCEPTS)
        digest = hashlib.sha256(word.encode()).digest()
        return len(CONCEPTS) + int.from_bytes(digest[:4], "little") % spread

    def vector(self, text: str) -> list[float]:
        vector = [0.0] * self.dimensions
        for word in sorted(memory.words(text) - memory.STOPWORDS):
            vector[self.axis(word)] += 1.0
        if not any(vector):
            vector[-1] = 1.0
        return vector

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls.append(len(texts))
        return [self.vector(text) for text in texts]


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


class Blurred(ConceptEmbedder):
    """ConceptEmbedder's vectors plus a little noise of each word's own (fractional values, so
    that sums of products round, as a model's do), in 96 dimensions."""

    def __init__(self) -> None:
        super().__init__("blurred-1", 96)

    def vector(self, text: str) -> list[float]:
        vector = super().vector(text)
        for word in sorted(memory.words(text)):
            digest = hashlib.sha256(word.encode()).digest()
            for at, byte in enumerate(digest * 3):
                vector[at] += (byte - 127.5) / 1000
        return vector


class Broken(ConceptEmbedder):
    """Gives `given(texts)` instead of vectors, or raises what it returns."""

    def __init__(self, given: object, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.given = given

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        made = self.given(texts) if callable(self.given) else self.given
        if isinstance(made, BaseException):
            raise made
        return made  # type: ignore[return-value]


class Waiting(ConceptEmbedder):
    """Embeds once `go` is set, saying it has started: a slow model."""

    def __init__(self) -> None:
        super().__init__()
        self.started = threading.Event()
        self.go = threading.Event()

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.started.set()
        if not self.go.wait(timeout=30):
            raise TimeoutError("the test never let the embedder go")
        return super().embed(texts)


def concepts() -> ConceptEmbedder:
    """The factory `--embedder embedders:concepts` names."""
    return ConceptEmbedder()


def concepts_two() -> ConceptEmbedder:
    """Another embedder (its name differs), to move a store to."""
    return ConceptEmbedder(name="concepts-2")


class ShortestFirst:
    """A reranker that puts the shortest text first, whatever the query: an order no rank
    gives. `calls` keeps each call's query and texts."""

    name = "shortest-first-1"

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[str]]] = []

    def rerank(self, query: str, texts: Sequence[str]) -> list[float]:
        self.calls.append((query, list(texts)))
        return [-float(len(text)) for text in texts]


def shortest_first() -> ShortestFirst:
    """The factory `--reranker embedders:shortest_first` names."""
    return ShortestFirst()
