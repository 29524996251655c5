"""TLS to an engine on ``tcp://``: a failed handshake explained.

The material (a CA, a certificate and its key, as files or PEM text) is loaded by the core's
:func:`~pando_runtime.plugin.load_tls` when the adapter is made. A failed handshake is
explained by :func:`explain_tls`: an unknown CA, a certificate expired or not yet valid, a
name mismatch, a client certificate the engine refused (and why, when the adapter can tell
from its own certificate), a server that does not speak TLS.
"""

from __future__ import annotations

import ssl
from datetime import UTC, datetime

from pando_runtime import PandoRuntimeError
from pando_runtime.plugin import TlsSetup, tls_failure

from ._errors import refused

__all__ = ["explain_tls"]

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


# -- explaining a failed handshake ------------------------------------------------------------


def explain_tls(error: BaseException, host: str, setup: TlsSetup) -> PandoRuntimeError | None:
    """The coded error for a TLS failure somewhere in ``error``'s chain (``None``: not TLS)."""
    cause = tls_failure(error)
    if cause is None:
        return None
    if isinstance(cause, ssl.SSLCertVerificationError):
        return _server_refused(cause, host, setup)
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
