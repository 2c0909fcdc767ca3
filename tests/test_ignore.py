"""Unit tests of `osprey_sidecar.ignore` against git's documented gitignore semantics.

The rules under test are those of gitignore(5): blank lines and `#` comments,
trailing spaces, `!` negation, `/` anchoring, a trailing `/` for directories
only, `*`/`?`/`[...]` within one segment, `**` across segments, deeper files
overriding shallower ones, and no re-including a file whose parent directory is
excluded. Where `git` is installed, `walk` is also compared with
`git ls-files --others --exclude-standard` on a generated repository.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from osprey_sidecar.ignore import Rule, ancestor_patterns, compile_glob, glob_to_regex, parse_gitignore, walk


def decide(rules: list[Rule], path: str, is_dir: bool = False) -> bool:
    """Whether one .gitignore's rules ignore `path` (relative to its directory): last match wins."""
    for rule in reversed(rules):
        if rule.dir_only and not is_dir:
            continue
        if rule.regex.fullmatch(path):
            return not rule.negate
    return False


def make_tree(root: Path, files: dict[str, str | bytes | None]) -> None:
    """Create files (str/bytes content) and directories (None) under `root`."""
    for rel, content in files.items():
        path = root / rel
        if content is None:
            path.mkdir(parents=True, exist_ok=True)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)


def walked(top: Path, root: Path | None = None, **kw: object) -> list[str]:
    return [e.rel + ("/" if e.is_dir else "") for e in walk(str(top), str(root) if root else None, **kw)]  # type: ignore[arg-type]


# --- glob_to_regex / compile_glob: the user-facing globs of find_files and grep ----------------


@pytest.mark.parametrize(
    ("pattern", "path", "expected"),
    [
        # A pattern without `/` matches the file name at any depth.
        ("*.py", "a.py", True),
        ("*.py", "src/deep/a.py", True),
        ("*.py", "a.pyc", False),
        ("*.py", ".hidden.py", True),
        ("a.py", "src/a.py", True),
        ("a.py", "src/xa.py", False),
        # With `/` it matches the path relative to the searched directory.
        ("src/*.py", "src/a.py", True),
        ("src/*.py", "src/sub/a.py", False),
        ("src/*.py", "lib/src/a.py", False),
        ("src/**/*.py", "src/a.py", True),
        ("src/**/*.py", "src/x/y/a.py", True),
        ("src/**/*.py", "lib/src/a.py", False),
        ("src/**/*.py", "srcx/a.py", False),
        ("**/*.py", "a.py", True),
        ("**/*.py", "x/y/a.py", True),
        ("**", "x/y/a.py", True),
        ("src/**", "src/x/a.py", True),
        ("src/**", "src", False),
        ("a/**/b", "a/b", True),
        ("a/**/b", "a/x/y/b", True),
        ("a/**/b", "a/xb", False),
        # Leading `./` and `/` anchor to the searched directory.
        ("./a.py", "a.py", True),
        ("./a.py", "src/a.py", False),
        ("/a.py", "a.py", True),
        ("/a.py", "src/a.py", False),
        # `*` and `?` never cross `/`.
        ("src*", "src/a", False),
        ("s?c/a", "s/c/a", False),
        ("s?c/a", "sxc/a", True),
        # Consecutive stars inside a segment are plain stars.
        ("a**b.txt", "aXYb.txt", True),
        ("a**b.txt", "a/b.txt", False),
        # Braces.
        ("*.{py,md}", "x/readme.md", True),
        ("*.{py,md}", "x/a.py", True),
        ("*.{py,md}", "x/a.txt", False),
        ("{src,lib}/*.py", "lib/a.py", True),
        ("{src,lib}/*.py", "doc/a.py", False),
        ("{a,b}", "b", True),
        ("{a,b}", "ab", False),
        ("file{.txt", "file{.txt", True),
        # Character classes.
        ("[ab].txt", "a.txt", True),
        ("[ab].txt", "c.txt", False),
        ("[!ab].txt", "c.txt", True),
        ("[!ab].txt", "a.txt", False),
        ("[^ab].txt", "c.txt", True),
        ("x[!a]y", "x/y", False),
        ("[a-c]1", "b1", True),
        ("[a-c]1", "d1", False),
        ("[]].txt", "].txt", True),
        ("a[.txt", "a[.txt", True),
        # Escapes and regex metacharacters are literal.
        ("\\*.txt", "*.txt", True),
        ("\\*.txt", "a.txt", False),
        ("a+b(c).txt", "a+b(c).txt", True),
        ("a.txt", "aXtxt", False),
        ("$x^.txt", "$x^.txt", True),
        # Non-ASCII names.
        ("caf*.txt", "café.txt", True),
    ],
)
def test_compile_glob(pattern: str, path: str, expected: bool) -> None:
    assert bool(compile_glob(pattern).fullmatch(path)) is expected


