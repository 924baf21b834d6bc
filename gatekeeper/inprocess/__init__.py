"""The in-process front ends: `ToolRegistry`, tool schemas, the `gated` wrapper."""
