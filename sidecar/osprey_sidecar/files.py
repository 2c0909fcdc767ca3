"""read_file, write_file, edit_file, list_directory and tree; each returns its proto message."""

from __future__ import annotations

import errno
import os
import secrets
import stat

from . import errors as E
from ._proto import tools_pb2 as pb
from .errors import ToolFailure, from_os_error
from .ignore import walk
from .paths import NotARegularFile, Parent, Roots, cut, open_regular, to_wire

DEFAULT_READ_LIMIT = 2000
MAX_LINE_CHARS = 2000
BINARY_SNIFF_BYTES = 8192
MAX_READ_BYTES = 256 * 1024 * 1024
DEFAULT_TREE_DEPTH = 3
DEFAULT_TREE_ENTRIES = 500


def _looks_binary(head: bytes) -> bool:
    return b"\x00" in head


def _read_all(fd: int, st: os.stat_result, shown: str) -> bytes:
    if st.st_size > MAX_READ_BYTES:
        raise ToolFailure(E.INVALID_ARGUMENT, f"{shown} is {st.st_size} bytes, over the {MAX_READ_BYTES}-byte limit; use grep or bash (head, sed -n) to read parts of it")
    chunks = []
    size = 0
    while size <= MAX_READ_BYTES:
        chunk = os.read(fd, min(1 << 20, MAX_READ_BYTES + 1 - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    if size > MAX_READ_BYTES:
        raise ToolFailure(E.INVALID_ARGUMENT, f"{shown} grew over the {MAX_READ_BYTES}-byte limit while it was read; use grep or bash (head, sed -n) to read parts of it")
    return b"".join(chunks)


def _read_text(parent: Parent, shown: str, refusal: str) -> tuple[bytes, int]:
    """The bytes and permission bits of the text file `parent.name`; a binary one is refused with `refusal`."""
    try:
        fd, st = open_regular(parent.fd, parent.name)
    except IsADirectoryError:
        raise ToolFailure(E.IS_DIRECTORY, f"{shown} is a directory; use list_directory or tree to see what it holds") from None
    except NotARegularFile:
        raise ToolFailure(E.INVALID_ARGUMENT, f"{shown} is not a regular file") from None
    try:
        data = _read_all(fd, st, shown)
    finally:
        os.close(fd)
    if _looks_binary(data[:BINARY_SNIFF_BYTES]):
        raise ToolFailure(E.BINARY_FILE, refusal.format(path=shown, size=len(data)))
    return data, stat.S_IMODE(st.st_mode)


def read_file(roots: Roots, path: str, offset: int = 0, limit: int = 0) -> pb.ReadFileResponse:
    """Numbered lines of a text file, from line `offset` (1-based), at most `limit` lines."""
    if offset < 0 or limit < 0:
        raise ToolFailure(E.INVALID_ARGUMENT, "offset and limit must not be negative")
    shown = cut(path)
    refusal = "{path} is a binary file ({size} bytes); read_file only reads text. Use bash (for example `file` or `xxd | head`) to inspect it."
    try:
        real, (data, _) = roots.in_parent(path, lambda parent: (parent.real, _read_text(parent, shown, refusal)))
    except OSError as exc:
        raise from_os_error(exc, shown) from None
    text = data.decode("utf-8", "replace")
    # Lines end at \n, as grep counts them (str.splitlines would also split at \r, \f, \x85, \u2028, ...).
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    total = len(lines)
    start = max(offset, 1)
    count = limit or DEFAULT_READ_LIMIT
    if total and start > total:
        raise ToolFailure(E.INVALID_ARGUMENT, f"offset {offset} is past the end of {shown}, which has {total} lines")
    chosen = lines[start - 1 : start - 1 + count]
    cut_lines = 0
    out = []
    for number, line in enumerate(chosen, start):
        line = line.rstrip("\r")
        if len(line) > MAX_LINE_CHARS:
            line = line[:MAX_LINE_CHARS] + f" [... line cut, {len(line) - MAX_LINE_CHARS} more characters]"
            cut_lines += 1
        out.append(f"{number:>6}\t{line}")
    end = start + len(chosen) - 1 if chosen else 0
    return pb.ReadFileResponse(
        content="\n".join(out),
        start_line=start if chosen else 0,
        end_line=end,
        total_lines=total,
        more=end < total,
        long_lines_cut=cut_lines,
        resolved_path=to_wire(real),
    )


def _atomic_write(parent: Parent, data: bytes, mode: int | None) -> None:
    """Replace `parent.name` with `data`: a temporary file in the same directory, renamed over it."""
    for _ in range(100):
        tmp = f".osprey-{secrets.token_hex(6)}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=parent.fd)
            break
        except FileExistsError:
            continue
    else:
        raise FileExistsError(errno.EEXIST, "no free temporary file name", parent.name)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fchmod(fh.fileno(), mode if mode is not None else 0o666 & ~_UMASK)
            os.fsync(fh.fileno())
        os.replace(tmp, parent.name, src_dir_fd=parent.fd, dst_dir_fd=parent.fd)
    except BaseException:
        try:
            os.unlink(tmp, dir_fd=parent.fd)
        except OSError:
            pass
        raise


def _read_umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


# Read once at import: os.umask is process-wide, so probing it while serving would race.
_UMASK = _read_umask()


def write_file(roots: Roots, path: str, content: str) -> pb.WriteFileResponse:
    """Replace (or create) a file atomically, creating parent directories."""
    data = content.encode("utf-8", "surrogateescape")
    shown = cut(path)

    def write(parent: Parent) -> tuple[str, bool]:
        try:
            st = os.stat(parent.name, dir_fd=parent.fd, follow_symlinks=False)
        except FileNotFoundError:
            st = None
        if st is not None and stat.S_ISLNK(st.st_mode):
            raise OSError(errno.ELOOP, "a symbolic link is in the way", parent.name)
        if st is not None and stat.S_ISDIR(st.st_mode):
            raise ToolFailure(E.IS_DIRECTORY, f"{shown} is a directory; give a file path")
        _atomic_write(parent, data, stat.S_IMODE(st.st_mode) if st else None)
        return parent.real, st is None

    try:
        real, created = roots.in_parent(path, write, create=True)
    except OSError as exc:
        raise from_os_error(exc, shown) from None
    return pb.WriteFileResponse(resolved_path=to_wire(real), bytes_written=len(data), created=created)


def edit_file(roots: Roots, path: str, old_string: str, new_string: str, replace_all: bool = False) -> pb.EditFileResponse:
    """Replace an exact string; exactly one occurrence unless `replace_all`."""
    if old_string == "":
        raise ToolFailure(E.INVALID_ARGUMENT, "old_string is empty; to create or overwrite a file use write_file")
    if old_string == new_string:
        raise ToolFailure(E.INVALID_ARGUMENT, "old_string and new_string are the same; nothing would change")
    shown = cut(path)

    def edit(parent: Parent) -> pb.EditFileResponse:
        # Read and replaced through one directory descriptor: the file edited is the file read.
        data, mode = _read_text(parent, shown, "{path} is a binary file; edit_file only edits text")
        text = data.decode("utf-8", "surrogateescape")
        count = text.count(old_string)
        if count == 0:
            raise ToolFailure(E.NO_MATCH, f"old_string was not found in {shown}; read the file again and copy the exact text, including whitespace and indentation")
        if count > 1 and not replace_all:
            raise ToolFailure(E.AMBIGUOUS_MATCH, f"old_string occurs {count} times in {shown}; add surrounding lines to make it unique, or set replace_all to replace every occurrence")
        first_line = text[: text.index(old_string)].count("\n") + 1
        updated = text.replace(old_string, new_string) if replace_all else text.replace(old_string, new_string, 1)
        _atomic_write(parent, updated.encode("utf-8", "surrogateescape"), mode)
        return pb.EditFileResponse(resolved_path=to_wire(parent.real), replacements=count if replace_all else 1, first_line=first_line)

    try:
        return roots.in_parent(path, edit)
    except OSError as exc:
        raise from_os_error(exc, shown) from None


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
