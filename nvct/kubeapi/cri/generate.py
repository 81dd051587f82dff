"""Generate ``listing_pb2.py`` from ``listing.proto`` (grpcio-tools).

``python -m nvct.kubeapi.cri.generate [--check]``: ``--check`` exits 1 when the checked-in
modules differ from what the .proto generates (tests/kubeapi/test_generated_apis.py runs it).
"""

from __future__ import annotations

import sys
from pathlib import Path

from nvct.kubeapi import protogen

HERE = Path(__file__).resolve().parent

if __name__ == "__main__":
    sys.exit(protogen.main(HERE, "listing", "nvct.kubeapi.cri", sys.argv[1:]))
