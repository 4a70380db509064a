"""The README and the docs pages cannot go stale: every `hb` command they show exists and
takes every option they give it, every docs link and picture resolves, the README stays short.

Each command line shown (in a code block, or inline as `hb ...`) is read with shlex; its
`--help` form runs in process through `hbsim.cli.main` (global options such as `--plugin`
are checked against `hb --help` instead, since their modules need not exist here), and every
`--option` on the line must appear in that help. `make` targets must be Makefile targets.
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import importlib
import importlib.util
import io
import re
import shlex
from pathlib import Path

import pytest

import hbsim.cli

pytestmark = pytest.mark.cli

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
MAX_README_LINES = 250
GRID_ACTIONS = ("plan", "run", "status", "collect")
#: the commands with sub-commands, and those (`hb grid run`, `hb twin fit`)
ACTIONS = {"grid": GRID_ACTIONS, "twin": ("fit", "check")}
#: options of `hb` itself (before the command) that take a value
GLOBAL_VALUED = ("--plugin",)
FENCE = re.compile(r"^```.*?$(.*?)^```", re.S | re.M)
INLINE = re.compile(r"`((?:hb|make|python scripts/\w+\.py) [^`]*)`")
OPTION = re.compile(r"^--[a-z][a-z0-9-]*")
ENV_PREFIX = re.compile(r"^(?:[A-Z_][A-Z0-9_]*=\S*\s+)+")     # `PYTHONPATH=examples hb ...`


def shown_commands(text: str) -> list[str]:
    """Every command line a Markdown text shows: code-block lines starting with `hb `,
    `make ` or `python scripts/` (several on one line split at ' ; '), and inline spans."""
    lines = []
    for block in FENCE.findall(text):
        for line in block.splitlines():
            line = ENV_PREFIX.sub("", line.strip().removeprefix("$ "))
            for part in line.split(" ; "):
                part = part.strip()
                if part.startswith(("hb ", "make ", "python scripts/")) and not is_output(part):
                    lines.append(part)
    lines += [m.group(1) for m in INLINE.finditer(text)]
    return list(dict.fromkeys(lines))


def is_output(line: str) -> bool:
    """A line a command printed, not one to type: `hb stress: 48 cells ...`, `make: ...`."""
    return line.split()[0].endswith(":") or (len(line.split()) > 1 and line.split()[1].endswith(":"))


def words(line: str) -> list[str]:
    """shlex words of a shown line, comments dropped, brackets of `[--jobs N]` taken off."""
    line = line.split(" | ")[0]                     # `hb policies | head`: hb's part of a pipe
    try:
        raw = shlex.split(line, comments=True)
    except ValueError:                              # an inline span cut mid-quote
        raw = line.split()
    return [w for word in raw if (w := word.strip("[]()"))]


def options(tokens: list[str]) -> list[str]:
    """The `--option` names among tokens (`--set=x` -> `--set`)."""
    return [m.group(0) for t in tokens if (m := OPTION.match(t))]


@functools.cache
def help_text(argv: tuple[str, ...]) -> str:
    """stdout of `hb ARGV --help`, run in process; AssertionError unless it exits 0."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        try:
            code = hbsim.cli.main([*argv, "--help"])
        except SystemExit as exc:                  # argparse's --help
            code = exc.code
    assert code in (0, None), f"hb {' '.join(argv)} --help exited {code}"
    return buf.getvalue()


def parser_of(argv: tuple[str, ...]) -> argparse.ArgumentParser:
    """The argparse parser of `hb ARGV` (a grid action: its sub-parser), built as hbsim.cli does."""
    module = importlib.import_module(hbsim.cli.SUBCOMMANDS[argv[0]][0])
    parser = hbsim.cli.ArgumentParser(prog=f"hb {argv[0]}")
    module.add_arguments(parser)
    for action in parser._actions:                   # argparse keeps sub-parsers only here
        if isinstance(action, argparse._SubParsersAction) and len(argv) > 1:
            return action.choices[argv[1]]
    return parser


