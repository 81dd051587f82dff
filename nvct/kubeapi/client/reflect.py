"""List, then watch from the list's resourceVersion, for ever: what client-go's reflector does.

- a watch the server ends (its ``timeoutSeconds``) or that breaks (connection reset, API server
  restart) resumes from the last resourceVersion seen, after a short backoff;
- 410 Gone (the version was compacted away) lists again, and the new list replaces what the
  caller knew (``on_sync``), so no change in the gap is lost;
- 403 is fatal (the rules lack a verb: waiting cannot grant it), and so is 401 on the first
  list (a wrong token); a later 401 is logged and retried (the kubelet rotating the token:
  lightkube reads the token file again).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from nvct.kubeapi.client.errors import KubeApiError, describe

if TYPE_CHECKING:
    from lightkube import Client

# The server ends each watch after this long (client-go picks 5-10 min), so a silently dead
# connection cannot hang the watch for ever.
WATCH_TIMEOUT_S = 300
BACKOFF_MIN_S = 0.1
# Short: a label change after an API server restart must reach the node within seconds.
BACKOFF_MAX_S = 1.0


@dataclass
class Reflector:
    """Keeps a caller's view of the objects of ``resource`` (a lightkube resource class, e.g.
    ``lightkube.resources.core_v1.Node``) matching ``fields`` (a field selector dict) current.

    ``on_sync(objects)``: the whole current set (after each list); ``on_event(type, obj)``:
    ``ADDED``/``MODIFIED``/``DELETED`` between lists; ``on_error(err)``: a retried failure.
    """

    client: Client
    resource: Any
    server: str
    token_file: str | None
    on_sync: Callable[[list[Any]], None]
    on_event: Callable[[str, Any], None]
    on_error: Callable[[KubeApiError], None]
    fields: dict[str, Any] | None = None
    stop: threading.Event | None = None
    # The last resourceVersion seen: a broken watch resumes from it; None lists again.
    _version: str | None = field(default=None, init=False)

    def run(self) -> None:
        """Until ``stop`` is set; raises KubeApiError when refused (see the module's rules)."""
        stop = self.stop or threading.Event()
        listed_once = False
        pause = BACKOFF_MIN_S
        while not stop.is_set():
            try:
                if self._version is None:
                    self._version = self._list()
                    listed_once = True
                self._watch(self._version, stop)
                pause = BACKOFF_MIN_S
                continue
            except Exception as raw:
                err = raw if isinstance(raw, KubeApiError) else self._describe(raw)
            if err.code == 410:
                self._version = None  # list again: the gap's changes come with the new list
                continue
            if err.code == 403 or (err.code == 401 and not listed_once):
                raise err
            self.on_error(err)
            if stop.wait(pause):
                return
            pause = min(pause * 2, BACKOFF_MAX_S)

    def _describe(self, err: BaseException) -> KubeApiError:
        return describe(err, self.server, self.token_file)

    def _list(self) -> str:
        found = self.client.list(self.resource, fields=self.fields)
        objects = list(found)
        self.on_sync(objects)
        return str(found.resourceVersion)

    def _watch(self, version: str, stop: threading.Event) -> None:
        """Watch from ``version`` (lightkube starts the next request by itself after the
        server ends one cleanly) until ``stop`` or an error."""
        from lightkube.types import on_error_raise

        events = self.client.watch(
            self.resource,
            fields=self.fields,
            resource_version=version,
            server_timeout=WATCH_TIMEOUT_S,
            on_error=on_error_raise,
        )
        for kind, obj in events:
            self._version = str(obj.metadata.resourceVersion)
            self.on_event(kind, obj)
            if stop.is_set():
                break
