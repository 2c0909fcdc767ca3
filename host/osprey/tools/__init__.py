"""The tools a model can call: definitions, inputs, rendering, and the registry that runs them."""

from .base import Invocation, Tool, ToolContext, ToolOutcome, ToolRegistry
from .builtin import base_tools

__all__ = ["Tool", "Invocation", "ToolContext", "ToolOutcome", "ToolRegistry", "base_tools"]
