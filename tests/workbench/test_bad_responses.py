"""Model responses that are not what they claim: too big, of the wrong types, or dripping a byte at a
time. Each is the model's bad response (or a timeout), recorded on the rollout; the body is not kept;
nothing hangs. The server is a real HTTP server on 127.0.0.1 that misbehaves on purpose."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import ADDER_ENV, CliResult, assert_user_error, last_json, query

# slow: responses that drip or time out, each through a CLI eval
pytestmark = pytest.mark.slow

GOOD = {"id": "x", "object": "chat.completion", "model": "mock-model",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "42"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1}}


def _body(mode: str) -> dict[str, Any]:
    if mode == "usage-words":
        return {**GOOD, "usage": {"prompt_tokens": "lots", "completion_tokens": 1}}
    if mode == "content-number":
        return {**GOOD, "choices": [{"index": 0, "message": {"role": "assistant", "content": 7}}]}
    if mode == "finish-list":
        return {**GOOD, "choices": [{**GOOD["choices"][0], "finish_reason": ["stop"]}]}
    return GOOD


class Misbehaving(BaseHTTPRequestHandler):
    mode = "good"

    def log_message(self, *a: Any) -> None:
        pass

    def _send(self, code: int, data: bytes, length: bool = True) -> None:
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        if length:
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._send(200, json.dumps({"object": "list", "data": [{"id": "mock-model", "owned_by": "test"}]}).encode())

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        mode = type(self).mode
        if mode == "huge":  # a 50 MB body announced up front
            pad = b" " * (50 << 20)
            self._send(200, json.dumps(GOOD).encode()[:-1] + b', "pad": "' + pad + b'"}')
        elif mode == "huge-chunked":  # the same without a length: it must be cut while it arrives
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            try:
                for _ in range(60):
                    chunk = b" " * (1 << 20)
                    self.wfile.write(b"%x\r\n" % len(chunk) + chunk + b"\r\n")
                self.wfile.write(b"0\r\n\r\n")
            except (BrokenPipeError, ConnectionResetError):
                pass
        elif mode == "drip":  # headers at once, then a byte every 0.7 s for a minute
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", "100")
            self.end_headers()
            try:
                for _ in range(90):
                    self.wfile.write(b" ")
                    self.wfile.flush()
                    time.sleep(0.7)
            except (BrokenPipeError, ConnectionResetError):
                pass
        elif mode == "echo-key":  # an error body that quotes the key it was sent, as some servers do
            key = self.headers.get("Authorization", "").removeprefix("Bearer ")
            self._send(500, json.dumps({"error": {"message": f"internal error for key {key} (debug dump)"}}).encode())
        elif mode == "stall":  # headers, then nothing at all
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", "100")
            self.end_headers()
            self.wfile.flush()
            time.sleep(20)
        else:
            self._send(200, json.dumps(_body(mode)).encode())


@pytest.fixture
def bad_server() -> Iterator[Callable[[str], str]]:
    servers: list[ThreadingHTTPServer] = []

    def start(mode: str) -> str:
        handler = type("Handler", (Misbehaving,), {"mode": mode})
        srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        srv.daemon_threads = True
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        return f"http://127.0.0.1:{srv.server_address[1]}/v1"

    yield start
    for s in servers:
        s.shutdown()
        s.server_close()


@pytest.mark.parametrize(("mode", "fragment"), [
    ("huge", "over the 16,777,216-byte cap"),
    ("huge-chunked", "more than 16,777,216 bytes"),
    ("usage-words", "usage.prompt_tokens = 'lots'"),
    ("content-number", "message.content = '7'"),
    ("finish-list", "finish_reason"),
], ids=["huge", "huge-chunked", "usage-words", "content-number", "finish-list"])
def test_a_bad_response_is_the_models_bad_response_and_its_body_is_not_kept(
        mode: str, fragment: str, bad_server: Callable[[str], str], cli: Callable[..., CliResult],
        write_env: Callable[..., Path], store_path: Path) -> None:
    url = bad_server(mode)
    res = cli("eval", write_env(ADDER_ENV), "--base-url", url, "-m", "mock-model", "-n", "2", "--max-retries", "0",
              "--db", store_path, "--json")
    assert_user_error(res, "every rollout", "model.bad_response")
    s = last_json(res.stdout)
    rows = query(store_path, "SELECT status, error_kind FROM rollout WHERE run_id=?", (s["run_id"],))
    assert rows == [("error", "model.bad_response")] * 2
    messages = [m for (m,) in query(store_path, "SELECT message FROM rollout_error WHERE run_id=?", (s["run_id"],))]
    assert messages and all(fragment in m for m in messages), messages
    assert store_path.stat().st_size < 2 << 20, "the body of a refused response is not stored"


def test_a_smaller_cap_is_taken_from_the_flag(bad_server: Callable[[str], str], cli: Callable[..., CliResult],
                                              write_env: Callable[..., Path], store_path: Path) -> None:
    url = bad_server("good")
    ok = cli("eval", write_env(ADDER_ENV), "--base-url", url, "-m", "mock-model", "-n", "1", "--db", store_path,
             "--json")
    assert ok.rc == 0, ok.stderr
    tiny = cli("eval", write_env(ADDER_ENV), "--base-url", url, "-m", "mock-model", "-n", "1", "--db", store_path,
               "--max-response-mb", "0.0001", "--max-retries", "0", "--json")
    assert_user_error(tiny, "over the 104-byte cap")


@pytest.mark.parametrize("mode", ["drip", "stall"])
def test_a_stalled_response_times_out_at_the_stall_timeout_not_the_rollout_timeout(
        mode: str, bad_server: Callable[[str], str], cli: Callable[..., CliResult], write_env: Callable[..., Path],
        store_path: Path) -> None:
    url = bad_server(mode)
    t0 = time.monotonic()
    res = cli("eval", write_env(ADDER_ENV), "--base-url", url, "-m", "mock-model", "-n", "1", "--max-retries", "0",
              "--stall-timeout", "0.5", "--timeout", "600", "--db", store_path, "--json", timeout=120)
    elapsed = time.monotonic() - t0
    # The drip's gaps (0.7 s) and the silence both pass the 0.5 s stall: the call fails at the first one.
    assert_user_error(res, "every rollout", "timeout", "sent nothing for 0.5s")
    assert elapsed < 60, f"a hang guard: the stalled call held the eval for {elapsed:.0f}s"


def test_a_key_a_server_echoes_is_never_printed_or_stored(bad_server: Callable[[str], str],
                                                          cli: Callable[..., CliResult], write_env: Callable[..., Path],
                                                          store_path: Path) -> None:
    key = "sk-test-3f9a7c1e5b2d4a6f8e0c"
    url = bad_server("echo-key")
    res = cli("eval", write_env(ADDER_ENV), "--base-url", url, "-m", "mock-model", "-n", "2", "--max-retries", "0",
              "--api-key", key, "--db", store_path, "--json")
    assert_user_error(res, "every rollout", "[redacted]")
    assert key not in res.stdout and key not in res.stderr
    dump = "\n".join(str(row) for table in ("rollout_error", "run", "rollout", "model_call")
                     for row in query(store_path, f"SELECT * FROM {table}"))
    assert "internal error for key [redacted]" in dump and key not in dump
    assert key.encode() not in store_path.read_bytes()
