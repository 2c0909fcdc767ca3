"""read_file, write_file, edit_file, list_directory and tree; each returns its proto message."""

from __future__ import annotations

import codecs
import ctypes
import errno
import io
import os
import secrets
import stat
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import cast

from . import errors as E
from ._proto import tools_pb2 as pb
from .errors import ToolFailure, from_os_error
from .ignore import walk
from .paths import NotARegularFile, Parent, Roots, cut, open_regular, to_wire

DEFAULT_READ_LIMIT = 2000
MAX_LINE_CHARS = 2000
BINARY_SNIFF_BYTES = 8192
# edit_file holds the whole file: it refuses larger ones. read_file reads only its window.
MAX_READ_BYTES = 256 * 1024 * 1024
READ_CHUNK_BYTES = 256 * 1024
# After its window read_file counts the lines of at most this much more of the file; past it,
# total_lines is a lower bound (a full count would cost in proportion to the file's size).
COUNT_AHEAD_BYTES = 2 * 1024 * 1024
# A line longer than this (in bytes) cannot fit MAX_LINE_CHARS characters: only its head is kept.
LINE_HEAD_BYTES = 4 * MAX_LINE_CHARS + 4
# A file smaller than this is read whole in one go and its lines taken from memory: the same
# steps as from the file, without a buffered reader's system calls.
SMALL_READ_BYTES = 64 * 1024
DEFAULT_TREE_DEPTH = 3
DEFAULT_TREE_ENTRIES = 500


# What read_file takes lines from: the open file, or a small file's bytes.
Source = io.BufferedReader | io.BytesIO


def _looks_binary(head: bytes | bytearray) -> bool:
    return b"\x00" in head


def _open_file(parent: Parent, shown: str) -> tuple[int, os.stat_result]:
    try:
        return open_regular(parent.fd, parent.name)
    except IsADirectoryError:
        raise ToolFailure(E.IS_DIRECTORY, f"{shown} is a directory; use list_directory or tree to see what it holds") from None
    except NotARegularFile:
        raise ToolFailure(E.INVALID_ARGUMENT, f"{shown} is not a regular file") from None


def _read_all(fd: int, st: os.stat_result, shown: str) -> bytearray:
    """The whole file in one buffer (no second copy while it is read)."""
    if st.st_size > MAX_READ_BYTES:
        raise ToolFailure(E.INVALID_ARGUMENT, f"{shown} is {st.st_size} bytes, over the {MAX_READ_BYTES}-byte limit; use grep or bash (head, sed -n) to read parts of it")
    # One byte over the size seen, so a file that grew is noticed; grown further below if so.
    buf = bytearray(st.st_size + 1)
    size = 0
    while size <= MAX_READ_BYTES:
        if size == len(buf):
            buf.extend(bytes(min(len(buf), MAX_READ_BYTES + 1 - size)))
        with memoryview(buf) as view:
            n = os.readv(fd, [view[size:]])
        if not n:
            break
        size += n
    if size > MAX_READ_BYTES:
        raise ToolFailure(E.INVALID_ARGUMENT, f"{shown} grew over the {MAX_READ_BYTES}-byte limit while it was read; use grep or bash (head, sed -n) to read parts of it")
    del buf[size:]
    return buf


def _read_text(parent: Parent, shown: str, refusal: str) -> tuple[bytearray, int]:
    """The bytes and permission bits of the text file `parent.name`; a binary one is refused with `refusal`."""
    fd, st = _open_file(parent, shown)
    try:
        data = _read_all(fd, st, shown)
    finally:
        os.close(fd)
    if _looks_binary(data[:BINARY_SNIFF_BYTES]):
        raise ToolFailure(E.BINARY_FILE, refusal.format(path=shown, size=len(data)))
    return data, stat.S_IMODE(st.st_mode)


def _skip_lines(fh: Source, count: int) -> int:
    """Move past `count` lines without decoding them; the number of lines skipped (fewer at the end)."""
    skipped = 0
    while skipped < count:
        at = fh.tell()
        chunk = fh.read(READ_CHUNK_BYTES)
        if not chunk:
            # A last line without a newline is a line too.
            return skipped + (at > 0 and not _ends_with_newline(fh))
        newlines = chunk.count(b"\n")
        if skipped + newlines < count:
            skipped += newlines
            continue
        pos = -1
        for _ in range(count - skipped):
            pos = chunk.index(b"\n", pos + 1)
        fh.seek(at + pos + 1)
        return count
    return skipped


