"""TLS material for a client: the server verified against a CA, the client's certificate.

Any adapter or store that dials a server over TLS takes the same three inputs (a CA, a client
certificate and its key), as files or as PEM text, and loads them here into one
:class:`ssl.SSLContext` when it is made: a file that cannot be read, a PEM that is not one,
or a key that does not match its certificate is a :class:`~pando_runtime.Problem` at its
setting (``label``) before anything is contacted. ``load_cert_chain`` reads files only: PEM
text is handed to it through an anonymous memory file (``memfd_create``; elsewhere a 0600
file in a 0700 folder, removed at once), never a file another user could read. A key file
readable by other users is refused.

The server is verified unless ``verify_server`` is false: hostname or address checked,
minimum TLS 1.2; with no CA given, the system's trusted certificates.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import ssl
import stat
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol
from urllib.parse import urlsplit

import attrs

from ._contract._errors import InvalidConfig, Problem

__all__ = [
    "Pem",
    "TlsMaterial",
    "TlsSettings",
    "TlsSetup",
    "certificate_validity",
    "https_context",
    "https_verify",
    "load_tls",
    "tls_failure",
    "tls_failure_message",
]


@attrs.frozen(kw_only=True)
class Pem:
    """One PEM input: a file or text. ``label`` names it in problems (a setting, a file)."""

    label: str
    path: Path | None = None
    text: str | None = attrs.field(default=None, repr=False)

    def read(self) -> bytes:
        """The PEM bytes (``OSError`` when the file cannot be read)."""
        if self.text is not None:
            return self.text.encode()
        assert self.path is not None  # noqa: S101 - one of the two is always set
        return self.path.read_bytes()


@attrs.frozen(kw_only=True)
class TlsMaterial:
    """What TLS to a server uses, before it is loaded; ``origin`` says where it was found."""

    ca: Pem | None = None
    cert: Pem | None = None
    key: Pem | None = None
    verify_server: bool = True
    origin: str = "settings"


@attrs.frozen(kw_only=True)
class TlsSetup:
    """The loaded context, and what the adapter knows of its own certificate (for errors)."""

    context: ssl.SSLContext = attrs.field(eq=False)
    verify_server: bool
    client_valid: tuple[datetime, datetime] | None
    """The client certificate's ``notBefore`` and ``notAfter`` (``None``: none presented)."""
    origin: str


def load_tls(material: TlsMaterial) -> tuple[TlsSetup | None, list[Problem]]:
    """The TLS context of ``material``, or every problem with it."""
    problems: list[Problem] = []
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if material.verify_server:
        if material.ca is None:
            context.load_default_certs()
        else:
            problems += _load_ca(context, material.ca)
    else:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    valid: tuple[datetime, datetime] | None = None
    if (material.cert is None) != (material.key is None):
        given = material.cert or material.key
        assert given is not None  # noqa: S101 - exactly one of the two
        problems.append(
            Problem(given.label, "a client certificate and its key go together: give both")
        )
    elif material.cert is not None and material.key is not None:
        valid, more = _load_client(context, material.cert, material.key)
        problems += more
    if problems:
        return None, problems
    setup = TlsSetup(
        context=context,
        verify_server=material.verify_server,
        client_valid=valid,
        origin=material.origin,
    )
    return setup, []


class TlsSettings(Protocol):
    """The settings a client reads to dial its server over TLS.

    Its ``address``, the paths of ``tls_ca``, ``tls_cert`` and ``tls_key``, and ``verify``.
    """

    @property
    def address(self) -> str: ...
    @property
    def tls_ca(self) -> str | None: ...
    @property
    def tls_cert(self) -> str | None: ...
    @property
    def tls_key(self) -> str | None: ...
    @property
    def verify(self) -> bool: ...


def https_context(settings: TlsSettings) -> tuple[ssl.SSLContext | None, list[Problem]]:
    """A client's TLS context for ``settings.address``, or every problem with its settings.

    Each problem is at its setting's name. ``None`` for an ``http`` address, where giving any
    of the three files is a problem (they would protect nothing); over ``https`` the server is
    verified (against ``tls_ca``, else the system's CAs) unless ``verify`` is false.
    """
    paths = {"tls_ca": settings.tls_ca, "tls_cert": settings.tls_cert, "tls_key": settings.tls_key}
    if urlsplit(settings.address).scheme != "https":
        given = [name for name, path in paths.items() if path]
        if given:
            return None, [Problem(given[0], "TLS settings need an https:// address", "invalid")]
        return None, []
    ca, cert, key = (
        None if path is None else Pem(label=name, path=Path(path)) for name, path in paths.items()
    )
    material = TlsMaterial(ca=ca, cert=cert, key=key, verify_server=settings.verify)
    setup, problems = load_tls(material)
    return (setup.context if setup is not None else None), problems


def https_verify(settings: TlsSettings, what: str) -> ssl.SSLContext | bool:
    """What an HTTP client's ``verify`` takes for ``settings``, checked by their class.

    The TLS context over ``https``, else ``settings.verify``.

    Raises:
        InvalidConfig: a file changed or vanished since the check (``what`` names the settings).
    """
    context, problems = https_context(settings)
    if problems:
        raise InvalidConfig(f"the {what} settings are not valid", problems)
    return context if context is not None else settings.verify


