"""`retrieve`'s ranking on generated outputs with known answers: pytest logs of 10,000 lines with
one failure in the middle, compiler output (gcc, rustc, tsc) with one error among many warnings,
and a JSON dump with one matching record among thousands. A query hits when a returned passage
holds the answer's line; precision at 1 and at 3 over every query is printed and held to a floor
(`bench/retrieve_precision.py` prints the same figures)."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass

from osprey.retrieve.passages import split
from osprey.retrieve.rank import LexicalIndex

MODULES = ["parser", "lexer", "config", "cache", "network", "storage", "render", "auth", "scheduler", "metrics"]
WORDS = ["header", "body", "footer", "token", "stream", "buffer", "request", "response", "session", "retry", "timeout",
         "decode", "encode", "flush", "merge", "split", "index", "lookup", "insert", "delete", "update", "version"]


@dataclass
class Case:
    kind: str
    text: str
    queries: list[str]
    answer: int  # the line (1-based) a hit must hold


def _test_names(rng: random.Random, n: int) -> list[tuple[str, str]]:
    names = []
    for _ in range(n):
        module = rng.choice(MODULES)
        names.append((f"tests/test_{module}.py", f"test_{rng.choice(WORDS)}_{rng.choice(WORDS)}_{rng.randrange(1000)}"))
    return names


def pytest_log(seed: int, failing: str, module: str, error: list[str], lines: int = 10_000) -> Case:
    """A verbose pytest log of `lines` lines; the one failure's traceback is in the middle."""
    rng = random.Random(seed)
    out = ["============================= test session starts ==============================",
           "platform linux -- Python 3.11.7, pytest-8.3.2, pluggy-1.5.0", f"rootdir: /work/project{seed}", ""]
    middle = lines // 2
    answer = 0
    names = _test_names(rng, lines)
    k = 0
    while len(out) < lines - 4:
        if answer == 0 and len(out) >= middle:
            out.append(f"{module}::{failing} FAILED{'':>20}[ 50%]")
            out += ["", f"{'_' * 30} {failing} {'_' * 30}", "", f"    def {failing}():",
                    "        fixture = load_fixture(\"sample.bin\")"]
            for i, line in enumerate(error):
                out.append(line)
                if i == len(error) - 1 or line.startswith("E "):
                    answer = answer or len(out)
            out.append(f"{module}:{142 + seed}: {error[-1].split()[1].rstrip(':') if error[-1].startswith('E ') else 'Error'}")
            out.append("")
            continue
        path, name = names[k]
        k += 1
        if rng.random() < 0.02:
            out.append(f"  /work/project{seed}/src/{rng.choice(MODULES)}.py:{rng.randrange(900)}: DeprecationWarning: "
                       f"{rng.choice(WORDS)}() is deprecated; use {rng.choice(WORDS)}_{rng.choice(WORDS)}() and assert the {rng.choice(WORDS)}")
            continue
        out.append(f"{path}::{name} PASSED{'':>20}[{100 * len(out) // lines:3d}%]")
    out += ["", "=========================== short test summary info ============================",
            f"FAILED {module}::{failing} - {error[-1][2:].strip() if error[-1].startswith('E ') else error[-1]}",
            f"================= 1 failed, {k} passed, 3 warnings in 41.27s =================="]
    return Case("pytest", "\n".join(out) + "\n", [], answer)


def gcc_output(seed: int) -> Case:
    rng = random.Random(seed)
    out: list[str] = []
    answer = 0
    for i in range(1500):
        f = f"src/{rng.choice(MODULES)}/{rng.choice(WORDS)}.c"
        if i == 700:
            out += ["src/net/socket.c: In function 'conn_accept':",
                    "src/net/socket.c:88:14: error: 'struct conn' has no member named 'fd_count'",
                    "   88 |     if (c->fd_count > MAX_FDS) {", "      |              ^~"]
            answer = len(out) - 2
            continue
        var = f"{rng.choice(WORDS)}_{rng.randrange(50)}"
        kind = rng.choice(["unused variable '%s' [-Wunused-variable]", "comparison of integer expressions of different signedness: 'int' and 'size_t' [-Wsign-compare]",
                           "'%s' may be used uninitialized [-Wmaybe-uninitialized]", "implicit conversion loses integer precision [-Wconversion]"])
        out += [f"{f}: In function '{rng.choice(WORDS)}_{rng.choice(WORDS)}':",
                f"{f}:{rng.randrange(1, 900)}:{rng.randrange(1, 40)}: warning: " + (kind % var if "%s" in kind else kind),
                f"  {rng.randrange(1, 900):3d} |     int {var} = {rng.choice(WORDS)}(conn);", "      |         ^~~~"]
    return Case("gcc", "\n".join(out) + "\n", [], answer)