def _ends_with_newline(fh: Source) -> bool:
    at = fh.tell()
    fh.seek(at - 1)
    last = fh.read(1)
    fh.seek(at)
    return last == b"\n"


def _read_line(fh: Source) -> tuple[str, int] | None:
    """The next line (its \\n and trailing \\r dropped, cut to MAX_LINE_CHARS) and how many
    characters were cut; None at the end. A long line's rest is only counted, never kept."""
    raw = fh.readline(LINE_HEAD_BYTES)
    if not raw:
        return None
    if raw.endswith(b"\n") or len(raw) < LINE_HEAD_BYTES:
        line = raw.decode("utf-8", "replace").removesuffix("\n").rstrip("\r")
        if len(line) > MAX_LINE_CHARS:
            return line[:MAX_LINE_CHARS], len(line) - MAX_LINE_CHARS
        return line, 0
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    head = decoder.decode(raw)
    length = len(head)
    trailing_cr = len(head) - len(head.rstrip("\r"))
    while True:
        piece = fh.readline(READ_CHUNK_BYTES)
        last = not piece or piece.endswith(b"\n")
        text = decoder.decode(piece.removesuffix(b"\n"), last)
        length += len(text)
        stripped = text.rstrip("\r")
        trailing_cr = trailing_cr + len(text) if not stripped else len(text) - len(stripped)
        if last:
            break
    length -= trailing_cr
    if length > MAX_LINE_CHARS:
        return head[:MAX_LINE_CHARS], length - MAX_LINE_CHARS
    return head[:length], 0


def _prefixes(first: int, count: int) -> list[str]:
    """The prefixes of lines `first` .. `first + count - 1`: a newline, the number right-aligned in
    six columns, a tab. Those of the first PREFIX_TABLE_LINES lines come from a table built once."""
    global _prefix_table
    stop = first + count
    table = _prefix_table
    if stop > len(table) and len(table) <= PREFIX_TABLE_LINES:
        # A new table, bound in one assignment: threads reading at the same time each see a whole one.
        grown = min(max(stop, 2 * len(table)), PREFIX_TABLE_LINES + 1)
        table = _prefix_table = table + [_PREFIX % n for n in range(len(table), grown)]
    if stop <= len(table):
        return table[first:stop]
    return [_PREFIX % n for n in range(first, stop)]


_PREFIX = "\n%6d\t"
# Line prefixes kept (about 60 bytes each): the lines of most reads are numbered from the table.
PREFIX_TABLE_LINES = 16 * 1024
_prefix_table: list[str] = []


def _nth_newline(chunk: bytes, n: int) -> int:
    """The position of the `n`th newline in `chunk`, which holds more than `n`."""
    return len(chunk) - len(chunk.split(b"\n", n)[n]) - 1


_BLOCK = MAX_LINE_CHARS // 2


def _may_hold_long_line(text: str) -> bool:
    """Whether a line of `text` may be longer than MAX_LINE_CHARS: some whole block of _BLOCK
    characters (at a multiple of _BLOCK) holds no newline. A longer line holds such a block, so
    when every block holds a newline no line is too long (a look per block, no pass per line)."""
    return any(text.find("\n", at, at + _BLOCK) < 0 for at in range(0, len(text) - _BLOCK + 1, _BLOCK))


