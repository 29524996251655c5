"""The local-process adapter: every workload is a process on this machine."""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import shutil
import signal
import subprocess
import tarfile
import tempfile
import time
import urllib.request
from collections.abc import AsyncIterable, AsyncIterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import attrs
from anyio.abc import ByteReceiveStream, Process

import pando_runtime as pr

from ._info import ADAPTER, LocalProcessConfig

__all__ = ["LocalProcessAdapter"]

_SIGNAL_EXIT_BASE = 128  # a shell reports death by signal N as 128 + N


@attrs.define
class _Instance:
    process: subprocess.Popen[bytes]
    digest: str
    started_at: datetime
    log: Path

    @property
    def instance_id(self) -> str:
        return f"pid-{self.process.pid}-{int(self.started_at.timestamp() * 1e6)}"

    @property
    def exit_code(self) -> int | None:
        code = self.process.poll()
        if code is None:
            return None
        return _SIGNAL_EXIT_BASE - code if code < 0 else code


@attrs.define
class _Workload:
    plan: pr.WorkloadPlan
    sandbox: Path
    instance: _Instance | None = None
    stopping: bool = False  # told to end (SIGTERM sent), its process still running


@attrs.define
class _Bundle:
    plan: pr.BundlePlan
    workloads: dict[str, _Workload]


class _ProcessExec(pr.ExecSession):
    def __init__(self, process: Process, *, want_stdin: bool) -> None:
        self._process = process
        self.stdin = process.stdin if want_stdin else None
        assert process.stdout is not None
        assert process.stderr is not None
        self.stdout = process.stdout
        self.stderr = process.stderr

    async def resize(self, rows: int, columns: int) -> None:
        await anyio.lowlevel.checkpoint()  # no pseudo-terminal: nothing to resize

    async def wait(self) -> int | None:
        code = await self._process.wait()
        return _SIGNAL_EXIT_BASE - code if code < 0 else code

    async def aclose(self) -> None:
        if self._process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._process.kill()
        await self._process.aclose()


def _digest(workload: pr.WorkloadPlan) -> str:
    return hashlib.sha256(pr.to_json(workload).encode()).hexdigest()


def _total_memory() -> int:
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    return 0


