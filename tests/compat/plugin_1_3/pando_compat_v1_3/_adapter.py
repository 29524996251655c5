"""The local-process plugin of adapter API 1.3: every workload is a process on this machine.

Every answer of ``observe`` is read when asked (so ``not_before`` never waits). A workload told
to end (SIGTERM, SIGKILL after the grace) is observed ``stopping`` until its process ended, and
a destroyed bundle exists until then: at API 1.3 "gone" promises that nothing still runs.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import attrs
from anyio.abc import ByteReceiveStream

import pando_runtime as pr

from ._info import Settings

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


def _digest(workload: pr.WorkloadPlan) -> str:
    return hashlib.sha256(pr.to_json(workload).encode()).hexdigest()


def _signal(process: subprocess.Popen[bytes], number: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, number)


def _kill(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        _signal(process, signal.SIGKILL)
    process.wait()


def _read(bundle: _Bundle, observe: Any) -> tuple[list[pr.ObservedWorkload], datetime]:
    """The workloads' state, and when it was read (after the reading)."""
    workloads = [observe(bundle.workloads[w.name]) for w in bundle.plan.workloads]
    return workloads, datetime.now(UTC)


class LocalProcessAdapter(pr.RuntimeAdapter):
    """Runs each workload as a local process in a sandbox directory of its own."""

    kind = "compat-1.3"
    description = "Runs each workload as a local process (written for adapter API 1.3)."
    Config = Settings

    def __init__(self, config: Mapping[str, Any] | Settings | None = None) -> None:
        super().__init__(config)
        cfg: Settings = self.config
        self.root = Path(cfg.root or tempfile.mkdtemp(prefix="pando-compat-1-3-"))
        self._bundles: dict[str, _Bundle] = {}

    async def health_check(self) -> None:
        if not os.access(self.root, os.W_OK):
            raise pr.AdapterUnavailable(f"cannot write to {self.root}")

    async def capabilities(self) -> pr.RuntimeCapabilities:
        return pr.RuntimeCapabilities(
            bundle_events=True,
            platform=f"{os.uname().sysname.lower()}/{os.uname().machine}",
        )

    async def aclose(self) -> None:
        for bundle in self._bundles.values():
            for workload in bundle.workloads.values():
                await self._end(workload)

    # -- bundles --------------------------------------------------------------------------

    async def apply(self, plan: pr.BundlePlan) -> pr.BundleHandle:
        pr.check_plan(plan, await self.capabilities())
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
            instance, digest = workload.instance, _digest(workload_plan)
            if instance and instance.exit_code is None and instance.digest == digest:
                continue
            await self._end(workload)
            workload.instance = await anyio.to_thread.run_sync(self._start, workload, digest)
        return pr.BundleHandle(bundle_id=plan.bundle_id, handle=str(self.root / plan.bundle_id))

    def _start(self, workload: _Workload, digest: str) -> _Instance:
        plan = workload.plan
        argv = [*plan.entrypoint, *plan.command]
        if not argv:
            raise pr.AdapterFailed(
                f"workload {plan.name!r} has no command to run here",
                remedy="Give the workload an entrypoint or command.",
            )
        if workload.sandbox.exists():
            shutil.rmtree(workload.sandbox)
        workload.sandbox.mkdir(parents=True)
        started_at = datetime.now(UTC)
        log = workload.sandbox.parent / f".{plan.name}-{time.time_ns()}.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                argv,
                cwd=workload.sandbox,
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
            _signal(instance.process, signal.SIGTERM)
            cfg: Settings = self.config
            with anyio.move_on_after(cfg.stop_grace_seconds):
                while instance.process.poll() is None:
                    await anyio.sleep(0.02)
            await anyio.to_thread.run_sync(_kill, instance.process)
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
                done = subprocess.run(
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
                return bool(200 <= answer.status < 400)
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

    async def observe(
        self,
        ref: pr.BundleRef,
        *,
        not_before: datetime | None = None,  # every answer is read now
    ) -> pr.ObservedBundle:
        bundle = self._bundles.get(ref.bundle_id)
        if bundle is None:
            return pr.ObservedBundle(
                bundle_id=ref.bundle_id, exists=False, confirmed_at=datetime.now(UTC)
            )
        workloads, read_at = await anyio.to_thread.run_sync(_read, bundle, self._observe_workload)
        return pr.ObservedBundle(
            bundle_id=ref.bundle_id, exists=True, workloads=workloads, confirmed_at=read_at
        )

    async def stop(self, ref: pr.BundleRef) -> None:
        bundle = self._bundles.get(ref.bundle_id)
        for workload in bundle.workloads.values() if bundle else ():
            await self._end(workload)

    async def destroy(self, ref: pr.BundleRef, options: pr.DestroyOptions | None = None) -> None:
        bundle = self._bundles.get(ref.bundle_id)
        for workload in bundle.workloads.values() if bundle else ():
            await self._end(workload)  # observed stopping meanwhile: the bundle stays till then
        self._bundles.pop(ref.bundle_id, None)

    def upstream(self, ref: pr.WorkloadRef, port: int) -> pr.Upstream:
        return pr.Upstream(url=f"http://127.0.0.1:{port}", pool_key=f"compat-1.3/{port}")

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
            total_memory_bytes=os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"),
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
                workload = bundle.workloads.get(workload_plan.name)
                instance = workload.instance if workload is not None else None
                if instance is not None:
                    state[bundle_id, workload_plan.name] = (
                        instance.instance_id,
                        instance.exit_code,
                    )
        return state

    async def _poll(self, send: Any) -> None:
        cfg: Settings = self.config
        seen = self._snapshot()
        await send.send(pr.BundleEvent(kind=pr.BundleEventKind.WATCHING, at=datetime.now(UTC)))
        while True:
            await anyio.sleep(cfg.poll_seconds)
            now, at = self._snapshot(), datetime.now(UTC)
            events: list[tuple[pr.BundleEventKind, tuple[str, str], int | None]] = []
            for key, (instance_id, exit_code) in now.items():
                before = seen.get(key)
                if before is None or before[0] != instance_id:
                    if before is not None and before[1] is None:
                        events.append((pr.BundleEventKind.REMOVED, key, None))
                    events.append((pr.BundleEventKind.STARTED, key, None))
                    before = (instance_id, None)
                if before[1] is None and exit_code is not None:
                    events.append((pr.BundleEventKind.EXITED, key, exit_code))
            events += [(pr.BundleEventKind.REMOVED, key, None) for key in seen.keys() - now.keys()]
            for kind, (bundle_id, workload), exit_code in events:
                await send.send(
                    pr.BundleEvent(
                        kind=kind,
                        at=at,
                        bundle_id=bundle_id,
                        workload=workload,
                        exit_code=exit_code,
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

    # -- logs -----------------------------------------------------------------------------

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
        bundle = self._bundles.get(ref.bundle_id)
        workload = bundle.workloads.get(ref.workload) if bundle else None
        if workload is None or workload.instance is None:
            raise pr.NotFound(f"workload {ref.workload!r} of {ref.bundle_id!r} has no instance")
        stream = pr.plugin.IteratorByteStream(
            self._read_log(workload.instance, options or pr.LogOptions())
        )
        try:
            yield stream
        finally:
            await stream.aclose()