def _read_window(fh: Source, start: int, count: int) -> tuple[list[str], int, int]:
    """Up to `count` numbered lines from here: (pieces that joined are the lines, each after a
    newline; how many lines; how many were cut). The lines of a chunk are decoded, split and
    numbered at once; a line with no newline in a whole chunk goes through `_read_line`."""
    pieces: list[str] = []
    got = 0
    cut_lines = 0
    while got < count:
        at = fh.tell()
        chunk = fh.read(READ_CHUNK_BYTES)
        if not chunk:
            break
        newlines = chunk.count(b"\n")
        if not newlines:
            fh.seek(at)
            read = _read_line(fh)
            if read is None:
                break
            line, dropped = read
            if dropped:
                line += f" [... line cut, {dropped} more characters]"
                cut_lines += 1
            pieces += (_prefixes(start + got, 1)[0], line)
            got += 1
            continue
        # What follows the last newline taken is read again with the next chunk. A newline byte is
        # never part of a UTF-8 sequence, so decoding the lines together decodes each as alone.
        taken = min(newlines, count - got)
        end = chunk.rfind(b"\n") if taken == newlines else _nth_newline(chunk, taken)
        fh.seek(at + end + 1)
        text = chunk[:end].decode("utf-8", "replace")
        lines = text.split("\n")
        if "\r" in text:
            lines = [line.rstrip("\r") for line in lines]
        if len(text) > MAX_LINE_CHARS and _may_hold_long_line(text) and max(map(len, lines)) > MAX_LINE_CHARS:
            for i, line in enumerate(lines):
                if len(line) > MAX_LINE_CHARS:
                    lines[i] = line[:MAX_LINE_CHARS] + f" [... line cut, {len(line) - MAX_LINE_CHARS} more characters]"
                    cut_lines += 1
        numbered = [""] * (2 * taken)
        numbered[0::2] = _prefixes(start + got, taken)
        numbered[1::2] = lines
        pieces.append("".join(numbered))
        got += taken
    return pieces, got, cut_lines


def _count_ahead(fh: Source) -> tuple[int, bool]:
    """Lines from here on, counted within COUNT_AHEAD_BYTES without decoding: (lines, whether
    that reached the end). Short of the end the count is a lower bound."""
    lines = 0
    budget = COUNT_AHEAD_BYTES
    last = b"\n"
    while budget > 0:
        chunk = fh.read(min(READ_CHUNK_BYTES, budget))
        if not chunk:
            return lines + (last != b"\n"), True
        lines += chunk.count(b"\n")
        last = chunk[-1:]
        budget -= len(chunk)
    if fh.read(1):  # (the window is read: what comes after is only counted)
        return lines + 1, False  # a line at least starts after what was counted
    return lines + (last != b"\n"), True


def read_file(roots: Roots, path: str, offset: int = 0, limit: int = 0) -> pb.ReadFileResponse:
    """Numbered lines of a text file, from line `offset` (1-based), at most `limit` lines.

    Only the lines before and in the window are read (the ones before without decoding), and
    at most COUNT_AHEAD_BYTES after it to count the rest; past that, `total_lines` is a lower
    bound and `total_lines_is_lower_bound` says so."""
    if offset < 0 or limit < 0:
        raise ToolFailure(E.INVALID_ARGUMENT, "offset and limit must not be negative")
    shown = cut(path)
    start = max(offset, 1)
    count = limit or DEFAULT_READ_LIMIT

    def read(parent: Parent) -> tuple[str, pb.ReadFileResponse]:
        fd, st = _open_file(parent, shown)
        try:
            small = _read_small(fd) if st.st_size < SMALL_READ_BYTES else None
            # A buffer no larger than the file: a small file does not pay for a whole chunk's buffer.
            source: Source = io.BytesIO(small) if small is not None else \
                io.BufferedReader(io.FileIO(fd, "rb", closefd=False), min(max(st.st_size + 1, 4096), READ_CHUNK_BYTES))
            with source as fh:
                if _looks_binary(small[:BINARY_SNIFF_BYTES] if small is not None else os.pread(fd, BINARY_SNIFF_BYTES, 0)):
                    raise ToolFailure(
                        E.BINARY_FILE,
                        f"{shown} is a binary file ({st.st_size} bytes); read_file only reads text. Use bash (for example `file` or `xxd | head`) to inspect it.",
                    )
                before = _skip_lines(fh, start - 1)
                pieces, lines, cut_lines = _read_window(fh, start, count)
                after, complete = _count_ahead(fh)
        finally:
            os.close(fd)
        if pieces:
            pieces[0] = pieces[0][1:]  # the first line's newline: nothing comes before it
        total = before + lines + after
        if total and start > total:
            raise ToolFailure(E.INVALID_ARGUMENT, f"offset {offset} is past the end of {shown}, which has {total} lines")
        end = start + lines - 1 if lines else 0
        return parent.real, pb.ReadFileResponse(
            content="".join(pieces),
            start_line=start if lines else 0,
            end_line=end,
            total_lines=total,
            more=end < total,
            long_lines_cut=cut_lines,
            total_lines_is_lower_bound=not complete,
        )

    try:
        real, response = roots.in_parent(path, read)
    except OSError as exc:
        raise from_os_error(exc, shown) from None
    response.resolved_path = to_wire(real)
    return response


