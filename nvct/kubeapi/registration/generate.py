"""Generate ``registration_pb2*.py`` from ``registration.proto`` (grpcio-tools).

``python -m nvct.kubeapi.registration.generate [--check]``: ``--check`` exits 1 when the
checked-in modules differ from what the .proto generates (tests/kubeapi/test_generated_apis.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

from nvct.kubeapi import protogen

HERE = Path(__file__).resolve().parent

if __name__ == "__main__":
    sys.exit(protogen.main(HERE, "registration", "nvct.kubeapi.registration", sys.argv[1:]))
