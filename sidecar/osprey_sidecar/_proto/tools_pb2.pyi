from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ProgramSignal(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PROGRAM_SIGNAL_UNSPECIFIED: _ClassVar[ProgramSignal]
    PROGRAM_SIGNAL_TERM: _ClassVar[ProgramSignal]
    PROGRAM_SIGNAL_KILL: _ClassVar[ProgramSignal]
    PROGRAM_SIGNAL_INT: _ClassVar[ProgramSignal]
PROGRAM_SIGNAL_UNSPECIFIED: ProgramSignal
PROGRAM_SIGNAL_TERM: ProgramSignal
PROGRAM_SIGNAL_KILL: ProgramSignal
PROGRAM_SIGNAL_INT: ProgramSignal

class ReadFileRequest(_message.Message):
    __slots__ = ("path", "offset", "limit")
    PATH_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    path: str
    offset: int
    limit: int
    def __init__(self, path: _Optional[str] = ..., offset: _Optional[int] = ..., limit: _Optional[int] = ...) -> None: ...

class ReadFileResponse(_message.Message):
    __slots__ = ("content", "start_line", "end_line", "total_lines", "more", "long_lines_cut", "resolved_path", "total_lines_is_lower_bound")
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    START_LINE_FIELD_NUMBER: _ClassVar[int]
    END_LINE_FIELD_NUMBER: _ClassVar[int]
    TOTAL_LINES_FIELD_NUMBER: _ClassVar[int]
    MORE_FIELD_NUMBER: _ClassVar[int]
    LONG_LINES_CUT_FIELD_NUMBER: _ClassVar[int]
    RESOLVED_PATH_FIELD_NUMBER: _ClassVar[int]
    TOTAL_LINES_IS_LOWER_BOUND_FIELD_NUMBER: _ClassVar[int]
    content: str
    start_line: int
    end_line: int
    total_lines: int
    more: bool
    long_lines_cut: int
    resolved_path: str
    total_lines_is_lower_bound: bool
    def __init__(self, content: _Optional[str] = ..., start_line: _Optional[int] = ..., end_line: _Optional[int] = ..., total_lines: _Optional[int] = ..., more: _Optional[bool] = ..., long_lines_cut: _Optional[int] = ..., resolved_path: _Optional[str] = ..., total_lines_is_lower_bound: _Optional[bool] = ...) -> None: ...

class ReadFilesRequest(_message.Message):
    __slots__ = ("reads",)
    READS_FIELD_NUMBER: _ClassVar[int]
    reads: _containers.RepeatedCompositeFieldContainer[ReadFileRequest]
    def __init__(self, reads: _Optional[_Iterable[_Union[ReadFileRequest, _Mapping]]] = ...) -> None: ...

class ReadFileError(_message.Message):
    __slots__ = ("code", "message", "category")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CATEGORY_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    category: str
    def __init__(self, code: _Optional[int] = ..., message: _Optional[str] = ..., category: _Optional[str] = ...) -> None: ...

class ReadFilesItem(_message.Message):
    __slots__ = ("file", "error")
    FILE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    file: ReadFileResponse
    error: ReadFileError
    def __init__(self, file: _Optional[_Union[ReadFileResponse, _Mapping]] = ..., error: _Optional[_Union[ReadFileError, _Mapping]] = ...) -> None: ...

class ReadFilesResponse(_message.Message):
    __slots__ = ("items",)
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[ReadFilesItem]
    def __init__(self, items: _Optional[_Iterable[_Union[ReadFilesItem, _Mapping]]] = ...) -> None: ...

class WriteFileRequest(_message.Message):
    __slots__ = ("path", "content")
    PATH_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    path: str
    content: str
    def __init__(self, path: _Optional[str] = ..., content: _Optional[str] = ...) -> None: ...

class WriteFileChunk(_message.Message):
    __slots__ = ("path", "data", "last")
    PATH_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    LAST_FIELD_NUMBER: _ClassVar[int]
    path: str
    data: bytes
    last: bool
    def __init__(self, path: _Optional[str] = ..., data: _Optional[bytes] = ..., last: _Optional[bool] = ...) -> None: ...

class WriteFileResponse(_message.Message):
    __slots__ = ("resolved_path", "bytes_written", "created")
    RESOLVED_PATH_FIELD_NUMBER: _ClassVar[int]
    BYTES_WRITTEN_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    resolved_path: str
    bytes_written: int
    created: bool
    def __init__(self, resolved_path: _Optional[str] = ..., bytes_written: _Optional[int] = ..., created: _Optional[bool] = ...) -> None: ...

class EditFileRequest(_message.Message):
    __slots__ = ("path", "old_string", "new_string", "replace_all")
    PATH_FIELD_NUMBER: _ClassVar[int]
    OLD_STRING_FIELD_NUMBER: _ClassVar[int]
    NEW_STRING_FIELD_NUMBER: _ClassVar[int]
    REPLACE_ALL_FIELD_NUMBER: _ClassVar[int]
    path: str
    old_string: str
    new_string: str
    replace_all: bool
    def __init__(self, path: _Optional[str] = ..., old_string: _Optional[str] = ..., new_string: _Optional[str] = ..., replace_all: _Optional[bool] = ...) -> None: ...

class EditFileResponse(_message.Message):
    __slots__ = ("resolved_path", "replacements", "first_line")
    RESOLVED_PATH_FIELD_NUMBER: _ClassVar[int]
    REPLACEMENTS_FIELD_NUMBER: _ClassVar[int]
    FIRST_LINE_FIELD_NUMBER: _ClassVar[int]
    resolved_path: str
    replacements: int
    first_line: int
    def __init__(self, resolved_path: _Optional[str] = ..., replacements: _Optional[int] = ..., first_line: _Optional[int] = ...) -> None: ...

class BashRequest(_message.Message):
    __slots__ = ("command", "timeout_ms", "workdir", "max_output_bytes")
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    WORKDIR_FIELD_NUMBER: _ClassVar[int]
    MAX_OUTPUT_BYTES_FIELD_NUMBER: _ClassVar[int]
    command: str
    timeout_ms: int
    workdir: str
    max_output_bytes: int
    def __init__(self, command: _Optional[str] = ..., timeout_ms: _Optional[int] = ..., workdir: _Optional[str] = ..., max_output_bytes: _Optional[int] = ...) -> None: ...

class BashOutput(_message.Message):
    __slots__ = ("data",)
    DATA_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    def __init__(self, data: _Optional[bytes] = ...) -> None: ...

class BashExit(_message.Message):
    __slots__ = ("exit_code", "signal", "timed_out", "tail", "dropped_bytes", "duration_ms", "killed_background")
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    SIGNAL_FIELD_NUMBER: _ClassVar[int]
    TIMED_OUT_FIELD_NUMBER: _ClassVar[int]
    TAIL_FIELD_NUMBER: _ClassVar[int]
    DROPPED_BYTES_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    KILLED_BACKGROUND_FIELD_NUMBER: _ClassVar[int]
    exit_code: int
    signal: int
    timed_out: bool
    tail: bytes
    dropped_bytes: int
    duration_ms: int
    killed_background: bool
    def __init__(self, exit_code: _Optional[int] = ..., signal: _Optional[int] = ..., timed_out: _Optional[bool] = ..., tail: _Optional[bytes] = ..., dropped_bytes: _Optional[int] = ..., duration_ms: _Optional[int] = ..., killed_background: _Optional[bool] = ...) -> None: ...

class BashEvent(_message.Message):
    __slots__ = ("output", "exit")
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    EXIT_FIELD_NUMBER: _ClassVar[int]
    output: BashOutput
    exit: BashExit
    def __init__(self, output: _Optional[_Union[BashOutput, _Mapping]] = ..., exit: _Optional[_Union[BashExit, _Mapping]] = ...) -> None: ...

class FindFilesRequest(_message.Message):
    __slots__ = ("pattern", "path", "limit")
    PATTERN_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    pattern: str
    path: str
    limit: int
    def __init__(self, pattern: _Optional[str] = ..., path: _Optional[str] = ..., limit: _Optional[int] = ...) -> None: ...

class FindFilesResponse(_message.Message):
    __slots__ = ("paths", "truncated", "total")
    PATHS_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    paths: _containers.RepeatedScalarFieldContainer[str]
    truncated: bool
    total: int
    def __init__(self, paths: _Optional[_Iterable[str]] = ..., truncated: _Optional[bool] = ..., total: _Optional[int] = ...) -> None: ...

class GrepRequest(_message.Message):
    __slots__ = ("pattern", "path", "glob", "ignore_case", "max_matches")
    PATTERN_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    GLOB_FIELD_NUMBER: _ClassVar[int]
    IGNORE_CASE_FIELD_NUMBER: _ClassVar[int]
    MAX_MATCHES_FIELD_NUMBER: _ClassVar[int]
    pattern: str
    path: str
    glob: str
    ignore_case: bool
    max_matches: int
    def __init__(self, pattern: _Optional[str] = ..., path: _Optional[str] = ..., glob: _Optional[str] = ..., ignore_case: _Optional[bool] = ..., max_matches: _Optional[int] = ...) -> None: ...

class GrepMatch(_message.Message):
    __slots__ = ("path", "line", "text")
    PATH_FIELD_NUMBER: _ClassVar[int]
    LINE_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    path: str
    line: int
    text: str
    def __init__(self, path: _Optional[str] = ..., line: _Optional[int] = ..., text: _Optional[str] = ...) -> None: ...

class GrepResponse(_message.Message):
    __slots__ = ("matches", "truncated", "total", "engine", "paths", "match_paths", "match_lines", "match_texts")
    MATCHES_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    ENGINE_FIELD_NUMBER: _ClassVar[int]
    PATHS_FIELD_NUMBER: _ClassVar[int]
    MATCH_PATHS_FIELD_NUMBER: _ClassVar[int]
    MATCH_LINES_FIELD_NUMBER: _ClassVar[int]
    MATCH_TEXTS_FIELD_NUMBER: _ClassVar[int]
    matches: _containers.RepeatedCompositeFieldContainer[GrepMatch]
    truncated: bool
    total: int
    engine: str
    paths: _containers.RepeatedScalarFieldContainer[str]
    match_paths: _containers.RepeatedScalarFieldContainer[int]
    match_lines: _containers.RepeatedScalarFieldContainer[int]
    match_texts: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, matches: _Optional[_Iterable[_Union[GrepMatch, _Mapping]]] = ..., truncated: _Optional[bool] = ..., total: _Optional[int] = ..., engine: _Optional[str] = ..., paths: _Optional[_Iterable[str]] = ..., match_paths: _Optional[_Iterable[int]] = ..., match_lines: _Optional[_Iterable[int]] = ..., match_texts: _Optional[_Iterable[str]] = ...) -> None: ...

