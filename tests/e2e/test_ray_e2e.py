"""Rollout workers on a real Ray cluster (a head and a second node on this machine), found by a real
Prometheus through the target registry, over ``http_sd_configs`` and ``file_sd_configs``."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import trustme

from tests.e2e import fleet_member
from tests.e2e.prometheus import Prometheus

try:
    import ray
except ImportError:
    if os.environ.get("CI"):
        raise  # CI installs the ray extra: without it this module fails rather than skips
    pytest.skip("needs the ray extra: pip install 'rollout-telemetry[ray]'", allow_module_level=True)
from ray.cluster_utils import Cluster
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from rollout_telemetry import BasicAuth, TLSConfig, hash_password
from rollout_telemetry._ray.target_registry import DEFAULT_LEASE_SECONDS
from rollout_telemetry.errors import TargetRefused
from rollout_telemetry.ray import (
    REGISTRY_NAME,
    refusals,
    registry_url,
    start_registry,
    stop_registry,
    target_groups,
)
from tests.e2e.ray_worker import RUN, RolloutWorker, serve_labelled
from tests.support import own_ray_folder, ray_environment

REPO = Path(__file__).resolve().parents[2]
NAMESPACE = "rollout-telemetry-e2e"
STORE = 75 * 1024 * 1024
SEEDS = [31, 32, 33, 34]
REPLACEMENT = 35
Worker = ray.remote(num_cpus=0)(RolloutWorker)
ServeLabelled = ray.remote(num_cpus=0)(serve_labelled)
PASSWORD = "correct horse battery staple"


# The first test starts the cluster (about 25 s, 60 s on a loaded machine); the discovery tests take up to 85
# s beside the rest of the suite (leases, Prometheus's scrapes), and over 180 s with a core kept busy too. The
# cluster is a module fixture: the module's tests run on one parallel worker (--dist loadfile).
pytestmark = pytest.mark.timeout(300)


class RayCluster(NamedTuple):
    address: str
    nodes: list[str]


DASHBOARD_PORT = 8265
"""Ray's default dashboard port."""


@contextlib.contextmanager
def _holding(port: int) -> Iterator[None]:
    """``port`` on 127.0.0.1 taken while inside: by this socket, or already by another process."""
    with socket.socket() as holder:
        with contextlib.suppress(OSError):  # taken already: the case holds all the same
            holder.bind(("127.0.0.1", port))
            holder.listen()
        yield


@pytest.fixture(scope="module")
def cluster() -> Iterator[RayCluster]:
    """A head node and one more, one CPU and a small object store each, on this machine."""
    patch = pytest.MonkeyPatch()
    # the workers import tests.e2e.ray_worker: give every process of the cluster the repository
    patch.setenv("PYTHONPATH", str(REPO))
    patch.setenv("RAY_USAGE_STATS_ENABLED", "0")
    with own_ray_folder() as folder:
        for name, value in ray_environment(folder).items():
            patch.setenv(name, value)
        started = time.monotonic()
        # Ray checks a dashboard port given to it (its default, 8265, included) with a socket it leaves open
        # when the port is taken: by another Ray on the machine (NeMo Gym's, a docs example's) while this
        # cluster starts, whenever the machine's load lets the two overlap. Given none, it finds a port with
        # no such socket. The port is held here while the cluster starts, so that the case is always tried.
        with _holding(DASHBOARD_PORT):
            cluster = Cluster(
                initialize_head=True,
                head_node_args={
                    "num_cpus": 1,
                    "object_store_memory": STORE,
                    "include_dashboard": False,
                    "dashboard_port": None,
                },
            )
        try:
            cluster.add_node(num_cpus=1, object_store_memory=STORE)
            cluster.wait_for_nodes(timeout=60)
            ray.init(address=cluster.address, namespace=NAMESPACE, log_to_driver=False)
            nodes = sorted(n["NodeID"] for n in ray.nodes() if n["Alive"])  # type: ignore[no-untyped-call]
            assert len(nodes) == 2
            print(f"ray cluster up in {time.monotonic() - started:.1f} s")
            yield RayCluster(cluster.address, nodes)
        finally:
            ray.shutdown()
            cluster.shutdown()  # type: ignore[no-untyped-call]
            patch.undo()
            print(f"ray cluster: {time.monotonic() - started:.1f} s from start to shutdown")


