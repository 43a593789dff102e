"""The package of framework adapters: each module imports with its extra, and without it
says which pip line brings it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from helpers import ROOT


@pytest.mark.parametrize("module, extra, framework", [
    ("langgraph", "langgraph", "langgraph"), ("agents", "agents", "agents"),
    ("adk", "adk", "google")])
def test_an_adapter_without_its_extra_names_the_pip_line(module: str, extra: str,
                                                        framework: str) -> None:
    code = (f"import sys; sys.modules[{framework!r}] = None\n"  # as if not installed
            f"import memory_frameworks.{module}")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("ModuleNotFoundError: memory_frameworks.")
    assert f"needs the {extra} extra (missing: {framework}" in last
    assert f"python3 -m pip install 'memory-store[{extra}]'" in last
