"""Generate ``dra_v1_pb2*.py`` and ``dra_v1beta1_pb2*.py`` from their .proto (grpcio-tools).

``python -m nvct.kubeapi.dra.generate [--check]``: ``--check`` exits 1 when the checked-in
modules differ from what the .proto files generate (tests/kubeapi/test_generated_apis.py).
The files are named ``dra_*`` rather than ``v1.proto``: protobuf's descriptor pool is keyed by
file name, and the pod-resources API's is ``v1.proto`` (the device plugin's ``v1beta1.proto``).
"""

from __future__ import annotations

import sys
from pathlib import Path

from nvct.kubeapi import protogen

HERE = Path(__file__).resolve().parent
VERSIONS = ("dra_v1", "dra_v1beta1")

if __name__ == "__main__":
    sys.exit(max(protogen.main(HERE, v, "nvct.kubeapi.dra", sys.argv[1:]) for v in VERSIONS))
