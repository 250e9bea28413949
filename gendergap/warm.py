"""Warm job processes for the local executor: each job in a fresh process that starts with the
engines already imported.

A local sweep starts every job as a new Python process (submitit runs ``python -u -m
submitit.core._submit FOLDER``), and each paid ~2.5 s to start and unpickle its step and ~4 s more
to import torch, SpeechBrain, transformers and pandas before its first step: on the built-in study
(60 jobs) and in the sweep tests, more than a tenth of all the time. Here one server process per
sweep imports them once; a job's command is a tiny client that hands the server its arguments,
environment, working folder and standard streams (file descriptors over a UNIX socket), and the
server forks a child that runs the job from there. The child is a separate process like before:
its own memory, its own seeds (every job sets them), its own threads (``_run`` sets torch's thread
count from the job's cpus; a child also sets it from OMP_NUM_THREADS, which a forked torch no
longer reads). The client forwards the signals submitit sends (cancel, time-out, requeue) to the
child and exits with its exit status; the child kills itself when its client is gone.

Nothing is shared that a job could change for the next: the server never runs a job, never runs
torch (forking after torch's thread pools start is unsafe) and never touches CUDA, and jobs on a
GPU are started the plain way. When the server is not up, the client runs the job the plain way
(exec), so a job never depends on it. ``GENDERGAP_WARM=0`` turns it off.

A job may start its engine's processes from the server too: an ST job's fairseq-train and
fairseq-generate (~6 CPU-seconds each to import torch and fairseq afresh). The sweep then has the
server import the engine as well (a step's ENGINE_IMPORTS), the job finds the client command in
ssl_pretrain.run.FAST_PYTHON_ENV, and each such process reports its CPU-seconds back through its
client into the job's ledger (LEDGER_ENV): it is the server's child, not the job's.

The server lives only as long as its sweep: the sweep's pid comes on its command line and is checked
from its first instruction (a sweep killed while the server imports leaves no server behind), and a
server whose sweep is gone removes its socket folder. A folder that outlived both (both killed) is
removed by a later sweep once it is stale (corpora.base.leftovers: this user's, a day old, its
sweep's pid gone; the temp dir is shared with other users and hosts).

    python -m gendergap.warm serve SOCKET PARENT_PID [MODULE...]   # the sweep starts it (MODULE: more to preload)
    python -m gendergap.warm run SOCKET -- -u -m MODULE ARGS...
"""
from __future__ import annotations

import json
import os
import resource
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from corpora.base.leftovers import remove_stale_dirs

# what a job process imports before its first step (the server imports them once)
PRELOAD = ("torch", "numpy", "pandas", "submitit", "speechbrain",
           "speechbrain.integrations.huggingface.wav2vec2", "gendergap.steps", "gendergap.plan",
           "downstream_asr.finetune", "downstream_asr.frozen", "downstream_st.train", "downstream_st.decode",
           "analysis.store", "analysis.score_runs", "analysis.probing", "analysis.report", "ssl_pretrain.features")
# a job's own file where the clients it starts add the CPU-seconds of what they ran warm: that
# process is the server's child, not the job's, so the job's RUSAGE_CHILDREN does not see it
LEDGER_ENV = "GENDERGAP_FORKED_CPU_LEDGER"
# the socket folder in the temp dir: + the sweep's pid, so a later sweep knows a killed one's
SOCKET_PREFIX = "gg-warm-"
PARENT_POLL_S = 0.2   # how soon a server whose sweep died while it imported notices
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2, signal.SIGCONT)


def enabled() -> bool:
    return os.environ.get("GENDERGAP_WARM", "1") not in ("0", "off", "false")


class Server:
    """The sweep's warm server (a context manager): ``python_command`` is the executor's
    ``python`` for jobs that may start warm. Started before the first job; stopped at the end."""

    def __init__(self, log: Path, preload: tuple[str, ...] = ()):
        self.preload = tuple(preload)   # modules imported besides PRELOAD (the jobs' engines)
        remove_stale_dirs(tempfile.gettempdir(), SOCKET_PREFIX)   # those of sweeps killed with their server
        # short: a UNIX socket path has ~100 bytes
        self.dir = tempfile.mkdtemp(prefix=f"{SOCKET_PREFIX}{os.getpid()}-")
        self.path = os.path.join(self.dir, "s")
        self.log = log

    def __enter__(self) -> "Server":
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "gendergap.warm", "serve", self.path, str(os.getpid()),
                                          *self.preload],
                                         stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.time() + 10   # the socket is bound before anything heavy is imported
        while not os.path.exists(self.path) and self.proc.poll() is None and time.time() < deadline:
            time.sleep(0.02)
        return self

    @property
    def python_command(self) -> str:
        return client_command(self.path)

    def __exit__(self, *exc) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        _remove_socket(self.path)   # the server may have gone first


