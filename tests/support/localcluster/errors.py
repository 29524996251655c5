"""Exceptions raised by the local control-plane harness."""

from __future__ import annotations


class ClusterError(RuntimeError):
    """Base class for every error of the local cluster harness."""


class BinariesNotFoundError(ClusterError):
    """The control-plane binaries are missing and could not be built."""


class ClusterStartError(ClusterError):
    """A component failed to start or the cluster did not become ready in time."""


class PkiError(ClusterError):
    """Certificates or keys could not be generated."""
