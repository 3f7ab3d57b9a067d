"""Host-side pieces shared by the process and Docker sandboxes.

Both runtimes keep a sandbox's workdir (and ``/tmp``) in host folders that are bind-mounted into it,
so seeding, file access and reset are plain file operations here, with no round trip into the sandbox.
Every path from a tool or a model is resolved *beneath* the workdir one component at a time with
``O_NOFOLLOW`` and directory file descriptors: ``..`` past the root, absolute paths elsewhere and
symlinks that lead out (even ones swapped in while we walk) fail with :class:`SandboxPathError`.
Symlinks that stay inside the workdir are followed.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import shutil
import stat
import sys
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workbench.authoring.sandbox import SandboxError, SandboxPathError

_O_DIR = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
MAX_READ = 256 << 20  # read_file refuses files larger than this
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_warned: set[str] = set()


def _parts(path: str) -> list[str]:
    return [p for p in path.split("/") if p not in ("", ".")]


class HostDir:
    """A host folder seen inside a sandbox as ``inner`` (``/work``), with safe file operations.

    ``owner`` (uid, gid): files and folders created here are given to the sandbox's user (when the
    host process is root and the sandbox runs as another uid)."""

    def __init__(self, path: Path, inner: str, owner: tuple[int, int] | None = None) -> None:
        self.path = path
        self.inner = inner.rstrip("/") or "/"
        self.owner = owner

    # -- path resolution -----------------------------------------------------------------------
    def relative(self, path: str) -> str:
        """``path`` relative to the root: absolute paths must lie under ``inner`` (or the host path)."""
        if not isinstance(path, str) or "\x00" in path:
            raise SandboxPathError(f"bad path {path!r}")
        if not path.startswith("/"):
            return path
        for prefix in (self.inner, str(self.path)):
            if path == prefix or path.startswith(prefix + "/"):
                return path[len(prefix):].lstrip("/") or "."
        raise SandboxPathError(f"{path} is outside the sandbox workdir {self.inner}")

    def resolve(self, path: str, *, mkdirs: bool = False, follow_last: bool = True) -> tuple[int, str]:
        """``(dir_fd, name)`` of ``path``'s last component, every step checked to stay beneath the root.

        The caller closes ``dir_fd``. ``name`` is ``"."`` when the path names the root (or a folder
        reached through ``..``)."""
        rel = self.relative(path)
        parts = deque(_parts(rel))
        root = os.open(self.path, _O_DIR)
        stack = [root]
        hops = 0
        try:
            while parts:
                name = parts.popleft()
                cur = stack[-1]
                if name == "..":
                    if len(stack) == 1:
                        raise SandboxPathError(f"{path} leaves the sandbox workdir")
                    os.close(stack.pop())
                    continue
                try:
                    st: os.stat_result | None = os.lstat(name, dir_fd=cur)
                except FileNotFoundError:
                    st = None
                if st is not None and stat.S_ISLNK(st.st_mode) and (parts or follow_last):
                    hops += 1
                    if hops > 32:
                        raise OSError(errno.ELOOP, "too many symlinks", path)
                    target = os.readlink(name, dir_fd=cur)
                    if target.startswith("/"):
                        try:
                            target = self.relative(target)
                        except SandboxPathError:
                            raise SandboxPathError(f"{path} is a symlink out of the sandbox workdir") from None
                        while len(stack) > 1:
                            os.close(stack.pop())
                    parts.extendleft(reversed(_parts(target)))
                    continue
                if not parts:
                    return os.dup(cur), name
                if st is None:
                    if not mkdirs:
                        raise FileNotFoundError(errno.ENOENT, "no such file or directory", path)
                    os.mkdir(name, 0o755, dir_fd=cur)
                    self._chown(name, cur)
                elif not stat.S_ISDIR(st.st_mode):
                    raise NotADirectoryError(errno.ENOTDIR, "not a directory", path)
                try:
                    stack.append(os.open(name, _O_DIR, dir_fd=cur))
                except OSError as e:
                    if e.errno == errno.ELOOP:  # swapped for a symlink while we looked
                        raise SandboxPathError(f"{path} changed under us (symlink race)") from None
                    raise
            return os.dup(stack[-1]), "."
        finally:
            for fd in stack:
                os.close(fd)

    def _chown(self, name: str, dir_fd: int) -> None:
        if self.owner is not None:
            with contextlib.suppress(OSError):
                os.chown(name, *self.owner, dir_fd=dir_fd, follow_symlinks=False)

    def _open(self, path: str, flags: int, *, mkdirs: bool = False) -> int:
        dfd, name = self.resolve(path, mkdirs=mkdirs)
        try:
            if name == ".":
                raise IsADirectoryError(errno.EISDIR, "is a directory", path)
            try:
                fd = os.open(name, flags | _NOFOLLOW, 0o644, dir_fd=dfd)
            except OSError as e:
                if e.errno == errno.ELOOP:
                    raise SandboxPathError(f"{path} is a symlink out of the sandbox workdir") from None
                raise
            if flags & os.O_CREAT:
                self._chown(name, dfd)
            return fd
        finally:
            os.close(dfd)

    # -- files ---------------------------------------------------------------------------------
    def read(self, path: str, binary: bool = False) -> str | bytes:
        fd = self._open(path, os.O_RDONLY)
        try:
            st = os.fstat(fd)
            if stat.S_ISDIR(st.st_mode):
                raise IsADirectoryError(errno.EISDIR, "is a directory", path)
            if st.st_size > MAX_READ:
                raise OSError(errno.EFBIG, f"file is larger than {MAX_READ >> 20} MB", path)
            with os.fdopen(fd, "rb", closefd=False) as fh:
                data = fh.read(MAX_READ + 1)
        finally:
            os.close(fd)
        return data if binary else data.decode("utf-8", "replace")

    def write(self, path: str, content: str | bytes) -> None:
        data = content.encode() if isinstance(content, str) else bytes(content)
        fd = self._open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mkdirs=True)
        try:
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]
        finally:
            os.close(fd)

    def upload(self, src: Path, dest: str) -> None:
        """Copy a trusted host file or tree into the root at ``dest``."""
        src = Path(src)
        if not src.exists():
            raise FileNotFoundError(errno.ENOENT, "no such file or directory", str(src))
        if src.is_file():
            target = dest.rstrip("/") + "/" + src.name if dest.endswith("/") or dest in (".", "") else dest
            self.write(target, src.read_bytes())
            return
        dfd, name = self.resolve(dest, mkdirs=True)
        try:
            if name != ".":
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, 0o755, dir_fd=dfd)
                    self._chown(name, dfd)
                top = os.open(name, _O_DIR, dir_fd=dfd)
            else:
                top = os.dup(dfd)
        finally:
            os.close(dfd)
        try:
            self._copy_in(src, top)
        finally:
            os.close(top)

    def _copy_in(self, src: Path, dfd: int) -> None:
        for entry in os.scandir(src):
            if entry.is_symlink():
                with contextlib.suppress(FileExistsError):
                    os.symlink(os.readlink(entry.path), entry.name, dir_fd=dfd)
            elif entry.is_dir():
                with contextlib.suppress(FileExistsError):
                    os.mkdir(entry.name, 0o755, dir_fd=dfd)
                    self._chown(entry.name, dfd)
                sub = os.open(entry.name, _O_DIR, dir_fd=dfd)
                try:
                    self._copy_in(Path(entry.path), sub)
                finally:
                    os.close(sub)
            elif entry.is_file():
                mode = 0o755 if os.access(entry.path, os.X_OK) else 0o644
                fd = os.open(entry.name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _NOFOLLOW, mode, dir_fd=dfd)
                try:
                    with open(entry.path, "rb") as fh:
                        shutil.copyfileobj(fh, os.fdopen(fd, "wb", closefd=False), 1 << 20)
                    os.fchmod(fd, mode)
                finally:
                    os.close(fd)
                self._chown(entry.name, dfd)

    def download(self, src: str, dest: Path) -> None:
        """Copy a file or tree of the root to the host; symlinks are copied as links, never followed."""
        dest = Path(dest)
        dfd, name = self.resolve(src, follow_last=False)
        try:
            st = os.lstat(name, dir_fd=dfd) if name != "." else os.fstat(dfd)
            if stat.S_ISREG(st.st_mode):
                fd = os.open(name, os.O_RDONLY | _NOFOLLOW, dir_fd=dfd)
                with os.fdopen(fd, "rb") as fh:
                    target = dest / name if dest.is_dir() else dest
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(fh.read())
                return
            if stat.S_ISLNK(st.st_mode):
                raise SandboxPathError(f"{src} is a symlink")
            top = os.open(name, _O_DIR, dir_fd=dfd) if name != "." else os.dup(dfd)
        finally:
            os.close(dfd)
        try:
            dest.mkdir(parents=True, exist_ok=True)
            for root, dirs, files, rfd in os.fwalk(".", dir_fd=top, follow_symlinks=False):
                out = dest / root
                out.mkdir(parents=True, exist_ok=True)
                for f in files:
                    fst = os.lstat(f, dir_fd=rfd)
                    if stat.S_ISLNK(fst.st_mode):
                        link = out / f
                        with contextlib.suppress(FileExistsError):
                            link.symlink_to(os.readlink(f, dir_fd=rfd))
                    elif stat.S_ISREG(fst.st_mode):
                        fd = os.open(f, os.O_RDONLY | _NOFOLLOW, dir_fd=rfd)
                        with os.fdopen(fd, "rb") as fh, open(out / f, "wb") as w:
                            shutil.copyfileobj(fh, w, 1 << 20)
                for d in dirs:
                    if stat.S_ISLNK(os.lstat(d, dir_fd=rfd).st_mode):
                        with contextlib.suppress(FileExistsError):
                            (out / d).symlink_to(os.readlink(d, dir_fd=rfd))
        finally:
            os.close(top)

    # -- lifecycle -----------------------------------------------------------------------------
    def create(self, mode: int = 0o755) -> None:
        self.path.mkdir(mode=mode, parents=True, exist_ok=True)
        os.chmod(self.path, mode)
        if self.owner is not None:
            os.chown(self.path, *self.owner)

    def wipe(self, mode: int = 0o755) -> None:
        """Empty the folder, whatever the sandbox did to permissions. The folder itself stays (it is
        bind-mounted into a running container), with its mode and owner restored."""
        if not self.path.is_dir() or self.path.is_symlink():
            rmtree(self.path)
            self.create(mode)
            return
        os.chmod(self.path, 0o700 if self.owner is None else mode)
        for entry in os.scandir(self.path):
            if entry.is_dir(follow_symlinks=False):
                rmtree(Path(entry.path))
            else:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.path)
        self.create(mode)


def rmtree(path: Path) -> None:
    def onexc(fn: object, p: str, exc: BaseException) -> None:
        if isinstance(exc, FileNotFoundError):
            return
        if isinstance(exc, PermissionError):  # the sandbox chmod-ed something: take it back and retry
            with contextlib.suppress(OSError):
                os.chmod(os.path.dirname(p), 0o700)
                os.chmod(p, 0o700, follow_symlinks=False) if not os.path.islink(p) else None
            with contextlib.suppress(OSError):
                if os.path.isdir(p) and not os.path.islink(p):
                    shutil.rmtree(p, ignore_errors=True)
                else:
                    os.unlink(p)
            return
        raise exc

    if not os.path.lexists(path):
        return
    if sys.version_info >= (3, 12):
        shutil.rmtree(path, onexc=onexc)
    else:
        shutil.rmtree(path, onerror=lambda fn, p, ei: onexc(fn, p, ei[1]))


@dataclass(slots=True)
class Capture:
    """Collects one output stream up to ``cap`` bytes; what passes the cap is counted and dropped."""

    cap: int
    buf: bytearray
    dropped: int = 0

    @classmethod
    def new(cls, cap: int) -> Capture:
        return cls(cap, bytearray())

    def feed(self, data: bytes) -> None:
        room = self.cap - len(self.buf)
        if room >= len(data):
            self.buf += data
        else:
            if room > 0:
                self.buf += data[:room]
            self.dropped += len(data) - max(room, 0)

    @property
    def truncated(self) -> bool:
        return self.dropped > 0

    def text(self) -> str:
        return self.buf.decode("utf-8", "replace")


def process_start_time(pid: int) -> str:
    """A token that tells a live process from a later one with the same pid ('' when unknown)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return ""


