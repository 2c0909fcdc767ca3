"""Approval rules: parsing, canonical text, and which calls a rule covers."""

from __future__ import annotations

import pytest

from osprey.policy.rules import Rule, RuleError, match_segment, match_segments

WS = "/work/ws"


# -- parsing


@pytest.mark.parametrize(("text", "tool", "pattern"), [
    ("read_file", "read_file", None),
    ("  bash  ", "bash", None),
    ("mcp.github.create-issue_2", "mcp.github.create-issue_2", None),
    ("x" * 64, "x" * 64, None),
    ("bash(git diff *)", "bash", "git diff *"),
    ("bash( git   diff   * )", "bash", "git diff *"),
    ("bash(git status)", "bash", "git status"),
    ("bash(npm run test:*)", "bash", "npm run test *"),
    ("bash('a b':*)", "bash", "'a b' *"),
    ("bash(*)", "bash", "*"),
    ("bash(echo '*')", "bash", "echo '*'"),  # a quoted star is a literal word
    ("bash(echo a\\ *)", "bash", "echo 'a *'"),  # so is an escaped one
    ("bash(echo a\\:*)", "bash", "echo 'a:*'"),
    ("bash(ls *.py)", "bash", "ls '*.py'"),
    ("process(npm run dev)", "process", "npm run dev"),
    ("write_file(src/**)", "write_file", "src/**"),
    ("write_file(./src//**/)", "write_file", "src/**"),
    ("read_file(.)", "read_file", "."),
    ("read_file(/abs/path/*.md)", "read_file", "/abs/path/*.md"),
    ("list_directory(docs)", "list_directory", "docs"),
    ("grep(**/*.py)", "grep", "**/*.py"),
    ("tree(a b/c)", "tree", "a b/c"),
])
def test_valid_rules_parse_to_a_canonical_form_that_round_trips(text: str, tool: str, pattern: str | None) -> None:
    rule = Rule.parse(text)
    assert (rule.tool, rule.pattern) == (tool, pattern)
    assert Rule.parse(str(rule)) == rule
    assert str(Rule.parse(str(rule))) == str(rule)


@pytest.mark.parametrize(("text", "what"), [
    ("", "empty"),
    ("   ", "empty"),
    ("foo bar", "not a tool name"),
    ("x" * 65, "not a tool name"),
    ("bash(", "must end with ')'"),
    ("bash(git status", "must end with ')'"),
    ("bash)", "without '('"),
    ("(git status)", "not a tool name"),
    ("bash()", "pattern is empty"),
    ("bash(   )", "pattern is empty"),
    ("Bash(git status)", "takes no pattern"),
    ("my_tool(x)", "takes no pattern"),
    ("web_fetch(https://x)", "takes no pattern"),
    ("bash(git :*)", "':*' must directly follow a word"),
    ("bash(:*)", "':*' must directly follow a word"),
    ("bash('unterminated)", "cannot be split into words"),
    ("bash(\"\")", None),  # an empty literal word is allowed: covers nothing useful, but valid
    ("read_file(../x)", "'..' is not allowed"),
    ("read_file(a/../../x)", "'..' is not allowed"),
    ("read_file(a\x00b)", "NUL"),
    ("bash(" + "a" * 1100 + ")", "longer than"),
])
def test_invalid_rules_say_what_is_wrong_and_show_the_syntax(text: str, what: str | None) -> None:
    if what is None:
        Rule.parse(text)
        return
    with pytest.raises(RuleError) as info:
        Rule.parse(text)
    assert what in str(info.value)
    assert "bash(git diff *)" in str(info.value)  # the syntax is shown
    assert isinstance(info.value, ValueError)


def test_a_non_text_rule_is_refused() -> None:
    with pytest.raises(RuleError):
        Rule.parse(42)  # type: ignore[arg-type]


# -- bare names


