"""The target registry behind Prometheus service discovery: leases, probes, target groups, the file and
the HTTP endpoint; and the Ray extra staying out of every other import path."""

from __future__ import annotations

import base64
import http.client
import json
import logging
import pickle
import socket
import ssl
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import trustme

from rollout_telemetry import BasicAuth, TLSConfig, hash_password
from rollout_telemetry._contract.labels import MAX_LABEL_LENGTH
from rollout_telemetry._ray.discovery import DiscoveryServer, FileSD
from rollout_telemetry._ray.target_registry import MAX_TARGETS, TargetRegistry, listening
from rollout_telemetry._ray.targets import NodeAddresses, Target
from rollout_telemetry.errors import TargetRefused
from tests.support import FakeClock, held

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
        ("10.0.0.2:65536", {}, "http"),
        ("10.0.0.2:0", {}, "http"),
        ("10.0.0.2:\u00b2", {}, "http"),  # a digit to str.isdigit, not to int(): was an uncounted ValueError
        ("[]:9464", {}, "http"),
        ("10.0.0.2:1", {"__address__": "x"}, "http"),
        ("10.0.0.2:1", {"bad-name": "x"}, "http"),
        ("10.0.0.2:1", {"1st": "x"}, "http"),
        ("10.0.0.2:1", {}, "ftp"),
        ("10.0.0.2:1", {f"label{i}": "x" for i in range(17)}, "http"),
        ("10.0.0.2:1", {"n" * 129: "x"}, "http"),
        ("x" * 300 + ":1", {}, "http"),
        (None, {}, "http"),
        ("10.0.0.2:1", ["pid"], "http"),
    ],
)
def test_malformed_targets_are_refused(address: Any, labels: Any, scheme: str) -> None:
    """An address without a port or too long, a reserved or invalid label name, too many labels, labels that
    are not a mapping, or an unknown scheme is a ValueError."""
    with pytest.raises(ValueError, match=r"target|label|scheme"):
        Target.of(address, labels, scheme)


@pytest.mark.parametrize(
    ("alias", "address"),
    [
        ("[10.0.0.1]:9464", "10.0.0.1:9464"),
        ("10.0.0.1:09464", "10.0.0.1:9464"),
        ("FD00:0::2:9464", "[fd00::2]:9464"),
        ("[fd00:0:0::2]:9464", "[fd00::2]:9464"),
        ("Node-1.Cluster:9464", "node-1.cluster:9464"),
    ],
)
def test_an_alias_of_a_target_is_the_same_target(alias: str, address: str) -> None:
    """Spellings of one host:port are one target: registered by another registrant it is refused as the
    target it aliases would be, so Prometheus never scrapes one exporter twice (its sums doubled)."""
    targets = TargetRegistry()
    targets.register(Target.of(address, LABELS), registrant="actor:1")
    with pytest.raises(TargetRefused):
        targets.register(Target.of(alias, LABELS), registrant="actor:2")
    with pytest.raises(TargetRefused):
        targets.deregister(alias, registrant="actor:2")
    assert addresses(targets) == [address]
    assert targets.deregister(alias, registrant="actor:1")
    assert addresses(targets) == []


def test_label_values_are_cut_as_every_label_is() -> None:
    """A target's label values are cut to the package's label length, so a registration cannot be huge."""
    target = Target.of("10.0.0.2:1", {"ray_actor": "a" * 1000})
    assert target.labels == (("ray_actor", "a" * MAX_LABEL_LENGTH),)


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


def test_discovery_serves_https_behind_basic_auth(tmp_path: Path) -> None:
    """With TLS and basic auth, /targets answers an authorised HTTPS client only (401 with the challenge
    otherwise), /healthz stays open, other methods are 405, and no Server banner is sent."""
    ca = trustme.CA()
    certificate = ca.issue_cert("127.0.0.1")
    certificate.cert_chain_pems[0].write_to_path(str(tmp_path / "server.pem"))
    certificate.private_key_pem.write_to_path(str(tmp_path / "server.key"))
    context = ssl.create_default_context()
    ca.configure_trust(context)
    targets = TargetRegistry()
    targets.register(Target.of("10.0.0.2:1", LABELS))
    auth = BasicAuth("prometheus", hash_password("s3cret"))
    server = DiscoveryServer(
        targets, tls=TLSConfig(str(tmp_path / "server.pem"), str(tmp_path / "server.key")), auth=auth
    )
    token = base64.b64encode(b"prometheus:s3cret").decode()

    def get(path: str, headers: dict[str, str], method: str = "GET") -> tuple[int, Any, bytes]:
        request = urllib.request.Request(server.url.replace("/targets", path), headers=headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=5, context=context) as response:
                return response.status, response.headers, response.read()
        except urllib.error.HTTPError as error:
            with error:
                return error.code, error.headers, error.read()

    try:
        assert server.url.startswith("https://127.0.0.1:")
        status, headers, body = get("/targets", {"Authorization": f"Basic {token}"})
        assert (status, json.loads(body)) == (200, targets.target_groups())
        assert "Server" not in headers
        status, headers, _ = get("/targets", {})
        assert status == 401
        assert headers["WWW-Authenticate"].startswith("Basic")
        wrong = base64.b64encode(b"prometheus:wrong").decode()
        assert get("/targets", {"Authorization": f"Basic {wrong}"})[0] == 401
        assert get("/healthz", {})[:3:2] == (200, b"ok\n")
        assert get("/targets", {"Authorization": f"Basic {token}"}, "POST")[0] == 405
        with pytest.raises(http.client.RemoteDisconnected):  # plain HTTP gets no answer
            urllib.request.urlopen(server.url.replace("https:", "http:"), timeout=5)
    finally:
        server.stop()


