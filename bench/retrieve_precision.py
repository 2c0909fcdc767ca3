"""`retrieve`'s ranking on the generated outputs of `tests/test_retrieve_precision.py` (pytest logs
of 10,000 lines with one failure, gcc/rustc/tsc output with one error among many warnings, a JSON
dump with one matching record among 5,000): precision at 1 and at 3 over every query, and the time
to split and index each output and to answer a query, over several runs with the load average.

    .venv/bin/python bench/retrieve_precision.py [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from test_retrieve_precision import cases, precision  # noqa: E402

from osprey.retrieve.passages import split  # noqa: E402
from osprey.retrieve.rank import LexicalIndex  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    p1, p3, ranks = precision()
    print(f"precision over {len(ranks)} queries: P@1 {p1:.2f}  P@3 {p3:.2f}")
    for kind, query, rank in ranks:
        print(f"  {kind:6} {'rank ' + str(rank) if rank else 'missed':8} {query}")
    corpus = cases()
    for run in range(1, args.runs + 1):
        load = os.getloadavg()[0]
        for case in corpus:
            t0 = time.perf_counter()
            passages = split(case.text)
            t1 = time.perf_counter()
            index = LexicalIndex(passages)
            t2 = time.perf_counter()
            times = []
            for query in case.queries * 10:
                q0 = time.perf_counter()
                index.search(query, 5)
                times.append(time.perf_counter() - q0)
            index.close()
            print(f"run {run} load {load:.2f}  {case.kind:6} {len(case.text) / 1e6:5.2f} MB {len(passages):5} passages  "
                  f"split {1000 * (t1 - t0):6.1f} ms  index {1000 * (t2 - t1):6.1f} ms  query median {1000 * statistics.median(times):5.2f} ms")


if __name__ == "__main__":
    main()
