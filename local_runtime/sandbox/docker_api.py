"""The Docker Engine, for the sandbox runtime: the SDK client (one clear error when the engine is not
running) and the three Engine API calls on the hot path (exec create, a hijacked exec start stream,
exec inspect), spoken directly over asyncio so a command costs no thread."""

from __future__ import annotations

import asyncio
import json
import os
import struct
from typing import Any
from urllib.parse import urlparse

from workbench_local.sandbox.fs import Capture

from workbench.authoring.sandbox import SandboxError


def sandbox_user() -> tuple[int, int]:
    """The uid:gid commands run as: the host user (so host-side files match), or 1000 when that is root."""
    uid = os.getuid()
    return (1000, 1000) if uid == 0 else (uid, os.getgid())


def connect() -> Any:
    """A docker SDK client for a running engine, or one clear :class:`SandboxError`."""
    try:
        import docker
    except ImportError:
        raise SandboxError("the Docker runtime needs the docker package: pip install docker "
                           "(or `pip install 'rl-workbench[local]'`)") from None
    try:
        client = docker.from_env(timeout=120, max_pool_size=64)
        client.ping()
    except Exception as e:
        where = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
        detail = str(e).split("(")[0].strip().rstrip(":")[:160]
        raise SandboxError(f"the Docker engine is not running or not reachable at {where} ({detail}); start it "
                           "(Docker Desktop, or `sudo dockerd`) or use --runtime local") from None
    return client


# -- the Engine API over asyncio -------------------------------------------------------------------
class EngineAPI:
    """Just the calls on the hot path (exec create / start / inspect), with no thread per command."""

    def __init__(self, client: Any) -> None:
        self.version = client.api.api_version
        host = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
        u = urlparse(host)
        if u.scheme in ("unix", ""):
            self.unix: str | None = u.path or host
            self.tcp: tuple[str, int] | None = None
        elif u.scheme in ("tcp", "http") and not os.environ.get("DOCKER_TLS_VERIFY"):
            self.unix, self.tcp = None, (u.hostname or "127.0.0.1", u.port or 2375)
        else:
            raise SandboxError(f"DOCKER_HOST={host}: Workbench sandboxes need a unix socket or plain tcp engine address")

    async def _open(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self.unix:
            return await asyncio.open_unix_connection(self.unix, limit=1 << 20)
        assert self.tcp
        return await asyncio.open_connection(*self.tcp, limit=1 << 20)

    async def request(self, method: str, path: str, body: Any = None, *, upgrade: bool = False
                      ) -> tuple[int, bytes, asyncio.StreamReader | None, asyncio.StreamWriter | None]:
        """One HTTP/1.1 request on a fresh connection. With ``upgrade`` the connection is returned, hijacked."""
        reader, writer = await self._open()
        try:
            data = b"" if body is None else json.dumps(body).encode()
            head = f"{method} /v{self.version}{path} HTTP/1.1\r\nHost: docker\r\nContent-Length: {len(data)}\r\n"
            if body is not None:
                head += "Content-Type: application/json\r\n"
            head += "Connection: Upgrade\r\nUpgrade: tcp\r\n" if upgrade else "Connection: close\r\n"
            writer.write(head.encode() + b"\r\n" + data)
            await writer.drain()
            raw = await reader.readuntil(b"\r\n\r\n")
            lines = raw.decode("latin-1").split("\r\n")
            status = int(lines[0].split()[1])
            headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)}
            if upgrade and status in (101, 200):
                return status, b"", reader, writer
            if "content-length" in headers:
                payload = await reader.readexactly(int(headers["content-length"]))
            elif headers.get("transfer-encoding", "").lower() == "chunked":
                payload = b""
                while True:
                    size = int((await reader.readuntil(b"\r\n")).strip() or b"0", 16)
                    if size == 0:
                        break
                    payload += await reader.readexactly(size)
                    await reader.readexactly(2)
            else:
                payload = await reader.read()
            writer.close()
            return status, payload, None, None
        except BaseException:
            writer.close()
            raise

    async def call(self, method: str, path: str, body: Any = None) -> Any:
        status, payload, _, _ = await self.request(method, path, body)
        if status >= 400:
            try:
                msg = json.loads(payload).get("message", payload.decode(errors="replace"))
            except ValueError:
                msg = payload.decode(errors="replace")
            raise DockerAPIError(status, msg)
        return json.loads(payload) if payload.strip() else None


class DockerAPIError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status, self.message = status, message


async def _read_frames(reader: asyncio.StreamReader, out: Capture, err: Capture) -> None:
    """The multiplexed exec stream: 8-byte headers (stream, 0, 0, 0, big-endian size), then the payload."""
    while True:
        try:
            head = await reader.readexactly(8)
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        kind, size = head[0], struct.unpack(">I", head[4:])[0]
        try:
            data = await reader.readexactly(size)
        except asyncio.IncompleteReadError as e:
            data = e.partial
        (err if kind == 2 else out).feed(data)
        if len(data) < size:
            return