def test_glob_to_regex_braces_only_when_asked() -> None:
    assert re.fullmatch(glob_to_regex("{a,b}.txt", braces=True), "a.txt")
    assert not re.fullmatch(glob_to_regex("{a,b}.txt"), "a.txt")
    assert re.fullmatch(glob_to_regex("{a,b}.txt"), "{a,b}.txt")


def test_glob_to_regex_is_a_valid_regex_for_awkward_input() -> None:
    for pattern in ["[", "]", "\\", "a\\", "{", "}", "{,}", "[!]", "***", "**/", "/**", "(", "a|b"]:
        re.compile(glob_to_regex(pattern, braces=True))
    assert re.fullmatch(glob_to_regex("a|b"), "a|b")
    assert re.fullmatch(glob_to_regex("a\\"), "a\\")


# --- parse_gitignore: one file's rules ----------------------------------------------------------


def test_comments_blank_lines_and_escaped_hash() -> None:
    rules = parse_gitignore("# a comment\n\n   \n\\#hash.txt\n")
    assert len(rules) == 1
    assert decide(rules, "#hash.txt")
    assert not decide(rules, "# a comment")


def test_trailing_spaces_are_ignored_unless_escaped() -> None:
    rules = parse_gitignore("plain.txt   \nkept\\ \n")
    assert decide(rules, "plain.txt")
    assert not decide(rules, "plain.txt   ")
    assert decide(rules, "kept ")
    assert not decide(rules, "kept")


def test_leading_spaces_are_part_of_the_pattern() -> None:
    rules = parse_gitignore("  lead.txt\n")
    assert decide(rules, "  lead.txt")
    assert not decide(rules, "lead.txt")


def test_crlf_lines() -> None:
    rules = parse_gitignore("a.txt\r\nb/\r\n")
    assert decide(rules, "a.txt")
    assert decide(rules, "b", is_dir=True)
    assert not decide(rules, "b")


def test_negation_and_last_match_wins() -> None:
    rules = parse_gitignore("*.log\n!keep.log\n")
    assert decide(rules, "app.log")
    assert decide(rules, "sub/app.log")
    assert not decide(rules, "keep.log")
    assert not decide(rules, "sub/keep.log")
    # Order matters: a later rule overrides the negation.
    rules = parse_gitignore("!keep.log\n*.log\n")
    assert decide(rules, "keep.log")


def test_escaped_bang_is_literal() -> None:
    rules = parse_gitignore("\\!important.txt\n")
    assert decide(rules, "!important.txt")
    assert not rules[0].negate


def test_unanchored_pattern_matches_at_any_level() -> None:
    rules = parse_gitignore("frotz\n")
    assert decide(rules, "frotz")
    assert decide(rules, "a/b/frotz")
    assert decide(rules, "frotz", is_dir=True)
    assert not decide(rules, "xfrotz")