class LocalProcessAdapter(pr.RuntimeAdapter):
    """Runs each workload as a local process in a sandbox directory of its own."""

    kind = "localproc"
    api_version = ADAPTER.api_version  # the adapter API this class implements
    description = "Runs each workload as a local process (an example third-party adapter)."
    Config = LocalProcessConfig

    def __init__(self, config: Mapping[str, Any] | LocalProcessConfig | None = None) -> None:
        super().__init__(config)
        cfg: LocalProcessConfig = self.config
        self.root = Path(cfg.root or tempfile.mkdtemp(prefix="pando-localproc-"))
        self._bundles: dict[str, _Bundle] = {}
        self._volumes: dict[str, pr.VolumeRequest] = {}

    # -- identity & health ----------------------------------------------------------------

    async def health_check(self) -> None:
        if not os.access(self.root, os.W_OK):
            raise pr.AdapterUnavailable(f"cannot write to {self.root}")

    async def capabilities(self) -> pr.RuntimeCapabilities:
        return pr.RuntimeCapabilities(
            isolation_class=pr.IsolationClass.PROCESS,
            persistent_volumes=True,
            exec=True,
            multiple_workloads=True,
            carried_files=True,
            bundle_events=True,
            image_delivery=(pr.ImageDelivery.REGISTRY,),
            platform=f"{os.uname().sysname.lower()}/{os.uname().machine}",
        )

    async def aclose(self) -> None:
        for bundle in self._bundles.values():
            for workload in bundle.workloads.values():
                await self._end(workload)

    # -- bundles --------------------------------------------------------------------------

    async def apply(self, plan: pr.BundlePlan) -> pr.BundleHandle:
        pr.check_plan(plan, await self.capabilities())
        for volume in plan.volumes:
            await self.create_volume(
                pr.VolumeRequest(
                    volume_id=volume.volume_id, bundle_id=plan.bundle_id, name=volume.name
                )
            )
        bundle = self._bundles.setdefault(plan.bundle_id, _Bundle(plan=plan, workloads={}))
        bundle.plan = plan
        for name in [n for n in bundle.workloads if n not in {w.name for w in plan.workloads}]:
            await self._end(bundle.workloads.pop(name))
        for workload_plan in plan.start_order():
            sandbox = self.root / "bundles" / plan.bundle_id / workload_plan.name
            workload = bundle.workloads.setdefault(
                workload_plan.name, _Workload(plan=workload_plan, sandbox=sandbox)
            )
            workload.plan = workload_plan
            instance = workload.instance
            digest = _digest(workload_plan)
            if instance and instance.exit_code is None and instance.digest == digest:
                continue
            await self._end(workload)
            workload.instance = await anyio.to_thread.run_sync(self._start, workload, digest)
        return pr.BundleHandle(bundle_id=plan.bundle_id, handle=str(self.root / plan.bundle_id))

    def _start(self, workload: _Workload, digest: str) -> _Instance:
        plan = workload.plan
        if workload.sandbox.exists():
            shutil.rmtree(workload.sandbox)
        workload.sandbox.mkdir(parents=True)
        for mount in plan.mounts:
            link = workload.sandbox / mount.path.lstrip("/")
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(self._volume_dir(mount.volume_id))
        for carried in plan.files:
            target = workload.sandbox / carried.path.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(carried.content)
            target.chmod(carried.mode)
        started_at = datetime.now(UTC)
        log = workload.sandbox.parent / f".{plan.name}-{time.time_ns()}.log"
        argv = [*plan.entrypoint, *plan.command]
        if not argv:
            raise pr.AdapterFailed(
                f"workload {plan.name!r} has no command to run here",
                remedy="Give the workload an entrypoint or command.",
            )
        with log.open("wb") as out:
            process = subprocess.Popen(  # noqa: S603 - the host's plan is the command
                argv,
                cwd=workload.sandbox / (plan.working_dir or "").lstrip("/"),
                env={"PATH": os.environ.get("PATH", ""), "HOME": str(workload.sandbox), **plan.env},
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return _Instance(process=process, digest=digest, started_at=started_at, log=log)

    async def _end(self, workload: _Workload) -> None:
        """SIGTERM, then SIGKILL after the grace; observed stopping until the process ended."""
        instance = workload.instance
        if instance is None or instance.process.poll() is not None:
            workload.instance = None
            return
        workload.stopping = True
        try:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(instance.process.pid, signal.SIGTERM)
            cfg: LocalProcessConfig = self.config
            with anyio.move_on_after(cfg.stop_grace_seconds):
                while instance.process.poll() is None:
                    await anyio.sleep(0.02)
            if instance.process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(instance.process.pid, signal.SIGKILL)
                await anyio.to_thread.run_sync(instance.process.wait)
        finally:
            workload.stopping = False
            if workload.instance is instance:
                workload.instance = None

    def _healthy(self, workload: _Workload) -> bool | None:
        health = workload.plan.health
        if health is None:
            return None
        if health.command:
            try:
                done = subprocess.run(  # noqa: S603
                    list(health.command),
                    cwd=workload.sandbox,
                    timeout=health.timeout_seconds,
                    capture_output=True,
                    check=False,
                    env={"PATH": os.environ.get("PATH", ""), **workload.plan.env},
                )
            except (OSError, subprocess.TimeoutExpired):
                return False
            return done.returncode == 0
        url = f"http://127.0.0.1:{health.port}{health.http_path}"
        try:
            with urllib.request.urlopen(url, timeout=health.timeout_seconds) as answer:
                return bool(200 <= answer.status < 400)  # noqa: PLR2004
        except OSError:
            return False

    def _observe_workload(self, workload: _Workload) -> pr.ObservedWorkload:
        instance = workload.instance
        if instance is None:
            return pr.ObservedWorkload(name=workload.plan.name, present=False, running=False)
        exit_code = instance.exit_code
        return pr.ObservedWorkload(
            name=workload.plan.name,
            present=True,
            running=exit_code is None,
            instance_id=instance.instance_id,
            started_at=instance.started_at,
            exit_code=exit_code,
            healthy=self._healthy(workload) if exit_code is None else None,
            stopping=workload.stopping and exit_code is None,
        )

    def _observed_volumes(
        self, bundle_id: str, plan: pr.BundlePlan | None
    ) -> list[pr.ObservedVolume]:
        ids = {v.volume_id for v in plan.volumes} if plan else set()
        ids |= {v for v, r in self._volumes.items() if r.bundle_id == bundle_id}
        return [
            pr.ObservedVolume(
                volume_id=v,
                present=v in self._volumes,
                handle=self._handle(v) if v in self._volumes else None,
            )
            for v in sorted(ids)
        ]

    async def observe(
        self,
        ref: pr.BundleRef,
        *,
        not_before: datetime | None = None,  # every answer is read now
    ) -> pr.ObservedBundle:
        bundle = self._bundles.get(ref.bundle_id)
        if bundle is None:
            return pr.ObservedBundle(
                bundle_id=ref.bundle_id,
                exists=False,
                volumes=self._observed_volumes(ref.bundle_id, None),
            )
        workloads = await anyio.to_thread.run_sync(
            lambda: [
                self._observe_workload(bundle.workloads[w.name]) for w in bundle.plan.workloads
            ]
        )
        return pr.ObservedBundle(
            bundle_id=ref.bundle_id,
            exists=True,
            workloads=workloads,
            volumes=self._observed_volumes(ref.bundle_id, bundle.plan),
        )

    async def stop(self, ref: pr.BundleRef) -> None:
        bundle = self._bundles.get(ref.bundle_id)
        for workload in bundle.workloads.values() if bundle else ():
            if workload.instance and workload.instance.exit_code is None:
                await self._end(workload)

    async def destroy(self, ref: pr.BundleRef, options: pr.DestroyOptions | None = None) -> None:
        bundle = self._bundles.get(ref.bundle_id)
        for workload in bundle.workloads.values() if bundle else ():
            await self._end(workload)  # observed stopping meanwhile: the bundle stays till then
        self._bundles.pop(ref.bundle_id, None)
        shutil.rmtree(self.root / "bundles" / ref.bundle_id, ignore_errors=True)
        if options is not None and not options.keep_volumes:
            for volume_id in [v for v, r in self._volumes.items() if r.bundle_id == ref.bundle_id]:
                await self.destroy_volume(self._handle(volume_id))

    def upstream(self, ref: pr.WorkloadRef, port: int) -> pr.Upstream:
        return pr.Upstream(url=f"http://127.0.0.1:{port}", pool_key=f"localproc/{port}")

    # -- capacity -------------------------------------------------------------------------

    async def capacity(self) -> pr.Capacity:
        running = sum(
            1
            for b in self._bundles.values()
            for w in b.workloads.values()
            if w.instance and w.instance.exit_code is None
        )
        return pr.Capacity(
            total_cpu_millis=(os.cpu_count() or 1) * 1000,
            total_memory_bytes=_total_memory(),
            reported_at=datetime.now(UTC),
            running_workloads=running,
        )

    async def largest_fit_for(self, bundle_id: str) -> pr.Fit | None:
        return None  # one machine: capacity() says it all

    # -- events ---------------------------------------------------------------------------

    def _snapshot(self) -> dict[tuple[str, str], tuple[str, int | None]]:
        state = {}
        for bundle_id, bundle in self._bundles.items():
            for workload_plan in bundle.plan.start_order():
                # A workload waiting for its dependencies during an apply has no entry yet.
                workload = bundle.workloads.get(workload_plan.name)
                instance = workload.instance if workload is not None else None
                if instance is not None:
                    key = (bundle_id, workload_plan.name)
                    state[key] = (instance.instance_id, instance.exit_code)
        return state

    async def _poll(self, send: Any) -> None:
        cfg: LocalProcessConfig = self.config
        seen = self._snapshot()
        await send.send(pr.BundleEvent(kind=pr.BundleEventKind.WATCHING, at=datetime.now(UTC)))
        while True:
            await anyio.sleep(cfg.poll_seconds)
            now, at = self._snapshot(), datetime.now(UTC)
            for key, (instance_id, exit_code) in now.items():
                before = seen.get(key)
                if before is None or before[0] != instance_id:
                    if before is not None and before[1] is None:
                        await send.send(
                            pr.BundleEvent(
                                kind=pr.BundleEventKind.REMOVED,
                                at=at,
                                bundle_id=key[0],
                                workload=key[1],
                            )
                        )
                    await send.send(
                        pr.BundleEvent(
                            kind=pr.BundleEventKind.STARTED,
                            at=at,
                            bundle_id=key[0],
                            workload=key[1],
                        )
                    )
                    before = (instance_id, None)
                if before[1] is None and exit_code is not None:
                    await send.send(
                        pr.BundleEvent(
                            kind=pr.BundleEventKind.EXITED,
                            at=at,
                            bundle_id=key[0],
                            workload=key[1],
                            exit_code=exit_code,
                        )
                    )
            for key in seen.keys() - now.keys():
                await send.send(
                    pr.BundleEvent(
                        kind=pr.BundleEventKind.REMOVED, at=at, bundle_id=key[0], workload=key[1]
                    )
                )
            seen = now

    @contextlib.asynccontextmanager
    async def watch_bundles(self) -> AsyncIterator[AsyncIterator[pr.BundleEvent]]:
        send, stream = pr.plugin.bundle_event_channel()
        async with anyio.create_task_group() as group:
            group.start_soon(self._poll, send)
            try:
                yield stream
            finally:
                group.cancel_scope.cancel()
                send.close()
                await stream.aclose()

    # -- logs and exec --------------------------------------------------------------------

    def _workload(self, ref: pr.WorkloadRef) -> _Workload:
        bundle = self._bundles.get(ref.bundle_id)
        workload = bundle.workloads.get(ref.workload) if bundle else None
        if workload is None or workload.instance is None:
            raise pr.NotFound(f"workload {ref.workload!r} of {ref.bundle_id!r} has no instance")
        return workload

    async def _read_log(self, instance: _Instance, options: pr.LogOptions) -> AsyncIterator[bytes]:
        async with await anyio.open_file(instance.log, "rb") as log:
            data = await log.read()
            if options.tail is not None:
                lines = data.splitlines(keepends=True)
                data = b"".join(lines[-options.tail :]) if options.tail else b""
            if data:
                yield data
            while options.follow:
                chunk = await log.read()
                if chunk:
                    yield chunk
                elif instance.exit_code is not None:
                    return
                else:
                    await anyio.sleep(0.05)

    @contextlib.asynccontextmanager
    async def logs(
        self, ref: pr.WorkloadRef, options: pr.LogOptions | None = None
    ) -> AsyncIterator[ByteReceiveStream]:
        instance = self._workload(ref).instance
        assert instance is not None
        stream = pr.plugin.IteratorByteStream(self._read_log(instance, options or pr.LogOptions()))
        try:
            yield stream
        finally:
            await stream.aclose()

    @contextlib.asynccontextmanager
    async def exec(
        self, ref: pr.WorkloadRef, request: pr.ExecRequest
    ) -> AsyncIterator[pr.ExecSession]:
        workload = self._workload(ref)
        if workload.instance is None or workload.instance.exit_code is not None:
            raise pr.NotFound(f"workload {ref.workload!r} of {ref.bundle_id!r} is not running")
        env = {"PATH": os.environ.get("PATH", ""), **workload.plan.env, **request.env}
        process = await anyio.open_process(list(request.command), cwd=workload.sandbox, env=env)
        session = _ProcessExec(process, want_stdin=request.stdin)
        if not request.stdin and process.stdin is not None:
            await process.stdin.aclose()
        try:
            yield session
        finally:
            await session.aclose()

    # -- volumes --------------------------------------------------------------------------

    def _volume_dir(self, volume_id: str) -> Path:
        return self.root / "volumes" / volume_id

    def _handle(self, volume_id: str) -> pr.VolumeHandle:
        return pr.VolumeHandle(volume_id=volume_id, handle=str(self._volume_dir(volume_id)))

    async def create_volume(self, request: pr.VolumeRequest) -> pr.VolumeHandle:
        pr.plugin.raise_problems(
            pr.plugin.validate_volume_request(request), f"volume {request.volume_id!r}"
        )
        self._volumes.setdefault(request.volume_id, request)
        self._volume_dir(request.volume_id).mkdir(parents=True, exist_ok=True)
        return self._handle(request.volume_id)

    async def destroy_volume(self, handle: pr.VolumeHandle) -> None:
        self._volumes.pop(handle.volume_id, None)
        shutil.rmtree(self._volume_dir(handle.volume_id), ignore_errors=True)

    def _tar(self, directory: Path) -> bytes:
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as archive:
            for path in sorted(directory.rglob("*")):
                archive.add(path, arcname=str(path.relative_to(directory)), recursive=False)
        return buffer.getvalue()

    @contextlib.asynccontextmanager
    async def snapshot_volume(self, handle: pr.VolumeHandle) -> AsyncIterator[ByteReceiveStream]:
        if handle.volume_id not in self._volumes:
            raise pr.NotFound(f"no volume {handle.volume_id!r}")
        data = await anyio.to_thread.run_sync(self._tar, self._volume_dir(handle.volume_id))
        yield pr.BytesReceiveStream(data)

    def _untar(self, directory: Path, data: bytes) -> None:
        staging = Path(tempfile.mkdtemp(dir=directory.parent, prefix=".restore-"))
        try:
            with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as archive:
                archive.extractall(staging, filter="data")  # refuses members leaving the volume
        except tarfile.TarError as error:
            shutil.rmtree(staging)
            raise pr.InvalidInput(
                "not a usable tar archive", [pr.Problem("", str(error), "bad_tar")]
            ) from None
        for entry in directory.iterdir():  # in place: the directory itself stays
            shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
        for entry in staging.iterdir():
            entry.rename(directory / entry.name)
        staging.rmdir()

    async def restore_volume(
        self, handle: pr.VolumeHandle, source: ByteReceiveStream | AsyncIterable[bytes]
    ) -> None:
        if handle.volume_id not in self._volumes:
            await self.create_volume(
                pr.VolumeRequest(
                    volume_id=handle.volume_id, bundle_id=handle.volume_id, name=handle.volume_id
                )
            )
        data = await pr.read_all(source)
        await anyio.to_thread.run_sync(self._untar, self._volume_dir(handle.volume_id), data)
