"""The Docker Engine harness (``localdocker``): the engine answers, runs containers from the
offline images, its networks work, it reaches the stand-in outside world and nothing else, and
stopping it (or cleaning a crashed run) leaves the host as it was.

The address-plan checks need nothing; the others run a real engine (the session's
``docker_engine``, or one of their own where they stop it).
"""

from __future__ import annotations

import contextlib
import ipaddress
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from localcluster.net import wait_until
from localcluster.realnode import host, netns
from localcluster.realnode import network as realnode_network
from localcluster.registry import LocalRegistry
from localdocker import (
    BUSYBOX,
    PAGE,
    DockerEngine,
    EngineNetwork,
    Outside,
    build_image,
    busybox_image,
    dns,
    pytest_plugin,
    records,
)
from localdocker.daemon import cgroup_mounts
from localdocker.network import MAX_SLOTS


def _unique(stem: str) -> str:
    return f"{stem}-{uuid.uuid4().hex[:8]}"


# ---------------------------------------------------------------------- the plan (no engine)


def test_every_engine_range_is_reserved_and_apart_from_the_real_nodes() -> None:
    benchmarking = ipaddress.ip_network("198.18.0.0/15")
    taken = [
        ipaddress.ip_network(realnode_network.POD_CIDR),
        ipaddress.ip_network(realnode_network.LINK_CIDR),
        ipaddress.ip_network(f"{realnode_network.API_SERVER_IP}/32"),
    ]
    seen: list[ipaddress.IPv4Network] = []
    for slot in range(MAX_SLOTS):
        plan = EngineNetwork("pando-1-", slot)
        pool = ipaddress.ip_network(plan.address_pool.split(",")[0].removeprefix("base="))
        ranges = [
            ipaddress.ip_interface(plan.bip).network,
            pool,
            ipaddress.ip_network(plan.link_cidr),
        ]
        for block in ranges:
            assert isinstance(block, ipaddress.IPv4Network)
            assert block.subnet_of(benchmarking), block
            assert not any(block.overlaps(other) for other in taken + seen), block
            seen.append(block)
    stand_ins = Outside()
    for address in (*stand_ins.internet, stand_ins.dns):
        assert ipaddress.ip_address(address) in ipaddress.ip_network("203.0.113.0/24")
    assert ipaddress.ip_address(stand_ins.metadata).is_link_local
    assert ipaddress.ip_address(stand_ins.private).is_private


def test_the_wrapper_mounts_each_cgroup_hierarchy_again() -> None:
    lines = [
        "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755",
        "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct",
        "40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd",
        "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw",
        "50 23 0:40 / /proc rw - proc proc rw",
    ]
    mountinfo = "\n".join(lines)
    assert cgroup_mounts(mountinfo) == [
        ("cgroup", "cpu,cpuacct", "/sys/fs/cgroup/cpu,cpuacct"),
        ("cgroup", "none,name=systemd", "/sys/fs/cgroup/systemd"),
        ("cgroup2", "", "/sys/fs/cgroup/unified"),
    ]


def _query(name: str, qtype: int = 1) -> bytes:
    labels = b"".join(bytes([len(p)]) + p.encode() for p in name.split("."))
    return (
        b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00"
        + labels
        + b"\x00"
        + bytes([0, qtype, 0, 1])
    )


def test_the_stand_in_dns_answers_its_names_and_nxdomain_for_the_rest() -> None:
    hosts = {"allowed.pando.test": "203.0.113.10"}
    reply, name, qtype = dns.answer(_query("Allowed.Pando.Test"), hosts)
    assert (name, qtype) == ("allowed.pando.test", 1)
    assert reply[:2] == b"\x12\x34"
    assert reply[3] & 0x0F == 0  # NOERROR
    assert reply[6:8] == b"\x00\x01"  # one answer
    assert reply[-4:] == bytes([203, 0, 113, 10])
    reply, _, _ = dns.answer(_query("example.com"), hosts)
    assert reply[3] & 0x0F == 3  # NXDOMAIN
    assert reply[6:8] == b"\x00\x00"
    reply, _, _ = dns.answer(_query("allowed.pando.test", qtype=28), hosts)
    assert (reply[3] & 0x0F, reply[6:8]) == (0, b"\x00\x00")  # AAAA: no data
    with pytest.raises(ValueError, match="shorter"):
        dns.answer(b"\x00", hosts)


