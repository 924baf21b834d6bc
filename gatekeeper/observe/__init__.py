"""What gatekeeper tells its operator: structured logs, Prometheus metrics, OpenTelemetry spans,
and the redaction they share."""