def client_command(path: str) -> str:
    """The command that runs ``python -m MODULE ARGS`` as a child of the server at ``path``."""
    return shlex.join([sys.executable, "-m", "gendergap.warm", "run", path, "--"])


def cpu_seconds() -> float:
    """User + system CPU time of this process (all its threads) and of the children it has waited for."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


# --- the server ----------------------------------------------------------------------------------

def serve(path: str, parent: int, extra: tuple[str, ...] = ()) -> None:
    """Serve jobs at ``path`` while the process ``parent`` (the sweep that started this) lives."""
    if os.getppid() != parent:   # the sweep died before this process got here
        _remove_socket(path)
        return
    stop_watching = _watch_parent(parent, path)   # from here on, during the imports too
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)          # clients queue here while the engines are imported
    for name in (*PRELOAD, *extra):
        try:
            __import__(name)
        except Exception as e:  # noqa: BLE001 -- a job imports what it needs itself anyway
            print(f"warm server: {name} not preloaded: {e}", flush=True)
    # what is imported now stays: the children's garbage collections skip it (and so do not copy
    # every page of it into each child, as touching its objects would)
    import gc
    gc.collect()
    gc.freeze()
    # children are reaped here, not by the kernel (SIG_IGN): a waited child's CPU time adds to its
    # parent's, so `/usr/bin/time` on a sweep counts its jobs as it did when they were its own
    signal.signal(signal.SIGCHLD, lambda *_: _reap())
    signal.signal(signal.SIGTERM, lambda *_: _stop())
    stop_watching()   # the watcher ends: no thread may run when a job is forked; the loop checks from here
    listener.settimeout(1.0)
    print(f"warm server: ready ({len(sys.modules)} modules)", flush=True)
    while os.getppid() == parent:     # the sweep is gone (killed): so is the server; jobs go on
        try:
            conn, _ = listener.accept()
        except socket.timeout:
            continue
        conn.settimeout(None)
        try:
            request, fds = _receive(conn)
        except (OSError, ValueError) as e:
            print(f"warm server: a bad request ({e})", flush=True)
            conn.close()
            continue
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            listener.close()
            _child(conn, request, fds, path)   # never returns
        conn.close()
        for fd in fds:
            os.close(fd)
    _remove_socket(path)


def _watch_parent(parent: int, path: str):
    """Start a thread that ends this process (its socket folder removed) as soon as ``parent`` is
    gone; returns the function that stops the thread and waits for it."""
    import threading
    done = threading.Event()

    def watch():
        while not done.wait(PARENT_POLL_S):
            if os.getppid() != parent:
                _remove_socket(path)
                print("warm server: the sweep is gone, before the server was ready", flush=True)
                os._exit(0)
    thread = threading.Thread(target=watch, daemon=True, name="gendergap-warm-parent")
    thread.start()

    def stop():
        done.set()
        thread.join()
    return stop


def _remove_socket(path: str) -> None:
    """The server's socket and its folder (only a ``SOCKET_PREFIX`` folder, only once empty)."""
    folder = os.path.dirname(path)
    try:
        Path(path).unlink(missing_ok=True)
        if os.path.basename(folder).startswith(SOCKET_PREFIX):
            os.rmdir(folder)
    except OSError:   # gone already, or something else in it: left alone
        pass


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _stop() -> None:
    """SIGTERM (the sweep is done): reap the children that are ending (a job sends its exit status
    just before it exits), then go; one still running is left to finish on its own."""
    deadline = time.time() + 5
    while time.time() < deadline:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            time.sleep(0.05)
    import resource
    own = resource.getrusage(resource.RUSAGE_SELF)
    print(f"warm server: stopped (own CPU {own.ru_utime + own.ru_stime:.3f} s)", flush=True)
    sys.exit(0)


def _receive(conn) -> tuple[dict, list[int]]:
    data, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
    while not data.endswith(b"\n"):
        more = conn.recv(1 << 20)
        if not more:
            raise ValueError("the request ended early")
        data += more
    request = json.loads(data)
    if len(fds) != 3 or not isinstance(request.get("argv"), list) or not request["argv"]:
        raise ValueError("a request is argv, cwd, env and three file descriptors")
    return request, list(fds)


