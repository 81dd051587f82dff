"""The stand-in API server's storage: objects of any group/version/resource, one cluster-wide
resourceVersion counter (as etcd's revision), an event history that watches replay from, and
compaction (what makes a too-old resourceVersion 410 Gone).

Kept apart from the HTTP layer so that a "restarted" server keeps its objects, as a real API
server keeps them in etcd.
"""

from __future__ import annotations

import copy
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any


class Conflict(Exception):
    """An update named a resourceVersion that is not the object's current one (409)."""


class NotFound(Exception):
    """No object of that name (404)."""


class AlreadyExists(Exception):
    """Create of a name that exists (409 AlreadyExists)."""


class Expired(Exception):
    """A watch asked for events older than the history keeps (410 Gone)."""


@dataclass(frozen=True)
class Kind:
    """What one resource's objects are: ``/api/v1/nodes`` is ``Kind("", "v1", "nodes",
    "Node", namespaced=False)``."""

    group: str
    version: str
    resource: str
    kind: str
    namespaced: bool
    # field selectors beyond metadata.name/namespace the real server supports for this kind
    # (ResourceSlices: ``spec.nodeName``, ``spec.driver``, ``spec.pool.name``)
    selectable: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


@dataclass
class Event:
    rv: int
    type: str
    key: tuple[str, str]
    obj: dict[str, Any]


@dataclass
class Store:
    """Objects by (resource key, namespace, name); every change gets the next revision."""

    revision: int = 1
    objects: dict[str, dict[tuple[str, str], dict[str, Any]]] = field(default_factory=dict)
    history: dict[str, list[Event]] = field(default_factory=dict)
    # The oldest revision a watch may resume from; older ones are Expired.
    compacted: int = 0
    changed: threading.Condition = field(default_factory=threading.Condition)

    def _bump(self) -> int:
        self.revision += 1
        return self.revision

    def list(self, kind: Kind, namespace: str = "", name: str = "") -> tuple[int, list[Any]]:
        with self.changed:
            found = [
                copy.deepcopy(o)
                for (ns, n), o in sorted(self.objects.get(kind.resource, {}).items())
                if (not namespace or ns == namespace) and (not name or n == name)
            ]
            return self.revision, found

    def get(self, kind: Kind, namespace: str, name: str) -> dict[str, Any]:
        with self.changed:
            try:
                return copy.deepcopy(self.objects.get(kind.resource, {})[(namespace, name)])
            except KeyError:
                raise NotFound(name) from None

    def _record(
        self, kind: Kind, kind_type: str, key: tuple[str, str], obj: dict[str, Any]
    ) -> None:
        self.history.setdefault(kind.resource, []).append(
            Event(int(obj["metadata"]["resourceVersion"]), kind_type, key, copy.deepcopy(obj))
        )
        self.changed.notify_all()

    def create(self, kind: Kind, namespace: str, obj: dict[str, Any]) -> dict[str, Any]:
        name = obj.get("metadata", {}).get("name", "")
        if not name:
            raise ValueError("metadata.name: Required value")
        with self.changed:
            table = self.objects.setdefault(kind.resource, {})
            if (namespace, name) in table:
                raise AlreadyExists(name)
            stored = copy.deepcopy(obj)
            stored["kind"], stored["apiVersion"] = kind.kind, kind.api_version
            meta = stored.setdefault("metadata", {})
            meta.update(resourceVersion=str(self._bump()), uid=str(uuid.uuid4()), generation=1)
            meta["creationTimestamp"] = "2026-01-01T00:00:00Z"
            if kind.namespaced:
                meta["namespace"] = namespace
            table[(namespace, name)] = stored
            self._record(kind, "ADDED", (namespace, name), stored)
            return copy.deepcopy(stored)

    def update(self, kind: Kind, namespace: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Replace an object; a resourceVersion in ``obj`` must be the current one (else
        Conflict), as the API server's optimistic concurrency has it."""
        name = obj.get("metadata", {}).get("name", "")
        with self.changed:
            table = self.objects.get(kind.resource, {})
            current = table.get((namespace, name))
            if current is None:
                raise NotFound(name)
            asked = obj.get("metadata", {}).get("resourceVersion")
            if asked and asked != current["metadata"]["resourceVersion"]:
                raise Conflict(name)
            stored = copy.deepcopy(obj)
            stored["kind"], stored["apiVersion"] = kind.kind, kind.api_version
            meta = stored.setdefault("metadata", {})
            for kept in ("uid", "creationTimestamp", "namespace"):
                if kept in current["metadata"]:
                    meta[kept] = current["metadata"][kept]
            spec_changed = stored.get("spec") != current.get("spec")
            meta["generation"] = current["metadata"].get("generation", 1) + int(spec_changed)
            meta["resourceVersion"] = str(self._bump())
            table[(namespace, name)] = stored
            self._record(kind, "MODIFIED", (namespace, name), stored)
            return copy.deepcopy(stored)

    def delete(self, kind: Kind, namespace: str, name: str) -> dict[str, Any]:
        with self.changed:
            table = self.objects.get(kind.resource, {})
            if (namespace, name) not in table:
                raise NotFound(name)
            gone = table.pop((namespace, name))
            gone["metadata"]["resourceVersion"] = str(self._bump())
            self._record(kind, "DELETED", (namespace, name), gone)
            return copy.deepcopy(gone)

    def compact(self) -> None:
        """Forget every event so far: a watch resuming from an older revision gets 410 Gone
        (what etcd compaction, or a restarted API server's empty watch cache, does)."""
        with self.changed:
            self.compacted = self.revision
            self.history.clear()

    def events_after(self, kind: Kind, rv: int) -> list[Event]:
        """The events of ``kind`` newer than ``rv`` (caller holds ``changed``)."""
        if rv < self.compacted:
            raise Expired(rv)
        return [e for e in self.history.get(kind.resource, []) if e.rv > rv]