def kill(*workers: Any) -> None:
    """Kill the workers and wait until they are dead, so none renews (and so re-creates) a registry."""
    for worker in workers:
        ray.kill(worker)
    deadline = time.monotonic() + 60
    for worker in workers:
        while True:  # a call made just after ray.kill() may still be served: the kill is asynchronous
            try:
                ray.get(worker.where.remote(), timeout=60)
            except ray.exceptions.RayActorError:
                break
            assert time.monotonic() < deadline, "a killed worker still answers after 60 s"
            time.sleep(0.1)


def start_worker(seed: int, node: str) -> Any:
    strategy = NodeAffinitySchedulingStrategy(node, soft=False)
    return Worker.options(scheduling_strategy=strategy).remote(seed, NAMESPACE)


def known_totals(seeds: list[int]) -> dict[tuple[tuple[str, str], ...], float]:
    """Completed rollouts per agent, counted from the seeds' outcome lists without the library."""
    counts: Counter[str] = Counter()
    for seed in seeds:
        for agent, disposition, _, _ in fleet_member.outcomes(seed):
            counts[agent] += disposition in ("measured", "masked")
    return {(("agent", agent),): float(counts[agent]) for agent in fleet_member.AGENTS}


def known_failed(seeds: list[int]) -> dict[tuple[tuple[str, str], ...], float]:
    """Failed rollouts per agent, counted from the outcome lists."""
    counts: Counter[str] = Counter()
    for seed in seeds:
        for agent, disposition, _, _ in fleet_member.outcomes(seed):
            counts[agent] += disposition == "failed"
    return {(("agent", agent),): float(counts[agent]) for agent in fleet_member.AGENTS}


def discovered(prometheus: Prometheus) -> dict[str, dict[str, Any]]:
    """Prometheus's active targets, by address."""
    return {t["labels"]["instance"]: t for t in prometheus.api("targets", state="active")["activeTargets"]}


def registered() -> set[str]:
    """The registry's targets (none while it is being restarted)."""
    try:
        groups = target_groups(namespace=NAMESPACE)
    except ray.exceptions.ActorUnavailableError:
        return set()
    return {address for group in groups for address in group["targets"]}


def wait(condition: Any, *, timeout: float, what: str) -> float:
    """Poll until ``condition()`` holds; return the seconds it took."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if condition():
            return time.monotonic() - started
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def niceness() -> int:
    """The calling process's niceness."""
    return os.nice(0)


def test_the_clusters_workers_run_at_the_tests_priority(cluster: RayCluster) -> None:
    """Ray's workers run at the test's niceness, not Ray's default of 15: below any other busy process (CI's
    niced steps among them), an actor took minutes to start."""
    remote = ray.remote(num_cpus=0)(niceness)
    places = [NodeAffinitySchedulingStrategy(node, soft=False) for node in cluster.nodes]
    assert ray.get([remote.options(scheduling_strategy=p).remote() for p in places], timeout=120) == [
        os.nice(0)
    ] * len(places)


@pytest.mark.parametrize("discovery", ["http_sd", "file_sd"])
def test_actors_on_two_nodes_are_discovered_and_summed_exactly(
    cluster: RayCluster, tmp_path: Path, discovery: str
) -> None:
    """Four actors on two nodes are found through the registry and summed exactly; a killed actor leaves
    discovery within the lease, its replacement is found and scraped, and the run's totals stay exact."""
    started = time.monotonic()
    file_sd = tmp_path / "sd" / "targets.json"
    start_registry(namespace=NAMESPACE, file_sd_path=str(file_sd) if discovery == "file_sd" else None)
    workers: list[Any] = []
    try:
        url = registry_url(namespace=NAMESPACE)
        if discovery == "http_sd":
            sd: dict[str, Any] = {"http_sd_configs": [{"url": url, "refresh_interval": "1s"}]}
        else:
            sd = {"file_sd_configs": [{"files": [str(file_sd)], "refresh_interval": "1s"}]}
        workers = [start_worker(seed, cluster.nodes[i % 2]) for i, seed in enumerate(SEEDS)]
        places = ray.get([w.where.remote() for w in workers], timeout=120)
        assert {p["ray_node_id"] for p in places} == set(cluster.nodes)
        assert len({p["pid"] for p in places}) == 4
        assert {p["ray_actor"] for p in places} == {"RolloutWorker"}
        with urllib.request.urlopen(url, timeout=10) as response:
            assert response.headers["Content-Type"] == "application/json"
            groups = json.load(response)
        assert sorted(g["targets"][0] for g in groups) == sorted(p["address"] for p in places)
        if discovery == "file_sd":
            assert json.loads(file_sd.read_text()) == groups

        config = {"static_configs": [], **sd}
        with Prometheus(tmp_path, [], interval="500ms", scrape_extra=config) as prometheus:
            discovered_and_summed(prometheus, workers, places)
            workers[0] = killed_and_replaced(prometheus, workers[0], places[0], cluster.nodes[0], discovery)
            # an actor that stops serving deregisters at once
            leaving = places[1]["address"]
            ray.get(workers[1].stop_serving.remote(), timeout=60)
            assert leaving not in registered()
            if discovery == "file_sd":
                listed = {a for g in json.loads(file_sd.read_text()) for a in g["targets"]}
                assert listed == registered()
    finally:
        kill(*workers)
        stop_registry(namespace=NAMESPACE)
        print(f"{discovery}: {time.monotonic() - started:.1f} s")


