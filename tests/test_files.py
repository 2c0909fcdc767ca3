"""Bounded file reading (osprey.files): real files, links, FIFOs and devices in a temporary
directory; a read that would block runs in a thread that must come back."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from osprey import files
from osprey.errors import ConfigError
from osprey.files import FileRefused, read_bounded, read_file, read_no_follow

RETURNS_WITHIN_S = 10.0


def returns(call: Callable[[], Any]) -> Any:
    """`call()`, run in a thread that must return (or raise) within RETURNS_WITHIN_S."""
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(("value", call()))
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            out.append(("error", exc))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(RETURNS_WITHIN_S)
    assert not thread.is_alive(), "the read blocked"
    kind, value = out[0]
    if kind == "error":
        raise value
    return value


def refused(call: Callable[[], Any]) -> FileRefused:
    with pytest.raises(FileRefused) as info:
        returns(call)
    return info.value


# ------------------------------------------------------------------ read_file


def test_a_regular_file_is_read_whole_up_to_its_bound(tmp_path: Path) -> None:
    path = tmp_path / "a.txt"
    path.write_bytes(b"x" * 100)
    assert read_file(path, 100) == b"x" * 100
    assert read_file(str(path), 1000) == b"x" * 100
    (tmp_path / "empty").write_bytes(b"")
    assert read_file(tmp_path / "empty", 0) == b""


def test_nothing_there_is_none(tmp_path: Path) -> None:
    assert read_file(tmp_path / "missing", 10) is None
    assert read_file(tmp_path / "missing" / "deeper", 10) is None
    (tmp_path / "file").write_text("x")
    assert read_file(tmp_path / "file" / "under-a-file", 10) is None  # NotADirectoryError
    assert read_file(tmp_path, 10) is None  # a directory


def test_a_symlink_is_refused_unless_followed(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.write_text("secret")
    link = tmp_path / "link"
    link.symlink_to(target)
    error = refused(lambda: read_file(link, 100))
    assert error.reason == "symlink" and "symbolic links" in error.strerror
    assert read_file(link, 100, follow_symlinks=True) == b"secret"
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere")
    assert refused(lambda: read_file(dangling, 100)).reason == "symlink"
    assert read_file(dangling, 100, follow_symlinks=True) is None
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    error = refused(lambda: read_file(loop, 100, follow_symlinks=True))
    assert error.reason == "unreadable" and error.error is not None


def test_a_file_over_the_bound_is_refused_or_cut(tmp_path: Path) -> None:
    path = tmp_path / "big"
    path.write_bytes(b"0123456789" * 10)
    error = refused(lambda: read_file(path, 99))
    assert (error.reason, error.size) == ("too_large", 100)
    assert read_file(path, 99, cut=True) == (b"0123456789" * 10)[:99]
    assert read_file(path, 100, cut=True) == b"0123456789" * 10


def test_a_huge_sparse_file_is_refused_at_once_and_cut_without_reading_it(tmp_path: Path) -> None:
    path = tmp_path / "sparse"
    with open(path, "wb") as fh:
        fh.truncate(8 * 1024**3)
    start = time.monotonic()
    assert refused(lambda: read_file(path, 1024)).size == 8 * 1024**3
    assert returns(lambda: read_file(path, 1024, cut=True)) == b"\0" * 1024
    assert time.monotonic() - start < RETURNS_WITHIN_S


def test_a_file_that_reads_longer_than_its_size_is_cut_off_at_the_bound() -> None:
    # /proc files report a size of 0, so only reading finds them over the bound.
    status = Path("/proc/self/status")
    if not status.exists():
        pytest.skip("no /proc")
    error = refused(lambda: read_file(status, 16))
    assert (error.reason, error.size) == ("too_large", None)
    assert len(read_file(status, 16, cut=True) or b"") == 16


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert refused(lambda: read_file(fifo, 100)).reason == "not_regular"
    assert refused(lambda: read_file(fifo, 100, cut=True)).reason == "not_regular"
    link = tmp_path / "to-fifo"
    link.symlink_to(fifo)
    assert refused(lambda: read_file(link, 100, follow_symlinks=True)).reason == "not_regular"


def test_a_device_is_refused_without_being_read(tmp_path: Path) -> None:
    assert refused(lambda: read_file("/dev/zero", 100)).reason == "not_regular"
    link = tmp_path / "zero"
    link.symlink_to("/dev/zero")
    assert refused(lambda: read_file(link, 100, follow_symlinks=True)).reason == "not_regular"


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_a_file_it_may_not_read_is_unreadable(tmp_path: Path) -> None:
    path = tmp_path / "private"
    path.write_text("x")
    path.chmod(0)
    error = refused(lambda: read_file(path, 10))
    assert error.reason == "unreadable" and isinstance(error.error, PermissionError)


# ------------------------------------------------------------------ read_no_follow


def test_read_no_follow_gives_the_head_of_a_regular_file_and_none_for_anything_else(tmp_path: Path) -> None:
    path = tmp_path / "record"
    path.write_bytes(b"abcdef")
    assert read_no_follow(path, 3) == b"abc"
    assert read_no_follow(str(path), 100) == b"abcdef"
    link = tmp_path / "link"
    link.symlink_to(path)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for nothing in (link, fifo, tmp_path / "missing", tmp_path, Path("/dev/zero")):
        assert returns(lambda nothing=nothing: read_no_follow(nothing, 100)) is None, nothing


# ------------------------------------------------------------------ read_bounded


def test_read_bounded_follows_links_and_says_what_is_wrong(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text('model = "m"\n')
    link = tmp_path / "linked.toml"
    link.symlink_to(config)
    assert read_bounded(link, "a config file") == b'model = "m"\n'
    assert read_bounded(tmp_path / "missing.toml", "a config file") is None
    assert read_bounded(tmp_path, "a config file") is None

    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError) as info:
        returns(lambda: read_bounded(fifo, "a config file"))
    assert str(info.value) == (f"{fifo}: not a regular file, so it is not read as a config file; "
                               "replace it with a regular file or remove it")

    big = tmp_path / "big.toml"
    big.write_bytes(b"#" * (files.MAX_FILE_BYTES + 1))
    with pytest.raises(ConfigError, match=r"larger than 1 MiB, the most Osprey reads as a config file; shorten it or remove it"):
        read_bounded(big, "a config file")
    with pytest.raises(ConfigError, match=r"larger than 100 bytes, the most Osprey reads as the approvals file"):
        read_bounded(big, "the approvals file", 100)

    loop = tmp_path / "loop.toml"
    loop.symlink_to(loop)
    with pytest.raises(ConfigError, match=r"loop\.toml: cannot be read: "):
        read_bounded(loop, "a config file")
