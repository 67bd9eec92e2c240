"""keepalived's config grammar (vipd/importers/kaconf.py): the rules of keepalived's own reader
(lib/parser.c in https://github.com/acassen/keepalived), each on a small text, and includes
through an in-memory file system."""

from __future__ import annotations

import fnmatch

import pytest

from vipd.importers.kaconf import Files, KaError, Stmt, parse


def memfs(tree: dict[str, str]) -> Files:
    def read(path: str) -> str:
        if path not in tree:
            raise FileNotFoundError(2, "No such file or directory", path)
        return tree[path]

    def glob(pattern: str) -> list[str]:
        return sorted(p for p in tree if fnmatch.fnmatchcase(p, pattern))

    return Files(read, glob)


NOFS = memfs({})


def shape(stmts: tuple[Stmt, ...]) -> list[object]:
    return [(s.words, None if s.block is None else shape(s.block)) for s in stmts]


def test_blocks_words_and_lines() -> None:
    text = "global_defs {\n  router_id a\n}\nvrrp_instance VI_1 {\n  priority 100\n}\n"
    got = parse(text, "/etc/k.conf", NOFS)
    assert shape(got) == [
        (("global_defs",), [(("router_id", "a"), None)]),
        (("vrrp_instance", "VI_1"), [(("priority", "100"), None)]),
    ]
    assert got[1].where == "/etc/k.conf:4"
    assert got[1].block is not None and got[1].block[0].where == "/etc/k.conf:5"


def test_braces_need_no_spaces_and_may_share_a_line() -> None:
    got = parse("virtual_ipaddress{10.0.0.1 }\nx{\n}\n", "f", NOFS)
    assert shape(got) == [(("virtual_ipaddress",), [(("10.0.0.1",), None)]), (("x",), [])]


def test_a_brace_alone_on_the_next_line_opens_the_block() -> None:
    got = parse("vrrp_instance VI_1\n{\n  priority 5\n}\n", "f", NOFS)
    assert shape(got) == [(("vrrp_instance", "VI_1"), [(("priority", "5"), None)])]


def test_comments_hash_and_bang_outside_quotes() -> None:
    text = '! a comment\npriority 100 # trailing\nscript "/bin/x # not a comment" ! trailing\n'
    got = parse(text, "f", NOFS)
    assert shape(got) == [(("priority", "100"), None), (("script", "/bin/x # not a comment"), None)]


def test_escaped_comment_characters_are_literal() -> None:
    got = parse("auth_pass ab\\#cd\\!\n", "f", NOFS)
    assert got[0].words == ("auth_pass", "ab#cd!")


def test_a_quoted_string_is_one_word_and_quotes_go() -> None:
    got = parse('script "/usr/bin/killall -0 haproxy"\n', "f", NOFS)
    assert got[0].words == ("script", "/usr/bin/killall -0 haproxy")


def test_quoted_braces_are_words() -> None:
    got = parse('notify "/bin/x {a}"\n', "f", NOFS)
    assert got[0].words == ("notify", "/bin/x {a}")


def test_a_trailing_backslash_continues_the_line() -> None:
    got = parse("unicast_peer 10.0.0.1 \\\n  10.0.0.2\npriority 1\n", "f", NOFS)
    assert shape(got) == [
        (("unicast_peer", "10.0.0.1", "10.0.0.2"), None),
        (("priority", "1"), None),
    ]
    assert got[1].where == "f:3"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('script "/bin/x\n', "f:1: unterminated quote"),
        ("a {\n b\n", "f:1: '{' is never closed"),
        ("a\n}\n", "f:2: '}' without a '{'"),
        ("@node1 priority 100\n", "f:1: conditional line '@node1'"),
        ("@^node1 priority 100\n", "f:1: conditional line '@^node1'"),
        ("$VIP=10.0.0.1\n", "f:1: parameter '$VIP=10.0.0.1'"),
        ("virtual_ipaddress {\n ${VIP}\n}\n", "f:2: parameter '${VIP}'"),
        ("~SEQ(i,1,3) x\n", "f:1: ~SEQ(i,1,3): keepalived's sequences"),
        ("include\n", "f:1: include takes one file pattern"),
    ],
)
def test_what_the_reader_refuses(text: str, message: str) -> None:
    with pytest.raises(KaError) as e:
        parse(text, "f", NOFS)
    assert str(e.value).startswith(message), str(e.value)