# ---------------------------------------------------------------------- the session's engine


def test_the_engine_answers_ping_with_its_api_version(docker_engine: DockerEngine) -> None:
    version = docker_engine.api.ping()
    assert version is not None
    assert tuple(int(p) for p in version.split(".")) >= (1, 41)
    assert docker_engine.api.version()["ApiVersion"] == version
    assert docker_engine.base_url == f"unix://{docker_engine.socket_path}"
    assert docker_engine.socket_path.is_socket()
    assert netns.exists(docker_engine.netns)


def test_a_container_from_the_local_image_runs_and_prints(docker_engine: DockerEngine) -> None:
    assert BUSYBOX in docker_engine.images
    assert BUSYBOX in docker_engine.api.image_names()
    token = _unique("hello")
    proc = docker_engine.run("echo", token)
    assert (proc.returncode, proc.stdout) == (0, f"{token}\n"), proc.stderr


def test_a_built_image_loads_and_a_saved_one_loads_back(
    docker_engine: DockerEngine, tmp_path: Path
) -> None:
    name = f"pando.test/{_unique('custom')}:1"
    built = build_image(
        name, files={"/etc/pando-test": b"built offline\n"}, cmd=("cat", "/etc/pando-test"),
        directory=tmp_path,
    )  # fmt: skip
    assert docker_engine.load_image(built.archive) == [name]
    try:
        assert docker_engine.run(image=name).stdout == "built offline\n"
        saved = docker_engine.save_image(name, tmp_path / "saved.tar")
        docker_engine.docker("rmi", name)
        assert name not in docker_engine.api.image_names()
        assert docker_engine.load_image(saved) == [name]
        assert docker_engine.run(image=name).stdout == "built offline\n"
    finally:
        docker_engine.docker("rmi", "--force", name, check=False)


@contextlib.contextmanager
def _web_server(engine: DockerEngine, page: str, *aliases: str) -> Iterator[tuple[str, str]]:
    """A user network and a busybox httpd on it (port 8080) serving ``page``; their names."""
    net, server = _unique("pando-net"), _unique("pando-web")
    engine.docker("network", "create", net)
    try:
        alias_options = [option for a in aliases for option in ("--network-alias", a)]
        engine.docker(
            "run", "--detach", "--name", server, "--network", net, *alias_options,
            "--pull", "never", BUSYBOX, "sh", "-c",
            f"mkdir /www && echo {page} > /www/index.html && exec httpd -f -p 8080 -h /www",
        )  # fmt: skip
        yield net, server
    finally:
        engine.docker("rm", "--force", server, check=False)
        engine.docker("network", "rm", net, check=False)


def test_containers_on_a_user_network_resolve_each_other_by_alias(
    docker_engine: DockerEngine,
) -> None:
    with _web_server(docker_engine, "alias-ok", "web") as (net, _):
        # The server may take a moment to listen: the client polls it (the real condition).
        probe = (
            "for i in $(seq 100); do "
            "printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 2 web 8080 && exit 0; sleep 0.1; "
            "done; exit 1"
        )
        proc = docker_engine.run("sh", "-c", probe, options=("--network", net))
        assert proc.returncode == 0, proc.stderr
        assert "alias-ok" in proc.stdout
    # On the default bridge the alias means nothing.
    assert docker_engine.run("nslookup", "web").returncode != 0


