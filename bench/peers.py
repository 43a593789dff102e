"""What a user would pick instead of memory.py for recall, each run over the same texts as
bench_quality.py's stores: search engines (tantivy, bm25s) and memory packages for agents
that install from PyPI and run offline (agentrecall-db, engram-search), each as its own
documentation sets it up, with the run's model where it takes one. Not a benchmark of its
own: bench_quality.py --peers runs it.

A peer is built over groups of texts (a LoCoMo conversation, a paraphrase set's person),
each text with an id, and answers (group, query, k) with the ids of its best k, a group's
texts searched apart from the others'. A peer whose package is not installed is left out,
saying what to install. dory-memory is not among them: its recall answers with a prose
context built from a graph an LLM extracts, not with ranked texts, so this measure cannot
be taken of it offline.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

Groups = dict[Any, list[tuple[str, str]]]  # group -> [(id, text)]
Answer = Callable[[Any, str, int], list[str]]  # (group, query, k) -> ids, best first
# What a peer's builder takes: the groups, a folder of its own, and the run's model (an
# object with embed(texts) and name, dimensions) or None.
Builder = Callable[[Groups, Path, Any], Answer]


def _terms(query: str) -> list[str]:
    return sorted({term.lower() for term in re.findall(r"\w+", query)})


def tantivy_peer(groups: Groups, folder: Path, model: Any) -> Answer:
    """tantivy's BM25 with its English stemmer, a query of any of the words."""
    import tantivy

    schema_builder = tantivy.SchemaBuilder()
    schema_builder.add_text_field("id", stored=True, tokenizer_name="raw")
    schema_builder.add_text_field("text", stored=False, tokenizer_name="en_stem")
    schema = schema_builder.build()
    indexes = {}
    for number, (group, texts) in enumerate(groups.items()):
        index = tantivy.Index(schema, path=str(_folder(folder, f"tantivy-{number}")))
        writer = index.writer()
        for text_id, text in texts:
            writer.add_document(tantivy.Document(id=text_id, text=text))
        writer.commit()
        index.reload()
        indexes[group] = index

    def answer(group: Any, query: str, k: int) -> list[str]:
        index = indexes[group]
        terms = _terms(query)
        if not terms:
            return []
        parsed = index.parse_query(" OR ".join(terms), ["text"])
        searcher = index.searcher()
        return [searcher.doc(address)["id"][0] for _, address
                in searcher.search(parsed, k).hits]

    return answer


def bm25s_peer(groups: Groups, folder: Path, model: Any) -> Answer:
    """bm25s (Lucene's BM25) with its English stopwords and PyStemmer's English stemmer."""
    import bm25s
    import Stemmer

    stemmer = Stemmer.Stemmer("english")
    built = {}
    for group, texts in groups.items():
        retriever = bm25s.BM25()
        retriever.index(bm25s.tokenize([text for _, text in texts], stopwords="en",
                                       stemmer=stemmer, show_progress=False),
                        show_progress=False)
        built[group] = retriever, [text_id for text_id, _ in texts]

    def answer(group: Any, query: str, k: int) -> list[str]:
        retriever, ids = built[group]
        tokens = bm25s.tokenize([query], stopwords="en", stemmer=stemmer, show_progress=False)
        if not tokens.vocab:
            return []
        found, scores = retriever.retrieve(tokens, k=min(k, len(ids)), show_progress=False)
        return [ids[at] for at, score in zip(found[0], scores[0], strict=True) if score > 0]

    return answer


class _AgentRecallModel:
    """The run's model as agentrecall's Embedder protocol asks for it (dim, embed)."""

    def __init__(self, model: Any) -> None:
        self.model, self.dim = model, model.dimensions

    def embed(self, texts: list[str]) -> list[list[float]]:
        return [list(vector) for vector in self.model.embed(texts)]


