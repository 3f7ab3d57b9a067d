"""The exec agent: one long-lived process inside a sandbox that starts its commands for the host.

Why: starting a command from outside costs far more than the command itself when it is short. Through
bubblewrap every ``exec`` builds a namespace and ~30 mounts and execs three helper binaries; through
Docker every ``exec`` is three Engine API calls and a ``runc exec``. The agent is started once per
sandbox (per rollout for ``wb.Local()``, per container for ``wb.Docker()``) and then only forks.

This file is *the program that runs inside the sandbox*: a short ``python3 -I -S -c`` bootstrap reads
this program from the channel (source, or code the same interpreter compiled) and runs it, so it must
run on any Python >= 3.6 with the standard library only, and it imports only built-in modules (it
starts once per rollout: ``json`` alone would double its start-up). It talks to the host over its
stdin/stdout, which only the host holds: nothing inside the sandbox can connect to it or pose as it.
Messages are frames ``kind (1 byte), exec id (u32), payload length (u32), payload``:

host -> agent (payloads are ``marshal`` data): ``C`` config (rlimits, user, grace), ``S`` start (argv,
cwd, env, cap, stdin), ``I`` stdin bytes, ``D`` end of stdin, ``K`` kill the command's whole process
tree, ``X`` reset (kill every process of the sandbox user, clear shared memory; the host wipes files).
agent -> host (payloads are ASCII numbers): ``H`` hello (pid uid), ``1``/``2`` stdout/stderr bytes (at
most ``cap`` bytes per stream; the rest is counted and dropped), ``E`` exit (code dropped-out
dropped-err), ``x`` reset done (ok left ipc cpu-seconds), ``!`` a fatal agent error (text).

Each command leads its own session. It is finished when it has exited and its pipes are closed, or
``grace`` seconds after it exited while something it started still holds them. Then whatever it left
behind is killed, detached daemons included: no process outlives its command, so nothing lies in wait
for a later one (the reward's). A kill reaches the process group, the session and every descendant
found in ``/proc``. Commands get the sandbox's rlimits; when the agent runs as root (Docker)
they also drop to the sandbox user, and the agent stays out of their reach (another uid). As the same
uid (bubblewrap) it is the namespace's init (no signal from inside reaches it) and not dumpable (no
tracing, no access to its memory or pipes); what a same-uid process can still change (its limits and
scheduling) is checked at each reset, and an agent found changed is replaced, never reused.
"""

import errno
import marshal
import os
import resource
import select
import signal
import struct
import sys
import time

HEAD = struct.Struct(">cII")
CHUNK = 1 << 16
RLIMITS = {"cpu": resource.RLIMIT_CPU, "as": resource.RLIMIT_AS, "data": resource.RLIMIT_DATA,
           "fsize": resource.RLIMIT_FSIZE,
           "core": resource.RLIMIT_CORE, "nproc": resource.RLIMIT_NPROC, "nofile": resource.RLIMIT_NOFILE}


class Command:
    __slots__ = ("xid", "pid", "fds", "cap", "sent", "dropped", "stdin", "pending", "eof_in", "status", "exited_at",
                 "swept")

    def __init__(self, xid, pid, cap):
        self.xid, self.pid, self.cap = xid, pid, cap
        self.fds = {}  # read fd -> stream number (1 stdout, 2 stderr)
        self.sent = [0, 0]
        self.dropped = [0, 0]
        self.stdin = None  # write fd of the command's stdin
        self.pending = bytearray()
        self.eof_in = False
        self.status = None
        self.exited_at = 0.0
        self.swept = False  # what it left behind holding its pipes was killed


