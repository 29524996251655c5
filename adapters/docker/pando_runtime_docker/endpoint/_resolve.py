"""Which engine the settings name, and how to reach it: checked before anything is contacted.

The engine is, in the Docker CLI's order: the ``host`` or ``context`` setting (not both),
``$DOCKER_HOST``, ``$DOCKER_CONTEXT``, ``currentContext`` of the Docker configuration, else
the local socket. Its address is ``unix:///path``, ``tcp://host[:port]`` or
``ssh://[user@]host[:port]``:

* ``tcp://`` speaks TLS whenever there is TLS material: the ``tls_*`` settings (files or PEM
  text), else a context's TLS folder, else Docker's environment (``DOCKER_CERT_PATH`` with
  ``ca.pem``, ``cert.pem``, ``key.pem``; ``DOCKER_TLS_VERIFY`` or ``DOCKER_TLS`` alone ask for
  TLS with the system's CAs). The server is verified in every case, whatever
  ``DOCKER_TLS_VERIFY`` holds (Docker's Go client and docker-py present the certificate and
  skip the check when it is unset): only ``tls_skip_verify`` (or a context's
  ``SkipTLSVerify``) turns the check off. Without TLS, plain HTTP is refused unless the address
  is loopback or ``allow_plain_tcp`` says so.
* ``ssh://`` needs the host's key: ``ssh_host_key``, else ``known_hosts``.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

import attrs

from pando_runtime import Problem
from pando_runtime.plugin import Pem, TlsMaterial, TlsSetup, load_tls

from .._info import DEFAULT_HOST, DockerConfig
from .._log import logger
from ._contexts import DEFAULT_CONTEXT, ContextError, DockerContext, config_dir, current_context
from ._ssh_target import (
    HostKey,
    SshTarget,
    check_identity,
    check_socket_path,
    parse_host_keys,
    parse_ssh_host,
)

__all__ = ["Endpoint", "resolve_endpoint"]

_LOG = logger("endpoint")
_TLS_SETTINGS = ("tls_ca", "tls_cert", "tls_key", "tls_ca_pem", "tls_cert_pem", "tls_key_pem")
_SSH_SETTINGS = ("ssh_host_key", "ssh_known_hosts", "ssh_identity", "ssh_identity_pem")


@attrs.frozen(kw_only=True)
class Endpoint:
    """The engine the settings name, and what reaching it takes."""

    host: str
    """Its address, for messages (never a secret): ``unix:///...``, ``tcp://...``, ``ssh://...``."""
    origin: str
    """Where it was named: ``the host setting``, ``DOCKER_HOST``, ``context 'prod-1'``..."""
    socket: str | None = None
    """The unix socket (``unix://``)."""
    address: str | None = None
    """``host:port`` (``tcp://``)."""
    tls: TlsSetup | None = None
    ssh: SshTarget | None = None

    @property
    def base_url(self) -> str:
        """The URL the HTTP client is given (over a socket, its host part is a placeholder)."""
        if self.address is None:
            return "http://docker"
        return f"{'https' if self.tls else 'http'}://{self.address}"


@attrs.frozen(kw_only=True)
class _Named:
    host: str
    origin: str
    label: str
    """The setting a problem with the address is filed under."""
    context: DockerContext | None = None


def resolve_endpoint(
    config: DockerConfig, environ: Mapping[str, str] | None = None
) -> tuple[Endpoint | None, list[Problem]]:
    """The engine ``config`` names (with ``environ``'s Docker variables), or every problem."""
    env = os.environ if environ is None else environ
    named, problems = _named(config, env)
    if named is None:
        return None, problems
    host = named.host
    if host.startswith("unix://"):
        problems += _unused(config, _TLS_SETTINGS + _SSH_SETTINGS, "unix://")
        path = host.removeprefix("unix://")
        if not path.startswith("/"):
            problems.append(Problem(named.label, "a unix:// host needs an absolute socket path"))
        return _done(Endpoint(host=host, origin=named.origin, socket=path), problems)
    if host.startswith(("tcp://", "http://")):
        problems += _unused(config, _SSH_SETTINGS, "tcp://")
        return _done(*_tcp(config, env, named, problems))
    if host.startswith("ssh://"):
        problems += _unused(config, _TLS_SETTINGS, "ssh://")
        return _done(*_ssh(config, named, problems))
    problems.append(
        Problem(
            named.label,
            f"the host (from {named.origin}) must start with unix://, tcp:// or ssh://",
            "bad_host",
        )
    )
    return None, problems


