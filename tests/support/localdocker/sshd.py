"""A real OpenSSH server (Debian's ``openssh-server``) in an engine's network namespace.

It listens on ``127.0.0.1:22`` of the engine's namespace (nothing outside it reaches that
address; a test dials it through a proxy of its own), with a host key and a client key the
harness makes (ed25519). Root may log in with that client key alone (no password, no other
key); ``MaxSessions`` and every other limit keep Debian's defaults. The engine's unix socket
is a file on the host's file system, so ``direct-streamlocal`` channels to it reach dockerd.

sshd runs in a mount namespace of its own with a tmpfs on ``/run`` (its privilege separation
folder ``/run/sshd`` lives there), so nothing is made on the host; :meth:`EngineSshd.kill`
ends the listener and every connection's process (a host that reboots, or a restart that
ends sessions), :meth:`EngineSshd.start` brings it back with the same keys.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from localcluster.net import wait_until
from localcluster.process import Component
from localcluster.realnode import netns

SSHD = Path("/usr/sbin/sshd")
SSH_PORT = 22
_LISTEN = "127.0.0.1"


class SshdError(RuntimeError):
    """sshd could not be started."""


def missing() -> list[str]:
    """What this machine lacks to run the harness's sshd (empty when it can)."""
    absent = []
    if not os.access(SSHD, os.X_OK):
        absent.append(f"{SSHD} (openssh-server; tools/debian/install.sh)")
    if shutil.which("ssh-keygen") is None:
        absent.append("the command ssh-keygen (openssh-client)")
    return absent


def make_key(path: Path, comment: str) -> str:
    """A new ed25519 key pair at ``path`` (private, 0600) and ``path.pub``; the public line."""
    path.unlink(missing_ok=True)
    path.with_suffix(".pub").unlink(missing_ok=True)
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        check=True, capture_output=True,
    )  # fmt: skip
    path.chmod(0o600)
    return public_line(path)


def public_line(private_key: Path) -> str:
    """``ssh-ed25519 AAAA...`` of a key pair (its ``.pub`` file, without the comment)."""
    kind, blob, *_ = Path(f"{private_key}.pub").read_text().split()
    return f"{kind} {blob}"


class EngineSshd:
    """sshd in namespace ``space``, its files (keys, config, log) under ``work_dir``."""

    def __init__(self, space: str, work_dir: Path) -> None:
        self.space = space
        self.dir = work_dir
        self.host_key = work_dir / "ssh_host_ed25519_key"
        self.client_key = work_dir / "client_ed25519"
        """The key root logs in with (authorized)."""
        self.authorized_keys = work_dir / "authorized_keys"
        self.config = work_dir / "sshd_config"
        self.log = work_dir / "sshd.log"
        self.port = SSH_PORT
        self.address = _LISTEN
        self._daemon: Component | None = None

    @property
    def host_public_key(self) -> str:
        """The server's host key, as ``ssh-ed25519 AAAA...`` (what a client pins)."""
        return public_line(self.host_key)

    def open(self) -> EngineSshd:
        """Make the keys and the config, start sshd."""
        self.dir.mkdir(parents=True, exist_ok=True)
        self.dir.chmod(0o700)
        make_key(self.host_key, "pando-engine-host")
        authorized = make_key(self.client_key, "pando-client")
        self.authorized_keys.write_text(authorized + "\n")
        self.config.write_text(
            "\n".join(
                [
                    f"ListenAddress {_LISTEN}",
                    f"Port {SSH_PORT}",
                    f"HostKey {self.host_key}",
                    f"AuthorizedKeysFile {self.authorized_keys}",
                    "PidFile none",
                    "PermitRootLogin prohibit-password",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "UsePAM no",
                    # The files live under the test's temporary folder (/tmp is 1777).
                    "StrictModes no",
                    "LogLevel VERBOSE",
                ]
            )
            + "\n"
        )
        self.start()
        return self

    def other_key(self, name: str) -> Path:
        """A client key that is not authorized (its private file, 0600)."""
        path = self.dir / name
        make_key(path, name)
        return path

    def start(self, timeout: float = 20.0) -> None:
        """Start sshd; return once it listens."""
        if self._daemon is not None and self._daemon.running():
            return
        script = 'set -eu; mount -t tmpfs -o mode=755 run /run; mkdir -m 755 /run/sshd; exec "$@"'
        inner = ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", script,
                 "pando-sshd", str(SSHD), "-D", "-e", "-f", str(self.config)]  # fmt: skip
        self._daemon = Component("sshd", netns.command(self.space, inner), self.log)
        self._daemon.start()
        if not wait_until(self._listening, timeout=timeout, interval=0.05, abort=self._dead):
            raise SshdError(f"sshd did not listen in {timeout:g} s:\n{self._daemon.tail(30)}")

    @property
    def running(self) -> bool:
        """Whether the listener runs (a test may have killed it)."""
        return self._daemon is not None and self._daemon.running()

    @property
    def is_open(self) -> bool:
        """Whether :meth:`open` ran and :meth:`close` has not."""
        return self._daemon is not None

    def kill(self, timeout: float = 10.0) -> None:
        """SIGKILL the listener and every connection's sshd: each client's connection ends."""
        for pid in self._pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if self._daemon is not None:
            self._daemon.kill()
        deadline = time.monotonic() + timeout
        while self._pids() and time.monotonic() < deadline:
            time.sleep(0.02)

    def close(self) -> None:
        """Stop sshd and its connections."""
        self.kill()
        self._daemon = None

    def connections(self) -> int:
        """TCP connections to sshd established now (each client's SSH connection)."""
        out = subprocess.run(
            netns.command(self.space, ["ss", "-Htn", "state", "established",
                                       f"( sport = :{SSH_PORT} )"]),
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        return len(out.splitlines())

    def _pids(self) -> list[int]:
        found = []
        for pid in netns.pids(self.space):
            with contextlib.suppress(OSError):
                if Path(f"/proc/{pid}/comm").read_text().strip() == "sshd":
                    found.append(pid)
        return found

    def _listening(self) -> bool:
        return (_LISTEN, SSH_PORT) in netns.tcp_listeners(self.space)

    def _dead(self) -> str | None:
        if self._daemon is not None and (code := self._daemon.exit_code()) is not None:
            return f"sshd exited with code {code}:\n{self._daemon.tail(30)}"
        return None
