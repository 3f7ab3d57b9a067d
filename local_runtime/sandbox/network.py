"""Network allow lists for Docker sandboxes: a bridge network of their own plus iptables rules.

``wb.Docker(network=["gateway:8000", "10.0.0.5:443", "192.168.1.0/24"])``: the pool's containers sit on
a fresh bridge (``wb<hex>``) and may open TCP connections to the listed addresses only; everything else
that leaves the bridge (to other hosts through ``DOCKER-USER`` in ``FORWARD``, or to this machine through
``INPUT``) is dropped. ``gateway`` is this machine as the containers see it (the bridge's gateway), so
``"gateway:PORT"`` lets them reach one local service (a model server, the interception proxy). Host
names are resolved here once and given to the containers as ``/etc/hosts`` entries (no DNS is allowed
unless listed). Needs root and iptables on the machine that runs the Docker engine.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import secrets
import shutil
import socket
import subprocess
from typing import Any

from workbench_local.sandbox.fs import owner_alive, process_start_time

from workbench.authoring.sandbox import SandboxError

LABEL = "workbench.sandbox"


def _iptables(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["iptables", "-w", "5", *args], capture_output=True, text=True)


def _parse(entry: str, gateway: str) -> tuple[str, int | None, str | None]:
    """``(address or cidr, port or None, host name to pin or None)``."""
    host, port = entry, None
    if entry.count(":") == 1:
        host, _, p = entry.partition(":")
        if not p.isdigit() or not 0 < int(p) < 65536:
            raise SandboxError(f"network allow list entry {entry!r}: bad port")
        port = int(p)
    if host == "gateway":
        return gateway, port, None
    try:
        return str(ipaddress.ip_network(host, strict=False)), port, None
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, port or 80, socket.AF_INET, socket.SOCK_STREAM)
    except OSError as e:
        raise SandboxError(f"network allow list entry {entry!r}: cannot resolve {host} ({e})") from None
    return str(infos[0][4][0]), port, host


def allow_list_network(client: Any, entries: tuple[str, ...]) -> tuple[str, dict[str, str]]:
    """Create the pool's bridge network and its rules; returns ``(network name, extra /etc/hosts)``."""
    if os.geteuid() != 0 or not shutil.which("iptables"):
        raise SandboxError("network allow lists need root and iptables on this machine (the Docker engine's host); "
                           "use network=False or network=True")
    if _iptables("-S", "DOCKER-USER").returncode != 0:
        raise SandboxError("network allow lists need Docker's iptables chains (DOCKER-USER) on this machine")
    bridge = "wb" + secrets.token_hex(5)
    labels = {LABEL: "1", "workbench.pid": str(os.getpid()), "workbench.pid_start": process_start_time(os.getpid()),
              "workbench.host": socket.gethostname(), "workbench.bridge": bridge}
    net = client.networks.create(f"wb-allow-{bridge}", driver="bridge", labels=labels,
                                 options={"com.docker.network.bridge.name": bridge})
    try:
        net.reload()
        gateway = net.attrs["IPAM"]["Config"][0]["Gateway"]
        tag = ["-m", "comment", "--comment", f"workbench:{bridge}"]
        rules: list[list[str]] = []
        hosts: dict[str, str] = {}
        for entry in entries:
            addr, port, name = _parse(entry, gateway)
            if name:
                hosts[name] = addr
            match = ["-d", addr] + (["-p", "tcp", "--dport", str(port)] if port else [])
            rules.append(match)
        for chain in ("DOCKER-USER", "INPUT"):
            # Inserted at the top in reverse: the accepts come first, the drop last.
            _check(_iptables("-I", chain, "1", "-i", bridge, *tag, "-j", "DROP"))
            for match in rules:
                _check(_iptables("-I", chain, "1", "-i", bridge, *match, *tag, "-j", "ACCEPT"))
    except BaseException:
        drop_network(client, net.name)
        raise
    return net.name, hosts


def _check(p: subprocess.CompletedProcess[str]) -> None:
    if p.returncode != 0:
        raise SandboxError(f"iptables failed: {p.stderr.strip()[:200]}")


def drop_network(client: Any, name: str) -> None:
    """Remove a pool's rules and network (idempotent)."""
    bridge = name.rsplit("-", 1)[-1]
    for chain in ("DOCKER-USER", "INPUT"):
        listing = _iptables("-S", chain).stdout.splitlines()
        for line in listing:
            if f"workbench:{bridge}" in line and line.startswith("-A "):
                _iptables("-D", *_split(line[3:]))
    with contextlib.suppress(Exception):
        client.networks.get(name).remove()


def _split(rule: str) -> list[str]:
    import shlex

    return shlex.split(rule)


def gc_networks(client: Any, everything: bool = False) -> int:
    """Drop allow-list networks whose owner process is gone (all of them with ``everything``)."""
    n = 0
    host = socket.gethostname()
    for net in client.networks.list(filters={"label": f"{LABEL}=1"}):
        labels = net.attrs.get("Labels") or {}
        pid = int(labels.get("workbench.pid", "0") or 0)
        mine = labels.get("workbench.host") == host
        if everything or (mine and not owner_alive(pid, labels.get("workbench.pid_start", ""))):
            drop_network(client, net.name)
            n += 1
    return n
