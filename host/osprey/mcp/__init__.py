"""MCP servers as a tool source: their connections (`connection.py`), kept alive and called through
the official SDK, and the stdio transport over the ToolService's Program stream (`transport.py`)."""
