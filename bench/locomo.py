"""LoCoMo (Maharana et al., ACL 2024) as bench_quality.py reads it.

The benchmark's public repository (github.com/snap-research/locomo) publishes its ten
conversations as `data/locomo10.zip` (one `<id>.json` per conversation) and, in some
versions, as one `locomo10.json` (a list of samples, each with `sample_id`
`conv-<id>`, `conversation` and `qa`). Its license is CC BY-NC 4.0, so it is not shipped
here: download it and pass its path. Either form converts to the same thing:

    {"about": ..., "conversations": [{"conversation": id, "speakers": [a, b],
      "memories": [{"source", "session", "session_time", "text"}],
      "questions": [{"question", "evidence", "category"}]}]}

Each dialog turn is one memory, "Speaker: text", with an image's caption appended as
" [shares CAPTION]"; its source is the turn's dialog id. Questions of category 5
(adversarial) and those that name no evidence are left out: evidence recall needs
evidence.
"""

from __future__ import annotations

import json
import pathlib
import zipfile
from typing import Any

ABOUT = (
    "LoCoMo (Maharana et al., \"Evaluating Very Long-Term Conversational Memory of LLM"
    " Agents\", ACL 2024), converted from the paper repository snap-research/locomo by"
    " bench/locomo.py. Each dialog turn is one memory (\"Speaker: text\", image captions"
    " appended); source is its dialog id. Questions of category 5 (adversarial) and without"
    " evidence are left out. Categories: 1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop."
)


def conversation(name: str, sample: dict[str, Any], qa: list[dict[str, Any]]) -> dict[str, Any]:
    """One conversation (a `conversation` object of LoCoMo, with its `qa`) converted."""
    memories = []
    session = 1
    while f"session_{session}" in sample:
        when = sample[f"session_{session}_date_time"]
        for turn in sample[f"session_{session}"]:
            text = f"{turn['speaker']}: {turn['text']}"
            if turn.get("blip_caption"):
                text += f" [shares {turn['blip_caption']}]"
            memories.append({"source": turn["dia_id"], "session": session,
                             "session_time": when, "text": text})
        session += 1
    questions = [{"question": q["question"], "evidence": q["evidence"], "category": q["category"]}
                 for q in qa if q["category"] != 5 and q["evidence"]]
    return {"conversation": name, "speakers": [sample["speaker_a"], sample["speaker_b"]],
            "memories": memories, "questions": questions}


def convert(path: pathlib.Path, only: set[str] | None = None) -> dict[str, Any]:
    """The conversations of `locomo10.zip` or `locomo10.json` at `path` (those named in
    `only`, if given), sorted by their ids as numbers."""
    found: dict[str, dict[str, Any]] = {}
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            for member in archive.namelist():
                if member.endswith(".json"):
                    sample = json.loads(archive.read(member))
                    stem = pathlib.PurePosixPath(member).stem
                    found[stem] = conversation(stem, sample, sample["qa"])
    else:
        for sample in json.loads(path.read_text(encoding="utf-8")):
            name = str(sample["sample_id"]).removeprefix("conv-")
            found[name] = conversation(name, sample["conversation"], sample["qa"])
    chosen = sorted((name for name in found if only is None or name in only),
                    key=lambda name: (len(name), name))
    return {"about": ABOUT, "conversations": [found[name] for name in chosen]}
