"""Runs inside a sandbox: connect to the host's MCP socket and become the server, stdio on that socket.

``python3 mcp_relay.py SOCKET -- ARGV...``. The server's stdin and stdout are the socket itself (no copy
loop), so the host speaks to it exactly as to a stdio server it started. Standard library only: it runs
on the sandbox image's own interpreter, and is copied into the pool's bridge folder as it is.
"""

import os
import socket
import sys


def main() -> None:
    if len(sys.argv) < 4 or sys.argv[2] != "--":
        sys.stderr.write("usage: mcp_relay.py SOCKET -- ARGV...\n")
        sys.exit(2)
    path, argv = sys.argv[1], sys.argv[3:]
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
    except OSError as e:
        sys.stderr.write(f"mcp relay: cannot reach the host at {path}: {e}\n")
        sys.exit(111)
    os.dup2(s.fileno(), 0)
    os.dup2(s.fileno(), 1)
    s.close()
    try:
        os.execvp(argv[0], argv)
    except OSError as e:
        sys.stderr.write(f"mcp relay: cannot start {argv[0]}: {e.strerror}\n")
        sys.exit(127)


if __name__ == "__main__":
    main()
