"""nvct.container.overlay: which container roots count as "these image layers, untouched"."""

from __future__ import annotations

from pathlib import Path

from nvct.container.overlay import SMALL_LAYER_ENTRIES, fresh_overlay_identity


def layers(tmp_path: Path, n: int = 2) -> list[Path]:
    """``n`` image layers, each too big to be named by its content."""
    out = []
    for i in range(n):
        layer = tmp_path / f"l{i}"
        layer.mkdir(exist_ok=True)
        for j in range(SMALL_LAYER_ENTRIES + 1):
            (layer / f"f{j}").touch()
        out.append(layer)
    return out


def init_layer(path: Path) -> Path:
    """What docker puts in a container's own ``-init`` layer."""
    (path / "etc").mkdir(parents=True)
    for name in ("etc/hosts", "etc/hostname", "etc/resolv.conf", ".dockerenv"):
        (path / name).touch()
    (path / "etc" / "mtab").symlink_to("/proc/mounts")
    return path


def mountinfo(root: str, fstype: str, options: str, *, extra: str = "") -> bytes:
    lines = [
        "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw",
        f"46 22 0:39 / {root} rw,relatime shared:2 - {fstype} {fstype} rw,{options}",
        extra,
    ]
    return "\n".join(line for line in lines if line).encode()


def test_fresh_overlay_is_named_by_its_layers(tmp_path: Path) -> None:
    lower = ":".join(str(p) for p in layers(tmp_path))
    upper = tmp_path / "upper"
    upper.mkdir()
    info = mountinfo("/c/merged", "overlay", f"lowerdir={lower},upperdir={upper},workdir=/w")
    first = fresh_overlay_identity("/c/merged", info)
    assert first is not None and len(first) == 40
    # Another container of the same image (another upper, also empty): the same identity.
    other = tmp_path / "upper2"
    other.mkdir()
    info2 = mountinfo("/d/merged", "overlay", f"lowerdir={lower},upperdir={other},workdir=/x")
    assert fresh_overlay_identity("/d/merged", info2) == first


def test_other_layers_or_a_changed_layer_give_another_identity(tmp_path: Path) -> None:
    one, two = layers(tmp_path)
    upper = tmp_path / "upper"
    upper.mkdir()

    def ident(lower: str) -> str | None:
        info = mountinfo("/m", "overlay", f"lowerdir={lower},upperdir={upper},workdir=/w")
        return fresh_overlay_identity("/m", info)

    both = ident(f"{one}:{two}")
    assert both != ident(f"{two}:{one}") and both != ident(str(one))
    (two / "new-file").write_text("x")  # a layer's top directory changed: not the same image
    assert ident(f"{one}:{two}") != both


def test_no_identity_for_a_used_upper_layer_or_another_filesystem(tmp_path: Path) -> None:
    lower = ":".join(str(p) for p in layers(tmp_path))
    upper = tmp_path / "upper"
    upper.mkdir()
    (upper / "etc").mkdir()  # a restarted container, or one its engine wrote into
    used = mountinfo("/m", "overlay", f"lowerdir={lower},upperdir={upper},workdir=/w")
    assert fresh_overlay_identity("/m", used) is None
    assert fresh_overlay_identity("/m", mountinfo("/m", "ext4", "errors=remount-ro")) is None
    assert fresh_overlay_identity("/elsewhere", used) is None  # not a mount point
    assert fresh_overlay_identity("/m", mountinfo("/m", "overlay", "upperdir=/u")) is None
    escaped = mountinfo("/m", "overlay", f"lowerdir={lower}\\054x,upperdir={tmp_path}")
    assert fresh_overlay_identity("/m", escaped) is None
    gone = mountinfo("/m", "overlay", f"lowerdir={tmp_path / 'missing'}")
    assert fresh_overlay_identity("/m", gone) is None


def test_the_mount_on_top_counts(tmp_path: Path) -> None:
    """A later mountinfo line at the same point covers the earlier one."""
    lower = str(layers(tmp_path, 1)[0])
    bind = "47 46 8:1 / /m rw,relatime - ext4 /dev/sda1 rw"
    info = mountinfo("/m", "overlay", f"lowerdir={lower}", extra=bind)
    assert fresh_overlay_identity("/m", info) is None
    assert fresh_overlay_identity("/m", mountinfo("/m", "overlay", f"lowerdir={lower}"))


def test_each_containers_own_small_init_layer_is_named_by_content(tmp_path: Path) -> None:
    """docker gives every container an ``-init`` layer of its own above the image's: the same
    content, so the same identity; other content (a different ld.so.conf), another one."""
    image = ":".join(str(p) for p in layers(tmp_path))
    idents = []
    for name in ("a", "b"):
        init = init_layer(tmp_path / name / "init")
        upper = tmp_path / name / "upper"
        upper.mkdir()
        info = mountinfo("/m", "overlay", f"lowerdir={init}:{image},upperdir={upper}")
        idents.append(fresh_overlay_identity("/m", info))
    assert idents[0] is not None and idents[0] == idents[1]
    b = tmp_path / "b"
    (b / "init" / "etc" / "ld.so.conf").write_text("/opt/lib\n")
    info = mountinfo("/m", "overlay", f"lowerdir={b / 'init'}:{image},upperdir={b / 'upper'}")
    assert fresh_overlay_identity("/m", info) != idents[0]
