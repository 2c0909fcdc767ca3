"""Command wrappers (osprey.policy.wrappers.unwrap), directly and through the three places that
read commands through them: the hardline floor, the stall detectors' program key, and the
verification checkpoint's verification commands."""

from __future__ import annotations

import shlex
import time

import pytest

from osprey.policy.hardline import check
from osprey.policy.wrappers import MAX_WRAPPERS, getopt, unwrap
from osprey.session.stalls import program_key
from osprey.session.verification import verification_command


def inner(line: str) -> list[str]:
    words = shlex.split(line)
    return words[unwrap(words).start:]


@pytest.mark.parametrize(("line", "runs"), [
    ("make test", "make test"),
    ("FOO=1 sudo -E timeout 30 make test", "make test"),
    ("env -i PATH=/bin nice -n 5 cargo build --release", "cargo build --release"),
    ("sudo -u root -- rm -rf /", "rm -rf /"),
    ("sudo --user=root -g wheel make", "make"),
    ("sudo -h host make", "make"),
    ("timeout -s KILL 60 pytest", "pytest"),
    ("timeout --kill-after=5 10 make", "make"),
    ("timeout 5", ""),
    ("nice -5 make", "make"),
    ("nohup -- make", "make"),
    ("command rm x", "rm x"),
    ("exec -a name prog arg", "prog arg"),
    ("time -p make", "make"),
    ("time -o out.txt make", "make"),
    ("stdbuf -oL grep x", "grep x"),
    ("stdbuf -o L grep x", "grep x"),
    ("ionice -c 3 nice make", "make"),
    ("chroot --userspec=u:g /mnt sh", "sh"),
    ("taskset 0x3 make", "make"),
    ("chrt 10 make", "make"),
    ("setsid -f make", "make"),
    ("chronic -e make", "make"),
    ("doas -u root make", "make"),
    ("pkexec --user root make", "make"),
    ("strace -o trace.txt -f make", "make"),
    ("fakeroot -- make", "make"),
    ("busybox rm -rf x", "rm -rf x"),
    ("uv run pytest -q", "pytest -q"),
    ("poetry run -- pytest", "pytest"),
    ("bundle exec rspec", "rspec"),
    ("npm exec -- jest", "jest"),
    ("npx --yes jest --ci", "jest --ci"),
    ("npx -p some-package jest", "jest"),
    ("bunx eslint .", "eslint ."),
    ("/usr/bin/sudo /usr/bin/env make", "make"),
    ("gtimeout 5 make", "make"),
    ("env - make", "make"),
    # Not wrappers: they run no command of their arguments, or one that depends on their input.
    ("uv sync", "uv sync"),
    ("npm test", "npm test"),
    ("xargs rm", "xargs rm"),
    ("find . -exec rm {} +", "find . -exec rm {} +"),
    ("sudoedit /etc/hosts", "sudoedit /etc/hosts"),
])
def test_unwrap_finds_the_command_a_chain_of_wrappers_runs(line: str, runs: str) -> None:
    assert inner(line) == shlex.split(runs)


@pytest.mark.parametrize("line", ["command -v rm", "command -V ls", "sudo -l", "sudo -v", "ionice -p 123", "taskset -p 0x3 99",
                                  "env", "FOO=1", "nohup", ""])
def test_a_wrapper_that_runs_no_command_leaves_nothing(line: str) -> None:
    assert inner(line) == []


def test_env_and_sudo_assignments_and_shell_strings_are_reported() -> None:
    found = unwrap(["env", "-i", "A=1", "B=two words", "sudo", "C=3", "make"])
    assert (found.start, found.env, found.strings) == (6, {"A": "1", "B": "two words", "C": "3"}, [])
    found = unwrap(["env", "-S", "rm -rf /", "extra arg"])
    assert (found.start, found.strings) == (4, ["rm -rf / 'extra arg'"])
    found = unwrap(["npx", "-c", "pytest -q"])
    assert (found.start, found.strings) == (3, ["pytest -q"])
    assert unwrap(["FOO=1", "make"]).env == {}  # an assignment before the command is the shell's, not a wrapper's


def test_the_number_of_wrappers_read_is_bounded() -> None:
    found = unwrap(["sudo"] * MAX_WRAPPERS + ["rm"])
    assert (found.start, found.exhausted) == (MAX_WRAPPERS, False)
    found = unwrap(["sudo"] * (MAX_WRAPPERS + 4) + ["rm"])
    assert (found.start, found.exhausted) == (MAX_WRAPPERS, True)
    # Options and assignments cost one step each: a long line is read once, quickly.
    words = ["sudo", *["-E"] * 100_000, "env", *[f"V{i}=x" for i in range(100_000)], "make"]
    start = time.perf_counter()
    assert unwrap(words).start == len(words) - 1
    assert time.perf_counter() - start < 2.0


def test_getopt_reads_options_as_getopt_does() -> None:
    assert getopt(["x", "-abc", "-n5", "--long=v", "--arg", "value", "operand"], 1, "n", frozenset({"--arg"})) == (
        [("-a", ""), ("-b", ""), ("-c", ""), ("-n", "5"), ("--long", "v"), ("--arg", "value")], 6)
    assert getopt(["x", "-n", "5", "--", "-operand"], 1, "n") == ([("-n", "5")], 4)
    assert getopt(["x", "-"], 1, "") == ([], 1)


# ------------------------------------------------------------------ the three readers agree

PREFIXES = ["sudo -E", "sudo -u root FOO=1", "env -i A=1", "timeout -s KILL 60", "nice -n 5", "nohup", "command", "exec",
            "stdbuf -oL", "ionice -c3", "chronic", "uv run", "poetry run", "bundle exec", "npx", "bunx", "gtimeout 5",
            "FOO=1 sudo", "doas", "setsid"]


@pytest.mark.parametrize("prefix", PREFIXES)
def test_the_floor_refuses_what_any_wrapper_runs(prefix: str) -> None:
    refusal = check(f"{prefix} rm -rf /")
    assert refusal is not None and refusal.rule == "recursive-delete-root"
    assert check(f"{prefix} rm -rf ./build") is None


@pytest.mark.parametrize("prefix", PREFIXES)
def test_a_stall_family_is_named_for_what_a_wrapper_runs(prefix: str) -> None:
    assert program_key(f"{prefix} make test") == "make test"


@pytest.mark.parametrize("prefix", PREFIXES)
def test_a_verification_run_is_seen_through_any_wrapper(prefix: str) -> None:
    assert verification_command(f"{prefix} pytest -q")
    assert not verification_command(f"{prefix} ls")


def test_the_floor_refuses_shell_text_a_wrapper_runs_and_too_many_wrappers() -> None:
    assert check("npx -c 'rm -rf /'") is not None
    assert check("env -S 'rm -rf /'") is not None
    assert check("command -v rm") is None
    refusal = check("sudo " * (MAX_WRAPPERS + 4) + "rm -rf /")
    assert refusal is not None and refusal.rule == "unparseable-dangerous"
    assert check("sudo " * (MAX_WRAPPERS + 4) + "ls") is None
