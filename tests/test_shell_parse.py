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
    coverage_hazard,
    parse,
    printed,
    simple_commands,
    substitution_texts,
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
    assert names == [*"abcdefghijk", "for", "l", "for", "m", *"nop", "r", "s", "t", "time", "echo", "w"]


def test_assignments_are_words() -> None:
    assert simple_commands("CC=gcc make -j2") == [["CC=gcc", "make", "-j2"]]
    assert simple_commands("export A=1 B; local c; a=1 b='x y'") == [["export", "A=1", "B"], ["local", "c"], ["a=1", "b=x y"]]
    assert simple_commands("unset -f x") == [["unset", "-f", "x"]]


def test_redirections_and_heredocs_are_not_words() -> None:
    assert simple_commands("cat < in > out 2>&1") == [["cat"]]
    assert simple_commands("cat <<'EOF' | sh\nrm -rf /\n$(not run)\nEOF") == [["cat"], ["sh"]]
    # an unquoted heredoc's substitutions do run
    assert simple_commands("cat <<EOF\n$(whoami)\nEOF") == [["cat"], ["whoami"]]


def test_loop_headers_are_listed() -> None:
    assert simple_commands("for PATH in ./bin 'a b'; do git status; done") == [["for", "PATH", "in", "./bin", "a b"], ["git", "status"]]
    assert simple_commands("select x in a; do b; done") == [["select", "x", "in", "a"], ["b"]]
    assert simple_commands("for x; do b; done") == [["for", "x"], ["b"]]
    assert simple_commands("for ((i=0; i<2; i++)); do b; done") == [["for", "((", "i=0; i<2; i++", "))"], ["b"]]


@pytest.mark.parametrize(("line", "inner"), [
    ("cat <<EOF\nhello `touch a` x\nEOF", [["touch", "a"]]),
    ("cat <<-EOF\n\t`touch a`\nEOF", [["touch", "a"]]),
    ("cat <<EOF\n'`touch a`'\nEOF", [["touch", "a"]]),
    ("cat <<EOF\n${x:-`touch a`}\nEOF", [["touch", "a"]]),
    ("cat <<EOF\n\"${x:-'$(touch a)'}\"\nEOF", [["touch", "a"]]),
    ("echo ${x:-`touch a`}", [["touch", "a"]]),
    ("echo \"${x:-`touch a`}\"", [["touch", "a"]]),
    ("echo ${x:=`touch a`} ${x#`touch b`} ${x/`touch c`/d} ${x^^`touch e`}", [["touch", "a"], ["touch", "b"], ["touch", "c"], ["touch", "e"]]),
    ("echo \"${x:-'$(touch a)'}\"", [["touch", "a"]]),
    ("echo ${x:-${y:-`touch a`}}", [["touch", "a"]]),
    ("echo `echo \\`touch a\\``", [["echo", "`touch a`"], ["touch", "a"]]),
])
def test_substitutions_left_as_text_are_parsed_again(line: str, inner: list[list[str]]) -> None:
    parsed = parse(line)
    assert parsed.hidden(), line
    listed = simple_commands(line)
    assert listed[-len(inner):] == inner
    assert coverage_hazard(parsed) is not None


@pytest.mark.parametrize("line", [
    "cat <<'EOF'\n`touch a` $(touch b)\nEOF",
    "cat <<\"EOF\"\n`touch a`\nEOF",
    "cat <<\\EOF\n`touch a`\nEOF",
    "cat <<EOF\n\\`touch a\\`\nEOF",
    "echo ${x:-'$(touch a)'} '`touch b`' \"\\`touch c\\`\"",
    "echo $(touch a) `touch b` \"$(touch c)\" $(( 1 + $(touch d) ))",  # parsed by the grammar itself
    "# `touch a`",
])
def test_text_bash_does_not_run_hides_nothing(line: str) -> None:
    assert parse(line).hidden() == []


def test_hidden_substitutions_are_bounded() -> None:
    with pytest.raises(ShellParseError, match="more than 64"):
        parse("echo " + " ".join("${x:-`a`}" for _ in range(70))).hidden()
    nested = "touch a"
    for depth in range(1, 8):
        nested = "echo `" + nested.replace("\\", "\\\\").replace("`", "\\`") + "`"
        if depth <= 5:  # the outer backticks are parsed; the escaped ones inside are found 4 deep
            assert simple_commands(nested)[-1] == ["touch", "a"]
    with pytest.raises(ShellParseError, match="levels deep"):
        simple_commands(nested)


def test_substitution_texts() -> None:
    assert substitution_texts("a[$(touch a)] `touch b` \\`c\\` $((1+2)) $(x $(y) ')' z)") == ["touch a", "touch b", "x $(y) ')' z"]
    assert substitution_texts("no code here") == []


@pytest.mark.parametrize(("line", "why"), [
    ("git diff ${x@P}", "prompt expansion"),
    ("git diff ${!x}", "indirect"),
    ("echo ${x:=y}", "assigns"),
    ("echo ${a[i]}", "subscript"),
    ("echo $((x + 1))", "arithmetic"),
    ("echo ${x:n}", "offset"),
    ("[[ $x -gt 1 ]]", "test"),
    ("printf -v 'a[1]' x", "variable name"),
    ("read \"$name\"", "variable name"),
    ("mapfile -C f a", "callback"),
    ("git status {fd}>/dev/null", "assigns a variable"),
    ("echo 'a `b`'", "backtick"),
    ("echo a\\$\\(b\\)", "`$(`"),
])
def test_coverage_hazards_say_why(line: str, why: str) -> None:
    reason = coverage_hazard(parse(line))
    assert reason is not None and why in reason, reason


@pytest.mark.parametrize("line", [
    "git status", "git diff HEAD~1 -- a.py", "echo $HOME ${x:-y} ${#x} ${x@Q} $((1+2)) ${a[0]} ${a[@]}",
    "printf '%s\\n' \"$x\"", "read -r line", "declare -a xs=(1 2)", "[[ -f x && $y == z ]]", "(( 1 ))",
    "for x in a; do echo $x; done", "echo $(git rev-parse HEAD)",
])
def test_ordinary_lines_have_no_coverage_hazard(line: str) -> None:
    assert coverage_hazard(parse(line)) is None


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
