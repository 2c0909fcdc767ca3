"""The names a flag, a setting or a command may take where several places offer them: the model
providers a person can pick and the reasoning efforts. A light module (no imports), so `--help`
can use it; `config.schema` types the same names (a test keeps them equal)."""

from __future__ import annotations

# The providers a person picks (`--provider`, `/provider`, a resumed session's record).
MODEL_PROVIDERS = ("openai", "anthropic")
# Plays a recording back (`osprey agent --replay`); never resumed into, never picked in the TUI.
REPLAY_PROVIDER = "replay"
EFFORTS = ("minimal", "low", "medium", "high")
