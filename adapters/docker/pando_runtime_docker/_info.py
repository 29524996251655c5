"""What the Docker adapter says about itself: its settings and its registry entry.

This module is the target of the ``pando_runtime.adapters`` entry point, so it imports
nothing heavy (attrs and the core only, never httpx): listing adapters must not pay for
the HTTP client.
"""

from __future__ import annotations

import enum

import attrs

from pando_runtime import AdapterInfo
from pando_runtime.plugin import LeaseStoreSetting, setting

__all__ = [
    "ADAPTER",
    "DEFAULT_HOST",
    "DESCRIPTION",
    "DockerConfig",
    "UpstreamMode",
]

DESCRIPTION = "Runs each app's workloads as labelled containers on a bridge network of its own."

DEFAULT_HOST = "unix:///var/run/docker.sock"


class UpstreamMode(enum.StrEnum):
    """How the host reaches a workload's port (see ``docs/docker.md``).

    ``address``: the host shares the daemon's network namespace and dials the container's
    address on its bundle network. ``proxy_container``: the host runs in a container
    (``proxy_container``) that the adapter joins to every bundle network, and dials the
    workload's alias there. ``agent``: the host dials the engine's agent (a container the
    adapter runs, joined to every bundle network, one published port, mutual TLS), which
    relays to the workload: ``Upstream.dial`` says how.
    """

    ADDRESS = "address"
    PROXY_CONTAINER = "proxy_container"
    AGENT = "agent"


