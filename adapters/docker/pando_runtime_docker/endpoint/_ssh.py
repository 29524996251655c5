"""The Engine API over SSH: one OpenSSH connection forwarding a local socket to the engine's.

The adapter runs the OpenSSH client (``ssh -N -L <local socket>:<engine socket>``) as a
child process: one SSH connection per engine, authenticated with the user's key or agent,
the host key checked strictly (the pinned keys, or the user's ``known_hosts``; never trust on
first use). Each HTTP connection the adapter opens to the local socket becomes one
``direct-streamlocal`` channel to the engine's socket on that host: no process runs there
per call (the Docker CLI's ``docker system dial-stdio`` starts one per connection), a
half-close passes through as such (an exec's end of stdin), and the channels are not
sessions, so sshd's ``MaxSessions`` (10 by default) does not bound them.

Why a child process and not a Python SSH library: AsyncSSH runs on asyncio alone (the
adapter runs on trio too), Paramiko blocks (a thread per followed stream), and OpenSSH is
what the Docker CLI uses: its host key checks, ``known_hosts`` (hashed entries included),
agent and configuration (``~/.ssh/config``; the options below win over it) apply as users
expect.

The local socket lives in a folder of its own (0700, the socket 0600) that also holds the
pinned keys and, when the key is given as text, the key (0600); it is removed with the
tunnel. A dropped connection ends the process; the next call starts a new one (a failed start
is remembered for a second, so a burst of calls does not start a burst of processes). What
went wrong is read from ssh's messages: a changed host key (both fingerprints), an unknown
host, a refused login, forwarding refused by sshd, no engine at the socket.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import shutil
import subprocess
import tempfile
import time
import weakref
from pathlib import Path

import anyio

from pando_runtime import PandoRuntimeError

from .._log import logger
from ._errors import refused
from ._ssh_target import HostKey, SshTarget

__all__ = ["SshTunnel"]

_LOG = logger("ssh")

HOST_KEY_ALIAS = "pando-engine"
"""The name the pinned keys are filed under (``HostKeyAlias``): any host name or port."""
_POLL = 0.01
_RETRY_AFTER = 1.0
_MESSAGE_LIMIT = 300
_CHANGED = re.compile(r"key sent by the remote host is\s+(SHA256:[A-Za-z0-9+/]+)")
_CHANGED_TYPE = re.compile(r"The fingerprint for the (\S+) key sent")
_OFFENDING = re.compile(r"Offending \S+ key in (.+):(\d+)")
_OPEN_FAILED = re.compile(r"channel \d+: open failed: (.*)")


class _Running:
    """The process and folder of a tunnel: what its finalizer cleans when it is dropped."""

    def __init__(self) -> None:
        self.process: subprocess.Popen[bytes] | None = None
        self.folder: Path | None = None

    def end_process(self) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(2.0)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(2.0)

    def clean(self) -> None:
        self.end_process()
        folder, self.folder = self.folder, None
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)


class SshTunnel:
    """One engine's SSH connection: started on first use, started again after a drop."""

    def __init__(self, target: SshTarget, *, connect_timeout: float, host: str) -> None:
        self._target = target
        self._host = host
        self._connect_timeout = connect_timeout
        self._running = _Running()
        self._finalizer = weakref.finalize(self, self._running.clean)
        self._lock: anyio.Lock | None = None
        self._failure: tuple[float, PandoRuntimeError] | None = None
        self._read_at = 0
        self._up = False
        self.starts = 0
        """How many ssh processes were started (1 while the first connection lasts)."""

    @property
    def socket_path(self) -> str:
        """The local socket the HTTP client dials (valid once :meth:`ready` returned)."""
        return str(self._folder() / "engine.sock")

    def _folder(self) -> Path:
        if self._running.folder is None:
            base = os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
            if len(base) > 60 or not os.path.isdir(base):  # noqa: PLR2004, PTH112 - AF_UNIX paths are short
                base = "/tmp"  # noqa: S108 - a private 0700 folder is made inside
            self._running.folder = Path(tempfile.mkdtemp(prefix="pando-ssh-", dir=base))
        return self._running.folder

    def _alive(self) -> bool:
        """Whether ssh runs and has bound the socket (not while another task starts it)."""
        process = self._running.process
        return self._up and process is not None and process.poll() is None

    async def ready(self) -> None:
        """Start the connection unless it runs; raise its coded error when it cannot."""
        if self._alive():
            return
        if self._lock is None:
            self._lock = anyio.Lock()
        async with self._lock:
            if self._alive():
                return
            if self._failure is not None and time.monotonic() - self._failure[0] < _RETRY_AFTER:
                raise self._failure[1]
            try:
                await self._start()
            except PandoRuntimeError as error:
                self._failure = (time.monotonic(), error)
                raise
            self._failure = None

    async def _start(self) -> None:
        process = self._spawn()
        deadline = time.monotonic() + 2 * self._connect_timeout + 5
        while not self._listening():
            code = process.poll()
            if code is not None:
                raise self._exit_error(code)
            if time.monotonic() > deadline:
                self._running.end_process()
                raise refused(
                    self._host,
                    "ssh_timeout",
                    "the SSH connection was not set up in time",
                    "Check that the host answers SSH, or raise connect_timeout.",
                )
            await anyio.sleep(_POLL)
        self._up = True
        _LOG.info("SSH connection to %s forwarding %s", self._host, self._target.socket)

    def _spawn(self) -> subprocess.Popen[bytes]:
        """Start ssh (a fork and an exec: quick, so on the event loop's thread)."""
        self._up = False
        self._running.end_process()
        folder = self._folder()
        Path(self.socket_path).unlink(missing_ok=True)
        self._read_at = 0
        argv = self._argv(folder)
        env = {**os.environ, "LC_ALL": "C"}
        try:
            with (folder / "ssh.log").open("wb") as out:
                process = subprocess.Popen(  # noqa: S603 - argv is built, not a shell
                    argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=out,
                    env=env, start_new_session=True,
                )  # fmt: skip
        except FileNotFoundError:
            raise refused(
                self._host,
                "ssh_missing",
                "the OpenSSH client (ssh) is not installed",
                "Install it (Debian: apt-get install openssh-client).",
            ) from None
        self._running.process = process
        self.starts += 1
        return process

    def _listening(self) -> bool:
        """Whether ssh bound the local socket (it does so once logged in)."""
        return Path(self.socket_path).is_socket()

    def _argv(self, folder: Path) -> list[str]:
        target = self._target
        options = {
            "BatchMode": "yes",
            "StrictHostKeyChecking": "yes",
            "UpdateHostKeys": "no",
            "CheckHostIP": "no",
            "ExitOnForwardFailure": "yes",
            "StreamLocalBindUnlink": "yes",
            "StreamLocalBindMask": "0177",
            "ServerAliveInterval": "5",
            "ServerAliveCountMax": "3",
            "ConnectTimeout": str(max(1, math.ceil(self._connect_timeout))),
            "ControlMaster": "no",
            "ControlPath": "none",
            "ForwardAgent": "no",
            "ForwardX11": "no",
            "PermitLocalCommand": "no",
            "LogLevel": "ERROR",
        }
        if target.pinned:
            known = folder / "known_hosts"
            known.write_text("".join(f"{HOST_KEY_ALIAS} {key.line}\n" for key in target.pinned))
            options |= {
                "UserKnownHostsFile": _quoted(known),
                "GlobalKnownHostsFile": "/dev/null",
                "HostKeyAlias": HOST_KEY_ALIAS,
            }
        elif target.known_hosts is not None:
            options["UserKnownHostsFile"] = _quoted(target.known_hosts)
        identity = self._identity(folder)
        argv = ["ssh", "-N"]
        for key, value in options.items():
            argv += ["-o", f"{key}={value}"]
        if identity is not None:
            argv += ["-i", str(identity), "-o", "IdentitiesOnly=yes"]
        argv += ["-L", f"{self.socket_path}:{target.socket}", "-p", str(target.port)]
        if target.user:
            argv += ["-l", target.user]
        return [*argv, "--", target.host]

    def _identity(self, folder: Path) -> Path | None:
        if self._target.identity_pem is None:
            return self._target.identity
        path = folder / "identity"
        if not path.exists():
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as out:
                out.write(self._target.identity_pem.strip() + "\n")
        return path

    # -- what went wrong -------------------------------------------------------------------

    def _log_text(self) -> str:
        folder = self._running.folder
        if folder is None:
            return ""
        try:
            return (folder / "ssh.log").read_text(errors="replace")
        except OSError:
            return ""

    def explain(self, error: BaseException) -> PandoRuntimeError | None:
        """Why a call over the tunnel failed, from ssh's own words (``None``: it does not say).

        ``error`` is the HTTP client's; the answer comes from what ssh wrote since the last
        call to this method: its exit, or a channel the server would not open.
        """
        text = self._log_text()
        fresh, self._read_at = text[self._read_at :], len(text)
        process = self._running.process
        if process is not None and (code := process.poll()) is not None:
            return self._exit_error(code, text)
        for line in fresh.splitlines():
            opened = _OPEN_FAILED.search(line)
            if opened is None:
                continue
            why = opened.group(1)
            if "prohibited" in why:
                return refused(
                    self._host,
                    "ssh_forwarding_refused",
                    "sshd refused to forward to the engine's socket",
                    "Allow it on the engine's host: AllowStreamLocalForwarding yes (the "
                    "default) and DisableForwarding no in sshd_config, and no "
                    "'restrict' or 'no-port-forwarding' on the key in authorized_keys.",
                    ssh_says=why[:_MESSAGE_LIMIT],
                )
            return refused(
                self._host,
                "engine_socket_unavailable",
                f"nothing the SSH user may open answers at {self._target.socket} there",
                "Check that Docker runs on that host and that the SSH user may use its socket "
                "(the docker group), or set ssh_socket to the engine's socket.",
                ssh_says=why[:_MESSAGE_LIMIT],
            )
        return None

    def _exit_error(self, code: int, text: str | None = None) -> PandoRuntimeError:
        said = text if text is not None else self._log_text()
        last = " ".join(said.split())[-_MESSAGE_LIMIT:]
        host = self._host
        if "REMOTE HOST IDENTIFICATION HAS CHANGED" in said:
            return self._changed(said)
        if "host key is known for" in said or "Host key verification failed" in said:
            how = "the pinned ssh_host_key" if self._target.pinned else "known_hosts"
            return refused(
                host,
                "host_key_unknown",
                f"its host key is not in {how}, and it is never trusted on first use",
                "Pin the host's key in ssh_host_key (read it on the host: "
                "/etc/ssh/ssh_host_ed25519_key.pub), or add it to known_hosts after checking "
                "its fingerprint out of band.",
                ssh_says=last,
            )
        if "Permission denied" in said:
            return refused(
                host,
                "login_refused",
                f"the SSH login as {self._target.user or 'the current user'} was refused",
                "Authorize the key (ssh_identity, ssh_identity_pem, or the agent's) in that "
                "user's ~/.ssh/authorized_keys on the host, or log in as another user.",
                ssh_says=last,
            )
        if "UNPROTECTED PRIVATE KEY FILE" in said or "Load key" in said:
            return refused(
                host,
                "ssh_identity_unusable",
                "ssh could not use the private key",
                "Give an OpenSSH or PEM private key without a passphrase (or use the agent), "
                "readable by its owner alone (chmod 600).",
                ssh_says=last,
            )
        if "forwarding" in said.lower():
            return refused(
                host,
                "ssh_forward_failed",
                "ssh could not set up the forwarding",
                "Check the engine host's sshd (AllowStreamLocalForwarding yes).",
                ssh_says=last,
            )
        return refused(
            host,
            "ssh_connection_failed",
            f"the SSH connection failed or ended (ssh exit {code})",
            "Check that the host is up and answers SSH on that port; calls start a new "
            "connection when it does.",
            ssh_says=last,
        )

    def _changed(self, said: str) -> PandoRuntimeError:
        presented = _CHANGED.search(said)
        kind = _CHANGED_TYPE.search(said)
        expected = [key.fingerprint for key in self._target.pinned]
        if kind is not None and self._target.pinned:
            wanted = kind.group(1).lower()
            same = [k.fingerprint for k in self._target.pinned if wanted in k.kind]
            expected = same or expected
        offending = _OFFENDING.search(said)
        if not self._target.pinned and offending is not None:
            expected = [_fingerprint_at(Path(offending.group(1)), int(offending.group(2)))]
        shown = presented.group(1) if presented else "unknown"
        return refused(
            self._host,
            "host_key_changed",
            f"its host key has changed: expected {' or '.join(expected)}, the host presented "
            f"{shown}",
            "Find out why (a reinstalled host, or someone in the middle). When the new key "
            "is right, pin it (ssh_host_key) or replace the old one in known_hosts.",
            expected_fingerprints=expected,
            presented_fingerprint=shown,
        )

    async def aclose(self) -> None:
        """End the connection and remove the folder. Safe to call twice."""
        process = self._running.process
        if process is not None and process.poll() is None:
            process.terminate()  # ssh ends at once on SIGTERM; its exit is polled, not awaited
            with anyio.move_on_after(2.0):
                while process.poll() is None:  # noqa: ASYNC110 - a child process, no event
                    await anyio.sleep(_POLL)
        self._running.clean()


def _fingerprint_at(path: Path, line: int) -> str:
    """The fingerprint of the key on ``line`` of a ``known_hosts`` file (else 'unknown')."""
    with contextlib.suppress(OSError, IndexError, ValueError):
        return HostKey.parse(path.read_text().splitlines()[line - 1]).fingerprint
    return "unknown"


def _quoted(path: Path) -> str:
    text = str(path)
    return f'"{text}"' if any(c.isspace() for c in text) else text
