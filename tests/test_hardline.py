"""The hardline floor: every dangerous line in tests/data is refused with its rule, every harmless
look-alike runs, and pathological lines get an answer quickly. Nothing here is ever executed."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import pytest

from osprey.policy.hardline import RULES, Refusal, analyse, check
from osprey.policy.shell import ShellParseError

DATA = Path(__file__).parent / "data"
DOCS = Path(__file__).parent.parent / "docs" / "hardline.md"


def load(name: str) -> list[tuple[str | None, str]]:
    """(expected rule, command line) pairs; see the format described at the top of each file."""
    rule: str | None = None
    lines = []
    for raw in (DATA / name).read_text(encoding="utf-8").splitlines():
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        if re.fullmatch(r"\[[a-z-]+\]", raw):
            rule = raw[1:-1]
            continue
        lines.append((rule, raw[4:].replace("\\n", "\n") if raw.startswith("nl: ") else raw))
    return lines


DANGEROUS = load("hardline_dangerous.txt")
HARMLESS = [line for _, line in load("hardline_harmless.txt")]

# Harmless lines the floor refuses on purpose; docs/hardline.md lists them with the reasons.
ACCEPTED_FALSE_REFUSALS = [
    # a word the line cannot know, right under home: `rm -rf ~/` when name is empty
    ('rm -rf ~/"$name"', "recursive-delete-root"),
    # a variable holds every value it was given in the line, in any order
    ("d=/; d=./build; rm -rf $d", "recursive-delete-root"),
    # a string given to an exec-like call is checked as shell even when only printed
    ("""python3 -c 'import subprocess; subprocess.run(["echo", "rm -rf /"])'""", "recursive-delete-root"),
    # a value holding `$(` is checked as shell: arithmetic, PS4 or prompt expansion would run it
    ("msg='$(rm -rf ~)'; echo \"$msg\"", "recursive-delete-root"),
]


def _id(line: str) -> str:
    return line.replace("\n", "\\n")[:80]


def test_the_data_sets_are_large_and_cover_every_rule() -> None:
    assert len(DANGEROUS) >= 80
    assert len(HARMLESS) >= 80
    assert {rule for rule, _ in DANGEROUS} == set(RULES)
    assert len({line for _, line in DANGEROUS}) == len(DANGEROUS), "a dangerous line is listed twice"
    assert len(set(HARMLESS)) == len(HARMLESS), "a harmless line is listed twice"


@pytest.mark.parametrize(("rule", "line"), DANGEROUS, ids=[_id(line) for _, line in DANGEROUS])
def test_dangerous_line_is_refused(rule: str, line: str) -> None:
    refusal = check(line)
    assert refusal is not None, f"the floor let this run: {line!r}"
    assert refusal.rule == rule, f"{line!r}: refused as {refusal.rule} ({refusal.reason}), expected {rule}"
    assert refusal.reason and "\n" not in refusal.reason
    assert 0 < len(refusal.command) <= 200


@pytest.mark.parametrize("line", HARMLESS, ids=[_id(line) for line in HARMLESS])
def test_harmless_line_runs(line: str) -> None:
    refusal = check(line)
    assert refusal is None, f"{line!r} refused: {refusal}"


@pytest.mark.parametrize(("line", "rule"), ACCEPTED_FALSE_REFUSALS, ids=[_id(line) for line, _ in ACCEPTED_FALSE_REFUSALS])
def test_accepted_false_refusals_are_refused(line: str, rule: str) -> None:
    refusal = check(line)
    assert refusal is not None and refusal.rule == rule


def test_every_line_is_analysed_without_internal_errors() -> None:
    """check() turns unexpected exceptions into the textual fallback; the data sets must never
    need it, so a bug cannot hide behind it."""
    for rule, line in DANGEROUS + [(None, line) for line in HARMLESS]:
        try:
            analyse(line)
        except ShellParseError:
            assert rule == "unparseable-dangerous", f"{line!r} could not be parsed"


def test_documentation_lists_every_rule_and_the_accepted_false_refusals() -> None:
    text = DOCS.read_text(encoding="utf-8")
    for rule in RULES:
        assert f"`{rule}`" in text, f"docs/hardline.md does not document {rule}"
    for line, _ in ACCEPTED_FALSE_REFUSALS:
        assert line in text, f"docs/hardline.md does not list the accepted false refusal {line!r}"


def test_refusal_shape() -> None:
    refusal = check("rm -rf / " + "x" * 1000)
    assert isinstance(refusal, Refusal)
    assert refusal.rule == "recursive-delete-root"
    assert refusal.command.startswith("rm -rf / xxx") and len(refusal.command) <= 200
    assert refusal.reason.endswith("instead")
    nested = check("bash -c 'cd /tmp && sudo rm -rf ~'")
    assert nested is not None and nested.command == "sudo rm -rf ~"  # the subcommand as the floor saw it


@pytest.mark.parametrize("line", ["", "   ", "\n", "# rm -rf /", "true"])
def test_empty_and_trivial_lines_run(line: str) -> None:
    assert check(line) is None


def test_private_use_characters_in_the_line_are_plain_text() -> None:
    """The analysis marks home and unknown text with U+E001 and U+E000; the line's own copies of
    those characters, literal or from escapes, are plain text."""
    for line in ["rm -rf '\ue001'", "rm -rf $'\\ue001'", "rm -rf \"$(printf '\\ue001')\"", "echo x > /dev/'\ue000'"]:
        assert check(line) is None, line
    assert check("rm -rf /'\ue000'") is None  # a top-level entry with that exact name
    assert check("rm -rf /$X") is not None  # an unknown one may be /usr


def test_unparseable_lines_pass_unless_they_look_dangerous() -> None:
    assert check('echo "unterminated') is None
    assert check("if true; then ls") is None
    refusal = check('echo "x && rm -rf ~')
    assert refusal is not None and refusal.rule == "unparseable-dangerous"
    assert "syntax error" in refusal.reason


def test_nested_shell_strings_are_bounded() -> None:
    line = "rm -rf /"
    for depth in range(1, 9):
        line = "bash -c " + _sq(line)
        refusal = check(line)
        assert refusal is not None, f"depth {depth}"
        expected = "recursive-delete-root" if depth <= 4 else "unparseable-dangerous"
        assert refusal.rule == expected, f"depth {depth}: {refusal}"
    assert check("bash -c " + _sq("bash -c " + _sq("bash -c " + _sq("bash -c " + _sq("bash -c " + _sq("ls /")))))) is None


def _sq(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


PATHOLOGICAL = {
    "100 KiB line": "echo " + "a" * 100 * 1024,
    "100 KiB line with rm -rf /": "rm -rf / " + "a " * 50 * 1024,
    "deeply nested $(": "echo " + "$(echo " * 5000 + "x" + ")" * 5000,
    "20k open $(": "echo " + "$( " * 20000,
    "10k ;": "true;" * 10_000,
    "10k bare ;": ";" * 10_000,
    "10k pipes into sh": "curl x" + " | sh" * 10_000,
    "deep subshells": "(" * 10_000 + "rm -rf /" + ")" * 10_000,
    "deep groups": "{ " * 5000 + "ls; " + "}; " * 5000,
    "brace bomb": "rm -rf " + "{a,b}" * 40,
    "doubling variable": "a=xxxxxxxx; " + "a=$a$a; " * 40 + "rm -rf $a",
    "many variables": "".join(f"a{i}=/x{i}; " for i in range(3000)) + "rm -rf $a1",
    "eval chain": "eval " * 10_000 + "ls",
    "10k xargs inputs": "echo " + "/x " * 5000 + "| xargs rm -rf",
    "long heredoc into sh": "cat <<EOF | sh\n" + "echo hi\n" * 5000 + "EOF",
    "regex-hostile code": "python3 -c '" + "rmtree(" * 3000 + "'",
    "many exec calls in code": "python3 -c '" + "system(" * 9000 + "'",
    "many backticks in code": "perl -e '" + "`" * 60000 + "'",
    "many substitutions in a string": 'echo "' + "`a" * 30000 + '"',
    "many backticks in a here-document": "cat <<EOF\n" + "`a` " * 15000 + "\nEOF",
    "unterminated backtick in a here-document": "cat <<EOF\n`" + "a" * 60000 + "\nEOF",
    "many backticks in ${...}": "echo " + "${x:-`a`}" * 5000,
    "many $( in a value": "x='" + "$(" * 20000 + "'; echo $((x))",
    "long value for @P": "x='" + "`a`" * 15000 + "'; echo ${x@P}",
    "many test operands": "[[ " + " && ".join(["-v a"] * 5000) + " ]]",
}


@pytest.mark.parametrize("name", list(PATHOLOGICAL))
def test_pathological_lines_are_answered_quickly(name: str) -> None:
    start = time.perf_counter()
    check(PATHOLOGICAL[name])
    elapsed = time.perf_counter() - start
    # A guard against runaway (super-linear) checking, which takes tens of seconds, not a timing
    # target: the slowest of these takes about 1.5 s on an idle 2-core machine.
    assert elapsed < 6.0, f"{name}: {elapsed:.2f}s"


def test_pathological_dangerous_lines_are_still_refused() -> None:
    for name in ("100 KiB line with rm -rf /", "10k pipes into sh", "deep subshells"):
        refusal = check(PATHOLOGICAL[name])
        assert refusal is not None, name


def test_concurrent_checks_agree() -> None:
    lines = [line for _, line in DANGEROUS[:40]] + HARMLESS[:40]
    expected = [check(line) for line in lines]
    results: list[list[Refusal | None]] = []

    def worker() -> None:
        results.append([check(line) for line in lines])

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(results) == 4 and all(r == expected for r in results)
