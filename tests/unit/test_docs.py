"""The documentation stands on its own and matches the code.

What it checks:

- No file under ``vipd/``, ``docs/`` or ``README.md`` points at something a reader of this
  repository cannot open: this project's issue numbers (``issue 3``, ``#12``) or the
  ``seeds/`` and ``shared/`` notes that are not part of it. A public project's issue is a fine
  source when it names the project, written ``kube-vip#748`` or
  ``kubernetes/kubernetes#123`` (project, ``#``, number, no space): that form is allowed, a
  bare ``#748`` or ``issue 748`` is not, because the reader cannot tell whose it is.
- Every relative link in ``README.md`` and ``docs/`` points at a file that exists, and a
  ``#fragment`` at a heading that exists (GitHub's heading anchors).
- ``docs/reference/cli.md`` lists exactly the commands and options of ``vipd``'s argument
  parser, the exit codes defined as ``EXIT_*`` constants outside the lab, and the signals
  the daemon installs handlers for.

The config keys and the metrics are checked against ``docs/reference/config.md`` and
``docs/reference/metrics.md`` by ``test_config.py`` and ``test_metrics.py``.

What it must not do: pass because a pattern found nothing. Each scan asserts that it looked at
a plausible number of files, rows or sections first.
"""

from __future__ import annotations

import argparse
import ast
import inspect
import re
from pathlib import Path
from typing import Any

import pytest

from vipd import cli

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
CLI_DOC = DOCS / "reference" / "cli.md"


# -- no pointers outside the repository ----------------------------------------------------


def checked_files() -> list[Path]:
    files = [ROOT / "README.md"]
    for top in (ROOT / "vipd", DOCS):
        files += sorted(
            p
            for p in top.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
        )
    return files


FORBIDDEN = [
    # "issue 3", "Issue #12", "issues 4 and 5": this project's tracker.
    ("an issue number", re.compile(r"\bissues?\s*#?\d+", re.IGNORECASE)),
    # "#12" not glued to a project name (kube-vip#748 and owner/repo#1 are upstream citations).
    ("a bare #number", re.compile(r"(?<![\w./-])#\d+\b")),
    ("seeds/", re.compile(r"\bseeds/")),
    ("shared/", re.compile(r"\bshared/")),
]


def offences(text: str) -> list[str]:
    found = []
    for n, line in enumerate(text.splitlines(), 1):
        for what, pattern in FORBIDDEN:
            for m in pattern.finditer(line):
                found.append(f"line {n}: {what}: {m.group(0)!r} in {line.strip()[:120]!r}")
    return found


def test_the_patterns_catch_what_they_should_and_nothing_else() -> None:
    bad = [
        "see issue 3 item 2",
        "Issue #12 says",
        "fixed in #12.",
        "(#748, #1236)",
        "seeds/endpoint-contract",
        "shared/reference/keepalived-vrrp.md",
    ]
    good = [
        "kube-vip#748, kube-vip#1236",
        "kubernetes/kubernetes#123",
        "keepalived#1653",
        "[the rule](#the-rule)",
        "colour #1f77b4",
        "# 3 nodes",
        "RFC 9568 §6.4.3",
        "/usr/share/doc",
    ]
    for text in bad:
        assert offences(text), text
    for text in good:
        assert not offences(text), text


def test_enough_files_are_checked() -> None:
    files = checked_files()
    assert sum(p.suffix == ".py" for p in files) >= 40
    assert sum(p.suffix == ".md" for p in files) >= 10


