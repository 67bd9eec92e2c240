"""keepalived's configuration grammar: text (and the files it includes) into a tree of
statements, each with the file and line it came from.

What it is
    The rules of keepalived's own reader (``lib/parser.c`` in
    https://github.com/acassen/keepalived, ``read_line``, ``decomment``, ``check_include``),
    written again from that reading:

    - A statement is the words of one line; a ``{`` (on the same line or alone on the next)
      opens a block of statements that a ``}`` closes. Braces need no spaces around them.
    - ``#`` and ``!`` start a comment anywhere outside double quotes; ``\\#`` and ``\\!`` are
      the characters themselves; a ``\\`` at the end of a line continues it on the next.
    - ``"..."`` is one word, spaces included, without its quotes.
    - ``include PATTERN`` (and keepalived's ``includer``/``includem``/``includew``/
      ``includeb``/``includea`` variants) reads every file the glob (with ``{a,b}`` braces)
      matches, in sorted order, in place of the line. A relative pattern is relative to the
      directory of the file that includes it: keepalived changes into that directory while it
      reads a file.

    What keepalived resolves from outside the text is refused here, since the importer cannot
    know it: a line starting ``@id``/``@^id`` (kept or dropped by keepalived's ``-i``
    config id), ``$NAME=`` parameter definitions and their uses, ``~SEQ``/``~LST``. Each is a
    `KaError` naming the file and line.

What it must not do: touch the file system. Reading a file and expanding a glob are the
caller's functions (`Files`), so the grammar is tested on strings.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Iterator
from dataclasses import dataclass

__all__ = ["Files", "KaError", "Stmt", "parse"]

MAX_INCLUDE_DEPTH = 32  # an include loop ends here (keepalived itself has no limit)
INCLUDE_WORDS = frozenset({"include", "includer", "includem", "includew", "includeb", "includea"})


class KaError(Exception):
    """A keepalived config the importer cannot read: ``where`` is ``file:line``."""

    def __init__(self, where: str, message: str) -> None:
        super().__init__(f"{where}: {message}")
        self.where = where


@dataclass(frozen=True)
class Files:
    """How the parser reaches files: ``read(path) -> text`` (raises OSError) and
    ``glob(pattern) -> paths`` (sorted, brace patterns expanded)."""

    read: Callable[[str], str]
    glob: Callable[[str], list[str]]


@dataclass(frozen=True)
class Stmt:
    """One statement: its words, its block (None: it has none) and ``file:line``."""

    words: tuple[str, ...]
    block: tuple[Stmt, ...] | None
    where: str

    @property
    def keyword(self) -> str:
        return self.words[0]

    @property
    def args(self) -> tuple[str, ...]:
        return self.words[1:]


@dataclass(frozen=True)
class _Tok:
    text: str  # a word, "{", "}" or "\n" (end of a line)
    where: str
    quoted: bool = False


def _decomment(line: str, where: str, braces: bool = True) -> tuple[list[tuple[str, bool]], bool]:
    """The words of one physical line (with "quoted" flags) and whether it continues.
    ``braces``: split ``{`` and ``}`` off as words of their own (not on an include line,
    whose glob may hold ``{a,b}``: keepalived checks for ``include`` first)."""
    words: list[tuple[str, bool]] = []
    cur: list[str] = []
    have = False
    quoted = False
    in_quote = False
    i = 0
    while i < len(line):
        ch = line[i]
        if in_quote:
            if ch == '"':
                in_quote = False
            else:
                cur.append(ch)
            i += 1
            continue
        if ch == '"':
            in_quote, have, quoted = True, True, True
        elif ch == "\\":
            if i + 1 == len(line):
                if have:
                    words.append(("".join(cur), quoted))
                return words, True
            cur.append(line[i + 1])  # \# and \! are the characters themselves
            have = True
            i += 1
        elif ch in "#!":
            break
        elif ch == "$" and line[i + 1 : i + 2] == "{":
            end = line.find("}", i)
            end = len(line) - 1 if end < 0 else end
            cur.append(line[i : end + 1])  # ${NAME}: one word, refused by the caller
            have = True
            i = end
        elif ch in " \t\r":
            if have:
                words.append(("".join(cur), quoted))
            cur, have, quoted = [], False, False
        elif ch in "{}" and braces:
            if have:
                words.append(("".join(cur), quoted))
            words.append((ch, False))
            cur, have, quoted = [], False, False
        else:
            cur.append(ch)
            have = True
        i += 1
    if in_quote:
        raise KaError(where, "unterminated quote")
    if have:
        words.append(("".join(cur), quoted))
    return words, False


def _tokens(text: str, name: str, files: Files, depth: int) -> Iterator[_Tok]:
    lines = text.splitlines()
    n = 0
    while n < len(lines):
        where = f"{name}:{n + 1}"
        include = lines[n].split(None, 1)[:1] in ([w] for w in INCLUDE_WORDS)
        words, cont = _decomment(lines[n], where, braces=not include)
        n += 1
        while cont and n < len(lines):
            more, cont = _decomment(lines[n], f"{name}:{n + 1}")
            words += more
            n += 1
        if not words:
            continue
        first = words[0][0]
        if not words[0][1] and first.startswith("@"):
            raise KaError(
                where,
                f"conditional line {first!r}: keepalived keeps or drops it by its -i config "
                "id, which the importer does not know; remove the lines for other nodes first",
            )
        if not words[0][1] and first.startswith("~"):
            raise KaError(where, f"{first}: keepalived's sequences are not supported")
        for word, q in words:
            if not q and "$" in word:
                raise KaError(
                    where,
                    f"parameter {word!r}: keepalived's $NAME definitions are not supported; "
                    "write the values out first",
                )
        if first in INCLUDE_WORDS and not words[0][1]:
            if len(words) != 2:
                raise KaError(where, f"{first} takes one file pattern")
            yield from _include(words[1][0], name, where, files, depth)
            continue
        for word, q in words:
            yield _Tok(word, where, q)
        yield _Tok("\n", where)


def _include(pattern: str, name: str, where: str, files: Files, depth: int) -> Iterator[_Tok]:
    if depth >= MAX_INCLUDE_DEPTH:
        raise KaError(where, f"includes nested more than {MAX_INCLUDE_DEPTH} deep (a loop?)")
    if not pattern.startswith("/"):
        pattern = posixpath.join(posixpath.dirname(name), pattern)
    # keepalived warns and goes on when a pattern matches nothing; so does the importer
    for path in files.glob(pattern):
        try:
            text = files.read(path)
        except OSError as e:
            raise KaError(where, f"cannot read {path}: {e.strerror or e}") from None
        yield from _tokens(text, path, files, depth + 1)


def parse(text: str, name: str, files: Files) -> tuple[Stmt, ...]:
    """The top-level statements of keepalived config ``text`` read from ``name``."""
    toks = list(_tokens(text, name, files, 0))
    pos = 0

    def block(opened: str | None) -> tuple[Stmt, ...]:
        nonlocal pos
        out: list[Stmt] = []
        while True:
            while pos < len(toks) and toks[pos].text == "\n":
                pos += 1
            if pos == len(toks):
                if opened is not None:
                    raise KaError(opened, "'{' is never closed")
                return tuple(out)
            tok = toks[pos]
            if tok.text == "}" and not tok.quoted:
                if opened is None:
                    raise KaError(tok.where, "'}' without a '{'")
                pos += 1
                return tuple(out)
            if tok.text == "{" and not tok.quoted:
                raise KaError(tok.where, "'{' without a keyword before it")
            words: list[str] = []
            where = tok.where
            while pos < len(toks) and (toks[pos].quoted or toks[pos].text not in ("\n", "{", "}")):
                words.append(toks[pos].text)
                pos += 1
            # a "{" on this line, or alone at the start of the next, opens this one's block
            look = pos
            while look < len(toks) and toks[look].text == "\n":
                look += 1
            sub: tuple[Stmt, ...] | None = None
            if look < len(toks) and toks[look].text == "{" and not toks[look].quoted:
                pos = look + 1
                sub = block(where)
            out.append(Stmt(tuple(words), sub, where))

    return block(None)
