"""The `retrieve` tool: a tool result cut to the tool-result limit is kept whole for the session
(`store`), split into passages (`passages`), and searched by BM25, with embeddings when an
endpoint is configured (`rank`); `tool` offers it to the model."""
