"""An OpenAI-compatible chat-completions client on aiohttp, with retries and clear errors.

aiohttp was chosen by measurement (shared/PEERS.md): at 64 requests in flight it is an order of
magnitude faster than httpx or the OpenAI SDK's default transport, which would cap the harness.
"""

from __future__ import annotations

import asyncio
import os
import random
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import orjson

from workbench.config.redact import register as register_secret
from workbench.errors import ConfigError, EndpointError, EndpointFieldError, OptionError
from workbench.records.model_reply import ChatResponse, ModelError
from workbench.records.task import Message
from workbench.rollouts.anthropic_client import (
    ANTHROPIC_VERSION,
    as_chat_completion,
    classify_anthropic_status,
    from_messages_response,
    to_messages_request,
)

#: A response that sends nothing for this long is a timeout (``--stall-timeout``).
DEFAULT_STALL_S = 60.0
#: The largest response body kept (``--max-response-mb``); a larger one is a ``bad_response``.
DEFAULT_MAX_RESPONSE_BYTES = 16 << 20


#: The API hosts whose key ``workbench login PROVIDER`` stores (see workbench/config/credentials.py).
PROVIDER_HOSTS = {"api.openai.com": "openai", "api.anthropic.com": "anthropic"}


def resolve_api_key(flag: str | None, base_url: str | None = None) -> str | None:
    """The API key for ``base_url``: the flag, then ``WORKBENCH_API_KEY`` (the key for the endpoint at hand,
    whatever it is). For a provider's own API (``api.openai.com``, ``api.anthropic.com``) then that
    provider's variable (``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY``) and the token ``workbench login
    PROVIDER`` stored; for any other endpoint ``OPENAI_API_KEY``, as OpenAI-compatible clients read it.
    So a stored login never leaves for another endpoint, and no provider's key goes to another provider."""
    return api_key_source(flag, base_url)[0]


def api_key_source(flag: str | None, base_url: str | None = None) -> tuple[str | None, str]:
    """:func:`resolve_api_key`'s key and where it came from: ``"given"``, ``"$VAR"``, ``"workbench login
    PROVIDER"``, or ``""`` with no key."""
    if flag:
        return flag, "given"
    if os.environ.get("WORKBENCH_API_KEY"):
        return os.environ["WORKBENCH_API_KEY"], "$WORKBENCH_API_KEY"
    provider = PROVIDER_HOSTS.get((urlsplit(base_url).hostname or "").lower()) if base_url else None
    var = f"{provider or 'openai'}_API_KEY".upper()
    if os.environ.get(var):
        return os.environ[var], f"${var}"
    if provider is None:
        return None, ""
    from workbench.config.credentials import stored_token

    token = stored_token(provider)
    return token, f"workbench login {provider}" if token else ""


def _error_detail(body: bytes) -> str:
    try:
        data = orjson.loads(body)
        err = data.get("error", data) if isinstance(data, dict) else data
        if isinstance(err, dict):
            return str(err.get("message") or err.get("detail") or err)[:300]
        return str(err)[:300]
    except Exception:
        return body[:300].decode("utf-8", "replace").strip()


def _over_context(body: bytes, detail: str) -> bool:
    """Whether a 400 says the prompt (and max_tokens) does not fit the context: OpenAI's code
    ``context_length_exceeded``, or the wording OpenAI and vLLM share (vLLM's code is the status)."""
    try:
        err = orjson.loads(body).get("error")
        if isinstance(err, dict) and err.get("code") == "context_length_exceeded":
            return True
    except Exception:
        pass
    return "maximum context length" in detail.lower()


def classify_status(status: int, body: bytes, model: str) -> ModelError:
    detail = _error_detail(body)
    if status == 400 and _over_context(body, detail):
        return ModelError("context_length", f"the conversation no longer fits the model's context ({detail})", status)
    if status in (401, 403):
        return ModelError("auth", f"the endpoint rejected the API key (HTTP {status}: {detail})", status)
    if status == 404:
        low = detail.lower()
        if "model" in low or not detail:
            return ModelError("unknown_model", f"the endpoint does not serve model {model!r} (HTTP 404: {detail})", status)
        return ModelError("bad_request", f"HTTP 404: {detail}", status)
    if status == 429:
        return ModelError("rate_limit", f"rate limited (HTTP 429: {detail})", status)
    if status >= 500:
        return ModelError("server", f"server error (HTTP {status}: {detail})", status)
    return ModelError("bad_request", f"HTTP {status}: {detail}", status)