def test_a_bridge_container_reaches_the_stand_ins_and_the_namespace_nothing_else(
    docker_engine: DockerEngine,
) -> None:
    stand_ins = docker_engine.outside
    for address in stand_ins.addresses:
        reach = docker_engine.reaches(address)
        assert reach, f"{address}: {reach.output}"
        assert PAGE in reach.output
    # Nothing else: neither namespace has a default route, and no route leads anywhere but
    # to the stand-ins (a route lookup sends nothing; 192.0.2.1 stands for any real address).
    for space in (docker_engine.netns, docker_engine.outside_netns):
        assert netns.ip("route", "show", "default", netns=space).strip() == ""
        lookup = subprocess.run(
            ["ip", "-n", space, "route", "get", "192.0.2.1"], capture_output=True, text=True,
            check=False,
        )  # fmt: skip
        assert lookup.returncode != 0
        assert "unreachable" in lookup.stderr
    routes = netns.ip("-4", "route", "show", netns=docker_engine.netns).splitlines()
    allowed = [ipaddress.ip_network(docker_engine.network.link_cidr)]
    allowed += [ipaddress.ip_network(f"{a}/32") for a in (*stand_ins.addresses, stand_ins.dns)]
    for line in routes:
        destination = ipaddress.ip_network(line.split()[0])
        inside = destination.subnet_of(ipaddress.ip_network("198.18.0.0/15"))
        # A network the adapter's tests made on this shared engine (their pool is the
        # adapter's default, 10.231.0.0/16) is a link of a bridge inside the namespace.
        on_a_bridge = " scope link " in f"{line} " and " dev br-" in line
        assert inside or on_a_bridge or destination in allowed, line


def test_containers_resolve_stand_in_names_and_every_question_is_logged(
    docker_engine: DockerEngine,
) -> None:
    unknown = f"{_unique('nowhere')}.example.com"
    proc = docker_engine.run("sh", "-c", f"nslookup allowed.pando.test; nslookup {unknown}")
    assert "203.0.113.10" in proc.stdout, proc.stdout + proc.stderr
    asked = {entry["name"] for entry in docker_engine.dns_queries()}
    assert {"allowed.pando.test", unknown} <= asked


def test_the_host_reaches_a_containers_address_through_the_engine_namespace(
    docker_engine: DockerEngine,
) -> None:
    with _web_server(docker_engine, "direct") as (net, server):
        template = f'{{{{(index .NetworkSettings.Networks "{net}").IPAddress}}}}'
        address = docker_engine.docker("inspect", "--format", template, server).stdout.strip()
        assert ipaddress.ip_address(address)

        def fetch() -> str:
            try:
                sock = docker_engine.connect(address, 8080, timeout=2.0)
            except OSError:
                return ""
            with sock:
                sock.sendall(b"GET / HTTP/1.0\r\n\r\n")
                return b"".join(iter(lambda: sock.recv(65536), b"")).decode()

        assert wait_until(lambda: "direct" in fetch(), timeout=30.0), docker_engine.logs()


def test_an_internal_network_reaches_no_stand_in(docker_engine: DockerEngine) -> None:
    net = _unique("pando-internal")
    docker_engine.docker("network", "create", "--internal", net)
    try:
        target = docker_engine.outside.internet[0]
        blocked = docker_engine.reaches(target, network=net, timeout=2)  # dropped: waits
        assert not blocked, blocked.output
        assert docker_engine.reaches(target), "control: the stand-in answers from the bridge"
    finally:
        docker_engine.docker("network", "rm", net, check=False)


def test_a_docker_user_rule_blocks_the_metadata_address_while_the_internet_answers(
    docker_engine: DockerEngine,
) -> None:
    """What an egress test does: block one stand-in, show another (the control) answers."""
    metadata, control = docker_engine.outside.metadata, docker_engine.outside.internet[0]
    rule = ["DOCKER-USER", "-d", f"{metadata}/32", "-j", "REJECT"]
    added = docker_engine.run_in_netns(["iptables", "-I", *rule])
    assert added.returncode == 0, added.stderr
    try:
        blocked = docker_engine.reaches(metadata)
        assert not blocked, blocked.output
        assert docker_engine.reaches(control)
    finally:
        docker_engine.run_in_netns(["iptables", "-D", *rule])
    assert docker_engine.reaches(metadata), "the rule gone, the metadata stand-in answers"