def test_leading_slash_anchors() -> None:
    rules = parse_gitignore("/top.txt\n")
    assert decide(rules, "top.txt")
    assert not decide(rules, "sub/top.txt")


def test_middle_slash_anchors() -> None:
    # gitignore(5): "doc/frotz/" matches doc/frotz but not a/doc/frotz.
    rules = parse_gitignore("doc/frotz/\n")
    assert decide(rules, "doc/frotz", is_dir=True)
    assert not decide(rules, "a/doc/frotz", is_dir=True)
    assert not decide(rules, "doc/frotz", is_dir=False)


def test_trailing_slash_matches_directories_only() -> None:
    rules = parse_gitignore("build/\n")
    assert rules[0].dir_only
    assert decide(rules, "build", is_dir=True)
    assert decide(rules, "a/build", is_dir=True)
    assert not decide(rules, "build", is_dir=False)


def test_star_and_question_stay_in_one_segment() -> None:
    rules = parse_gitignore("foo/*\nx?y\n")
    assert decide(rules, "foo/test.json")
    assert decide(rules, "foo/bar", is_dir=True)
    assert not decide(rules, "foo/bar/hello.c")  # the directory itself is matched instead
    assert decide(rules, "axby") is False
    assert decide(rules, "xay")
    assert not decide(rules, "x/y")


def test_double_star_forms() -> None:
    rules = parse_gitignore("**/foo\n")
    assert decide(rules, "foo") and decide(rules, "a/b/foo")
    rules = parse_gitignore("**/foo/bar\n")
    assert decide(rules, "foo/bar") and decide(rules, "x/foo/bar")
    assert not decide(rules, "foo/x/bar")
    rules = parse_gitignore("abc/**\n")
    assert decide(rules, "abc/x") and decide(rules, "abc/x/y")
    assert not decide(rules, "abc", is_dir=True)
    rules = parse_gitignore("a/**/b\n")
    assert decide(rules, "a/b") and decide(rules, "a/x/b") and decide(rules, "a/x/y/b")
    assert not decide(rules, "x/a/b")
    # Other consecutive asterisks are regular asterisks.
    rules = parse_gitignore("a**z\n")
    assert decide(rules, "abcz")
    assert not decide(rules, "a/z")


def test_character_classes() -> None:
    rules = parse_gitignore("*.[oa]\nfile[0-9].txt\nx[!q]\n")
    assert decide(rules, "lib.a") and decide(rules, "main.o")
    assert not decide(rules, "main.c")
    assert decide(rules, "file7.txt") and not decide(rules, "fileA.txt")
    assert decide(rules, "xr") and not decide(rules, "xq")


def test_lone_slash_and_lone_bang_are_no_rules() -> None:
    assert parse_gitignore("/\n!\n!/\n") == []


# --- walk: the directory walk the search tools share -----------------------------------------


def test_walk_order_depth_and_kinds(tmp_path: Path) -> None:
    make_tree(tmp_path, {"b.txt": "", "a/z.txt": "", "a/deeper/y.txt": "", "a.txt": "", "empty": None})
    assert walked(tmp_path) == ["a/", "a/deeper/", "a/deeper/y.txt", "a/z.txt", "a.txt", "b.txt", "empty/"]
    assert walked(tmp_path, max_depth=1) == ["a/", "a.txt", "b.txt", "empty/"]
    assert walked(tmp_path, max_depth=2) == ["a/", "a/deeper/", "a/z.txt", "a.txt", "b.txt", "empty/"]
    assert walked(tmp_path, files_only=True) == ["a/deeper/y.txt", "a/z.txt", "a.txt", "b.txt"]
    depths = {e.rel: e.depth for e in walk(str(tmp_path), None)}
    assert depths == {"a": 1, "a/deeper": 2, "a/deeper/y.txt": 3, "a/z.txt": 2, "a.txt": 1, "b.txt": 1, "empty": 1}


