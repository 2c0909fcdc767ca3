"""`osprey agent`: wire settings, provider, ToolService and loop together for one run."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

from .errors import OspreyError


def _warn(message: str) -> None:
    sys.stderr.write(f"osprey: warning: {message}\n")


def run_headless(
    prompt: str,
    *,
    provider: str | None = None,
    model: str | None = None,
    base_url: str | None = None,
    effort: str | None = None,
    max_turns: int | None = None,
    replay_file: str | None = None,
    record_file: str | None = None,
    events_jsonl: bool = False,
    cwd: str | None = None,
    approval_policy: str | None = None,
    yolo: bool = False,
    read_only: bool = False,
    sandbox: bool | None = None,
    sandbox_network: bool | None = None,
    sandbox_socket: str | None = None,
    sandbox_token_file: str | None = None,
) -> int:
    """Run one session and return its exit status (0, 1, or 130 on Ctrl-C)."""
    from .config import load_settings

    if sum(bool(x) for x in (yolo, read_only, approval_policy)) > 1:
        _error("choose one of --yolo, --read-only and --approval-policy")
        return 2
    if yolo:
        approval_policy = "never"
    elif read_only:
        approval_policy = "deny-untrusted"
    if replay_file:
        replay_file = os.path.abspath(replay_file)  # a flag's path is relative to where the user is, not to -C
    lane: dict[str, Any] = {
        "enabled": sandbox or bool(sandbox_socket) or None, "network": sandbox_network,
        "socket": os.path.abspath(sandbox_socket) if sandbox_socket else None,
        "token_file": os.path.abspath(sandbox_token_file) if sandbox_token_file else None,
    }
    flags: dict[str, Any] = {
        "provider": provider, "model": model, "base_url": base_url, "effort": effort,
        "max_turns": max_turns, "replay_file": replay_file, "approval_policy": approval_policy,
        "sandbox": {k: v for k, v in lane.items() if v is not None},
    }
    try:
        settings = load_settings(cwd, flags)
    except OspreyError as exc:
        _error(str(exc))
        return 1
    for warning in settings.warnings:
        _warn(warning)
    if settings.sandbox.network and not settings.sandbox.enabled:
        _error("--sandbox-network needs --sandbox")
        return 2
    if settings.approval_policy == "never" and not settings.sandbox.enabled:
        _warn("tool calls run on the host without approval (--yolo without --sandbox); only isolation outside Osprey protects this machine")
    jsonl = events_jsonl or not sys.stdout.isatty()
    try:
        return asyncio.run(_session(settings, prompt, jsonl, record_file))
    except OspreyError as exc:
        _error(str(exc))
        return 1


def _error(message: str) -> None:
    sys.stderr.write(f"osprey: error: {message}\n")


async def _session(settings: Any, prompt: str, jsonl: bool, record_file: str | None) -> int:
    import httpx

    from .approvals import ApprovalGate
    from .config import settings_tool_environment
    from .dispatch import open_tool_service
    from .loop import AgentLoop
    from .prompt import system_prompt
    from .providers import effort_supported, make_provider
    from .render import JsonlWriter, TerminalRenderer
    from .tools import ToolContext, ToolRegistry, base_tools
    from .tools.process import ProcessManager
    import uuid

    task = asyncio.current_task()
    assert task is not None
    loop = asyncio.get_running_loop()
    received: list[int] = []
    agent = None
    processes = None
    tearing_down = False

    def on_signal(signum: int) -> None:
        # Ctrl-C, SIGTERM (timeout, CI cancellation) and SIGHUP (a closed terminal) all end the
        # session in order: the running turn is cancelled, session_end is written, the lane and
        # the dispatcher are torn down. A second signal means "now": leave at once (the next
        # start reaps whatever is left).
        if received:
            if processes is not None:
                processes.kill_all()  # they live in sessions of their own: nothing else would stop them
            _flush_and_exit(128 + signum)
        received.append(signum)
        if tearing_down:
            return  # the run is over; let the teardown finish rather than cut it short
        if agent is not None:
            agent.cancel_exit_status = 128 + signum
        task.cancel()

    for signum in STOP_SIGNALS:
        loop.add_signal_handler(signum, on_signal, signum)
    out = JsonlWriter() if jsonl else TerminalRenderer()
    timeout = httpx.Timeout(settings.retry.turn_timeout, connect=settings.retry.connect_timeout)
    try:
        async with AsyncExitStack() as stack:
            http = await stack.enter_async_context(httpx.AsyncClient(timeout=timeout))
            provider = make_provider(settings, http)
            if settings.effort and not effort_supported(settings):
                _warn(f"--effort {settings.effort} has no effect: {settings.model} takes no reasoning setting")
            if record_file:
                from .providers.replay import RecordingProvider

                sink = stack.enter_context(Path(record_file).open("w", encoding="utf-8"))
                provider = RecordingProvider(provider, sink)
            session_id = uuid.uuid4().hex[:12]
            host_env = settings_tool_environment(settings)
            service = await stack.enter_async_context(open_tool_service(
                [str(settings.cwd)], sandbox=settings.sandbox, session_id=session_id,
                progress=lambda line: sys.stderr.write(f"osprey: {line}\n"), home=settings.home, env=host_env,
            ))
            host_processes = service.home == "local"
            processes = ProcessManager(service.roots, env=host_env) if host_processes else None
            if processes is not None:
                stack.push_async_callback(processes.close)
            registry = ToolRegistry(max_result_chars=settings.tool_results.max_chars)
            for tool in base_tools(host_processes=host_processes):
                registry.add(tool)
            context = ToolContext(
                client=service.client, cwd=str(settings.cwd), roots=service.roots,
                bash_max_output_bytes=settings.tool_results.bash_max_output_bytes, processes=processes,
            )
            if service.recover is not None:
                recover_lane = service.recover

                async def recover() -> str | None:
                    note = await recover_lane()
                    context.client = service.client
                    return note

                context.recover = recover
            agent = AgentLoop(
                provider=provider, registry=registry, context=context,
                system=system_prompt(str(settings.cwd), service.home, git_read_only=settings.sandbox.protect_git), emit=out,
                retry=settings.retry, max_turns=settings.max_turns,
                approval=ApprovalGate(settings.approval_policy), on_text=out.text,
                tool_service=service.home, session_id=session_id,
                cancel_exit_status=128 + received[0] if received else 130,
            )
            end = await agent.run(prompt)
            tearing_down = True
            if jsonl and end.error:
                _error(f"{end.outcome}: {end.error}")  # JSONL consumers see it in session_end too
            return end.exit_status
    except asyncio.CancelledError:
        # Cancelled before the loop started (or during teardown).
        return 128 + received[0] if received else 1
    finally:
        for signum in STOP_SIGNALS:
            try:
                loop.remove_signal_handler(signum)
            except Exception:  # noqa: BLE001 - the loop may be closing
                pass


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _flush_and_exit(status: int) -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a closed pipe must not stop the exit
            pass
    os._exit(status)