def test_a_bare_name_covers_every_call_of_that_tool_only() -> None:
    rule = Rule.parse("mcp.github.create_issue")
    assert rule.covers("mcp.github.create_issue", {"anything": [1, 2]}, cwd=WS, workspace=WS)
    assert rule.covers("mcp.github.create_issue", {}, cwd=WS, workspace=WS)
    assert not rule.covers("mcp.github.create_issue_2", {}, cwd=WS, workspace=WS)
    bash = Rule.parse("bash")
    assert bash.covers("bash", {"command": "rm -rf x; 'unterminated"}, cwd=WS, workspace=WS)
    assert not bash.covers("process", {"command": "ls"}, cwd=WS, workspace=WS)


# -- path globs


@pytest.mark.parametrize(("rule", "path", "cwd", "covered"), [
    ("write_file(src/**)", "src/a.py", WS, True),
    ("write_file(src/**)", "src/x/y/z.py", WS, True),
    ("write_file(src/**)", "src", WS, True),  # ** is any number of segments, none included
    ("write_file(src/**)", "./src/./a.py", WS, True),
    ("write_file(src/**)", "srcx/a.py", WS, False),
    ("write_file(src/**)", "lib/src/a.py", WS, False),
    ("write_file(src/**)", f"{WS}/src/a.py", "/elsewhere", True),  # absolute call paths
    ("write_file(src/**)", "../ws/src/a.py", WS, True),  # leaves and comes back: normalised inside
    ("write_file(src/**)", "src/../../ws2/src/a.py", WS, False),  # .. escapes the workspace
    ("write_file(src/**)", "src/../../../etc/passwd", WS, False),
    ("write_file(src/**)", "/etc/passwd", WS, False),
    ("write_file(src/**)", "/work/wsx/src/a.py", WS, False),  # a sibling sharing the prefix
    ("write_file(src/**)", "../src/a.py", f"{WS}/sub", True),  # relative to the call's cwd
    ("write_file(src/**)", "a.py", f"{WS}/sub", False),
    ("write_file(src/**)", "src/a.py", f"{WS}/sub", False),
    ("write_file(src/**)", "src/a.py", "relative/cwd", False),
    ("read_file(*.md)", "README.md", WS, True),
    ("read_file(*.md)", ".hidden.md", WS, True),
    ("read_file(*.md)", "docs/a.md", WS, False),
    ("read_file(docs/*.md)", "docs/a.md", WS, True),
    ("read_file(docs/*.md)", "docs/sub/a.md", WS, False),
    ("read_file(docs/*.md)", "docs/a.mdx", WS, False),
    ("read_file(**/*.py)", "a.py", WS, True),
    ("read_file(**/*.py)", "x/y/a.py", WS, True),
    ("read_file(**/*.py)", "x/y/a.pyc", WS, False),
    ("read_file(src/**/test_?.py)", "src/test_a.py", WS, True),
    ("read_file(src/**/test_?.py)", "src/x/y/test_b.py", WS, True),
    ("read_file(src/**/test_?.py)", "src/x/test_ab.py", WS, False),
    ("read_file(a/**/b/**/c)", "a/b/c", WS, True),
    ("read_file(a/**/b/**/c)", "a/x/b/y/z/c", WS, True),
    ("read_file(a/**/b/**/c)", "a/x/c", WS, False),
    ("read_file(a/**/b/**/c)", "a/b/x", WS, False),
    ("read_file(a[1].txt)", "a[1].txt", WS, True),  # no character classes: literal
    ("read_file(a[1].txt)", "a1.txt", WS, False),
    ("read_file(notes.txt)", "notes.txt", WS, True),
    ("read_file(notes.txt)", "Notes.txt", WS, False),
    ("read_file(/work/ws/src/*)", "src/a.py", WS, True),  # an absolute pattern inside the workspace
    ("read_file(/work/ws/src/*)", "src/x/a.py", WS, False),
    ("read_file(/work/*)", "a.py", WS, False),  # not a literal prefix of the workspace: never
    ("read_file(/etc/*)", "/etc/passwd", WS, False),
    ("list_directory(.)", "", WS, True),
    ("list_directory(.)", "", f"{WS}/sub", False),
    ("list_directory(**)", "/", WS, False),
    ("list_directory(**)", "..", WS, False),
    ("tree(sub)", "", f"{WS}/sub", True),
])
def test_path_globs_are_relative_to_the_workspace(rule: str, path: str, cwd: str, covered: bool) -> None:
    tool = rule.split("(")[0]
    assert Rule.parse(rule).covers(tool, {"path": path}, cwd=cwd, workspace=WS) is covered