def owner_alive(pid: int, start: str) -> bool:
    """Whether the process that created something (pid + start token) still runs."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return not start or not os.path.exists(f"/proc/{pid}") or process_start_time(pid) == start


def sandboxes_root() -> Path:
    """Where host-side sandbox folders live: one folder per pool, named after its owner process."""
    import tempfile

    return Path(tempfile.gettempdir()) / f"workbench-sandboxes-{os.getuid()}"


def pool_dir(kind: str) -> Path:
    import secrets

    root = sandboxes_root()
    root.mkdir(mode=0o711, exist_ok=True)
    os.chmod(root, 0o711)
    pid = os.getpid()
    d = root / f"{kind}-{pid}-{process_start_time(pid) or '0'}-{secrets.token_hex(3)}"
    d.mkdir(mode=0o711)
    os.chmod(d, 0o711)
    return d


def stale_pool_dirs() -> list[Path]:
    """Pool folders whose owner process is gone (left by a crash or kill -9)."""
    root = sandboxes_root()
    out: list[Path] = []
    if not root.is_dir():
        return out
    for d in root.iterdir():
        bits = d.name.split("-")
        if len(bits) >= 4 and bits[1].isdigit() and not owner_alive(int(bits[1]), bits[2] if bits[2] != "0" else ""):
            out.append(d)
    return out


def wait_until(pred: Callable[[], object], timeout: float, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(interval)
    return False


def warn_once(key: str, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        sys.stderr.write(f"workbench: warning: {message}\n")
        sys.stderr.flush()


def exec_argv(cmd: str | Sequence[str]) -> list[str]:
    """What ``Sandbox.exec`` runs: a string through ``/bin/sh -c``, a sequence as its arguments."""
    argv = ["/bin/sh", "-c", cmd] if isinstance(cmd, str) else [str(a) for a in cmd]
    if not argv:
        raise ValueError("exec needs a command")
    return argv


def base_env(home: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The whole environment of a sandboxed command: nothing of the parent's leaks in."""
    env = {"PATH": PATH, "HOME": home, "TMPDIR": "/tmp" if home == "/tmp" else home, "LANG": "C.UTF-8",
           "LC_ALL": "C.UTF-8", "TERM": "dumb", "USER": "sandbox", "LOGNAME": "sandbox", "PYTHONUNBUFFERED": "1",
           "PYTHONDONTWRITEBYTECODE": "1"}
    if extra:
        for k, v in extra.items():
            if not isinstance(k, str) or not isinstance(v, str) or "=" in k or not k:
                raise ValueError(f"env entries must be str -> str (bad entry {k!r})")
            env[k] = v
    return env


