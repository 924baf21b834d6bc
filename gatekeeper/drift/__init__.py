"""What live tool calls say about a model: windows, the monitor, the board shared by replicas."""
