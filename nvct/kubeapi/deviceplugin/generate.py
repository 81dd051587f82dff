"""Generate ``v1beta1_pb2.py`` and ``v1beta1_pb2_grpc.py`` from ``v1beta1.proto`` (grpcio-tools).

``python -m nvct.kubeapi.deviceplugin.generate [--check]``: ``--check`` exits 1 when the checked-in
modules differ from what the .proto generates (tests/kubeapi/test_generated_apis.py runs it).
"""

from __future__ import annotations

import sys
from pathlib import Path

from nvct.kubeapi import protogen

HERE = Path(__file__).resolve().parent

if __name__ == "__main__":
    sys.exit(protogen.main(HERE, "v1beta1", "nvct.kubeapi.deviceplugin", sys.argv[1:]))
