"""Workflows: JavaScript files whose `async function main(osprey)` starts agents (child sessions)
and returns a result. Discovery and trust (`discovery.py`), the script's engine in a process of
its own (`worker.py`, `script.py`), a session's runs (`runs.py`) and the model's tools
(`tools.py`)."""