def rustc_output(seed: int) -> Case:
    rng = random.Random(seed)
    out: list[str] = ["   Compiling osprey-demo v0.1.0 (/work/demo)"]
    answer = 0
    for i in range(900):
        f = f"src/{rng.choice(MODULES)}.rs"
        line = rng.randrange(1, 700)
        if i == 450:
            out += ["error[E0308]: mismatched types", "   --> src/config.rs:214:23", "    |",
                    "214 |     let port: u32 = settings.get(\"port\");", "    |               ---   ^^^^^^^^^^^^^^^^^^^^^ expected `u32`, found `&str`",
                    "    |               |", "    |               expected due to this", ""]
            answer = len(out) - 8 + 1
            continue
        name = f"{rng.choice(WORDS)}_{rng.choice(WORDS)}"
        out += [rng.choice([f"warning: unused variable: `{name}`", f"warning: function `{name}` is never used",
                            f"warning: unused import: `std::{rng.choice(['io', 'fmt', 'sync::Arc', 'collections::HashMap'])}`"]),
                f"  --> {f}:{line}:{rng.randrange(1, 30)}", "   |", f"{line:3d} |     let {name} = {rng.choice(WORDS)}();",
                "   |         ^^^^ help: if this is intentional, prefix it with an underscore", ""]
    out.append("error: could not compile `osprey-demo` (bin \"demo\") due to 1 previous error; 899 warnings emitted")
    return Case("rustc", "\n".join(out) + "\n", [], answer)


def tsc_output(seed: int) -> Case:
    rng = random.Random(seed)
    out: list[str] = []
    answer = 0
    for i in range(3000):
        f = f"src/{rng.choice(MODULES)}/{rng.choice(WORDS)}.ts"
        if i == 1700:
            out.append("src/auth/session.ts(57,19): error TS2339: Property 'userName' does not exist on type 'User'.")
            answer = len(out)
            continue
        name = f"{rng.choice(WORDS)}{rng.choice(WORDS).title()}"
        out.append(rng.choice([f"{f}:{rng.randrange(1, 400)}:{rng.randrange(1, 40)}  warning  '{name}' is defined but never used  @typescript-eslint/no-unused-vars",
                               f"{f}:{rng.randrange(1, 400)}:{rng.randrange(1, 40)}  warning  Unexpected any. Specify a different type  @typescript-eslint/no-explicit-any",
                               f"{f}:{rng.randrange(1, 400)}:{rng.randrange(1, 40)}  warning  Missing return type on function  @typescript-eslint/explicit-function-return-type"]))
    return Case("tsc", "\n".join(out) + "\n", [], answer)


def json_dump(seed: int, records: int = 5000) -> Case:
    rng = random.Random(seed)
    items = []
    special = records * 3 // 5
    for i in range(records):
        item = {"id": 10_000 + i, "name": f"{rng.choice(WORDS)}-{rng.choice(WORDS)}-{i}", "status": "ok",
                "size": rng.randrange(100_000), "checksum": f"{rng.getrandbits(64):016x}", "tags": [rng.choice(WORDS), rng.choice(MODULES)]}
        if i == special:
            item = {"id": 10_000 + i, "name": "quartz-lambda", "status": "failed", "size": 0, "checksum": "0000000000000000",
                    "tags": ["storage"], "error": "checksum mismatch on block 77 of volume vol-archive-3"}
        items.append(item)
    text = json.dumps({"generated": "2026-12-01T10:00:00Z", "count": records, "records": items}, indent=2) + "\n"
    answer = next(n for n, line in enumerate(text.split("\n"), 1) if '"quartz-lambda"' in line)
    return Case("json", text, [], answer)


