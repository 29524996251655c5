"""The stand-in outside world's DNS server: a few names, and a record of every question.

Run in the outside namespace on :data:`~localdocker.network.DNS_IP` port 53 (UDP), the
nameserver the engine's containers are given. It answers ``A`` questions for the names it is
given (the stand-in internet's hosts) and NXDOMAIN for every other name, and appends each
question to a log (one JSON object a line: ``name``, ``type``, ``client``), so a test sees
whether a lookup left the engine (say, from an internal network through Docker's embedded
DNS) without any name reaching a real resolver.

Usage: ``python -m localdocker.dns CONFIG.json`` where the file holds ``listen``
(address), ``port``, ``hosts`` (name -> IPv4 address), ``log`` and ``ready_file`` (paths).
"""

from __future__ import annotations

import ipaddress
import json
import socket
import struct
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

TTL = 5
TYPE_A = 1
_NAMES = {1: "A", 2: "NS", 5: "CNAME", 6: "SOA", 12: "PTR", 15: "MX", 16: "TXT", 28: "AAAA",
          33: "SRV", 65: "HTTPS"}  # fmt: skip


def parse_question(packet: bytes) -> tuple[int, int, str, int, int]:
    """(id, flags, name, qtype, the question's end offset) of a query (ValueError if bad)."""
    if len(packet) < 12:
        raise ValueError("shorter than a DNS header")
    ident, flags, questions = struct.unpack("!HHH", packet[:6])
    if questions < 1:
        raise ValueError("no question")
    labels, at = [], 12
    while True:
        if at >= len(packet):
            raise ValueError("name runs past the packet")
        length = packet[at]
        at += 1
        if length == 0:
            break
        if length > 63:
            raise ValueError("compressed or oversized label in a question")
        labels.append(packet[at : at + length].decode("ascii", "replace"))
        at += length
    if at + 4 > len(packet):
        raise ValueError("question without type and class")
    qtype = struct.unpack("!H", packet[at : at + 2])[0]
    return ident, flags, ".".join(labels).lower(), qtype, at + 4


def answer(packet: bytes, hosts: Mapping[str, str]) -> tuple[bytes, str, int]:
    """The reply to ``packet``; the name and type asked (ValueError for a bad query)."""
    ident, flags, name, qtype, end = parse_question(packet)
    question = packet[12:end]
    recursion_desired = flags & 0x0100
    address = hosts.get(name.rstrip("."))
    if address is None:
        head = struct.pack("!HHHHHH", ident, 0x8083 | recursion_desired, 1, 0, 0, 0)
        return head + question, name, qtype
    if qtype != TYPE_A:
        head = struct.pack("!HHHHHH", ident, 0x8080 | recursion_desired, 1, 0, 0, 0)
        return head + question, name, qtype
    head = struct.pack("!HHHHHH", ident, 0x8080 | recursion_desired, 1, 1, 0, 0)
    record = struct.pack("!HHHIH", 0xC00C, TYPE_A, 1, TTL, 4)
    return head + question + record + ipaddress.IPv4Address(address).packed, name, qtype


def serve(config: Mapping[str, Any]) -> None:
    """Answer questions until killed."""
    hosts = {k.lower(): v for k, v in config.get("hosts", {}).items()}
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((config["listen"], int(config.get("port", 53))))
    log = Path(config["log"])
    if ready := config.get("ready_file"):
        Path(ready).write_text("ready\n")
    with log.open("a", encoding="utf-8") as out:
        while True:
            packet, client = sock.recvfrom(4096)
            try:
                reply, name, qtype = answer(packet, hosts)
            except ValueError:
                continue
            entry = {"name": name, "type": _NAMES.get(qtype, str(qtype)), "client": client[0]}
            out.write(json.dumps(entry) + "\n")
            out.flush()
            sock.sendto(reply, client)


def read_log(path: Path) -> list[dict[str, str]]:
    """Every question logged so far (none while the log does not exist)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in lines if line.strip()]


def main(argv: list[str]) -> int:
    """Entry point: ``dns CONFIG.json``."""
    serve(json.loads(Path(argv[1]).read_text()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
