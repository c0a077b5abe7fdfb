# The exporter image used by docker-compose.yml: runs `rollout-telemetry demo` unless told otherwise.
FROM python:3.11.11-slim-bookworm
WORKDIR /app
COPY pyproject.toml README.md constraints.txt ./
COPY src ./src
# Pinned versions (constraints.txt), so that a build today installs what a build next month installs.
RUN pip install --no-cache-dir -c constraints.txt '.[otel]' && useradd --system --uid 10001 telemetry
USER telemetry
EXPOSE 9464
ENTRYPOINT ["rollout-telemetry"]
CMD ["demo", "--host", "0.0.0.0", "--port", "9464"]
