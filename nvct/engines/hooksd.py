"""The OCI hook entry that runs nvct's hook, for engines that call hooks themselves (podman's
hooks.d). The shim writes no hook: it prepares GPU containers before the runtime starts.
"""

from __future__ import annotations

import posixpath

from nvct.base._site import nvct_home
from nvct.base.oci import HOOK_MARK

TYPE_CHECKING = False  # typing costs ~6 ms to import; annotations are strings here
if TYPE_CHECKING:
    from typing import Any


def hooksd_entry(python: str, hook_path: str, env: list[str]) -> dict[str, Any]:
    """The prestart hook nvct adds: ``hook_path prestart``, or nvct's hook run by ``python``.

    The default form works wherever this nvct came from (a venv, an editable checkout, the
    packages' private tree): the interpreter runs isolated (``-I``: no PYTHON* variables, no
    working directory on sys.path — runc runs hooks in the bundle, which the image's author
    may control) and is told explicitly where nvct lives.
    """
    if hook_path:
        return {"path": hook_path, "args": [posixpath.basename(hook_path), "prestart"], "env": env}
    home = nvct_home()
    flags = "-IS"  # no site: the hook's path with a work order is stdlib-only (see nvct.base._site)
    code = (
        f"import sys; sys.path.insert(0, {home!r}); "
        f"from {HOOK_MARK}.__main__ import main; sys.exit(main())"
    )
    return {"path": python, "args": [python, flags, "-c", code, "prestart"], "env": env}