class ListDirectoryRequest(_message.Message):
    __slots__ = ("path",)
    PATH_FIELD_NUMBER: _ClassVar[int]
    path: str
    def __init__(self, path: _Optional[str] = ...) -> None: ...

class DirEntry(_message.Message):
    __slots__ = ("name", "kind", "size")
    class Kind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        KIND_UNSPECIFIED: _ClassVar[DirEntry.Kind]
        FILE: _ClassVar[DirEntry.Kind]
        DIRECTORY: _ClassVar[DirEntry.Kind]
        SYMLINK: _ClassVar[DirEntry.Kind]
        OTHER: _ClassVar[DirEntry.Kind]
    KIND_UNSPECIFIED: DirEntry.Kind
    FILE: DirEntry.Kind
    DIRECTORY: DirEntry.Kind
    SYMLINK: DirEntry.Kind
    OTHER: DirEntry.Kind
    NAME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    name: str
    kind: DirEntry.Kind
    size: int
    def __init__(self, name: _Optional[str] = ..., kind: _Optional[_Union[DirEntry.Kind, str]] = ..., size: _Optional[int] = ...) -> None: ...

class ListDirectoryResponse(_message.Message):
    __slots__ = ("resolved_path", "entries")
    RESOLVED_PATH_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    resolved_path: str
    entries: _containers.RepeatedCompositeFieldContainer[DirEntry]
    def __init__(self, resolved_path: _Optional[str] = ..., entries: _Optional[_Iterable[_Union[DirEntry, _Mapping]]] = ...) -> None: ...

