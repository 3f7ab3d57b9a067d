"""A real package index on 127.0.0.1 for the hub's tests: pypiserver, with htpasswd authentication.

:func:`start_index` starts one on a free port serving a fresh packages folder: a private one asks for the
credentials to upload, list and download; a public one only to upload. Nothing stands between Workbench
and it. The ``package_index`` fixture (tests/conftest.py) starts them and stops them after the test."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from tests.helpers import stop_process

USER, PASSWORD = "alice", "s3cret pw:with colon"
START_TIMEOUT_S = 60.0


@dataclass
class PackageIndex:
    root: str  # http://127.0.0.1:PORT/
    packages: Path
    proc: subprocess.Popen[bytes]
    log: Path

    @property
    def simple(self) -> str:
        return self.root + "simple/"

    def stop(self) -> None:
        stop_process(self.proc)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_index(folder: Path, *, private: bool) -> PackageIndex:
    from passlib.apache import HtpasswdFile

    folder.mkdir(parents=True, exist_ok=True)
    packages = folder / "packages"
    packages.mkdir(exist_ok=True)
    htpasswd = HtpasswdFile(str(folder / "htpasswd"), new=True)
    htpasswd.set_password(USER, PASSWORD)
    htpasswd.save()
    port = _free_port()
    log = folder / "pypiserver.log"
    actions = "update,download,list" if private else "update"
    proc = subprocess.Popen([sys.executable, "-m", "pypiserver", "run", "-p", str(port), "-i", "127.0.0.1",
                             "-P", str(folder / "htpasswd"), "-a", actions, "--hash-algo", "sha256", str(packages)],
                            stdout=subprocess.DEVNULL, stderr=open(log, "wb"))  # noqa: SIM115 - the process owns it
    index = PackageIndex(f"http://127.0.0.1:{port}/", packages, proc, log)
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        try:
            urllib.request.urlopen(index.root, timeout=2).close()
            return index
        except urllib.error.HTTPError:
            return index  # it answers (401 on a private index): it is up
        except (urllib.error.URLError, OSError):
            if proc.poll() is not None or time.monotonic() > deadline:
                index.stop()
                raise RuntimeError(f"pypiserver did not start: {log.read_text()[-2000:]}") from None
            time.sleep(0.1)



def make_wheel(folder: Path, name: str, version: str, requires: tuple[str, ...] = (), module_source: str = "") -> Path:
    """A minimal pure-Python wheel ``name==version`` (one module, ``Requires-Dist`` for each of ``requires``),
    written into ``folder`` (an index's packages folder serves it at once)."""
    import base64
    import hashlib
    import zipfile

    dist = name.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    entries = {
        f"{dist}.py": (module_source or f"VERSION = {version!r}\n").encode(),
        f"{info}/METADATA": "\n".join(["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}",
                                       *(f"Requires-Dist: {r}" for r in requires)]).encode() + b"\n",
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }

    def digest(data: bytes) -> str:
        return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()

    record = "".join(f"{n},{digest(d)},{len(d)}\n" for n, d in entries.items()) + f"{info}/RECORD,,\n"
    path = folder / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for n, d in {**entries, f"{info}/RECORD": record.encode()}.items():
            zf.writestr(n, d)
    return path
