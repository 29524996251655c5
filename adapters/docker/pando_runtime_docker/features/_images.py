"""Images a workload needs: pulled when the daemon lacks them, with per-request credentials."""

from __future__ import annotations

import base64
import json
from typing import Any

from pando_runtime import RegistryAuth

from ..api import EngineError, EngineTransport, progress_error, progress_message, write_failed

__all__ = ["create_pulling", "pull_image", "registry_auth_header"]


def registry_auth_header(auth: RegistryAuth) -> str:
    """The ``X-Registry-Auth`` header's value (base64url JSON); never logged."""
    data: dict[str, str] = {"serveraddress": auth.registry}
    if auth.identity_token:
        data["identitytoken"] = auth.identity_token
    else:
        data["username"] = auth.username or ""
        data["password"] = auth.password or ""
    return base64.urlsafe_b64encode(json.dumps(data).encode()).decode()


async def pull_image(api: EngineTransport, image: str, auth: RegistryAuth | None) -> str | None:
    """Pull ``image``; ``None`` once it is there, else the daemon's words for why not.

    A pull answers 200 and reports a failure inside its JSON stream; a refused start of the
    pull is an error status. Both come back as the reason, for ``problem_detail``.
    """
    headers = {"X-Registry-Auth": registry_auth_header(auth)} if auth else {}
    try:
        async with api.stream(
            "POST",
            "/images/create",
            params={"fromImage": image},
            headers=headers,
            follow=True,
        ) as response:
            async for line in response.aiter_lines():
                message = progress_message(line)
                reason = progress_error(message) if message is not None else None
                if reason:
                    return reason[:300]
    except EngineError as error:
        return error.message or f"the daemon refused the pull ({error.status})"
    return None


async def create_pulling(api: EngineTransport, name: str, body: dict[str, Any], what: str) -> str:
    """Create the adapter's own container ``name`` (an edge, the agent); its id.

    The image is pulled once when the daemon lacks it.

    Raises:
        AdapterFailed: The create or the pull failed (``what`` names the container's role).
    """
    for attempt in range(2):
        try:
            answer = await api.request(
                "POST", "/containers/create", params={"name": name}, body=body
            )
            return str(answer.json()["Id"])
        except EngineError as error:
            if error.not_found and attempt == 0:  # the image is absent: pull it once
                problem = await pull_image(api, str(body["Image"]), None)
                if problem is None:
                    continue
                raise write_failed(error, f"pulling the {what}'s image: {problem}") from None
            raise write_failed(error, f"creating the {what}'s container {name!r}") from None
    raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises
