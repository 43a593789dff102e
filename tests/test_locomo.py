"""bench/locomo.py: LoCoMo as its repository publishes it, converted as the quality bench
reads it, checked on a tiny made-up file of the same shape (the real one is CC BY-NC 4.0
and not shipped)."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import zipfile
from typing import Any

import locomo
from helpers import ROOT

SAMPLE: dict[str, Any] = {
    "speaker_a": "Ada",
    "speaker_b": "Ben",
    "session_1_date_time": "1:56 pm on 8 May, 2023",
    "session_1": [
        {"speaker": "Ada", "dia_id": "D1:1", "text": "I adopted a cat named Tofu."},
        {"speaker": "Ben", "dia_id": "D1:2", "text": "Look at my garden!",
         "img_url": ["https://example.org/g.jpg"], "blip_caption": "a photo of tomatoes",
         "query": "garden tomatoes"},
    ],
    "session_2_date_time": "9:00 am on 9 May, 2023",
    "session_2": [{"speaker": "Ben", "dia_id": "D2:1", "text": "The tomatoes are ripe."}],
    "session_3_date_time": "a session with a date but no turns, as LoCoMo has",
    "events_session_1": {"Ada": [], "Ben": [], "date": "8 May, 2023"},
    "qa": [
        {"question": "What is Ada's cat called?", "answer": "Tofu", "evidence": ["D1:1"],
         "category": 4},
        {"question": "When were the tomatoes ripe?", "answer": "9 May 2023",
         "evidence": ["D1:2", "D2:1"], "category": 2},
        {"question": "What is Ben's dog called?", "adversarial_answer": "Rex",
         "evidence": ["D1:1"], "category": 5},
        {"question": "Is Ada kind?", "answer": "Yes", "evidence": [], "category": 3},
    ],
}

CONVERTED = {
    "conversation": "7",
    "speakers": ["Ada", "Ben"],
    "memories": [
        {"source": "D1:1", "session": 1, "session_time": "1:56 pm on 8 May, 2023",
         "text": "Ada: I adopted a cat named Tofu."},
        {"source": "D1:2", "session": 1, "session_time": "1:56 pm on 8 May, 2023",
         "text": "Ben: Look at my garden! [shares a photo of tomatoes]"},
        {"source": "D2:1", "session": 2, "session_time": "9:00 am on 9 May, 2023",
         "text": "Ben: The tomatoes are ripe."},
    ],
    "questions": [
        {"question": "What is Ada's cat called?", "evidence": ["D1:1"], "category": 4},
        {"question": "When were the tomatoes ripe?", "evidence": ["D1:2", "D2:1"],
         "category": 2},
    ],
}


def write_both(folder: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    """The sample as the repository's zip (one file per conversation) and as one
    locomo10.json, each with a second conversation (id 12) to choose against."""
    other = {**SAMPLE, "speaker_a": "Cy"}
    archive = folder / "locomo10.zip"
    with zipfile.ZipFile(archive, "w") as out:
        out.writestr("data/multimodal_dialog/locomo10_v2/", "")
        out.writestr("data/multimodal_dialog/locomo10_v2/12.json", json.dumps(other))
        out.writestr("data/multimodal_dialog/locomo10_v2/7.json", json.dumps(SAMPLE))
    listing = folder / "locomo10.json"
    listing.write_text(json.dumps([
        {"sample_id": "conv-12", "conversation": other, "qa": other["qa"]},
        {"sample_id": "conv-7", "conversation": {k: v for k, v in SAMPLE.items() if k != "qa"},
         "qa": SAMPLE["qa"], "event_summary": {}, "session_summary": {}},
    ]), encoding="utf-8")
    return archive, listing


def test_both_published_forms_convert_to_the_same_conversations(
        tmp_path: pathlib.Path) -> None:
    for path in write_both(tmp_path):
        converted = locomo.convert(path)
        assert [c["conversation"] for c in converted["conversations"]] == ["7", "12"]
        assert converted["conversations"][0] == CONVERTED
        assert converted["conversations"][1]["speakers"] == ["Cy", "Ben"]
        assert locomo.convert(path, {"7"})["conversations"] == [CONVERTED]


def test_the_quality_bench_runs_on_locomo_as_published(tmp_path: pathlib.Path) -> None:
    archive, _ = write_both(tmp_path)
    run = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_quality.py"),
                          "--locomo", str(archive), "--conversations", "7"],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("locomo10.zip: 1 conversations, 3 turns, 2 questions")
    rows = {line.split(" | ")[0].strip("| "): line.split(" | ")[1]
            for line in run.stdout.splitlines() if line.startswith("| memory.py")}
    assert rows["memory.py stems-3+idf"] == "1.000"  # "cat" and "tomatoes ripe" find theirs


def test_the_quality_bench_writes_each_turn_as_an_assistant_would(
        tmp_path: pathlib.Path) -> None:
    """At its session's time (a second apart within a session) and with a source naming
    the conversation and session before the dialog id the evidence names."""
    import bench_quality

    from memory import Scope

    _, store = bench_quality.store_ranker(tmp_path, [CONVERTED], "exact", "exact",
                                          "shared")
    with store:
        written = store.memories(Scope("conversation-0", "questions"))
    assert [(m["source"], m["created_at"]) for m in written] == [
        ("conv-7/session-1/D1:1", "2023-05-08T13:56:00+00:00"),
        ("conv-7/session-1/D1:2", "2023-05-08T13:56:01+00:00"),
        ("conv-7/session-2/D2:1", "2023-05-09T09:00:00+00:00")]
