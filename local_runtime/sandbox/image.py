"""Docker images for sandboxes, built with no registry.

The default image (``workbench-sandbox:2``) is a root filesystem assembled from this machine's own
files and loaded with ``docker import``: busybox (``/bin/sh`` and the usual applets; Debian's
``busybox-static``) plus the host's ``python3`` with its standard library and the shared libraries
``ldd`` says they need. Environments may instead bring a Dockerfile (built with ``pull=False``, so
``FROM workbench-sandbox:2`` works offline) or name any image already on the machine.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from workbench.authoring.sandbox import DEFAULT_IMAGE, SandboxError

IMAGE_LABEL = "workbench.image"
#: How long a Dockerfile build may go without sending a line before it counts as hung (seconds).
BUILD_TIMEOUT_S = 3600
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: parts of the standard library a sandbox never needs (tests, GUIs, the installer)
_SKIP_STDLIB = {"test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3", "pydoc_data", "site-packages",
                "dist-packages", "__phello__"}
_SKIP_DYNLOAD = re.compile(r"^(_test|_xx|xx|_ctypes_test|_tkinter)")
_TOP_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")


def find_busybox() -> str | None:
    for cand in (os.environ.get("WORKBENCH_BUSYBOX"), shutil.which("busybox"), "/bin/busybox", "/usr/bin/busybox"):
        if cand and os.path.isfile(cand) and os.access(cand, os.X_OK):
            return os.path.realpath(cand)
    return None


def find_python() -> str | None:
    for cand in (os.environ.get("WORKBENCH_SANDBOX_PYTHON"), "/usr/bin/python3", "/usr/local/bin/python3",
                 getattr(sys, "_base_executable", None), sys.executable):
        if cand and os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    return None


def _ldd(paths: list[str]) -> set[str]:
    """The shared libraries (and the dynamic loader) these binaries load."""
    out: set[str] = set()
    ldd = shutil.which("ldd")
    if not ldd or not paths:
        return out
    for i in range(0, len(paths), 64):
        p = subprocess.run([ldd, *paths[i:i + 64]], capture_output=True, text=True)
        for line in p.stdout.splitlines():
            m = re.search(r"(?:=>\s*)?(/\S+)\s+\(0x", line)
            if m:
                out.add(m.group(1))
    return out


#: C and C++ runtime libraries that compiled wheels load (pydantic-core, numpy, ...): with them, a host
#: virtual environment bound into a sandbox runs there (``wb.Docker(binds=...)``, sandboxed MCP servers).
_RUNTIME_LIBS = ("libgcc_s.so.1", "libstdc++.so.6", "librt.so.1", "libpthread.so.0", "libdl.so.2", "libm.so.6",
                 "libutil.so.1")


def _runtime_libs() -> set[str]:
    found: set[str] = set()
    ldconfig = shutil.which("ldconfig") or ("/sbin/ldconfig" if os.path.exists("/sbin/ldconfig") else None)
    if not ldconfig:
        return found
    listing = subprocess.run([ldconfig, "-p"], capture_output=True, text=True).stdout
    for name in _RUNTIME_LIBS:
        m = re.search(rf"^\s*{re.escape(name)} \(libc6,x86-64\) => (\S+)", listing, re.MULTILINE) or \
            re.search(rf"^\s*{re.escape(name)} \([^)]*\) => (\S+)", listing, re.MULTILINE)
        if m and os.path.exists(m.group(1)):
            found.add(m.group(1))
    return found


class _Tar:
    """A root filesystem being written: parents first, host symlinked top-level folders kept as links."""

    def __init__(self, fh: Any) -> None:
        self.tar = tarfile.open(fileobj=fh, mode="w")  # noqa: SIM115 - closed in close()
        self.seen: set[str] = set()
        self.links = {n: os.readlink(f"/{n}").strip("/") for n in _TOP_LINKS if os.path.islink(f"/{n}")}
        for name, target in self.links.items():
            self.dir(target)
            self._add(tarfile.TarInfo(name), type_=tarfile.SYMTYPE, linkname=target)

    def canon(self, path: str) -> str:
        parts = path.strip("/").split("/")
        if parts and parts[0] in self.links:
            parts = self.links[parts[0]].split("/") + parts[1:]
        return "/".join(parts)

    def _add(self, info: tarfile.TarInfo, *, type_: bytes = tarfile.DIRTYPE, linkname: str = "", mode: int = 0o755,
             data: bytes | None = None, mtime: float = 0) -> None:
        if info.name in self.seen:
            return
        self.seen.add(info.name)
        info.type, info.linkname, info.mode, info.uid, info.gid = type_, linkname, mode, 0, 0
        info.mtime = int(mtime)  # kept for files: .pyc caches are checked against their source's mtime
        if data is not None:
            info.size = len(data)
            self.tar.addfile(info, io.BytesIO(data))
        else:
            self.tar.addfile(info)

    def dir(self, path: str, mode: int = 0o755) -> None:
        path = self.canon(path)
        if not path or path in self.seen:
            return
        parent = os.path.dirname(path)
        if parent:
            self.dir(parent)
        self._add(tarfile.TarInfo(path), mode=mode)

    def file(self, host: str, dest: str | None = None) -> None:
        """A host file at the same place (or ``dest``); a symlink is kept and its target added too."""
        dest = self.canon(dest or host)
        if dest in self.seen:
            return
        self.dir(os.path.dirname(dest))
        if os.path.islink(host):
            target = os.readlink(host)
            self._add(tarfile.TarInfo(dest), type_=tarfile.SYMTYPE, linkname=target, mode=0o777)
            real = os.path.realpath(host)
            if os.path.isfile(real):
                self.file(real)
            return
        st = os.stat(host)
        with open(host, "rb") as fh:
            self._add(tarfile.TarInfo(dest), type_=tarfile.REGTYPE, mode=st.st_mode & 0o7777 or 0o644, data=fh.read(),
                      mtime=st.st_mtime)

    def text(self, dest: str, text: str, mode: int = 0o644) -> None:
        dest = self.canon(dest)
        self.dir(os.path.dirname(dest))
        self._add(tarfile.TarInfo(dest), type_=tarfile.REGTYPE, mode=mode, data=text.encode())

    def symlink(self, dest: str, target: str) -> None:
        dest = self.canon(dest)
        self.dir(os.path.dirname(dest))
        self._add(tarfile.TarInfo(dest), type_=tarfile.SYMTYPE, linkname=target, mode=0o777)

    def close(self) -> None:
        self.tar.close()


def _python_layout(python: str) -> dict[str, Any]:
    code = ("import json, sys, sysconfig; p = sysconfig.get_paths(); "
            "print(json.dumps({'exe': sys.executable, 'stdlib': p['stdlib'], 'platstdlib': p['platstdlib'], "
            "'version': '%d.%d' % sys.version_info[:2], 'dynload': [x for x in sys.path if x.endswith('lib-dynload')], "
            "'libdir': sysconfig.get_config_var('LIBDIR') or ''}))")
    p = subprocess.run([python, "-I", "-c", code], capture_output=True, text=True, timeout=60)
    if p.returncode != 0:
        raise SandboxError(f"cannot inspect {python}: {p.stderr.strip()[-200:]}")
    return json.loads(p.stdout)


def _walk_stdlib(root: str) -> Iterator[str]:
    for dirpath, dirs, files in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        if rel == ".":
            dirs[:] = [d for d in dirs if d not in _SKIP_STDLIB and not d.startswith("config-")]
        for f in files:
            yield os.path.join(dirpath, f)


def build_rootfs(out: Any, log: Callable[[str], None] = lambda s: None) -> dict[str, str]:
    """Write the default image's root filesystem as a tar stream to ``out``; returns what went in."""
    if not sys.platform.startswith("linux"):
        raise SandboxError("the default sandbox image is built from this machine's Linux binaries; on "
                           f"{sys.platform} use wb.Docker(image=...) with an image you already have")
    busybox = find_busybox()
    if busybox is None:
        raise SandboxError("building the sandbox image needs busybox: apt-get install busybox-static "
                           "(or set WORKBENCH_BUSYBOX=/path/to/busybox)")
    python = find_python()
    if python is None:
        raise SandboxError("building the sandbox image needs a python3 on this machine")
    layout = _python_layout(python)
    tar = _Tar(out)
    for d in ("usr/bin", "usr/sbin", "usr/local/bin", "etc", "root", "var", "proc", "sys", "dev"):
        tar.dir(d)
    tar.dir("tmp", 0o1777)
    tar.dir("work", 0o777)
    tar.dir(".wb", 0o777)
    # busybox and its applets (sh, ls, cat, sed, grep, ...)
    tar.file(busybox, "/usr/bin/busybox")
    listing = subprocess.run([busybox, "--list-full"], capture_output=True, text=True).stdout.split()
    for applet in listing or [f"bin/{a}" for a in subprocess.run([busybox, "--list"], capture_output=True,
                                                               text=True).stdout.split()]:
        if applet.rsplit("/", 1)[-1] in ("busybox", "python", "python3"):
            continue
        tar.symlink("/" + applet, "/usr/bin/busybox")
    # python: the executable, its standard library, the extension modules it can load
    exe = layout["exe"]
    tar.file(exe)
    real_exe = os.path.realpath(exe)
    tar.file(real_exe)
    for name in ("python3", "python"):
        if tar.canon("/usr/bin/" + name) not in tar.seen:
            tar.symlink("/usr/bin/" + name, real_exe)
        tar.symlink("/usr/local/bin/" + name, real_exe) if tar.canon(os.path.dirname(real_exe)) != "usr/bin" else None
    libs = [real_exe, busybox]
    count = 0
    for root in dict.fromkeys([layout["stdlib"], layout["platstdlib"], *layout["dynload"]]):
        if not os.path.isdir(root):
            continue
        for f in _walk_stdlib(root):
            if f.endswith(".so") and _SKIP_DYNLOAD.match(os.path.basename(f)):
                continue
            tar.file(f)
            count += 1
            if f.endswith(".so") or ".so." in f:
                libs.append(f)
    libdir = layout.get("libdir") or ""
    ver = layout["version"]
    for libpython in Path(libdir).glob(f"libpython{ver}*.so*") if libdir and os.path.isdir(libdir) else ():
        tar.file(str(libpython))
    for lib in sorted(_ldd(libs) | _runtime_libs()):
        tar.file(lib)
    tar.text("/etc/passwd", "root:x:0:0:root:/root:/bin/sh\nsandbox:x:1000:1000:sandbox:/tmp:/bin/sh\n"
             "nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n")
    tar.text("/etc/group", "root:x:0:\nsandbox:x:1000:\nnogroup:x:65534:\n")
    tar.text("/etc/nsswitch.conf", "passwd: files\ngroup: files\nhosts: files dns\n")
    tar.close()
    log(f"rootfs: busybox ({len(listing)} applets), python {ver} from {exe} ({count} stdlib files)")
    return {"busybox": busybox, "python": exe, "python_version": ver}


