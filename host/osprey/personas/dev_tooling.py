"""The development tooling a `dev_tooling` persona sees in its environment prompt: the project's
markers in the working directory and the toolchains available where the tools run.

Detection goes through the ToolService, so in a sandbox lane it describes the lane, not the host.
It is one directory listing and one bounded shell command; whatever fails only leaves its part out
of the report, which is never an exception.
"""

from __future__ import annotations

import asyncio
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..toolservice.client import ToolClient

# File or directory names in the working directory that say what kind of project it is.
MARKERS: dict[str, str] = {
    ".git": "git repository",
    "pyproject.toml": "Python project",
    "setup.py": "Python package",
    "setup.cfg": "Python package",
    "requirements.txt": "Python requirements",
    "Pipfile": "Pipenv",
    "uv.lock": "uv lock file",
    "poetry.lock": "Poetry lock file",
    "tox.ini": "tox",
    "noxfile.py": "nox",
    "pytest.ini": "pytest",
    "package.json": "Node.js package",
    "package-lock.json": "npm lock file",
    "pnpm-lock.yaml": "pnpm lock file",
    "yarn.lock": "Yarn lock file",
    "bun.lockb": "Bun lock file",
    "deno.json": "Deno project",
    "tsconfig.json": "TypeScript",
    "Cargo.toml": "Rust crate",
    "go.mod": "Go module",
    "Makefile": "make",
    "GNUmakefile": "make",
    "justfile": "just",
    "CMakeLists.txt": "CMake",
    "meson.build": "Meson",
    "configure.ac": "Autoconf",
    "BUILD.bazel": "Bazel",
    "MODULE.bazel": "Bazel",
    "WORKSPACE": "Bazel",
    "Gemfile": "Ruby (Bundler)",
    "pom.xml": "Maven",
    "build.gradle": "Gradle",
    "build.gradle.kts": "Gradle (Kotlin)",
    "composer.json": "PHP (Composer)",
    "mix.exs": "Elixir (Mix)",
    "flake.nix": "Nix flake",
    "Dockerfile": "Dockerfile",
    "compose.yaml": "Docker Compose",
    "docker-compose.yml": "Docker Compose",
    ".pre-commit-config.yaml": "pre-commit",
}

# (program, how to ask its version or "" for presence only). Versions are asked only where that is
# quick and never fetches anything; a program a package manager's shim may download on first use
# (pnpm, yarn through corepack) is only looked up.
PROBES: tuple[tuple[str, str], ...] = (
    ("python3", "--version"), ("pip", ""), ("uv", "--version"), ("node", "--version"), ("npm", ""), ("pnpm", ""),
    ("yarn", ""), ("deno", "--version"), ("bun", "--version"), ("cargo", "--version"), ("rustc", "--version"),
    ("go", "version"), ("make", "--version"), ("cmake", "--version"), ("gcc", "--version"), ("clang", "--version"),
    ("java", ""), ("mvn", ""), ("gradle", ""), ("ruby", "--version"), ("bundle", ""), ("git", "--version"),
    ("rg", "--version"), ("docker", ""),
)

# One shell command for every probe. It runs from / so no project file in the workspace picks a
# toolchain for a version query (rust-toolchain.toml, go.mod's toolchain line, packageManager), and
# with the variables that stop Go and rustup from fetching toolchains. The queries run side by side
# (each line, under 4 KiB, is written at once, so lines never mix). Each query gets `timeout`
# when the system has it, and the whole command the call's own timeout. On macOS without the
# command line tools, /usr/bin's compilers and git are stubs that open an installer when run, so
# they are only looked up.
_CASES = "\n".join(f'      {name}) v=$($T {name} {arg} 2>&1 </dev/null | head -n 1 | cut -c 1-200) ;;' for name, arg in PROBES if arg)
SCRIPT = f"""cd / 2>/dev/null
export GOTOOLCHAIN=local RUSTUP_AUTO_INSTALL=0
T=; command -v timeout >/dev/null 2>&1 && T="timeout 2"
STUBS=; [ "$(uname -s 2>/dev/null)" = Darwin ] && ! xcode-select -p >/dev/null 2>&1 && STUBS=1
for t in {' '.join(name for name, _ in PROBES)}; do
  p=$(command -v "$t" 2>/dev/null) || continue
  (
    v=
    if [ -z "$STUBS" ] || [ "${{p%/*}}" != /usr/bin ]; then
      case "$t" in
{_CASES}
      esac
    fi
    printf '%s\\t%s\\n' "$t" "$v"
  ) &
done
wait
"""

LIST_TIMEOUT_S = 5.0
PROBE_TIMEOUT_MS = 4000
PROBE_DEADLINE_S = PROBE_TIMEOUT_MS / 1000 + 2.0
PROBE_OUTPUT_BYTES = 16 * 1024
_VERSION = re.compile(r"\d+(?:\.\d+)+")


async def _markers(client: ToolClient, cwd: str) -> list[str] | None:
    try:
        listing = await asyncio.wait_for(client.list_directory(cwd), LIST_TIMEOUT_S)
    except Exception:  # any failure only leaves the markers out
        return None
    names = {entry.name for entry in listing.entries}
    return [f"{name} ({what})" for name, what in MARKERS.items() if name in names]


async def _toolchains(client: ToolClient, cwd: str) -> list[str] | None:
    try:
        result = await asyncio.wait_for(client.exec(["sh", "-c", SCRIPT], workdir=cwd, timeout_ms=PROBE_TIMEOUT_MS, max_output_bytes=PROBE_OUTPUT_BYTES),
                                        PROBE_DEADLINE_S)
    except Exception:  # any failure only leaves the toolchains out
        return None
    known = {name for name, _ in PROBES}
    seen: set[str] = set()
    found: list[str] = []
    # Only whole lines: a run cut short by its timeout still reports what it found so far.
    for line in result.stdout.head.decode("utf-8", "replace").split("\n")[:-1]:
        name, _, first = line.partition("\t")
        if name not in known or name in seen:
            continue
        seen.add(name)
        version = _VERSION.search(first[:300])
        found.append(f"{name} {version.group()}" if version else name)
    if not found and (result.exit_code != 0 or result.timed_out):
        return None
    order = {name: i for i, (name, _) in enumerate(PROBES)}
    return sorted(found, key=lambda item: order[item.split(" ", 1)[0]])


async def dev_tooling_report(client: ToolClient, cwd: str) -> str:
    """A short text block for the environment prompt: the project markers in `cwd` and the
    toolchains available where the tools run, with versions where cheap. Each part that cannot be
    detected is left out; "" when nothing could be."""
    markers, tools = await asyncio.gather(_markers(client, cwd), _toolchains(client, cwd))
    lines = []
    if markers is not None:
        lines.append(f"- Project markers in {cwd}: " + (", ".join(markers) if markers else "none found"))
    if tools is not None:
        lines.append("- Toolchains available: " + (", ".join(tools) if tools else "none of the usual ones found"))
    if not lines:
        return ""
    return "Development tooling (detected where the tools run):\n" + "\n".join(lines)
