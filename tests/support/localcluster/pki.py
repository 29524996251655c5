"""Certificates, keys and static tokens for the local cluster, made with the openssl CLI.

One CA signs the apiserver's, kwok's, metrics-server's and the image registry's serving
certificates, the admin client certificate (group ``system:masters``) and the restricted user's
client certificate (no groups). A second CA, trusted only for request headers, signs the client
certificate with which the apiserver's aggregation layer proxies requests to metrics-server: a
certificate of the main CA must never be able to assert another user's identity in headers.
Keys are ECDSA P-256, which is quick to generate and accepted by every component.
"""

from __future__ import annotations

import secrets
import shutil
import ssl
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .errors import PkiError

CA_DAYS = "3650"
_EC_KEY = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
APISERVER_SANS = (
    "IP:127.0.0.1",
    "IP:10.96.0.1",
    "DNS:localhost",
    "DNS:kubernetes",
    "DNS:kubernetes.default",
    "DNS:kubernetes.default.svc",
    "DNS:kubernetes.default.svc.cluster.local",
)
METRICS_SERVER_SANS = ("IP:127.0.0.1", "DNS:localhost", "DNS:metrics-server.kube-system.svc")
"""The aggregation layer checks the name ``<service>.<namespace>.svc`` of its APIService."""
REGISTRY_SANS = ("IP:127.0.0.1", "DNS:localhost")
"""The image registry listens on loopback (see :mod:`localcluster.registry`)."""
FRONT_PROXY_CLIENT = "front-proxy-client"


@dataclass(frozen=True)
class CertKey:
    """A PEM certificate and its PEM private key."""

    cert: Path
    key: Path


@dataclass(frozen=True)
class Pki:
    """Every credential file that the components and kubeconfigs use."""

    directory: Path
    ca: CertKey
    apiserver: CertKey
    kwok: CertKey
    metrics_server: CertKey
    registry: CertKey
    front_proxy_ca: CertKey
    front_proxy_client: CertKey
    admin: CertKey
    restricted: CertKey
    restricted_user: str
    sa_key: Path
    sa_pub: Path
    tokens_csv: Path
    admin_token: str


def _openssl() -> str:
    found = shutil.which("openssl")
    if found is None:
        raise PkiError("the 'openssl' command is needed to make the test cluster's certificates")
    return found