def test_the_daemon_restarts_on_the_same_data(docker_engine: DockerEngine) -> None:
    volume = _unique("pando-vol")
    docker_engine.docker("volume", "create", volume)
    try:
        docker_engine.restart()
        assert docker_engine.api.ping() is not None
        assert volume in docker_engine.docker("volume", "ls", "-q").stdout.split()
        assert docker_engine.run("true").returncode == 0
        docker_engine.kill()
        assert docker_engine.api.ping() is None
        assert netns.pids(docker_engine.netns) == []
        docker_engine.start()
        assert BUSYBOX in docker_engine.api.image_names()
    finally:
        docker_engine.start()
        docker_engine.docker("volume", "rm", volume, check=False)


def test_reset_removes_what_tests_made_and_keeps_the_harness_images(
    docker_engine: DockerEngine,
) -> None:
    name = _unique("pando-left")
    docker_engine.docker("network", "create", name)
    docker_engine.docker("volume", "create", name)
    docker_engine.docker("create", "--name", name, "--network", name, BUSYBOX, "true")
    docker_engine.docker("tag", BUSYBOX, f"pando.test/{name}:1")
    docker_engine.reset()
    assert docker_engine.docker("ps", "--all", "--quiet").stdout == ""
    assert name not in docker_engine.docker("network", "ls").stdout
    assert docker_engine.docker("volume", "ls", "--quiet").stdout == ""
    assert docker_engine.api.image_names() == sorted(docker_engine.images)


def test_the_engine_pulls_from_the_local_registry_with_its_password(
    docker_engine: DockerEngine, image_registry: LocalRegistry
) -> None:
    image_registry.push(busybox_image().archive, "pando/busybox", "1")
    address = docker_engine.expose_host_port(image_registry.port)
    docker_engine.trust_registry(address, image_registry.ca_cert)
    reference = f"{address}/pando/busybox:1"
    # Without the password the pull fails (dockerd holds 127.0.0.0/8 insecure: after the
    # refusal over TLS it tries plain HTTP, whose error is the one it reports).
    denied = docker_engine.docker("pull", reference, check=False)
    assert denied.returncode != 0
    assert reference not in docker_engine.api.image_names()
    docker_engine.docker(
        "login", "--username", image_registry.username, "--password-stdin", address,
        stdin=image_registry.password,
    )  # fmt: skip
    try:
        docker_engine.docker("pull", reference)
        assert docker_engine.run("echo", "pulled", image=reference).stdout == "pulled\n"
    finally:
        docker_engine.docker("logout", address, check=False)
        docker_engine.docker("rmi", "--force", reference, check=False)


def test_a_daemon_left_down_by_a_test_is_started_at_its_teardown(
    docker_engine: DockerEngine, request: pytest.FixtureRequest
) -> None:
    docker_engine.kill()
    assert not docker_engine.daemon_running
    assert docker_engine.api.ping() is None
    pytest_plugin.pytest_runtest_teardown(request.node)
    assert docker_engine.daemon_running
    assert docker_engine.api.ping() is not None


# ---------------------------------------------------------------------- engines of their own


def _host_state(work_dir: Path) -> dict[str, object]:
    """What an engine could leave behind in the host's namespace."""
    iptables = {
        table: subprocess.run(
            ["iptables", "-t", table, "-S"], capture_output=True, text=True, check=False
        ).stdout
        for table in ("filter", "nat")
    }
    mounts = [
        line
        for line in Path("/proc/self/mountinfo").read_text().splitlines()
        if str(work_dir) in line or "pando-docker" in line  # the wrapper's exec root
    ]
    processes = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmdline = (proc / "cmdline").read_bytes()
            except OSError:
                continue
            if str(work_dir).encode() in cmdline:
                processes.append(proc.name)
    return {
        "iptables": iptables,
        "links": netns.ip("-o", "link", "show").count("\n"),
        "mounts": mounts,
        "processes": processes,
        "sysctls": {key: host.read_sysctl(key) for key in records.HOST_SYSCTLS},
        "ip_forward": host.read_sysctl("net.ipv4.ip_forward"),
        "bridge_nf": host.read_sysctl("net.bridge.bridge-nf-call-iptables"),
    }