class ListDirectoriesRequest(_message.Message):
    __slots__ = ("calls",)
    CALLS_FIELD_NUMBER: _ClassVar[int]
    calls: _containers.RepeatedCompositeFieldContainer[ListDirectoryRequest]
    def __init__(self, calls: _Optional[_Iterable[_Union[ListDirectoryRequest, _Mapping]]] = ...) -> None: ...

class ListDirectoriesItem(_message.Message):
    __slots__ = ("listing", "error")
    LISTING_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    listing: ListDirectoryResponse
    error: ReadFileError
    def __init__(self, listing: _Optional[_Union[ListDirectoryResponse, _Mapping]] = ..., error: _Optional[_Union[ReadFileError, _Mapping]] = ...) -> None: ...

class ListDirectoriesResponse(_message.Message):
    __slots__ = ("items",)
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[ListDirectoriesItem]
    def __init__(self, items: _Optional[_Iterable[_Union[ListDirectoriesItem, _Mapping]]] = ...) -> None: ...

class TreeRequest(_message.Message):
    __slots__ = ("path", "max_depth", "max_entries")
    PATH_FIELD_NUMBER: _ClassVar[int]
    MAX_DEPTH_FIELD_NUMBER: _ClassVar[int]
    MAX_ENTRIES_FIELD_NUMBER: _ClassVar[int]
    path: str
    max_depth: int
    max_entries: int
    def __init__(self, path: _Optional[str] = ..., max_depth: _Optional[int] = ..., max_entries: _Optional[int] = ...) -> None: ...