def image_exists(client: Any, name: str) -> bool:
    import docker.errors

    try:
        client.images.get(name)
        return True
    except docker.errors.ImageNotFound:
        return False


def build_default_image(client: Any, *, rebuild: bool = False, name: str = DEFAULT_IMAGE,
                        log: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
    """Build (or find) the default sandbox image; idempotent unless ``rebuild``."""
    if not rebuild and image_exists(client, name):
        img = client.images.get(name)
        return {"image": name, "id": img.id, "built": False, "size_mb": round(img.attrs.get("Size", 0) / 1e6, 1)}
    repo, _, tag = name.partition(":")
    with tempfile.NamedTemporaryFile(prefix="wb-rootfs-", suffix=".tar") as fh:
        info = build_rootfs(fh, log)
        fh.flush()
        changes = [f"ENV PATH={PATH}", "ENV LANG=C.UTF-8", "WORKDIR /work", 'CMD ["/bin/sh"]',
                   f"LABEL {IMAGE_LABEL}=1 workbench.python={info['python_version']}"]
        client.api.import_image_from_file(fh.name, repository=repo, tag=tag or "latest", changes=changes)
    img = client.images.get(name)
    log(f"built {name} ({img.attrs.get('Size', 0) / 1e6:.0f} MB)")
    return {"image": name, "id": img.id, "built": True, "size_mb": round(img.attrs.get("Size", 0) / 1e6, 1), **info}


def _context_hash(ctx: Path, dockerfile: Path) -> str:
    h = hashlib.sha256(str(dockerfile.relative_to(ctx)).encode())
    for dirpath, dirs, files in os.walk(ctx):
        dirs[:] = sorted(d for d in dirs if d not in (".git", "__pycache__", ".venv", "node_modules"))
        for f in sorted(files):
            p = Path(dirpath) / f
            h.update(str(p.relative_to(ctx)).encode() + b"\0")
            with open(p, "rb") as fh:
                h.update(hashlib.sha256(fh.read()).digest())
    return h.hexdigest()[:16]


def build_dockerfile(client: Any, dockerfile: Path, log: Callable[[str], None] = lambda s: None,
                     timeout_s: float | None = None) -> str:
    """Build an environment's Dockerfile offline (no pull), tagged by the content of its folder; a build
    that takes longer than ``timeout_s`` is an error (see ``_build_within``)."""
    import docker.errors

    if not dockerfile.is_file():
        raise SandboxError(f"Dockerfile {dockerfile} does not exist")
    ctx = dockerfile.parent
    tag = f"workbench-env:{_context_hash(ctx, dockerfile)}"
    if image_exists(client, tag):
        return tag
    stages = re.findall(r"^\s*FROM\s+(?:--\S+\s+)*(\S+)(?:\s+AS\s+(\S+))?", dockerfile.read_text(),
                        re.MULTILINE | re.IGNORECASE)
    froms = [base for base, _ in stages]
    named = {name.lower() for _, name in stages if name}  # a multi-stage build's own stages are no images
    if DEFAULT_IMAGE in froms:
        build_default_image(client, log=log)
    for base in froms:
        if base != DEFAULT_IMAGE and base.lower() not in named | {"scratch"} and not image_exists(client, base):
            raise SandboxError(f"{dockerfile}: base image {base} is not on this machine and no registry is used; "
                               f"use FROM {DEFAULT_IMAGE} or load the image first")
    def build() -> None:
        # A build step may print nothing for minutes (a compile): the build's own read timeout is an hour.
        client.images.build(path=str(ctx), dockerfile=dockerfile.name, tag=tag, pull=False, rm=True, forcerm=True,
                            labels={IMAGE_LABEL: "env"}, timeout=BUILD_TIMEOUT_S)

    try:
        if timeout_s is None:
            build()
        else:
            _build_within(client, build, tag, timeout_s, f"building {dockerfile}")
    except docker.errors.BuildError as e:
        lines = [str(x.get("stream") or x.get("error") or "").strip() for x in e.build_log if isinstance(x, dict)]
        tail = [x for x in lines if x][-1:] or [str(e)]
        raise SandboxError(f"building {dockerfile} failed: {tail[0][:300]}") from None
    except docker.errors.APIError as e:
        raise SandboxError(f"building {dockerfile} failed: {e.explanation or e}") from None
    except OSError as e:  # the engine stopped answering (requests' timeouts and connection errors are OSErrors)
        raise SandboxError(f"building {dockerfile} failed: the Docker engine stopped answering ({e})") from None
    log(f"built {tag} from {dockerfile}")
    return tag


def _build_within(client: Any, build: Callable[[], None], tag: str, timeout_s: float, what: str) -> None:
    """Run ``build`` in a thread and wait at most ``timeout_s``. A build still going then is abandoned: the
    error names the limit, and the image the engine may still finish is removed when it does, so a later run
    builds it again rather than finding it."""
    import threading

    outcome: list[BaseException] = []
    abandoned = threading.Event()

    def run() -> None:
        try:
            build()
        except BaseException as e:  # handed to the waiting thread
            outcome.append(e)
            return
        if abandoned.is_set():
            with contextlib.suppress(Exception):
                client.images.remove(tag, force=True)

    worker = threading.Thread(target=run, name="workbench-image-build", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        abandoned.set()
        raise SandboxError(f"{what} took longer than its build timeout of {timeout_s:g} s")
    if outcome:
        raise outcome[0]