def stray_words(parser: argparse.ArgumentParser, tokens: list[str]) -> list[str]:
    """Words of a shown line that the parser would refuse: more bare words than its
    positional arguments take, once every option has taken its values."""
    by_flag = {flag: a for a in parser._actions for flag in a.option_strings}
    bare, tokens = [], list(tokens)
    while tokens:
        word = tokens.pop(0)
        action = by_flag.get(word.split("=")[0]) if word.startswith("-") else None
        if action is None:
            if not word.startswith("-"):
                bare.append(word)
            elif tokens and not tokens[0].startswith("-"):
                tokens.pop(0)                        # an unknown option (reported apart) and its value
            continue
        if "=" in word or action.nargs == 0:
            continue
        if action.nargs in (None, 1):
            tokens[:1] = []
        elif action.nargs == "?":
            if tokens and not tokens[0].startswith("-"):
                tokens.pop(0)
        else:                                        # *, +: up to the next option
            while tokens and not tokens[0].startswith("-"):
                tokens.pop(0)
    positional = [a for a in parser._actions if not a.option_strings and not isinstance(a, argparse._SubParsersAction)]
    room = sum(float("inf") if a.nargs in ("*", "+", argparse.REMAINDER) else 1 for a in positional)
    return bare[int(room):] if room < len(bare) else []


