"""The OpenEnv wire protocol, as a client: what a server publishes over HTTP and one episode over its websocket.

An OpenEnv server (openenv-core's ``create_app``) answers ``GET /health`` (``{"status": "healthy"}``),
``GET /schema`` (the JSON schemas of its action, observation and state) and ``GET /metadata`` (its name and
description). Its HTTP ``/reset`` and ``/step`` build a fresh environment for every request, so an episode of
more than one step lives on the websocket ``/ws``: each connection is a session with an environment of its
own. The client sends ``{"type": "reset", "data": {...}}``, ``{"type": "step", "data": ACTION}``,
``{"type": "state"}``, ``{"type": "mcp", "data": JSON-RPC}`` (MCP's ``tools/list`` of an MCP environment) and
``{"type": "close"}``; the server answers ``{"type": "observation", "data": {"observation": {...}, "reward": R,
"done": D}}``, ``{"type": "state", "data": {...}}``, ``{"type": "mcp", "data": JSON-RPC}`` or ``{"type":
"error", "data": {"message": ..., "code": ...}}``. A server at its session limit answers the connection
with a ``CAPACITY_REACHED`` error and closes it.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from workbench.errors import EnvLoadError

#: How long a published document (health, schema, metadata) may take to come.
INFO_TIMEOUT_S = 30.0
#: How long one reset or step may take (a step may run code, call a model, ...).
STEP_TIMEOUT_S = 600.0
#: The error code a server answers a session with when it holds as many as it allows.
CAPACITY_REACHED = "CAPACITY_REACHED"
_MAX_MESSAGE = 64 * 1024 * 1024
_CLOSE_WAIT_S = 5.0


class OpenEnvError(Exception):
    """The server answered an error (``code``: the protocol's error code, ``message``: its text)."""

    def __init__(self, message: str, code: str = "") -> None:
        super().__init__(message)
        self.message, self.code = message, code


@dataclass(frozen=True, slots=True)
class ServerInfo:
    """What a server publishes about itself."""

    url: str
    action_schema: dict[str, Any]
    observation_schema: dict[str, Any]
    name: str = ""
    description: str = ""
    #: a hash of everything the server publishes (its /schema and /metadata): a changed one is a new version
    digest: str = ""


@dataclass(slots=True)
class StepResult:
    """One observation: its fields (reward, done and metadata taken out), the reward and whether it ends."""

    observation: dict[str, Any]
    reward: float | None = None
    done: bool = False
    raw: dict[str, Any] = field(default_factory=dict)


def _get_json(url: str, timeout: float) -> Any:
    req = urllib.request.Request(url, headers={"Accept": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 - http(s) only, checked by the caller
        return json.loads(resp.read())


def read_info(url: str, timeout: float = INFO_TIMEOUT_S) -> ServerInfo:
    """The server's schemas and metadata; one-line :class:`EnvLoadError` when ``url`` is not an OpenEnv server."""
    base = url.rstrip("/")
    try:
        schema = _get_json(f"{base}/schema", timeout)
    except urllib.error.HTTPError as e:
        raise EnvLoadError(f"{base} is not an OpenEnv server: GET /schema answered HTTP {e.code}") from None
    except (urllib.error.URLError, OSError) as e:
        why = getattr(e, "reason", None) or e
        raise EnvLoadError(f"cannot reach the OpenEnv server at {base}: {why}") from None
    except ValueError:
        raise EnvLoadError(f"{base} is not an OpenEnv server: GET /schema did not answer JSON") from None
    if not (isinstance(schema, dict) and isinstance(schema.get("action"), dict)
            and isinstance(schema.get("observation"), dict)):
        raise EnvLoadError(f"{base} is not an OpenEnv server: GET /schema answered no action and observation schemas")
    name = description = ""
    meta: Any = None
    try:
        meta = _get_json(f"{base}/metadata", timeout)
        if isinstance(meta, dict):
            name, description = str(meta.get("name") or ""), str(meta.get("description") or "")
    except (urllib.error.URLError, OSError, ValueError):
        pass  # metadata is optional
    published = json.dumps({"schema": schema, "metadata": meta}, sort_keys=True, separators=(",", ":"), default=str)
    return ServerInfo(base, schema["action"], schema["observation"], name, description,
                      hashlib.sha256(published.encode()).hexdigest())


def healthy(url: str, timeout: float = 2.0) -> bool:
    try:
        body = _get_json(f"{url.rstrip('/')}/health", timeout)
    except (urllib.error.URLError, OSError, ValueError):
        return False
    return isinstance(body, dict) and body.get("status") in ("healthy", "degraded")


def ws_url(url: str) -> str:
    parts = urlsplit(url.rstrip("/"))
    scheme = "wss" if parts.scheme == "https" else "ws"
    return urlunsplit((scheme, parts.netloc, f"{parts.path}/ws", "", ""))


def parse_observation(data: Any) -> StepResult:
    if not isinstance(data, dict):
        raise OpenEnvError(f"the server answered an observation that is not an object: {str(data)[:200]}")
    obs = data.get("observation")
    reward = data.get("reward")
    if isinstance(reward, bool):
        reward = float(reward)
    return StepResult(obs if isinstance(obs, dict) else {"observation": obs},
                      float(reward) if isinstance(reward, int | float) else None, bool(data.get("done")), data)


class Session:
    """One episode on its own websocket: its own environment instance on the server."""

    def __init__(self, url: str, timeout: float = STEP_TIMEOUT_S) -> None:
        self.url, self.timeout = url, timeout
        self._http: Any = None
        self._ws: Any = None
        self._rpc_id = 0

    async def open(self) -> None:
        import aiohttp

        self._http = aiohttp.ClientSession()
        try:
            self._ws = await self._http.ws_connect(ws_url(self.url), max_msg_size=_MAX_MESSAGE, heartbeat=None)
        except (aiohttp.ClientError, OSError) as e:
            await self.close()
            raise OpenEnvError(f"cannot open a session on {self.url}: {e}") from None

    async def reset(self, **kwargs: Any) -> StepResult:
        return parse_observation(await self._ask({"type": "reset", "data": kwargs}, "observation"))

    async def step(self, action: dict[str, Any]) -> StepResult:
        return parse_observation(await self._ask({"type": "step", "data": action}, "observation"))

    async def list_tools(self) -> list[dict[str, Any]]:
        """The MCP tools of the session's environment (an ``MCPEnvironment``), by MCP's ``tools/list``."""
        self._rpc_id += 1
        reply = await self._ask({"type": "mcp", "data": {"jsonrpc": "2.0", "id": self._rpc_id, "method": "tools/list",
                                                         "params": {}}}, "mcp")
        if not isinstance(reply, dict) or reply.get("error"):
            err = reply.get("error") if isinstance(reply, dict) else None
            why = err.get("message") if isinstance(err, dict) else str(err or reply)
            raise OpenEnvError(f"tools/list failed: {why}")
        tools = (reply.get("result") or {}).get("tools")
        return [t for t in tools if isinstance(t, dict) and isinstance(t.get("name"), str)] \
            if isinstance(tools, list) else []

    async def state(self) -> dict[str, Any]:
        got = await self._ask({"type": "state"}, "state")
        return got if isinstance(got, dict) else {}

    async def _ask(self, message: dict[str, Any], expect: str) -> Any:
        import aiohttp

        if self._ws is None:
            raise OpenEnvError("the session is not open")
        try:
            await self._ws.send_str(json.dumps(message))
            reply = await asyncio.wait_for(self._ws.receive(), self.timeout)
        except TimeoutError:
            raise OpenEnvError(f"the server did not answer {message['type']} in {self.timeout:g} s") from None
        except (aiohttp.ClientError, OSError, RuntimeError) as e:
            raise OpenEnvError(f"the session broke: {e}") from None
        if reply.type != aiohttp.WSMsgType.TEXT:
            raise OpenEnvError(f"the server closed the session ({reply.type.name.lower()})")
        try:
            body = json.loads(reply.data)
        except ValueError:
            raise OpenEnvError(f"the server answered something that is not JSON: {str(reply.data)[:200]}") from None
        kind = body.get("type") if isinstance(body, dict) else None
        data = body.get("data") if isinstance(body, dict) else None
        if kind == "error":
            info = data if isinstance(data, dict) else {}
            text = str(info.get("message") or "error")
            if info.get("errors"):
                text += ": " + "; ".join(_validation_line(e) for e in info["errors"] if isinstance(e, dict))
            raise OpenEnvError(text, str(info.get("code") or ""))
        if kind != expect:
            raise OpenEnvError(f"the server answered {kind!r} to {message['type']}, expected {expect!r}")
        return data

    async def close(self) -> None:
        ws, http = self._ws, self._http
        self._ws = self._http = None
        if ws is not None:
            try:
                if not ws.closed:
                    # The server ends the session and then closes the socket itself: waiting for that
                    # spares it a close to a client already gone.
                    await ws.send_str(json.dumps({"type": "close"}))
                    await asyncio.wait_for(ws.receive(), _CLOSE_WAIT_S)
                await ws.close()
            except Exception:  # a broken connection: nothing left to close
                pass
        if http is not None:
            await http.close()


def _validation_line(err: dict[str, Any]) -> str:
    loc = ".".join(str(p) for p in err.get("loc") or () if p not in ("body", "action"))
    return f"{loc}: {err.get('msg', 'invalid')}" if loc else str(err.get("msg", "invalid"))
