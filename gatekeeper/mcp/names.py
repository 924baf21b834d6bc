"""How an upstream MCP tool is named to clients and to tool rules. Pure.

A tool `write_file` of the server labelled `files` is:
- exposed to MCP clients (and so to the model) as `files__write_file`: `<label>__<tool>`, a valid
  OpenAI function name (`^[A-Za-z0-9_-]{1,64}$`) that shows its server;
- named in tool rules (`tools.required_tier`) as `files.write_file`: `<label>.<tool>`.

Collisions are impossible: a label has no `__` and does not end with `_` (config.py checks), so an
exposed name splits at its first `__` into exactly one (label, tool), and labels are unique keys.
A tool whose exposed name would not be a valid function name (a `.` or space in its name, or too
long) is not offered, and the server's status says which.
"""

from __future__ import annotations

import re

from gatekeeper.rules.tools import ToolId

SEPARATOR = "__"
_FUNCTION_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def exposed_name(label: str, tool: str) -> str:
    return f"{label}{SEPARATOR}{tool}"


def rule_name(label: str, tool: str) -> str:
    """The name tool rules match (`files.write_*: medium`): the tool's `ToolId.mcp`."""
    return str(ToolId.mcp(label, tool))


def split_exposed(name: str) -> tuple[str, str] | None:
    """(label, tool) for an exposed name; None when it has no label part."""
    label, sep, tool = name.partition(SEPARATOR)
    if not sep or not label or not tool:
        return None
    return label, tool


def unusable(label: str, tool: str) -> str | None:
    """Why the tool cannot be exposed under `<label>__<tool>`, or None when it can."""
    name = exposed_name(label, tool)
    if not _FUNCTION_NAME.fullmatch(name):  # not match: its `$` also matches before a final newline
        return f"{name!r} is not a valid function name (letters, digits, '_' and '-', at most 64 characters)"
    return None
