"""Every example in README.md and docs/*.md runs here and shows what it prints.

The fenced blocks are read from the pages themselves, each run in a new empty folder (with
`docs` linked in, as in a checkout): ```pycon blocks as doctests, ```python blocks
executed, and ```console sessions through bash a command at a time, each command's stdout
and stderr compared with the lines under it. In expected output `...` stands for what
differs between runs (a clock's time, a file's size). A block whose info string says
`no-run` is shown, not run (a server's URL that only exists on the reader's machine), and
so are the languages no test can run here: sh (sudo apt-get), sql (Citus), json and toml
(configuration; the mypy lines are test_types' own)."""

from __future__ import annotations

import argparse
import ast
import doctest
import importlib.util
import os
import pathlib
import re
import subprocess
import sys
from typing import NamedTuple

import pytest

import memory
from helpers import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHOWN_ONLY = {"sh", "sql", "json", "toml"}
FENCE = re.compile(r"^```(\w*)([^\n]*)\n(.*?)^```$", re.M | re.S)
HEREDOC = re.compile(r"<<'(\w+)'")
COMPARED = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


class Block(NamedTuple):
    page: pathlib.Path
    line: int
    language: str
    text: str

    def __str__(self) -> str:
        return f"{self.page.name}:{self.line}"


def blocks() -> list[Block]:
    found = []
    for page in PAGES:
        text = page.read_text()
        for match in FENCE.finditer(text):
            language, info, body = match.groups()
            if "no-run" not in info:
                line = text.count("\n", 0, match.start()) + 1
                found.append(Block(page, line, language, body))
    return found


RUN = [block for block in blocks() if block.language not in SHOWN_ONLY]


def test_every_block_is_run_or_shown_by_its_language() -> None:
    languages = {block.language for block in blocks()}
    assert languages <= SHOWN_ONLY | {"pycon", "python", "console"}, languages
    assert {block.language for block in RUN} == {"pycon", "python", "console"}


