"""What policy costs a tool call: the hardline floor's parse, saved-rule matching, and the whole
before-call chain, beside the floor of a bash call itself (the same command through the local
ToolService) and a bare `bash -c` subprocess.

Prints medians and p90 in milliseconds; the ratios that matter are policy cost / bash call.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _stats import figure, median, percentile, time_command  # noqa: E402

from osprey.interception import PendingCall  # noqa: E402
from osprey.policy.approvals import ApprovalPolicy  # noqa: E402
from osprey.policy.hardline import check  # noqa: E402
from osprey.policy.shell import simple_commands  # noqa: E402
from osprey.policy.store import ApprovalStore  # noqa: E402
from osprey.session.calls import CallPath  # noqa: E402
from osprey.tools import ToolContext, ToolRegistry, base_tools  # noqa: E402
from osprey.toolservice.homes import open_tool_service  # noqa: E402

SHORT = "git status --short"
MEDIUM = "cd src && python -m pytest -q tests/test_x.py -k 'not slow' 2>&1 | tail -n 40 && git diff --stat"
LONG_SCRIPT = "\n".join(f"echo step {i} && test -f file{i}.txt || touch file{i}.txt" for i in range(300))  # about 14 KiB
BIG = "echo " + "x" * 60_000  # near the parse bound


def timed(fn, runs: int) -> list[float]:  # type: ignore[no-untyped-def]
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return samples


def show(label: str, samples: list[float], *, headline: bool = False) -> None:
    print(f"  {label:<52} p50 {median(samples) * 1000:8.3f} ms   p90 {percentile(samples, 90) * 1000:8.3f} ms")
    if headline:
        figure(f"{label}, p50", median(samples) * 1000, "ms")


async def main() -> None:
    runs = 200
    print("the floor and the parser (pure computation):")
    for name, command in (("short", SHORT), ("medium", MEDIUM), (f"script, {len(LONG_SCRIPT)} chars", LONG_SCRIPT), (f"big, {len(BIG)} chars", BIG)):
        show(f"hardline.check, {name}", timed(lambda c=command: check(c), runs if len(command) < 10_000 else 40), headline=True)
        show(f"simple_commands, {name}", timed(lambda c=command: simple_commands(c), runs if len(command) < 10_000 else 40))

    with tempfile.TemporaryDirectory() as tmp:
        home, workspace = Path(tmp, "home"), Path(tmp, "ws")
        workspace.mkdir()
        store = ApprovalStore(home / "approvals.toml")
        for i in range(100):
            store.add(f"bash(tool{i} *)", project=str(workspace))
        store.add("bash(git status *)", project=str(workspace))
        print("saved rules (100 in the file, the covering one last):")
        show("store.covering", timed(lambda: store.covering("bash", {"command": SHORT}, cwd=str(workspace), workspace=str(workspace)), runs))

        async with open_tool_service([str(workspace)]) as service:
            registry = ToolRegistry()
            for tool in base_tools(host_processes=False):
                registry.add(tool)
            context = ToolContext(client=service.client, cwd=str(workspace), roots=list(service.roots), bash_max_output_bytes=1 << 20)
            policy = ApprovalPolicy("on-request", store=store, workspace=str(workspace))
            path = CallPath(registry=registry, context=context, policy=policy, emit=lambda e: None, workspace=str(workspace))
            bash = registry.get("bash")

            async def chain() -> None:
                call = PendingCall(id="c", name="bash", arguments={"command": SHORT}, tool=bash, turn=1, cwd=str(workspace), workspace=str(workspace))
                verdict = await path._before(call, path.chain())
                assert verdict.action == "allow", verdict

            async def through_service() -> None:
                await service.client.bash("true")

            for label, fn in (("before-call chain (floor, approvals, saved rule)", chain), ("bash 'true' through the local ToolService", through_service)):
                samples = []
                for _ in range(runs):
                    start = time.perf_counter()
                    await fn()
                    samples.append(time.perf_counter() - start)
                show(label, samples, headline=True)
    print("floor:")
    show("subprocess bash -c true", time_command(["bash", "-c", "true"], runs, env=dict(os.environ)))


asyncio.run(main())
