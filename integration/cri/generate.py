"""Generate ``runtime_v1_pb2.py`` and ``runtime_v1_pb2_grpc.py`` from ``runtime_v1.proto``.

``python -m integration.cri.generate [--check]``: ``--check`` exits 1 when the checked-in
modules differ from what the .proto generates (tests/kubeapi/test_generated_apis.py runs it).
"""

from __future__ import annotations

import sys
from pathlib import Path

from nvct.kubeapi import protogen

HERE = Path(__file__).resolve().parent

if __name__ == "__main__":
    sys.exit(protogen.main(HERE, "runtime_v1", "integration.cri", sys.argv[1:]))