class Agent:
    def __init__(self, rfd, wfd):
        self.rfd, self.wfd = rfd, wfd
        self.inbuf = bytearray()
        self.cmds = {}  # exec id -> Command
        self.by_pid = {}
        self.by_fd = {}  # output fd -> Command
        self.by_in = {}  # stdin fd -> Command
        self.rlimits = []
        self.user = None
        self.grace = 0.1
        self.oom_adj = True
        self.baseline = None
        self.warm = None  # the warm-Python zygote's agent side, when the runtime asked for one
        self.poll = select.poll()
        self.wake_r, self.wake_w = wake_on_signals()
        self.poll.register(self.rfd, select.POLLIN)
        self.poll.register(self.wake_r, select.POLLIN)

    # -- the channel ---------------------------------------------------------------------------
    def send(self, kind, xid, payload=b""):
        view = memoryview(HEAD.pack(kind, xid, len(payload)) + payload)
        while view:
            view = view[os.write(self.wfd, view):]

    def read_channel(self):
        data = os.read(self.rfd, CHUNK)
        if not data:  # the host is gone: take everything down with us
            self.kill_everything()
            sys.exit(0)
        self.inbuf += data
        while len(self.inbuf) >= HEAD.size:
            kind, xid, size = HEAD.unpack_from(self.inbuf)
            if len(self.inbuf) < HEAD.size + size:
                return
            payload = bytes(self.inbuf[HEAD.size:HEAD.size + size])
            del self.inbuf[:HEAD.size + size]
            self.handle(kind, xid, payload)

    def handle(self, kind, xid, payload):
        if kind == b"S":
            self.start(xid, marshal.loads(payload))
        elif kind == b"I" or kind == b"D":
            cmd = self.cmds.get(xid)
            if cmd is not None and cmd.stdin is not None:
                if kind == b"I":
                    cmd.pending += payload
                else:
                    cmd.eof_in = True
                self.poll.register(cmd.stdin, select.POLLOUT)
        elif kind == b"K":
            cmd = self.cmds.get(xid)
            if cmd is not None:
                self.kill_tree(cmd.pid)
        elif kind == b"X":
            self.send(b"x", xid, self.reset())
        elif kind == b"C":
            cfg = marshal.loads(payload)
            self.rlimits = [(RLIMITS[k], tuple(v)) for k, v in cfg.get("rlimits", {}).items() if k in RLIMITS]
            self.user = tuple(cfg["user"]) if cfg.get("user") else None
            self.grace = float(cfg.get("grace", 0.1))
            self.oom_adj = bool(cfg.get("oom_adj", True))
            if cfg.get("warm"):
                self.warm = Warm(self, cfg["warm"])
                self.warm.spawn()
            self.baseline = own_state()  # after Warm, which may load ctypes (own_state reads the I/O priority with it)
            self.send(b"H", 0, numbers(os.getpid(), os.getuid()))

    # -- starting a command --------------------------------------------------------------------
    def start(self, xid, spec):
        argv, env, cwd = [str(a) for a in spec["argv"]], dict(spec["env"]), str(spec["cwd"])
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        if spec.get("stdin"):
            in_r, in_w = os.pipe()
        else:
            in_r, in_w = os.open(os.devnull, os.O_RDONLY), None
        pid = None
        if self.warm is not None and self.warm.wants(argv):
            pid = self.warm.start(xid, {"argv": argv, "env": env, "cwd": cwd, "rlimits": self.rlimits,
                                        "user": self.user, "oom_adj": self.oom_adj}, in_r, out_w, err_w)
        try:
            if pid is None:
                pid = os.fork()
        except OSError as e:
            for fd in (out_r, out_w, err_r, err_w, in_r, in_w):
                if fd is not None:
                    os.close(fd)
            self.send(b"2", xid, f"workbench: cannot start {argv[0]}: {e.strerror}\n".encode())
            self.send(b"E", xid, numbers(126, 0, 0))
            return
        if pid == 0:
            self.child(argv, env, cwd, in_r, out_w, err_w)
        for fd in (out_w, err_w, in_r):
            os.close(fd)
        cmd = Command(xid, pid, int(spec.get("cap") or 1 << 20))
        self.cmds[xid] = cmd
        self.by_pid[pid] = cmd
        for fd, stream in ((out_r, 1), (err_r, 2)):
            os.set_blocking(fd, False)
            cmd.fds[fd] = stream
            self.by_fd[fd] = cmd
            self.poll.register(fd, select.POLLIN)
        if in_w is not None:
            os.set_blocking(in_w, False)
            cmd.stdin = in_w
            self.by_in[in_w] = cmd

    def child(self, argv, env, cwd, in_r, out_w, err_w):
        become_command(argv, env, cwd, in_r, out_w, err_w, self.rlimits, self.user, self.oom_adj)

    # -- output, input, exits ------------------------------------------------------------------
    def forward(self, cmd, stream, data):
        i = stream - 1
        room = cmd.cap - cmd.sent[i]
        if room <= 0:
            cmd.dropped[i] += len(data)
            return
        if len(data) > room:
            cmd.dropped[i] += len(data) - room
            data = data[:room]
        cmd.sent[i] += len(data)
        self.send(b"1" if stream == 1 else b"2", cmd.xid, data)

    def read_output(self, fd):
        cmd = self.by_fd[fd]
        try:
            data = os.read(fd, CHUNK)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if data:
            self.forward(cmd, cmd.fds[fd], data)
        else:
            self.close_output(cmd, fd)

    def close_output(self, cmd, fd):
        self.poll.unregister(fd)
        os.close(fd)
        del self.by_fd[fd]
        del cmd.fds[fd]

    def write_input(self, fd):
        cmd = self.by_in[fd]
        try:
            if cmd.pending:
                n = os.write(fd, cmd.pending[:CHUNK])
                del cmd.pending[:n]
        except BlockingIOError:
            return
        except OSError:  # the command closed its stdin
            cmd.pending.clear()
            cmd.eof_in = True
        if not cmd.pending:
            if cmd.eof_in:
                self.close_input(cmd)
            else:
                self.poll.unregister(fd)

    def close_input(self, cmd):
        if cmd.stdin is None:
            return
        try:
            self.poll.unregister(cmd.stdin)
        except KeyError:
            pass
        os.close(cmd.stdin)
        del self.by_in[cmd.stdin]
        cmd.stdin = None

    def reap(self):
        for pid, status in reaped():
            cmd = self.by_pid.pop(pid, None)
            if cmd is not None:
                cmd.status = status
                cmd.exited_at = time.monotonic()

    def finish(self):
        now = time.monotonic()
        for cmd in list(self.cmds.values()):
            if cmd.status is None:
                continue
            if cmd.fds and now - cmd.exited_at >= self.grace and not cmd.swept:
                # Exited, but a process it left behind still holds its output: the command is over.
                cmd.swept = True
                self.kill_tree(cmd.pid)
            if cmd.fds and now - cmd.exited_at >= self.grace + 2.0:
                for fd in list(cmd.fds):  # held by something we cannot kill: stop waiting for it
                    self.close_output(cmd, fd)
            if cmd.fds:
                continue
            self.close_input(cmd)
            del self.cmds[cmd.xid]
            st = cmd.status
            code = os.WEXITSTATUS(st) if os.WIFEXITED(st) else 128 + os.WTERMSIG(st) if os.WIFSIGNALED(st) else -1
            self.send(b"E", cmd.xid, numbers(code, *cmd.dropped))
            self.sweep()

    def next_deadline(self):
        """Milliseconds until the next look at finished commands whose pipes are still held (-1: none)."""
        now = time.monotonic()
        waits = [now + 0.05 if cmd.swept else cmd.exited_at + self.grace
                 for cmd in self.cmds.values() if cmd.status is not None and cmd.fds]
        return max(0, int((min(waits) - now) * 1000) + 1) if waits else -1

    # -- killing -------------------------------------------------------------------------------
    def as_user(self, fn):
        """Run ``fn`` with the sandbox user's effective uid (a root agent signals only that user's processes)."""
        if self.user is None or os.getuid() != 0:
            return fn()
        os.setresuid(-1, self.user[0], -1)
        try:
            return fn()
        finally:
            os.setresuid(-1, 0, -1)

    def kill_tree(self, root):
        me = os.getpid()

        def kill():
            for _ in range(5):
                try:
                    os.killpg(root, signal.SIGKILL)
                except OSError:
                    pass
                victims = tree(root, me)
                if not victims:
                    return
                sigkill_all(victims)

        self.as_user(kill)

    def sweep(self):
        """Kill whatever finished commands left behind (daemons that double-forked included): no process
        outlives the command that started it, so nothing lies in wait for a later command (the reward's)."""
        me = os.getpid()
        table = proc_table()
        keep = {me, 1}
        if self.warm is not None and self.warm.pid:
            keep.add(self.warm.pid)
        for cmd in self.cmds.values():
            keep.update(tree(cmd.pid, me, table))
            keep.add(cmd.pid)
        uid = self.user[0] if self.user is not None else os.getuid()
        victims = [p for p in table if p not in keep and owner(p) == uid]
        if victims:
            self.as_user(lambda: sigkill_all(victims))

    def kill_everything(self):
        for cmd in list(self.cmds.values()):
            self.kill_tree(cmd.pid)
        if self.user is None:
            try:
                os.kill(-1, signal.SIGKILL)
            except OSError:
                pass

    def reset(self):
        """Kill every process of the sandbox user, remove what it left in shared memory and IPC."""
        for cmd in list(self.cmds.values()):
            for fd in list(cmd.fds):
                self.close_output(cmd, fd)
            self.close_input(cmd)
        self.cmds.clear()
        uid = self.user[0] if self.user is not None else os.getuid()
        spare = self.warm.spare_from_reset() if self.warm is not None else 0
        agent_pid = os.getpid()
        pid = os.fork()
        if pid == 0:
            try:
                signal.set_wakeup_fd(-1)
                if self.user is not None:
                    os.setgroups([])
                    os.setgid(self.user[1])
                    os.setuid(self.user[0])
                for _ in range(3):
                    if spare:  # the zygote (same uid) has just killed all the others itself: only stragglers
                        sigkill_all([p for p in pids_of(uid) if p not in (spare, agent_pid, os.getpid())])
                        continue
                    try:
                        os.kill(-1, signal.SIGKILL)  # all of this uid's processes but the caller
                    except OSError:
                        pass
                clear_shared(uid)
                clear_keyrings()
                os._exit(0)
            except BaseException:
                os._exit(1)
        ok = False
        while True:
            try:
                _, st = os.waitpid(pid, 0)
                ok = os.WIFEXITED(st) and os.WEXITSTATUS(st) == 0
                break
            except ChildProcessError:
                break
            except InterruptedError:
                continue
        me = os.getpid()
        left = []
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:
            self.reap()
            left = [p for p in pids_of(uid) if p != me and p != spare]
            if not left:
                break
            time.sleep(0.005)
        self.by_pid.clear()
        if self.warm is not None:
            self.warm.after_reset()
        # A process of the same uid may have lowered our limits or priority (prlimit, renice, taskset):
        # commands we start would inherit that, so such an agent must not serve another rollout.
        ok = ok and own_state() == self.baseline
        times = os.times()
        return numbers(int(ok), len(left), sysv_ipc_left(uid), times[0] + times[1])

    # -- the loop ------------------------------------------------------------------------------
    def run(self):
        while True:
            for fd, ev in self.poll.poll(self.next_deadline()):
                if fd == self.rfd:
                    self.read_channel()
                elif fd == self.wake_r:
                    drain(self.wake_r)
                elif self.warm is not None and fd == self.warm.fd:
                    self.warm.receive()
                elif fd in self.by_fd:
                    self.read_output(fd)
                elif fd in self.by_in:
                    if ev & (select.POLLERR | select.POLLHUP):
                        cmd = self.by_in[fd]
                        cmd.pending.clear()
                        self.close_input(cmd)
                    else:
                        self.write_input(fd)
            self.reap()
            self.finish()