def test_a_second_engine_runs_beside_and_its_stop_leaves_nothing(
    docker_engine: DockerEngine, tmp_path: Path
) -> None:
    work_dir = tmp_path / "engine"
    before = _host_state(work_dir)
    engine = DockerEngine(work_dir)
    try:
        engine.open()
        assert engine.netns != docker_engine.netns
        assert engine.socket_path != docker_engine.socket_path
        assert engine.network.bip != docker_engine.network.bip
        assert engine.run("echo", "second").stdout == "second\n"
        assert docker_engine.run("echo", "first").stdout == "first\n"
        assert engine.reaches(engine.outside.metadata)
        # A container running at the stop: its processes, shim and layers must go too.
        engine.docker("run", "--detach", "--pull", "never", BUSYBOX, "sleep", "600")
        assert host.cgroup_dirs(engine.cgroup_parent)[0].exists()
        # While it runs, the host's namespace sees none of its mounts or firewall rules.
        running = _host_state(work_dir)
        assert running["mounts"] == before["mounts"]
        assert running["iptables"] == before["iptables"]
        assert running["ip_forward"] == before["ip_forward"]
    finally:
        engine.close()
    assert _host_state(work_dir) == before
    assert not netns.exists(engine.netns)
    assert not netns.exists(engine.outside_netns)
    assert not any(d.exists() for d in host.cgroup_dirs(engine.cgroup_parent))
    assert not (records.RECORDS_DIR / f"{engine.netns}.json").exists()
    assert docker_engine.api.ping() is not None, "the session's engine runs on"


def test_a_crashed_runs_leftovers_are_cleaned_at_the_next_start(
    docker_engine: DockerEngine, tmp_path: Path
) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    rec = records.EngineRecord(
        pid=dead.pid,
        started="0",
        prefix=f"pando-{dead.pid}-",
        slot=0,
        work_dir=str(tmp_path),
        cgroup_parent=f"/pando-{dead.pid}-docker0",
        sysctls={key: host.read_sysctl(key) for key in records.HOST_SYSCTLS},
    )
    rec.network.create(Outside())
    host.make_cgroup_root(rec.cgroup_parent)
    # A process left in the namespace, as a killed run's containerd would be, and one in a
    # cgroup below the engine's parent, as a container (in a namespace of its own) would be.
    leftover = subprocess.Popen(netns.command(rec.network.engine, ["sleep", "600"]))
    container = subprocess.Popen(["sleep", "600"])
    try:
        for hierarchy in host.cgroup_dirs(rec.cgroup_parent):
            (hierarchy / "ctr").mkdir()
            if hierarchy.parent.name == "cpuset":
                for key in ("cpuset.cpus", "cpuset.mems"):
                    (hierarchy / "ctr" / key).write_text((hierarchy / key).read_text())
            (hierarchy / "ctr" / "cgroup.procs").write_text(str(container.pid))
        rec.save()
        (tmp_path / "data").mkdir()
        assert rec.network.engine in records.clean_leftovers()
        assert leftover.wait(timeout=10) != 0
        assert container.wait(timeout=10) != 0
        assert not rec.network.exists()
        assert not any(d.exists() for d in host.cgroup_dirs(rec.cgroup_parent))
        assert not rec.path.exists()
        assert not (tmp_path / "data").exists()
        # The live session's engine is not a leftover.
        assert docker_engine.api.ping() is not None
    finally:
        for process in (leftover, container):
            if process.poll() is None:
                process.kill()
        records.undo(rec)


@pytest.mark.parametrize(
    ("env", "outcome"),
    [
        ({}, pytest.skip.Exception),
        ({"PANDO_DOCKER": "1"}, pytest.fail.Exception),
        ({"PANDO_REAL_NODES": "1"}, pytest.fail.Exception),
    ],
)
def test_an_unfit_machine_skips_unless_the_engine_is_required(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], outcome: type[BaseException]
) -> None:
    for key in (pytest_plugin.ENV_DOCKER, pytest_plugin.ENV_REAL_NODES):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(outcome, match="it lacks root, the command dockerd"):
        pytest_plugin.refuse(["root", "the command dockerd"])
