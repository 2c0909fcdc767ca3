"""The Mixture of Agents presets in the user's config.toml (`$OSPREY_HOME/config.toml`), as
/moa-config reads and changes them: the `[moa]` tables are rewritten, the rest of the file is kept
as it was written (its comments too), and the file is replaced atomically, only once the whole
configuration it would hold is valid."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from .. import tomlfile
from ..config.schema import MOA_MAX_REFERENCES, FileConfig, MoaPreset, MoaSettings
from ..errors import ConfigError

# A table header line: [a.b] or [[a.b]], with an optional comment.
_HEADER = re.compile(r"^\s*\[\[?\s*(?P<key>[^\]\n]*?)\s*\]\]?\s*(?:#.*)?$")
_PROVIDERS = ("openai", "anthropic")


def config_path(home: Path) -> Path:
    """The user's config.toml."""
    return home / "config.toml"


def _read(path: Path) -> tuple[str, dict[str, Any]]:
    """The file's text and its parsed data (both empty when there is no file)."""
    from ..config.editing import read_for_edit

    return read_for_edit(path, "its presets")


def _problems(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in err['loc']) or 'preset'}: {err['msg'].removeprefix('Value error, ')}" for err in exc.errors())


def load_presets(path: Path) -> MoaSettings:
    """The `[moa]` settings of the file at `path` (none when it has none)."""
    _, data = _read(path)
    try:
        return MoaSettings.model_validate(data.get("moa", {}))
    except ValidationError as exc:
        raise ConfigError(f"{path}: [moa] is not valid: {_problems(exc)}; fix it in the file") from None


def _first_key(header: str) -> str:
    return header.split(".", 1)[0].strip().strip("\"'")


def _without_moa(text: str) -> str:
    """`text` without its `[moa]` and `[moa.*]` tables."""
    kept: list[str] = []
    skipping = False
    for line in text.splitlines(keepends=True):
        header = _HEADER.match(line)
        if header is not None:
            skipping = _first_key(header.group("key")) == "moa"
        if not skipping:
            kept.append(line)
    return "".join(kept)


def _dumped(moa: MoaSettings) -> dict[str, Any]:
    """`[moa]` as the file holds it: what differs from the defaults."""
    out: dict[str, Any] = {}
    if moa.default is not None:
        out["default"] = moa.default
    if moa.presets:
        out["presets"] = {name: preset.model_dump(mode="json", exclude_defaults=True) for name, preset in moa.presets.items()}
    return out


def _block_text(block: dict[str, Any]) -> str:
    """`[moa]` as TOML text: each preset a table of its own."""
    lines = ["[moa]"] + ([f"default = {tomlfile.toml_value(block['default'])}"] if "default" in block else [])
    for name, preset in block.get("presets", {}).items():
        lines += ["", f"[moa.presets.{tomlfile.toml_key(name)}]"]
        lines += [f"{tomlfile.toml_key(key)} = {tomlfile.toml_value(value)}" for key, value in preset.items()]
    return "\n".join(lines) + "\n"


def save_presets(path: Path, moa: MoaSettings) -> None:
    """Replace the `[moa]` tables of the file at `path` with `moa`, keeping the rest of the file;
    a ConfigError when the result would not be a valid configuration, or cannot be written."""
    text, data = _read(path)
    rest = {key: value for key, value in data.items() if key != "moa"}
    block = _dumped(moa)
    wanted = {**rest, "moa": block} if block else rest
    try:
        FileConfig.model_validate(wanted)
    except ValidationError as exc:
        raise ConfigError(f"the presets were not saved: {_problems(exc)}") from None
    kept = _without_moa(text)
    new = kept.rstrip("\n") + ("\n\n" if kept.strip() else "") + _block_text(block) if block else kept
    try:
        same = tomlfile.loads(new) == wanted
    except Exception:  # noqa: BLE001 - the line-wise cut did not keep the file whole: written from its data instead
        same = False
    if not same:
        # The file spells [moa] in a way the cut cannot keep apart (dotted keys, an inline table):
        # its values are kept, its comments and layout are not.
        new = tomlfile.dumps_toml(wanted)
    try:
        tomlfile.write_atomic(path, new)
    except OSError as exc:
        raise ConfigError(f"could not write {path}: {exc.strerror or exc}") from None


def parse_preset(references: str, aggregator: str, providers: str = "", instructions: str = "") -> MoaPreset:
    """A preset from what a person typed: reference models separated by commas or spaces, the
    aggregator, providers as `MODEL=PROVIDER` pairs, optional instructions. A ConfigError says
    what is wrong."""
    models = [m for m in re.split(r"[,\s]+", references.strip()) if m]
    if len(models) < 2:
        raise ConfigError("give at least 2 reference models, separated by commas or spaces")
    if not aggregator.strip() or any(c.isspace() for c in aggregator.strip()):
        raise ConfigError("give the aggregator: one model name, without spaces")
    if len(models) > MOA_MAX_REFERENCES:
        raise ConfigError(f"a preset has at most {MOA_MAX_REFERENCES} reference models; {len(models)} were given")
    table: dict[str, str] = {}
    for pair in (p for p in re.split(r"[,\s]+", providers.strip()) if p):
        model, sep, provider = pair.partition("=")
        if not sep or not model or provider not in _PROVIDERS:
            raise ConfigError(f"providers: write MODEL=PROVIDER pairs, PROVIDER one of {', '.join(_PROVIDERS)} (got {pair!r})")
        table[model] = provider
    try:
        return MoaPreset.model_validate({"reference_models": models, "aggregator": aggregator.strip(), "providers": table,
                                         "instructions": instructions.strip() or None})
    except ValidationError as exc:
        raise ConfigError(_problems(exc)) from None
