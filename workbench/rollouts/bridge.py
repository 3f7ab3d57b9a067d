"""The sandbox end of the interception proxy: a stand-alone program (standard library only, any Python
3.8+) that runs inside a rollout's sandbox, listens on the sandbox's own loopback and relays every
connection to the proxy's Unix socket in the pool's bridge folder. It starts the agent program with
``OPENAI_BASE_URL`` and ``ANTHROPIC_BASE_URL`` pointing at that loopback port (the rollout's OpenAI and
Anthropic base URLs) and the OpenAI Agents SDK's trace export off (it could reach nothing), passes its stdin, stdout, stderr and exit code
through, and ends with it. The sandbox has no other way out: no network, no host processes to see.

    python3 bridge.py SOCKET ROLLOUT_KEY -- ARGV...

ROLLOUT_KEY is the rollout's segment of its proxy URL (``<rollout>~<secret>``): the program learns its own
rollout's URL and no other.
"""

import os
import socket
import subprocess
import sys
import threading


def _pipe(src, dst):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s, how in ((dst, socket.SHUT_WR), (src, socket.SHUT_RD)):
            try:
                s.shutdown(how)
            except OSError:
                pass


def _serve(listener, sock_path):
    while True:
        try:
            client, _ = listener.accept()
        except OSError:
            return
        try:
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            upstream.connect(sock_path)
        except OSError:
            client.close()
            continue
        threading.Thread(target=_pipe, args=(client, upstream), daemon=True).start()
        threading.Thread(target=_pipe, args=(upstream, client), daemon=True).start()


def main():
    sock_path, rollout_key = sys.argv[1], sys.argv[2]
    argv = sys.argv[sys.argv.index("--") + 1:]
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    port = listener.getsockname()[1]
    threading.Thread(target=_serve, args=(listener, sock_path), daemon=True).start()
    env = dict(os.environ)
    env["OPENAI_BASE_URL"] = f"http://127.0.0.1:{port}/r/{rollout_key}/v1"
    env["ANTHROPIC_BASE_URL"] = f"http://127.0.0.1:{port}/r/{rollout_key}"
    env.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")
    try:
        proc = subprocess.Popen(argv, env=env)
    except OSError as e:
        sys.stderr.write(f"cannot start {argv[0]}: {e.strerror or e}\n")
        return 127
    code = proc.wait()
    return 128 - code if code < 0 else code  # killed by signal N: the shell's 128+N


if __name__ == "__main__":
    sys.exit(main())