def test_walk_skips_git_and_keeps_hidden(tmp_path: Path) -> None:
    make_tree(tmp_path, {".git/config": "", ".git/objects/x": "", "sub/.git": "gitdir: elsewhere", ".env": "", ".hidden/a": ""})
    assert walked(tmp_path) == [".env", ".hidden/", ".hidden/a", "sub/"]


def test_walk_does_not_follow_symlinks(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    make_tree(outside, {"secret.txt": "x"})
    top = tmp_path / "top"
    make_tree(top, {"real/a.txt": ""})
    (top / "dirlink").symlink_to(outside, target_is_directory=True)
    (top / "filelink").symlink_to(outside / "secret.txt")
    (top / "dangling").symlink_to(top / "nowhere")
    os.mkfifo(top / "fifo")
    assert walked(top) == ["real/", "real/a.txt"]


def test_walk_honours_nested_gitignore(tmp_path: Path) -> None:
    make_tree(tmp_path, {
        ".gitignore": "*.log\nbuild/\n/only-top.txt\n",
        "a.log": "", "keep.txt": "", "only-top.txt": "", "build/x": "",
        "sub/.gitignore": "!*.log\n/local/\n",
        "sub/b.log": "", "sub/only-top.txt": "", "sub/build/y": "", "sub/local/z": "", "sub/deep/local/w": "",
        "sub/build.txt": "",
    })
    assert walked(tmp_path, files_only=True) == [
        ".gitignore", "keep.txt",
        "sub/.gitignore", "sub/b.log", "sub/build.txt", "sub/deep/local/w", "sub/only-top.txt",
    ]


def test_walk_cannot_reinclude_under_an_excluded_directory(tmp_path: Path) -> None:
    make_tree(tmp_path, {".gitignore": "build/\n!build/keep.txt\n", "build/keep.txt": "", "other.txt": ""})
    assert walked(tmp_path, files_only=True) == [".gitignore", "other.txt"]


def test_walk_directory_only_rule_spares_files(tmp_path: Path) -> None:
    make_tree(tmp_path, {".gitignore": "out/\n", "out": "a file named out", "x/out/y": ""})
    assert walked(tmp_path, files_only=True) == [".gitignore", "out"]


def test_walk_gitignore_documented_example(tmp_path: Path) -> None:
    # gitignore(5): exclude everything except directory foo/bar.
    make_tree(tmp_path, {
        ".gitignore": "/*\n!/foo\n/foo/*\n!/foo/bar\n",
        "top.txt": "", "foo/x.txt": "", "foo/bar/keep.txt": "", "foo/baz/no.txt": "", "other/no.txt": "",
    })
    assert walked(tmp_path, files_only=True) == ["foo/bar/keep.txt"]


def test_walk_ancestor_gitignore_applies_to_a_subdirectory(tmp_path: Path) -> None:
    make_tree(tmp_path, {
        ".gitignore": "*.log\n",
        "pkg/.gitignore": "!keep.log\n",
        "pkg/sub/a.log": "", "pkg/sub/keep.log": "", "pkg/sub/a.txt": "",
    })
    # Rules between the root and the top apply; without a root they do not.
    assert walked(tmp_path / "pkg" / "sub", tmp_path) == ["a.txt", "keep.log"]
    assert walked(tmp_path / "pkg" / "sub") == ["a.log", "a.txt", "keep.log"]
    # A deeper file inside the walk still overrides the ancestors.
    (tmp_path / "pkg" / "sub" / ".gitignore").write_text("!a.log\n*.txt\n")
    assert walked(tmp_path / "pkg" / "sub", tmp_path) == [".gitignore", "a.log", "keep.log"]


def test_walk_ancestor_anchored_patterns_keep_their_base(tmp_path: Path) -> None:
    # Anchored patterns are relative to the directory holding the .gitignore, not to the top.
    make_tree(tmp_path, {
        ".gitignore": "/gen/\nsrc/gen2/\nsrc/**/tmp/\n/src/x/only.txt\n",
        "src/gen/a": "", "src/gen2/b": "", "src/y/tmp/c": "", "src/x/only.txt": "", "src/x/keep.txt": "",
        "src/src/gen2/d": "",
        "src/w/q": "",
        "src/.gitignore": "/w/\n",
    })
    assert walked(tmp_path / "src", tmp_path, files_only=True) == [".gitignore", "gen/a", "src/gen2/d", "x/keep.txt"]
    assert walked(tmp_path / "src" / "x", tmp_path, files_only=True) == ["keep.txt"]


def test_ancestor_patterns_are_rewritten_relative_to_the_top(tmp_path: Path) -> None:
    make_tree(tmp_path, {
        ".gitignore": (
            "*.log\n!keep.log\n/a/b/gen/\na/*/direct.txt\n/a/b\na/**/deep\n**/any\n/other/x\n!/a/b/c/keep\n"
            "\\#hash\nspace\\ \n"
        ),
        "a/.gitignore": "/b/local\nb/\n",
        "a/b/c/x": "",
    })
    top = tmp_path / "a" / "b"
    assert ancestor_patterns(str(top), str(tmp_path)) == [
        "*.log", "!keep.log", "/gen/", "/direct.txt", "/**/deep", "/**/any", "!/c/keep", "\\#hash", "space\\ ",
        "/local", "b/",
    ]
    assert ancestor_patterns(str(tmp_path), str(tmp_path)) == []
    assert ancestor_patterns(str(top), None) == []
    assert ancestor_patterns(str(tmp_path), str(top)) == []
    # What the rewritten rules decide, checked through parse_gitignore.
    rules = parse_gitignore("\n".join(ancestor_patterns(str(top), str(tmp_path))))
    assert decide(rules, "gen", is_dir=True) and not decide(rules, "x/gen", is_dir=True)
    assert decide(rules, "x/y/deep") and decide(rules, "deep")
    assert not decide(rules, "c/keep")
    assert not decide(rules, "c/other")
    assert decide(rules, "c/x.log")
    # Everything under a directory, seen from inside it.
    (tmp_path / ".gitignore").write_text("a/b/**\n")
    (tmp_path / "a" / ".gitignore").unlink()
    assert ancestor_patterns(str(top), str(tmp_path)) == ["/**"]
    assert ancestor_patterns(str(top / "c"), str(tmp_path)) == ["/**"]


def test_walk_of_a_missing_top(tmp_path: Path) -> None:
    assert walked(tmp_path / "missing") == []


# --- compared with git itself ------------------------------------------------------------------

GIT = shutil.which("git")

REPO_FILES: dict[str, str | bytes | None] = {
    ".gitignore": (
        "# comment\n"
        "*.log\n"
        "!keep.log\n"
        "build/\n"
        "/top-only.txt\n"
        "docs/generated\n"
        "\\#hash.txt\n"
        "trail.txt   \n"
        "space\\ \n"
        "**/cache/**\n"
        "a/**/z.txt\n"
        "*.[oa]\n"
        "secret?.txt\n"
        "/nested/deep/\n"
        "!build/re.txt\n"
        "out/\n"
    ),
    "a.py": "", "app.log": "", "keep.log": "", "top-only.txt": "", "#hash.txt": "", "trail.txt": "",
    "space ": "", "space": "", "lib.a": "", "main.o": "", "main.c": "", "secret1.txt": "", "secret12.txt": "",
    "out": "a file, not a directory",
    "build/x.txt": "", "build/re.txt": "",
    "docs/generated/x.html": "", "docs/kept.md": "",
    "sub/top-only.txt": "", "sub/app.log": "", "sub/build/y.txt": "", "sub/docs/generated/x.html": "",
    "sub/cache/c.txt": "", "sub/cachex/c.txt": "", "cache/d.txt": "",
    "a/z.txt": "", "a/b/c/z.txt": "", "a/b/keep.md": "", "b/a/z.txt": "",
    "nested/deep/n.txt": "", "nested/x/deep/n.txt": "",
    "pkg/.gitignore": "!*.log\n/local/\n*.tmp\n!important.tmp\nsub*/\n",
    "pkg/debug.log": "", "pkg/local/l.txt": "", "pkg/x/local/l.txt": "", "pkg/a.tmp": "", "pkg/important.tmp": "",
    "pkg/sub1/s.txt": "", "pkg/sub2": "a file matching a directory-only rule",
    "pkg/deep/.gitignore": "!a.tmp\n/more/*.txt\n",
    "pkg/deep/a.tmp": "", "pkg/deep/b.tmp": "", "pkg/deep/more/m.txt": "", "pkg/deep/more/m.md": "",
    "pkg/deep/more/x/m.txt": "",
    ".hidden/h.txt": "", ".env": "",
    "unicode/café.txt": "", "unicode/naïve.log": "",
}


def _git(repo: Path, *args: str, cwd: Path | None = None) -> bytes:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(repo.parent),
        "XDG_CONFIG_HOME": str(repo.parent / "xdg"),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "LC_ALL": "C",
    }
    return subprocess.run(["git", *args], cwd=cwd or repo, env=env, check=True, capture_output=True).stdout