@attrs.frozen(kw_only=True)
class DockerConfig:
    """Settings of the Docker adapter (all optional)."""

    # -- which engine, and how it is reached (docs/docker.md, Remote engines) --------------
    host: str | None = setting(
        default=None,
        help="The engine: unix:///path/to/docker.sock, tcp://host[:port] (TLS; plain HTTP "
        "only to loopback or with allow_plain_tcp) or ssh://[user@]host[:port]. Unset: the "
        "Docker CLI's order ($DOCKER_HOST, $DOCKER_CONTEXT, the current context), else "
        "unix:///var/run/docker.sock.",
    )
    context: str | None = setting(
        default=None,
        help="A Docker context by name (its endpoint and TLS material, as 'docker context "
        "create' stores them); instead of host.",
    )
    docker_config: str | None = setting(
        default=None,
        help="The Docker CLI's configuration folder (contexts, config.json; unset: "
        "$DOCKER_CONFIG, else ~/.docker).",
    )
    tls_ca: str | None = setting(
        default=None, help="CA file the tcp:// engine's certificate must be signed by."
    )
    tls_cert: str | None = setting(default=None, help="Client certificate file (tcp://).")
    tls_key: str | None = setting(
        default=None, help="The client certificate's private key file (mode 0600)."
    )
    tls_ca_pem: str | None = setting(default=None, help="The CA as PEM text (instead of tls_ca).")
    tls_cert_pem: str | None = setting(
        default=None, help="The client certificate as PEM text (instead of tls_cert)."
    )
    tls_key_pem: str | None = setting(
        default=None, secret=True, help="The client's private key as PEM text (instead of tls_key)."
    )
    tls_skip_verify: bool = setting(
        default=False,
        help="Do NOT verify the tcp:// engine's certificate (anyone on the path can "
        "impersonate it). Without tls_* settings, Docker's DOCKER_CERT_PATH is read; the server "
        "is verified whatever DOCKER_TLS_VERIFY says.",
    )
    allow_plain_tcp: bool = setting(
        default=False,
        help="Speak plain HTTP to a tcp:// engine that is not on loopback (whoever reaches its "
        "port controls it): only on a network you trust.",
    )
    ssh_host_key: str | None = setting(
        default=None,
        help="The ssh:// host's public key(s), one a line ('ssh-ed25519 AAAA...', as in its "
        "/etc/ssh/ssh_host_ed25519_key.pub). Unset: known_hosts. Never trusted on first use.",
    )
    ssh_known_hosts: str | None = setting(
        default=None, help="known_hosts file to check the ssh:// host in (unset: ssh's own)."
    )
    ssh_identity: str | None = setting(
        default=None,
        help="Private key file to log in with (mode 0600; unset: the agent and ssh's defaults).",
    )
    ssh_identity_pem: str | None = setting(
        default=None,
        secret=True,
        help="The private key as text (kept in a 0700 folder of the adapter's while it runs).",
    )
    ssh_socket: str = setting(
        default="/var/run/docker.sock", help="The engine's socket on the ssh:// host."
    )
    # -- what the adapter makes, and how -------------------------------------------------
    owner: str = setting(
        default="pando",
        help="Owner id written on every container and network the adapter makes; it never "
        "reads, changes or removes anything with another owner (several hosts may share "
        "one daemon under different owners).",
    )
    label_prefix: str = setting(
        default="io.pando",
        help="Prefix of the adapter's labels (<prefix>.owner, <prefix>.bundle, ...).",
    )
    subnet_pool: str = setting(
        default="10.231.0.0/16",
        help="Range the bundle networks' subnets are carved from (one /subnet_prefix each): "
        "the daemon's default pools hold about 30 networks.",
    )
    subnet_prefix: int = setting(
        default=24, minimum=8, maximum=29, help="Prefix length of each bundle network."
    )
    upstream_mode: str = setting(
        default=UpstreamMode.ADDRESS.value,
        help="How upstream() addresses a workload: 'address' (the host shares the daemon's "
        "network namespace), 'proxy_container' (the host runs in proxy_container) or 'agent' "
        "(the host dials the engine's agent, through Upstream.dial).",
    )
    proxy_container: str | None = setting(
        default=None,
        help="Name of the host's own container, joined to every bundle network "
        "(upstream_mode 'proxy_container').",
    )
    agent_image: str | None = setting(
        default=None,
        help="Image of the agent (upstream_mode 'agent'): the static pando-agent binary as "
        "its entrypoint (docs/docker.md, The agent, says how to build it).",
    )
    agent_address: str | None = setting(
        default=None,
        help="The engine's address as the host reaches it, an IP address or a DNS name "
        "(upstream_mode 'agent'): the host dials it, and the agent's certificate names it.",
    )
    agent_port: int = setting(
        default=7443,
        minimum=1,
        maximum=65535,
        help="The port the agent publishes on the engine's host (upstream_mode 'agent').",
    )
    agent_ca: str | None = setting(
        default=None,
        secret=True,
        help="The agent's authority as PEM text: its CA certificate and unencrypted ECDSA "
        "key. Unset: read from agent_ca_file.",
    )
    agent_ca_file: str | None = setting(
        default=None,
        help="A file holding the agent's authority (PEM certificate and key), made (0600, a "
        "new ECDSA P-256 CA of ten years) when absent. Unset: "
        "$XDG_STATE_HOME/pando-runtime/docker-agent/<owner>-ca.pem. Host replicas on "
        "several machines are given the same authority.",
    )
    agent_trusted_cas: str | None = setting(
        default=None,
        help="More CA certificates (PEM) trusted beside the authority, by the agent for "
        "clients and by hosts for the agent: set while moving to a new authority.",
    )
    egress_guard_image: str | None = setting(
        default=None,
        help="An image with sh and iptables (the host's backend: nft or legacy). When set, "
        "the adapter runs it once, in the daemon's network namespace with NET_ADMIN, to "
        "reject traffic from subnet_pool to private, shared and link-local ranges (the "
        "cloud metadata address included) in DOCKER-USER; in upstream_mode 'address' it "
        "also opens only exposed workloads' listed ports to the daemon's namespace and the "
        "edges (private_network). Unset: bundles reach whatever the daemon's host reaches, "
        "and every port is open to it (see docs/docker.md, Networks).",
    )
    egress_gateway_image: str | None = setting(
        default=None,
        help="An image with squid on its PATH (Debian's package, for one). When set, plans "
        "that restrict egress run: their workloads on an internal network, a gateway "
        "container from this image passing only the plan's rules. Unset: such plans are "
        "refused (egress_restriction is not declared).",
    )
    oci_runtime: str | None = setting(
        default=None,
        help="The OCI runtime every app container runs under, by the name the daemon lists "
        "it ('docker info': runc, runsc, kata...). Unset: the daemon's default. runsc, "
        "runsc-*, gvisor* (gVisor) or kata* makes every app sandboxed (isolation_class "
        "'sandboxed'). Checked by the health check and after every create (docs/docker.md, "
        "Sandboxed apps).",
    )
    sandbox_runtime: str | None = setting(
        default=None,
        help="A sandboxing runtime (runsc, runsc-*, gvisor*, kata*) the daemon lists, beside "
        "oci_runtime: plans and trials asking for isolation 'sandboxed' run under it, the "
        "others stay on oci_runtime.",
    )
    log_max_bytes: int = setting(
        default=10 * 1024**2,
        minimum=1024,
        help="Bytes of log kept per container when the plan names no log_bytes "
        "(json-file, split over log_max_files files).",
    )
    log_max_files: int = setting(
        default=2, minimum=1, maximum=100, help="Files the json-file log is split over."
    )
    capacity_cpu_millis: int | None = setting(
        default=None,
        minimum=1,
        help="CPU (millicores) this adapter's apps may take on the engine: less than the "
        "machine keeps the rest for the system or other owners, more overcommits (limits are "
        "ceilings); unset: every CPU the daemon reports.",
    )
    capacity_memory_bytes: int | None = setting(
        default=None,
        minimum=1,
        help="Memory (bytes) this adapter's apps may take on the engine (as "
        "capacity_cpu_millis); unset: all the daemon reports.",
    )
    pids_limit: int = setting(
        default=4096,
        minimum=0,
        help="Most processes (and threads) one container may run (0: no limit).",
    )
    connect_timeout: float = setting(
        default=5.0, exclusive_minimum=0, maximum=86_400, help="Seconds to connect."
    )
    read_timeout: float = setting(
        default=60.0,
        exclusive_minimum=0,
        maximum=86_400,
        help="Seconds to wait for an answer (streams that follow have no read timeout).",
    )
    answer_timeout: float = setting(
        default=5.0,
        exclusive_minimum=0,
        maximum=3600,
        help="Seconds the daemon has to answer the cache's probe (GET /_ping, every "
        "cache_probe_interval) and a placement's room read. Unanswered, the engine counts as "
        "not answering (hung, or cut off by a link that drops packets): every call, those in "
        "flight included, raises AdapterUnavailable at once until it answers again.",
    )
    stop_timeout: int = setting(
        default=2,
        minimum=0,
        maximum=3600,
        help="Seconds a container has to exit after SIGTERM before it is killed.",
    )
    dependency_wait: float = setting(
        default=120.0,
        minimum=0,
        help="Seconds apply waits for a workload's dependencies to run (and be healthy, "
        "when they have a health check) before starting it (0: it does not wait).",
    )
    helper_image: str = setting(
        default="busybox:1.37",
        help="Image of the throwaway helpers that back up and restore volumes (needs sh and "
        "tar; pulled when the daemon lacks it).",
    )
    cache_max_staleness: float = setting(
        default=30.0,
        exclusive_minimum=0,
        help="Seconds the view may go unconfirmed (no event, no probe answered while the "
        "event stream is open) before observe and the room reads raise AdapterUnavailable, "
        "open watches end and the event stream is opened again.",
    )
    cache_probe_interval: float = setting(
        default=5.0,
        exclusive_minimum=0,
        help="Seconds between the cache's probes of the daemon (GET /_ping): 60 / this probes "
        "a minute per engine. Keep it well under cache_max_staleness: an idle view is "
        "confirmed by these probes alone.",
    )

    # -- host replicas (docs/replicas.md) --------------------------------------------------
    lease_store: LeaseStoreSetting | None = setting(
        default=None,
        help="A lease store for several host replicas ({kind: 'postgres' | 'etcd' | 'consul' "
        "| a plugin, settings: the store's own}): the adapter then offers membership over it. "
        "The engine fences nothing: a replica's writes are refused in the replica, never by "
        "the engine. Unset: no membership (one host process per owner).",
    )


ADAPTER = AdapterInfo(
    name="docker",
    description=DESCRIPTION,
    factory="pando_runtime_docker._adapter:DockerAdapter",
    api_version="1.7",
    config_class=DockerConfig,
    distribution="pando-runtime-docker",
)