def mentions(help_: str, option: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", help_) is not None


def hb_problems(line: str) -> list[str]:
    """What is wrong with one shown `hb ...` line (empty: nothing)."""
    tokens = [t for t in words(line)[1:] if t != "..."]     # `hb --plugin M ...`: a gap, not a word
    problems, globals_ = [], []
    while tokens and tokens[0].startswith("-"):
        word = tokens.pop(0)
        flag = word.split("=")[0]
        globals_.append(flag)
        if flag in GLOBAL_VALUED and "=" not in word and tokens:
            tokens.pop(0)                            # its MODULE
    top = help_text(())
    problems += [f"hb has no global option {g}" for g in globals_ if not mentions(top, g)]
    if not tokens:
        return problems
    command, rest = tokens[0], tokens[1:]
    if command not in hbsim.cli.SUBCOMMANDS:
        return problems + [f"hb has no command {command!r} (commands: {', '.join(hbsim.cli.SUBCOMMANDS)})"]
    argv = [command]
    if command in ACTIONS and rest and not rest[0].startswith("-"):
        if rest[0] not in ACTIONS[command]:
            return problems + [f"hb {command} has no action {rest[0]!r} (actions: {', '.join(ACTIONS[command])})"]
        argv.append(rest.pop(0))
    try:
        help_ = help_text(tuple(argv))
    except AssertionError as exc:
        return problems + [str(exc)]
    problems += [f"hb {' '.join(argv)} has no option {o}" for o in options(rest) if not mentions(help_, o)]
    return problems + [f"hb {' '.join(argv)} takes no argument {w!r} there"
                       for w in stray_words(parser_of(tuple(argv)), rest)]


@functools.cache
def make_targets() -> frozenset[str]:
    text = (ROOT / "Makefile").read_text()
    return frozenset(re.findall(r"^([A-Za-z][\w-]*):", text, re.M))


def script_help(name: str) -> str:
    """--help of a scripts/NAME.py that has an argparse main(argv)."""
    spec = importlib.util.spec_from_file_location(f"scripts_{name}", ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), pytest.raises(SystemExit) as exit_:
        module.main(["--help"])
    assert exit_.value.code == 0
    return buf.getvalue()


def problems_of(line: str) -> list[str]:
    first = line.split()[0]
    if first == "hb":
        return hb_problems(line)
    if first == "make":
        return [f"the Makefile has no target {t!r}" for t in words(line)[1:]
                if not t.startswith("-") and "=" not in t and t not in make_targets()]
    name = Path(line.split()[1]).stem
    if not (ROOT / "scripts" / f"{name}.py").is_file():
        return [f"no scripts/{name}.py"]
    help_ = script_help(name)
    return [f"scripts/{name}.py has no option {o}" for o in options(words(line)[2:]) if not mentions(help_, o)]


PAGES = [README, *DOCS]
CASES = [(page, line) for page in PAGES for line in shown_commands(page.read_text())]


@pytest.mark.parametrize("page,line", CASES, ids=[f"{p.name}:{line}" for p, line in CASES])
def test_every_shown_command_and_option_exists(page, line):
    assert problems_of(line) == [], f"{page.name} shows `{line}`"


def test_the_readme_shows_the_commands_it_promises():
    shown = shown_commands(README.read_text())
    for command in ("make demo", "make test", "hb report", "hb stress", "hb --plugin MODULE", "hb --plugin my_policy",
                    "hb scenarios --check", "hb --plugin my_policy sim --scenario examples/"):
        assert any(line.startswith(command) for line in shown), command
    assert "make test" in (ROOT / ".ci" / "run").read_text()         # the README says CI runs exactly make test


def test_the_readme_extending_examples_are_those_extending_md_runs():
    """docs/EXTENDING.md's own test runs its commands and checks their output; the README's
    Extending section shows only commands from that page."""
    text = README.read_text()
    start = text.index("## Extending")
    end = text.find("\n## ", start + 1)
    section = text[start:end if end >= 0 else len(text)]
    shown = {" ".join(words(line)) for line in shown_commands(section) if not line.startswith("hb --plugin MODULE")}
    tested = {" ".join(words(line)) for line in shown_commands((ROOT / "docs" / "EXTENDING.md").read_text())}
    assert len(shown) >= 4 and shown <= tested, shown - tested


def test_the_checker_catches_what_does_not_exist():
    assert hb_problems("hb nosuch --help") and "no command 'nosuch'" in hb_problems("hb nosuch")[0]
    assert hb_problems("hb sim --env bernoulli --no-such-option 3") == ["hb sim has no option --no-such-option"]
    assert hb_problems("hb grid walk x.toml")
    assert hb_problems("hb --no-such-global sim")
    assert hb_problems("hb sim --env bernoulli --knobs") == []
    assert hb_problems("hb sim --knobs bernoulli") == ["hb sim takes no argument 'bernoulli' there"]
    assert hb_problems("hb grid run GRID.toml --out DIR [--jobs N] [--backend local|ray]") == []
    assert problems_of("make no-such-target") and problems_of("make demo") == []
    assert problems_of("python scripts/readme_figures.py --no-such") and \
        problems_of("python scripts/readme_figures.py --demo D --stress S") == []


def links(text: str) -> list[str]:
    """Markdown link and image targets that are paths in this repository (no URLs)."""
    return [t for t in re.findall(r"\]\(([^)\s]+)\)", text) if not re.match(r"[a-z]+:", t)]


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but - and _ dropped, spaces -> -."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text())
    return {slug(h) for h in re.findall(r"^#+ (.*)$", text, re.M)}


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_every_link_and_picture_resolves(page):
    for target in links(page.read_text()):
        path, _, anchor = target.partition("#")
        file = (page.parent / path) if path else page
        assert file.exists(), f"{page.name} links {target}: no {file.relative_to(ROOT)}"
        if anchor and file.suffix == ".md":
            assert anchor in anchors(file), f"{page.name} links {target}: {file.name} has no heading #{anchor}"


def test_the_readme_links_every_docs_page_and_shows_two_pictures():
    text = README.read_text()
    linked = {Path(t.partition("#")[0]).name for t in links(text)}
    assert {p.name for p in DOCS} <= linked, "a docs page the README's table does not link"
    pictures = re.findall(r"!\[[^\]]*\]\((docs/img/[^)]+\.png)\)", text)
    assert len(pictures) == 2 and all((ROOT / p).stat().st_size > 0 for p in pictures)


def test_the_readme_stays_short():
    lines = README.read_text().count("\n")
    assert lines <= MAX_README_LINES, f"README.md has {lines} lines: move detail into docs/ (at most {MAX_README_LINES})"


def test_the_install_pages_name_every_extra_and_the_python_floor():
    """The README's install section and docs/INSTALL.md's table name every extra of
    pyproject.toml (no more: each backticked extra-like word there is one) and its Python floor."""
    try:
        import tomllib
    except ModuleNotFoundError:          # Python 3.10: the tomli backport (a dependency there)
        import tomli as tomllib
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras, floor = set(project["optional-dependencies"]), project["requires-python"].removeprefix(">=")
    section = README.read_text().split("## Install into your own environment", 1)[1].split("\n## ", 1)[0]
    prose = section.split("```python", 1)[0]
    assert extras <= set(re.findall(r"`([a-z]+)`", prose)), extras - set(re.findall(r"`([a-z]+)`", prose))
    assert f"Python {floor} or newer" in prose
    table = [line.split("|")[1] for line in (ROOT / "docs" / "INSTALL.md").read_text().splitlines()
             if line.startswith("| `")]
    assert set(re.findall(r"`([a-z]+)`", "".join(table))) == extras
    assert f"Python ≥ {floor}" in (ROOT / "docs" / "INSTALL.md").read_text()
