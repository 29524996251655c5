"""What adapters run inside a helper container, and how they read its output.

A volume restore and a trial's port observer are the same on every container runtime: a
shell script in a small helper (busybox is enough) and a parser of what it prints. They are
here so each adapter runs the same, tested script.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping

from .._contract._plans import Port, PortProtocol

__all__ = [
    "RESTORE_SCRIPT",
    "SOCKET_TABLES",
    "SOCKET_TABLES_SCRIPT",
    "listening_ports",
    "split_socket_tables",
]

_STAGING = ".pando-restore"

RESTORE_SCRIPT = f"""set -e
mkdir -p "$1"
cd "$1"
rm -rf {_STAGING}
mkdir {_STAGING}
if ! tar -xf - -C {_STAGING}; then
  rm -rf {_STAGING}; echo "not a valid tar archive" >&2; exit 65
fi
for f in ./* ./.[!.]* ./..?*; do
  if [ -e "$f" ] || [ -L "$f" ]; then [ "$f" = ./{_STAGING} ] || rm -rf -- "$f"; fi
done
for f in {_STAGING}/* {_STAGING}/.[!.]* {_STAGING}/..?*; do
  if [ -e "$f" ] || [ -L "$f" ]; then mv -- "$f" .; fi
done
rmdir {_STAGING}
"""
"""Replace the files of the directory ``$1`` with the tar archive on stdin, in place.

Run as ``sh -c RESTORE_SCRIPT sh <directory>``. It extracts into a staging directory first,
so a bad archive changes nothing (exit 65, "not a valid tar archive" on stderr), then empties
the directory and moves the new files in.
"""

SOCKET_TABLES = ("/proc/net/tcp", "/proc/net/tcp6", "/proc/net/udp", "/proc/net/udp6")
"""The kernel's socket tables of a network namespace, as a process inside it reads them."""

SOCKET_TABLES_SCRIPT = (
    "for t in " + " ".join(SOCKET_TABLES) + '; do echo "==> $t"; cat "$t" 2>/dev/null; done'
)
"""Print each socket table after a ``==> <path>`` line (read by :func:`split_socket_tables`)."""

_TCP_LISTEN, _UDP_UNCONNECTED = "0A", "07"


def _address(hex_address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    raw = bytes.fromhex(hex_address)
    # The kernel prints each 32-bit word in host (little-endian) order.
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    if len(words) == 4:  # noqa: PLR2004 - IPv4
        return ipaddress.IPv4Address(words)
    return ipaddress.IPv6Address(words)


def split_socket_tables(output: str) -> dict[PortProtocol, str]:
    """The TCP and UDP tables out of what :data:`SOCKET_TABLES_SCRIPT` printed."""
    tables = {PortProtocol.TCP: "", PortProtocol.UDP: ""}
    current: PortProtocol | None = None
    for line in output.splitlines():
        if line.startswith("==> "):
            current = PortProtocol.UDP if "udp" in line else PortProtocol.TCP
            continue
        if current is not None:
            tables[current] += line + "\n"
    return tables


def listening_ports(tables: Mapping[PortProtocol, str]) -> tuple[set[Port], set[Port]]:
    """Ports listened on, from ``/proc/net`` socket tables: (routable, loopback only).

    A TCP socket in ``LISTEN`` or an unconnected UDP socket is a port listened on; one bound
    to a loopback address (an IPv4-mapped one included) is reported apart, unless the same
    port is also listened on a routable address.
    """
    routable: set[Port] = set()
    loopback: set[Port] = set()
    for protocol, text in tables.items():
        wanted = _TCP_LISTEN if protocol is PortProtocol.TCP else _UDP_UNCONNECTED
        for line in text.splitlines():
            fields = line.split()
            if len(fields) < 4 or ":" not in fields[1] or fields[3] != wanted:  # noqa: PLR2004
                continue
            hex_ip, _, hex_port = fields[1].partition(":")
            try:
                address = _address(hex_ip)
                port = Port(int(hex_port, 16), protocol)
            except ValueError:
                continue
            mapped = getattr(address, "ipv4_mapped", None)
            is_loopback = address.is_loopback or bool(mapped and mapped.is_loopback)
            (loopback if is_loopback else routable).add(port)
    return routable, loopback - routable
