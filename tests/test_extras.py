"""Every package a satellite or an adapter imports is named in its extra: a package that
the framework brought once and no longer does (agent-framework-core and anyio) would
otherwise leave `pip install '.[extra]'` without what the module needs. The modules are
read, not imported, so a module whose extra is not installed here is still checked
wherever its packages are."""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import importlib.util
import pathlib
import re
import sys
import tomllib

import pytest

from helpers import ROOT

EXTRAS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
    "optional-dependencies"]
MODULES = {"memory_postgres.py": "postgres", "memory_mcp.py": "mcp",
           "memory_minilm.py": "minilm"} | {
    f"memory_frameworks/{path.name}": path.stem.replace("_", "-")
    for path in sorted((ROOT / "memory_frameworks").glob("*.py")) if path.stem != "__init__"}


def imported(path: pathlib.Path) -> set[str]:
    """The modules a file imports that are neither the standard library's nor ours."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return {name for name in names if name.split(".")[0] not in sys.stdlib_module_names
            and not name.split(".")[0].startswith("memory")}


@functools.cache
def distributions_of() -> dict[str, list[str]]:
    return dict(importlib.metadata.packages_distributions())


def owner(name: str, where: str) -> str | None:
    """The distribution that installed module `name`, whose file or folder is `where`: of
    those that install its top-level package, the one whose files hold it (a namespace
    package, google, is several distributions')."""
    candidates = distributions_of().get(name.split(".")[0], [])
    if len(set(candidates)) == 1:
        return candidates[0]
    wanted = pathlib.Path(where).resolve()
    for candidate in candidates:
        distribution = importlib.metadata.distribution(candidate)
        for file in distribution.files or ():
            path = pathlib.Path(str(distribution.locate_file(file))).resolve()
            if path == wanted or wanted in path.parents:
                return candidate
    return None


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_every_module_with_packages_has_an_extra() -> None:
    for module, extra in MODULES.items():
        assert extra in EXTRAS, f"{module} has no extra {extra}"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_a_module_s_extra_names_every_package_it_imports(module: str) -> None:
    extra = MODULES[module]
    listed = {normalized(re.split(r"[<>=!~\[; ]", requirement)[0])
              for requirement in EXTRAS[extra]}
    missing = []
    for name in sorted(imported(ROOT / module)):
        try:
            spec = importlib.util.find_spec(name)
        except ModuleNotFoundError:
            spec = None
        if spec is None:
            pytest.skip(f"{module}'s packages are not installed here ({name}): its extra"
                        f" {extra}'s environment checks it")
        where = spec.origin if spec.has_location and spec.origin else next(
            iter(spec.submodule_search_locations or ()), None)
        installed = owner(name, str(where))
        assert installed is not None, f"{name} belongs to no installed distribution"
        if normalized(installed) not in listed:
            missing.append(f"{name} ({installed})")
    assert not missing, f"the {extra} extra does not name {', '.join(missing)}"