class Warm:
    """The agent's side of the warm-Python zygote (``warm.py``, which the host sends in the
    configuration): starts it as a fresh interpreter, hands it the Python commands it may fork (their spec
    through a pipe only the forked child reads, their stdio over the socket) and takes their pids and exit
    statuses back. Whenever it is not ready, or goes away, commands start the usual way."""

    REPLY_S = 5.0

    def __init__(self, agent, cfg):
        self.agent = agent
        self.program = cfg["program"].encode() if isinstance(cfg["program"], str) else cfg["program"]
        self.modules = list(cfg.get("modules", ()))
        self.agent_source = cfg["agent"]  # the zygote's children become commands with our become_command
        import _socket

        self.socket = _socket
        self.sock = None
        self.fd = -1
        self.pid = 0
        self.ready = False
        self.replies = {}  # exec id -> pid
        self.alive_seen = False
        self.killed = False
        self.state = None  # what a same-uid process could change about the zygote, as it was when ready
        if os.getuid() == 0:
            try:  # orphans of a zygote that died come to us, with their exit status
                import ctypes

                ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
            except (OSError, ImportError, AttributeError):
                pass

    def spawn(self):
        ours, theirs = self.socket.socketpair(self.socket.AF_UNIX, self.socket.SOCK_SEQPACKET)
        prog_r, prog_w = os.pipe()
        n = len(self.program)
        boot = (f"import os\nb=b''\nwhile len(b)<{n}:\n c=os.read(0,{n}-len(b))\n if not c:raise SystemExit(3)\n"
                " b+=c\nexec(compile(b,'wb-warm','exec'))")
        env = {"PATH": os.environ.get("PATH") or "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8",
               "LC_ALL": "C.UTF-8"}
        try:
            pid = os.fork()
        except OSError:
            for x in (ours, theirs):
                x.close()
            for fd in (prog_r, prog_w):
                os.close(fd)
            return
        if pid == 0:
            try:
                signal.set_wakeup_fd(-1)
                for sig in (signal.SIGCHLD, signal.SIGPIPE, signal.SIGXFSZ):
                    signal.signal(sig, signal.SIG_DFL)
                os.setsid()
                os.dup2(prog_r, 0)
                os.dup2(theirs.fileno(), 3)
                null = os.open(os.devnull, os.O_WRONLY)
                os.dup2(null, 1)
                os.closerange(4, 1 << 16)
                os.execve(sys.executable, [sys.executable, "-I", "-S", "-c", boot], env)
            except BaseException:
                pass
            os._exit(127)
        theirs.close()
        os.close(prog_r)
        try:
            data = self.program + marshal.dumps({"modules": self.modules, "agent": self.agent_source}, 2)
            view = memoryview(data)
            while view:
                view = view[os.write(prog_w, view):]
        except OSError:
            pass
        os.close(prog_w)
        self.sock, self.fd, self.pid, self.ready = ours, ours.fileno(), pid, False
        self.agent.poll.register(self.fd, select.POLLIN)
        self.state = None
        self.wait_for(lambda: self.alive_seen)  # not traceable before any command can run beside it

    def wait_for(self, done):
        deadline = time.monotonic() + self.REPLY_S
        while self.sock is not None and not done():
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                self.gone()  # stuck (stopped from inside?): it serves no one any more
                return False
            self.receive()
        return self.sock is not None

    def gone(self):
        if self.sock is not None:
            try:
                self.agent.poll.unregister(self.fd)
            except KeyError:
                pass
            self.sock.close()
        if self.pid:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except OSError:
                pass
        self.sock, self.fd, self.pid, self.ready, self.alive_seen = None, -1, 0, False, False

    def receive(self):
        try:
            msg = self.sock.recv(HEAD.size)
        except OSError:
            msg = b""
        if len(msg) != HEAD.size:
            self.gone()
            return
        kind, a, b = HEAD.unpack(msg)
        if kind == b"A":
            self.alive_seen = True
        elif kind == b"R":
            self.ready = bool(a)
            self.state = proc_state(self.pid)
        elif kind == b"k":
            self.killed = True
        elif kind == b"P":
            self.replies[a] = b
        elif kind == b"W":
            cmd = self.agent.by_pid.pop(a, None)
            if cmd is not None:
                cmd.status = b
                cmd.exited_at = time.monotonic()

    def wants(self, argv):
        return self.ready and any("python" in a for a in argv[:3])

    def start(self, xid, spec, in_r, out_w, err_w):
        """The pid of the command the zygote forked, or None (then start it the usual way)."""
        data = marshal.dumps(spec, 2)
        if len(data) > 60000:
            return None  # more than a pipe holds without a reader
        spec_r, spec_w = os.pipe()
        try:
            os.write(spec_w, data)
            os.close(spec_w)
            self.sock.sendmsg([HEAD.pack(b"F", xid, 0)], [(self.socket.SOL_SOCKET, self.socket.SCM_RIGHTS,
                                                           struct.pack("4i", spec_r, in_r, out_w, err_w))])
        except OSError:
            os.close(spec_r)
            self.gone()
            return None
        os.close(spec_r)
        self.wait_for(lambda: xid in self.replies)
        return self.replies.pop(xid, 0) or None

    def spare_from_reset(self):
        """Under bubblewrap the zygote is the sandbox user too, so the reset's ``kill(-1)`` would take it:
        it kills every other process of the uid itself, and the reset only mops up. Its pid (0: none)."""
        if not self.pid or self.agent.user is not None or not self.ready:
            return 0
        self.killed = False
        self.sock.send(HEAD.pack(b"K", 0, 0))
        return self.pid if self.wait_for(lambda: self.killed) else 0

    def after_reset(self):
        """Keep a zygote that nothing changed (a same-uid command may renice, re-limit or stop it); replace
        one that is gone or changed, so the next rollout's commands fork from a pristine one."""
        state = proc_state(self.pid) if self.pid else None
        if state is not None and (not self.ready or state == self.state):
            return
        self.gone()
        self.spawn()


