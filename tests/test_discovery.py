"""The target registry behind Prometheus service discovery: leases, probes, target groups, the file and
the HTTP endpoint; and the Ray extra staying out of every other import path."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from rollout_telemetry.discovery import DiscoveryServer, FileSD, Target, TargetRegistry, listening
from tests.support import FakeClock

LABELS = {"ray_node_id": "n1", "ray_actor": "Worker", "pid": "41"}


def registry(clock: FakeClock, lease: float = 30.0) -> TargetRegistry:
    return TargetRegistry(lease_seconds=lease, clock=clock)


def addresses(targets: TargetRegistry) -> list[str]:
    return [target.address for target in targets.targets()]


def test_register_lists_the_target_as_a_group(clock: FakeClock) -> None:
    """A registered target is one group with its labels, in Prometheus's target group format."""
    targets = registry(clock)
    assert targets.register(Target.of("10.0.0.2:40001", LABELS)) == 30.0
    assert targets.target_groups() == [{"targets": ["10.0.0.2:40001"], "labels": LABELS}]


def test_https_targets_carry_the_scheme(clock: FakeClock) -> None:
    """A TLS target's group sets ``__scheme__`` so Prometheus scrapes it over HTTPS."""
    targets = registry(clock)
    targets.register(Target.of("10.0.0.2:40001", {}, "https"))
    assert targets.target_groups() == [{"targets": ["10.0.0.2:40001"], "labels": {"__scheme__": "https"}}]


@pytest.mark.parametrize(
    ("address", "labels", "scheme"),
    [
        ("10.0.0.2", {}, "http"),
        ("10.0.0.2:port", {}, "http"),
        ("10.0.0.2:1", {"__address__": "x"}, "http"),
        ("10.0.0.2:1", {"bad-name": "x"}, "http"),
        ("10.0.0.2:1", {"1st": "x"}, "http"),
        ("10.0.0.2:1", {}, "ftp"),
    ],
)
def test_malformed_targets_are_refused(address: str, labels: dict[str, str], scheme: str) -> None:
    """An address without a port, a reserved or invalid label name, or an unknown scheme is a ValueError."""
    with pytest.raises(ValueError, match=r"target|label|scheme"):
        Target.of(address, labels, scheme)


def test_deregister_removes_the_target(clock: FakeClock) -> None:
    """A deregistered target leaves at once; deregistering it again says it was not there."""
    targets = registry(clock)
    targets.register(Target.of("10.0.0.2:40001", LABELS))
    targets.register(Target.of("10.0.0.3:40001", LABELS))
    assert targets.deregister("10.0.0.2:40001")
    assert not targets.deregister("10.0.0.2:40001")
    assert addresses(targets) == ["10.0.0.3:40001"]


def test_a_lease_not_renewed_expires(clock: FakeClock) -> None:
    """A target renewed within its lease stays; one not renewed for longer than the lease leaves."""
    targets = registry(clock, lease=30.0)
    kept, lapsed = Target.of("10.0.0.2:1", LABELS), Target.of("10.0.0.2:2", LABELS)
    targets.register(kept)
    targets.register(lapsed)
    clock.advance(20.0)
    targets.register(kept)
    clock.advance(10.0)
    assert targets.expire() == []  # exactly the lease: not yet
    clock.advance(0.5)
    assert targets.expire() == ["10.0.0.2:2"]
    assert addresses(targets) == ["10.0.0.2:1"]
    clock.advance(20.0)
    assert targets.expire() == ["10.0.0.2:1"]


def test_a_new_process_on_the_same_address_replaces_the_old(clock: FakeClock) -> None:
    """A registration for a held address with other labels (a new pid) replaces the old target."""
    targets = registry(clock)
    targets.register(Target.of("10.0.0.2:1", {"pid": "1"}))
    targets.register(Target.of("10.0.0.2:1", {"pid": "2"}))
    assert targets.target_groups() == [{"targets": ["10.0.0.2:1"], "labels": {"pid": "2"}}]


def test_prune_removes_only_refused_targets(clock: FakeClock) -> None:
    """A refused port removes its target; an unknown answer (a timeout) leaves it to its lease."""
    targets = registry(clock)
    answers = {"10.0.0.2:1": True, "10.0.0.2:2": False, "10.0.0.2:3": None}
    for address in answers:
        targets.register(Target.of(address, LABELS))
    assert targets.prune(answers.__getitem__) == ["10.0.0.2:2"]
    assert addresses(targets) == ["10.0.0.2:1", "10.0.0.2:3"]
    clock.advance(31.0)
    targets.register(Target.of("10.0.0.2:1", LABELS))
    assert targets.prune(answers.__getitem__) == ["10.0.0.2:3"]
    assert addresses(targets) == ["10.0.0.2:1"]


