"""The node's ResourceSlices, kept as the devices and their health say, for as long as the
plugin runs.

- The slices of this node's pool (``spec.nodeName`` and ``spec.driver`` this node's and this
  driver's) are watched; any difference from what the devices say is written: created,
  updated (the stored resourceVersion, so a concurrent writer is a 409 and a retry), surplus
  slices of the pool deleted; each change of content is a new pool generation on every slice,
  as the scheduler only trusts a pool whose slices all have the newest one.
- A slice the kubelet deleted (it wipes a driver's slices when the plugin unregisters, and
  after its own restart) is written again as soon as the watch says so.
- On a plain exit nothing is deleted: the kubelet wipes the slices itself, after a delay, so a
  restarted or upgraded plugin takes them over without a scheduling gap.
- A device marked Unhealthy carries a taint (``nvct.dra.taints``). The answer to each write is
  the slice as stored; where the API server dropped the taints (the DRADeviceTaints feature
  is off there, and it drops them without an error), Unhealthy devices are left out of the
  slice instead, from then on.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import structlog

from nvct.dra.slices import Device, comparable, dropped_taints, slice_name, slice_specs
from nvct.dra.taints import health_taint
from nvct.kubeapi.client.errors import KubeApiError, describe
from nvct.kubeapi.client.reflect import Reflector

if TYPE_CHECKING:
    from lightkube import Client

RETRY_S = 0.2  # after a refused or failed write (a 409: the watch brings the newer object)

log = structlog.get_logger("nvct-dra-plugin")


def _version(obj: Mapping[str, Any]) -> int:
    try:
        return int(obj.get("metadata", {}).get("resourceVersion") or 0)
    except ValueError:
        return 0


class Publisher:
    """Publishes ``driver``'s devices on ``node`` through ``client`` (nvct's API client).

    ``run(devices, stop)`` publishes and keeps the slices until ``stop`` is set;
    ``update(devices)`` replaces the devices (a GPU gone from the node leaves the slice);
    ``health(name, healthy, reason)`` taints or clears one device. Both may be called from
    any thread, before or during ``run``.
    """

    def __init__(
        self,
        client: Client,
        node: str,
        driver: str,
        *,
        server: str = "",
        token_file: str | None = None,
    ) -> None:
        self.client, self.node, self.driver = client, node, driver
        self.server, self.token_file = server, token_file
        self.taints_dropped = False  # the API server dropped a taint: leave such devices out
        self.writes = 0  # slices created, updated or deleted (for tests and the bench)
        self._devices: list[dict[str, Any]] = []
        self._unhealthy: dict[str, str] = {}  # device name -> the health policy's reason
        self._seen: dict[str, dict[str, Any]] = {}  # the pool's slices, as watched
        self._newest: dict[str, int] = {}  # the newest resourceVersion seen of each name
        self._written: dict[str, tuple[Any, Any]] = {}  # name -> (spec sent, as stored)
        self._synced = False
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self.in_sync = threading.Event()  # set while the slices say what the devices say
        self._stopped = threading.Event()

    # inputs
    def update(self, devices: Sequence[Device]) -> None:
        with self._lock:
            self._devices = [dict(d) for d in devices]
        self._changed()

    def health(self, name: str, healthy: bool, reason: str = "") -> None:
        with self._lock:
            if healthy:
                if self._unhealthy.pop(name, None) is None:
                    return
            else:
                if self._unhealthy.get(name) == reason:
                    return
                self._unhealthy[name] = reason
        log.info("device health", device=name, healthy=healthy, reason=reason)
        self._changed()

    def _changed(self) -> None:
        self.in_sync.clear()
        self._wake.set()

    def desired(self) -> list[dict[str, Any]]:
        """The devices as the slices must show them, health applied."""
        with self._lock:
            out = []
            for device in self._devices:
                reason = self._unhealthy.get(str(device["name"]))
                if reason is None:
                    out.append(device)
                elif not self.taints_dropped:
                    out.append({**device, "taints": [health_taint(self.driver, reason)]})
            return out

    # the watch's view
    def _sync(self, objects: list[Any]) -> None:
        with self._lock:
            self._seen = {o.metadata.name: o.to_dict() for o in objects}
            for name, body in self._seen.items():
                self._newest[name] = max(self._newest.get(name, 0), _version(body))
            self._synced = True
        self._changed()

    def _event(self, kind: str, obj: Any) -> None:
        self._learn(obj.metadata.name, obj.to_dict(), deleted=kind == "DELETED")
        self._changed()

    def _learn(self, name: str, body: dict[str, Any], *, deleted: bool = False) -> None:
        """Take ``body`` (a watch event's or a write's answer) unless something newer of that
        name was seen: a write's answer can arrive after the watch said the slice was deleted
        (the kubelet's wipe racing a write), and must not bring it back."""
        version = _version(body)
        with self._lock:
            if version < self._newest.get(name, 0):
                return
            self._newest[name] = version
            if deleted:
                self._seen.pop(name, None)
            else:
                self._seen[name] = body

    def _error(self, err: KubeApiError) -> None:
        if not self._stopped.is_set():  # a watch broken by the end of run is no news
            log.warning("watching ResourceSlices", error=err.one_line())

    # the loop
    def run(self, devices: Sequence[Device], stop: threading.Event) -> None:
        """Publish ``devices`` and keep the slices until ``stop``; raises KubeApiError when
        the API server refuses the plugin (403: its RBAC rules; 401 at the start)."""
        from lightkube.resources.resource_v1 import ResourceSlice

        self.update(devices)
        self._stopped.clear()
        failure: list[KubeApiError] = []
        reflector = Reflector(
            self.client,
            ResourceSlice,
            self.server,
            self.token_file,
            on_sync=self._sync,
            on_event=self._event,
            on_error=self._error,
            fields={"spec.nodeName": self.node, "spec.driver": self.driver},
            stop=stop,
        )

        def watch() -> None:
            try:
                reflector.run()
            except KubeApiError as err:
                failure.append(err)
                self._wake.set()

        def stopper() -> None:
            stop.wait()
            self._wake.set()

        thread = threading.Thread(target=watch, name="resourceslice-watch", daemon=True)
        thread.start()
        threading.Thread(target=stopper, name="resourceslice-stop", daemon=True).start()
        while not stop.is_set():
            self._wake.wait()
            if failure:
                raise failure[0]
            if stop.is_set():
                break
            self._wake.clear()
            if not self._synced:
                continue
            try:
                if self._reconcile():
                    self.in_sync.set()
            except KubeApiError as err:
                log.warning("publishing ResourceSlices", error=err.one_line())
                stop.wait(RETRY_S)
                self._wake.set()
        # the watch ends with its next event or when the server ends it: a plain exit does
        # not wait for it (nothing of it is written)
        self._stopped.set()
        thread.join(timeout=0.2)

    def _reconcile(self) -> bool:
        """One write round; True when the slices already said what the devices say."""
        devices = self.desired()
        with self._lock:
            existing = {n: o for n, o in self._seen.items()}
        generations = {int(o["spec"]["pool"].get("generation", 0)) for o in existing.values()}
        current = max(generations, default=0)
        wanted = {
            slice_name(self.node, self.driver, i): spec
            for i, spec in enumerate(slice_specs(self.node, self.driver, devices, current))
        }
        if (
            set(existing) == set(wanted)
            and len(generations) == 1
            and all(self._says(n, existing[n]["spec"], s) for n, s in wanted.items())
        ):
            return True
        generation = current + 1
        for spec in wanted.values():
            spec["pool"]["generation"] = generation
        for name, spec in sorted(wanted.items()):
            stored = self._write(name, spec, existing.get(name))
            if dropped_taints(spec, stored.get("spec", {})):
                if not self.taints_dropped:
                    log.warning(
                        "the API server dropped the devices' taints (DRADeviceTaints off): "
                        "Unhealthy devices are left out of the slice instead",
                        slice=name,
                    )
                self.taints_dropped = True
                self._wake.set()
        for name in sorted(set(existing) - set(wanted)):
            self._delete(name, existing[name])
        log.info(
            "published ResourceSlices",
            slices=sorted(wanted),
            generation=generation,
            devices=len(devices),
        )
        return False

    def _says(self, name: str, stored: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
        """Whether the stored slice says what ``wanted`` says: equal, or what the server made
        of the very spec last written (its defaults, its normal form): writing it again
        would only bump the generation, for ever."""
        have, want = comparable(stored), comparable(wanted)
        return have == want or self._written.get(name) == (want, have)

    def _write(
        self, name: str, spec: dict[str, Any], known: Mapping[str, Any] | None
    ) -> dict[str, Any]:
        from lightkube.resources.resource_v1 import ResourceSlice

        metadata: dict[str, Any] = {"name": name}
        if known is not None:
            metadata["resourceVersion"] = known["metadata"]["resourceVersion"]
        body: ResourceSlice = ResourceSlice.from_dict({"metadata": metadata, "spec": spec})  # type: ignore[assignment]
        try:
            answer = self.client.replace(body) if known else self.client.create(body)
        except Exception as err:
            raise describe(err, self.server, self.token_file) from err
        stored: dict[str, Any] = answer.to_dict()
        self.writes += 1
        self._written[name] = (comparable(spec), comparable(stored.get("spec", {})))
        self._learn(name, stored)
        return stored

    def _delete(self, name: str, known: Mapping[str, Any]) -> None:
        from lightkube.resources.resource_v1 import ResourceSlice

        try:
            self.client.delete(ResourceSlice, name)
        except Exception as err:
            failure = describe(err, self.server, self.token_file)
            if failure.code != 404:
                raise failure from err
        self.writes += 1
        with self._lock:
            self._seen.pop(name, None)  # the watch's DELETED event brings its version
