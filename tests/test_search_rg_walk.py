"""grep and find_files let ripgrep walk a directory itself, with the tree's ignore rules handed to it.

The rules come from one file that `ignore.rg_ignore_lines` writes (the `.gitignore` files read
with their bounds, by a walk of directories only); what ripgrep reports is checked against the
files opened below the root before it is returned. Results must equal the descriptor walk's
(test_search_engines.py compares the engines); these tests pin the parts on their own.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
from grep_answers import grep
from test_search_engines import require_rg, write

from osprey_sidecar import ignore, search
from osprey_sidecar.grepworker import FileOpener
from osprey_sidecar.ignore import rg_ignore_lines
from osprey_sidecar.paths import Roots
from osprey_sidecar.search import find_files

# --- the rules handed to ripgrep ----------------------------------------------------------------


def test_rules_are_rebased_to_their_directory_and_git_comes_last(tmp_path: Path) -> None:
    write(tmp_path, ".gitignore", "*.log\n/top-only.txt\nbuild/\n")
    write(tmp_path, "sub/.gitignore", "!keep.log\n/local/\ndeep/x.txt\n# a comment\n\n")
    write(tmp_path, "sub/a.txt", "")
    write(tmp_path, "build/.gitignore", "never-read\n")  # its directory is ignored
    assert rg_ignore_lines(str(tmp_path), str(tmp_path)) == [
        "*.log", "/top-only.txt", "build/",
        "!/sub/**/keep.log", "/sub/local/", "/sub/deep/x.txt",
        ".git",
    ]


def test_directory_names_are_escaped_in_the_rules(tmp_path: Path) -> None:
    write(tmp_path, "a*[b]{c}?/.gitignore", "x.txt\n")
    assert rg_ignore_lines(str(tmp_path), str(tmp_path)) == ["/a\\*\\[b\\]\\{c\\}\\?/**/x.txt", ".git"]


def test_ancestor_rules_come_first(tmp_path: Path) -> None:
    write(tmp_path, ".gitignore", "*.tmp\n/sub/anchored.txt\n")
    write(tmp_path, "sub/.gitignore", "inner.txt\n")
    assert rg_ignore_lines(str(tmp_path / "sub"), str(tmp_path)) == ["*.tmp", "/anchored.txt", "inner.txt", ".git"]


def test_rules_that_cannot_be_written_are_refused(tmp_path: Path) -> None:
    write(tmp_path, "line\nbreak/.gitignore", "x\n")
    assert rg_ignore_lines(str(tmp_path), str(tmp_path)) is None


def test_ignore_files_past_the_byte_cap_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ignore, "MAX_RG_RULE_BYTES", 1000)
    for d in range(3):
        write(tmp_path, f"d{d}/.gitignore", "# nothing\n" * 40)  # 400 bytes each
    assert rg_ignore_lines(str(tmp_path), str(tmp_path)) is None
    # ...and the search still answers, by the descriptor walk.
    write(tmp_path, "d0/a.txt", "needle\n")
    if search.shutil.which("rg"):
        r = grep(Roots([str(tmp_path)]), "needle", engine="ripgrep")
        assert [(m.path, m.line) for m in r.matches] == [("d0/a.txt", 1)] and r.engine == "ripgrep"


def test_non_regular_ignore_files_are_not_read(tmp_path: Path) -> None:
    write(tmp_path, "a.txt", "")
    os.mkfifo(tmp_path / ".gitignore")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / ".gitignore").symlink_to("/dev/zero")
    done: list[object] = []
    thread = threading.Thread(target=lambda: done.append(rg_ignore_lines(str(tmp_path), str(tmp_path))), daemon=True)
    thread.start()
    thread.join(10)
    assert done == [[".git"]]


def test_a_name_glob_is_handed_to_ripgrep_only_where_it_cannot_reinclude() -> None:
    assert search._name_globs("*.py") == (["*.py"], True)
    assert search._name_globs("*.{py,md}") == (["*.py", "*.md"], True)
    assert search._name_globs("src/**/*.ts") == (["*.ts"], False)
    assert search._name_globs("./*.py") == (["*.py"], False)
    for unwritable in ("**", "src/**", "[!a-m]*.txt", "a\\*b", "x:y", "a**b"):
        assert search._name_globs(unwritable) is None, unwritable


# --- what ripgrep reports is checked -----------------------------------------------------------


def _at(lines: list[bytes], number: int, text: bytes | None = None) -> tuple[int, bytes, int, bool]:
    """A hit for line `number` of a file made of `lines` joined by newlines: its bytes (or
    `text`) as ripgrep's output holds them (a long line cut, as a path before it would cut it),
    and where the line starts."""
    offset = sum(len(line) + 1 for line in lines[: number - 1])
    if text is not None:
        return number, text, offset, False
    keep = search._RG_LINE_KEEP - 100
    return number, lines[number - 1][:keep], offset, len(lines[number - 1]) > keep


def test_matches_are_checked_at_their_offsets(tmp_path: Path) -> None:
    lines = [f"line {n} ".encode() + b"y" * (n % 13) for n in range(1, 200)]
    lines[120] = b"z" * 40_000  # longer than the part compared
    lines[3] = b""
    path = tmp_path / "f.txt"
    path.write_bytes(b"\n".join(lines))  # the last line has no newline
    fd = os.open(path, os.O_RDONLY)
    try:
        for wanted in ([1], [2, 3], [4], [50], [120, 121, 122], [199], [7, 150, 199]):
            hits = [_at(lines, n) for n in wanted]
            assert search._lines_at(fd, hits), wanted
            assert not search._lines_at(fd, [*hits[:-1], _at(lines, wanted[-1], b"not this line")]), wanted
        assert not search._lines_at(fd, [(2, b"line 2 ", 3, False)])  # not where a line starts
        assert not search._lines_at(fd, [(2, b"ine 2 yy", 1, False)])  # nor here
        assert not search._lines_at(fd, [(2, b"line 2 y", 9, False)])  # the line goes on
        assert search._lines_at(fd, [(2, b"line 2 y", 9, True)])  # where ripgrep's output was cut, what it kept is compared
        assert not search._lines_at(fd, [(200, b"past the end", path.stat().st_size + 5, False)])
    finally:
        os.close(fd)


class _Reported(search._RgOutput):
    """ripgrep's output as if it had read other files than the ones below the root: each match
    with the byte offset ripgrep reported for its line."""

    def __init__(self, kept: list[tuple[str, int, str, int]], counts: dict[str, int]) -> None:
        super().__init__(500, search.COUNT_LIMIT, time.monotonic() + 10)
        self.kept = [(rel, number, text) for rel, number, text, _ in kept]
        for rel, number, text, offset in kept:
            self.hits.setdefault(rel, []).append((number, text.encode(), offset, False))
        self.counts, self.total = counts, sum(counts.values())


def test_matches_that_differ_from_the_file_below_the_root_are_left_out(tmp_path: Path) -> None:
    write(tmp_path, "d/target.txt", "inside needle\n")
    write(tmp_path, "d/other.txt", "needle\nneedle\n")
    (tmp_path / "d" / "link.txt").symlink_to(tmp_path / "d" / "other.txt")
    roots = Roots([str(tmp_path)])
    target = search._open_target(roots, "")
    run = search._Search(roots, "needle", target, "", None, False, 500, time.monotonic() + 10, None)
    out = _Reported(
        [("d/target.txt", 1, "SECRET needle", 0), ("d/other.txt", 1, "needle", 0), ("d/other.txt", 2, "needle", 7), ("d/link.txt", 1, "needle", 0)],
        {"d/target.txt": 1, "d/other.txt": 2, "d/link.txt": 1},
    )
    opener = FileOpener(str(tmp_path))
    try:
        kept, total = run._verified(out, opener, str(tmp_path) + os.sep)
    finally:
        opener.close()
    # The symlink is not followed, and the line that is not what the file below the root holds is dropped.
    assert (kept, total) == ([("d/other.txt", 1, "needle"), ("d/other.txt", 2, "needle")], 2)


def test_found_paths_are_regular_files_below_the_root(tmp_path: Path) -> None:
    write(tmp_path, "d/a.txt", "")
    (tmp_path / "d" / "l.txt").symlink_to(tmp_path / "d" / "a.txt")
    (tmp_path / "s").symlink_to(tmp_path / "d", target_is_directory=True)
    opener = FileOpener(str(tmp_path))
    try:
        assert opener.is_regular(str(tmp_path / "d" / "a.txt"))
        assert not opener.is_regular(str(tmp_path / "d" / "l.txt"))
        assert not opener.is_regular(str(tmp_path / "s" / "a.txt"))
        assert not opener.is_regular(str(tmp_path / "d" / "missing.txt"))
    finally:
        opener.close()


# --- the walk is ripgrep's, not this process's ------------------------------------------------


@pytest.fixture(scope="module")
def wide_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("wide")
    text = "the quick brown fox jumps over the lazy dog\n" * 20
    for d in range(40):
        folder = root / f"d{d:02d}"
        folder.mkdir()
        for f in range(100):
            (folder / f"f{f:03d}.txt").write_text(text + ("needle here\n" if f == 7 else ""))
    return root


def test_grep_of_a_directory_leaves_opening_the_files_to_ripgrep(wide_tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # 4,000 files: a walk in this process that opens each file to pre-filter it opens them all;
    # with ripgrep walking, this process opens the directories and the 40 files whose matches it
    # checks.
    require_rg()
    opened: list[str] = []
    real_open = os.open

    def counting(path: object, *args: object, **kwargs: object) -> int:
        opened.append(str(path))
        return real_open(path, *args, **kwargs)  # type: ignore[arg-type]

    roots = Roots([str(wide_tree)])
    monkeypatch.setattr(os, "open", counting)
    r = grep(roots, "needle")
    monkeypatch.undo()
    assert [m.path for m in r.matches] == [f"d{d:02d}/f007.txt" for d in range(40)]  # type: ignore[attr-defined]
    assert len(opened) < 500, f"grep opened {len(opened):,} paths itself"


def test_find_files_of_a_directory_finds_each_match_once(wide_tree: Path) -> None:
    require_rg()
    roots = Roots([str(wide_tree)])
    r = find_files(roots, "f007.txt")
    assert r.paths == [f"d{d:02d}/f007.txt" for d in range(40)]  # type: ignore[attr-defined]


def test_globs_that_are_not_names_still_filter(wide_tree: Path) -> None:
    require_rg()
    roots = Roots([str(wide_tree)])
    r = grep(roots, "needle", glob="d0[0-2]/*.txt")
    assert [m.path for m in r.matches] == ["d00/f007.txt", "d01/f007.txt", "d02/f007.txt"]
    r = grep(roots, "needle", glob="d01/**")
    assert [m.path for m in r.matches] == ["d01/f007.txt"]
    assert find_files(roots, "d03/f00[0-2].txt").paths == ["d03/f000.txt", "d03/f001.txt", "d03/f002.txt"]


@pytest.fixture(scope="module")
def counted_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """300 files of 7 matching lines, every 10th with one more, and two (f000, f150) made binary
    by a NUL after 84 KB of matching lines (ripgrep prints those before it sees the NUL)."""
    root = tmp_path_factory.mktemp("counted")
    for i in range(300):
        text = b"hit\n" * (7 + (i % 10 == 0))
        if i % 150 == 0:
            text += b"hit late\n" * 10_000 + b"\x00\n"
        write(root, f"d{i // 50}/f{i:03d}.txt", text)
    return root


@pytest.mark.parametrize("max_matches", [1, 5, 100])
@pytest.mark.parametrize("count_limit", [100, 1000, 10_000])
def test_counts_taken_in_bulk_equal_the_python_engines(counted_tree: Path, monkeypatch: pytest.MonkeyPatch, max_matches: int, count_limit: int) -> None:
    # Past the returned matches, ripgrep's lines are counted a read at a time, not line by line.
    require_rg()
    monkeypatch.setattr(search, "COUNT_LIMIT", count_limit)
    roots = Roots([str(counted_tree)])
    rg = grep(roots, "hit", max_matches=max_matches, engine="ripgrep")
    py = grep(roots, "hit", max_matches=max_matches, engine="python")
    assert rg.engine == "ripgrep"
    assert [(m.path, m.line) for m in rg.matches] == [(m.path, m.line) for m in py.matches]
    assert (rg.total, rg.truncated) == (py.total, py.truncated)
    expected = sum(7 + (i % 10 == 0) for i in range(300) if i % 150)
    assert rg.total == min(expected, max(count_limit, max_matches + 1))


def test_matches_of_one_file_are_checked_in_one_read_where_they_lie_close(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    filler = b"x" * 99
    lines = [b"needle first", *[filler] * 200, b"needle near", *[filler] * 6000, b"needle far", *[filler] * 3000, b"needle last"]
    path = tmp_path / "f.txt"
    path.write_bytes(b"\n".join(lines) + b"\n")
    numbers = [n for n, line in enumerate(lines, 1) if line.startswith(b"needle")]
    hits = [_at(lines, n) for n in numbers]
    assert hits[2][2] - hits[1][2] > search._VERIFY_SPAN and hits[3][2] - hits[2][2] > search._VERIFY_SPAN
    reads: list[int] = []
    real_pread = os.pread

    def pread(fd: int, size: int, offset: int) -> bytes:
        reads.append(size)
        return real_pread(fd, size, offset)

    monkeypatch.setattr(search.os, "pread", pread)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert search._lines_at(fd, hits)
        assert len(reads) == 3  # the first two together, the others each alone
        assert max(reads) <= search._VERIFY_SPAN + search._RG_LINE_KEEP + 1
        for changed in range(4):
            wrong = [*hits]
            wrong[changed] = (hits[changed][0], b"needle elsewhere", hits[changed][2], False)
            assert not search._lines_at(fd, wrong), changed
        assert not search._lines_at(fd, [hits[0], (numbers[1], b"needle near", hits[1][2] + 1, False)])
    finally:
        os.close(fd)


@pytest.mark.parametrize("files", [3, 12])
def test_found_paths_are_checked_a_directory_at_a_time(tmp_path: Path, files: int) -> None:
    # Few paths in a directory are looked up one by one, many by one listing of it: the same answer.
    names = [f"f{n:02d}.txt" for n in range(files)]
    for name in names:
        write(tmp_path, f"d/{name}", "")
    (tmp_path / "d" / "l.txt").symlink_to(tmp_path / "d" / "f00.txt")
    os.mkfifo(tmp_path / "d" / "p.txt")
    (tmp_path / "s").symlink_to(tmp_path / "d", target_is_directory=True)
    write(tmp_path, "top.txt", "")
    asked = [f"d/{name}" for name in names] + ["d/l.txt", "d/p.txt", "d/missing.txt", "s/f00.txt", "top.txt", "gone/x.txt"]
    regular = set(asked) - search._not_regular(str(tmp_path), str(tmp_path), asked)
    assert regular == {f"d/{name}" for name in names} | {"top.txt"}
    assert search._not_regular(str(tmp_path), str(tmp_path / "d"), ["f01.txt", "l.txt"]) == {"l.txt"}


def test_paths_are_shown_as_the_roots_show_them(tmp_path: Path) -> None:
    work = tmp_path / "work"
    other = tmp_path / "other"
    for folder in (work / "sub", other):
        folder.mkdir(parents=True)
    rels = ["a.txt", "x/y.txt", "caf\u00e9.txt", os.fsdecode(b"bad\xff.txt"), ""]
    for roots, tops in (
        (Roots([str(work), str(other)]), [str(work), str(work / "sub"), str(other)]),
        (Roots([str(work / "sub"), str(work)]), [str(work), str(work / "sub")]),  # the working directory below the top
        (Roots(["/"]), ["/", str(work)]),
    ):
        for top in tops:
            shown = search._shower(roots, top)
            assert [shown(rel) for rel in rels] == [search._shown(roots, top, rel) for rel in rels], (roots.roots, top)


def _address_space(pid: int) -> int | None:
    with open(f"/proc/{pid}/limits") as limits:
        for line in limits:
            if line.startswith("Max address space"):
                value = line.split()[3]
                return None if value == "unlimited" else int(value)
    return None


def test_ripgrep_runs_capped_with_no_program_in_between(tmp_path: Path) -> None:
    require_rg()
    cmd, cap = search._capped(["rg", "--version"])
    assert cmd == ["rg", "--version"] and cap == search._memory_cap(search.RG_MEMORY_BYTES)
    printed = bytearray()

    def feed(data: bytes) -> bool:
        printed.extend(data)
        return False

    # What a started program's address space is once it runs: the cap, set from here.
    ran = search._stream(
        ["sh", "-c", "read line; exec cat /proc/self/limits"], stdin=b"go\n", deadline=time.monotonic() + 10,
        feed=feed, memory_bytes=cap,
    )
    assert ran is not None and ran[0] == 0
    line = next(line for line in printed.decode().splitlines() if line.startswith("Max address space"))
    assert int(line.split()[3]) == cap


def test_a_program_grown_past_the_cap_before_it_was_capped_is_refused(tmp_path: Path) -> None:
    import subprocess
    import sys

    grown = subprocess.Popen(
        [sys.executable, "-c", "import sys; b = bytearray(96 << 20); print('ready', flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
    )
    small = subprocess.Popen(["sleep", "30"])
    try:
        assert grown.stdout is not None and grown.stdout.readline() == b"ready\n"
        assert not search._cap_memory(grown.pid, 64 << 20)
        assert search._cap_memory(small.pid, search.RG_MEMORY_BYTES)
        assert _address_space(small.pid) == search.RG_MEMORY_BYTES
    finally:
        for proc in (grown, small):
            proc.kill()
            proc.wait()


def test_rules_are_collected_without_opening_directories_that_hold_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for d in range(30):
        write(tmp_path, f"d{d:02d}/f.txt", "")
    write(tmp_path, "d07/.gitignore", "*.log\n")
    write(tmp_path, "d08/inner/.gitignore", "*.tmp\n")
    (tmp_path / "d09" / ".gitignore").symlink_to(tmp_path / "d07" / ".gitignore")
    os.mkfifo(tmp_path / "d10" / ".gitignore")
    opened: list[str] = []
    real_open_under = ignore.open_under

    def open_under(root: str, real: str, flags: int) -> int:
        opened.append(real)
        return real_open_under(root, real, flags)

    monkeypatch.setattr(ignore, "open_under", open_under)
    lines = rg_ignore_lines(str(tmp_path), str(tmp_path))
    assert lines == ["/d07/**/*.log", "/d08/inner/**/*.tmp", ".git"] or lines == ["/d08/inner/**/*.tmp", "/d07/**/*.log", ".git"]
    # The top, the directories holding a `.gitignore` of any kind, and the way to the deeper one.
    assert sorted(os.path.relpath(p, tmp_path) for p in opened) == [".", "d07", "d08", "d08/inner", "d09", "d10"]


def test_output_only_counted_is_fed_in_few_pieces() -> None:
    import sys

    writes = 20_000
    program = f"import os\nfor n in range({writes}): os.write(1, b'%07d\\n' % n)"
    counts = []
    for gather in (None, lambda: True):
        pieces: list[int] = []
        printed = bytearray()

        def feed(data: bytes, pieces: list[int] = pieces, printed: bytearray = printed) -> bool:
            pieces.append(len(data))
            printed.extend(data)
            return False

        ran = search._stream([sys.executable, "-c", program], stdin=b"", deadline=time.monotonic() + 30, feed=feed, gather=gather)
        assert ran is not None and ran[0] == 0
        assert bytes(printed) == b"".join(b"%07d\n" % n for n in range(writes))
        counts.append(len(pieces))
    # Read as it comes, the output arrives in many small pieces (hundreds here); left to gather, in few.
    assert counts[1] * 3 < counts[0], counts
