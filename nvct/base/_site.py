"""Site-packages on demand for processes started with ``python -I -S`` (the hot paths).

``-S`` saves ~2 ms per container start. The stdlib-only fast paths never need third-party
libraries; a planning pass (cache miss) does, so it calls ``ensure_site_packages`` first.
The packages' private tree carries the libraries itself, so nothing is added there.
"""

from __future__ import annotations

import os
import sys


def nvct_home() -> str:
    """The directory this nvct package is imported from (a venv's site-packages, a checkout,
    the packages' private tree): what a command nvct writes puts on ``sys.path``."""
    import nvct

    return os.path.dirname(os.path.dirname(os.path.abspath(nvct.__file__)))


def module_argv(module: str) -> list[str]:
    """This interpreter running ``module``'s ``main()``, isolated and without site
    (``-I -S``), told where nvct lives: how nvct starts its own programs in every install."""
    code = (
        f"import sys; sys.path.insert(0, {nvct_home()!r}); "
        f"from {module} import main; sys.exit(main())"
    )
    return [sys.executable, "-I", "-S", "-c", code]


def ensure_site_packages() -> None:
    """Add site-packages if this interpreter skipped them and pynvml cannot be found."""
    if not sys.flags.no_site:
        return
    import importlib.util

    if importlib.util.find_spec("pynvml") is None:
        import site

        site.main()