def discovered_and_summed(prometheus: Prometheus, workers: list[Any], places: list[dict[str, str]]) -> None:
    """Prometheus finds the four targets with their labels, and sums their known outcomes exactly."""
    prometheus.wait_for(lambda: prometheus.targets_up() == 4, timeout=60, what="four targets up")
    found = discovered(prometheus)
    for place in places:
        labels = found[place["address"]]["labels"]
        assert labels["ray_node_id"] == place["ray_node_id"]
        assert labels["pid"] == place["pid"]
    ray.get([w.collect.remote() for w in workers], timeout=60)
    want = known_totals(SEEDS)

    def summed() -> bool:
        return prometheus.values(f'sum by (agent) (rollout_completed_total{{run="{RUN}"}})') == want

    prometheus.wait_for(summed, timeout=30, what="the four actors' exact totals")
    assert prometheus.values("sum by (agent) (rollout_failed_total)") == known_failed(SEEDS)
    # the recording rules aggregate the per-target labels away: one series per run and agent
    prometheus.wait_for(
        lambda: (
            {tuple(k for k, _ in key) for key in prometheus.values("agent:rollout_completed:rate5m")}
            == {("__name__", "agent", "run")}
        ),
        timeout=30,
        what="the recording rule",
    )


def killed_and_replaced(
    prometheus: Prometheus, worker: Any, place: dict[str, str], node: str, discovery: str
) -> Any:
    """A killed actor leaves discovery within the lease; its replacement is a new target from zero."""
    dead = place["address"]
    ray.kill(worker)
    left = wait(lambda: dead not in registered(), timeout=DEFAULT_LEASE_SECONDS, what="removal")
    gone = wait(lambda: dead not in discovered(prometheus), timeout=30, what="prometheus to drop it")
    print(f"{discovery}: killed target left the registry in {left:.1f} s, prometheus {gone:.1f} s")

    replacement = start_worker(REPLACEMENT, node)
    new = ray.get(replacement.where.remote(), timeout=120)
    pid = new["pid"]
    assert pid != place["pid"]

    def scraped() -> bool:
        target = discovered(prometheus).get(new["address"], {})
        return bool(target.get("health") == "up" and target["labels"]["pid"] == pid)

    prometheus.wait_for(scraped, timeout=30, what="the replacement to be scraped")
    prometheus.wait_for(
        lambda: bool(prometheus.query(f'rollout_completed_total{{pid="{pid}"}} == 0')),
        timeout=30,
        what="the replacement's zeros",
    )
    ray.get(replacement.collect.remote(), timeout=60)
    live = known_totals([*SEEDS[1:], REPLACEMENT])
    prometheus.wait_for(
        lambda: prometheus.values("sum by (agent) (rollout_completed_total)") == live,
        timeout=30,
        what="the live actors' exact totals",
    )
    # the run's totals, the dead actor included: each series' last value (counters never go down)
    run = prometheus.values("sum by (agent) (max_over_time(rollout_completed_total[1h]))")
    assert run == known_totals([*SEEDS, REPLACEMENT])
    # a replacement is a series of its own, not a reset of the dead one's: rates never see a drop
    assert set(prometheus.values("resets(rollout_completed_total[1h])").values()) == {0.0}
    stamp = max(
        float(r["value"][1]) for r in prometheus.query(f'timestamp(rollout_completed_total{{pid="{pid}"}})')
    )
    increase = prometheus.query(
        f'sum by (agent) (increase(rollout_completed_total{{pid="{pid}"}}[1h]))', at=stamp
    )
    got = {(("agent", r["metric"]["agent"]),): float(r["value"][1]) for r in increase}
    assert got == known_totals([REPLACEMENT])
    return replacement