class TreeResponse(_message.Message):
    __slots__ = ("rendered", "directories", "files", "truncated")
    RENDERED_FIELD_NUMBER: _ClassVar[int]
    DIRECTORIES_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    rendered: str
    directories: int
    files: int
    truncated: bool
    def __init__(self, rendered: _Optional[str] = ..., directories: _Optional[int] = ..., files: _Optional[int] = ..., truncated: _Optional[bool] = ...) -> None: ...

class TreesRequest(_message.Message):
    __slots__ = ("calls",)
    CALLS_FIELD_NUMBER: _ClassVar[int]
    calls: _containers.RepeatedCompositeFieldContainer[TreeRequest]
    def __init__(self, calls: _Optional[_Iterable[_Union[TreeRequest, _Mapping]]] = ...) -> None: ...

class TreesItem(_message.Message):
    __slots__ = ("tree", "error")
    TREE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    tree: TreeResponse
    error: ReadFileError
    def __init__(self, tree: _Optional[_Union[TreeResponse, _Mapping]] = ..., error: _Optional[_Union[ReadFileError, _Mapping]] = ...) -> None: ...

class TreesResponse(_message.Message):
    __slots__ = ("items",)
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[TreesItem]
    def __init__(self, items: _Optional[_Iterable[_Union[TreesItem, _Mapping]]] = ...) -> None: ...

class ExecRequest(_message.Message):
    __slots__ = ("argv", "stdin", "workdir", "timeout_ms", "max_output_bytes")
    ARGV_FIELD_NUMBER: _ClassVar[int]
    STDIN_FIELD_NUMBER: _ClassVar[int]
    WORKDIR_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_OUTPUT_BYTES_FIELD_NUMBER: _ClassVar[int]
    argv: _containers.RepeatedScalarFieldContainer[str]
    stdin: bytes
    workdir: str
    timeout_ms: int
    max_output_bytes: int
    def __init__(self, argv: _Optional[_Iterable[str]] = ..., stdin: _Optional[bytes] = ..., workdir: _Optional[str] = ..., timeout_ms: _Optional[int] = ..., max_output_bytes: _Optional[int] = ...) -> None: ...

class CapturedOutput(_message.Message):
    __slots__ = ("head", "tail", "dropped_bytes")
    HEAD_FIELD_NUMBER: _ClassVar[int]
    TAIL_FIELD_NUMBER: _ClassVar[int]
    DROPPED_BYTES_FIELD_NUMBER: _ClassVar[int]
    head: bytes
    tail: bytes
    dropped_bytes: int
    def __init__(self, head: _Optional[bytes] = ..., tail: _Optional[bytes] = ..., dropped_bytes: _Optional[int] = ...) -> None: ...

