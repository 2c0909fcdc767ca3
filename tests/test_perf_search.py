"""grep and find_files stop at their limits and hold only what they return.

Memory and reading are measured in a fresh process (the probe) that calls the search
directly: the growth of its peak RSS (VmHWM) over the call, the peak RSS of its largest
child (ripgrep or the Python worker), and the bytes it read (`rchar` of /proc/self/io). Each
tree is built so that a search that held every match, or read the whole tree, would exceed
the bound many times over.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from grep_answers import grep
from test_search_engines import require_rg, write

from osprey_sidecar import search
from osprey_sidecar.paths import Roots
from osprey_sidecar.search import COUNT_LIMIT, find_files

LINE = "the quick brown fox jumps over the lazy dog 0123456789 abcdefghijklmnopqrstuvwxyz\n"
PROBE_TIMEOUT_S = 120.0

PROBE = r"""
import json, resource, sys
from osprey_sidecar.grepworker import run
from osprey_sidecar.paths import Roots
from osprey_sidecar.search import find_files, grep

def hwm():
    return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:")) / 1024

def rchar():
    return next(int(l.split()[1]) for l in open("/proc/self/io") if l.startswith("rchar:"))

args = json.loads(sys.argv[1])
before_mb, before_read = hwm(), rchar()
if args["call"] == "grep":
    r = grep(Roots([args["root"]]), args["pattern"], engine=args["engine"])
    out = {"returned": len(r.match_lines), "total": r.total, "truncated": r.truncated, "engine": r.engine}
elif args["call"] == "worker":  # the Python engine's loop, in this process, so that its reading is seen
    request = {"pattern": args["pattern"], "ignore_case": False, "top": args["root"], "root": args["root"],
               "fd": None, "name": "", "glob": "", "keep": 500, "count_limit": args["count_limit"]}
    items = list(run(request))
    out = {"returned": sum(len(i["hits"]) for i in items), "total": sum(i["count"] for i in items)}
else:
    r = find_files(Roots([args["root"]]), args["pattern"])
    out = {"returned": len(r.paths), "total": r.total, "truncated": r.truncated}