def test_registrations_from_many_actors_at_once(cluster: RayCluster) -> None:
    """Two actors on two nodes register 100 targets each from 16 threads at once: none is lost."""
    name = "rollout-telemetry-flood"
    workers = [start_worker(40 + i, node) for i, node in enumerate(cluster.nodes)]
    try:
        leases = ray.get(
            [w.flood.remote(name, NAMESPACE, 20000 + 1000 * i, 100) for i, w in enumerate(workers)],
            timeout=120,
        )
        assert leases == [DEFAULT_LEASE_SECONDS] * 2
        groups = target_groups(namespace=NAMESPACE, name=name)
        assert len(groups) == 200
        ports = sorted(int(g["targets"][0].rsplit(":", 1)[1]) for g in groups)
        assert ports == [*range(20000, 20100), *range(21000, 21100)]
    finally:
        kill(*workers)
        stop_registry(namespace=NAMESPACE, name=name)
        stop_registry(namespace=NAMESPACE)  # the one the workers' own targets created


def test_ray_targets_prints_the_target_groups(cluster: RayCluster) -> None:
    """``rollout-telemetry ray-targets`` prints the registry's target groups, or its URL with --url; a
    missing registry, and a registry that cannot start on its port, are one line and status 2."""
    name = "rollout-telemetry-cli"
    registry = start_registry(namespace=NAMESPACE, name=name, sweep_seconds=3600)
    try:
        node = ray.util.get_node_ip_address()  # type: ignore[no-untyped-call]
        ray.get(registry.register.remote(f"{node}:9464", {"pid": "7"}, "https", "driver"), timeout=60)

        def cli(*args: str) -> subprocess.CompletedProcess[str]:
            command = ["ray-targets", "--address", cluster.address, "--namespace", NAMESPACE, *args]
            return subprocess.run(
                [sys.executable, "-m", "rollout_telemetry", *command],
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )

        printed = cli("--name", name)
        assert printed.returncode == 0, printed.stderr
        assert json.loads(printed.stdout) == [
            {"targets": [f"{node}:9464"], "labels": {"pid": "7", "__scheme__": "https"}}
        ]
        url = cli("--name", name, "--url")
        assert url.stdout.strip() == registry_url(namespace=NAMESPACE, name=name)
        missing = cli("--name", "no-such-registry")
        assert missing.returncode == 2
        assert "no target registry 'no-such-registry'" in missing.stderr
        with socket.socket() as taken:
            taken.bind((node, 0))
            taken.listen()
            port = taken.getsockname()[1]
            refused = cli("--name", f"{name}-taken", "--start", "--port", str(port))
        assert refused.returncode == 2
        assert refused.stderr.splitlines() == [
            "rollout-telemetry ray-targets: the target registry did not start: "
            f"rollout_telemetry.errors.ServeError: cannot serve service discovery on {node}:{port}: "
            f"port {port} is already in use"
        ]
    finally:
        stop_registry(namespace=NAMESPACE, name=name)
        stop_registry(namespace=NAMESPACE, name=f"{name}-taken")


def test_a_hung_actor_leaves_by_its_lease_and_a_restarted_registry_is_refilled(cluster: RayCluster) -> None:
    """A process that stops answering (its port still accepts connections) leaves when its lease runs out
    and returns when it renews; a registry that crashes is restarted by Ray and refilled by the renewals."""
    lease = 3.0  # renewals every second
    registry = start_registry(namespace=NAMESPACE, lease_seconds=lease)
    worker = start_worker(50, cluster.nodes[1])
    try:
        place = ray.get(worker.where.remote(), timeout=120)
        address, pid = place["address"], int(place["pid"])
        assert address in registered()
        os.kill(pid, signal.SIGSTOP)  # hung: the kernel still accepts its connections, nothing renews
        try:
            left = wait(lambda: address not in registered(), timeout=4 * lease, what="the lease to run out")
        finally:
            os.kill(pid, signal.SIGCONT)
        assert left > lease / 2
        wait(lambda: address in registered(), timeout=4 * lease, what="the renewal")
        ray.kill(registry, no_restart=False)  # a crash: Ray restarts it as it was created
        wait(lambda: address in registered(), timeout=60, what="the restarted registry to be refilled")
    finally:
        kill(worker)
        stop_registry(namespace=NAMESPACE)