def parse_chat_body(body: bytes) -> ChatResponse:
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise ModelError("bad_response", f"the endpoint answered with something that is not JSON: {body[:120]!r}") from None
    return parse_chat_data(data)


def parse_chat_data(data: Any, choice_index: int = 0) -> ChatResponse:
    """A chat completion body (parsed JSON) as the :class:`ChatResponse` of its choice ``choice_index``."""
    if not isinstance(data, dict):
        raise ModelError("bad_response", "the endpoint answered with JSON that is not an object")
    choices = data.get("choices")
    if not choices or not isinstance(choices, list) or not isinstance(choices[0], dict):
        raise ModelError("bad_response", "the endpoint's response has no choices")
    choice = choices[choice_index]
    msg = choice.get("message")
    if not isinstance(msg, dict):
        raise ModelError("bad_response", "the endpoint's response has no message")
    content = msg.get("content")
    tool_calls = msg.get("tool_calls")
    if content is None and not tool_calls:
        content = ""
    message: Message = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    if msg.get("reasoning_content"):
        message["reasoning_content"] = msg["reasoning_content"]
    usage = data.get("usage") or {}
    extra = None
    for key in ("logprobs", "token_ids", "prompt_token_ids", "policy_version"):
        val = choice.get(key) if key in choice else data.get(key)
        if val is not None:
            extra = extra or {}
            extra[key] = val
    finish = choice.get("finish_reason")
    _expect(content is None or isinstance(content, str), "message.content", content, "a string or null")
    _expect(not tool_calls or isinstance(tool_calls, list), "message.tool_calls", tool_calls, "a list")
    _expect(finish is None or isinstance(finish, str), "finish_reason", finish, "a string or null")
    _expect(isinstance(usage, dict), "usage", usage, "an object")
    return ChatResponse(
        message=message,
        finish_reason=finish,
        prompt_tokens=_count(usage, "prompt_tokens"),
        completion_tokens=_count(usage, "completion_tokens"),
        extra=extra,
    )


def _expect(ok: bool, field: str, value: Any, what: str) -> None:
    if not ok:
        raise ModelError("bad_response", f"the endpoint's response has {field} = {str(value)[:60]!r}, not {what}")


def _count(usage: dict[str, Any], key: str) -> int:
    v = usage.get(key)
    if v is None:
        return 0
    _expect(isinstance(v, int) and not isinstance(v, bool) and v >= 0, f"usage.{key}", v, "a token count")
    return int(v)