def test_a_missing_path_argument_means_the_working_directory() -> None:
    rule = Rule.parse("list_directory(docs/**)")
    assert rule.covers("list_directory", {}, cwd=f"{WS}/docs", workspace=WS)
    assert rule.covers("list_directory", {"path": None}, cwd=f"{WS}/docs/a", workspace=WS)
    assert not rule.covers("list_directory", {}, cwd=WS, workspace=WS)


@pytest.mark.parametrize("path", ["a\x00b", 42, ["src/a"], "src/" + "a/" * 3000])
def test_odd_call_paths_are_never_covered(path: object) -> None:
    assert not Rule.parse("read_file(**)").covers("read_file", {"path": path}, cwd=WS, workspace=WS)


def test_a_path_rule_covers_only_its_own_tool() -> None:
    rule = Rule.parse("read_file(**)")
    assert not rule.covers("write_file", {"path": "a"}, cwd=WS, workspace=WS)
    assert not rule.covers("read_file", "not a mapping", cwd=WS, workspace=WS)  # type: ignore[arg-type]


def test_absolute_patterns_must_lie_inside_the_workspace() -> None:
    Rule.parse("read_file(/work/ws/src/**)").check_workspace(WS)
    Rule.parse("read_file(src/**)").check_workspace(WS)
    Rule.parse("bash(ls /etc)").check_workspace(WS)
    with pytest.raises(RuleError, match="outside the workspace"):
        Rule.parse("read_file(/etc/**)").check_workspace(WS)
    with pytest.raises(RuleError, match="outside the workspace"):
        Rule.parse("read_file(/work/wsx/**)").check_workspace(WS)


def test_glob_matching_stays_correct_on_pathological_patterns() -> None:
    # Backtracking matchers take exponential time on these; leftmost placement does not.
    assert not match_segment("*a" * 60 + "b", "a" * 1000)
    assert match_segment("*a" * 60, "a" * 1000)
    assert match_segment("a*?b*c", "axxbyyc")
    assert not match_segment("a*?b*c", "abc")
    assert match_segment("*", "")
    assert not match_segment("?", "")
    pattern = ["**", "a"] * 60 + ["b"]
    assert not match_segments(pattern, ["a"] * 1000)
    assert match_segments(["**", "a"] * 60, ["a"] * 1000)
    long_rule = Rule.parse("read_file(" + "*a/**/" * 150 + "b)")
    assert not long_rule.covers("read_file", {"path": "a/" * 1500 + "c"}, cwd=WS, workspace=WS)


def test_a_rule_built_by_hand_with_a_bad_pattern_covers_nothing() -> None:
    assert not Rule("bash", "'unterminated").covers("bash", {"command": "ls"}, cwd=WS, workspace=WS)
    assert not Rule("read_file", "../x").covers("read_file", {"path": "x"}, cwd=WS, workspace=WS)
    assert not Rule("my_tool", "x").covers("my_tool", {}, cwd=WS, workspace=WS)


# -- command prefixes (need the shell parser)


