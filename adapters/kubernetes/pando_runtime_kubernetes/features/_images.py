"""Images: ``import_image`` pushes an archive into the configured registry, ``has_image`` asks it.

Configured by the ``image_registry`` settings (unset: registry delivery only, as before:
``has_image`` is true, ``import_image`` raises ``CapabilityUnsupported``):

- ``image_registry``: the registry's ``host:port`` (HTTPS), where imports go and app pods
  pull from; ``image_registry_repository`` the repository prefix of imports (``pando``: an
  archive of ``docker.io/library/busybox:1.37`` goes to ``<host:port>/pando/busybox``);
  ``image_registry_ca_file`` a PEM bundle of the CA that signed its certificate (unset: the
  system's trust store).
- ``image_registry_username`` and ``image_registry_password_file``: the account the adapter
  pushes and looks with (Basic authentication); the password is read from the file at each
  use (a rotated password is taken up at once), never logged, never in an error, a repr or an
  observed value. ``image_registry_pull_username`` and ``image_registry_pull_password_file``:
  the account app pods pull with (unset: the same), so a read-only account can be the one
  written into app namespaces.

``import_image`` spools the archive to an unlinked temporary file (decompressing gzip, bzip2
or xz on the way), reads it (:mod:`._image_archive`), and pushes: a manifest ``HEAD`` first (an
image already there costs that one call), then per blob a ``HEAD`` and, for a blob the
repository lacks, a ``POST`` and one ``PUT`` of its bytes, then the manifests (children
first). It returns ``<host:port>/<repository>@sha256:<digest>``.

``apply`` (and ``trial``) give a workload whose image is in the registry and whose plan has no
``pull_auth`` the pull account, so it reaches the app's pull secret as a plan's own would.

Errors: the registry unreachable, or failing (5xx), is ``AdapterUnavailable``; credentials it
refuses (401, 403) are ``AdapterFailed`` on an import and ``AdapterUnavailable`` on a look-up,
naming the registry and the user, never the password; a 429 is ``RateLimited``; an archive that
is not an image, or that the registry finds inconsistent, is ``InvalidInput``.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import AsyncIterable
from http import HTTPStatus
from typing import IO, Any

import anyio
import anyio.to_thread
import attrs
from anyio.abc import ByteReceiveStream

from pando_runtime import (
    AdapterFailed,
    AdapterUnavailable,
    BundlePlan,
    Capability,
    CapabilityUnsupported,
    InvalidConfig,
    InvalidInput,
    PandoRuntimeError,
    Problem,
    RateLimited,
    RegistryAuth,
    TrialRequest,
)

from .._info import KubernetesConfig
from .._log import logger
from ..api._image_archive import ImageArchive, read_archive, repository_name
from ..api._image_spool import SPOOL_CHUNK, Spool
from ..api._registry import CaFileError, RegistryClient, RegistryError
from ._registry_settings import (
    DIGEST,
    REPOSITORY,
    TAG,
    Login,
    RegistryAccount,
    read_password,
    registry_settings,
    split_reference,
)

__all__ = ["RegistryImages"]

_LOG = logger("images")
_ARCHIVE_ERRORS = frozenset(
    {
        "DIGEST_INVALID",
        "SIZE_INVALID",
        "MANIFEST_INVALID",
        "MANIFEST_BLOB_UNKNOWN",
        "MANIFEST_UNVERIFIED",
        "BLOB_UNKNOWN",
    }
)
"""Registry error codes that say the archive's content is at fault, not the registry."""