def _load_ca(context: ssl.SSLContext, ca: Pem) -> list[Problem]:
    try:
        data = ca.read().decode("ascii", "replace")
        context.load_verify_locations(cadata=data)
    except OSError as error:
        return [Problem(ca.label, f"cannot be read ({error.strerror or error})", "bad_path")]
    except (ssl.SSLError, ValueError):
        return [Problem(ca.label, "not a PEM CA certificate", "bad_pem")]
    return []


def _load_client(
    context: ssl.SSLContext, cert: Pem, key: Pem
) -> tuple[tuple[datetime, datetime] | None, list[Problem]]:
    problems = [p for p in (_unsafe_key(key),) if p is not None]
    try:
        cert_pem, key_pem = cert.read(), key.read()
    except OSError as error:
        failed = cert if cert.path and not cert.path.is_file() else key
        return None, [
            Problem(failed.label, f"cannot be read ({error.strerror or error})", "bad_path")
        ]
    if problems:
        return None, problems
    try:
        with _as_file(cert_pem) as cert_file, _as_file(key_pem) as key_file:
            context.load_cert_chain(cert_file, key_file)
    except (ssl.SSLError, ValueError):
        # OpenSSL's words name no content; the key's never reach a message.
        return None, [
            Problem(
                cert.label,
                "the certificate and key cannot be loaded: not PEM, or the key does not match "
                "the certificate (or needs a passphrase)",
                "bad_pem",
            )
        ]
    try:
        return certificate_validity(cert_pem), []
    except ValueError:
        return None, [Problem(cert.label, "not a PEM certificate", "bad_pem")]


def _unsafe_key(key: Pem) -> Problem | None:
    if key.path is None:
        return None
    try:
        mode = stat.S_IMODE(key.path.stat().st_mode)
    except OSError:
        return None  # reading it reports the problem
    if mode & 0o077:
        return Problem(
            key.label,
            f"the private key {key.path} is readable by other users (mode {mode:o}): chmod 600 it",
            "unsafe",
        )
    return None


@contextlib.contextmanager
def _as_file(data: bytes) -> Iterator[str]:
    """A path holding ``data`` for the block, readable by this process alone."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("pando-tls", os.MFD_CLOEXEC)
        try:
            _write_all(fd, data)
            yield f"/proc/self/fd/{fd}"
        finally:
            os.close(fd)
        return
    folder = tempfile.mkdtemp(prefix="pando-tls-")  # 0700
    path = os.path.join(folder, "pem")  # noqa: PTH118 - a str for ssl
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            _write_all(fd, data)
        finally:
            os.close(fd)
        yield path
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


# -- a certificate's validity, from its DER (no X.509 library needed) ---------------------------


def certificate_validity(pem: bytes) -> tuple[datetime, datetime]:
    """``notBefore`` and ``notAfter`` of the first certificate in ``pem``.

    Raises:
        ValueError: no certificate could be read.
    """
    der = ssl.PEM_cert_to_DER_cert(_first_certificate(pem))
    try:
        tbs = _children(der, *_content(der, 0))[0]  # Certificate: tbsCertificate, ...
        fields = _children(der, *_content(der, tbs))
        if der[fields[0]] == 0xA0:  # noqa: PLR2004 - the optional [0] version
            fields = fields[1:]
        validity = fields[3]  # after serialNumber, signature, issuer
        not_before, not_after = _children(der, *_content(der, validity))[:2]
    except IndexError:
        msg = "not an X.509 certificate"
        raise ValueError(msg) from None
    return _time(der, not_before), _time(der, not_after)


def _first_certificate(pem: bytes) -> str:
    text = pem.decode("ascii", "replace")
    begin, end = "-----BEGIN CERTIFICATE-----", "-----END CERTIFICATE-----"
    start = text.find(begin)
    stop = text.find(end, start)
    if start < 0 or stop < 0:
        msg = "no certificate"
        raise ValueError(msg)
    return text[start : stop + len(end)] + "\n"


def _content(der: bytes, at: int) -> tuple[int, int]:
    """Where the content of the element at ``at`` starts and ends."""
    try:
        length = der[at + 1]
        start = at + 2
        if length & 0x80:
            count = length & 0x7F
            length = int.from_bytes(der[start : start + count], "big")
            start += count
    except IndexError:
        msg = "truncated DER"
        raise ValueError(msg) from None
    if start + length > len(der):
        msg = "truncated DER"
        raise ValueError(msg)
    return start, start + length


def _children(der: bytes, start: int, end: int) -> list[int]:
    found = []
    at = start
    while at < end:
        found.append(at)
        at = _content(der, at)[1]
    return found


def _time(der: bytes, at: int) -> datetime:
    start, end = _content(der, at)
    text = der[start:end].decode("ascii")
    layout = "%y%m%d%H%M%SZ" if der[at] == 0x17 else "%Y%m%d%H%M%SZ"  # noqa: PLR2004 - UTCTime
    return datetime.strptime(text, layout).replace(tzinfo=UTC)


def tls_failure(error: BaseException) -> ssl.SSLError | None:
    """The TLS error somewhere in ``error``'s chain of causes (``None``: it is not TLS's).

    An HTTP client wraps a failed handshake (or the alert a server sends after it, when it
    refuses the client's certificate under TLS 1.3) in its own error; this finds what TLS
    said, for a message that names it (``verify_message``, ``reason``).
    """
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, ssl.SSLError):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def tls_failure_message(error: BaseException) -> str | None:
    """What TLS said when ``error`` is a failed handshake (``None``: it is not TLS's)."""
    tls = tls_failure(error)
    if tls is None:
        return None
    return str(getattr(tls, "verify_message", None) or tls.reason or type(tls).__name__)