@pytest.fixture
def git_repo(tmp_path: Path) -> Path:
    if GIT is None:
        pytest.skip("git is not installed")
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    # An empty exclude file: only .gitignore files apply, as in `walk`.
    (repo / ".git" / "info").mkdir(parents=True, exist_ok=True)
    (repo / ".git" / "info" / "exclude").write_text("")
    make_tree(repo, REPO_FILES)
    (repo / os.fsdecode(b"raw-\xff.log")).write_text("")
    (repo / os.fsdecode(b"raw-\xfe.txt")).write_text("")
    return repo


def git_untracked(repo: Path, cwd: Path) -> list[str]:
    out = _git(repo, "-c", "core.quotePath=false", "ls-files", "-z", "--others", "--exclude-standard", cwd=cwd)
    return sorted(os.fsdecode(p) for p in out.split(b"\0") if p)


@pytest.mark.parametrize("subdir", ["", "sub", "pkg", "pkg/deep", "pkg/deep/more", "nested", "docs", "a/b"])
def test_walk_agrees_with_git(git_repo: Path, subdir: str) -> None:
    top = git_repo / subdir if subdir else git_repo
    expected = git_untracked(git_repo, top)
    assert expected, "the generated repository should have untracked files"
    got = sorted(e.rel for e in walk(str(top), str(git_repo), files_only=True))
    assert got == expected