# --- what the registry refuses, and discovery behind TLS and basic auth


def refusal(call: Any) -> TargetRefused:
    """The registry's refusal of a remote call (Ray raises it wrapped with the actor's traceback)."""
    with pytest.raises(TargetRefused) as raised:
        ray.get(call, timeout=60)
    cause = getattr(raised.value, "cause", raised.value)
    assert isinstance(cause, TargetRefused)
    return cause


def node_address() -> str:
    """This node's address as Ray reports it (both nodes of the test cluster share it)."""
    address: str = ray.util.get_node_ip_address()  # type: ignore[no-untyped-call]
    return address


def test_the_registry_refuses_an_address_outside_the_cluster(cluster: RayCluster) -> None:
    """A link-local metadata address, loopback (the nodes report another address) or any host that is not
    a node is refused with its reason, counted and never listed; the actor goes on and takes a node's."""
    name = "rollout-telemetry-foreign"
    registry = start_registry(namespace=NAMESPACE, name=name, sweep_seconds=3600)
    try:
        for address in ("169.254.169.254:80", "127.0.0.1:9464", "10.1.2.3:9464"):
            refused = refusal(registry.register.remote(address, {}, "http", "driver"))
            assert (refused.reason, address in str(refused)) == ("foreign_address", True)
        ray.get(registry.register.remote(f"{node_address()}:9464", {}, "http", "driver"), timeout=60)
        listed = [group["targets"] for group in target_groups(namespace=NAMESPACE, name=name)]
        assert listed == [[f"{node_address()}:9464"]]
        assert refusals(namespace=NAMESPACE, name=name) == {"foreign_address": 3}
    finally:
        stop_registry(namespace=NAMESPACE, name=name)


def test_reserved_labels_are_refused_by_the_registry_and_by_serve_on_ray(cluster: RayCluster) -> None:
    """The registry refuses job, instance, __* and the series' labels; serve_on_ray with one of them, or
    with one of its own identity labels, fails in the worker with the reason and leaves nothing served."""
    name = "rollout-telemetry-labels"
    registry = start_registry(namespace=NAMESPACE, name=name, sweep_seconds=3600)
    try:
        for label in ("job", "instance", "__address__", "__scheme__", "agent"):
            call = registry.register.remote(f"{node_address()}:9464", {label: "x"}, "http", "driver")
            assert refusal(call).reason == "reserved_label"
        assert target_groups(namespace=NAMESPACE, name=name) == []
        answers = ray.get(
            [
                ServeLabelled.remote(NAMESPACE, labels)
                for labels in ({"job": "x"}, {"pid": "1"}, {"team": "rl"})
            ],
            timeout=120,
        )
        assert answers[0].startswith("reserved_label: target label 'job' is reserved")
        assert answers[1].startswith("reserved_label: labels pid are set by serve_on_ray")
        assert answers[2] == "served"
        assert registered() == set()
    finally:
        stop_registry(namespace=NAMESPACE, name=name)
        stop_registry(namespace=NAMESPACE)


def test_another_registrant_cannot_replace_or_remove_a_target(cluster: RayCluster) -> None:
    """Another caller can neither replace nor remove a worker's target: it stays with the worker's labels
    through the worker's renewals, and the worker's own stop removes it."""
    worker = start_worker(60, cluster.nodes[0])
    try:
        place = ray.get(worker.where.remote(), timeout=120)
        registry = ray.get_actor(REGISTRY_NAME, namespace=NAMESPACE)
        intruding: Any = registry.register.remote(place["address"], {"pid": "666"}, "http", "worker:intruder")
        assert refusal(intruding).reason == "held"
        assert refusal(registry.deregister.remote(place["address"], "worker:intruder")).reason == "held"
        (group,) = target_groups(namespace=NAMESPACE)
        assert (group["targets"], group["labels"]["pid"]) == ([place["address"]], place["pid"])
        ray.get(worker.stop_serving.remote(), timeout=60)
        assert registered() == set()
        assert refusals(namespace=NAMESPACE) == {"held": 2}
    finally:
        kill(worker)
        stop_registry(namespace=NAMESPACE)


