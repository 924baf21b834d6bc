"""The rules: which tier each tool needs, tiers themselves, and which MCP server a label names."""