class ExecResponse(_message.Message):
    __slots__ = ("stdout", "stderr", "exit_code", "signal", "timed_out", "duration_ms", "killed_background")
    STDOUT_FIELD_NUMBER: _ClassVar[int]
    STDERR_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    SIGNAL_FIELD_NUMBER: _ClassVar[int]
    TIMED_OUT_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    KILLED_BACKGROUND_FIELD_NUMBER: _ClassVar[int]
    stdout: CapturedOutput
    stderr: CapturedOutput
    exit_code: int
    signal: int
    timed_out: bool
    duration_ms: int
    killed_background: bool
    def __init__(self, stdout: _Optional[_Union[CapturedOutput, _Mapping]] = ..., stderr: _Optional[_Union[CapturedOutput, _Mapping]] = ..., exit_code: _Optional[int] = ..., signal: _Optional[int] = ..., timed_out: _Optional[bool] = ..., duration_ms: _Optional[int] = ..., killed_background: _Optional[bool] = ...) -> None: ...

class ProgramStart(_message.Message):
    __slots__ = ("argv", "workdir", "env", "lifetime_ms")
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ARGV_FIELD_NUMBER: _ClassVar[int]
    WORKDIR_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    LIFETIME_MS_FIELD_NUMBER: _ClassVar[int]
    argv: _containers.RepeatedScalarFieldContainer[str]
    workdir: str
    env: _containers.ScalarMap[str, str]
    lifetime_ms: int
    def __init__(self, argv: _Optional[_Iterable[str]] = ..., workdir: _Optional[str] = ..., env: _Optional[_Mapping[str, str]] = ..., lifetime_ms: _Optional[int] = ...) -> None: ...

class ProgramInput(_message.Message):
    __slots__ = ("start", "stdin", "close_stdin", "signal")
    START_FIELD_NUMBER: _ClassVar[int]
    STDIN_FIELD_NUMBER: _ClassVar[int]
    CLOSE_STDIN_FIELD_NUMBER: _ClassVar[int]
    SIGNAL_FIELD_NUMBER: _ClassVar[int]
    start: ProgramStart
    stdin: bytes
    close_stdin: bool
    signal: ProgramSignal
    def __init__(self, start: _Optional[_Union[ProgramStart, _Mapping]] = ..., stdin: _Optional[bytes] = ..., close_stdin: _Optional[bool] = ..., signal: _Optional[_Union[ProgramSignal, str]] = ...) -> None: ...

class ProgramStarted(_message.Message):
    __slots__ = ("pid",)
    PID_FIELD_NUMBER: _ClassVar[int]
    pid: int
    def __init__(self, pid: _Optional[int] = ...) -> None: ...

class ProgramExit(_message.Message):
    __slots__ = ("exit_code", "signal", "timed_out")
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    SIGNAL_FIELD_NUMBER: _ClassVar[int]
    TIMED_OUT_FIELD_NUMBER: _ClassVar[int]
    exit_code: int
    signal: int
    timed_out: bool
    def __init__(self, exit_code: _Optional[int] = ..., signal: _Optional[int] = ..., timed_out: _Optional[bool] = ...) -> None: ...

class ProgramEvent(_message.Message):
    __slots__ = ("started", "stdout", "stderr", "exit")
    STARTED_FIELD_NUMBER: _ClassVar[int]
    STDOUT_FIELD_NUMBER: _ClassVar[int]
    STDERR_FIELD_NUMBER: _ClassVar[int]
    EXIT_FIELD_NUMBER: _ClassVar[int]
    started: ProgramStarted
    stdout: bytes
    stderr: bytes
    exit: ProgramExit
    def __init__(self, started: _Optional[_Union[ProgramStarted, _Mapping]] = ..., stdout: _Optional[bytes] = ..., stderr: _Optional[bytes] = ..., exit: _Optional[_Union[ProgramExit, _Mapping]] = ...) -> None: ...
