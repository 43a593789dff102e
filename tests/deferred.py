"""A framework's names, imported when a test first uses them rather than when pytest
collects the test's module: every process of `pytest -n auto` collects every module, and
the frameworks took most of the collection's seconds (tests/test_collection.py checks none is
imported then). Not a test module.

    pytestmark = needs("agent_framework", "agent-framework")
    if TYPE_CHECKING:  # mypy reads the names themselves
        from agent_framework import Agent
    else:
        Agent, = deferred("agent_framework", "Agent")

A deferred name is called, read, indexed and given to isinstance() as the name itself;
a class a test derives from one lives in a support module the test imports deferred.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

import pytest


class Deferred:
    """A module's name, imported at its first use."""

    def __init__(self, module: str, name: str) -> None:
        self._module = module
        self._name = name

    def resolved(self) -> Any:
        module = importlib.import_module(self._module)
        return module if self._name == "" else getattr(module, self._name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.resolved()(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        # Collection asks each object of a module whether it is a test, a wrapper or a
        # mock (__test__, __wrapped__, _mock_name): a proxy is none, and stays unimported.
        if name.startswith(("__", "_mock_")):
            raise AttributeError(name)
        return getattr(self.resolved(), name)

    def __getitem__(self, item: Any) -> Any:
        return self.resolved()[item]

    def __instancecheck__(self, instance: Any) -> bool:
        return isinstance(instance, self.resolved())

    def __repr__(self) -> str:
        return f"<deferred {self._module}.{self._name}>"


def deferred(module: str, *names: str) -> tuple[Any, ...]:
    """The module's `names`, each imported where first used."""
    return tuple(Deferred(module, name) for name in names)


def module(name: str) -> Any:
    """A module, imported where one of its names is first read."""
    return Deferred(name, "")


def needs(package: str, extra: str) -> pytest.MarkDecorator:
    """Skip a module's tests, naming the extra, where the framework's package is missing;
    found without being imported (only its parent packages are)."""
    try:
        found = importlib.util.find_spec(package) is not None
    except ModuleNotFoundError:
        found = False
    return pytest.mark.skipif(not found, reason=f"needs the `{extra}` extra"
                              f" (python3 -m pip install -e '.[{extra}]')")