def _run(args: list[str], cwd: Path) -> None:
    proc = subprocess.run(args, cwd=cwd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise PkiError(f"{' '.join(args)} failed:\n{proc.stderr.strip()}")


def _make_ca(openssl: str, d: Path, name: str = "ca") -> CertKey:
    ca = CertKey(d / f"{name}.crt", d / f"{name}.key")
    _run(
        [
            *(openssl, "req", "-x509", *_EC_KEY, "-keyout", str(ca.key), "-out", str(ca.cert)),
            *("-days", CA_DAYS, "-subj", f"/CN=pando-localcluster-{name}"),
            *("-addext", "basicConstraints=critical,CA:TRUE"),
            *("-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature"),
        ],
        d,
    )
    return ca


def _make_leaf(
    openssl: str,
    d: Path,
    ca: CertKey,
    name: str,
    *,
    subject: str,
    usage: str,
    sans: tuple[str, ...] = (),
    days: str = CA_DAYS,
) -> CertKey:
    """Make ``name.crt``/``name.key`` signed by ``ca``; ``usage`` is serverAuth or clientAuth
    (``days`` of ``-1``: valid from now, expired since yesterday)."""
    leaf = CertKey(d / f"{name}.crt", d / f"{name}.key")
    csr = d / f"{name}.csr"
    ext = d / f"{name}.ext"
    lines = [
        "basicConstraints=critical,CA:FALSE",
        "keyUsage=critical,digitalSignature,keyEncipherment",
        f"extendedKeyUsage={usage}",
    ]
    if sans:
        lines.append(f"subjectAltName={','.join(sans)}")
    ext.write_text("\n".join(lines) + "\n")
    _run(
        [
            openssl,
            "req",
            "-new",
            *_EC_KEY,
            "-keyout",
            str(leaf.key),
            "-out",
            str(csr),
            "-subj",
            subject,
        ],
        d,
    )
    _run(
        [
            *(openssl, "x509", "-req", "-in", str(csr), "-CA", str(ca.cert), "-CAkey", str(ca.key)),
            *("-set_serial", "0x" + secrets.token_hex(16), "-days", days),
            *("-extfile", str(ext), "-out", str(leaf.cert)),
        ],
        d,
    )
    csr.unlink()
    ext.unlink()
    return leaf


def make_pki(directory: Path, restricted_user: str = "alice") -> Pki:
    """Create the PKI in ``directory`` (created if needed) and return its paths."""
    openssl = _openssl()
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700)
    ca = _make_ca(openssl, directory)

    def server(name: str, subject: str, sans: tuple[str, ...]) -> CertKey:
        return _make_leaf(
            openssl, directory, ca, name, subject=subject, usage="serverAuth", sans=sans
        )

    def client(name: str, subject: str) -> CertKey:
        return _make_leaf(openssl, directory, ca, name, subject=subject, usage="clientAuth")

    apiserver = server("apiserver", "/CN=kube-apiserver", APISERVER_SANS)
    kwok = server("kwok", "/CN=kwok", ("IP:127.0.0.1", "DNS:localhost"))
    metrics_server = server("metrics-server", "/CN=metrics-server", METRICS_SERVER_SANS)
    registry = server("registry", "/CN=pando-registry", REGISTRY_SANS)
    front_proxy_ca = _make_ca(openssl, directory, "front-proxy-ca")
    front_proxy_client = _make_leaf(
        openssl,
        directory,
        front_proxy_ca,
        FRONT_PROXY_CLIENT,
        subject=f"/CN={FRONT_PROXY_CLIENT}",
        usage="clientAuth",
    )
    admin = client("admin", "/O=system:masters/CN=pando-admin")
    restricted = client("restricted", f"/CN={restricted_user}")
    sa_key = directory / "sa.key"
    sa_pub = directory / "sa.pub"
    _run(
        [openssl, "ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", str(sa_key)],
        directory,
    )
    _run([openssl, "ec", "-in", str(sa_key), "-pubout", "-out", str(sa_pub)], directory)
    admin_token = secrets.token_hex(24)
    tokens_csv = directory / "tokens.csv"
    tokens_csv.write_text(f'{admin_token},pando-admin-token,1000,"system:masters"\n')
    return Pki(
        directory=directory,
        ca=ca,
        apiserver=apiserver,
        kwok=kwok,
        metrics_server=metrics_server,
        registry=registry,
        front_proxy_ca=front_proxy_ca,
        front_proxy_client=front_proxy_client,
        admin=admin,
        restricted=restricted,
        restricted_user=restricted_user,
        sa_key=sa_key,
        sa_pub=sa_pub,
        tokens_csv=tokens_csv,
        admin_token=admin_token,
    )


def issue_client_cert(pki: Pki, name: str, subject: str) -> CertKey:
    """A client certificate of the main CA for ``subject`` (``/O=group/CN=user``), in the PKI's
    directory as ``name.crt``/``name.key``; for identities made after the cluster's own."""
    return _make_leaf(_openssl(), pki.directory, pki.ca, name, subject=subject, usage="clientAuth")


def make_ca(directory: Path, name: str) -> CertKey:
    """A CA of its own in ``directory`` (``name.crt``/``name.key``), for a component whose
    certificates must not be trusted by the cluster."""
    return _make_ca(_openssl(), directory, name)


def issue_server_cert(
    directory: Path, ca: CertKey, name: str, subject: str, sans: tuple[str, ...]
) -> CertKey:
    """A serving certificate signed by ``ca`` for ``sans``, in ``directory`` as ``name.*``."""
    return _make_leaf(
        _openssl(), directory, ca, name, subject=subject, usage="serverAuth", sans=sans
    )


