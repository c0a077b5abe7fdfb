"""Views of the account for monitoring systems: Prometheus and OpenTelemetry. Its public module is ``otel``
(OTLP export); the collectors and the meter's instruments are private, made by ``RolloutTelemetry``."""

__all__: list[str] = []