out["growth_mb"] = hwm() - before_mb
out["read_mb"] = (rchar() - before_read) / 2**20
out["child_mb"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
print(json.dumps(out))
"""


def probe(**args: object) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(args)], capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def dense_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """400 files of 2,000 matching lines each: 800,000 matches, 68 MB of matching text."""
    root = tmp_path_factory.mktemp("dense")
    text = (LINE * 2000).encode()
    for d in range(20):
        folder = root / f"d{d:02d}"
        folder.mkdir()
        for f in range(20):
            (folder / f"f{f:02d}.txt").write_bytes(text)
    return root


@pytest.fixture(scope="module")
def heavy_ignores(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """60 directories of 500 files (two matching lines each), every directory with a 100 KB
    `.gitignore` that ignores nothing: a walk of the whole tree reads 6 MB of ignore files."""
    root = tmp_path_factory.mktemp("ignores")
    ignore = ("# nothing ignored here, only read\n" * 3100).encode()
    for d in range(60):
        folder = root / f"d{d:02d}"
        folder.mkdir()
        (folder / ".gitignore").write_bytes(ignore)
        for f in range(500):
            (folder / f"f{f:03d}.txt").write_bytes(b"hit one\nhit two\n")
    return root


@pytest.mark.parametrize("engine", ["ripgrep", "python"])
@pytest.mark.parametrize("pattern", ["quick", "qu[i]ck"], ids=["literal", "regex"])
def test_grep_memory_is_bounded_by_what_it_returns(dense_tree: Path, engine: str, pattern: str) -> None:
    if engine == "ripgrep":
        require_rg()
    r = probe(call="grep", root=str(dense_tree), pattern=pattern, engine=engine)
    assert (r["engine"], r["returned"], r["total"], r["truncated"]) == (engine, search.DEFAULT_MAX_MATCHES, COUNT_LIMIT, True)
    # Holding every match would take over 68 MB of text alone.
    assert r["growth_mb"] < 20, f"the searching process grew by {r['growth_mb']:.0f} MB"
    assert r["child_mb"] < 60, f"the {engine} child peaked at {r['child_mb']:.0f} MB"


@pytest.mark.parametrize("pattern", ["hit", "h[i]t"], ids=["literal", "regex"])
def test_grep_stops_reading_at_the_count_limit(heavy_ignores: Path, pattern: str) -> None:
    require_rg()
    r = probe(call="grep", root=str(heavy_ignores), pattern=pattern, engine="ripgrep")
    assert (r["returned"], r["total"], r["truncated"]) == (search.DEFAULT_MAX_MATCHES, COUNT_LIMIT, True)
    # COUNT_LIMIT lines lie in the first 10 directories, and ripgrep is handed files in runs (the
    # next one opened while it searches): about 3 MB is read. A search of the whole tree reads 13 MB.
    assert r["read_mb"] < 6, f"the search read {r['read_mb']:.1f} MB"


def test_the_python_engine_stops_reading_at_the_count_limit(heavy_ignores: Path) -> None:
    r = probe(call="worker", root=str(heavy_ignores), pattern="hit", count_limit=COUNT_LIMIT)
    assert (r["returned"], r["total"]) == (500, COUNT_LIMIT)
    assert r["read_mb"] < 3, f"the search read {r['read_mb']:.1f} MB"


def test_find_files_stops_walking_at_the_count_limit(heavy_ignores: Path) -> None:
    r = probe(call="find", root=str(heavy_ignores), pattern="*.txt")
    assert (r["returned"], r["total"], r["truncated"]) == (search.DEFAULT_FIND_LIMIT, COUNT_LIMIT, True)
    assert r["read_mb"] < 3, f"find_files read {r['read_mb']:.1f} MB"


def test_find_files_memory_is_bounded_on_a_big_tree(tmp_path: Path) -> None:
    # 20,000 files with 200-character names: holding every path would take over 4 MB of text.
    names = [f"{'n' * 190}{i:05d}.py" for i in range(500)]
    for d in range(40):
        folder = tmp_path / f"d{d:02d}"
        folder.mkdir()
        for name in names:
            (folder / name).touch()
    r = probe(call="find", root=str(tmp_path), pattern="*.py")
    assert (r["returned"], r["total"], r["truncated"]) == (search.DEFAULT_FIND_LIMIT, COUNT_LIMIT, True)
    assert r["growth_mb"] < 4, f"find_files grew by {r['growth_mb']:.1f} MB"


# --- results and limits -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fixture_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Literal hits in small files, in files past the size read whole, beside binary files and
    in ignored ones; the first file in path order holds none."""
    root = tmp_path_factory.mktemp("fixture")
    write(root, "a/0-first.txt", "nothing to see\n")
    write(root, "a/needle.txt", "one needle\nno\nTODO: two needles\r\n")
    write(root, "a/plain.txt", "hay\n" * 100)
    write(root, "b/big.txt", "hay\n" * 40_000 + "late needle\n")  # 160 KB: handed to the engine as it is
    write(root, "b/edge.txt", "x" * (64 * 1024 - 8) + "\nneedle\n")  # ends just past the size read whole
    write(root, "b/unicode.txt", "caf\u00e9 needle\nna\u00efve FIXME\n")
    write(root, "c/binary.dat", b"needle\n\x00needle\n")
    write(root, "c/late-nul.txt", b"needle\n" + b"hay\n" * 3000 + b"\x00")
    write(root, ".gitignore", "ignored/\n")
    write(root, "ignored/needle.txt", "needle\n")
    write(root, "d/.hidden.txt", "hidden needle\n")
    return root


def as_tuples(r: object) -> list[tuple[str, int, str]]:
    return [(m.path, m.line, m.text) for m in r.matches]  # type: ignore[attr-defined]


NEEDLE = [
    ("a/needle.txt", 1, "one needle"),
    ("a/needle.txt", 3, "TODO: two needles"),
    ("b/big.txt", 40001, "late needle"),
    ("b/edge.txt", 2, "needle"),
    ("b/unicode.txt", 1, "caf\u00e9 needle"),
    ("d/.hidden.txt", 1, "hidden needle"),
]


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("needle", NEEDLE),
        ("TODO|FIXME", [("a/needle.txt", 3, "TODO: two needles"), ("b/unicode.txt", 2, "na\u00efve FIXME")]),
        ("caf\u00e9", [("b/unicode.txt", 1, "caf\u00e9 needle")]),
        ("ne+dle", NEEDLE),
        ("not anywhere", []),
    ],
    ids=["literal", "alternation", "non-ascii", "regex", "none"],
)
def test_results_are_the_same_for_both_engines(fixture_tree: Path, pattern: str, expected: list) -> None:
    require_rg()
    roots = Roots([str(fixture_tree)])
    rg = grep(roots, pattern, engine="ripgrep")
    py = grep(roots, pattern, engine="python")
    assert (rg.engine, py.engine) == ("ripgrep", "python")
    assert as_tuples(rg) == as_tuples(py) == expected
    assert rg.total == py.total == len(expected) and not rg.truncated and not py.truncated