def test_git_comparison_sees_ignored_files(git_repo: Path) -> None:
    # A guard on the comparison itself: git must really have ignored something here.
    everything = [f for d, dirs, files in os.walk(git_repo) if ".git" not in Path(d).relative_to(git_repo).parts for f in files]
    untracked = git_untracked(git_repo, git_repo)
    assert len(everything) > len(untracked) + 20
    assert "keep.log" in untracked and "app.log" not in untracked


# --- matching cost and bounds --------------------------------------------------------------------


def _segment_matches(tokens: list[str], name: str) -> bool:
    """Reference matching of one segment's tokens (literal characters, "?", "*", "[...]" sets)."""
    memo: dict[tuple[int, int], bool] = {}

    def go(t: int, i: int) -> bool:
        if (t, i) not in memo:
            if t == len(tokens):
                result = i == len(name)
            elif tokens[t] == "*":
                result = go(t + 1, i) or (i < len(name) and go(t, i + 1))
            elif i == len(name):
                result = False
            elif tokens[t] == "?":
                result = go(t + 1, i + 1)
            elif tokens[t].startswith("[!"):
                result = name[i] not in tokens[t][2:-1] and go(t + 1, i + 1)
            elif tokens[t].startswith("[") and len(tokens[t]) > 1:
                result = name[i] in tokens[t][1:-1] and go(t + 1, i + 1)
            else:
                result = name[i] == tokens[t][-1] and go(t + 1, i + 1)
            memo[(t, i)] = result
        return memo[(t, i)]

    return go(0, 0)