def _agentrecall(groups: Groups, folder: Path, model: Any, semantic: bool) -> Answer:
    from agentrecall import Memory

    memories = {}
    for number, (group, texts) in enumerate(groups.items()):
        path = _folder(folder, f"agentrecall-{semantic}") / f"{number}.db"
        memory = (Memory(path, embeddings=True, embedder=_AgentRecallModel(model))
                  if semantic else Memory(path, embeddings=False))
        records = memory.add_many([{"content": text, "metadata": {"id": text_id}}
                                   for text_id, text in texts])
        memories[group] = memory, {record.id: text_id for record, (text_id, _)
                                   in zip(records, texts, strict=True)}

    def answer(group: Any, query: str, k: int) -> list[str]:
        memory, ids = memories[group]
        return [ids[hit.id] for hit in memory.search(query, k=k)]

    return answer


def agentrecall_peer(groups: Groups, folder: Path, model: Any) -> Answer:
    """agentrecall-db's keyword recall (SQLite FTS5), its core install."""
    return _agentrecall(groups, folder, model, semantic=False)


def agentrecall_semantic_peer(groups: Groups, folder: Path, model: Any) -> Answer:
    """agentrecall-db's hybrid (FTS5 and sqlite-vec, fused), with the run's model."""
    return _agentrecall(groups, folder, model, semantic=True)


class _EngramModel:
    """The run's model as engram's pipeline calls it (normalized numpy vectors)."""

    def __init__(self, model: Any) -> None:
        self.model = model

    def _normalized(self, texts: Sequence[str]) -> Any:
        import numpy as np

        vectors = np.asarray(self.model.embed(list(texts)), dtype=np.float32)
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)

    def encode_documents(self, texts: list[str], batch_size: int = 64) -> Any:
        return self._normalized(texts)

    def encode_query(self, text: str) -> Any:
        return self._normalized([text])[0]


def engram_peer(groups: Groups, folder: Path, model: Any) -> Answer:
    """engram-search's pipeline (dense, BM25, entity and date boosts fused by RRF) with
    the run's model; its cross-encoder stage off, as none installs offline."""
    from engram.backends.base import Document
    from engram.retrieval.pipeline import RetrievalPipeline

    embedder = _EngramModel(model)
    pipeline = RetrievalPipeline(embedder=embedder, use_reranker=False)
    documents = {}
    for group, texts in groups.items():
        vectors = embedder.encode_documents([text for _, text in texts])
        documents[group] = [Document(id=text_id, text=text, embedding=list(vector))
                            for (text_id, text), vector in zip(texts, vectors, strict=True)]

    def answer(group: Any, query: str, k: int) -> list[str]:
        return [document.id for document in pipeline.search(query, documents[group], top_k=k)]

    return answer


# Name, builder, whether it needs the run's model, the package that brings it.
PEERS: list[tuple[str, Builder, bool, str]] = [
    ("tantivy 0.27 bm25 en_stem", tantivy_peer, False, "tantivy"),
    ("bm25s + PyStemmer", bm25s_peer, False, "bm25s PyStemmer"),
    ("agentrecall-db keyword", agentrecall_peer, False, "agentrecall-db"),
    ("agentrecall-db hybrid + model", agentrecall_semantic_peer, True,
     "agentrecall-db sqlite-vec"),
    ("engram-search + model", engram_peer, True, "engram-search"),
]


def _folder(parent: Path, name: str) -> Path:
    made = parent / name
    made.mkdir(parents=True, exist_ok=True)
    return made


def built(groups: Groups, model: Any) -> list[tuple[str, Answer | str]]:
    """Each peer that can run here, built over the groups; one that cannot, with why."""
    folder = Path(tempfile.mkdtemp(prefix="peers-"))
    peers: list[tuple[str, Answer | str]] = []
    for name, build, needs_model, package in PEERS:
        if needs_model and model is None:
            peers.append((name, "needs the run's model"))
            continue
        try:
            peers.append((name, build(groups, folder, model)))
        except ImportError as exc:
            peers.append((name, f"not installed ({exc.name}): pip install {package}"))
    return peers
