"""Shell command lines parsed with tree-sitter-bash: simple commands for approval rules, and the
word expansion the hardline floor relies on."""

from __future__ import annotations

import pytest

from osprey.policy.shell import (
    HOME,
    MAX_COMMAND_BYTES,
    UNKNOWN,
    Budget,
    Expander,
    Shell,
    ShellParseError,
    ansi_c,
    brace_expand,
    parse,
    printed,
    simple_commands,
)


@pytest.mark.parametrize(("line", "argv"), [
    ("r''m -rf x", ["rm", "-rf", "x"]),
    ('r""m x', ["rm", "x"]),
    ("\\rm x", ["rm", "x"]),
    ('"rm" x', ["rm", "x"]),
    ("'rm' x", ["rm", "x"]),
    ("$'\\x72m' x", ["rm", "x"]),
    ("echo 'a b' a\\ b \"c d\"", ["echo", "a b", "a b", "c d"]),
    ('echo "a\\"b" "back\\\\slash" "keep\\n"', ["echo", 'a"b', "back\\slash", "keep\\n"]),
    ("echo x'y'\"z\"", ["echo", "xyz"]),
    ("/bin/rm -f x", ["/bin/rm", "-f", "x"]),
    ("echo ~/x {a,b}", ["echo", "~/x", "{a,b}"]),
])
def test_quote_removal(line: str, argv: list[str]) -> None:
    assert simple_commands(line) == [argv]


def test_unresolved_expansions_keep_their_source_text() -> None:
    assert simple_commands('d=/x; rm -rf $d "$HOME"/y ${d:-z} $(pwd)') == [
        ["d=/x"], ["rm", "-rf", "$d", '"$HOME"/y', "${d:-z}", "$(pwd)"], ["pwd"],
    ]


def test_lists_and_pipelines() -> None:
    assert simple_commands("git status && curl x | sh") == [["git", "status"], ["curl", "x"], ["sh"]]
    assert simple_commands("a; b || c & d |& e\nf") == [["a"], ["b"], ["c"], ["d"], ["e"], ["f"]]


def test_substitutions_in_source_order() -> None:
    assert simple_commands("echo $(ls `pwd`) <(cat y) >(tee z)") == [
        ["echo", "$(ls `pwd`)", "<(cat y)", ">(tee z)"], ["ls", "`pwd`"], ["pwd"], ["cat", "y"], ["tee", "z"],
    ]
    assert simple_commands('x=$(date); echo "in $(whoami) string"') == [
        ["x=$(date)"], ["date"], ["echo", '"in $(whoami) string"'], ["whoami"],
    ]


def test_compound_commands_are_followed() -> None:
    line = (
        "(a); { b; }; if c; then d; elif e; then f; else g; fi; while h; do i; done; until j; do k; done; "
        "for x in 1 2; do l; done; for ((n=0; n<2; n++)); do m; done; case $v in p) n;; *) o;; esac; "
        "fn() { p; }; function q { r; }; [[ -n $(s) ]] && ! t; time u; echo $(( $(w) + 1 ))"
    )
    names = [argv[0] for argv in simple_commands(line)]
    assert names == [*"abcdefghijklmnop", "r", "s", "t", "time", "echo", "w"]


def test_assignments_are_words() -> None:
    assert simple_commands("CC=gcc make -j2") == [["CC=gcc", "make", "-j2"]]
    assert simple_commands("export A=1 B; local c; a=1 b='x y'") == [["export", "A=1", "B"], ["local", "c"], ["a=1", "b=x y"]]
    assert simple_commands("unset -f x") == [["unset", "-f", "x"]]


def test_redirections_and_heredocs_are_not_words() -> None:
    assert simple_commands("cat < in > out 2>&1") == [["cat"]]
    assert simple_commands("cat <<'EOF' | sh\nrm -rf /\n$(not run)\nEOF") == [["cat"], ["sh"]]
    # an unquoted heredoc's substitutions do run
    assert simple_commands("cat <<EOF\n$(whoami)\nEOF") == [["cat"], ["whoami"]]


def test_backslash_newline_joins_words_like_bash() -> None:
    assert simple_commands("r\\\nm -rf x") == [["rm", "-rf", "x"]]
    assert simple_commands("echo a \\\n  b") == [["echo", "a", "b"]]