@pytest.mark.parametrize("path", checked_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_issue_numbers_or_outside_notes(path: Path) -> None:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return  # a binary file (an image) cannot cite anything
    found = offences(text)
    assert not found, f"{path.relative_to(ROOT)}:\n" + "\n".join(found)


# -- pointers from the code into the docs --------------------------------------------------

DOC_PATH = re.compile(r"(?<![\w/.-])(docs/[\w/.-]+\.md)")
README_SECTION = re.compile(r"\bREADME\b[,:]?\s+\"([^\"]+)\"")


def pointer_cases() -> list[tuple[Path, str]]:
    cases = []
    for top in ("vipd", "bench", "tests", "scripts"):
        for path in sorted((ROOT / top).rglob("*.py")) + sorted((ROOT / top).glob("*[!.py]")):
            if not path.is_file() or path.suffix not in (".py", "") or path == Path(__file__):
                continue
            text = path.read_text(encoding="utf-8", errors="replace")
            cases += [(path, m) for m in DOC_PATH.findall(text)]
            cases += [
                (path, 'README "{}"'.format(" ".join(m.split())))
                for m in README_SECTION.findall(text)
            ]
    return cases


def test_pointer_patterns() -> None:
    text = 'see docs/design/vrrp.md and README "Lease election", not mydocs/x.md'
    assert DOC_PATH.findall(text) == ["docs/design/vrrp.md"]
    assert README_SECTION.findall(text) == ["Lease election"]


@pytest.mark.parametrize(
    ("path", "pointer"),
    pointer_cases(),
    ids=[f"{p.relative_to(ROOT)}->{t}" for p, t in pointer_cases()],
)
def test_code_points_at_docs_that_exist(path: Path, pointer: str) -> None:
    """A docstring or comment that sends the reader to a doc names one that is there."""
    if pointer.startswith("README "):
        heading = pointer.removeprefix('README "').removesuffix('"')
        assert slug(heading) in anchors(ROOT / "README.md"), (
            f"{path.relative_to(ROOT)} points at the README section {heading!r}, which is not "
            "there any more: point at the page under docs/ that has it"
        )
    else:
        assert (ROOT / pointer).is_file(), f"{path.relative_to(ROOT)} points at {pointer}"


# -- relative links ------------------------------------------------------------------------

FENCE = re.compile(r"^(```|~~~).*?^\1\s*$", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"`[^`\n]*`")
INLINE_LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REF_LINK = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$", re.MULTILINE)
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$", re.MULTILINE)


def markdown_files() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def strip_code(text: str) -> str:
    return CODE_SPAN.sub("", FENCE.sub("", text))


def links(text: str) -> list[str]:
    body = strip_code(text)
    return INLINE_LINK.findall(body) + REF_LINK.findall(body)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup and punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = text.lower().strip()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for _, heading in HEADING.findall(FENCE.sub("", path.read_text(encoding="utf-8"))):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def test_slug_is_githubs() -> None:
    assert slug("`vipd status`") == "vipd-status"
    assert slug("Metrics and health") == "metrics-and-health"
    assert slug("Kubernetes: from `kubeadm init` to a DaemonSet") == (
        "kubernetes-from-kubeadm-init-to-a-daemonset"
    )
    assert slug("Replacing kube-vip") == "replacing-kube-vip"


def test_link_pattern_finds_links_and_skips_code() -> None:
    text = (
        'See [a](docs/a.md) and ![p](img.png "t") and [b](https://x.org).\n'
        "`[not](a-link.md)`\n```\n[neither](no.md)\n```\n[ref]: docs/b.md#part\n"
    )
    assert links(text) == ["docs/a.md", "img.png", "https://x.org", "docs/b.md#part"]


def link_cases() -> list[tuple[Path, str]]:
    cases = []
    for path in markdown_files():
        for target in links(path.read_text(encoding="utf-8")):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
                continue
            cases.append((path, target))
    return cases


def test_the_docs_link_to_each_other() -> None:
    cases = link_cases()
    assert len(markdown_files()) >= 10
    assert len(cases) >= 30, cases
    readme_targets = {t.split("#")[0] for p, t in cases if p.name == "README.md"}
    for doc in markdown_files()[1:]:
        rel = str(doc.relative_to(ROOT))
        linked = rel in readme_targets or any(
            (p.parent / t.split("#")[0]).resolve() == doc.resolve()
            for p, t in cases
            if p != doc and t.split("#")[0]
        )
        assert linked, f"nothing links to {rel}"


@pytest.mark.parametrize(
    ("path", "target"),
    link_cases(),
    ids=[f"{p.relative_to(ROOT)}->{t}" for p, t in link_cases()],
)
def test_relative_link_resolves(path: Path, target: str) -> None:
    file_part, _, fragment = target.partition("#")
    dest = (path.parent / file_part).resolve() if file_part else path
    assert dest.exists(), f"{path.relative_to(ROOT)}: {target}: no such file"
    assert ROOT in dest.parents or dest == ROOT, f"{target} leaves the repository"
    if fragment and dest.suffix == ".md":
        assert fragment in anchors(dest), (
            f"{path.relative_to(ROOT)}: {target}: no heading with anchor #{fragment} in "
            f"{dest.relative_to(ROOT)}"
        )


# -- the CLI reference ---------------------------------------------------------------------


def cli_sections() -> dict[str, str]:
    """``vipd NAME`` -> the text of its section (``## `vipd NAME` `` to the next ``## ``)."""
    text = CLI_DOC.read_text(encoding="utf-8")
    parts = re.split(r"^## ", text, flags=re.MULTILINE)
    out = {}
    for part in parts[1:]:
        title, _, body = part.partition("\n")
        m = re.fullmatch(r"`vipd ([a-z]+)`", title.strip())
        if m:
            out[m.group(1)] = body
    return out


def doc_section(title: str) -> str:
    text = CLI_DOC.read_text(encoding="utf-8")
    m = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.MULTILINE | re.DOTALL)
    assert m, f"docs/reference/cli.md has no '## {title}' section"
    return m.group(1)


