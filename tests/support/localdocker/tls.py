"""The engine served over TLS: a CA of its own, dockerd's certificate, a client's, and the flags.

dockerd keeps its unix socket and listens besides on ``127.0.0.1:2376`` of the engine's
namespace, with ``--tlsverify``: every client must present a certificate of the engine's CA.
The serving certificate names ``127.0.0.1`` alone (an address, no name), so a client that
dials it as ``localhost`` sees a name mismatch. Keys are ECDSA P-256, files mode 0600 in a
0700 folder. Nothing is trusted system-wide: a client names the CA file itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from localcluster.pki import CertKey, issue_leaf, make_ca

TLS_PORT = 2376
"""dockerd's TLS port (Docker's own), on the engine namespace's loopback."""
SERVER_SANS = ("IP:127.0.0.1",)


@dataclass(frozen=True)
class EngineTls:
    """An engine's TLS material (all files under ``directory``)."""

    directory: Path
    ca: CertKey
    server: CertKey
    client: CertKey
    port: int = TLS_PORT

    def dockerd_flags(self) -> list[str]:
        """What dockerd adds to its argv to serve TLS besides its unix socket."""
        return [
            f"--host=tcp://127.0.0.1:{self.port}",
            "--tlsverify",
            f"--tlscacert={self.ca.cert}",
            f"--tlscert={self.server.cert}",
            f"--tlskey={self.server.key}",
        ]

    def client_cert(self, name: str, *, days: int = 365) -> CertKey:
        """Another client certificate of the engine's CA (``days=-1``: already expired)."""
        return issue_leaf(
            self.directory, self.ca, name, subject=f"/CN={name}", usage="clientAuth", days=days
        )


def make_engine_tls(directory: Path) -> EngineTls:
    """Make the engine's CA, its serving certificate and one client certificate."""
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700)
    ca = make_ca(directory, "engine-ca")
    server = issue_leaf(
        directory, ca, "dockerd", subject="/CN=dockerd", usage="serverAuth", sans=SERVER_SANS
    )
    client = issue_leaf(directory, ca, "client", subject="/CN=pando-client", usage="clientAuth")
    for made in (ca, server, client):
        made.key.chmod(0o600)
    return EngineTls(directory=directory, ca=ca, server=server, client=client)