def _done(
    endpoint: Endpoint | None, problems: list[Problem]
) -> tuple[Endpoint | None, list[Problem]]:
    return (None, problems) if problems else (endpoint, [])


def _named(config: DockerConfig, env: Mapping[str, str]) -> tuple[_Named | None, list[Problem]]:
    """The address, where it was named, and the context it came from (the CLI's order)."""
    if config.host and config.context:
        return None, [Problem("context", "give host or context, not both", "conflict")]
    folder = config_dir(config.docker_config, env)
    if config.host:
        return _Named(host=config.host, origin="the host setting", label="host"), []
    if config.context:
        return _from_context(folder, config.context, "the context setting")
    if env.get("DOCKER_HOST"):
        return _Named(host=env["DOCKER_HOST"], origin="DOCKER_HOST", label="host"), []
    for name, how in (
        (env.get("DOCKER_CONTEXT"), "DOCKER_CONTEXT"),
        (current_context(folder), f"currentContext of {folder / 'config.json'}"),
    ):
        if name:
            return _from_context(folder, name, how)
    return _Named(host=DEFAULT_HOST, origin="the default", label="host"), []


def _from_context(folder: Path, name: str, how: str) -> tuple[_Named | None, list[Problem]]:
    if name == DEFAULT_CONTEXT:
        return _Named(host=DEFAULT_HOST, origin="context 'default'", label="context"), []
    try:
        context = DockerContext.read(folder, name)
    except ContextError as error:
        return None, [Problem("context", f"{error} (named by {how})", "not_found")]
    origin = f"context {name!r}"
    return _Named(host=context.host, origin=origin, label="context", context=context), []


def _unused(config: DockerConfig, names: tuple[str, ...], scheme: str) -> list[Problem]:
    return [
        Problem(name, f"does not apply to a {scheme} host", "conflict")
        for name in names
        if getattr(config, name) is not None
    ]


# -- tcp:// ----------------------------------------------------------------------------------


def _tcp(
    config: DockerConfig, env: Mapping[str, str], named: _Named, problems: list[Problem]
) -> tuple[Endpoint | None, list[Problem]]:
    try:
        parts = urlsplit(named.host)
        port = parts.port
    except ValueError:
        parts, port = None, None
    name = parts.hostname if parts is not None else None
    if parts is None or not name or parts.username or parts.path not in ("", "/"):
        problems.append(Problem(named.label, "a tcp:// host is tcp://host[:port]", "bad_host"))
        return None, problems
    material = _tls_material(config, env, named)
    tls: TlsSetup | None = None
    if material is not None:
        tls, more = load_tls(material)
        problems += more
        if tls is not None and not tls.verify_server:
            _LOG.warning(
                "the engine at %s is not verified (%s): anyone on the path can impersonate it",
                named.host,
                material.origin,
            )
    elif not (_loopback(name) or config.allow_plain_tcp):
        problems.append(
            Problem(
                named.label,
                f"{named.host} (from {named.origin}) would speak plain HTTP: whoever reaches "
                "that port controls the engine. Give its TLS material (tls_ca, tls_cert, "
                "tls_key, or DOCKER_CERT_PATH), reach it over ssh://, or set "
                "allow_plain_tcp for a network you trust",
                "unsafe",
            )
        )
    shown = f"[{name}]" if ":" in name else name
    host_port = f"{shown}:{port or (2376 if material is not None else 2375)}"
    return Endpoint(
        host=f"tcp://{host_port}", origin=named.origin, address=host_port, tls=tls
    ), problems