def full_parser() -> argparse.ArgumentParser:
    """vipd's parser with the lab's options in it (the daemon's own parser may leave them out
    so that ``vipd run`` never imports the lab): whichever way ``build_parser`` takes them."""
    from vipd.lab import runner

    default = inspect.signature(cli.build_parser).parameters["lab_arguments"].default
    lab: Any = runner.add_arguments if default is None else True
    return cli.build_parser(lab_arguments=lab)


def subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = full_parser()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise AssertionError("vipd has no subcommands")


def test_every_command_has_a_section_and_every_section_a_command() -> None:
    commands = subparsers()
    assert {"run", "check", "status", "lab", "manifest", "adopt", "version"} <= set(commands)
    assert set(cli_sections()) == set(commands)


def options_of(parser: argparse.ArgumentParser) -> set[str]:
    return {
        opt
        for action in parser._actions
        if not isinstance(action, argparse._HelpAction)
        for opt in action.option_strings
    }


def test_top_level_options_are_documented() -> None:
    parser = cli.build_parser()
    top = options_of(parser)
    section = doc_section("Every command")
    for opt in top:
        assert f"`{opt}`" in section, opt
    for opt in re.findall(r"^\| `(-[\w-]+)`", section, re.MULTILINE):
        assert opt in top, f"the docs list {opt}, which vipd does not have"


@pytest.mark.parametrize("command", sorted(subparsers()))
def test_every_option_is_documented_and_exists(command: str) -> None:
    parser = subparsers()[command]
    section = cli_sections()[command]
    # An option row: | `--config`, `-c` | ... — its first cell names the option's strings.
    rows = re.findall(r"^\| ((?:`-[\w-]+`(?:, )?)+) \|", section, re.MULTILINE)
    documented = {opt for row in rows for opt in re.findall(r"`(-[\w-]+)`", row)}
    assert documented == options_of(parser), (
        f"vipd {command}: documented {sorted(documented)}, parser has {sorted(options_of(parser))}"
    )
    for action in parser._actions:
        if action.option_strings or isinstance(action, argparse._HelpAction):
            continue
        # A positional (manifest's kind): every choice is named in the section.
        for choice in action.choices or ():
            assert f"`{choice}`" in section, (command, choice)


def production_modules() -> list[Path]:
    return [p for p in sorted((ROOT / "vipd").rglob("*.py")) if "lab" not in p.parts]