def issue_leaf(
    directory: Path,
    ca: CertKey,
    name: str,
    *,
    subject: str,
    usage: str,
    sans: tuple[str, ...] = (),
    days: int = int(CA_DAYS),
) -> CertKey:
    """A certificate signed by ``ca`` (``usage``: serverAuth or clientAuth) for ``days``
    (-1: already expired), in ``directory`` as ``name.*``."""
    return _make_leaf(
        _openssl(), directory, ca, name, subject=subject, usage=usage, sans=sans, days=str(days)
    )


def issue_dated_leaf(
    directory: Path,
    ca: CertKey,
    name: str,
    *,
    subject: str,
    usage: str,
    not_before: str,
    not_after: str,
    sans: tuple[str, ...] = (),
) -> CertKey:
    """A certificate of ``ca`` valid from ``not_before`` to ``not_after`` (``YYYYMMDDHHMMSSZ``:
    either may lie ahead, for a certificate not valid yet), made with ``openssl ca`` (this
    OpenSSL's ``x509 -req`` takes no start date), in ``directory`` as ``name.*``."""
    openssl = _openssl()
    work = directory / f"{name}.ca"
    work.mkdir(parents=True, exist_ok=True)
    (work / "index.txt").write_text("")
    (work / "serial").write_text(secrets.token_hex(16) + "\n")
    extensions = [
        "basicConstraints=critical,CA:FALSE",
        "keyUsage=critical,digitalSignature,keyEncipherment",
        f"extendedKeyUsage={usage}",
    ]
    if sans:
        extensions.append(f"subjectAltName={','.join(sans)}")
    config = work / "ca.cnf"
    config.write_text(
        "\n".join(
            [
                "[ca]",
                "default_ca = local",
                "[local]",
                f"database = {work / 'index.txt'}",
                f"serial = {work / 'serial'}",
                f"new_certs_dir = {work}",
                "default_md = sha256",
                "policy = anything",
                "unique_subject = no",
                "copy_extensions = none",
                "[anything]",
                "commonName = supplied",
                "[leaf]",
                *extensions,
            ]
        )
        + "\n"
    )
    leaf = CertKey(directory / f"{name}.crt", directory / f"{name}.key")
    csr = work / "leaf.csr"
    _run(
        [openssl, "req", "-new", *_EC_KEY, "-keyout", str(leaf.key), "-out", str(csr),
         "-subj", subject],
        directory,
    )  # fmt: skip
    _run(
        [openssl, "ca", "-batch", "-notext", "-config", str(config), "-extensions", "leaf",
         "-cert", str(ca.cert), "-keyfile", str(ca.key), "-in", str(csr), "-out", str(leaf.cert),
         "-startdate", not_before, "-enddate", not_after],
        directory,
    )  # fmt: skip
    shutil.rmtree(work)
    return leaf


@dataclass(frozen=True)
class ServerTls:
    """A server's TLS files: a CA of its own, the server's certificate, and a client's.

    The serving certificate (for 127.0.0.1) is issued for client authentication too: etcd
    3.4's HTTP gateway dials the server's own gRPC port with it. The client's certificate
    names an organization only, no CommonName: etcd's gateway refuses one that names a
    CommonName while its authentication is on.
    """

    ca: CertKey
    server: CertKey
    client: CertKey

    @classmethod
    def make(cls, directory: Path, name: str) -> ServerTls:
        """Issue the three in ``directory``, named ``<name>-ca``, ``-server`` and ``-client``."""
        ca = make_ca(directory, f"{name}-ca")
        server = issue_leaf(
            directory,
            ca,
            f"{name}-server",
            subject=f"/CN={name}",
            usage="serverAuth,clientAuth",
            sans=("IP:127.0.0.1",),
        )
        client = issue_leaf(directory, ca, f"{name}-client", subject="/O=pando", usage="clientAuth")
        return cls(ca, server, client)

    def context(self) -> ssl.SSLContext:
        """A client's context: the CA trusted, the client's certificate presented."""
        context = ssl.create_default_context(cafile=str(self.ca.cert))
        context.load_cert_chain(str(self.client.cert), str(self.client.key))
        return context