def _tokens(segment: str) -> list[str]:
    return re.findall(r"\\.|\[!?[^]]*\]|.", segment)


def reference_match(pattern: str, path: str) -> bool:
    """gitignore(5) matching written out directly: `**` segments span whole segments (a last one
    needs at least one more), everything else matches within one segment."""
    pats, parts = pattern.split("/"), path.split("/")
    memo: dict[tuple[int, int], bool] = {}

    def go(p: int, s: int) -> bool:
        if (p, s) not in memo:
            if p == len(pats):
                result = s == len(parts)
            elif pats[p] == "**" and p == len(pats) - 1:
                result = s < len(parts)
            elif pats[p] == "**":
                result = go(p + 1, s) or (s < len(parts) and go(p, s + 1))
            else:
                result = s < len(parts) and _segment_matches(_tokens(pats[p]), parts[s]) and go(p + 1, s + 1)
            memo[(p, s)] = result
        return memo[(p, s)]

    return go(0, 0)


def test_glob_matching_agrees_with_a_reference_matcher() -> None:
    import random

    rng = random.Random(20240601)
    pieces = ["a", "b", "*", "?", "/", "**", "**/", "/**", "[ab]", "[!a]", "\\*", "ab"]
    names = ["a", "b", "ab", "ba", "aab", "", "*", "bab"]
    checked = 0
    for _ in range(3000):
        pattern = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 7)))
        paths = ["/".join(rng.choice(names) for _ in range(rng.randint(1, 5))) for _ in range(12)]
        # compile_glob: a pattern without `/` matches at any depth; a leading `/` anchors.
        anchored = "/" in pattern
        spec = pattern.lstrip("/") if anchored else "**/" + pattern
        regex = compile_glob(pattern)
        for path in paths:
            assert bool(regex.fullmatch(path)) == reference_match(spec, path), (pattern, path)
            checked += 1
    assert checked == 36_000


def test_pathological_globs_match_quickly() -> None:
    import time

    name = "a" * 200
    deep = "/".join(["a"] * 300)
    cases = [
        (compile_glob("*a" * 20 + "*b"), name),
        (compile_glob("*a*" * 30 + "c"), name + "b"),
        (compile_glob("**/a/" * 12 + "b"), deep),
        (compile_glob("/" + "a/**/" * 12 + "b"), deep),
        (compile_glob("*?" * 30 + "b"), name),
        (compile_glob("**/" + "[a]*" * 20 + "b"), deep + "/" + name),
        (parse_gitignore("*a" * 20 + "*b\n")[0].regex, deep + "/" + name),
        (parse_gitignore("**/a/" * 12 + "b\n")[0].regex, deep),
    ]
    for regex, path in cases:
        started = time.monotonic()
        assert regex.fullmatch(path) is None
        assert time.monotonic() - started < 0.5, regex.pattern[:80]


def test_ancestor_rewriting_of_many_double_stars_is_quick(tmp_path: Path) -> None:
    import time

    (tmp_path / ".gitignore").write_text("/" + "**/" * 12 + "x\n")
    top = tmp_path.joinpath(*["d"] * 40)
    top.mkdir(parents=True)
    started = time.monotonic()
    rewritten = ancestor_patterns(str(top), str(tmp_path))
    assert time.monotonic() - started < 2.0
    assert "/**/x" in rewritten and len(rewritten) == 12


