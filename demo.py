"""Replay scenario.json across a restart and print what the store recalls.

Session one writes its memories and closes the store; a new store opens the same
file, as a restarted process would, and answers the queries. A plain Python list
kept beside it is emptied at the restart, as a process's memory would be.
"""

from __future__ import annotations

import json
import pathlib
import tempfile
from typing import Any

from memory import MemoryStore, Scope, fixed_clock, words

SCENARIO = pathlib.Path(__file__).with_name("scenario.json")


def replay(scenario: dict[str, Any], path: pathlib.Path) -> dict[str, Any]:
    writes, queries = scenario["sessions"]
    baseline: list[str] = []
    with MemoryStore(path, clock=fixed_clock()) as store:
        for write in writes["writes"]:
            store.remember(Scope(*write["as"]), write["level"], write["text"], write["source"])
            baseline.append(write["text"])
    stored = len(baseline)
    baseline = []  # the restart: a new process starts with an empty list
    results = []
    with MemoryStore(path, clock=fixed_clock()) as store:
        for asked in queries["queries"]:
            scope = Scope(*asked["as"])
            results.append(
                {
                    "scope": f"{scope.user}/{scope.task}",
                    "query": asked["query"],
                    "query_words": sorted(words(asked["query"])),
                    "visible_memories": store.count(scope),
                    "recalled": store.recall(scope, asked["query"]),
                    "baseline_recalled_after_restart": len(baseline),
                }
            )
    return {"stored": stored, "queries": results}


def main() -> None:
    scenario = json.loads(SCENARIO.read_text(encoding="utf-8"))
    with tempfile.TemporaryDirectory() as folder:
        result = replay(scenario, pathlib.Path(folder) / "memory.db")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