class ChatClient:
    """Chat completions against any OpenAI-compatible endpoint.

    One aiohttp session is shared by all rollouts; its pool is sized to the run's concurrency.
    Retries 429, 5xx, timeouts and connection errors with exponential backoff and jitter
    (honouring ``Retry-After``); other errors are raised at once as :class:`ModelError`.
    ``request_timeout=None``: no timer per request (only connecting is bounded), for callers whose
    every call runs under a deadline of their own, as the engine's rollouts do.
    ``provider="anthropic"``: :meth:`chat` speaks the Anthropic Messages API (``POST /messages``, the
    ``x-api-key`` and ``anthropic-version`` headers) instead; see anthropic_client.py.
    """

    def __init__(
        self,
        api_key: str | None = None,
        *,
        max_connections: int = 64,
        request_timeout: float | None = 600.0,
        max_retries: int = 4,
        backoff_base: float = 0.5,
        backoff_max: float = 20.0,
        stall_timeout: float | None = DEFAULT_STALL_S,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        provider: str = "openai",
    ) -> None:
        if provider not in ("openai", "anthropic"):
            raise ConfigError(f"provider {provider!r} is not 'openai' or 'anthropic'")
        self.provider = provider
        self.api_key = api_key
        register_secret(api_key)
        self.stall_timeout = stall_timeout
        self.max_response_bytes = max_response_bytes
        self.max_connections = max_connections
        self.request_timeout = request_timeout
        self.max_retries = max_retries
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self._session: Any = None
        self.retries = 0
        self._headers = {"Content-Type": "application/json"}
        if provider == "anthropic":  # the Messages API's own headers (anthropic_client.py)
            self._headers["anthropic-version"] = ANTHROPIC_VERSION
            if api_key:
                self._headers["x-api-key"] = api_key
        elif api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"

    async def __aenter__(self) -> ChatClient:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def open(self) -> None:
        import aiohttp

        if self._session is None:
            connector = aiohttp.TCPConnector(limit=self.max_connections, limit_per_host=0, ttl_dns_cache=300,
                                             enable_cleanup_closed=False)
            # sock_read: a response that sends nothing for stall_timeout seconds is a timeout, however
            # long the request may take as a whole (a slow drip never holds a rollout to its deadline).
            timeout = aiohttp.ClientTimeout(total=self.request_timeout, sock_connect=60, sock_read=self.stall_timeout)
            # The headers are the session's, so a request does not merge a dict of its own into them.
            self._session = aiohttp.ClientSession(
                connector=connector, json_serialize=lambda o: orjson.dumps(o).decode(), timeout=timeout,
                headers=self._headers,
            )

    @property
    def headers(self) -> dict[str, str]:
        return self._headers

    async def session(self) -> Any:
        """The shared aiohttp session (opened on first use)."""
        if self._session is None:
            await self.open()
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _post_once(self, url: str, payload: bytes, model: str, classify: Any = None) -> bytes:
        try:
            async with self._session.post(url, data=payload) as resp:
                body = await self._read_capped(resp, url)
                if resp.status >= 400:
                    err = (classify or classify_status)(resp.status, body, model)
                    ra = resp.headers.get("Retry-After")
                    if ra:
                        try:
                            err.retry_after = float(ra)
                        except ValueError:
                            pass
                    raise err
                return body
        except ModelError:
            raise
        except TimeoutError as e:
            import aiohttp

            if isinstance(e, aiohttp.ServerTimeoutError) and self.stall_timeout is not None \
                    and "connect" not in str(e).lower():
                raise ModelError("timeout", f"{url} sent nothing for {self.stall_timeout:g}s (a stalled response; "
                                            "--stall-timeout)") from None
            within = f" within {self.request_timeout:g}s" if self.request_timeout is not None else ""
            raise ModelError("timeout", f"no answer from {url}{within}") from None
        except Exception as e:
            import aiohttp  # here, not on every request

            if isinstance(e, aiohttp.ClientConnectorError):
                raise ModelError("connection", f"cannot connect to {url} ({e.os_error.strerror or e})") from None
            if isinstance(e, aiohttp.ClientError | OSError):
                raise ModelError("connection", f"connection to {url} failed ({type(e).__name__}: {e})") from None
            raise

    async def _read_capped(self, resp: Any, url: str) -> bytes:
        """The body, refused (``bad_response``, the body dropped) past ``max_response_bytes``."""
        cap = self.max_response_bytes
        size = resp.content_length
        if size is not None:
            if size > cap:
                raise ModelError("bad_response", f"{url} answered with {size:,} bytes, over the {cap:,}-byte cap "
                                                 "(--max-response-mb); the body was not kept")
            return await resp.read()
        parts, total = [], 0
        while chunk := await resp.content.read(1 << 16):
            total += len(chunk)
            if total > cap:
                raise ModelError("bad_response", f"{url} answered with more than {cap:,} bytes, over the cap "
                                                 "(--max-response-mb); the body was not kept")
            parts.append(chunk)
        return b"".join(parts)

    async def post_json(self, url: str, payload: dict[str, Any], model: str = "", classify: Any = None) -> bytes:
        """POST ``payload``, retrying what is retryable; ``classify(status, body, model)`` names an HTTP error's
        :class:`ModelError` (:func:`classify_status`, OpenAI's errors, unless given)."""
        if self._session is None:
            await self.open()
        data = orjson.dumps(payload)
        attempt = 0
        while True:
            try:
                return await self._post_once(url, data, model, classify)
            except ModelError as e:
                if not e.retryable or attempt >= self.max_retries:
                    raise
                delay = e.retry_after if e.retry_after is not None else min(
                    self.backoff_max, self.backoff_base * (2**attempt))
                delay *= 0.5 + random.random()  # jitter
                attempt += 1
                self.retries += 1
                await asyncio.sleep(delay)

    async def chat(
        self,
        *,
        base_url: str,
        model: str,
        messages: list[Message],
        tools: list[dict[str, Any]] | None = None,
        params: dict[str, Any] | None = None,
        prompt_ids: list[int] | None = None,
    ) -> ChatResponse:
        """One chat completion. With ``prompt_ids`` the prompt is sent as those exact token ids
        (``/chat/completions/tokens``; see workbench/rollouts/continuation.py) instead of being rendered.
        With ``provider="anthropic"`` the request goes to ``/messages`` as a Messages request."""
        if self.provider == "anthropic":
            return await self._chat_anthropic(base_url, model, messages, tools, params, prompt_ids)
        payload: dict[str, Any] = {"model": model, "messages": messages}
        if params:
            payload.update(params)
        if tools:
            payload["tools"] = tools
        route = "/chat/completions"
        if prompt_ids is not None:
            payload["tokens"] = prompt_ids
            route += "/tokens"
        body = await self.post_json(base_url.rstrip("/") + route, payload, model)
        return parse_chat_body(body)

    async def _chat_anthropic(self, base_url: str, model: str, messages: list[Message],
                              tools: list[dict[str, Any]] | None, params: dict[str, Any] | None,
                              prompt_ids: list[int] | None) -> ChatResponse:
        if prompt_ids is not None:
            raise ModelError("bad_request", "the Anthropic Messages API takes no prompt token ids (prompt_ids); "
                                            "token continuation needs an OpenAI-compatible token server")
        payload = to_messages_request(model, list(messages), tools, params)
        body = await self.post_json(base_url.rstrip("/") + "/messages", payload, model, classify_anthropic_status)
        return from_messages_response(body)

    async def complete(self, base_url: str, payload: dict[str, Any], model: str, route: str = "/chat/completions"
                       ) -> bytes:
        """A chat completion request (not streamed) as it is, answered with the raw chat completion body; with
        ``provider="anthropic"`` sent as a Messages request and its answer made a chat completion body."""
        if self.provider != "anthropic":
            return await self.post_json(base_url.rstrip("/") + route, payload, model)
        if route != "/chat/completions":
            raise ModelError("bad_request", "the Anthropic Messages API takes no prompt token ids; token "
                                            "continuation needs an OpenAI-compatible token server")
        params = {k: v for k, v in payload.items() if k not in ("model", "messages", "tools", "stream",
                                                                  "stream_options")}
        request = to_messages_request(model, list(payload.get("messages") or []), payload.get("tools"), params)
        raw = await self.post_json(base_url.rstrip("/") + "/messages", request, model, classify_anthropic_status)
        return orjson.dumps(as_chat_completion(raw))

    async def list_models(self, base_url: str) -> list[dict[str, Any]] | None:
        """The model entries the endpoint lists, or None when it does not support ``/models``."""
        import aiohttp

        if self._session is None:
            await self.open()
        url = base_url.rstrip("/") + "/models"
        try:
            async with self._session.get(url, timeout=aiohttp.ClientTimeout(total=15)) as resp:
                body = await resp.read()
                if resp.status in (401, 403):
                    raise EndpointFieldError(
                        "EvalOptions.api_key", None, template="{url} rejected the API key (HTTP {status}); give "
                        "{field}, set OPENAI_API_KEY, or run `workbench login openai`", url=base_url, status=resp.status)
                if resp.status >= 400:
                    return None
                data = orjson.loads(body)
                return [m for m in data.get("data", []) if isinstance(m, dict) and m.get("id")]
        except EndpointError:
            raise
        except (aiohttp.ClientConnectorError, TimeoutError, OSError) as e:
            reason = getattr(getattr(e, "os_error", None), "strerror", None) or type(e).__name__
            raise EndpointFieldError("EvalOptions.base_url", base_url, template="cannot reach the model endpoint {value} "
                                     "({reason}); check {field} and that the server is running", reason=reason) from None
        except (aiohttp.ClientError, orjson.JSONDecodeError, AttributeError):
            return None


