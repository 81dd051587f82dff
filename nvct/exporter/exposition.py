"""``/metrics`` in Prometheus' text format, written here rather than by prometheus_client:
its writer renames every counter's family to ``<name>_total``, and dcgm-exporter's counters
(``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`` …) keep their names, so dashboards and the
``# TYPE`` line must agree with theirs."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any
from wsgiref.simple_server import WSGIServer, make_server

from prometheus_client.core import Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST, ThreadingWSGIServer, _SilentHandler
from prometheus_client.utils import floatToGoString


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def render(metrics: Iterable[Metric]) -> bytes:
    """The families as text format 0.0.4, names and types unchanged."""
    out = []
    # a GPU's labels dict is shared by all its series: write its text once (keyed by identity,
    # the dict kept alongside so an id is never reused within one render)
    written: dict[int, tuple[dict[str, str], str]] = {}
    for m in metrics:
        doc = m.documentation.replace("\\", r"\\").replace("\n", r"\n")
        out.append(f"# HELP {m.name} {doc}\n# TYPE {m.name} {m.type}\n")
        for s in m.samples:
            cached = written.get(id(s.labels))
            if cached is None or cached[0] is not s.labels:
                text = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(s.labels.items()))
                cached = written[id(s.labels)] = (s.labels, "{" + text + "}" if text else "")
            value = floatToGoString(s.value)  # type: ignore[no-untyped-call]
            out.append(f"{s.name}{cached[1]} {value}\n")
    return "".join(out).encode()


def serve(address: str, port: int, collect: Callable[[], Iterator[Metric]]) -> WSGIServer:
    """Serve ``/metrics`` (and ``/``) from a daemon thread until ``shutdown()``.

    Raises:
        OSError: the address cannot be bound.
    """

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        if environ.get("PATH_INFO", "/") not in ("/", "/metrics"):
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"not found: try /metrics\n"]
        body = render(collect())
        start_response("200 OK", [("Content-Type", CONTENT_TYPE_LATEST)])
        return [body]

    server = make_server(address, port, app, ThreadingWSGIServer, handler_class=_SilentHandler)
    threading.Thread(target=server.serve_forever, name="metrics-http", daemon=True).start()
    return server