def proc_state(pid):
    """What another process of the same uid can change about ``pid`` without tracing it (or None: gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        with open(f"/proc/{pid}/limits", "rb") as fh:
            limits = fh.read()
        with open(f"/proc/{pid}/status", "rb") as fh:
            cpus = [line for line in fh.read().splitlines() if line.startswith(b"Cpus_allowed")]
    except (OSError, IndexError):
        return None
    if fields[0] in (b"T", b"t", b"Z", b"X"):
        return None  # stopped, or dead
    return fields[16], fields[37], fields[38], limits, cpus, ioprio(pid)  # nice, rt priority, policy


def become_command(argv, env, cwd, in_r, out_w, err_w, rlimits, user, oom_adj, in_place=None):
    """In a freshly forked child: reset the signals, lead a new session, take the command's stdio, close
    every other descriptor, apply the limits, drop to the sandbox user, enter ``cwd``, then exec ``argv``;
    or, where ``in_place(argv, env, cwd)`` returns something (the warm zygote's plan), return that and let
    the caller run the command in this process. Otherwise never returns: a failure exits 126 (127: no
    such program) with the reason on stderr, as a shell would."""
    stage = "setup"
    try:
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT, signal.SIGTERM,
                    signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2, signal.SIGQUIT):
            signal.signal(sig, signal.SIG_DFL)
        os.setsid()
        os.dup2(in_r, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        os.closerange(3, 1 << 16)
        for res, lim in rlimits:
            resource.setrlimit(res, tuple(lim))
        if oom_adj:  # under memory pressure the kernel takes a command, not the agent
            try:
                with open("/proc/self/oom_score_adj", "w") as fh:
                    fh.write("1000")
            except OSError:
                pass
        if user is not None:
            stage = "switching user"
            os.setgroups([])
            os.setgid(user[1])
            os.setuid(user[0])
        stage = "cwd " + cwd
        os.chdir(cwd)
        stage = argv[0]
        plan = in_place(argv, env, cwd) if in_place is not None else None
        if plan is not None:
            return plan
        os.execvpe(argv[0], argv, env)
    except OSError as e:
        msg = f"workbench: {stage}: {e.strerror or e}\n"
        code = 127 if e.errno in (errno.ENOENT, errno.ENOTDIR) and stage == argv[0] else 126
        try:
            os.write(2, msg.encode())
        except OSError:
            pass
        os._exit(code)
    except BaseException:
        os._exit(126)
    os._exit(126)


def wake_on_signals():
    """A pipe that a SIGCHLD (or any signal) makes readable, for a poll loop; the signals a terminal or a
    process of the same uid could send to stop us are ignored. Returns its read and write ends."""
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *a: None)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_IGN)
    return wake_r, wake_w


def drain(fd):
    """Read a non-blocking pipe (a :func:`wake_on_signals` pipe) until it is empty."""
    try:
        while os.read(fd, 512):
            pass
    except OSError:
        pass


def reaped():
    """(pid, wait status) of each child that has ended, without waiting for the others."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        yield pid, status


def set_dumpable(on):
    """PR_SET_DUMPABLE: whether processes of our uid may trace us and read our /proc files."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(4, 1 if on else 0, 0, 0, 0)
    except (OSError, ImportError, AttributeError):
        pass


def set_comm(name):
    """The name ``ps`` shows for this process."""
    try:
        with open("/proc/self/comm", "w") as fh:
            fh.write(name[:15])
    except OSError:
        pass


def proc_table():
    """pid -> (ppid, pgid, sid) of every visible process."""
    table = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
            table[int(name)] = (int(fields[1]), int(fields[2]), int(fields[3]))
        except (OSError, IndexError, ValueError):
            continue
    return table


def own_state():
    """What another process of the same uid can change about us without tracing us: limits and scheduling."""
    state = [resource.getrlimit(getattr(resource, name)) for name in sorted(dir(resource))
             if name.startswith("RLIMIT_")]
    for probe in (lambda: os.getpriority(os.PRIO_PROCESS, 0), lambda: sorted(os.sched_getaffinity(0)),
                  lambda: os.sched_getscheduler(0), lambda: os.sched_getparam(0).sched_priority, ioprio):
        try:
            state.append(probe())
        except (OSError, AttributeError):
            state.append(None)
    return state


def ioprio(pid=0):
    """The I/O priority of ``pid`` (0: ours; ioprio_get has no Python wrapper; ctypes is loaded only where
    it already is)."""
    ctypes = sys.modules.get("ctypes")
    if ctypes is None:
        return None
    nr = {"x86_64": 252, "aarch64": 31}.get(os.uname().machine)
    return None if nr is None else ctypes.CDLL(None, use_errno=True).syscall(nr, 1, pid)  # IOPRIO_WHO_PROCESS


def numbers(*values):
    return " ".join(str(v) for v in values).encode()


def owner(pid):
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return -1


def sigkill_all(pids):
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass  # already gone


def tree(root, me, table=None):
    """``root`` and everything that descends from it or shares its process group or session."""
    table = proc_table() if table is None else table
    children = {}
    for pid, (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    out = set(pid for pid, (_, pgid, sid) in table.items() if pgid == root or sid == root)
    stack = [root] + list(out)
    while stack:
        pid = stack.pop()
        if pid in table and pid not in out:
            out.add(pid)
        for c in children.get(pid, ()):
            if c not in out:
                out.add(c)
                stack.append(c)
    out.discard(me)
    return sorted(p for p in out if p in table)


def pids_of(uid):
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.stat("/proc/" + name).st_uid == uid:
                    out.append(int(name))
            except OSError:
                pass
    return out


def clear_shared(uid):
    """Files the sandbox user left in /dev/shm and /dev/mqueue, and its System V IPC objects."""
    for d in ("/dev/shm", "/dev/mqueue"):
        try:
            names = os.listdir(d)
        except OSError:
            continue
        for name in names:
            remove_tree(os.path.join(d, name))
    if sysv_ipc_left(uid):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            for kind, fn in (("shm", libc.shmctl), ("sem", libc.semctl), ("msg", libc.msgctl)):
                for ident in sysv_ids(kind, uid):
                    fn(ident, 0, 0) if kind != "sem" else fn(ident, 0, 0, 0)  # IPC_RMID == 0
        except (OSError, ImportError, AttributeError):
            pass


def clear_keyrings():
    """Empty the sandbox user's kernel keyrings (user and user-session): they outlive its processes, so
    a key a command added would otherwise wait there for the next rollout (Docker's seccomp profile
    refuses keyctl to begin with)."""
    nr = {"x86_64": 250, "aarch64": 219}.get(os.uname().machine)
    if nr is None:
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        for ring in (-4, -5):  # KEY_SPEC_USER_KEYRING, KEY_SPEC_USER_SESSION_KEYRING
            libc.syscall(nr, 7, ring)  # KEYCTL_CLEAR
    except (OSError, ImportError, AttributeError):
        pass


def remove_tree(path):
    try:
        st = os.lstat(path)
    except OSError:
        return
    if (st.st_mode & 0o170000) == 0o040000:
        try:
            for name in os.listdir(path):
                remove_tree(os.path.join(path, name))
            os.rmdir(path)
        except OSError:
            pass
    else:
        try:
            os.unlink(path)
        except OSError:
            pass


def sysv_ids(kind, uid):
    """Ids of the System V IPC objects (``shm``, ``sem``, ``msg``) owned by ``uid``."""
    out = []
    try:
        with open("/proc/sysvipc/" + kind) as fh:
            head = fh.readline().split()
            for line in fh:
                row = dict(zip(head, line.split()))  # noqa: B905 (runs on Python 3.6)
                if int(row.get("uid", -1)) == uid:
                    out.append(int(row.get("shmid") or row.get("semid") or row.get("msqid")))
    except (OSError, ValueError, TypeError):
        pass
    return out


def sysv_ipc_left(uid):
    return sum(len(sysv_ids(k, uid)) for k in ("shm", "sem", "msg"))


def main():
    # The channel is the stdin/stdout the host gave us; commands never inherit it.
    rfd, wfd = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    if os.getuid() != 0:  # not traceable, and our /proc files (fds, memory) belong to root, out of reach
        set_dumpable(False)
    set_comm("wb-agent")
    agent = Agent(rfd, wfd)
    try:
        agent.run()
    except SystemExit:
        raise
    except BaseException as e:
        try:
            agent.send(b"!", 0, f"{type(e).__name__}: {e}".encode())
        finally:
            agent.kill_everything()
        raise


if __name__ == "__main__":
    main()