def test_the_registry_holds_at_most_max_targets(cluster: RayCluster) -> None:
    """A registry made with max_targets=3 refuses a fourth address as full while the three renew; a place
    freed is taken again."""
    name = "rollout-telemetry-cap"
    registry = start_registry(namespace=NAMESPACE, name=name, sweep_seconds=3600, max_targets=3)
    node = node_address()
    try:
        for port in (1, 2, 3):
            ray.get(registry.register.remote(f"{node}:{port}", {}, "http", "driver"), timeout=60)
        assert refusal(registry.register.remote(f"{node}:4", {}, "http", "driver")).reason == "full"
        ray.get(registry.register.remote(f"{node}:3", {}, "http", "driver"), timeout=60)  # a renewal
        assert ray.get(registry.deregister.remote(f"{node}:1", "driver"), timeout=60)
        ray.get(registry.register.remote(f"{node}:4", {}, "http", "driver"), timeout=60)
        ports = sorted(
            g["targets"][0].rsplit(":", 1)[1] for g in target_groups(namespace=NAMESPACE, name=name)
        )
        assert ports == ["2", "3", "4"]
    finally:
        stop_registry(namespace=NAMESPACE, name=name)


def test_discovery_over_https_behind_basic_auth(cluster: RayCluster, tmp_path: Path) -> None:
    """A registry started with TLS and basic auth, from Python and from ``ray-targets --start`` (whose
    --file-sd is relative to the command), serves /targets over HTTPS to an authorised client and answers
    401 to one without the password."""
    ca = trustme.CA()
    certificate = ca.issue_cert(node_address())
    certificate.cert_chain_pems[0].write_to_path(str(tmp_path / "server.pem"))
    certificate.private_key_pem.write_to_path(str(tmp_path / "server.key"))
    (tmp_path / "hash").write_text(hash_password(PASSWORD) + "\n")
    context = ssl.create_default_context()
    ca.configure_trust(context)
    token = base64.b64encode(f"prometheus:{PASSWORD}".encode()).decode()

    def get(url: str, headers: dict[str, str]) -> tuple[int, bytes]:
        request = urllib.request.Request(url, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=10, context=context) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as error:
            with error:
                return error.code, error.read()

    tls = TLSConfig(str(tmp_path / "server.pem"), str(tmp_path / "server.key"))
    names = ["rollout-telemetry-https", "rollout-telemetry-https-cli"]
    try:
        registry = start_registry(
            namespace=NAMESPACE,
            name=names[0],
            sweep_seconds=3600,  # nothing listens at the registered port: it must not be swept away
            tls=tls,
            auth=BasicAuth.from_file("prometheus", tmp_path / "hash"),
        )
        ray.get(registry.register.remote(f"{node_address()}:9464", {}, "http", "driver"), timeout=60)
        started = subprocess.run(
            [
                sys.executable, "-m", "rollout_telemetry", "ray-targets", "--address", cluster.address,
                "--namespace", NAMESPACE, "--name", names[1], "--start",
                "--tls-cert", str(tmp_path / "server.pem"), "--tls-key", str(tmp_path / "server.key"),
                "--basic-auth-user", "prometheus", "--basic-auth-hash-file", str(tmp_path / "hash"),
                "--file-sd", "sd/targets.json",
            ],
            capture_output=True, text=True, timeout=120, check=False, cwd=tmp_path,
        )  # fmt: skip
        assert started.returncode == 0, started.stderr
        assert json.loads((tmp_path / "sd" / "targets.json").read_text()) == []  # relative to the command
        urls = [registry_url(namespace=NAMESPACE, name=names[0]), started.stdout.strip()]
        assert urls[1] == registry_url(namespace=NAMESPACE, name=names[1])
        for url, listed in zip(urls, ([f"{node_address()}:9464"], []), strict=True):
            assert url.startswith(f"https://{node_address()}:")
            status, body = get(url, {"Authorization": f"Basic {token}"})
            assert (status, [a for g in json.loads(body) for a in g["targets"]]) == (200, listed)
            assert get(url, {})[0] == 401
    finally:
        for name in names:
            stop_registry(namespace=NAMESPACE, name=name)