def test_prune_keeps_a_target_registered_again_while_it_was_probed(clock: FakeClock) -> None:
    """If a new process takes the address while the old one is probed as refused, the new one stays."""
    targets = registry(clock)
    targets.register(Target.of("10.0.0.2:1", {"pid": "1"}))

    def refused_while_replaced(address: str) -> bool:
        targets.register(Target.of(address, {"pid": "2"}))
        return False

    assert targets.prune(refused_while_replaced) == []
    assert targets.target_groups() == [{"targets": ["10.0.0.2:1"], "labels": {"pid": "2"}}]


def test_concurrent_registrations_lose_nothing() -> None:
    """Sixteen threads registering, renewing and deregistering at once leave exactly the expected set."""
    targets = TargetRegistry()
    start = threading.Barrier(16)

    def worker(index: int) -> None:
        start.wait()
        for n in range(200):
            target = Target.of(f"10.0.{index}.1:{n + 1}", {"pid": str(index)})
            targets.register(target)
            targets.register(target)
            if n % 2:
                targets.deregister(target.address)
            targets.target_groups()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    want = sorted(f"10.0.{i}.1:{n + 1}" for i in range(16) for n in range(0, 200, 2))
    assert addresses(targets) == want
    assert len(targets.target_groups()) == 16 * 100


def test_listening_tells_refused_from_open() -> None:
    """An open port answers True, a closed one False (nothing is listening: its process is gone)."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        address = f"127.0.0.1:{server.getsockname()[1]}"
        assert listening(address) is True
    assert listening(address) is False


def test_file_sd_is_written_atomically_and_only_on_change(tmp_path: Path) -> None:
    """The file holds the groups as JSON, is replaced by a rename, and is not rewritten when unchanged."""
    path = tmp_path / "sd" / "targets.json"
    file_sd = FileSD(path)
    groups = [{"targets": ["10.0.0.2:1"], "labels": {"pid": "1"}}]
    assert file_sd.write(groups)
    first = path.stat().st_ino
    assert json.loads(path.read_text()) == groups
    assert not file_sd.write(groups)
    assert file_sd.write([])
    assert path.stat().st_ino != first  # a new file renamed into place, never written in place
    assert json.loads(path.read_text()) == []
    assert [p.name for p in path.parent.iterdir()] == ["targets.json"]


def test_discovery_server_serves_the_target_groups() -> None:
    """GET /targets is the JSON Prometheus's http_sd reads; /healthz says ok; anything else is 404."""
    targets = TargetRegistry()
    targets.register(Target.of("10.0.0.2:1", LABELS))
    server = DiscoveryServer(targets)
    try:
        with urllib.request.urlopen(server.url, timeout=5) as response:
            assert response.headers["Content-Type"] == "application/json"
            assert json.load(response) == targets.target_groups()
        targets.deregister("10.0.0.2:1")
        with urllib.request.urlopen(server.url, timeout=5) as response:
            assert json.load(response) == []
        base = server.url.rsplit("/", 1)[0]
        with urllib.request.urlopen(f"{base}/healthz", timeout=5) as response:
            assert response.read() == b"ok\n"
        with pytest.raises(urllib.error.HTTPError) as error:
            urllib.request.urlopen(f"{base}/metrics", timeout=5)
        assert error.value.code == 404
        error.value.close()
    finally:
        server.stop()


def test_ray_stays_out_of_every_other_import_path() -> None:
    """The package, its CLI and the discovery module import without loading ray."""
    code = (
        "import sys\n"
        "import rollout_telemetry, rollout_telemetry.cli, rollout_telemetry.discovery\n"
        "from rollout_telemetry import RolloutTelemetry, TLSConfig, BasicAuth\n"
        "RolloutTelemetry()\n"
        "print(sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.')))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.strip() == "[]"


def test_missing_ray_extra_names_the_pip_install() -> None:
    """Without ray, importing rollout_telemetry.ray (and ``ray-targets``) fails with the exact pip install."""
    code = (
        "import sys\n"
        "sys.modules['ray'] = None  # as if the extra were not installed\n"
        "try:\n"
        "    import rollout_telemetry.ray\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
        "from rollout_telemetry.cli import main\n"
        "print(main(['ray-targets', '--address', '127.0.0.1:1', '--namespace', 'x']))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    message = "rollout_telemetry.ray needs Ray: pip install 'rollout-telemetry[ray]'"
    assert result.stdout.splitlines() == [message, "2"]
    assert f"rollout-telemetry ray-targets: {message}" in result.stderr
