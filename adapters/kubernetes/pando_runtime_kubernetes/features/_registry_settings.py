"""The image registry's settings, its accounts, and where an image reference points.

``registry_settings`` checks the ``image_registry*`` settings (every problem at its key); an
account names the file its password is in, read at each use by :func:`read_password` and kept
no longer than the :class:`Login` of one operation. :func:`split_reference` reads a reference
as container runtimes do.
"""

from __future__ import annotations

import base64
import re

import attrs

from pando_runtime import InvalidConfig, Problem

from .._info import KubernetesConfig

__all__ = [
    "DIGEST",
    "REPOSITORY",
    "TAG",
    "Login",
    "RegistryAccount",
    "RegistrySettings",
    "read_password",
    "registry_settings",
    "split_reference",
]

_ADDRESS = re.compile(
    r"(?:[a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)*|\[[0-9a-f:.]+\])"
    r"(?::(?P<port>[0-9]{1,5}))?"
)
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
REPOSITORY = re.compile(rf"{_COMPONENT}(?:/{_COMPONENT})*")
"""A repository path, as the distribution spec allows it."""
TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_PORT_MAX = 65535


@attrs.frozen
class RegistryAccount:
    """A registry account: a user and the file that holds its password (never the password)."""

    username: str
    password_file: str
    setting: str
    """The name of the setting that names the file (for errors)."""


@attrs.frozen
class RegistrySettings:
    """The ``image_registry`` settings, checked."""

    address: str
    repository: str
    ca_file: str | None
    push: RegistryAccount | None
    pull: RegistryAccount | None
    """The account app pods pull with: the pull settings', else the push account."""


def _account(
    config: KubernetesConfig, user_key: str, file_key: str, problems: list[Problem]
) -> RegistryAccount | None:
    username, password_file = getattr(config, user_key), getattr(config, file_key)
    if username is None and password_file is None:
        return None
    if username is None:
        problems.append(Problem(user_key, f"is needed with {file_key}", "missing"))
    elif password_file is None:
        problems.append(Problem(file_key, f"is needed with {user_key}", "missing"))
    elif not username or ":" in username:
        problems.append(Problem(user_key, "must be a user name without ':'", "invalid"))
    else:
        return RegistryAccount(username, password_file, file_key)
    return None


def registry_settings(config: KubernetesConfig) -> RegistrySettings | None:
    """The registry settings, or ``None`` when ``image_registry`` is unset.

    Raises:
        InvalidConfig: a setting is malformed, or set without ``image_registry``.
    """
    problems: list[Problem] = []
    push = _account(config, "image_registry_username", "image_registry_password_file", problems)
    pull = _account(
        config, "image_registry_pull_username", "image_registry_pull_password_file", problems
    )
    address = config.image_registry
    if address is None:
        problems += [
            Problem(key, "has no effect without image_registry", "conflict")
            for key in (
                "image_registry_ca_file",
                "image_registry_username",
                "image_registry_password_file",
                "image_registry_pull_username",
                "image_registry_pull_password_file",
            )
            if getattr(config, key) is not None
        ]
    else:
        address = address.lower()
        match = _ADDRESS.fullmatch(address)
        if match is None or not 0 < int(match["port"] or 443) <= _PORT_MAX:
            problems.append(
                Problem(
                    "image_registry",
                    f"{config.image_registry!r} is not host:port (no scheme, no path)",
                    "invalid",
                )
            )
    repository = config.image_registry_repository.strip("/")
    if repository and not REPOSITORY.fullmatch(repository):
        problems.append(
            Problem(
                "image_registry_repository",
                f"{config.image_registry_repository!r} is not a repository path "
                "(lower-case letters and digits, separated by '.', '_', '-' or '/')",
                "invalid",
            )
        )
    if problems:
        raise InvalidConfig(
            "the image registry settings are not valid",
            problems,
            remedy="Set image_registry to the registry's host:port; give a user and a password "
            "file together; leave the other image_registry_* settings unset without it.",
        )
    if address is None:
        return None
    return RegistrySettings(
        address=address,
        repository=repository,
        ca_file=config.image_registry_ca_file,
        push=push,
        pull=pull or push,
    )


def read_password(account: RegistryAccount) -> str:
    """The password in the account's file (one trailing newline ignored)."""
    try:
        with open(account.password_file, "rb") as f:  # noqa: PTH123 - a path from settings
            raw = f.read(64 * 1024)
    except OSError as error:
        problem = Problem(account.setting, f"cannot be read: {error.strerror}", "invalid")
        raise InvalidConfig(
            "the image registry's password file cannot be read",
            [problem],
            remedy=f"Make the file that {account.setting} names readable by the adapter.",
        ) from None
    text = raw.decode("utf-8", "replace").removesuffix("\n").removesuffix("\r")
    if not text:
        raise InvalidConfig(
            "the image registry's password file is empty",
            [Problem(account.setting, "names an empty file", "invalid")],
            remedy=f"Write the password into the file that {account.setting} names.",
        )
    return text


@attrs.frozen
class Login:
    """An account's credentials for one operation (kept no longer)."""

    username: str
    password: str = attrs.field(repr=False)

    def header(self) -> str:
        token = base64.b64encode(f"{self.username}:{self.password}".encode()).decode()
        return f"Basic {token}"


def split_reference(reference: str) -> tuple[str, str, str] | None:
    """A reference's registry, repository and tag or digest; ``None`` without a registry.

    The registry part is there when the first component has a ``.`` or a ``:`` or is
    ``localhost``, as container runtimes read it.
    """
    rest, _, digest = reference.partition("@")
    first, slash, path = rest.partition("/")
    if not slash or not ("." in first or ":" in first or first == "localhost"):
        return None
    tag = ""
    head, _, last = path.rpartition("/")
    if ":" in last:
        last, tag = last.split(":", 1)
        path = f"{head}/{last}" if head else last
    return first.lower(), path, digest or tag or "latest"