def _read_small(fd: int) -> bytes | None:
    """The whole of a file that was smaller than SMALL_READ_BYTES when opened; None (and the file
    back at its start) when it has grown past that meanwhile."""
    parts: list[bytes] = []
    size = 0
    while size <= SMALL_READ_BYTES:
        part = os.read(fd, SMALL_READ_BYTES + 1 - size)
        if not part:
            return b"".join(parts) if len(parts) != 1 else parts[0]
        parts.append(part)
        size += len(part)
    os.lseek(fd, 0, os.SEEK_SET)
    return None


Chunks = Iterable[bytes | bytearray | memoryview]


def _atomic_write(parent: Parent, chunks: Chunks, mode: int | None) -> int:
    """Replace `parent.name` with the concatenated `chunks` (consumed as written): a temporary
    file in the same directory, renamed over it. Returns the bytes written."""
    for _ in range(100):
        tmp = f".osprey-{secrets.token_hex(6)}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=parent.fd)
            break
        except FileExistsError:
            continue
    else:
        raise FileExistsError(errno.EEXIST, "no free temporary file name", parent.name)
    written = 0
    flushed = 0
    try:
        with open(fd, "wb", buffering=0, closefd=True) as fh:
            for chunk in chunks:
                with memoryview(chunk) as view:
                    while view:
                        n = fh.write(view)
                        written += n or 0
                        view = view[n:]
                if written - flushed >= WRITEBACK_STEP_BYTES:
                    # Start writing what has come so far to disk while the rest arrives: the
                    # fsync below then waits only for the last part, not for the whole file.
                    _start_writeback(fd, flushed, written - flushed)
                    flushed = written
            os.fchmod(fd, mode if mode is not None else 0o666 & ~_UMASK)
            os.fsync(fd)
        replaced = _hold_replaced(parent)
        try:
            os.replace(tmp, parent.name, src_dir_fd=parent.fd, dst_dir_fd=parent.fd)
        except BaseException:
            if replaced is not None:
                os.close(replaced)
            raise
        if replaced is not None:
            _release_in_background(replaced)
    except BaseException:
        try:
            os.unlink(tmp, dir_fd=parent.fd)
        except OSError:
            pass
        raise
    return written


def _hold_replaced(parent: Parent) -> int | None:
    """A descriptor of the large regular file about to be replaced, or None: held across the
    rename, the file's blocks are freed when it is closed (see `_release_in_background`), not by
    the rename itself (about 0.3 ms a MB on ext4)."""
    try:
        fd = os.open(parent.name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent.fd)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
    except OSError:
        os.close(fd)
        return None
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1 or st.st_size < RELEASE_IN_BACKGROUND_BYTES:
        os.close(fd)
        return None
    return fd


def _release_in_background(fd: int) -> None:
    """Close `fd`, the last reference to a replaced file, in a thread of its own: freeing its
    blocks then happens after the call has answered."""
    threading.Thread(target=os.close, args=(fd,), name="osprey-release", daemon=True).start()


# A replaced file at least this large is freed after the write answers, not during it.
RELEASE_IN_BACKGROUND_BYTES = 4 * 1024 * 1024
# `_atomic_write` hands the disk what it has written each time this much more has come.
WRITEBACK_STEP_BYTES = 512 * 1024
_SYNC_FILE_RANGE_WRITE = 2