def cases() -> list[Case]:
    """Every generated output with its queries (at least 20 queries in all)."""
    found: list[Case] = []
    c = pytest_log(1, "test_parse_header", "tests/test_parser.py",
                   ["        data = parse_header(fixture)", ">       assert data.version == 3", "E       AssertionError: assert 2 == 3",
                    "E        +  where 2 = Header(version=2, flags=0).version"])
    c.queries = ["test_parse_header", "AssertionError: assert 2 == 3", "why did test_parse_header fail", "tests/test_parser.py::test_parse_header", "header version assertion"]
    found.append(c)
    c = pytest_log(2, "test_cache_eviction_order", "tests/test_cache.py",
                   ["        cache = LRUCache(capacity=2)", ">       value = cache.lookup(\"missing-key\")", "E       KeyError: 'missing-key'"])
    c.queries = ["test_cache_eviction_order", "KeyError: 'missing-key'", "KeyError missing-key", "cache eviction"]
    found.append(c)
    c = pytest_log(3, "test_scheduler_backoff", "tests/test_scheduler.py",
                   ["        delay = backoff(attempt=0, base=None)", ">       return base * 2 ** attempt",
                    "E       TypeError: unsupported operand type(s) for *: 'NoneType' and 'int'"])
    c.queries = ["test_scheduler_backoff", "TypeError: unsupported operand type(s) for *: 'NoneType' and 'int'", "NoneType unsupported operand"]
    found.append(c)
    c = gcc_output(4)
    c.queries = ["error: 'struct conn' has no member named 'fd_count'", "fd_count", "socket.c:88", "has no member named", "conn_accept struct conn"]
    found.append(c)
    c = rustc_output(5)
    c.queries = ["E0308", "mismatched types", "expected `u32`, found `&str`", "port settings u32"]
    found.append(c)
    c = tsc_output(6)
    c.queries = ["TS2339", "Property 'userName' does not exist on type 'User'", "userName", "session.ts user name property"]
    found.append(c)
    c = json_dump(7)
    c.queries = ["checksum mismatch", "quartz-lambda", "status failed error", "vol-archive-3"]
    found.append(c)
    return found


def precision() -> tuple[float, float, list[tuple[str, str, int | None]]]:
    """P@1 and P@3 over every query, and each query's rank of the first hit (None: not in the top 3)."""
    at1 = at3 = total = 0
    ranks: list[tuple[str, str, int | None]] = []
    for case in cases():
        index = LexicalIndex(split(case.text))
        try:
            for query in case.queries:
                top = [index.passages[i] for i, _ in index.search(query, 3)]
                hit = next((n for n, p in enumerate(top, 1) if p.first <= case.answer <= p.last), None)
                total += 1
                at1 += hit == 1
                at3 += hit is not None
                ranks.append((case.kind, query, hit))
        finally:
            index.close()
    return at1 / total, at3 / total, ranks


def test_the_corpus_has_known_answers() -> None:
    all_cases = cases()
    assert sum(len(c.queries) for c in all_cases) >= 20
    log = all_cases[0]
    lines = log.text.split("\n")
    assert len(lines) >= 10_000 and 4_000 < log.answer < 6_000 and "AssertionError: assert 2 == 3" in lines[log.answer - 1]
    assert all(c.answer > 0 for c in all_cases)


def test_the_failure_of_a_10000_line_log_comes_first_by_its_name_and_by_its_error() -> None:
    case = cases()[0]
    index = LexicalIndex(split(case.text))
    for query in ("test_parse_header", "AssertionError: assert 2 == 3"):
        best = index.passages[index.search(query, 1)[0][0]]
        assert best.first <= case.answer <= best.last, (query, best)
        assert "def test_parse_header" in best.text
    index.close()


def test_precision_at_1_and_3_meet_their_floor() -> None:
    p1, p3, ranks = precision()
    print(f"\nretrieve precision over {len(ranks)} queries: P@1 {p1:.2f}, P@3 {p3:.2f}")
    for kind, query, rank in ranks:
        print(f"  {kind:6} rank {rank}  {query}")
    assert p3 >= 0.9, ranks
    assert p1 >= 0.8, ranks
