"""`osprey docs`: the pages from the source checkout, through a pager on a terminal, and from a
wheel installed into a fresh virtual environment (where only `share/osprey/docs` holds them)."""

from __future__ import annotations

import os
import pty
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"


def osprey(*args: str, cwd: Path, env: dict[str, str], python: str = sys.executable) -> subprocess.CompletedProcess[str]:
    return subprocess.run([python, "-m", "osprey", *args], check=False, cwd=cwd, env=env, capture_output=True, text=True, timeout=60)


def first_heading(page: Path) -> str:
    return next((line[2:].strip() for line in page.read_text().splitlines() if line.startswith("# ")), "")


def test_the_topics_are_the_pages_with_their_titles(tmp_path: Path, osprey_env: dict[str, str]) -> None:
    run = osprey("docs", cwd=tmp_path, env=osprey_env)
    assert run.returncode == 0, run
    listed = dict(re.findall(r"^  (\S+) *(.*)$", run.stdout, re.MULTILINE))
    expected = {p.stem: first_heading(p) for p in DOCS.glob("*.md")}
    assert {"configuration", "events"} <= expected.keys()
    assert listed == expected
    assert f"({DOCS})" in run.stdout and "osprey docs TOPIC" in run.stdout


@pytest.mark.parametrize("spelling", ["configuration", "Configuration", "configuration.md"])
def test_a_topic_prints_its_page_as_it_is(spelling: str, tmp_path: Path, osprey_env: dict[str, str]) -> None:
    run = osprey("docs", spelling, cwd=tmp_path, env=osprey_env)
    assert run.returncode == 0, run
    assert run.stdout == (DOCS / "configuration.md").read_text()


@pytest.mark.parametrize("topic", ["nope", "../README", "/etc/passwd", ""])
def test_an_unknown_topic_exits_1_and_lists_the_topics(topic: str, tmp_path: Path, osprey_env: dict[str, str]) -> None:
    run = osprey("docs", topic, cwd=tmp_path, env=osprey_env)
    assert run.returncode == 1, run
    assert run.stdout == ""
    assert "no topic" in run.stderr and "  events" in run.stderr and "  configuration" in run.stderr


def test_a_terminal_gets_the_page_through_the_pager(tmp_path: Path, osprey_env: dict[str, str]) -> None:
    paged = tmp_path / "paged.txt"
    pager = tmp_path / "pager"
    pager.write_text(f"#!{sys.executable}\nimport sys, shutil\nshutil.copyfileobj(sys.stdin, open(sys.argv[1], 'w'))\n")
    pager.chmod(0o755)
    env = {**osprey_env, "PAGER": f"{pager} {paged}", "TERM": "xterm"}
    leader, follower = pty.openpty()
    try:
        proc = subprocess.run([sys.executable, "-m", "osprey", "docs", "events"], check=False, cwd=tmp_path, env=env,
                              stdin=follower, stdout=follower, stderr=subprocess.PIPE, timeout=60)
    finally:
        os.close(follower)
        os.close(leader)
    assert proc.returncode == 0, proc.stderr
    assert paged.read_text() == (DOCS / "events.md").read_text()


def test_help_and_config_errors_point_to_the_command(tmp_path: Path, osprey_env: dict[str, str]) -> None:
    root_help = osprey("--help", cwd=tmp_path, env=osprey_env)
    assert "osprey docs configuration" in root_help.stdout and "osprey docs events" in root_help.stdout
    assert "docs/" not in root_help.stdout
    Path(osprey_env["OSPREY_HOME"], "config.toml").write_text("[retry]\ndelay = 3\n")
    run = osprey("agent", "hello", cwd=tmp_path, env=osprey_env)
    assert run.returncode != 0
    assert "unknown key 'retry.delay'" in run.stderr and "`osprey docs configuration`" in run.stderr


def test_an_installed_wheel_serves_the_pages_from_its_share_dir(tmp_path: Path, osprey_env: dict[str, str]) -> None:
    """Build a wheel from a copy of the source (what an sdist holds), install it into a new virtual
    environment, and run that environment's `osprey` from a directory outside any checkout."""
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "Dockerfile"):
        shutil.copy2(REPO / name, source / name)
    for name in ("host", "sidecar", "images", "docs"):
        shutil.copytree(REPO / name, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    (source / "examples" / "demo").mkdir(parents=True)
    shutil.copy2(REPO / "examples" / "demo" / "session.jsonl", source / "examples" / "demo")
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "--no-index",
                    "-w", str(wheels), str(source)], check=True, capture_output=True, timeout=300)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    [wheel] = wheels.glob("osprey-*.whl")
    subprocess.run([sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps", "--no-index", str(wheel)],
                   check=True, capture_output=True, timeout=300)
    # The dependencies come from this environment, after the new one's own site-packages.
    purelib = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                             check=True, capture_output=True, text=True).stdout.strip()
    Path(purelib, "zz-deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    where = subprocess.run([python, "-c", "import osprey; print(osprey.__file__)"], cwd=elsewhere, env=osprey_env,
                           check=True, capture_output=True, text=True).stdout
    assert where.startswith(purelib), where  # the installed copy, not the checkout
    share = venv / "share" / "osprey" / "docs"
    assert sorted(p.name for p in share.iterdir()) == sorted(p.name for p in DOCS.glob("*.md"))
    assert (share.parent / "examples" / "demo" / "session.jsonl").is_file(), "the broker image's demo session ships too"

    listing = osprey("docs", cwd=elsewhere, env=osprey_env, python=python)
    assert listing.returncode == 0, listing
    assert f"({share})" in listing.stdout and "  configuration  Configuration" in listing.stdout
    page = osprey("docs", "events", cwd=elsewhere, env=osprey_env, python=python)
    assert page.returncode == 0, page
    assert page.stdout == (DOCS / "events.md").read_text()