def _load_sync_file_range() -> Callable[[int, int, int, int], int] | None:
    """Linux sync_file_range(2) from the C library (Python has no binding); None elsewhere."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    function.argtypes = (ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint)
    function.restype = ctypes.c_int
    return cast("Callable[[int, int, int, int], int]", function)


_sync_file_range = _load_sync_file_range()


def _start_writeback(fd: int, offset: int, length: int) -> None:
    """Ask the kernel to start writing this range of `fd` to disk, without waiting for it (a
    hint: where it is unavailable or fails, the closing fsync does all the work)."""
    if _sync_file_range is not None:
        _sync_file_range(fd, offset, length, _SYNC_FILE_RANGE_WRITE)


def _read_umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


# Read once at import: os.umask is process-wide, so probing it while serving would race.
_UMASK = _read_umask()


def write_file(roots: Roots, path: str, content: str) -> pb.WriteFileResponse:
    """Replace (or create) a file atomically, creating parent directories."""
    return write_file_chunks(roots, path, [content.encode("utf-8", "surrogateescape")], check_utf8=False)


def write_file_chunks(roots: Roots, path: str, chunks: Chunks, *, max_bytes: int | None = None, check_utf8: bool = True) -> pb.WriteFileResponse:
    """`write_file` of content arriving in pieces (UTF-8 bytes), each written as it comes, so
    no more than one piece is held; content that is not UTF-8 (when `check_utf8`) or is over
    `max_bytes` is refused and the file left as it was."""
    shown = cut(path)
    consumed = False

    def checked() -> Iterator[bytes | bytearray | memoryview]:
        nonlocal consumed
        consumed = True
        decoder = codecs.getincrementaldecoder("utf-8")("strict")
        size = 0
        for chunk in chunks:
            size += len(chunk)
            if max_bytes is not None and size > max_bytes:
                raise ToolFailure(E.INVALID_ARGUMENT, f"the content for {shown} is over the {max_bytes}-byte limit of write_file; write it in parts (bash can append)")
            try:
                if check_utf8:
                    decoder.decode(chunk)
            except UnicodeDecodeError:
                raise ToolFailure(E.INVALID_ARGUMENT, f"the content for {shown} is not UTF-8 text") from None
            yield chunk
        try:
            decoder.decode(b"", check_utf8)
        except UnicodeDecodeError:
            raise ToolFailure(E.INVALID_ARGUMENT, f"the content for {shown} ends inside a UTF-8 character") from None

    def write(parent: Parent) -> tuple[str, bool, int]:
        if consumed:
            # A symlink appeared on the way after the content was written: it cannot be read again.
            raise ToolFailure(E.IO_ERROR, f"{shown}: the path changed while it was written; try again")
        try:
            st = os.stat(parent.name, dir_fd=parent.fd, follow_symlinks=False)
        except FileNotFoundError:
            st = None
        if st is not None and stat.S_ISLNK(st.st_mode):
            raise OSError(errno.ELOOP, "a symbolic link is in the way", parent.name)
        if st is not None and stat.S_ISDIR(st.st_mode):
            raise ToolFailure(E.IS_DIRECTORY, f"{shown} is a directory; give a file path")
        written = _atomic_write(parent, checked(), stat.S_IMODE(st.st_mode) if st else None)
        return parent.real, st is None, written

    try:
        real, created, written = roots.in_parent(path, write, create=True)
    except OSError as exc:
        raise from_os_error(exc, shown) from None
    return pb.WriteFileResponse(resolved_path=to_wire(real), bytes_written=written, created=created)


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def edit_file(roots: Roots, path: str, old_string: str, new_string: str, replace_all: bool = False) -> pb.EditFileResponse:
    """Replace an exact string; exactly one occurrence unless `replace_all`."""
    if old_string == "":
        raise ToolFailure(E.INVALID_ARGUMENT, "old_string is empty; to create or overwrite a file use write_file")
    if old_string == new_string:
        raise ToolFailure(E.INVALID_ARGUMENT, "old_string and new_string are the same; nothing would change")
    shown = cut(path)
    old = old_string.encode("utf-8", "surrogateescape")
    new = new_string.encode("utf-8", "surrogateescape")

    def edit(parent: Parent) -> pb.EditFileResponse:
        # Read and replaced through one directory descriptor: the file edited is the file read.
        data, mode = _read_text(parent, shown, "{path} is a binary file; edit_file only edits text")
        if not _is_utf8(old_string):
            # Escaped non-UTF-8 bytes in the needle could match inside a character: match on the text.
            text = data.decode("utf-8", "surrogateescape")
            del data
            count = text.count(old_string)
            _check_count(count, replace_all, shown)
            first_line = text.count("\n", 0, text.index(old_string)) + 1
            updated = text.replace(old_string, new_string) if replace_all else text.replace(old_string, new_string, 1)
            del text
            _atomic_write(parent, [updated.encode("utf-8", "surrogateescape")], mode)
            return pb.EditFileResponse(resolved_path=to_wire(parent.real), replacements=count if replace_all else 1, first_line=first_line)
        # A UTF-8 needle starts on a character boundary, so its matches in the bytes are its matches
        # in the decoded text; the file is held once and written around the matches.
        count = data.count(old)
        _check_count(count, replace_all, shown)
        found = [data.index(old)]
        while replace_all and len(found) < count:
            found.append(data.index(old, found[-1] + len(old)))
        first_line = data.count(b"\n", 0, found[0]) + 1

        def pieces() -> Iterator[bytes | memoryview]:
            with memoryview(data) as view:
                at = 0
                for i in found:
                    yield view[at:i]
                    yield new
                    at = i + len(old)
                yield view[at:]

        _atomic_write(parent, pieces(), mode)
        return pb.EditFileResponse(resolved_path=to_wire(parent.real), replacements=count if replace_all else 1, first_line=first_line)

    try:
        return roots.in_parent(path, edit)
    except OSError as exc:
        raise from_os_error(exc, shown) from None


def _check_count(count: int, replace_all: bool, shown: str) -> None:
    if count == 0:
        raise ToolFailure(E.NO_MATCH, f"old_string was not found in {shown}; read the file again and copy the exact text, including whitespace and indentation")
    if count > 1 and not replace_all:
        raise ToolFailure(E.AMBIGUOUS_MATCH, f"old_string occurs {count} times in {shown}; add surrounding lines to make it unique, or set replace_all to replace every occurrence")


def _kind(mode: int) -> pb.DirEntry.Kind:
    if stat.S_ISLNK(mode):
        return pb.DirEntry.SYMLINK
    if stat.S_ISDIR(mode):
        return pb.DirEntry.DIRECTORY
    if stat.S_ISREG(mode):
        return pb.DirEntry.FILE
    return pb.DirEntry.OTHER


def list_directory(roots: Roots, path: str = "") -> pb.ListDirectoryResponse:
    """The entries of one directory, directories first, then by name."""
    shown = cut(path) or "."
    items = []
    with roots.open_existing_dir(path, shown, f"{shown} is a file, not a directory; use read_file to read it") as directory:
        try:
            with os.scandir(directory.fd) as it:
                for entry in it:
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    items.append(pb.DirEntry(name=to_wire(entry.name), kind=_kind(st.st_mode), size=st.st_size if stat.S_ISREG(st.st_mode) else 0))
        except OSError as exc:
            raise from_os_error(exc, shown) from None
        real = directory.real
    items.sort(key=lambda d: (d.kind != pb.DirEntry.DIRECTORY, d.name))
    return pb.ListDirectoryResponse(resolved_path=to_wire(real), entries=items)


def tree(roots: Roots, path: str = "", max_depth: int = 0, max_entries: int = 0) -> pb.TreeResponse:
    """An indented drawing of a directory, honouring `.gitignore`, to `max_depth` levels."""
    if max_depth < 0 or max_entries < 0:
        raise ToolFailure(E.INVALID_ARGUMENT, "max_depth and max_entries must not be negative")
    depth = max_depth or DEFAULT_TREE_DEPTH
    limit = max_entries or DEFAULT_TREE_ENTRIES
    shown = cut(path) or "."
    with roots.open_existing_dir(path, shown, f"{shown} is a file, not a directory") as directory:
        real = directory.real
    lines = [roots.show(real).rstrip("/") + "/"]
    dirs = files = 0
    truncated = False
    for entry in walk(real, roots.root_of(real), max_depth=depth):
        if dirs + files >= limit:
            truncated = True
            break
        name = to_wire(entry.rel.rsplit("/", 1)[-1])
        lines.append("  " * entry.depth + name + ("/" if entry.is_dir else ""))
        if entry.is_dir:
            dirs += 1
        else:
            files += 1
    if truncated:
        lines.append(f"[... stopped after {limit} entries; use a deeper path or list_directory for the rest]")
    return pb.TreeResponse(rendered="\n".join(lines), directories=dirs, files=files, truncated=truncated)
