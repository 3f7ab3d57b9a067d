"""Serve one OpenEnv environment on 127.0.0.1, run by the OpenEnv framework environment's interpreter
(``python -I serve.py ...``), never imported by Workbench.

``--app-dir DIR --app server.app:app``: the app of an environment's source folder (as its Dockerfile
serves it: from that folder). ``--dist NAME``: the app of an installed environment package, found from its
``openenv.yaml`` (its ``app``, under the package) or its ``server/app.py``.

The app is imported first (an import error ends the process with that error on stderr), then a port of
127.0.0.1 is bound and ``READY <port>`` printed on stdout. The server ends when its standard input closes:
when Workbench, which holds the other end, ends, however it ends.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import threading
from importlib import metadata
from pathlib import Path


def _package_app(dist_name: str) -> str:
    """``MODULE.server.app:app`` for an installed distribution: where its ``openenv.yaml`` or ``server/app.py`` lies."""
    try:
        dist = metadata.distribution(dist_name)
    except metadata.PackageNotFoundError:
        raise SystemExit(f"the package {dist_name} is not installed in the OpenEnv environment") from None
    files = [str(f) for f in dist.files or ()]
    for manifest in sorted((f for f in files if f.endswith("/openenv.yaml")), key=len):
        module = manifest.rsplit("/", 1)[0].replace("/", ".")
        app = "server.app:app"
        text = Path(str(dist.locate_file(manifest))).read_text()
        for line in text.splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "app" and value.strip():
                app = value.strip().strip("'\"")
        return f"{module}.{app}"
    for app_file in sorted((f for f in files if f.endswith("/server/app.py")), key=len):
        return app_file[: -len(".py")].replace("/", ".") + ":app"
    raise SystemExit(f"the package {dist_name} holds no OpenEnv environment (no openenv.yaml, no server/app.py)")


def _end_with_stdin() -> None:
    try:
        while sys.stdin.buffer.read(65536):
            pass
    finally:
        os._exit(0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--app-dir")
    ap.add_argument("--app", default="server.app:app")
    ap.add_argument("--dist")
    a = ap.parse_args()
    os.environ["ENABLE_WEB_INTERFACE"] = "false"
    if a.app_dir:
        os.chdir(a.app_dir)
        sys.path.insert(0, a.app_dir)
    app_ref = _package_app(a.dist) if a.dist else a.app

    import uvicorn
    from uvicorn.importer import import_from_string

    app = import_from_string(app_ref)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    threading.Thread(target=_end_with_stdin, daemon=True).start()
    print(f"READY {sock.getsockname()[1]}", flush=True)
    config = uvicorn.Config(app, log_level="warning", ws_max_size=64 * 1024 * 1024)
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