async def seed(sb: Any, needs: Mapping[str, Any]) -> None:
    """Fill a fresh workdir from a task's sandbox needs: ``files``, ``dir``, then run ``setup``."""
    if not needs:
        return
    src = needs.get("dir")
    if src:
        p = Path(src)
        if not p.is_dir():
            raise SandboxError(f"task sandbox dir {src} is not a folder")
        await asyncio.to_thread(sb.work.upload, p, ".")
    for path, content in (needs.get("files") or {}).items():
        sb.work.write(path, content)
    setup = needs.get("setup")
    if setup:
        r = await sb.exec(setup, timeout=float(needs.get("setup_timeout") or 120))
        if not r.ok:
            tail = (r.stderr or r.stdout).strip().splitlines()[-1:] or [""]
            raise SandboxError(f"task sandbox setup failed (exit {r.exit_code}{', timed out' if r.timed_out else ''}): "
                               f"{tail[0][:300]}")


class WorkdirFiles:
    """File operations both sandboxes share: the rollout's workdir is a host directory (bind-mounted
    into the bubblewrap or Docker sandbox), checked against escapes by :class:`HostDir`."""

    work: HostDir
    pool: Any

    async def read_file(self, path: str, *, binary: bool = False) -> str | bytes:
        return self.work.read(path, binary)

    async def write_file(self, path: str, content: str | bytes) -> None:
        self.work.write(path, content)

    async def upload(self, src: str | Path, dest: str = ".") -> None:
        await asyncio.to_thread(self.work.upload, Path(src), dest)

    async def download(self, src: str, dest: str | Path) -> None:
        await asyncio.to_thread(self.work.download, src, Path(dest))

    async def close(self) -> None:
        await self.pool.release(self)


def parse_bind(spec: str) -> tuple[str, str]:
    """``HOST`` or ``HOST:SANDBOX`` as (absolute host path, sandbox path; the host path by default)."""
    src, _, dst = spec.partition(":")
    src = str(Path(src).resolve())
    return src, dst or src