def exit_constants() -> set[tuple[str, int]]:
    """(name, value) of every module-level ``EXIT_* = <int>`` outside the lab."""
    found: dict[str, set[int]] = {}
    for path in production_modules():
        for node in ast.parse(path.read_text()).body:
            if (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id.startswith("EXIT_")
                and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, int)
            ):
                found.setdefault(node.targets[0].id, set()).add(node.value.value)
    for name, values in found.items():
        # One name, one meaning: the docs' table could not say which value is meant otherwise.
        assert len(values) == 1, (name, values)
    return {(name, value) for name, (value,) in ((n, tuple(v)) for n, v in found.items())}


def test_every_exit_code_is_documented() -> None:
    constants = exit_constants()
    assert {("EXIT_CONFIG", 2), ("EXIT_LISTEN", 3)} <= constants, constants
    section = doc_section("Exit codes")
    rows = set(re.findall(r"^\| `(\d+)` \| `(EXIT_[A-Z_]+)` \|", section, re.MULTILINE))
    documented = {(name, int(code)) for code, name in rows}
    assert documented == constants


def handled_signals() -> set[str]:
    """Signals named in any function that installs a signal handler, and in module constants
    named ``*_SIGNALS`` (the signals a thread waits for), outside the lab."""
    found = set()
    for path in production_modules():
        tree = ast.parse(path.read_text())
        for stmt in tree.body:
            if isinstance(stmt, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id.endswith("_SIGNALS") for t in stmt.targets
            ):
                found |= {
                    node.attr
                    for node in ast.walk(stmt)
                    if isinstance(node, ast.Attribute) and re.fullmatch(r"SIG[A-Z0-9]+", node.attr)
                }
        for func in ast.walk(tree):
            if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            installs = any(
                isinstance(call, ast.Call)
                and isinstance(call.func, ast.Attribute)
                and (
                    call.func.attr == "add_signal_handler"
                    or (
                        call.func.attr == "signal"
                        and isinstance(call.func.value, ast.Name)
                        and call.func.value.id == "signal"
                    )
                )
                for call in ast.walk(func)
            )
            if installs:
                found |= {
                    node.attr
                    for node in ast.walk(func)
                    if isinstance(node, ast.Attribute) and re.fullmatch(r"SIG[A-Z0-9]+", node.attr)
                }
    return found


def test_every_handled_signal_is_documented() -> None:
    signals = handled_signals()
    assert "SIGTERM" in signals, signals
    section = doc_section("Signals")
    documented = set(re.findall(r"^\| `(SIG[A-Z0-9]+)` \|", section, re.MULTILINE))
    assert documented == signals


# -- the module map of docs/design/architecture.md -----------------------------------------

ARCH_DOC = DOCS / "design" / "architecture.md"
PACKAGE = ROOT / "vipd"
MAP_ENTRY = re.compile(r"^  (\S+)(.*)$")
PY_NAME = re.compile(r"\b\w+\.py\b")
# A path in backticks: a file or a package, from the repository's root or from vipd/.
PATH_IN_TICKS = re.compile(r"`((?:[\w.-]+/)*[\w.-]+(?:\.py|/))`")
ROOT_DIRS = ("vipd/", "tests/", "bench/", "scripts/", "docs/")


def layout_map(text: str) -> dict[str, str]:
    """The ``## Layout`` block as ``{package: its entry's text}``: ``""`` holds the top-level
    module names, ``"vrrp/driver/"`` the text of that package's entry (continuation lines
    included), which names its modules and its subpackages (``manifest/``)."""
    m = re.search(r"^## Layout\n+```\nvipd/\n(.*?)^```", text, re.MULTILINE | re.DOTALL)
    assert m, "docs/design/architecture.md has no ## Layout block starting with vipd/"
    entries: dict[str, str] = {"": ""}
    current: str | None = None
    for line in m.group(1).splitlines():
        entry = MAP_ENTRY.match(line)
        if entry:
            name, rest = entry.groups()
            if name.endswith("/"):
                current = name
                entries[current] = rest
            else:
                current = None
                entries[""] += f" {name}"
        elif current is not None:
            entries[current] += f" {line.strip()}"
    return entries


