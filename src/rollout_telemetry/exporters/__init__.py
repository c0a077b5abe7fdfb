"""Views of the account for monitoring systems: Prometheus and OpenTelemetry."""
