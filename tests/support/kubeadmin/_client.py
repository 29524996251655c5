"""An admin client of a kubeconfig, and the raw response of an unpreloaded call."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the official client loads when used: collecting the tests stays light
    import urllib3
    from kubernetes.client import ApiClient


@contextlib.contextmanager
def admin_client(
    kubeconfig: str | os.PathLike[str], context: str | None = None
) -> Iterator[ApiClient]:
    """An ``ApiClient`` of ``kubeconfig`` (never the global configuration), closed at the end.

    Args:
        kubeconfig: the kubeconfig file (the cluster's admin one, for an administrator).
        context: its context to use (None: the current one).

    Yields:
        The client.
    """
    from kubernetes import config  # noqa: PLC0415

    # The official client leaves these two unannotated (its generated API is typed).
    client: ApiClient = config.new_client_from_config(  # type: ignore[no-untyped-call]
        config_file=os.fspath(kubeconfig), context=context
    )
    try:
        yield client
    finally:
        client.close()  # type: ignore[no-untyped-call]


def unread(response: object) -> urllib3.BaseHTTPResponse:
    """The raw response of a call made with ``_preload_content=False``.

    The official client annotates each call with the model it decodes, whatever
    ``_preload_content`` says; without preloading it returns urllib3's response, unread.

    Args:
        response: what the call returned.

    Returns:
        The response (its ``data``, or ``stream()`` for a watch).

    Raises:
        TypeError: the call preloaded (it returned something else).
    """
    import urllib3  # noqa: PLC0415

    if not isinstance(response, urllib3.BaseHTTPResponse):
        raise TypeError(f"not an unread response: {type(response).__name__}")
    return response
