"""The plain manifests of deployments/ are nvct's Helm chart rendered with its default values.

    python deployments/render.py           write deployments/<template>.yaml
    python deployments/render.py --check   exit 1 naming each file that differs (what the tests run)

Rendered by Helm's own engine (the helm-python-sdk test dependency), so `kubectl apply -k
deployments/` and `helm install nvct deployments/helm/nvct -n nvct-system` install the same
objects. namespace.yaml and kustomization.yaml are written by hand (Helm creates no namespace).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

DEPLOYMENTS = Path(__file__).resolve().parent
CHART = DEPLOYMENTS / "helm" / "nvct"
NAMESPACE = "nvct-system"
HEADER = (
    "# Generated from deployments/helm/nvct with its default values by deployments/render.py:\n"
    "# edit the chart, then run `make deployments`.\n"
)


def render(values: dict[str, object] | None = None) -> dict[str, str]:
    """Each non-empty template's rendering, by its file name under templates/."""
    from helm_python import chart

    with chart.Chart.load(CHART) as loaded:
        rendered = loaded.render(values=values or {}, name="nvct", namespace=NAMESPACE)
    return {
        Path(path).name: text.strip("\n") + "\n"
        for path, text in rendered.items()
        if text.strip() and path.endswith(".yaml")  # not NOTES.txt: what helm install prints
    }


def plain_manifests() -> dict[str, str]:
    """deployments/<name> and the text it must hold."""
    return {name: HEADER + text for name, text in render().items()}


def differing() -> list[str]:
    """The plain manifests that are not the chart's rendering."""
    return sorted(
        name
        for name, text in plain_manifests().items()
        if not (DEPLOYMENTS / name).is_file() or (DEPLOYMENTS / name).read_text() != text
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only say which files differ")
    args = parser.parse_args()
    if args.check:
        stale = differing()
        for name in stale:
            print(f"deployments/{name}: not the chart's rendering (run: make deployments)")
        return 1 if stale else 0
    for name, text in plain_manifests().items():
        path = DEPLOYMENTS / name
        temporary = path.with_name(f".{name}.tmp")
        temporary.write_text(text)
        temporary.replace(path)  # atomic: a reader sees the old file or the new one
    return 0


if __name__ == "__main__":
    sys.exit(main())
