"""Where an ``ssh://`` engine is, and how its host is known: parsed and checked up front.

``ssh://[user@]host[:port]`` as the Docker CLI writes it. The host key is pinned by the
``ssh_host_key`` setting (one or more public keys, ``ssh-ed25519 AAAA...`` as in the server's
``/etc/ssh/ssh_host_*_key.pub`` or after the host name in ``ssh-keyscan``'s output), or read
from the user's ``known_hosts``; it is never trusted on first use.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import stat
from pathlib import Path
from urllib.parse import urlsplit

import attrs

from pando_runtime import Problem

__all__ = ["HostKey", "SshTarget", "parse_host_keys", "parse_ssh_host"]

DEFAULT_ENGINE_SOCKET = "/var/run/docker.sock"
_KEY_TYPES = frozenset(
    {
        "ssh-ed25519",
        "ssh-rsa",
        "ecdsa-sha2-nistp256",
        "ecdsa-sha2-nistp384",
        "ecdsa-sha2-nistp521",
        "sk-ssh-ed25519@openssh.com",
        "sk-ecdsa-sha2-nistp256@openssh.com",
    }
)
_UNSAFE_TEXT = re.compile(r"[\s\x00-\x1f\x7f]")


@attrs.frozen
class HostKey:
    """One SSH public key."""

    kind: str
    blob: bytes

    @property
    def line(self) -> str:
        """``<type> <base64>``, as ``known_hosts`` holds it after the host."""
        return f"{self.kind} {base64.b64encode(self.blob).decode()}"

    @property
    def fingerprint(self) -> str:
        """``SHA256:...``, as ``ssh-keygen -l`` and ssh's own messages print it."""
        digest = base64.b64encode(hashlib.sha256(self.blob).digest()).decode().rstrip("=")
        return f"SHA256:{digest}"

    @classmethod
    def parse(cls, text: str) -> HostKey:
        """A key from ``<type> <base64> [comment]``, or a ``known_hosts`` line with hosts first.

        Raises:
            ValueError: not such a line.
        """
        fields = text.split()
        if len(fields) >= 2 and fields[0] not in _KEY_TYPES and fields[1] in _KEY_TYPES:  # noqa: PLR2004
            fields = fields[1:]
        if len(fields) < 2 or fields[0] not in _KEY_TYPES:  # noqa: PLR2004
            msg = "not '<type> <base64>'"
            raise ValueError(msg)
        try:
            blob = base64.b64decode(fields[1], validate=True)
        except (binascii.Error, ValueError):
            msg = "its key is not base64"
            raise ValueError(msg) from None
        named = fields[0].encode()
        if blob[:4] != len(named).to_bytes(4, "big") or blob[4 : 4 + len(named)] != named:
            msg = f"the key's data is not a {fields[0]} key"
            raise ValueError(msg)
        return cls(fields[0], blob)


def parse_host_keys(text: str, label: str) -> tuple[tuple[HostKey, ...], list[Problem]]:
    """Every key of ``text`` (one a line; blank lines and ``#`` comments skipped)."""
    keys: list[HostKey] = []
    problems: list[Problem] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            keys.append(HostKey.parse(line))
        except ValueError as error:
            problems.append(
                Problem(
                    label,
                    f"line {number}: {error} (give the server's public host key, as in its "
                    "/etc/ssh/ssh_host_ed25519_key.pub)",
                    "bad_key",
                )
            )
    if not keys and not problems:
        problems.append(Problem(label, "holds no key", "missing"))
    return tuple(keys), problems


@attrs.frozen(kw_only=True)
class SshTarget:
    """An engine behind SSH: who logs in where, how its host is known, its socket there."""

    user: str | None
    host: str
    port: int = 22
    pinned: tuple[HostKey, ...] = ()
    """The host's keys (``()``: read ``known_hosts``)."""
    known_hosts: Path | None = None
    """The user's file to read (``None``: ssh's own default, ``~/.ssh/known_hosts``)."""
    identity: Path | None = None
    identity_pem: str | None = attrs.field(default=None, repr=False)
    socket: str = DEFAULT_ENGINE_SOCKET

    @property
    def address(self) -> str:
        """``ssh://user@host:port``, for messages."""
        who = f"{self.user}@" if self.user else ""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"ssh://{who}{host}:{self.port}"


def parse_ssh_host(
    host: str, label: str
) -> tuple[tuple[str | None, str, int] | None, list[Problem]]:
    """``(user, host, port)`` of ``ssh://[user@]host[:port]``, or the problems."""
    try:
        parts = urlsplit(host)
        port = parts.port or 22
    except ValueError as error:
        return None, [Problem(label, f"not ssh://[user@]host[:port] ({error})", "bad_host")]
    problems = []
    if parts.password is not None:
        problems.append(Problem(label, "holds a password: SSH logs in with a key or an agent"))
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        problems.append(Problem(label, "an ssh:// host is ssh://[user@]host[:port], no path"))
    name = parts.hostname or ""
    if not name or name.startswith("-") or _UNSAFE_TEXT.search(name):
        problems.append(Problem(label, "an ssh:// host needs a host name", "bad_host"))
    user = parts.username
    if user is not None and (not user or user.startswith("-") or _UNSAFE_TEXT.search(user)):
        problems.append(Problem(label, "the user name is not one", "bad_host"))
    if problems:
        return None, problems
    return (user, name, port), []


def check_socket_path(path: str, label: str) -> list[Problem]:
    """The engine's socket on the SSH host: an absolute path ssh can forward to."""
    if not path.startswith("/") or ":" in path or _UNSAFE_TEXT.search(path):
        return [Problem(label, "an absolute path with no ':' or spaces", "bad_path")]
    return []


def check_identity(path: Path, label: str) -> list[Problem]:
    """A private key file: present, readable by its owner alone (ssh refuses it otherwise)."""
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except OSError as error:
        return [Problem(label, f"cannot be read ({error.strerror or error})", "bad_path")]
    if mode & 0o077:
        return [
            Problem(
                label,
                f"the private key {path} is readable by other users (mode {mode:o}): chmod 600 it",
                "unsafe",
            )
        ]
    return []
