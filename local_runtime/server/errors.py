"""The embedded server's errors, in OpenAI's body shape:
``{"error": {"message": str, "type": str, "param": str | null, "code": str | null}}``.

``type`` follows the status (``invalid_request_error``, ``not_found_error``, ``rate_limit_error``,
``server_error``); ``code`` is a string as OpenAI writes it (``model_not_found``,
``context_length_exceeded``, ``invalid_value``, ...) or null, never the HTTP status. The openai SDK
turns such a body into its exception classes (``BadRequestError``, ``NotFoundError``,
``RateLimitError``, ...) with ``.type``, ``.param`` and ``.code`` set from it.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from aiohttp import web

TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
         404: "not_found_error", 409: "conflict_error", 429: "rate_limit_error", 500: "server_error"}
DEFAULT_CODES = {429: "rate_limit_exceeded"}


class HTTPError(Exception):
    """A request that ends in an error answer: ``status``, one clear ``message``, and the OpenAI fields."""

    def __init__(self, status: int, message: str, kind: str | None = None, param: str | None = None,
                 code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.kind, self.param, self.code = status, message, kind, param, code


def error_type(status: int) -> str:
    if status in TYPES:
        return TYPES[status]
    return "server_error" if status >= 500 else "invalid_request_error"


def error_body(status: int, message: str, kind: str | None = None, param: str | None = None,
               code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind or error_type(status), "param": param,
                      "code": code if code is not None else DEFAULT_CODES.get(status)}}


def error_json(status: int, message: str, kind: str | None = None, param: str | None = None,
               code: str | None = None) -> web.Response:
    headers = {"Retry-After": "1"} if status == 429 else None
    return web.Response(body=orjson.dumps(error_body(status, message, kind, param, code)), status=status,
                        content_type="application/json", headers=headers)


@web.middleware
async def errors_middleware(request: web.Request, handler: Any) -> web.StreamResponse:
    try:
        return await handler(request)
    except HTTPError as e:
        return error_json(e.status, e.message, e.kind, e.param, e.code)
    except web.HTTPException as e:
        if e.status >= 400:
            return error_json(e.status, e.reason or "error")
        raise
    except (ConnectionResetError, asyncio.CancelledError):
        raise
    except Exception as e:  # never a traceback page: one line for the client, the detail in the log
        request.app.logger.exception("request failed")
        return error_json(500, f"internal error: {type(e).__name__}: {e}")