def test_ray_stays_out_of_every_other_import_path() -> None:
    """The package, its CLI and the discovery module import without loading ray."""
    code = (
        "import sys\n"
        "import rollout_telemetry, rollout_telemetry._cli.main, rollout_telemetry._ray.discovery\n"
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
        "from rollout_telemetry._cli.main import main\n"
        "print(main(['ray-targets', '--address', '127.0.0.1:1', '--namespace', 'x']))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    message = "rollout_telemetry.ray needs Ray: pip install 'rollout-telemetry[ray]'"
    assert result.stdout.splitlines() == [message, "2"]
    assert f"rollout-telemetry ray-targets: {message}" in result.stderr


# --- what a registrant or a reader may do: nothing a client sends takes discovery down


def _refusal_reason(error: BaseException) -> object:
    return getattr(error, "reason", None)


def test_slowloris_on_targets_holds_no_thread() -> None:
    """A hundred connections trickling a request head to /targets hold no thread each, and a GET /targets
    made meanwhile is answered while they are all still held, not after them."""
    targets = TargetRegistry()
    targets.register(Target.of("10.0.0.2:1", LABELS))
    server = DiscoveryServer(targets)
    trickling: list[socket.socket] = []
    try:
        with urllib.request.urlopen(server.url, timeout=5) as response:
            response.read()  # warm: whatever threads the server starts exist now
        baseline = threading.active_count()
        for _ in range(100):
            connection = socket.create_connection(("127.0.0.1", server.port), timeout=5)
            connection.sendall(b"GET /targets HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: a")
            trickling.append(connection)
        # accepted after the hundred (one listening queue, first come first served): they are all held now,
        # and a GET queued behind them would be answered only once their head deadline had closed them
        with urllib.request.urlopen(server.url, timeout=5) as response:
            assert json.load(response) == targets.target_groups()
        assert all(held(connection) for connection in trickling), "answered only after the tricklers"
        assert threading.active_count() <= baseline
    finally:
        for connection in trickling:
            connection.close()
        server.stop()


@pytest.mark.parametrize(
    "address", ["169.254.169.254:80", "127.0.0.1:9464", "10.0.0.3:9464", "[fe80::1]:80", "metadata:80"]
)
def test_an_address_outside_the_cluster_is_refused(clock: FakeClock, address: str) -> None:
    """With the cluster's node addresses as the host rule, a target on any other host is refused, counted
    and not listed; a node's own address is taken."""
    targets = TargetRegistry(clock=clock, hosts=NodeAddresses(lambda: ["10.0.0.2"], clock=clock))
    with pytest.raises(ValueError, match="not an address of a node") as refused:
        targets.register(Target.of(address, LABELS), registrant="worker-1")
    assert _refusal_reason(refused.value) == "foreign_address"
    assert targets.targets() == []
    targets.register(Target.of("10.0.0.2:9464", LABELS), registrant="worker-1")
    assert addresses(targets) == ["10.0.0.2:9464"]
    assert targets.refusals() == {"foreign_address": 1}


def test_node_addresses_are_read_again_for_an_unknown_host(clock: FakeClock) -> None:
    """A node that joined is known at its first registration; the cluster is asked at most once a second
    however many unknown hosts are offered; a node that left is forgotten within a minute; IPv6 spellings
    of one address are one address."""
    asked: list[float] = []
    nodes = ["10.0.0.2"]

    def read() -> list[str]:
        asked.append(clock())
        return list(nodes)

    known = NodeAddresses(read, clock=clock)
    assert known("10.0.0.2")
    nodes.append("fd00::2")
    clock.advance(2.0)
    assert known("[fd00:0::2]")  # unknown: read again, now a node
    for _ in range(100):
        assert not known("169.254.169.254")
    assert len(asked) == 2
    clock.advance(1.5)
    assert not known("169.254.169.254")
    assert len(asked) == 3
    nodes.remove("10.0.0.2")  # the node left: a minute on, its address is read again and refused
    clock.advance(59.0)
    assert known("10.0.0.2")
    clock.advance(1.0)
    assert not known("10.0.0.2")
    assert len(asked) == 4


@pytest.mark.parametrize(
    "name",
    ["job", "instance", "__address__", "__scheme__", "__meta_x", "agent", "run", "failure_kind", "le"],
)
def test_reserved_label_names_are_refused(name: str) -> None:
    """Prometheus's own target labels (job, instance, __*) and the labels the exporter's series carry are
    refused: a target could otherwise rename its series or redirect its scrape."""
    with pytest.raises(ValueError, match="reserved") as refused:
        Target.of("10.0.0.2:1", {name: "x"})
    assert _refusal_reason(refused.value) == "reserved_label"


def test_only_the_registrant_replaces_or_removes_its_target(clock: FakeClock) -> None:
    """Another registrant can neither replace nor remove a target; its own registrant can; once the holder's
    lease has run out, the address is free for a new process."""
    targets = registry(clock, lease=30.0)
    targets.register(Target.of("10.0.0.2:1", {"pid": "1"}), registrant="actor-a")
    with pytest.raises(ValueError, match="another registrant") as refused:
        targets.register(Target.of("10.0.0.2:1", {"pid": "2"}), registrant="actor-b")
    assert _refusal_reason(refused.value) == "held"
    with pytest.raises(ValueError, match="another registrant"):
        targets.deregister("10.0.0.2:1", registrant="actor-b")
    assert targets.target_groups() == [{"targets": ["10.0.0.2:1"], "labels": {"pid": "1"}}]
    targets.register(Target.of("10.0.0.2:1", {"pid": "3"}), registrant="actor-a")
    assert targets.target_groups() == [{"targets": ["10.0.0.2:1"], "labels": {"pid": "3"}}]
    clock.advance(31.0)
    targets.register(Target.of("10.0.0.2:1", {"pid": "4"}), registrant="actor-b")
    assert targets.target_groups() == [{"targets": ["10.0.0.2:1"], "labels": {"pid": "4"}}]
    assert targets.deregister("10.0.0.2:1", registrant="actor-b")
    assert targets.refusals() == {"held": 2}


def test_the_number_of_targets_is_capped(clock: FakeClock) -> None:
    """Beyond ``max_targets`` a new address is refused; renewing or replacing a held target still works,
    and a freed place is taken again. The default is MAX_TARGETS."""
    assert TargetRegistry().max_targets == MAX_TARGETS
    targets = TargetRegistry(clock=clock, max_targets=3)
    for port in (1, 2, 3):
        targets.register(Target.of(f"10.0.0.2:{port}", LABELS), registrant="a")
    with pytest.raises(ValueError, match="full") as refused:
        targets.register(Target.of("10.0.0.2:4", LABELS), registrant="a")
    assert _refusal_reason(refused.value) == "full"
    targets.register(Target.of("10.0.0.2:3", LABELS), registrant="a")
    targets.register(Target.of("10.0.0.2:3", {"pid": "2"}), registrant="a")
    assert targets.deregister("10.0.0.2:1", registrant="a")
    targets.register(Target.of("10.0.0.2:4", LABELS), registrant="a")
    assert addresses(targets) == ["10.0.0.2:2", "10.0.0.2:3", "10.0.0.2:4"]
    assert targets.refusals() == {"full": 1}


def test_targets_is_rendered_once_per_change(monkeypatch: pytest.MonkeyPatch) -> None:
    """Twenty readers of an unchanged registry (eight of them at once) cost one rendering; a renewal
    changes nothing, a new target renders once more."""
    targets = TargetRegistry()
    for port in (1, 2, 3):
        targets.register(Target.of(f"10.0.0.2:{port}", LABELS))
    rendered: list[str] = []
    group = Target.group

    def counted(self: Target) -> dict[str, object]:
        rendered.append(self.address)
        return group(self)

    monkeypatch.setattr(Target, "group", counted)
    server = DiscoveryServer(targets)

    def read() -> list[dict[str, object]]:
        with urllib.request.urlopen(server.url, timeout=5) as response:
            groups: list[dict[str, object]] = json.load(response)
            return groups

    try:
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda _: read(), range(20)))
        assert all(len(answer) == 3 for answer in answers)
        assert len(rendered) == 3  # three targets, rendered once
        targets.register(Target.of("10.0.0.2:1", LABELS))  # a renewal
        read()
        assert len(rendered) == 3
        targets.register(Target.of("10.0.0.2:4", LABELS))
        assert len(read()) == 4
        assert len(read()) == 4
        assert len(rendered) == 3 + 4
    finally:
        server.stop()


def test_refusals_are_logged_sparingly_and_cross_a_process_boundary(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """Ten refusals of one reason log four lines (the 1st, 2nd, 4th and 8th), and a refusal pickles (as a
    Ray call carries it back) with its reason and message."""
    targets = TargetRegistry(clock=clock, hosts=NodeAddresses(lambda: ["10.0.0.2"], clock=clock))
    with caplog.at_level(logging.WARNING, logger="rollout_telemetry.discovery"):
        for port in range(1, 11):
            with pytest.raises(TargetRefused):
                targets.offer(f"169.254.169.254:{port}", {}, registrant="worker-1")
    assert [r.getMessage().rsplit("(", 1)[1] for r in caplog.records] == [
        f"{n} refused as foreign_address so far)" for n in (1, 2, 4, 8)
    ]
    refused = TargetRefused("held", "10.0.0.2:1 is registered by another registrant")
    copy = pickle.loads(pickle.dumps(refused))
    assert (type(copy), copy.reason, str(copy)) == (TargetRefused, "held", str(refused))