def test_a_quoted_dollar_is_a_word() -> None:
    got = parse('auth_pass "a$b"\n', "f", NOFS)
    assert got[0].words == ("auth_pass", "a$b")


def test_include_glob_relative_to_the_including_file_in_sorted_order() -> None:
    fs = memfs(
        {
            "/etc/keepalived/conf.d/b.conf": "vrrp_script b {\n script /b\n}\n",
            "/etc/keepalived/conf.d/a.conf": "vrrp_script a {\n script /a\n}\n",
            "/etc/keepalived/conf.d/a.txt": "not included\n",
            "/elsewhere/conf.d/c.conf": "wrong directory\n",
        }
    )
    got = parse("include conf.d/*.conf\nglobal_defs {\n}\n", "/etc/keepalived/keepalived.conf", fs)
    assert [s.words for s in got] == [("vrrp_script", "a"), ("vrrp_script", "b"), ("global_defs",)]
    assert got[0].where == "/etc/keepalived/conf.d/a.conf:1"
    assert got[2].where == "/etc/keepalived/keepalived.conf:2"


def test_a_nested_include_is_relative_to_its_own_file() -> None:
    fs = memfs(
        {
            "/etc/k/sub/one.conf": "include two.conf\n",
            "/etc/k/sub/two.conf": "priority 7\n",
        }
    )
    got = parse("x {\n include sub/one.conf\n}\n", "/etc/k/keepalived.conf", fs)
    assert shape(got) == [(("x",), [(("priority", "7"), None)])]
    assert got[0].block is not None and got[0].block[0].where == "/etc/k/sub/two.conf:1"


def test_an_absolute_include_and_one_matching_nothing() -> None:
    fs = memfs({"/opt/a.conf": "priority 1\n"})
    got = parse("include /opt/a.conf\ninclude /nothing/*.conf\n", "/etc/k.conf", fs)
    assert [s.words for s in got] == [("priority", "1")]


def test_an_include_loop_ends_in_an_error() -> None:
    fs = memfs({"/etc/a.conf": "include a.conf\n"})
    with pytest.raises(KaError, match="nested more than"):
        parse("include a.conf\n", "/etc/k.conf", fs)


def test_an_unreadable_include_names_the_line() -> None:
    def glob(pattern: str) -> list[str]:
        return ["/etc/x.conf"]

    def read(path: str) -> str:
        raise PermissionError(13, "Permission denied", path)

    with pytest.raises(KaError) as e:
        parse("\ninclude x.conf\n", "/etc/k.conf", Files(read, glob))
    assert str(e.value) == "/etc/k.conf:2: cannot read /etc/x.conf: Permission denied"


# -- the converters are pure ---------------------------------------------------------------

PURE_IMPORTERS = [
    "importers/__init__.py",
    "importers/kaconf.py",
    "importers/katables.py",
    "importers/kavalues.py",
    "importers/keepalived.py",
    "importers/kubevip.py",
    "importers/kvrouted.py",
    "importers/render.py",
]


def test_every_importer_module_but_the_command_is_listed() -> None:
    from tests.unit.test_purity import ROOT

    found = {f"importers/{p.name}" for p in (ROOT / "importers").glob("*.py")}
    assert found - set(PURE_IMPORTERS) == {"importers/command.py"}


@pytest.mark.parametrize("module", PURE_IMPORTERS)
def test_the_converters_are_pure(module: str) -> None:
    """As tests/unit/test_purity.py checks the core: no I/O, clock or process module, and
    vipd imports only of pure modules (vipd.config, the other converters)."""
    from tests.unit.test_imports import GRAPH
    from tests.unit.test_purity import FORBIDDEN, PURE, ROOT, imported_modules

    bad = imported_modules(ROOT / module) & FORBIDDEN
    assert not bad, f"{module} imports {sorted(bad)}"

    def dotted(path: str) -> str:
        return "vipd." + path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")

    pure = {dotted(m) for m in PURE + PURE_IMPORTERS}
    assert GRAPH[dotted(module)] - pure - {"vipd"} == set()
