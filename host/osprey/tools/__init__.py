"""The tools a model can call: definitions, inputs, rendering, and the registry that runs them."""

from .base import ToolContext, ToolDef, ToolOutcome, ToolRegistry
from .builtin import base_tools

__all__ = ["ToolContext", "ToolDef", "ToolOutcome", "ToolRegistry", "base_tools"]
