"""Builds the node image without any registry: base → deps → code, each tagged by a content hash.

No registry can be reached, so nothing is pulled:
1. **base**: Debian minbase with python3 from ``debootstrap``, imported with
   ``docker import`` (about 40 s and 275 MB, once per machine);
2. **deps**: the pinned wheels (``constraints.txt``) installed offline from the
   host's wheelhouse into ``/opt/venv`` by a container that mounts it read-only,
   then committed (minutes, once per change of the pins);
3. **node**: the project's code copied last and installed without dependencies,
   so a code-only change rebuilds in seconds.

Each tag is a hash of everything that went into the layer (the parent's tag
included), so a stale image is never used: a changed input is a new tag.
Usage: ``python -m swarmshake.chaos.docker_image build [--wheelhouse DIR]``.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import docker
import docker.errors

ROOT = Path(__file__).resolve().parents[1]
LABEL = "swarmshake.project"  # every image, container, network and volume carries it
BASE_REPO = "swarmshake-base"
DEPS_REPO = "swarmshake-deps"
NODE_REPO = "swarmshake-node"
DEBIAN_SUITE = "bookworm"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
BASE_PACKAGES = "python3,python3-venv,ca-certificates,iproute2,procps"
CODE_PATHS = (
    "pyproject.toml",
    "setup.py",
    "README.md",
    "constraints.txt",
    "swarmshake",
    "reference_node",
    "chaos",
    "specs",
    "verify",
    "kernels",
    "reports",
)
DEPS_INSTALL_TIMEOUT_S = 1800  # a few GB of wheels; far longer means something is stuck
DEBOOTSTRAP_TIMEOUT_S = 900


def log(message: str) -> None:
    print(f"[image] {message}", file=sys.stderr, flush=True)


def _hash(*parts: bytes | str) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode() if isinstance(part, str) else part)
        digest.update(b"\0")
    return digest.hexdigest()[:16]


def base_tag() -> str:
    return f"{BASE_REPO}:{_hash(DEBIAN_SUITE, DEBIAN_MIRROR, BASE_PACKAGES)}"


def deps_tag() -> str:
    return f"{DEPS_REPO}:{_hash(base_tag(), (ROOT / 'constraints.txt').read_bytes())}"


def _code_files() -> list[Path]:
    files: list[Path] = []
    for entry in CODE_PATHS:
        path = ROOT / entry
        if path.is_file():
            files.append(path)
            continue
        for file in sorted(path.rglob("*")):
            if file.is_file() and "__pycache__" not in file.parts and file.suffix != ".pyc":
                files.append(file)
    return files


def node_tag() -> str:
    parts: list[bytes | str] = [deps_tag()]
    for file in _code_files():
        parts += [str(file.relative_to(ROOT)), file.read_bytes()]
    return f"{NODE_REPO}:{_hash(*parts)}"


def _exists(client: docker.DockerClient, tag: str) -> bool:
    try:
        client.images.get(tag)
        return True
    except docker.errors.ImageNotFound:
        return False


def build_base(client: docker.DockerClient) -> str:
    tag = base_tag()
    if _exists(client, tag):
        return tag
    debootstrap = shutil.which("debootstrap") or "/usr/sbin/debootstrap"
    if not os.path.exists(debootstrap):
        raise RuntimeError("debootstrap missing: run `make setup` (apt-get install debootstrap)")
    with tempfile.TemporaryDirectory(prefix="swarmshake-rootfs-") as rootfs:
        log(f"base: debootstrap {DEBIAN_SUITE} minbase (about 40 s)")
        subprocess.run(
            [debootstrap, "--variant=minbase", f"--include={BASE_PACKAGES}",
             DEBIAN_SUITE, rootfs, DEBIAN_MIRROR],
            check=True, stdout=subprocess.DEVNULL, timeout=DEBOOTSTRAP_TIMEOUT_S,
        )  # fmt: skip
        log(f"base: docker import as {tag}")
        tar = subprocess.Popen(["tar", "-C", rootfs, "-c", "."], stdout=subprocess.PIPE)
        subprocess.run(
            ["docker", "import", "--change", f"LABEL {LABEL}=1", "-", tag],
            stdin=tar.stdout, check=True, stdout=subprocess.DEVNULL,
        )  # fmt: skip
        assert tar.stdout is not None
        tar.stdout.close()
        if tar.wait() != 0:
            raise RuntimeError("tar of the debootstrap root failed")
    return tag


def build_deps(client: docker.DockerClient, wheelhouse: Path) -> str:
    tag = deps_tag()
    if _exists(client, tag):
        return tag
    base = build_base(client)
    if not wheelhouse.is_dir():
        raise RuntimeError(f"wheelhouse {wheelhouse} missing: run `scripts/setup.sh wheelhouse`")
    with tempfile.TemporaryDirectory(prefix="swarmshake-pins-") as pins:
        shutil.copy(ROOT / "constraints.txt", Path(pins) / "constraints.txt")
        log(f"deps: installing pinned wheels offline into /opt/venv ({tag}; minutes)")
        container = client.containers.run(
            base,
            ["sh", "-c",
             "python3 -m venv /opt/venv && /opt/venv/bin/pip install -q --no-index "
             "--no-cache-dir --find-links /wheels -r /pins/constraints.txt"],
            volumes={str(wheelhouse): {"bind": "/wheels", "mode": "ro"},
                     pins: {"bind": "/pins", "mode": "ro"}},
            labels={LABEL: "1"},
            detach=True,
        )  # fmt: skip
        try:
            result = container.wait(timeout=DEPS_INSTALL_TIMEOUT_S)
            if result.get("StatusCode") != 0:
                raise RuntimeError(
                    "installing the wheelhouse in the image failed:\n"
                    + container.logs().decode(errors="replace")[-4000:]
                )
            repository, version = tag.split(":")
            container.commit(
                repository=repository,
                tag=version,
                conf={
                    "Env": [
                        "PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
                    ],
                    "Labels": {LABEL: "1"},
                    "WorkingDir": "/data",
                    # The install container's bind mounts must not become VOLUMEs of
                    # the image: every node container would create (and leak) two
                    # anonymous volumes.
                    "Volumes": {},
                },
            )
        finally:
            container.remove(force=True, v=True)
    return tag


def build_node(client: docker.DockerClient, wheelhouse: Path) -> str:
    tag = node_tag()
    if _exists(client, tag):
        log(f"node: {tag} up to date")
        return tag
    deps = build_deps(client, wheelhouse)
    dockerfile = (
        f"FROM {deps}\n"
        f"LABEL {LABEL}=1\n"
        "COPY . /tmp/swarmshake-src\n"
        # --no-deps: every dependency is in the deps layer; only the code changes here.
        # The source is removed after the install: a checkout in the working directory
        # would shadow the installed ``swarmshake`` namespace mapping.
        "RUN /opt/venv/bin/pip install -q --no-deps --no-index --no-build-isolation "
        "--no-cache-dir /tmp/swarmshake-src && rm -rf /tmp/swarmshake-src\n"
        "WORKDIR /data\n"
        'ENTRYPOINT ["/opt/venv/bin/python", "-m", "swarmshake.reference_node"]\n'
    )
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as context:
        for file in _code_files():
            context.add(file, arcname=str(file.relative_to(ROOT)))
        data = dockerfile.encode()
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(data)
        context.addfile(info, io.BytesIO(data))
    buffer.seek(0)
    started = time.monotonic()
    log(f"node: building {tag} (code layer)")
    client.images.build(fileobj=buffer, custom_context=True, tag=tag, rm=True, labels={LABEL: "1"})
    log(f"node: built in {time.monotonic() - started:.1f}s")
    removed = prune_superseded(client, tag)
    if removed:
        log(f"prune: removed {removed} superseded image tag(s)")
    return tag


def prune_superseded(client: docker.DockerClient, keep: str) -> int:
    """Removes this project's node and deps images other than ``keep`` and its parents.

    Every code change is a new node tag (~10 MB each, but a changed pin is a new
    deps layer of ~6 GB), so without pruning a busy machine fills its disk with
    images no tree needs any more. An image still used by a container is skipped."""
    wanted = {keep, deps_tag(), base_tag()}
    removed = 0
    for repo in (NODE_REPO, DEPS_REPO):
        for image in client.images.list(name=repo):
            if wanted & set(image.tags):
                continue
            for old_tag in image.tags:
                try:
                    client.images.remove(old_tag, noprune=False)
                    removed += 1
                except docker.errors.APIError as error:  # in use by a container: keep it
                    log(f"prune: kept {old_tag} ({error.explanation or error})")
    return removed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m swarmshake.chaos.docker_image")
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build", help="build (or reuse) base, deps and node images")
    build.add_argument(
        "--wheelhouse",
        type=Path,
        default=Path(os.environ.get("SWARMSHAKE_CACHE", Path.home() / ".cache/swarmshake"))
        / "wheelhouse",
    )
    sub.add_parser("tag", help="print the node image tag the current tree needs")
    args = parser.parse_args(argv)
    if args.command == "tag":
        print(node_tag())
        return 0
    client = docker.from_env(timeout=600)
    tag = build_node(client, args.wheelhouse)
    size_mb = client.images.get(tag).attrs["Size"] / 1e6
    log(f"node image: {tag} ({size_mb:.0f} MB)")
    print(tag)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
