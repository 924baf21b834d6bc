"""Measuring a model: the runner, confidence bounds, backends, the service and its scheduler."""