def test_classes_are_sets_of_characters() -> None:
    assert compile_glob("[!]]").fullmatch("a") and not compile_glob("[!]]").fullmatch("]")
    assert compile_glob("[]a]").fullmatch("]") and compile_glob("[]a]").fullmatch("a")
    assert compile_glob("[a-c]").fullmatch("b") and not compile_glob("[a-c]").fullmatch("-")
    assert compile_glob("[-a]").fullmatch("-") and compile_glob("[a-]").fullmatch("-")
    assert compile_glob("[\\]").fullmatch("\\")
    assert compile_glob("x[&&y]").fullmatch("x&") and compile_glob("[[]").fullmatch("[")
    assert not compile_glob("[c-a]").fullmatch("b")  # a reversed range holds nothing
    assert not compile_glob("a[/]b").fullmatch("a/b")  # a set never matches a slash
    assert not compile_glob("a[!x]b").fullmatch("a/b")


def test_glob_length_and_braces_are_bounded() -> None:
    from osprey_sidecar.errors import ToolFailure

    with pytest.raises(ToolFailure) as info:
        compile_glob("*" * 5000)
    assert info.value.category == "invalid_argument" and len(info.value.message) < 300
    with pytest.raises(ToolFailure) as info:
        compile_glob("{a,b}" * 7)  # 128 alternatives
    assert info.value.category == "invalid_argument"
    assert compile_glob("{a,b}" * 6).fullmatch("abaabb")


def test_ignore_file_bounds() -> None:
    # Rules past the count limit and patterns past the length limit are dropped.
    rules = parse_gitignore("".join(f"r{i}\n" for i in range(20_000)))
    assert len(rules) == 10_000
    assert parse_gitignore("x" * 5000 + "\nkept\n")[0].regex.fullmatch("kept")


def test_ignore_files_are_read_only_when_regular(tmp_path: Path) -> None:
    from osprey_sidecar.ignore import MAX_IGNORE_BYTES, read_ignore_file

    fd = os.open(tmp_path, os.O_RDONLY)
    try:
        (tmp_path / "plain").write_text("a\nb\n")
        assert read_ignore_file(fd, "plain") == "a\nb\n"
        (tmp_path / "zero").symlink_to("/dev/zero")
        (tmp_path / "link").symlink_to(tmp_path / "plain")
        os.mkfifo(tmp_path / "fifo")
        for name in ("zero", "link", "fifo", "missing"):
            assert read_ignore_file(fd, name) == "", name
        # Past the cap only whole lines are kept: no rule is cut in two.
        (tmp_path / "big").write_bytes(b"x" * (MAX_IGNORE_BYTES - 3) + b"\nkeep-me-whole\n")
        text = read_ignore_file(fd, "big")
        assert text == "x" * (MAX_IGNORE_BYTES - 3) + "\n"
    finally:
        os.close(fd)


def test_walk_of_a_tree_deeper_than_the_recursion_limit(tmp_path: Path) -> None:
    import sys

    levels = sys.getrecursionlimit() + 100
    fd = os.open(tmp_path, os.O_RDONLY)
    try:
        for _ in range(levels):
            os.mkdir("d", dir_fd=fd)
            child = os.open("d", os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = child
        os.close(os.open("f", os.O_WRONLY | os.O_CREAT, dir_fd=fd))
    finally:
        os.close(fd)
    try:
        entries = list(walk(str(tmp_path), str(tmp_path)))
        assert len(entries) == levels + 1
        assert entries[-1].rel == "/".join(["d"] * levels) + "/f" and entries[-1].depth == levels + 1
        assert [e.depth for e in walk(str(tmp_path), None, max_depth=3)] == [1, 2, 3]
    finally:
        subprocess.run(["rm", "-rf", str(tmp_path / "d")], check=True)


def test_many_brace_groups_are_no_recursion() -> None:
    from osprey_sidecar.ignore import compile_glob

    assert compile_glob("{a}" * 1300).fullmatch("a" * 1300)
