"""Agents at work: the workbench (workbench.py), its MCP face (mcp_server.py), and the code an
agent writes, applied in a worker (code_space.py)."""
