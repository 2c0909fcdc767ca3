"""The workspace carried to a lane and the lane's changes carried back (`workspace_sync`), with
real files: the lane is a directory the sent tar is unpacked into, changed, and read back as the
engine's archive call gives it (members under `workspace/`)."""

from __future__ import annotations

import io
import os
import stat
import tarfile
import time
from pathlib import Path

import pytest

from osprey.toolservice.workspace_sync import (
    CONFLICT_SUFFIX,
    Manifest,
    SyncLimits,
    WorkspaceTooLarge,
    bring_back,
    escaping_symlinks,
    pack,
)

OLD = time.time() - 3600


def make_workspace(root: Path) -> Path:
    ws = root / "ws"
    (ws / "src" / "pkg").mkdir(parents=True)
    (ws / "src" / "pkg" / "a.py").write_text("a = 1\n")
    (ws / "src" / "b.py").write_text("b = 2\n")
    (ws / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (ws / "run.sh").chmod(0o755)
    (ws / ".gitignore").write_text("build/\n*.log\n!keep.log\n.git\n")
    (ws / "build").mkdir()
    (ws / "build" / "out.o").write_bytes(b"\x7fELF")
    (ws / "debug.log").write_text("noise\n")
    (ws / "keep.log").write_text("kept\n")
    (ws / ".git").mkdir()
    (ws / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (ws / "link").symlink_to("src/b.py")
    (ws / "escape").symlink_to("/etc/passwd")
    (ws / "up").symlink_to("../outside")
    os.mkfifo(ws / "pipe")
    for path in ws.rglob("*"):
        if not path.is_symlink():
            os.utime(path, (OLD, OLD))
    return ws


def lane_from(tar_bytes: bytes, root: Path) -> Path:
    lane = root / "lane" / "workspace"
    lane.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(tar_bytes)) as tar:
        tar.extractall(lane, filter="tar")
    return lane


def archive(lane: Path) -> io.BytesIO:
    """The lane's workspace as the engine's archive call gives it."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        tar.add(lane, arcname="workspace")
    out.seek(0)
    return out


def sent(ws: Path, root: Path, **limits: int) -> tuple[Manifest, Path]:
    """The workspace sent to a lane directory, as the remote backend does it: the tar unpacked,
    then the symlinks an engine would not unpack made there."""
    out = io.BytesIO()
    manifest = pack(ws, out, limits=SyncLimits(**limits))
    lane = lane_from(out.getvalue(), root)
    for path, target in escaping_symlinks(manifest.entries).items():
        (lane / path).symlink_to(target)
    return manifest, lane


def test_what_is_sent_follows_gitignore_with_symlinks_as_they_are(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path)
    manifest, lane = sent(ws, tmp_path)

    assert (lane / "src" / "pkg" / "a.py").read_text() == "a = 1\n"
    assert (lane / "keep.log").exists() and not (lane / "debug.log").exists()
    assert not (lane / "build").exists()
    assert (lane / ".git" / "HEAD").exists(), ".git is always sent, whatever the ignore rules say"
    assert os.readlink(lane / "link") == "src/b.py"
    assert os.readlink(lane / "escape") == "/etc/passwd" and os.readlink(lane / "up") == "../outside"
    assert stat.S_ISFIFO((lane / "pipe").lstat().st_mode)
    assert escaping_symlinks(manifest.entries) == {"up": "../outside"}
    assert stat.S_IMODE((lane / "run.sh").stat().st_mode) & 0o111
    skipped = "\n".join(manifest.skipped)
    assert skipped == ""
    assert manifest.entries["src"] == "d" and manifest.entries["link"] == "l src/b.py"
    assert manifest.entries["run.sh"].startswith("f x 18 ")


def test_nested_gitignore_and_negation_decide_by_the_deepest_file(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "sub" / "deep").mkdir(parents=True)
    (ws / ".gitignore").write_text("*.tmp\n")
    (ws / "sub" / ".gitignore").write_text("!wanted.tmp\ncache/\n")
    (ws / "sub" / "wanted.tmp").write_text("w")
    (ws / "sub" / "other.tmp").write_text("o")
    (ws / "sub" / "deep" / "x.tmp").write_text("x")
    (ws / "sub" / "cache").mkdir()
    (ws / "sub" / "cache" / "c").write_text("c")
    manifest, _ = sent(ws, tmp_path)
    assert "sub/wanted.tmp" in manifest.entries
    assert "sub/other.tmp" not in manifest.entries and "sub/deep/x.tmp" not in manifest.entries
    assert "sub/cache" not in manifest.entries and "sub/cache/c" not in manifest.entries


def test_the_lanes_changes_come_back(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path)
    manifest, lane = sent(ws, tmp_path)
    (lane / "src" / "pkg" / "a.py").write_text("a = 10\n")
    (lane / "new" / "dir").mkdir(parents=True)
    (lane / "new" / "dir" / "c.py").write_text("c = 3\n")
    (lane / "src" / "b.py").unlink()
    (lane / "link").unlink()
    (lane / "keep.log").chmod(0o755)
    (lane / "empty").mkdir()

    report = bring_back(ws, manifest, archive(lane), prefix="workspace/")

    assert report.complete and not report.conflicts and not report.refused
    assert sorted(report.written) == ["keep.log", "new/dir/c.py", "src/pkg/a.py"]
    assert sorted(report.deleted) == ["link", "src/b.py"]
    assert (ws / "src" / "pkg" / "a.py").read_text() == "a = 10\n"
    assert (ws / "new" / "dir" / "c.py").read_text() == "c = 3\n"
    assert not (ws / "src" / "b.py").exists() and not (ws / "link").is_symlink()
    assert (ws / "keep.log").stat().st_mode & 0o111
    assert (ws / "empty").is_dir()
    # What was never sent stays as it was here.
    assert (ws / "build" / "out.o").read_bytes() == b"\x7fELF" and (ws / "debug.log").exists()
    assert not list(ws.glob(".osprey-sync-*")), "the staging directory is removed"

    # The report's manifest is the next sync's baseline: the same lane brings nothing more.
    again = bring_back(ws, report.manifest, archive(lane), prefix="workspace/")
    assert not again.changed and not again.refused


def test_a_file_changed_on_both_sides_is_kept_and_the_lanes_version_written_beside(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path)
    manifest, lane = sent(ws, tmp_path)
    (lane / "src" / "pkg" / "a.py").write_text("a = 'lane'\n")
    (ws / "src" / "pkg" / "a.py").write_text("a = 'mine'\n")
    (lane / "run.sh").write_text("same\n")  # both sides made the same change: nothing to do
    (ws / "run.sh").write_text("same\n")
    (lane / "src" / "b.py").unlink()  # removed in the lane, changed here: kept
    (ws / "src" / "b.py").write_text("b = 'mine'\n")
    (lane / "fresh.txt").write_text("lane's\n")  # added on both sides, differently
    (ws / "fresh.txt").write_text("mine\n")

    report = bring_back(ws, manifest, archive(lane), prefix="workspace/")

    assert (ws / "src" / "pkg" / "a.py").read_text() == "a = 'mine'\n"
    assert (ws / f"src/pkg/a.py{CONFLICT_SUFFIX}").read_text() == "a = 'lane'\n"
    assert (ws / "src" / "b.py").read_text() == "b = 'mine'\n"
    assert (ws / "fresh.txt").read_text() == "mine\n" and (ws / f"fresh.txt{CONFLICT_SUFFIX}").read_text() == "lane's\n"
    conflicts = {c.path: c for c in report.conflicts}
    assert set(conflicts) == {"src/pkg/a.py", "src/b.py", "fresh.txt"}
    assert conflicts["src/pkg/a.py"].beside == f"src/pkg/a.py{CONFLICT_SUFFIX}"
    assert conflicts["src/b.py"].beside is None and "removed in the lane" in conflicts["src/b.py"].reason
    assert "run.sh" not in report.written and not (ws / f"run.sh{CONFLICT_SUFFIX}").exists()


def test_protected_and_ignored_paths_stay_in_the_lane(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path)
    manifest, lane = sent(ws, tmp_path)
    (lane / ".git" / "HEAD").write_text("ref: refs/heads/evil\n")
    (lane / ".git" / "hooks").mkdir()
    (lane / ".git" / "hooks" / "pre-commit").write_text("#!/bin/sh\ncurl evil\n")
    (lane / ".osprey").mkdir()
    (lane / ".osprey" / "config.toml").write_text("[sandbox]\n")
    (lane / "build").mkdir()
    (lane / "build" / "lane.o").write_bytes(b"obj")
    (lane / "trace.log").write_text("t")

    report = bring_back(ws, manifest, archive(lane), prefix="workspace/")

    assert (ws / ".git" / "HEAD").read_text() == "ref: refs/heads/main\n"
    assert not (ws / ".git" / "hooks").exists() and not (ws / ".osprey").exists()
    assert not (ws / "build" / "lane.o").exists() and not (ws / "trace.log").exists()
    assert report.left_in_lane == 3  # build/, build/lane.o and trace.log
    assert not report.written and not report.deleted


def lane_tar(*members: tuple[str, str, bytes | str]) -> io.BytesIO:
    """A tar a lane could make: (name, kind "f"/"l"/"d", content or link target)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, kind, body in members:
            info = tarfile.TarInfo(name)
            info.mtime = int(time.time())
            if kind == "d":
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif kind == "l":
                info.type = tarfile.SYMTYPE
                info.linkname = str(body)
                tar.addfile(info)
            else:
                data = body if isinstance(body, bytes) else body.encode()
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    out.seek(0)
    return out


def test_names_and_symlinks_that_lead_outside_are_refused(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (ws / "mine").symlink_to(outside)  # a symlink of yours that leads out: never written through
    manifest = Manifest(made_at=time.time())
    tar = lane_tar(
        ("workspace/../escaped", "f", "x"),
        ("/etc/osprey-test", "f", "x"),
        ("elsewhere/file", "f", "x"),
        ("workspace/out", "l", "/etc/passwd"),
        ("workspace/up", "l", "../../x"),
        ("workspace/in", "l", "sub"),
        ("workspace/in/through", "f", "x"),
        ("workspace/mine/planted", "f", "x"),
        ("workspace/ok.txt", "f", "fine"),
    )

    report = bring_back(ws, manifest, tar, prefix="workspace/")

    assert report.written == ["in", "ok.txt"]
    refused = "\n".join(report.refused)
    for name in ("../escaped", "/etc/osprey-test", "elsewhere/file", "out: a symlink", "up: a symlink", "in/through", "mine/planted"):
        assert name in refused
    assert not (tmp_path / "escaped").exists() and not (outside / "planted").exists()
    assert os.readlink(ws / "in") == "sub" and not (ws / "sub").exists()


def test_limits_bound_both_directions_and_a_cut_tar_deletes_nothing(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path)
    with pytest.raises(WorkspaceTooLarge, match="more than 3 files.*sync_max_files"):
        pack(ws, io.BytesIO(), limits=SyncLimits(max_files=3))
    with pytest.raises(WorkspaceTooLarge, match="more than 10 bytes.*sync_max_bytes"):
        pack(ws, io.BytesIO(), limits=SyncLimits(max_bytes=10))

    manifest, lane = sent(ws, tmp_path)
    (lane / "src" / "b.py").unlink()
    for n in range(20):
        (lane / f"flood{n}").write_text("x")
    over = bring_back(ws, manifest, archive(lane), prefix="workspace/", limits=SyncLimits(max_files=len(manifest.entries) + 5))
    assert not over.complete and "more than" in over.problem and "nothing was deleted" in over.problem
    assert (ws / "src" / "b.py").exists()

    whole = archive(lane).getvalue()
    cut = bring_back(ws, manifest, io.BytesIO(whole[: len(whole) // 2]), prefix="workspace/")
    assert not cut.complete and not cut.deleted
    assert (ws / "src" / "b.py").exists()
    assert not list(ws.glob(".osprey-sync-*"))


def test_a_symlink_chain_cannot_climb_out(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "d").mkdir(parents=True)
    tar = lane_tar(("workspace/d/b", "l", ".."), ("workspace/x", "l", "d/b/../secret"), ("workspace/y", "l", "d/../d/f"),
                   ("workspace/d/up", "l", "../a"), ("workspace/d/twice", "l", "../../a"))
    report = bring_back(ws, Manifest(made_at=time.time()), tar, prefix="workspace/")
    assert sorted(report.written) == ["d/b", "d/up"]
    refused = "\n".join(report.refused)
    for name in ("x: a symlink", "y: a symlink", "d/twice: a symlink"):
        assert name in refused


def test_protected_names_are_matched_without_case_and_counted_anyway(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    tar = lane_tar(("workspace/.GIT/hooks/pre-commit", "f", "evil"), ("workspace/.Osprey/config.toml", "f", "x"), ("workspace/ok", "f", "ok"))
    report = bring_back(ws, Manifest(made_at=time.time()), tar, prefix="workspace/")
    assert report.written == ["ok"] and not (ws / ".GIT").exists() and not (ws / ".Osprey").exists()
    flood = lane_tar(*[(f"workspace/.git/objects/{n}", "f", "x") for n in range(30)])
    over = bring_back(ws, Manifest(made_at=time.time()), flood, prefix="workspace/", limits=SyncLimits(max_files=10))
    assert not over.complete, "skipped members count against the limits too"


def test_many_directories_are_applied_with_a_few_descriptors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from osprey.toolservice import workspace_sync

    monkeypatch.setattr(workspace_sync, "MAX_OPEN_DIRS", 4)
    ws = tmp_path / "ws"
    ws.mkdir()
    tar = lane_tar(*[(f"workspace/d{n % 7}/e{n}/f.txt", "f", str(n)) for n in range(40)])
    report = bring_back(ws, Manifest(made_at=time.time()), tar, prefix="workspace/")
    assert report.complete and len(report.written) == 40 and not report.refused
    assert (ws / "d3" / "e10" / "f.txt").read_text() == "10"


def test_modes_here_are_kept_and_only_the_executable_bits_follow_the_lane(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path)
    (ws / "secret.txt").write_text("s\n")
    (ws / "secret.txt").chmod(0o600)
    os.utime(ws / "secret.txt", (OLD, OLD))
    manifest, lane = sent(ws, tmp_path)
    (lane / "secret.txt").write_text("changed\n")
    (lane / "secret.txt").chmod(0o755)
    (lane / "fresh.sh").write_text("#!/bin/sh\n")
    (lane / "fresh.sh").chmod(0o777)
    bring_back(ws, manifest, archive(lane), prefix="workspace/")
    assert stat.S_IMODE((ws / "secret.txt").stat().st_mode) == 0o700
    assert stat.S_IMODE((ws / "fresh.sh").stat().st_mode) & 0o022 == 0, "a new file takes this side's umask"


def test_a_push_leaves_alone_what_is_ignored_now_or_was_refused(tmp_path: Path) -> None:
    from osprey.toolservice.workspace_sync import pack_changes

    ws = make_workspace(tmp_path)
    manifest, lane = sent(ws, tmp_path)
    (ws / ".gitignore").write_text("build/\n*.log\n!keep.log\n.git\nsrc/\n")  # src is ignored now, not gone
    (ws / "run.sh").unlink()
    changes = pack_changes(ws, manifest, io.BytesIO(), leave={"keep.log"})
    assert changes.gone == ["run.sh"]
    (ws / "keep.log").write_text("changed here\n")
    changes = pack_changes(ws, manifest, io.BytesIO(), leave={"keep.log"})
    assert "keep.log" not in changes.sent

    # A directory the lane made where a file was sent is refused here and left to the lane.
    (lane / "src" / "b.py").unlink()
    (lane / "src" / "b.py").mkdir()
    report = bring_back(ws, manifest, archive(lane), prefix="workspace/")
    assert "src/b.py" in report.kept_back and (ws / "src" / "b.py").is_file()