class RegistryImages:
    """``has_image``, ``import_image`` and pull credentials, as the settings configure them."""

    def __init__(self, config: KubernetesConfig) -> None:
        self.settings = registry_settings(config)
        self.client: RegistryClient | None = None
        if self.settings is not None:
            self.client = RegistryClient(
                self.settings.address,
                ca_file=self.settings.ca_file,
                connect_timeout=config.connect_timeout,
                read_timeout=config.read_timeout,
                max_threads=config.max_threads,
            )

    @property
    def configured(self) -> bool:
        """Whether a registry is configured (``image_import`` is offered)."""
        return self.settings is not None

    def __repr__(self) -> str:
        address = self.settings.address if self.settings else None
        return f"RegistryImages(registry={address!r})"

    def close(self) -> None:
        """Close the registry client's connections."""
        if self.client is not None:
            self.client.close()

    # -- where an image is ------------------------------------------------------------------

    def _same_registry(self, registry: str) -> bool:
        if self.settings is None:
            return False
        mine = self.settings.address
        return registry in {mine, mine.removesuffix(":443")} or f"{registry}:443" == mine

    def in_registry(self, reference: str) -> tuple[str, str] | None:
        """The repository and tag or digest of a reference in the configured registry."""
        found = split_reference(reference)
        if found is None or not self._same_registry(found[0]):
            return None
        return found[1], found[2]

    # -- credentials ------------------------------------------------------------------------

    async def _login(self, account: RegistryAccount | None) -> Login | None:
        if account is None:
            return None
        password = await anyio.to_thread.run_sync(read_password, account)
        return Login(account.username, password)

    async def pull_auth(self) -> RegistryAuth | None:
        """The pull account's credentials for a pull secret (``None``: anonymous pulls)."""
        assert self.settings is not None  # noqa: S101 - callers check configured
        login = await self._login(self.settings.pull)
        if login is None:
            return None
        return RegistryAuth(
            registry=self.settings.address, username=login.username, password=login.password
        )

    async def with_pull_auth(self, plan: BundlePlan) -> BundlePlan:
        """``plan`` with the pull account on each workload whose image is in the registry.

        A workload whose plan gives ``pull_auth`` keeps it.
        """
        if self.settings is None or self.settings.pull is None:
            return plan
        needing = [
            i
            for i, w in enumerate(plan.workloads)
            if w.pull_auth is None and self.in_registry(w.image) is not None
        ]
        if not needing:
            return plan
        auth = await self.pull_auth()
        workloads = tuple(
            attrs.evolve(w, pull_auth=auth) if i in needing else w
            for i, w in enumerate(plan.workloads)
        )
        return attrs.evolve(plan, workloads=workloads)

    async def with_trial_pull_auth(self, request: TrialRequest) -> TrialRequest:
        """``request`` with the pull account when its image is in the registry (see above)."""
        if (
            self.settings is None
            or self.settings.pull is None
            or request.pull_auth is not None
            or self.in_registry(request.image) is None
        ):
            return request
        return attrs.evolve(request, pull_auth=await self.pull_auth())

    # -- errors -----------------------------------------------------------------------------

    def _refused(
        self, error: RegistryError, what: str, *, write: bool, user: str | None
    ) -> PandoRuntimeError:
        """The contract's error for a failed registry call (never with a credential)."""
        assert self.settings is not None  # noqa: S101 - only called when configured
        address = self.settings.address
        where = f"image registry {address}"
        details: dict[str, Any] = {"registry": address, "status": error.status}
        if error.codes:
            details["registry_errors"] = list(error.codes)
        codes = f" ({', '.join(error.codes)})" if error.codes else ""
        transient = self._transient(error, what, details)
        if transient is not None:
            return transient
        status = error.status
        refused = AdapterFailed if write else AdapterUnavailable
        if status == HTTPStatus.UNAUTHORIZED:
            return refused(
                self._unauthorized(where, what, user, error),
                remedy=self._credentials_remedy(error),
                details=details,
            )
        if status == HTTPStatus.FORBIDDEN:
            return refused(
                f"{where} does not allow user {user!r} to {what} (403){codes}",
                remedy="Give the registry account the right to push to and pull from "
                + (
                    f"the repositories under {self.settings.repository}/."
                    if self.settings.repository
                    else "the registry's repositories."
                ),
                details=details,
            )
        if write and _ARCHIVE_ERRORS.intersection(error.codes):
            return InvalidInput(
                f"{where} refused the image",
                [Problem("archive", f"the registry refused to {what}{codes}", "bad_tar")],
                remedy="Check the archive: a blob must match its digest and size, and a "
                "manifest the blobs it names.",
                details=details,
            )
        return refused(
            f"{where} refused to {what}: {status} {error.reason}{codes}", details=details
        )

    def _transient(
        self, error: RegistryError, what: str, details: dict[str, Any]
    ) -> PandoRuntimeError | None:
        """Unreachable or failing (``AdapterUnavailable``), throttled (``RateLimited``)."""
        assert self.settings is not None  # noqa: S101 - only called when configured
        address = self.settings.address
        where = f"image registry {address}"
        codes = f" ({', '.join(error.codes)})" if error.codes else ""
        if error.status == 0:
            return AdapterUnavailable(
                f"{where} cannot be reached to {what}: {error.reason}",
                remedy=f"Check that the registry at {address} is up and reachable from the "
                "adapter, and, for a certificate error, that image_registry_ca_file names the "
                "CA that signed its certificate.",
                details=details,
            )
        if error.status == HTTPStatus.TOO_MANY_REQUESTS:
            return RateLimited(
                f"{where} throttled the request to {what}",
                retry_after=error.retry_after,
                details=details,
            )
        if error.status >= HTTPStatus.INTERNAL_SERVER_ERROR:
            return AdapterUnavailable(
                f"{where} failed to {what}: {error.status} {error.reason}{codes}",
                remedy=f"Check the registry at {address} (its storage, its logs), then retry.",
                details=details,
            )
        return None

    @staticmethod
    def _unauthorized(where: str, what: str, user: str | None, error: RegistryError) -> str:
        if (error.challenge or "").lower().startswith("bearer"):
            return (
                f"{where} asks for a bearer token to {what} (401), which the adapter does not "
                "obtain: it sends Basic credentials"
            )
        if user is None:
            return f"{where} asks for credentials to {what} (401); none are configured"
        return f"{where} refused the credentials of user {user!r} to {what} (401)"

    @staticmethod
    def _credentials_remedy(error: RegistryError) -> str:
        if (error.challenge or "").lower().startswith("bearer"):
            return "Use a registry, or an account of it, that takes Basic credentials."
        return (
            "Set image_registry_username and, in the file image_registry_password_file, the "
            "password of an account the registry knows (the file holds the password alone; "
            "one trailing newline is ignored)."
        )

    def _config_error(self, error: CaFileError) -> InvalidConfig:
        return InvalidConfig(
            "the image registry's CA bundle cannot be read",
            [Problem("image_registry_ca_file", f"is not a readable PEM bundle: {error.reason}")],
            remedy="Point image_registry_ca_file at the PEM certificate of the CA that signed "
            "the registry's certificate.",
        )

    # -- has_image --------------------------------------------------------------------------

    async def has_image(self, reference: str) -> bool:
        """Whether the registry has ``reference``; true for an image of another registry.

        Raises:
            InvalidInput: the reference names the registry but is malformed.
            AdapterUnavailable: the registry cannot be asked (down, credentials refused).
        """
        found = self.in_registry(reference)
        if found is None or self.client is None or self.settings is None:
            return True  # registry-only: the kubelet pulls it on start
        repository, ref = found
        if not REPOSITORY.fullmatch(repository) or not (
            DIGEST.fullmatch(ref) or TAG.fullmatch(ref)
        ):
            raise InvalidInput(
                "the image reference is not valid",
                [Problem("reference", f"{reference!r} is not a valid reference", "bad_image")],
            )
        login = await self._login(self.settings.push or self.settings.pull)
        try:
            return await self.client.manifest_exists(
                repository, ref, login.header() if login else None
            )
        except RegistryError as error:
            what = f"look for {repository}:{ref}" if ":" not in ref else f"look for {reference}"
            raise self._refused(
                error, what, write=False, user=login.username if login else None
            ) from None
        except CaFileError as error:
            raise self._config_error(error) from None

    # -- import_image -----------------------------------------------------------------------

    async def import_image(self, source: ByteReceiveStream | AsyncIterable[bytes]) -> str:
        """Push an image archive into the registry; its immutable reference.

        Raises:
            CapabilityUnsupported: no registry is configured.
            InvalidInput: the archive is not an image (each problem names the member).
            AdapterUnavailable: the registry cannot be reached or fails.
            AdapterFailed: the registry refuses the credentials or the push.
        """
        if self.client is None or self.settings is None:
            raise CapabilityUnsupported(
                Capability.IMAGE_IMPORT,
                "no image registry is configured: imports need one (image_registry)",
                remedy="Set image_registry (and its credentials) to import images.",
            )
        client = self.client
        started = time.perf_counter()
        calls = client.calls
        login = await self._login(self.settings.push)
        spool = await anyio.to_thread.run_sync(tempfile.TemporaryFile, limiter=client.limiter)
        try:
            spooled = await self._spool(source, spool)
            archive = await anyio.to_thread.run_sync(read_archive, spool, limiter=client.limiter)
            repository = repository_name(self.settings.repository, archive.name)
            sent = await self._push(archive, repository, spool.fileno(), login)
        except CaFileError as error:
            raise self._config_error(error) from None
        finally:
            spool.close()
        reference = f"{self.settings.address}/{repository}@{archive.image.digest}"
        seconds = time.perf_counter() - started
        _LOG.info(
            "imported %s (%s, %d blobs, %.1f MiB): %d blobs sent, %.1f MiB, %d calls, %.2f s",
            reference,
            archive.format,
            len(archive.blobs),
            archive.blob_bytes / 2**20,
            sent[0],
            sent[1] / 2**20,
            client.calls - calls,
            seconds,
            extra={
                "registry": self.settings.address,
                "repository": repository,
                "digest": archive.image.digest,
                "archive_format": archive.format,
                "archive_bytes": spooled,
                "blobs": len(archive.blobs),
                "blobs_sent": sent[0],
                "bytes_sent": sent[1],
                "calls": client.calls - calls,
                "duration_s": seconds,
            },
        )
        return reference

    async def _spool(
        self, source: ByteReceiveStream | AsyncIterable[bytes], file: IO[bytes]
    ) -> int:
        """Write ``source`` into ``file`` (decompressed); the bytes received."""
        assert self.client is not None  # noqa: S101
        spool = Spool(file)
        pending = bytearray()
        async for chunk in source:
            pending += chunk
            if len(pending) >= SPOOL_CHUNK:
                data = bytes(pending)
                pending.clear()
                await anyio.to_thread.run_sync(spool.feed, data, limiter=self.client.limiter)
        await anyio.to_thread.run_sync(spool.finish, bytes(pending), limiter=self.client.limiter)
        return spool.received

    async def _push(
        self, archive: ImageArchive, repository: str, fd: int, login: Login | None
    ) -> tuple[int, int]:
        """Push what the registry lacks; the blobs and bytes sent."""
        assert self.client is not None  # noqa: S101
        client = self.client
        auth = login.header() if login else None
        image = archive.image
        what = f"look for {repository}@{image.digest}"
        blobs_sent = bytes_sent = 0
        try:
            if await client.manifest_exists(repository, image.digest, auth):
                return 0, 0
            for blob in archive.blobs:
                what = f"look for blob {blob.digest} in {repository}"
                if await client.blob_exists(repository, blob.digest, auth):
                    continue
                what = f"upload blob {blob.digest} ({blob.member}) to {repository}"
                await client.upload(repository, blob, fd, auth)
                blobs_sent += 1
                bytes_sent += blob.size
            for manifest in archive.manifests:
                what = f"put the manifest {manifest.digest} in {repository}"
                stored = await client.put_manifest(repository, manifest, auth)
                if stored is not None and stored != manifest.digest:
                    raise AdapterFailed(
                        f"image registry {client.address} stored the manifest as {stored}, "
                        f"not {manifest.digest}",
                        details={"registry": client.address, "digest": manifest.digest},
                    )
        except RegistryError as error:
            user = login.username if login else None
            raise self._refused(error, what, write=True, user=user) from None
        return blobs_sent, bytes_sent
