"""TLS to an engine on ``tcp://``: the server verified against a CA, the client's certificate.

The material (a CA, a certificate and its key) comes as files or as PEM text. It is loaded
into one :class:`ssl.SSLContext` when the adapter is made, so a file that cannot be read, a
PEM that is not one, or a key that does not match its certificate is an ``InvalidConfig``
problem at its setting before anything is contacted. ``load_cert_chain`` reads files only:
PEM text is handed to it through an anonymous memory file (``memfd_create``; elsewhere a
0600 file in a 0700 folder, removed at once), never a file another user could read. A key
file readable by other users is refused.

The server is verified unless ``verify_server`` is false (a setting whose name says so):
hostname or address checked, minimum TLS 1.2. A failed handshake is explained by
:func:`explain_tls`: an unknown CA, a certificate expired or not yet valid, a name
mismatch, a client certificate the engine refused (and why, when the adapter can tell from
its own certificate), a server that does not speak TLS.
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

import attrs

from pando_runtime import PandoRuntimeError, Problem

from ._errors import refused

__all__ = ["Pem", "TlsMaterial", "TlsSetup", "explain_tls", "load_tls"]

# X509_V_ERR_* codes (OpenSSL's x509_vfy.h) that ``SSLCertVerificationError.verify_code`` holds.
_UNKNOWN_CA = {2, 18, 19, 20, 21}
_NOT_YET_VALID = 9
_EXPIRED = 10
_NAME_MISMATCH = {62, 64}
# Alerts an engine sends about the client's certificate (Go sends "bad certificate" for each).
_CLIENT_REFUSED = {
    "SSLV3_ALERT_BAD_CERTIFICATE",
    "TLSV13_ALERT_CERTIFICATE_REQUIRED",
    "SSLV3_ALERT_CERTIFICATE_EXPIRED",
    "SSLV3_ALERT_CERTIFICATE_UNKNOWN",
    "TLSV1_ALERT_UNKNOWN_CA",
    "SSLV3_ALERT_UNSUPPORTED_CERTIFICATE",
}
_NOT_TLS = {"WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE", "HTTP_REQUEST", "UNKNOWN_PROTOCOL"}


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
    """What TLS to an engine uses, before it is loaded; ``origin`` says where it was found."""

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


# -- explaining a failed handshake ------------------------------------------------------------


def explain_tls(error: BaseException, host: str, setup: TlsSetup) -> PandoRuntimeError | None:
    """The coded error for a TLS failure somewhere in ``error``'s chain (``None``: not TLS)."""
    for cause in _chain(error):
        if isinstance(cause, ssl.SSLCertVerificationError):
            return _server_refused(cause, host, setup)
        if isinstance(cause, ssl.SSLError):
            reason = str(cause.reason or "")
            if reason in _CLIENT_REFUSED:
                return _client_refused(host, setup, reason)
            if reason in _NOT_TLS:
                return refused(
                    host,
                    "not_tls",
                    "the server does not speak TLS there",
                    "Check the port (Docker serves TLS on 2376, plain HTTP on 2375) and that "
                    "the engine runs with --tlsverify.",
                )
            return refused(
                host,
                "tls_failed",
                f"the TLS handshake failed ({reason or type(cause).__name__})",
                "Check the engine's TLS settings and the adapter's TLS material.",
            )
    return None


def _chain(error: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _server_refused(
    error: ssl.SSLCertVerificationError, host: str, setup: TlsSetup
) -> PandoRuntimeError:
    code = error.verify_code
    said = str(error.verify_message or "")
    if code in _UNKNOWN_CA:
        return refused(
            host,
            "unknown_ca",
            f"its certificate is not signed by a CA the adapter trusts ({said})",
            "Give the CA that issued the engine's certificate (tls_ca, tls_ca_pem, or ca.pem "
            f"of the TLS folder; the material came from {setup.origin}).",
            server_says=said,
        )
    if code == _EXPIRED:
        return refused(
            host,
            "certificate_expired",
            "its certificate (or its CA's) has expired",
            "Renew the engine's certificate (dockerd --tlscert), or check this machine's clock.",
        )
    if code == _NOT_YET_VALID:
        return refused(
            host,
            "certificate_not_yet_valid",
            "its certificate (or its CA's) is not valid yet",
            "Check the clocks of this machine and of the engine's certificate authority.",
        )
    if code in _NAME_MISMATCH:
        return refused(
            host,
            "name_mismatch",
            f"its certificate does not name the address dialled ({said})",
            "Dial the engine by a name or address its certificate lists (subjectAltName), "
            "or reissue the certificate with that name.",
            server_says=said,
        )
    return refused(
        host,
        "certificate_refused",
        f"its certificate cannot be verified ({said})",
        "Check the engine's certificate and the CA given to the adapter.",
        server_says=said,
    )


def _client_refused(host: str, setup: TlsSetup, alert: str) -> PandoRuntimeError:
    remedy = "Give a client certificate issued by the CA the engine trusts (dockerd --tlscacert)."
    if setup.client_valid is None:
        return refused(
            host,
            "client_certificate_missing",
            "the engine requires a client certificate and none was given",
            "Give the client certificate and key (tls_cert and tls_key, or cert.pem and key.pem "
            "of the TLS folder). " + remedy,
            alert=alert,
        )
    not_before, not_after = setup.client_valid
    now = datetime.now(UTC)
    if now > not_after:
        return refused(
            host,
            "client_certificate_expired",
            f"the engine refused the client certificate: it expired at {not_after.isoformat()}",
            "Renew the client certificate. " + remedy,
            alert=alert,
            not_after=not_after.isoformat(),
        )
    if now < not_before:
        return refused(
            host,
            "client_certificate_not_yet_valid",
            f"the engine refused the client certificate: it is valid from {not_before.isoformat()}",
            "Check this machine's clock and the certificate's dates. " + remedy,
            alert=alert,
            not_before=not_before.isoformat(),
        )
    return refused(
        host,
        "client_certificate_refused",
        "the engine refused the client certificate (not issued by a CA it trusts)",
        remedy,
        alert=alert,
    )
