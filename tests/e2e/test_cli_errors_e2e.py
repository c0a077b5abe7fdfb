"""A new user's wrong inputs, each as a real process: exit status 2, one line on stderr naming the problem,
no traceback, and nothing started."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest
import trustme


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with a run's file, a directory, a certificate and key (and the two swapped), a CA, a hash."""
    folder = tmp_path_factory.mktemp("inputs")
    (folder / "results").mkdir()
    (folder / "run.jsonl").write_text('{"reward": 1.0, "_ng_environment_server": "a"}\n')
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert.cert_chain_pems[0].write_to_path(str(folder / "server.pem"))
    cert.private_key_pem.write_to_path(str(folder / "server.key"))
    ca.cert_pem.write_to_path(str(folder / "ca.pem"))
    (folder / "not-pem.txt").write_text("hello\n")
    (folder / "metrics.hash").write_text("scrypt$16384$8$1$c2FsdA==$aGFzaA==\n")
    # Files that are not a run's main output, or not JSON Lines at all.
    row = {"reward": 1.0, "_ng_environment_server": "a"}
    (folder / "other_materialized_inputs.jsonl").write_text('{"_ng_task_index": 0, "_ng_rollout_index": 0}\n')
    (folder / "pretty.jsonl").write_text(json.dumps(row, indent=2) + "\n")
    (folder / "array.json").write_text(json.dumps([row, row]) + "\n")
    (folder / "run.jsonl.gz").write_bytes(gzip.compress(json.dumps(row).encode() + b"\n"))
    (folder / "model.bin").write_bytes(bytes(range(256)) * 4)
    (folder / "rollouts.csv").write_text("task,reward\n0,1.0\n1,0.0\n")
    return folder