#: Servers known to accept vLLM's token fields (``return_token_ids``) and return logprobs.
TOKEN_SERVERS = frozenset({"vllm", "workbench"})
#: Where an endpoint, by its ``/v1/models`` ``owned_by``, serves ``/tokenize`` and the tokens route
#: (token continuation: continuation.py).
CONTINUATION_SERVERS = frozenset({"workbench"})


@dataclass(slots=True)
class EndpointInfo:
    models: list[str] | None
    owned_by: str = ""

    @property
    def returns_tokens(self) -> bool:
        return self.owned_by in TOKEN_SERVERS

    @property
    def continues_tokens(self) -> bool:
        """Whether it serves ``/tokenize`` and ``/v1/chat/completions/tokens`` (workbench/rollouts/continuation.py)."""
        return self.owned_by in CONTINUATION_SERVERS


def training_params(info: EndpointInfo) -> dict[str, Any]:
    """What the trace needs from the upstream, where it supports it: token ids and logprobs."""
    return {"logprobs": True, "return_token_ids": True} if info.returns_tokens else {}


def check_base_url(url: str, field: str = "EvalOptions.base_url") -> str:
    """``url`` without a trailing slash, when it can name an HTTP endpoint; one clear :class:`OptionError` on
    ``field`` when it cannot (a scheme other than http/https, no host, a malformed address or port, a
    credential in it)."""
    from urllib.parse import urlsplit

    from workbench.config.redact import credentials_said, redact_url

    def refuse(why: str, **values: Any) -> OptionError:
        return OptionError(field, redact_url(url), template="{field} {value!r}" + why, **values)

    text = url.strip()
    example = "e.g. http://127.0.0.1:8000/v1"
    try:
        parts = urlsplit(text)
        port = parts.port  # parses the port and a bracketed IPv6 host
    except ValueError as e:
        raise refuse(" is not a valid URL ({reason}); {example}", reason=e, example=example) from None
    if parts.scheme not in ("http", "https"):
        what = f"its scheme is {parts.scheme!r}" if parts.scheme else "it has no scheme"
        raise refuse(" cannot work: {what}; use http:// or https://, {example}", what=what, example=example)
    if not parts.hostname:
        raise refuse(" has no host; {example}", example=example)
    if port == 0:
        raise refuse(": port 0 cannot be connected to")
    said = credentials_said(text)
    if said:
        raise OptionError(field, redact_url(url), template="{field} {value!r} holds a credential ({said}); a URL is "
                          "stored and printed, so pass the key with {api_key} or WORKBENCH_API_KEY (or register the "
                          "model: `workbench models add NAME --api-key-env VAR`)", said=said,
                          names={"api_key": field.rpartition(".")[0] + ".api_key"})
    return text.rstrip("/")


async def preflight(client: ChatClient, base_url: str, model: str) -> EndpointInfo:
    """Fail fast, with one clear sentence, when the endpoint cannot serve this run at all."""
    entries = await client.list_models(base_url)
    models = [str(m["id"]) for m in entries] if entries is not None else None
    if models and model not in models and f"models/{model}" in models:
        model = f"models/{model}"  # Gemini's compatibility layer lists its models as models/<id> and serves <id>
    owned = next((str(m.get("owned_by", "")) for m in entries or () if m["id"] == model), "")
    if not owned and entries:
        owned = str(entries[0].get("owned_by", ""))
    info = EndpointInfo(models, owned.lower())
    if models is not None and models and model not in models:
        import difflib

        close = difflib.get_close_matches(model, models, n=3, cutoff=0.4)
        hint = f"did you mean {' or '.join(close)}?" if close else f"it serves: {', '.join(models[:8])}"
        raise EndpointFieldError("EvalOptions.model", model, template="{url} does not serve model {value!r}; {hint} "
                                 "(give {field})", url=base_url, hint=hint)
    return info