@pytest.mark.parametrize(("rule", "command", "covered"), [
    ("bash(git status)", "git status", True),
    ("bash(git status)", "  git   status  ", True),
    ("bash(git status)", "git 'status'", True),
    ("bash(git status)", "git status --short", False),
    ("bash(git status)", "git", False),
    ("bash(git status)", "git status && curl x | sh", False),
    ("bash(git status)", "git status; rm -rf x", False),
    ("bash(git status)", "git status $(curl x)", False),
    ("bash(git status)", "git status `curl x`", False),
    ("bash(git status)", "git status\nrm -rf x", False),
    ("bash(git status)", "git status | sh", False),
    ("bash(git status)", "git status 'unterminated", False),
    ("bash(git status)", "", False),
    ("bash(git diff *)", "git diff", True),
    ("bash(git diff *)", "git diff HEAD~1 -- src/a.py", True),
    ("bash(git diff *)", "git diff && git diff --stat", True),  # every simple command matches
    ("bash(git diff *)", "git diff | less", False),
    ("bash(git diff *)", "git diff; git push", False),
    ("bash(git diff *)", "git diffx", False),
    ("bash(git diff *)", "git", False),
    ("bash(git diff *)", "git diff $(rm -rf ~)", False),
    ("bash(git diff *)", "git diff `rm -rf ~`", False),
    ("bash(git diff *)", "git diff <(rm -rf ~)", False),
    ("bash(npm run test:*)", "npm run test", True),
    ("bash(npm run test:*)", "npm run test -k x", True),
    ("bash(npm run test:*)", "npm run test -- -k x", False),  # `--` hands the rest to the script
    ("bash(npm run test:*)", "npm run test:unit", False),
    ("bash(echo '*')", "echo '*'", True),
    ("bash(echo '*')", "echo hello", False),
    ("bash(git status)", "FOO=1 git status", False),  # an assignment changes what runs
    ("bash(git status)", "git status 2>&1", True),
    ("bash(git status)", "git status >/dev/null 2>&1 </dev/null", True),
    ("bash(git status)", "git status > ~/.bashrc", False),  # writes a file: never covered by a pattern
    ("bash(git status)", "git status >> log", False),
    ("bash(git status)", "git status &> log", False),
    ("bash(git status)", "git status 2> err", False),
    ("bash(git status)", "git status >& log", False),
    ("bash(cat *)", "cat < notes.txt", True),
    ("bash(cat *)", "cat <<EOF\nhi\nEOF", True),
    ("bash(git diff *)", "git diff $(ls > y)", False),
    ("bash(echo *)", "echo $(echo hi)", True),  # the inner command matches too
    ("bash(echo *)", "echo $HOME", True),
    ("bash(*)", "anything at all | sh", True),
    ("bash(*)", "echo 'unterminated", False),  # never covered when it cannot be parsed
])
def test_command_prefixes_cover_only_when_every_simple_command_matches(rule: str, command: str, covered: bool) -> None:
    assert Rule.parse(rule).covers("bash", {"command": command}, cwd=WS, workspace=WS) is covered


def test_process_rules_look_at_the_command_of_a_start() -> None:
    rule = Rule.parse("process(npm run dev *)")
    assert rule.covers("process", {"action": "start", "command": "npm run dev --port 3000"}, cwd=WS, workspace=WS)
    assert not rule.covers("process", {"action": "start", "command": "npm run build"}, cwd=WS, workspace=WS)
    assert not rule.covers("process", {"action": "list"}, cwd=WS, workspace=WS)
    assert not rule.covers("bash", {"command": "npm run dev"}, cwd=WS, workspace=WS)


@pytest.mark.parametrize("command", [None, 42, ["git", "status"], "git status " + "x " * 40_000])
def test_odd_commands_are_never_covered(command: object) -> None:
    assert not Rule.parse("bash(*)").covers("bash", {"command": command}, cwd=WS, workspace=WS)


# -- code no argv word shows (the strings are data: nothing here is ever run)


