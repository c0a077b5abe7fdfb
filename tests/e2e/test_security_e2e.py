"""A real Prometheus scrapes the endpoint over TLS with basic auth, and ingests hostile label values."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trustme

from rollout_telemetry import BasicAuth, RolloutTelemetry, TLSConfig, hash_password
from rollout_telemetry._contract.labels import label_value
from tests.contract.test_hostile import HOSTILE_TEXT
from tests.e2e.prometheus import Prometheus
from tests.support import exposition, samples


def test_prometheus_scrapes_with_tls_and_basic_auth(tmp_path: Path) -> None:
    """tls_config + basic_auth: up; the same target without credentials or over plain HTTP: down."""
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert.cert_chain_pems[0].write_to_path(str(tmp_path / "server.pem"))
    cert.private_key_pem.write_to_path(str(tmp_path / "server.key"))
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    (tmp_path / "password").write_text("s3cret-scrape\n")
    telemetry = RolloutTelemetry(run="tls")
    telemetry.record("math", {"reward": 1.0})
    tls = TLSConfig(str(tmp_path / "server.pem"), str(tmp_path / "server.key"))
    auth = BasicAuth("prometheus", hash_password("s3cret-scrape"))
    with telemetry.serve(port=0, tls=tls, auth=auth) as server:
        target = f"127.0.0.1:{server.port}"
        secure = {
            "scheme": "https",
            "tls_config": {"ca_file": str(tmp_path / "ca.pem")},
            "basic_auth": {"username": "prometheus", "password_file": str(tmp_path / "password")},
        }
        refused: list[dict[str, Any]] = [
            {
                "job_name": "no-credentials",
                "scheme": "https",
                "tls_config": {"ca_file": str(tmp_path / "ca.pem")},
                "static_configs": [{"targets": [target]}],
            },
            {"job_name": "plain-http", "static_configs": [{"targets": [target]}]},
        ]
        with Prometheus(
            tmp_path, [target], interval="500ms", scrape_extra=secure, extra_jobs=refused
        ) as prom:
            prom.wait_for(lambda: len(prom.query("up")) == 3, timeout=30, what="three scrapes")
            prom.wait_for(
                lambda: (
                    prom.values('up{job="rollout-telemetry"}') != {}
                    and next(iter(prom.values('up{job="rollout-telemetry"}').values())) == 1
                ),
                timeout=30,
                what="the authenticated scrape",
            )
            assert prom.values('rollout_completed_total{job="rollout-telemetry"}')
            up = {dict(k)["job"]: v for k, v in prom.values("up").items()}
            assert up == {"rollout-telemetry": 1.0, "no-credentials": 0.0, "plain-http": 0.0}


def test_prometheus_ingests_hostile_labels(tmp_path: Path) -> None:
    """Every hostile kind and agent is ingested by a real scrape: no failed scrape, every sample stored."""
    telemetry = RolloutTelemetry(run="hostile", runtime_metrics=False)  # the hostile labels' series alone
    for text in HOSTILE_TEXT:
        telemetry.record_failure(text, text)
        telemetry.record(text, {"reward": 0.0, "mask_sample": True, "failure_kind": text})
    sample_count = len(samples(exposition(telemetry.registry)))
    with (
        telemetry.serve(port=0) as server,
        # bound: a scrape may take its whole interval (Prometheus' timeout), 2 s, where these few hundred
        # samples take milliseconds: a failed scrape is a refused exposition, never a machine too busy to
        # answer within a shorter interval (300 ms failed so beside a second CI job).
        Prometheus(tmp_path, [f"127.0.0.1:{server.port}"], interval="2s") as prom,
    ):
        prom.wait_for(
            lambda: len(prom.query("rollout_failed_total")) > 0, timeout=30, what="the hostile series"
        )
        prom.wait_for(
            lambda: any(v >= 3 for v in prom.values("count_over_time(up[10s])").values()),
            timeout=60,
            what="three scrapes",
        )
        assert prom.values("min_over_time(up[10s])") == {
            (("instance", f"127.0.0.1:{server.port}"), ("job", "rollout-telemetry")): 1.0
        }
        scraped = next(iter(prom.values("scrape_samples_scraped").values()))
        assert scraped == sample_count
        stored = len(prom.query('{__name__=~"rollout_.+", run="hostile"}'))
        assert stored == sample_count
        assert len(prom.query("rollout_failed_total")) == len({label_value(t) for t in HOSTILE_TEXT})