def map_problems(text: str, package: Path) -> list[str]:
    """What the map names that is not in ``package``, and the modules of ``package`` outside
    its ``lab/`` that the map does not name."""
    entries = layout_map(text)
    problems = [
        f"vipd/{name} is in the map but not in the tree"
        for name in entries[""].split()
        if not (package / name).is_file()
    ]
    for pkg, body in entries.items():
        if not pkg:
            continue
        if not (package / pkg).is_dir():
            problems.append(f"vipd/{pkg} is in the map but not in the tree")
            continue
        problems += [
            f"vipd/{pkg}...{name} is in the map but not in the tree"
            for name in PY_NAME.findall(body)
            if not any((package / pkg).rglob(name))
        ]
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package)
        if "__pycache__" in rel.parts or rel.parts[0] == "lab":
            continue
        if len(rel.parts) == 1:
            if rel.name != "__init__.py" and rel.name not in entries[""].split():
                problems.append(f"vipd/{rel} is not in the map")
            continue
        folder = rel.parent.as_posix() + "/"
        owners = [p for p in entries if p and folder.startswith(p)]
        if not owners:
            problems.append(f"vipd/{folder} (with {rel.name}) is not in the map")
            continue
        owner = max(owners, key=len)
        body = entries[owner]
        sub = folder.removeprefix(owner)
        if sub and sub not in body:
            problems.append(f"vipd/{folder} is not in the map's entry for vipd/{owner}")
        elif rel.name != "__init__.py" and rel.name not in PY_NAME.findall(body):
            problems.append(f"vipd/{rel} is not in the map")
    return problems


def path_problems(text: str, root: Path) -> list[str]:
    """Every path the document names in backticks is there: from the repository's root when
    it starts at a top-level directory, else from vipd/ (a bare file name: anywhere in it)."""
    problems = []
    for token in sorted(set(PATH_IN_TICKS.findall(text))):
        if token.startswith(ROOT_DIRS):
            found = (root / token).exists()
        elif "/" in token.rstrip("/"):
            found = (root / "vipd" / token).exists()
        else:
            found = any((root / "vipd").rglob(token.rstrip("/")))
        if not found:
            problems.append(f"`{token}` names nothing in the tree")
    return problems


def test_the_map_check_can_fail() -> None:
    text = ARCH_DOC.read_text(encoding="utf-8")
    assert not map_problems(text, PACKAGE)
    gone = text.replace("  cli.py ", "  clix.py ", 1).replace(" members.py ", " memberz.py ", 1)
    found = map_problems(gone, PACKAGE)
    assert "vipd/clix.py is in the map but not in the tree" in found, found
    assert "vipd/cli.py is not in the map" in found, found
    assert "vipd/vrrp/driver/members.py is not in the map" in found, found
    assert any("memberz.py" in p for p in found), found
    renamed = text.replace("`vipd/lease/watch.py`", "`vipd/lease/watcher.py`", 1)
    assert renamed != text
    assert path_problems(renamed, ROOT) == ["`vipd/lease/watcher.py` names nothing in the tree"]


def test_the_module_map_is_the_tree() -> None:
    """Every module and package the map names exists, and every product module (anything
    outside vipd/lab/) is named in it."""
    text = ARCH_DOC.read_text(encoding="utf-8")
    entries = layout_map(text)
    assert len(entries[""].split()) >= 25 and len(entries) >= 15, entries
    modules = [p for p in PACKAGE.rglob("*.py") if "lab" not in p.relative_to(PACKAGE).parts]
    assert len(modules) >= 100
    problems = map_problems(text, PACKAGE)
    assert not problems, "docs/design/architecture.md's map:\n" + "\n".join(problems)


def test_the_architecture_names_only_files_that_exist() -> None:
    text = ARCH_DOC.read_text(encoding="utf-8")
    assert len(PATH_IN_TICKS.findall(text)) >= 100
    problems = path_problems(text, ROOT)
    assert not problems, "docs/design/architecture.md:\n" + "\n".join(problems)
