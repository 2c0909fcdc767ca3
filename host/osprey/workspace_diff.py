"""What `/diff` shows: the workspace's changes as `git diff` and `git status` see them.

`COMMAND` is one bash command line, run as the person's own `bash` call by the session's
ToolService (on the host, or in the lane with `--sandbox`). At the top of the repository it
prints two header lines, then the changes:

- tracked changes against `HEAD` (against the empty tree in a repository with no commit yet,
  so staged new files show too): `git diff --stat`, then, after the list of new files, the patch;
- new files (`git ls-files --others --exclude-standard`, so ignored ones stay out): the first
  `MAX_NEW_FILES` listed and shown as added-file diffs (`git diff --no-index /dev/null FILE`),
  one over `MAX_NEW_FILE_BYTES` listed with its size only, the rest counted.

Outside a repository it prints one marker line (`NOT_A_REPOSITORY`). git's external diff
drivers, text conversions and file-system monitor are switched off: a workspace's git settings
start no program. The bash tool's output limit and the session's result limit bound the rest;
`read` turns the call's result into what the screen shows.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

MAX_NEW_FILES = 50
MAX_NEW_FILE_BYTES = 256 * 1024
TIMEOUT_MS = 30_000
MAX_NOTE_CHARS = 500  # characters of a failure's output in its note

HEADER = "osprey-diff:"
NOT_A_REPOSITORY = f"{HEADER} not-a-repository"
NO_GIT = f"{HEADER} no-git"
_SUMMARY = f"{HEADER} tracked "
_NEW = f"{HEADER} new "

COMMAND = (
    "export LC_ALL=C; "
    "g() { git -c core.fsmonitor=false -c core.quotePath=true --no-pager \"$@\"; }; "
    f"command -v git >/dev/null 2>&1 || {{ echo '{NO_GIT}'; exit 0; }}; "
    "top=$(g rev-parse --show-toplevel 2>&1) || { case $top in "
    f"*'not a git repository'*) echo '{NOT_A_REPOSITORY}'; exit 0;; *) printf '%s\\n' \"$top\"; exit 1;; esac; }}; "
    "cd -- \"$top\" || exit 1; "
    "if g rev-parse -q --verify HEAD >/dev/null 2>&1; then base=HEAD; else base=$(g hash-object -t tree /dev/null) || exit 1; fi; "
    "d() { g diff --no-color --no-ext-diff --no-textconv \"$@\"; }; "
    "shortstat=$(d --shortstat \"$base\" --) || exit 1; "
    "shown=(); listed=(); more=0; "
    "while IFS= read -r -d '' f; do "
    f"if [ ${{#listed[@]}} -ge {MAX_NEW_FILES} ]; then more=$((more+1)); continue; fi; "
    "name=${f//[[:cntrl:]]/?}; "
    "if [ -L \"$f\" ]; then shown+=(\"$f\"); listed+=(\" new: $name (link)\"); "
    "elif [ -f \"$f\" ]; then size=$(wc -c < \"$f\" 2>/dev/null) || size=-1; size=${size//[^0-9-]/}; "
    "if [ \"$size\" -lt 0 ]; then listed+=(\" new: $name (unreadable)\"); "
    f"elif [ \"$size\" -gt {MAX_NEW_FILE_BYTES} ]; then listed+=(\" new: $name ($size bytes, not shown)\"); "
    "else shown+=(\"$f\"); listed+=(\" new: $name\"); fi; "
    "fi; "
    "done < <(g ls-files -z --others --exclude-standard); "
    f"echo \"{_SUMMARY}$shortstat\"; echo \"{_NEW}$(( ${{#listed[@]}} + more ))\"; "
    "d --stat \"$base\" -- || exit 1; "
    "for line in \"${listed[@]}\"; do printf '%s\\n' \"$line\"; done; "
    f"[ \"$more\" -gt 0 ] && echo \" ... and $more more new files (only the first {MAX_NEW_FILES} are listed)\"; "
    "echo; d \"$base\" -- || exit 1; "
    "for f in \"${shown[@]}\"; do d --no-index -- /dev/null \"$f\"; done; "
    "exit 0"
)


class DiffView(BaseModel):
    """What `/diff` shows: a one-line `note` (at `level`), or a diff `body` under `title`."""

    model_config = ConfigDict(frozen=True)

    note: str = ""
    level: Literal["info", "warning", "error"] = "info"
    title: str = ""
    body: str = ""


def _plural(count: int, word: str) -> str:
    return f"{count:,} {word}{'' if count == 1 else 's'}"


def read(output: str, *, exit_code: int | None, ok: bool, error_category: str | None, truncated_chars: int = 0) -> DiffView:
    """What `/diff` shows for its call's result: `output` is what the command printed (without the
    bash tool's status line), `exit_code` its exit status (None when it did not exit: it timed out,
    was killed, or was refused)."""
    if error_category == "cancelled":
        return DiffView(note="/diff: stopped before git finished")
    if not ok and exit_code is not None:
        return DiffView(note=f"/diff: git failed (exit {exit_code}): {output.strip()[:MAX_NOTE_CHARS]}", level="error")
    if not ok:
        return DiffView(note=f"/diff: {output.strip()[:MAX_NOTE_CHARS]}", level="error")  # refused, timed out, unreachable
    first, _, rest = output.partition("\n")
    if first == NOT_A_REPOSITORY:
        return DiffView(note="/diff: this workspace is not in a git repository, so there is no diff to show")
    if first == NO_GIT:
        return DiffView(note="/diff: git is not installed where the session's commands run", level="error")
    if not first.startswith(_SUMMARY):
        return DiffView(note=f"/diff: unexpected output from git: {output.strip()[:MAX_NOTE_CHARS]}", level="error")
    tracked = first.removeprefix(_SUMMARY).strip()
    second, _, body = rest.partition("\n")
    try:
        new = int(second.removeprefix(_NEW)) if second.startswith(_NEW) else 0
    except ValueError:
        new = 0
    if not tracked and not new:
        return DiffView(note="/diff: no changes in the workspace")
    summary = " · ".join(part for part in (tracked, _plural(new, "new file") if new else "") if part)
    cut = f"\n[cut: {truncated_chars:,} characters more; run git diff for all of it]" if truncated_chars else ""
    return DiffView(title=f"git diff  {summary}", body=body.strip("\n") + cut)