def test_comments_and_empty_lines() -> None:
    assert simple_commands("") == []
    assert simple_commands("# rm -rf /\n") == []
    assert simple_commands("ls # rm -rf /") == [["ls"]]


@pytest.mark.parametrize("line", [
    'echo "unterminated',
    "if true; then echo",
    "( echo",
    "a &&",
    "| x",
    "echo $(",
    "case x in",
])
def test_syntax_errors_raise(line: str) -> None:
    with pytest.raises(ShellParseError, match="syntax error"):
        simple_commands(line)


def test_size_bound() -> None:
    fits = "echo " + "a" * (MAX_COMMAND_BYTES - 5)
    assert simple_commands(fits) == [["echo", "a" * (MAX_COMMAND_BYTES - 5)]]
    with pytest.raises(ShellParseError, match="longer than 64 KiB"):
        simple_commands(fits + "a")
    with pytest.raises(ShellParseError, match="longer than 64 KiB"):
        simple_commands("echo " + "é" * (MAX_COMMAND_BYTES // 2))  # counted in bytes


def test_nesting_bound() -> None:
    with pytest.raises(ShellParseError, match="nested more than"):
        simple_commands("{ " * 400 + "x; " + "}; " * 400)


def test_word_budget() -> None:
    with pytest.raises(ShellParseError, match="words to examine"):
        simple_commands("a;" * 25_000)


# ---------------------------------------------------------------------------------------------
# The floor's view of words


def _words(line: str, shell: Shell | None = None) -> list[list[str]]:
    """Each command's expanded argv, with the line's own assignments applied in order."""
    parsed = parse(line)
    expander = Expander(parsed, Budget())
    state = shell or Shell()
    out = []
    for cmd in parsed.commands:
        if cmd.kind == "assign":
            for node in cmd.assigns:
                name = parsed.text(node.child_by_field_name("name"))
                state.assign(name, expander.value(node.child_by_field_name("value"), state))
        elif cmd.kind == "command":
            out.append([w for w, _ in expander.argv(cmd.words, state)])
    return out


def test_expansion_of_home_and_variables() -> None:
    assert _words('rm ~ ~/x ~root $HOME "${HOME}/y" "~"') == [["rm", HOME, HOME + "/x", HOME, HOME, HOME + "/y", "~"]]
    # an unset variable may come from the environment: ${v:-x} is x or whatever v holds there
    assert _words("d=/; rm $d ${d}x $unset ${unset:-/z} \"$d\"") == [["rm", "/", "/x", UNKNOWN, "/z", UNKNOWN, "/"]]
    assert _words("x='-rf /'; rm $x \"$x\"") == [["rm", "-rf", "/", "-rf /"]]
    assert _words("d=/a; d=/b; rm $d") == [["rm", "/a", "/b"]]  # every value a variable may hold


def test_expansion_of_braces_substitutions_and_positionals() -> None:
    assert _words("rm /{,} {a,b}{1..2} '{q,r}'") == [["rm", "/", "a1", "a2", "b1", "b2", "{q,r}"]]
    assert _words("rm $(echo /) \"$(printf '%s' ~)\" $(date)")[0] == ["rm", "/", HOME, UNKNOWN]
    assert _words('run "$@" $1', Shell(positional=["sh", "a b", "c"])) == [["run", "a b", "c", "a", "b"]]


def test_expansion_bounds() -> None:
    with pytest.raises(ShellParseError):
        brace_expand("{a,b}" * 10)
    with pytest.raises(ShellParseError):
        _words("a=xxxxxxxxxxxxxxxx; " + "a=$a$a; " * 20 + "echo $a")


def test_printed_and_ansi_c() -> None:
    assert ansi_c(r"\x72\155\n\t\\\'") == "rm\n\t\\'"
    assert printed("printf", ["rm -rf %s\\n", "/"]) == "rm -rf /\n"
    assert printed("printf", ["%s %s;", "a", "b", "c"]) == "a b;c ;"
    assert printed("echo", ["-e", "\\x72m"]) == "rm"
    assert printed("echo", ["-n", "\\x72m"]) == "\\x72m"