SERVE = ["serve", "run.jsonl", "--port", "0"]
CASES: list[tuple[list[str], str]] = [
    (["report", "results"], "results is a directory"),
    (["report", "nope/missing.jsonl"], "nope/missing.jsonl does not exist"),
    (["serve", "results", "--port", "0"], "results is a directory"),
    (["serve", "run.jsonl", "--port", "99999"], "--port: must be a port number from 0 to 65535"),
    (["serve", "run.jsonl", "--port", "http"], "--port: must be a port number"),
    ([*SERVE, "--poll-interval", "0"], "--poll-interval: must be a number of at least 0.05"),
    ([*SERVE, "--poll-interval", "-1"], "--poll-interval: must be a number of at least 0.05"),
    (["demo", "--duration", "-1"], "--duration: must be a number of at least 0"),
    (["demo", "--summary-interval", "0"], "--summary-interval: must be a number of at least 0.5"),
    (["demo", "--rate", "0"], "--rate: must be a number above 0"),
    (["demo", "--rate", "nan"], "--rate: must be a number above 0"),
    (["demo", "--masked", "2"], "--masked: must be a share between 0 and 1"),
    (["demo", "--masked", "0.6", "--failed", "0.6"], "must not exceed 1"),
    (["demo", "--port-range", "0"], "--port-range: must be a whole number of at least 1"),
    (["demo", "--otlp-endpoint", "not-a-url"], "--otlp-endpoint: must be an http:// or https:// URL"),
    (["demo", "--otlp-endpoint", "http://127.0.0.1:99999"], "--otlp-endpoint: has an invalid port"),
    ([*SERVE, "--tls-cert", "nope.pem", "--tls-key", "server.key"], "--tls-cert: nope.pem does not exist"),
    ([*SERVE, "--tls-client-ca", "ca.pem"], "--tls-client-ca needs --tls-cert and --tls-key"),
    ([*SERVE, "--tls-cert", "server.pem"], "--tls-cert and --tls-key go together"),
    ([*SERVE, "--tls-cert", "server.key", "--tls-key", "server.pem"],
     "server.key with key server.pem: not a PEM"),
    ([*SERVE, "--tls-cert", "server.pem", "--tls-key", "server.key", "--tls-client-ca", "not-pem.txt"],
     "TLS client CA not-pem.txt: not a PEM CA certificate"),
    ([*SERVE, "--basic-auth-user", "u", "--basic-auth-hash-file", "metrics.hash",
      "--basic-auth-hash-env", "H"], "--basic-auth-hash-file or --basic-auth-hash-env, not both"),
    ([*SERVE, "--basic-auth-user", "u"], "--basic-auth-user needs --basic-auth-hash-file or"),
    ([*SERVE, "--basic-auth-hash-file", "metrics.hash"], "a password hash needs --basic-auth-user"),
    ([*SERVE, "--basic-auth-user", "u", "--basic-auth-hash-env", "ROLLOUT_TEST_UNSET"], "ROLLOUT_TEST_UNSET"),
    (["report", "run.jsonl", "--frmat", "json"], "rollout-telemetry report: error: unrecognized arguments"),
    (["report", "run.jsonl", "--format", "yaml"], "--format: invalid choice: 'yaml'"),
    (["report", "run.jsonl", "--max-attempts", "0"], "--max-attempts: must be a whole number of at least 1"),
    (["top", "--interval", "0"], "--interval: must be a number of at least 0.1"),
    (["nonsense"], "invalid choice: 'nonsense'"),
    (["report", "other_materialized_inputs.jsonl"],
     "is the run's materialized inputs (what it was to produce), not rollouts: give the run's main output "
     "other.jsonl"),
    (["report", "run.jsonl", "--inputs", "nope_inputs.jsonl"], "--inputs nope_inputs.jsonl does not exist"),
    (["report", "pretty.jsonl"], "pretty.jsonl holds pretty-printed JSON, not JSON Lines"),
    (["report", "array.json"], "array.json holds a JSON array, not JSON Lines"),
    (["report", "run.jsonl.gz"], "run.jsonl.gz is gzip-compressed: decompress it first"),
    (["report", "model.bin"], "model.bin is a binary file, not JSON Lines"),
    (["report", "rollouts.csv"], "rollouts.csv is not JSON Lines (it looks like CSV)"),
    # Not readable though it is a regular file (reading it fails with an I/O error, for root too).
    (["report", "/proc/self/mem"], "/proc/self/mem cannot be read: Input/output error"),
    (["report", "nope/*.jsonl"], "nope/*.jsonl matches no file"),
    (["serve", "rollouts.csv", "--port", "0"], "rollouts.csv is not JSON Lines"),
    (["serve", "--follow", "run.jsonl"], "serve --follow PATH is serve PATH now: rollout-telemetry serve"),
    (["serve", "--port", "0"], "give the run's main output file: serve PATH"),
    (["-v", "report", "run.jsonl"], "rollout-telemetry report: -v is --log-level debug now"),
    (["report", "-v", "run.jsonl"], "rollout-telemetry report: -v is --log-level debug now"),
    (["top", "--follow", "run_failures.jsonl"], "is the run's failures sidecar, not rollouts"),
    (["serve", "other_materialized_inputs.jsonl", "--port", "0"], "not rollouts: give the run's main output"),
]  # fmt: skip


def _run(folder: Path, args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rollout_telemetry", *args],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


@pytest.mark.parametrize(("args", "says"), CASES, ids=[" ".join(args) for args, _ in CASES])
def test_a_wrong_input_exits_2_with_one_line(files: Path, args: list[str], says: str) -> None:
    """Exit 2, one line on stderr that names the problem, no traceback, nothing on stdout."""
    result = _run(files, args)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert says in result.stderr, result.stderr
    assert result.stdout == ""


def test_the_log_level_after_the_subcommand(files: Path) -> None:
    """--log-level is accepted after the subcommand as well as before it."""
    for args in (
        ["--log-level", "debug", "report", "run.jsonl", "--format", "json"],
        ["report", "--log-level", "debug", "run.jsonl", "--format", "json"],
    ):
        result = _run(files, args)
        assert result.returncode == 0, result.stderr
        assert '"agent": "a"' in result.stdout