@pytest.mark.parametrize(("rule", "command", "covered"), [
    # backticks tree-sitter-bash leaves as text: an unquoted here-document body runs them
    ("bash(cat *)", "cat <<EOF\nhello `touch pwned` x\nEOF", False),
    ("bash(cat *)", "cat <<EOF\n`touch pwned`\nEOF", False),
    ("bash(cat *)", "cat <<-EOF\n\t`touch pwned`\nEOF", False),
    ("bash(cat *)", "cat <<EOF\n${x:-`touch pwned`}\nEOF", False),
    ("bash(cat *)", "cat <<EOF\n'`touch pwned`'\nEOF", False),  # quotes are plain text in a body
    ("bash(cat *)", "cat <<EOF\n\"${x:-'$(touch pwned)'}\"\nEOF", False),
    ("bash(cat *)", "cat <<EOF\n\\\\`touch pwned`\nEOF", False),  # an escaped backslash, then a backtick
    ("bash(cat *)", "cat <<EOF\n$(touch pwned)\nEOF", False),  # parsed, and touch does not match
    ("bash(cat *)", "cat <<'EOF'\nhello `touch pwned` $(touch pwned)\nEOF", True),  # quoted: not run
    ("bash(cat *)", "cat <<\"EOF\"\n`touch pwned`\nEOF", True),
    ("bash(cat *)", "cat <<\\EOF\n`touch pwned`\nEOF", True),
    ("bash(cat *)", "cat <<EOF\nnot run: \\`touch pwned\\`\nEOF", True),
    # ... and in a ${...} operand
    ("bash(git diff *)", 'git diff "${x:-`touch pwned`}"', False),
    ("bash(git diff *)", "git diff ${x:-`touch pwned`}", False),
    ("bash(git diff *)", "git diff ${x:+`touch pwned`} ${x#`touch pwned`} ${x/`touch pwned`/y}", False),
    ("bash(git diff *)", "git diff \"${x:-'$(touch pwned)'}\"", False),  # ' is a plain character there
    ("bash(git diff *)", "git diff ${x:-$(touch pwned)}", False),
    ("bash(echo *)", "echo ${x:-'not run'}", True),
    # escaped backticks inside backticks: bash unescapes them and runs the inner command
    ("bash(echo *)", "echo `echo \\`touch pwned\\``", False),
    ("bash(echo *)", "echo `echo hi`", True),
    # prompt expansion and indirection evaluate a value
    ("bash(git diff *)", "git diff ${x@P}", False),
    ("bash(git diff *)", 'git diff "${x@P}"', False),
    ("bash(git diff *)", "git diff ${x@E}", False),
    ("bash(git diff *)", "git diff ${x@A}", False),
    ("bash(git diff *)", "git diff ${!x}", False),
    ("bash(git diff *)", "git diff ${!x[@]}", False),
    ("bash(echo *)", "echo ${x@Q} ${x,,} ${#x}", True),
    ("bash(*)", "git diff ${x@P}", False),  # not even bash(*): it parses the line, the line hides code
    # subscripts evaluated by builtins, test and arithmetic
    ("bash(printf *)", "printf -v 'a[$(touch pwned)]' x", False),
    ("bash(printf *)", "printf -v a\\[\\$\\(touch\\ pwned\\)\\] x", False),
    ("bash(printf *)", "printf -v 'a[n]' x", False),  # n's value may be a[$(cmd)]
    ("bash(printf *)", 'printf -v "$name" x', False),
    ("bash(printf *)", "printf -v x '%s' y", True),
    ("bash(printf *)", "printf '%s\\n' \"$x\" '[ok]'", True),  # no -v: nothing is evaluated
    ("bash(read *)", "read 'a[$(touch pwned)]'", False),
    ("bash(read *)", "read -r 'a[i]'", False),
    ("bash(read *)", "read -r line", True),
    ("bash(mapfile *)", "mapfile -C 'touch pwned' -c 1 lines < f", False),
    ("bash(mapfile *)", "mapfile -t lines < f", True),
    ("bash(test *)", "test -v 'a[$(touch pwned)]'", False),
    ("bash(test *)", "test -v 'a[n]'", False),
    ("bash(test *)", "test -f x", True),
    ("bash(git status)", "[[ -v 'a[$(touch pwned)]' ]] && git status", False),
    ("bash(git status)", "[[ -v a[n] ]] && git status", False),
    ("bash(git status)", "[[ $n -eq 1 ]] && git status", False),
    ("bash(git status)", "[ 'a[$(touch pwned)]' -eq 1 ] && git status", False),
    ("bash(git status)", "[[ -f x && $n == y ]] && git status", True),
    ("bash(declare *)", "declare 'a[$(touch pwned)]=1'", False),
    ("bash(declare *)", "declare -i x=n", True),  # n's value can only come from the line's own declares
    ("bash(declare *)", 'declare x="$y"', False),
    ("bash(let *)", "let 'a[$(touch pwned)]'", False),
    ("bash(let *)", "let i=1+2", True),
    ("bash(unset *)", "unset 'a[$(touch pwned)]'", False),
    ("bash(git status)", "(( x )) && git status", False),
    ("bash(git status)", "(( 1 + 2 )) && git status", True),
    ("bash(echo *)", "echo $((x))", False),
    ("bash(echo *)", "echo $(( $(cat n) + 1 ))", False),  # the output is evaluated as arithmetic
    ("bash(echo *)", "echo $((1 + 2)) $[3]", True),
    ("bash(echo *)", "echo ${a[i]}", False),
    ("bash(echo *)", "echo ${a[0]} ${a[@]} ${#a[*]}", True),
    ("bash(echo *)", "echo ${x:i:1}", False),
    ("bash(echo *)", "echo ${x: -1} ${x:1:2}", True),
    ("bash(echo *)", "echo ${x:=default}", False),  # assigns x
    ("bash(echo *)", "echo ${x:-default}", True),
    # a word holding `$(` or a backtick after quote removal is never covered
    ("bash(git commit *)", "git commit -m 'use `make` here'", False),
    ("bash(git commit *)", 'git commit -m "cost: \\$(x)"', False),
    ("bash(git commit *)", "git commit -m 'plain message'", True),
])
def test_lines_that_hide_code_from_their_words_are_never_covered(rule: str, command: str, covered: bool) -> None:
    assert Rule.parse(rule).covers("bash", {"command": command}, cwd=WS, workspace=WS) is covered


