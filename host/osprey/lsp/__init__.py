"""Language servers for the `lsp` tool: a JSON-RPC client (`client`), the session's servers
(`servers`), positions (`positions`) and the tool itself (`tool`)."""