def _tls_material(
    config: DockerConfig, env: Mapping[str, str], named: _Named
) -> TlsMaterial | None:
    """TLS material from the settings, else the context, else Docker's environment."""
    skip = config.tls_skip_verify
    ca = _pem("tls_ca", config.tls_ca, "tls_ca_pem", config.tls_ca_pem)
    cert = _pem("tls_cert", config.tls_cert, "tls_cert_pem", config.tls_cert_pem)
    key = _pem("tls_key", config.tls_key, "tls_key_pem", config.tls_key_pem)
    if ca or cert or key:
        return TlsMaterial(ca=ca, cert=cert, key=key, verify_server=not skip)
    context = named.context
    if context is not None:
        if context.tls_dir is None and not context.skip_tls_verify:
            return None
        found = _folder_material(context.tls_dir, f"context {context.name!r}")
        return attrs.evolve(found, verify_server=not (skip or context.skip_tls_verify))
    wanted = any(env.get(k) for k in ("DOCKER_TLS_VERIFY", "DOCKER_TLS"))
    cert_path = env.get("DOCKER_CERT_PATH")
    if cert_path:
        return attrs.evolve(
            _folder_material(Path(cert_path).expanduser(), "DOCKER_CERT_PATH"),
            verify_server=not skip,
        )
    if wanted:
        folder = config_dir(config.docker_config, env)
        return attrs.evolve(_folder_material(folder, "DOCKER_TLS_VERIFY"), verify_server=not skip)
    return None


def _pem(file_label: str, path: str | None, text_label: str, text: str | None) -> Pem | None:
    if text is not None:
        return Pem(label=text_label, text=text)
    if path is not None:
        return Pem(label=file_label, path=Path(path).expanduser())
    return None


def _folder_material(folder: Path | None, origin: str) -> TlsMaterial:
    """``ca.pem``, ``cert.pem`` and ``key.pem`` of ``folder``, those that exist."""

    def found(name: str) -> Pem | None:
        if folder is None or not (folder / name).is_file():
            return None
        return Pem(label=f"{origin}: {folder / name}", path=folder / name)

    return TlsMaterial(
        ca=found("ca.pem"), cert=found("cert.pem"), key=found("key.pem"), origin=origin
    )


def _loopback(name: str) -> bool:
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


# -- ssh:// ----------------------------------------------------------------------------------


def _ssh(
    config: DockerConfig, named: _Named, problems: list[Problem]
) -> tuple[Endpoint | None, list[Problem]]:
    parsed, more = parse_ssh_host(named.host, named.label)
    problems += more
    pinned: tuple[HostKey, ...] = ()
    if config.ssh_host_key is not None:
        pinned, more = parse_host_keys(config.ssh_host_key, "ssh_host_key")
        problems += more
    identity = Path(config.ssh_identity).expanduser() if config.ssh_identity else None
    if identity is not None:
        problems += check_identity(identity, "ssh_identity")
    if identity is not None and config.ssh_identity_pem is not None:
        problems.append(Problem("ssh_identity_pem", "give ssh_identity or ssh_identity_pem"))
    problems += check_socket_path(config.ssh_socket, "ssh_socket")
    known = Path(config.ssh_known_hosts).expanduser() if config.ssh_known_hosts else None
    if known is not None and config.ssh_host_key is not None:
        problems.append(Problem("ssh_known_hosts", "give ssh_host_key or ssh_known_hosts"))
    elif known is not None and not known.is_file():
        problems.append(Problem("ssh_known_hosts", f"no such file: {known}", "bad_path"))
    if parsed is None or problems:
        return None, problems
    user, host, port = parsed
    target = SshTarget(
        user=user,
        host=host,
        port=port,
        pinned=pinned,
        known_hosts=known,
        identity=identity,
        identity_pem=config.ssh_identity_pem,
        socket=config.ssh_socket,
    )
    return Endpoint(host=target.address, origin=named.origin, ssh=target), problems
