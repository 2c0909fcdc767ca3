"""grep's two engines, ripgrep and pure Python, must give the same results.

`osprey_sidecar.search.grep` is called directly with each engine over generated
trees full of awkward cases, and the results (matches, totals, truncation) must
be equal, with the engine each reports. Some scenarios also pin the expected
matches, so that both engines cannot be wrong in the same way.

The ripgrep side is skipped only when `rg` is not on PATH and `CI` is unset;
under CI a missing ripgrep fails.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from grep_answers import grep

from osprey_sidecar.errors import ToolFailure
from osprey_sidecar.paths import Roots

NEEDLE_LATE = b"needle late\n" * 7000  # 84000 bytes: past ripgrep's first 64 KiB buffer


def have_rg() -> bool:
    """Whether the ripgrep side can run; without rg that is a failure under CI."""
    if shutil.which("rg") is None:
        if os.environ.get("CI"):
            pytest.fail("ripgrep (rg) is not on PATH; CI must run the ripgrep engine")
        return False
    return True


def require_rg() -> None:
    if not have_rg():
        pytest.skip("ripgrep (rg) is not on PATH (set CI to make this a failure)")


def write(root: Path, rel: str | bytes, content: str | bytes) -> None:
    path = Path(os.fsdecode(os.path.join(os.fsencode(root), os.fsencode(rel))))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content.encode() if isinstance(content, str) else content)


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("engines")
    outside = base / "outside"
    write(outside, "secret.txt", "needle outside the root\n")
    root = base / "root"
    files: dict[str | bytes, str | bytes] = {
        ".gitignore": (
            "*.log\n!keep.log\nbuild/\n!build/back.txt\n/anchored.txt\ndocs/gen/\nsecret*\n!secret-ok.txt\n"
            "*.min.js\nsub/**/skip/\n"
        ),
        ".git/HEAD": "needle in .git\n",
        ".git/objects/ab/cd": "needle in .git\n",
        ".hidden.txt": "needle hidden\n",
        ".hiddendir/h.txt": "needle in a hidden directory\n",
        ".ignore": "dotignored.txt\n",
        "dotignored.txt": "needle listed in .ignore, which is not a .gitignore\n",
        "a.py": "needle = 1\nNEEDLE = 2\nneedless = 3\nnot here\n",
        "app.log": "needle ignored log\n",
        "keep.log": "needle re-included log\n",
        "anchored.txt": "needle anchored at the root\n",
        "build/out.txt": "needle in ignored dir\n",
        "build/back.txt": "needle cannot be re-included under an ignored dir\n",
        "docs/gen/x.txt": "needle generated\n",
        "docs/readme.md": "needle docs\n",
        "secret1.txt": "needle secret\n",
        "secret-ok.txt": "needle not secret\n",
        "app.min.js": "needle minified\n",
        "app.js": "needle js\n",
        "sub/anchored.txt": "needle not the anchored one\n",
        "sub/build": "needle in a file named like a directory-only rule\n",
        "sub/docs/gen/x.txt": "needle: docs/gen/ is anchored at the root\n",
        "sub/.gitignore": "!*.log\n/local/\n*.tmp\n",
        "sub/debug.log": "needle re-included by a deeper negation\n",
        "sub/local/l.txt": "needle ignored local\n",
        "sub/x/local/l.txt": "needle kept local\n",
        "sub/x/skip/s.txt": "needle skipped by sub/**/skip/\n",
        "sub/data.tmp": "needle ignored tmp\n",
        "sub/deep/.gitignore": "!data.tmp\n",
        "sub/deep/data.tmp": "needle re-included tmp\n",
        "sub/deep/crlf.txt": "needle one\r\nnothing\r\nneedle\r\nneedle two\r\n",
        "crlf/.gitignore": "by-crlf.txt\r\n",
        "crlf/by-crlf.txt": "needle ignored by a CRLF .gitignore\n",
        "crlf/kept.txt": "needle kept\n",
        "bin/early.bin": b"\x00needle early\n",
        "bin/late.dat": NEEDLE_LATE + b"\x00needle after nul\n",
        "bin/mid.dat": b"needle mid\n" + b"x" * 9000 + b"\x00\n",
        "enc/latin1.txt": b"needle caf\xe9\nplain\n",
        "enc/utf8.txt": "needle café\nCAFÉ upper\nnaïve\nΣίσυφος\n",
        "enc/mixed.txt": b"\xff\xfeneedle after junk\n\xc3\n",
        b"names/n\xffame.txt": "needle in a non-UTF-8 name\n",
        "names/ünï.txt": "needle in a unicode name\n",
        "names/sp ace.txt": "needle in a name with a space\n",
        "names/dash-.txt": "needle\n",
        "long.txt": "needle " + "x" * 1000 + "\n",
        "many.txt": "needle\n" * 50,
        "empty.txt": "",
        "no-newline.txt": "needle at the end without a newline",
    }
    for rel, content in files.items():
        write(root, rel, content)
    links = root / "links"
    links.mkdir()
    (links / "file-link.py").symlink_to(root / "a.py")
    (links / "dir-link").symlink_to(root / "sub", target_is_directory=True)
    (links / "outside-link.txt").symlink_to(outside / "secret.txt")
    (links / "outside-dir").symlink_to(outside, target_is_directory=True)
    os.mkfifo(root / "links" / "fifo")
    return root


def run(root: Path, engine: str, pattern: str, path: str = "", glob: str = "", ignore_case: bool = False, max_matches: int = 0):
    return grep(Roots([str(root)]), pattern, path, glob, ignore_case, max_matches, engine=engine)


def as_tuples(result) -> list[tuple[str, int, str]]:
    return [(m.path, m.line, m.text) for m in result.matches]


def compare(root: Path, *args, expect_engine: str = "ripgrep", **kwargs):
    """The Python engine's result, checked against ripgrep's unless rg is missing (outside CI)."""
    py = run(root, "python", *args, **kwargs)
    assert py.engine == "python"
    if not have_rg():
        return py
    rg = run(root, "ripgrep", *args, **kwargs)
    assert rg.engine == expect_engine
    assert as_tuples(rg) == as_tuples(py)
    assert (rg.total, rg.truncated) == (py.total, py.truncated)
    return py


SCENARIOS = [
    pytest.param("needle", "", "", False, 0, id="everything"),
    pytest.param("needle", "sub", "", False, 0, id="ancestor-gitignore"),
    pytest.param("needle", "sub/deep", "", False, 0, id="two-ancestors"),
    pytest.param("needle", "sub/x", "", False, 0, id="ancestor-doublestar"),
    pytest.param("needle", "docs", "", False, 0, id="ancestor-anchored"),
    pytest.param("needle", "crlf", "", False, 0, id="crlf-gitignore"),
    pytest.param("NEEDLE", "", "", True, 0, id="ignore-case"),
    pytest.param("NEEDLE", "", "", False, 0, id="case-sensitive"),
    pytest.param("needle", "", "*.log", False, 0, id="glob-no-reinclude"),
    pytest.param("needle", "", "*.{txt,md}", False, 0, id="glob-braces"),
    pytest.param("needle", "", "secret*", False, 0, id="glob-matching-ignored"),
    pytest.param("needle", "", "sub/**/*.txt", False, 0, id="glob-with-slash"),
    pytest.param("needle", "", "./*.py", False, 0, id="glob-dot-slash"),
    pytest.param("needle", "", "**", False, 0, id="glob-doublestar"),
    pytest.param("needle", "", "[!a-m]*.txt", False, 0, id="glob-negated-class"),
    pytest.param("needle", "", "*.PY", False, 0, id="glob-case-sensitive"),
    pytest.param("needle", "", ".*", False, 0, id="glob-hidden"),
    pytest.param("needle", "", "build/*", False, 0, id="glob-into-ignored-dir"),
    pytest.param("needle", "", "*.txt", False, 3, id="max-matches"),
    pytest.param("needle", "", "many.txt", False, 50, id="max-matches-exact"),
    pytest.param("^needle$", "", "", False, 0, id="anchors-and-crlf"),
    pytest.param("two\\s*$", "sub/deep", "", False, 0, id="crlf-dollar"),
    pytest.param("needle", "bin", "", False, 0, id="binary"),
    pytest.param("needle", "bin/late.dat", "", False, 0, id="binary-explicit-late-nul"),
    pytest.param("needle", "bin/early.bin", "", False, 0, id="binary-explicit-early-nul"),
    pytest.param("needle caf", "enc", "", False, 0, id="non-utf8-content"),
    pytest.param(
        "caf.$", "enc", "", False, 0, id="dot-over-invalid-utf8",
        marks=pytest.mark.xfail(strict=True, reason="known difference: ripgrep's `.` never matches a byte that is not UTF-8, Python's matches its escape"),
    ),
    pytest.param("after junk", "enc", "", False, 0, id="invalid-utf8-prefix"),
    pytest.param("café", "enc", "", True, 0, id="unicode-ignore-case"),
    pytest.param("σίσυφος", "enc", "", True, 0, id="greek-ignore-case"),
    pytest.param("^\\w+$", "enc", "", False, 0, id="unicode-word"),
    pytest.param("[é]", "enc", "", False, 0, id="unicode-class"),
    pytest.param("needle", "names", "", False, 0, id="awkward-names"),
    pytest.param("needle", "links", "", False, 0, id="symlinks-not-followed"),
    pytest.param("x{1000}", "", "", False, 0, id="long-line"),
    pytest.param("needle", "a.py", "", False, 0, id="explicit-file"),
    pytest.param("needle", "app.log", "", False, 0, id="explicit-ignored-file"),
    pytest.param("needle", "", "app.log", False, 0, id="glob-naming-ignored-file"),
    pytest.param("needle", "empty.txt", "", False, 0, id="empty-file"),
    pytest.param("end without", "", "", False, 0, id="no-final-newline"),
    pytest.param("zzz-no-such-text", "", "", False, 0, id="no-match"),
    pytest.param("a|needle", "", "*.py", False, 0, id="alternation"),
    pytest.param("(?i)needle = \\d", "", "", False, 0, id="inline-flag"),
]


@pytest.mark.parametrize(("pattern", "path", "glob", "ignore_case", "max_matches"), SCENARIOS)
def test_engines_agree(tree: Path, pattern: str, path: str, glob: str, ignore_case: bool, max_matches: int) -> None:
    require_rg()
    compare(tree, pattern, path, glob, ignore_case, max_matches)


def paths(result) -> list[str]:
    return sorted({m.path for m in result.matches})


def test_everything_expected(tree: Path) -> None:
    r = compare(tree, "needle")
    assert paths(r) == sorted([
        ".hidden.txt", ".hiddendir/h.txt", "a.py", "app.js", "crlf/kept.txt", "docs/readme.md", "dotignored.txt",
        "enc/latin1.txt", "enc/mixed.txt", "enc/utf8.txt", "keep.log", "long.txt", "many.txt",
        "names/dash-.txt", "names/n\\xffame.txt", "names/sp ace.txt", "names/ünï.txt", "no-newline.txt",
        "secret-ok.txt", "sub/anchored.txt", "sub/build", "sub/debug.log", "sub/deep/crlf.txt",
        "sub/deep/data.tmp", "sub/docs/gen/x.txt", "sub/x/local/l.txt",
    ])
    assert r.total == len(r.matches) == 50 + 26 + 2  # many.txt, one per other file, and crlf.txt's extra two
    assert not r.truncated


def test_ancestor_rules_expected(tree: Path) -> None:
    # The root's .gitignore applies inside sub: *.log (re-included by sub's own !*.log),
    # sub/**/skip/ (anchored at the root); /anchored.txt and docs/gen/ do not reach into sub.
    r = compare(tree, "needle", "sub")
    assert paths(r) == sorted([
        "sub/anchored.txt", "sub/build", "sub/debug.log", "sub/deep/crlf.txt", "sub/deep/data.tmp",
        "sub/docs/gen/x.txt", "sub/x/local/l.txt",
    ])
    assert paths(compare(tree, "needle", "sub/x")) == ["sub/x/local/l.txt"]
    assert paths(compare(tree, "needle", "docs")) == ["docs/readme.md"]
    assert paths(compare(tree, "needle", "sub/deep")) == ["sub/deep/crlf.txt", "sub/deep/data.tmp"]


def test_expected_lines_and_texts(tree: Path) -> None:
    r = compare(tree, "needle", "sub/deep/crlf.txt")
    assert as_tuples(r) == [("sub/deep/crlf.txt", 1, "needle one"), ("sub/deep/crlf.txt", 3, "needle"), ("sub/deep/crlf.txt", 4, "needle two")]
    r = compare(tree, "^needle$", "sub/deep")
    assert as_tuples(r) == []  # `$` does not match before a CR, in either engine
    r = compare(tree, "NEEDLE", "a.py", ignore_case=True)
    assert [m.line for m in r.matches] == [1, 2, 3]
    r = compare(tree, "needle caf", "enc")
    assert as_tuples(r) == [("enc/latin1.txt", 1, "needle caf\ufffd"), ("enc/utf8.txt", 1, "needle café")]
    r = compare(tree, "needle(?!\\s)", "many.txt", expect_engine="python")
    assert r.total == 50  # a lookaround sees the end of the line, not the newline after it
    r = compare(tree, "(?<!\\s)needle", "a.py", expect_engine="python")
    assert [m.line for m in r.matches] == [1, 3]
    r = compare(tree, "café", "enc", ignore_case=True)
    assert as_tuples(r) == [("enc/utf8.txt", 1, "needle café"), ("enc/utf8.txt", 2, "CAFÉ upper")]
    r = compare(tree, "^\\w+$", "enc")
    assert as_tuples(r) == [("enc/latin1.txt", 2, "plain"), ("enc/utf8.txt", 3, "naïve"), ("enc/utf8.txt", 4, "Σίσυφος")]
    r = compare(tree, "x{1000}")
    assert len(r.matches) == 1 and r.matches[0].text.endswith(" [...]") and len(r.matches[0].text) == 500 + len(" [...]")
    r = compare(tree, "end without")
    assert as_tuples(r) == [("no-newline.txt", 1, "needle at the end without a newline")]


def test_glob_filter_never_reincludes(tree: Path) -> None:
    assert paths(compare(tree, "needle", "", "*.log")) == ["keep.log", "sub/debug.log"]
    assert paths(compare(tree, "needle", "", "secret*")) == ["secret-ok.txt"]
    assert paths(compare(tree, "needle", "", "build/*")) == []
    assert paths(compare(tree, "needle", "", "app.log")) == []
    assert paths(compare(tree, "needle", "", "sub/**/*.txt")) == ["sub/anchored.txt", "sub/deep/crlf.txt", "sub/docs/gen/x.txt", "sub/x/local/l.txt"]


def test_binary_files_are_skipped(tree: Path) -> None:
    assert compare(tree, "needle", "bin").matches == []
    # Named explicitly, a binary file is still not searched, even with its NUL past 64 KiB.
    assert compare(tree, "needle", "bin/late.dat").matches == []
    assert compare(tree, "late", "bin/late.dat").total == 0


def test_truncation(tree: Path) -> None:
    r = compare(tree, "needle", "", "*.txt", max_matches=3)
    assert r.truncated and len(r.matches) == 3 and r.total > 3
    r = compare(tree, "needle", "", "many.txt", max_matches=50)
    assert not r.truncated and len(r.matches) == r.total == 50
    r = compare(tree, "needle", "", "many.txt", max_matches=49)
    assert r.truncated and len(r.matches) == 49 and r.total == 50


def test_symlinks_are_not_followed(tree: Path) -> None:
    assert compare(tree, "needle", "links").matches == []
    assert "outside" not in str(as_tuples(compare(tree, "outside")))


def test_non_utf8_names_are_escaped(tree: Path) -> None:
    assert paths(compare(tree, "non-UTF-8 name")) == ["names/n\\xffame.txt"]


def test_lookahead_falls_back_to_python(tree: Path) -> None:
    r = compare(tree, "needle(?= one)", expect_engine="python")
    assert as_tuples(r) == [("sub/deep/crlf.txt", 1, "needle one")]
    r = compare(tree, "(needle) \\1|(ne)(?<!x)edle = 1", "a.py", expect_engine="python")
    assert [m.line for m in r.matches] == [1]


def test_invalid_pattern_is_refused_by_both(tree: Path) -> None:
    require_rg()
    for engine in ("python", "ripgrep"):
        with pytest.raises(ToolFailure) as info:
            run(tree, engine, "needle(")
        assert info.value.category == "invalid_argument"


def test_default_engine_is_ripgrep_when_installed(tree: Path) -> None:
    require_rg()
    assert grep(Roots([str(tree)]), "needle", "a.py").engine == "ripgrep"


def test_ripgrep_missing_falls_back(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tree / "no-such-bin"))
    r = grep(Roots([str(tree)]), "needle", "a.py", engine="ripgrep")
    assert r.engine == "python"
    assert [m.line for m in r.matches] == [1, 3]
    assert grep(Roots([str(tree)]), "needle", "a.py").engine == "python"


def test_ripgrep_configuration_is_ignored(tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "ripgreprc"
    config.write_text("--ignore-case\n--glob=!*.py\n--max-count=1\n")
    monkeypatch.setenv("RIPGREP_CONFIG_PATH", str(config))
    r = compare(tree, "needle", "", "*.py")
    assert [(m.path, m.line) for m in r.matches] == [("a.py", 1), ("a.py", 3)]


def test_names_with_newlines(tmp_path: Path) -> None:
    require_rg()
    write(tmp_path, "new\nline.txt", "needle\n")
    write(tmp_path, "line.txt", "needle\n")
    write(tmp_path, "x: WARNING: stopped searching binary file.txt", "needle\n")
    py = run(tmp_path, "python", "needle")
    rg = run(tmp_path, "ripgrep", "needle")
    assert as_tuples(py) == [("line.txt", 1, "needle"), ("new\nline.txt", 1, "needle"), ("x: WARNING: stopped searching binary file.txt", 1, "needle")]
    # ripgrep is handed open files, never these names, so both engines report them alike.
    assert as_tuples(rg) == as_tuples(py)


def test_rgignore_files_are_not_honoured(tmp_path: Path) -> None:
    require_rg()
    write(tmp_path, ".rgignore", "rgignored.txt\n")
    write(tmp_path, "rgignored.txt", "needle\n")
    # ripgrep is handed the files the walk chose, so it reads no ignore file of its own.
    compare(tmp_path, "needle")


def test_ancestor_gitignore_outside_the_roots_does_not_apply(tmp_path: Path) -> None:
    write(tmp_path, ".gitignore", "*.txt\n")
    root = tmp_path / "root"
    write(root, "a.txt", "needle\n")
    write(root, "sub/b.txt", "needle\n")
    r = compare(root, "needle")
    assert paths(r) == ["a.txt", "sub/b.txt"]
    assert paths(compare(root, "needle", "sub")) == ["sub/b.txt"]


def test_second_root_has_its_own_ancestors(tmp_path: Path) -> None:
    require_rg()
    first, second = tmp_path / "first", tmp_path / "second"
    write(first, ".gitignore", "*.md\n")
    write(first, "x.md", "needle\n")
    write(second, ".gitignore", "/top/\n*.log\n")
    write(second, "pkg/top/a.txt", "needle\n")
    write(second, "pkg/a.log", "needle\n")
    write(second, "pkg/b.md", "needle\n")
    roots = Roots([str(first), str(second)])
    py = grep(roots, "needle", str(second / "pkg"), engine="python")
    rg = grep(roots, "needle", str(second / "pkg"), engine="ripgrep")
    assert rg.engine == "ripgrep"
    expected = [(str(second / "pkg/b.md"), 1, "needle"), (str(second / "pkg/top/a.txt"), 1, "needle")]
    assert as_tuples(py) == as_tuples(rg) == expected
