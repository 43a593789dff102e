"""Collecting the suite is quick and needs no extra: it imports no framework (each is
imported by the tests that use it, tests/deferred.py), and every module collects, its
tests skipping where their extra is missing, on a machine with pytest and hypothesis
alone. Each runs a collection of the whole suite in a process of its own."""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import re
import subprocess
import sys

from helpers import ROOT

# The frameworks and SDKs the adapters and the MCP server stand on, as the modules their
# imports load. The contract suite of pydantic-ai-memory-core is the one collected from
# its own module (tests/test_pydantic_ai.py), so its framework is imported then.
FRAMEWORKS = ["mcp", "agents", "openai", "anthropic", "google.adk", "google.genai",
              "langgraph.store.base", "langgraph.graph", "llama_index.core",
              "agent_framework", "crewai", "strands", "starlette", "uvicorn"]
# What a machine with pytest and hypothesis alone has: they and what they stand on.
ALONE = ["pytest", "_pytest", "py", "pluggy", "iniconfig", "packaging", "hypothesis",
         "_hypothesis_pytestplugin", "_hypothesis_globals", "_hypothesis_ftz_detector",
         "sortedcontainers", "attr", "attrs", "exceptiongroup", "pygments"]


def collected(tmp_path: pathlib.Path, python: list[str], path: list[pathlib.Path],
              *args: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """A collection of the suite (or, with `args`, a run of them) by `python` on `path`,
    and the modules imported by the collection's end."""
    modules = tmp_path / "modules.json"
    done = subprocess.run(
        [*python, "-m", "pytest", *(args or ["--collect-only"]), "-q", "-p",
         "no:cacheprovider", "-p", "collection_probe", "-rs"],
        cwd=ROOT, capture_output=True, text=True, timeout=240,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(map(str, path)),
             "PROBE_MODULES": str(modules)})
    return done, json.loads(modules.read_text()) if modules.exists() else []


def test_collection_imports_no_framework(tmp_path: pathlib.Path) -> None:
    done, modules = collected(tmp_path, [sys.executable], [ROOT / "tests"])
    assert done.returncode == 0, done.stdout[-2000:]
    assert [name for name in FRAMEWORKS if name in modules] == []


def test_every_module_collects_with_pytest_and_hypothesis_alone(
        tmp_path: pathlib.Path) -> None:
    # A folder of pytest's and hypothesis's packages alone, the path of a Python that
    # reads no site-packages (-S) and so loads no other package's plugin.
    alone = tmp_path / "alone"
    alone.mkdir()
    for name in ALONE:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.origin is not None:
            where = pathlib.Path(spec.origin)
            (alone / (where.parent.name if where.name == "__init__.py" else where.name)
             ).symlink_to(where.parent if where.name == "__init__.py" else where)
    python, path = [sys.executable, "-S"], [alone, ROOT, ROOT / "tests"]
    done, modules = collected(tmp_path, python, path)
    assert done.returncode == 0, done.stdout[-3000:]
    assert "error" not in done.stdout.splitlines()[-1]
    assert "numpy" not in modules and "psycopg" not in modules
    # Each framework's tests skip, naming its extra.
    extras = {"adk": "adk", "agent_framework": "agent-framework", "agents": "agents",
              "anthropic": "anthropic", "langgraph": "langgraph", "llama_index": "llama-index",
              "pydantic_ai": "pydantic-ai", "mcp": "mcp", "mcp_http": "mcp"}
    done, _ = collected(tmp_path, python, path,
                        *(f"tests/test_{module}.py" for module in extras))
    assert done.returncode == 0, done.stdout[-3000:]
    last = done.stdout.splitlines()[-1]
    assert "skipped" in last and "passed" not in last and "failed" not in last, last
    for module, extra in extras.items():
        assert re.search(rf"tests/test_{module}\.py:\d+: needs the `{extra}` extra",
                         done.stdout), module
