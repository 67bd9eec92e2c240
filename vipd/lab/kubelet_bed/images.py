"""The kubelet bed's container images, built locally with podman and imported, never pulled.

What it is: ``plan()`` maps the image names ``kubeadm config images list`` gives for the bed's
kubeadm config (kube-apiserver, kube-controller-manager, kube-scheduler, etcd, pause) to the
binaries ``scripts/setup-kube`` built, as one-layer ``FROM scratch`` images (the binaries are
static: CGO off for the Go ones, the pause program linked with ``-static``); ``ensure_archive()``
builds those and vipd's own image (its Containerfile, on the lab's local Debian base) and saves
them all as one docker archive, which each node's containerd imports (``ctr -n k8s.io images
import``) into the namespace the CRI plugin reads. With ``imagePullPolicy: Never`` in the
kubeadm config and every image present, ``kubeadm init`` and ``join`` pull nothing.

The archive is cached next to the podman storage, keyed by the image IDs, so a second bed on
the same binaries and the same vipd source reuses it (saving ~700 MB takes seconds, the
builds a few more).

What it must not do: pull or push (``--pull=never``; no registry is reachable), use podman's
bridge network, or name an image differently from what kubeadm asks for (kubeadm would then
try to pull it).
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from vipd.lab.podman import Podman

# Each control-plane image's program(s), by the last path component of the image's name.
_PROGRAMS: dict[str, tuple[str, ...]] = {
    "kube-apiserver": ("kube-apiserver",),
    "kube-controller-manager": ("kube-controller-manager",),
    "kube-scheduler": ("kube-scheduler",),
    "etcd": ("etcd", "etcdctl"),
    "pause": ("pause",),
}


class ImageError(RuntimeError):
    """kubeadm asked for an image the bed cannot make; the message names it."""


@dataclass(frozen=True, slots=True)
class ImageSpec:
    """One scratch image: its full name and the binaries it carries (the first is run)."""

    name: str
    programs: tuple[str, ...]

    def containerfile(self) -> str:
        entry = "/pause" if self.programs == ("pause",) else f"/usr/local/bin/{self.programs[0]}"
        dest = "/" if self.programs == ("pause",) else "/usr/local/bin/"
        # The Kubernetes pause image runs as 65535: nothing in the sandbox needs root.
        user = "USER 65535:65535\n" if self.programs == ("pause",) else ""
        return (
            "FROM scratch\n"
            f"COPY {' '.join(self.programs)} {dest}\n"
            # kubeadm's manifests name the command ("kube-apiserver", "etcd"): PATH finds it.
            "ENV PATH=/usr/local/bin\n"
            f"{user}"
            f'ENTRYPOINT ["{entry}"]\n'
        )


def plan(names: Sequence[str]) -> list[ImageSpec]:
    """The scratch images for kubeadm's list of names; raises ImageError on an unknown one."""
    specs = []
    for name in names:
        base = name.rsplit("/", 1)[-1].split(":", 1)[0]
        programs = _PROGRAMS.get(base)
        if programs is None:
            raise ImageError(f"kubeadm wants {name}, which this bed does not build")
        specs.append(ImageSpec(name=name, programs=programs))
    return specs


def ensure_archive(
    podman: Podman,
    specs: Sequence[ImageSpec],
    bin_dir: Path,
    *,
    vipd_image: str,
    source_root: Path,
    vipd_tags: Sequence[str] = (),
) -> Path:
    """Build every image (scratch ones and vipd's), save them as one docker archive.

    ``vipd_tags`` are further names of the same vipd image (an upgrade's "new" image in the
    bed is a second tag: same layers, a different name in the DaemonSet's spec, so the kubelet
    replaces every pod as it would for a new release).
    """
    ids = []
    with tempfile.TemporaryDirectory(prefix="vipd-images-", dir=podman.root / "tmp") as tmp:
        for spec in specs:
            ctx = Path(tmp) / spec.name.replace("/", "_").replace(":", "_")
            ctx.mkdir()
            for program in spec.programs:
                shutil.copy2(bin_dir / program, ctx / program)
            (ctx / "Containerfile").write_text(spec.containerfile())
            podman.cmd(
                "build", "--quiet", "--pull=never", "--network=host", "-t", spec.name, str(ctx)
            )
            ids.append(_image_id(podman, spec.name))
    podman.ensure_base()
    podman.build(source_root, tag=vipd_image)
    ids.append(_image_id(podman, vipd_image))
    for tag in vipd_tags:
        podman.cmd("tag", vipd_image, tag)
        ids.append(_image_id(podman, tag))
    names = [*(s.name for s in specs), vipd_image, *vipd_tags]
    key = hashlib.sha256("\n".join(f"{n} {i}" for n, i in zip(names, ids, strict=True)).encode())
    archive = podman.root / f"kubelet-bed-{key.hexdigest()[:16]}.tar"
    if not archive.is_file():
        for old in podman.root.glob("kubelet-bed-*.tar"):
            old.unlink()  # one archive (~700 MB) per machine is enough
        partial = archive.with_suffix(".partial")
        partial.unlink(missing_ok=True)
        podman.cmd(
            "save", "--multi-image-archive", "--format", "docker-archive",
            "-o", str(partial), *names,
            timeout=600,
        )  # fmt: skip
        partial.rename(archive)
    return archive


def _image_id(podman: Podman, name: str) -> str:
    return podman.cmd("image", "inspect", "--format", "{{.Id}}", name).stdout.strip()
