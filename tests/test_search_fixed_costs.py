"""The cheaper paths of a search's fixed cost give the same answers as the plain ones: find_files'
output taken in bulk, its paths checked a directory at a time from one descriptor of the root,
the ignore-rule pass's look-up of a leaf directory's `.gitignore`, and the wait for output that
ends when ripgrep exits."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from osprey_sidecar import search
from osprey_sidecar.ignore import _may_hold_rules, rg_ignore_lines
from osprey_sidecar.paths import Roots
from osprey_sidecar.search import _FilesOutput


class _OneByOne:
    """_FilesOutput's answer as it was before its bulk path: a piece only counted once every
    path to return is held, else taken name by name."""

    def __init__(self, keep: int, count_limit: int) -> None:
        self.keep, self.count_limit = keep, count_limit
        self.kept: list[str] = []
        self.total = 0
        self.unparsable = False
        self._partial = b""

    def feed(self, data: bytes) -> bool:
        if len(self.kept) >= self.keep:
            last, count = data.rfind(b"\x00"), data.count(b"\x00")
            if self.total + count < self.count_limit and len(data) - last - 1 + (0 if count else len(self._partial)) <= 2 * search.PATH_MAX_BYTES:
                self.total += count
                self._partial = data[last + 1 :] if count else self._partial + data
                return False
        *names, self._partial = (self._partial + data).split(b"\x00")
        for name in names:
            if not name.startswith(b"./"):
                self.unparsable = True
                return True
            self.total += 1
            if len(self.kept) < self.keep:
                self.kept.append(os.fsdecode(name[2:]))
            elif self.total >= self.count_limit:
                return True
        return False


def _pieces(data: bytes, rng: random.Random) -> list[bytes]:
    cuts = sorted(rng.sample(range(1, len(data)), min(len(data) - 1, rng.randrange(1, 40))))
    return [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]


@pytest.mark.parametrize("seed", range(40))
def test_paths_taken_in_bulk_answer_as_one_by_one(seed: int) -> None:
    rng = random.Random(seed)
    count = rng.choice([5, 99, 100, 101, 250])
    names = [b"./d%d/f%03d.txt" % (i // 7, i) for i in range(count)]
    if seed % 3 == 0:  # a name this parser does not follow, somewhere (perhaps past the limit)
        names[rng.randrange(count)] = b"d/no-prefix.txt"
    if seed % 5 == 0:
        names[rng.randrange(count)] = b"./caf\xc3\xa9/\xff.txt"  # not UTF-8 in part
    data = b"".join(name + b"\x00" for name in names)
    keep = rng.choice([1, 10, 100, count])
    limit = rng.choice([keep + 1, keep + 60, 10_000])  # (always above what is kept)
    bulk, plain = _FilesOutput(keep, limit, None), _OneByOne(keep, limit)
    for piece in _pieces(data, rng) if seed % 2 else [data]:
        ended = bulk.feed(piece)
        assert ended == plain.feed(piece)
        if ended:
            break
    assert bulk.unparsable == plain.unparsable
    if not plain.unparsable:  # (else the caller walks instead, whatever was taken)
        assert (bulk.kept, bulk.total) == (plain.kept, plain.total)


def test_a_piece_of_exactly_the_kept_paths_is_kept_whole() -> None:
    data = b"".join(b"./d/f%04d\x00" % i for i in range(1_000))
    out = _FilesOutput(1_000, 10_000, None)
    assert out.feed(data) is False
    assert out.kept == [f"d/f{i:04d}" for i in range(1_000)] and out.total == 1_000


def _tree(root: Path) -> list[str]:
    """Regular files in directories of several sizes, and what is not one among them."""
    rels = []
    for d, files in (("few", 3), ("many", 30), ("a/deep", 9)):
        (root / d).mkdir(parents=True)
        for n in range(files):
            (root / d / f"f{n:02d}.txt").write_text("x\n")
            rels.append(f"{d}/f{n:02d}.txt")
    (root / "top.txt").write_text("x\n")
    (root / "few" / "link.txt").symlink_to(root / "few" / "f00.txt")
    os.mkfifo(root / "many" / "fifo.txt")
    (root / "many" / "sub").mkdir()
    (root / "linked").symlink_to(root / "many", target_is_directory=True)
    return [*rels, "top.txt"]


def test_paths_not_regular_below_the_root_are_found(tmp_path: Path) -> None:
    regular = _tree(tmp_path)
    odd = ["few/link.txt", "few/gone.txt", "many/fifo.txt", "many/sub", "linked/f00.txt", "nowhere/f.txt", "a/../top.txt"]
    # A missing name among few looked up one by one does not hide the names after it.
    asked = ["few/gone.txt", *regular, *odd]
    assert search._not_regular(str(tmp_path), str(tmp_path), asked) == set(odd)
    assert set(asked) - search._not_regular(str(tmp_path), str(tmp_path), asked) == set(regular)
    below = tmp_path / "many"
    assert search._not_regular(str(tmp_path), str(below), ["f01.txt", "fifo.txt", "sub/x"]) == {"fifo.txt", "sub/x"}


def test_find_files_returns_every_path_up_to_exactly_its_limit(tmp_path: Path) -> None:
    regular = _tree(tmp_path)
    roots = Roots([str(tmp_path)])
    files = sorted(r for r in regular)
    for limit in (len(files), len(files) - 1, 1):
        answer = search.find_files(roots, "*.txt", limit=limit)
        assert list(answer.paths) == files[:limit]
        assert answer.total == len(files) and answer.truncated == (limit < len(files))


def test_a_leaf_directory_is_looked_into_only_for_its_gitignore(tmp_path: Path) -> None:
    for name in ("plain", "ruled", "linked", "dir"):
        (tmp_path / name).mkdir()
    (tmp_path / "ruled" / ".gitignore").write_text("*.log\n")
    (tmp_path / "linked" / ".gitignore").symlink_to(tmp_path / "ruled" / ".gitignore")
    (tmp_path / "dir" / ".gitignore").mkdir()
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert [_may_hold_rules(fd, name) for name in ("plain", "ruled", "linked", "dir", "missing")] == [False, True, True, True, False]
    finally:
        os.close(fd)
    # Only the regular file's rules are collected; the symlink's and the directory's are not.
    assert rg_ignore_lines(str(tmp_path), str(tmp_path)) == ["/ruled/**/*.log", ".git"]


def test_a_gitignore_written_between_searches_is_seen(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.log").write_text("x\n")
    (tmp_path / "d" / "a.txt").write_text("x\n")
    roots = Roots([str(tmp_path)])
    assert list(search.find_files(roots, "a.*").paths) == ["d/a.log", "d/a.txt"]
    (tmp_path / "d" / ".gitignore").write_text("*.log\n")
    assert list(search.find_files(roots, "a.*").paths) == ["d/a.txt"]
    (tmp_path / "d" / ".gitignore").write_text("*.txt\n")
    assert list(search.find_files(roots, "a.*").paths) == ["d/a.log"]


def test_the_wait_for_output_ends_with_the_process() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "print('done')"], stdout=subprocess.PIPE)
    pidfd = search._pidfd(proc.pid)
    try:
        assert proc.stdout is not None
        search._gather(pidfd)  # returns whether or not it has exited yet
        assert proc.stdout.read() == b"done\n"
        assert search._wait_exit(proc, search.time.monotonic() + 10, None, pidfd) == 0
        os.fstat(pidfd)  # the caller's descriptor is left open
    finally:
        if pidfd >= 0:
            os.close(pidfd)
        proc.stdout.close()  # type: ignore[union-attr]