@pytest.fixture
def folder(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> pathlib.Path:
    """A new empty folder, the current one, with the project's docs in it as a checkout has."""
    (tmp_path / "docs").symlink_to(ROOT / "docs")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def commands(session: str) -> list[tuple[str, str]]:
    """A console session's commands (a heredoc included) with the output shown under each."""
    steps: list[tuple[str, str]] = []
    lines = iter(session.splitlines())
    for line in lines:
        if line.startswith("$ "):
            command = line[2:]
            heredoc = HEREDOC.search(command)
            if heredoc:
                for body in lines:
                    command += "\n" + body
                    if body == heredoc.group(1):
                        break
            steps.append((command, ""))
        else:
            assert steps, f"output before the first command: {line}"
            steps[-1] = (steps[-1][0], steps[-1][1] + line + "\n")
    return steps


def run_console(block: Block, folder: pathlib.Path) -> None:
    path = os.pathsep.join([str(pathlib.Path(sys.executable).parent), os.environ["PATH"]])
    checker = doctest.OutputChecker()
    for command, shown in commands(block.text):
        done = subprocess.run(["bash", "-c", command], cwd=folder, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=120,
                              env={**os.environ, "PATH": path})
        assert checker.check_output(shown, done.stdout, COMPARED), (
            f"{block}: $ {command}\nshown:\n{shown}\nprinted:\n{done.stdout}")


def run_pycon(block: Block) -> None:
    test = doctest.DocTestParser().get_doctest(block.text, {"__name__": "__docs__"},
                                               str(block), str(block.page), block.line)
    report: list[str] = []
    runner = doctest.DocTestRunner(optionflags=COMPARED)
    runner.run(test, out=report.append)
    assert runner.failures == 0, "".join(report)


# An example naming an extra's feature needs that extra; without it, it skips, saying so.
EXTRAS = {"stems": "snowballstemmer", "mcp": "mcp", "memory_frameworks.langgraph": "langgraph",
          "memory_frameworks.agents": "agents", "memory_frameworks.adk": "google.adk",
          "memory_frameworks.pydantic_ai": "pydantic_ai_harness",
          "memory_frameworks.anthropic": "anthropic",
          "memory_frameworks.llama_index": "llama_index",
          "memory_frameworks.agent_framework": "agent_framework",
          "memory_frameworks.crewai": "crewai", "memory_frameworks.strands": "strands"}
# The extras whose examples run in an environment of their own (.ci/run makes it).
APART = {"memory_frameworks.crewai": "test-crewai-strands",
         "memory_frameworks.strands": "test-crewai-strands"}
# README's model, from the minilm extra and a package installed apart (README says how);
# with MEMORY_REQUIRE_MODEL=1 (.ci/run, which installs them) its absence fails instead.
MODEL = ("memory_minilm", ["tokenizers", "all_minilm_l6_v2"])


def installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # google.adk without google
        return False


@pytest.mark.parametrize("block", RUN, ids=str)
def test_the_example_runs_and_prints_what_the_page_shows(block: Block,
                                                         folder: pathlib.Path) -> None:
    for word, module in EXTRAS.items():
        if word in block.text and not installed(module):
            pytest.skip(f"the example needs the `{word}` extra"
                        f" (pip install -e '.[{APART.get(word, 'test')}]')")
    named, needed = MODEL
    absent = [module for module in needed if importlib.util.find_spec(module) is None]
    if named in block.text and absent:
        message = f"the example needs {', '.join(absent)} (README: Recall by meaning)"
        if os.environ.get("MEMORY_REQUIRE_MODEL") == "1":
            pytest.fail(message)
        pytest.skip(message)
    if block.language == "console":
        run_console(block, folder)
    elif block.language == "pycon":
        run_pycon(block)
    else:
        exec(compile(block.text, str(block), "exec"), {"__name__": "__docs__"})


LINK = re.compile(r"\]\(([^)#\s]*)(?:#([^)\s]*))?\)")


def anchors(page: pathlib.Path) -> set[str]:
    """The anchors GitHub gives a page's headings: lower case, punctuation dropped, spaces
    as hyphens."""
    headings = re.findall(r"^#+ (.+)$", FENCE.sub("", page.read_text()), re.M)
    return {re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-") for heading in headings}


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_every_link_between_the_pages_leads_somewhere(page: pathlib.Path) -> None:
    for target, anchor in LINK.findall(page.read_text()):
        if target.startswith(("http://", "https://")):
            continue
        linked = (page.parent / target).resolve() if target else page
        assert linked.is_file(), f"{page.name}: no file {target}"
        if anchor:
            assert anchor in anchors(linked), f"{page.name}: no heading for #{anchor} in {target}"


def test_readme_reads_in_one_sitting() -> None:
    """The first hour's page: the detail lives in docs/, README at most 330 lines."""
    assert len((ROOT / "README.md").read_text().splitlines()) <= 330


def test_the_command_line_page_names_every_option_of_every_command() -> None:
    """docs/cli.md's table: each command's rows name every option its parser takes."""
    parser = memory._parser()
    (subcommands,) = [action for action in parser._actions
                      if isinstance(action, argparse._SubParsersAction)]
    table = (ROOT / "docs" / "cli.md").read_text()
    for name, command in subcommands.choices.items():
        rows = "\n".join(line for line in table.splitlines() if line.startswith(f"| `{name} "))
        assert rows, name
        for action in command._actions:
            for option in action.option_strings:
                if option.startswith("--") and option != "--help":
                    assert option in rows, f"{name} {option}"


def test_the_limits_table_names_every_rank() -> None:
    (row,) = [line for line in (ROOT / "docs" / "api.md").read_text().splitlines()
              if line.startswith("| rank |")]
    assert all(f"'{rank}'" in row for rank in memory.RANKS)


ARCHITECTURE = ROOT / "docs" / "architecture.md"
CODE_NAME = re.compile(r"`((?:memory_\w+\.)?[A-Za-z_]\w*(?:\.\w+)?)`")
FILE_NAME = re.compile(r"`([\w./-]+\.(?:py|toml|md))`")


def defined_in(path: pathlib.Path) -> set[str]:
    """The names a module defines at its top level, and `Class.member` for each class's."""
    found: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ClassDef):
            found.add(node.name)
            found.update(f"{node.name}.{member}" for member in defined_by(node.body))
        else:
            found.update(defined_by([node]))
    return found


def defined_by(nodes: list[ast.stmt]) -> set[str]:
    names: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(target.id for target in targets if isinstance(target, ast.Name))
    return names


def test_the_architecture_map_names_only_parts_that_exist() -> None:
    """docs/architecture.md, the map a newcomer reads first: every part it names in code
    (a name of memory.py, Class.member, a satellite's memory_x.Name, a file) is there, and
    it reads in one sitting."""
    text = ARCHITECTURE.read_text()
    assert len(text.splitlines()) <= 150
    names = {"memory": defined_in(ROOT / "memory.py")}
    named = [name for name in CODE_NAME.findall(text)
             if (name.startswith("memory_") or name[0] == "_" or name[0].isupper())
             and not FILE_NAME.fullmatch(f"`{name}`")]
    assert len(named) > 50, "the map names the parts"
    for name in named:
        module, _, rest = name.partition(".") if name.startswith("memory_") else ("memory", "",
                                                                                 name)
        if module not in names:
            names[module] = defined_in(ROOT / f"{module}.py")
        held = names[module]
        assert rest in held or (rest.endswith("_") and any(
            part.startswith(rest) for part in held)), f"docs/architecture.md names {name}"
    for file in FILE_NAME.findall(text):
        assert (ROOT / file).is_file(), f"docs/architecture.md names {file}"