def test_a_pattern_ripgrep_refuses_still_falls_back_when_no_file_holds_its_literal(fixture_tree: Path) -> None:
    # A lookahead is Python-only: the literal "zzz" is in no file, yet ripgrep must run on the
    # first file to turn the pattern down, so the engine is the same as before.
    require_rg()
    r = grep(Roots([str(fixture_tree)]), "(?=zzz)zzz")
    assert (r.engine, as_tuples(r), r.total) == ("python", [], 0)


@pytest.mark.parametrize("engine", ["ripgrep", "python"])
def test_grep_limits_are_honoured_and_truncation_reported(dense_tree: Path, engine: str) -> None:
    if engine == "ripgrep":
        require_rg()
    roots = Roots([str(dense_tree)])
    r = grep(roots, "quick", max_matches=7, engine=engine)
    assert [(m.path, m.line) for m in r.matches] == [("d00/f00.txt", n) for n in range(1, 8)]
    assert r.truncated and r.total == COUNT_LIMIT
    whole = grep(roots, "quick", path="d03/f07.txt", max_matches=2000, engine=engine)
    assert len(whole.matches) == whole.total == 2000 and not whole.truncated
    over = grep(roots, "quick", path="d03/f07.txt", max_matches=1999, engine=engine)
    assert len(over.matches) == 1999 and over.total == 2000 and over.truncated


def test_find_files_limits_are_honoured_and_truncation_reported(heavy_ignores: Path) -> None:
    roots = Roots([str(heavy_ignores)])
    r = find_files(roots, "*.txt", limit=5)
    assert list(r.paths) == [f"d00/f00{i}.txt" for i in range(5)]
    assert r.truncated and r.total == COUNT_LIMIT
    exact = find_files(roots, "d07/*.txt", limit=500)
    assert len(exact.paths) == exact.total == 500 and not exact.truncated


def test_counts_past_the_returned_matches_are_exact(tmp_path: Path) -> None:
    # Past the matches it returns, ripgrep's output is counted a run of lines at a time: across
    # files of every size, binary ones among them, the total is the Python engine's, exactly.
    require_rg()
    expected = 0
    for i in range(40):
        lines = 1 + i % 5 + (1500 if i % 7 == 3 else 0)  # the long ones span many reads of the output
        if i % 13 == 10:
            write(tmp_path, f"f{i:03d}.txt", b"hit\n" * lines + b"\x00")  # binary: none of it counts
        else:
            write(tmp_path, f"f{i:03d}.txt", "hit\n" * lines)
            expected += lines
    assert expected < COUNT_LIMIT
    roots = Roots([str(tmp_path)])
    rg = grep(roots, "h[i]t", max_matches=3, engine="ripgrep")
    py = grep(roots, "h[i]t", max_matches=3, engine="python")
    assert rg.engine == "ripgrep" and as_tuples(rg) == as_tuples(py) == [("f000.txt", 1, "hit"), ("f001.txt", 1, "hit"), ("f001.txt", 2, "hit")]
    assert rg.total == py.total == expected and rg.truncated