@pytest.mark.parametrize("command", [
    # loops assign their variable: the header is a command of its own
    "for PATH in ./bin; do git status; done",
    "select PATH in ./bin; do git status; done",
    "for PATH; do git status; done",
    "for ((i=0; i<1; i++)); do git status; done",
    # builtins that set variables or change what runs are commands of their own
    "read PATH; git status",
    "read -r PATH <<< ./bin; git status",
    "declare PATH=./bin; git status",
    "export PATH=./bin; git status",
    "local PATH=./bin; git status",
    "typeset PATH=./bin; git status",
    "readonly PATH=./bin; git status",
    "printf -v PATH ./bin; git status",
    "mapfile PATH < f; git status",
    "readarray PATH < f; git status",
    "getopts a PATH; git status",
    "eval PATH=./bin; git status",
    "source ./env; git status",
    ". ./env; git status",
    "alias git=./evil; git status",
    "shopt -s expand_aliases; git status",
    "hash -p ./evil git; git status",
    "enable -f ./evil.so git; git status",
    "trap ./evil EXIT; git status",
    "cd ./bin; git status",
    "PATH=./bin; git status",
    "PATH=./bin git status",
    "BASH_ENV=./evil git status",
    "git status; PATH=./bin",
    "git status {PATH}>/dev/null; git status",
    "git status ${PATH:=./bin}",
    "git() { ./evil; }; git status",
])
def test_lines_that_change_what_runs_are_not_covered_by_a_rule_for_the_command(command: str) -> None:
    assert not Rule.parse("bash(git status)").covers("bash", {"command": command}, cwd=WS, workspace=WS)
    assert not Rule.parse("bash(git status *)").covers("bash", {"command": command}, cwd=WS, workspace=WS)