def _child(conn, request: dict, fds: list[int], path: str) -> None:
    import runpy
    import threading
    import traceback
    code = 1
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)   # the job waits for its own subprocesses
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)   # a plain python's, even if the server's was ignored
        os.setpgid(0, 0)
        try:   # `top` and `ps -o comm` name it as a job, not as the server it was forked from
            Path("/proc/self/comm").write_text("gendergap-job")
        except OSError:
            pass
        for target, fd in zip((0, 1, 2), fds):
            os.dup2(fd, target)
            os.close(fd)
        sys.stdout.reconfigure(line_buffering=True, write_through=True)
        sys.stderr.reconfigure(line_buffering=True, write_through=True)
        os.chdir(request["cwd"])
        served = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        os.environ.clear()
        os.environ.update(request["env"])
        # the processes the job starts through ssl_pretrain.run.start_fairseq(warm=True) start here too
        from ssl_pretrain.run import FAST_PYTHON_ENV
        os.environ[FAST_PYTHON_ENV] = client_command(path)
        # the import path `python -m` would give the job: its folder first, then its PYTHONPATH
        own = [os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        sys.path[:] = [request["cwd"], *own, *(p for p in sys.path[1:] if p not in served and p not in own)]
        threads = os.environ.get("OMP_NUM_THREADS")
        if threads and threads.isdigit() and "torch" in sys.modules:
            sys.modules["torch"].set_num_threads(int(threads))   # a forked torch does not read it again
        conn.sendall(json.dumps({"pid": os.getpid()}).encode() + b"\n")
        threading.Thread(target=_die_with_client, args=(conn,), daemon=True).start()
        module, *args = request["argv"]
        sys.argv = [module, *args]
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if isinstance(e.code, str):
            print(e.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 -- the job's own error goes to its log, as a plain run's does
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
            conn.sendall(json.dumps({"exit": code, "cpu_s": cpu_seconds()}).encode() + b"\n")
        finally:
            os._exit(code)


def _die_with_client(conn) -> None:
    """The client never writes after its request: a read returns only when it is gone."""
    try:
        conn.recv(1)
    finally:
        os.killpg(0, signal.SIGKILL)


# --- the client ----------------------------------------------------------------------------------

def run(path: str, argv: list[str]) -> int:
    """Run ``python ARGV`` (``-u -m MODULE ARGS``) in a child of the server at ``path``, or the plain
    way when the server is not there."""
    args = [a for a in argv if a != "-u"]
    if len(args) < 2 or args[0] != "-m":
        raise SystemExit(f"warm client: expected -m MODULE ARGS, got {argv}")
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
    except OSError:
        os.execv(sys.executable, [sys.executable, *argv])
    # forwarding is set up before the request goes out: the job writes to our streams as soon as it
    # is forked, before its pid reaches us, and a signal sent on seeing its first line must not end
    # the client (exit 1, the job orphaned) -- it waits here until the pid is known
    job = _Forwarder()
    for sig in FORWARDED:
        signal.signal(sig, job.signalled)
    request = {"argv": args[1:], "cwd": os.getcwd(), "env": dict(os.environ)}
    socket.send_fds(conn, [json.dumps(request).encode() + b"\n"], [0, 1, 2])
    replies = conn.makefile("rb")
    first = replies.readline()
    if not first:   # the server went away before forking: the plain way, with what was signalled
        for sig in FORWARDED:
            signal.signal(sig, signal.SIG_DFL if sig != signal.SIGINT else signal.default_int_handler)
        job.to(os.getpid())
        os.execv(sys.executable, [sys.executable, *argv])
    job.to(int(json.loads(first)["pid"]))
    last = replies.readline()
    if not last:
        return 1
    reply = json.loads(last)
    _add_to_ledger(reply.get("cpu_s"))
    return int(reply["exit"])


def _add_to_ledger(cpu_s) -> None:
    """The CPU-seconds of a finished warm child, for the job that started this client (LEDGER_ENV)."""
    ledger = os.environ.get(LEDGER_ENV)
    if ledger and isinstance(cpu_s, (int, float)):
        with open(ledger, "a", encoding="utf-8") as f:   # one short line: an append is atomic
            f.write(f"{float(cpu_s):.3f}\n")


def ledger_seconds(path) -> float:
    """The CPU-seconds a job's warm children added to its ledger (0 when it has none)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return 0.0
    total = 0.0
    for word in text.split():
        try:
            total += float(word)
        except ValueError:   # a line cut short by a kill: that child's time is lost, not the job's
            pass
    return total


class _Forwarder:
    """Signals to the client go to the job; those that come before its pid is known, once it is."""

    def __init__(self):
        self.pid: int | None = None
        self.pending: list[int] = []

    def signalled(self, sig: int, _frame) -> None:
        if self.pid is None:
            self.pending.append(sig)
        else:
            _forward(self.pid, sig)

    def to(self, pid: int) -> None:
        self.pid = pid
        while self.pending:
            _forward(pid, self.pending.pop(0))


def _forward(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def main(argv: list[str]) -> int:
    if len(argv) >= 3 and argv[0] == "serve" and argv[2].isdigit() and len(argv[2]) <= 9:
        serve(argv[1], int(argv[2]), tuple(argv[3:]))
        return 0
    if len(argv) >= 3 and argv[0] == "run" and "--" in argv:
        return run(argv[1], argv[argv.index("--") + 1:])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