def test_a_rule_for_the_loop_itself_must_still_match_the_body() -> None:
    line = "for f in a b; do cat $f; done"
    assert not Rule.parse("bash(cat *)").covers("bash", {"command": line}, cwd=WS, workspace=WS)
    assert not Rule.parse("bash(for *)").covers("bash", {"command": line}, cwd=WS, workspace=WS)
    assert Rule.parse("bash(*)").covers("bash", {"command": line}, cwd=WS, workspace=WS)


# -- the working directory of a call


@pytest.mark.parametrize(("rule", "arguments", "covered"), [
    ("bash(./scripts/test)", {"command": "./scripts/test"}, True),
    ("bash(./scripts/test)", {"command": "./scripts/test", "workdir": ""}, True),
    ("bash(./scripts/test)", {"command": "./scripts/test", "workdir": "."}, True),
    ("bash(./scripts/test)", {"command": "./scripts/test", "workdir": "./"}, True),
    ("bash(./scripts/test)", {"command": "./scripts/test", "workdir": WS}, True),
    ("bash(./scripts/test)", {"command": "./scripts/test", "workdir": WS + "//./"}, True),
    ("bash(./scripts/test)", {"command": "./scripts/test", "workdir": "other"}, False),  # runs other/scripts/test
    ("bash(./scripts/test)", {"command": "./scripts/test", "workdir": "/tmp"}, False),
    ("bash(./scripts/test)", {"command": "./scripts/test", "workdir": "sub/.."}, False),  # sub may be a symlink
    ("bash(./scripts/test)", {"command": "./scripts/test", "workdir": WS + "/sub/.."}, False),
    ("bash(./scripts/test)", {"command": "./scripts/test", "workdir": "/work/wsx"}, False),
    ("bash(./scripts/test)", {"command": "./scripts/test", "workdir": 42}, False),
    ("bash(scripts/test *)", {"command": "scripts/test -k x", "workdir": "other"}, False),
    ("bash(bash scripts/test.sh)", {"command": "bash scripts/test.sh", "workdir": "other"}, False),  # a fixed relative path
    ("bash(*)", {"command": "./scripts/test", "workdir": "other"}, False),
    ("bash(*)", {"command": "git status && bin/x", "workdir": "other"}, False),
    # no relative program and no relative path the rule fixes: the directory does not change what runs
    ("bash(git status)", {"command": "git status", "workdir": "other"}, True),
    ("bash(npm run test *)", {"command": "npm run test", "workdir": "frontend"}, True),
    ("bash(python *)", {"command": "python ./tool.py", "workdir": "other"}, True),  # `*` trusts any argument
    ("bash(/usr/bin/make *)", {"command": "/usr/bin/make all", "workdir": "/tmp"}, True),
    ("bash(~/bin/tool)", {"command": "~/bin/tool", "workdir": "other"}, True),
])
def test_a_command_rule_and_the_calls_workdir(rule: str, arguments: dict[str, object], covered: bool) -> None:
    assert Rule.parse(rule).covers("bash", arguments, cwd=WS, workspace=WS) is covered


def test_a_process_rule_and_the_calls_workdir() -> None:
    rule = Rule.parse("process(./bin/dev-server *)")
    assert rule.covers("process", {"action": "start", "command": "./bin/dev-server", "workdir": "."}, cwd=WS, workspace=WS)
    assert not rule.covers("process", {"action": "start", "command": "./bin/dev-server", "workdir": "web"}, cwd=WS, workspace=WS)
