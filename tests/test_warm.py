"""Warm job processes (gendergap/warm.py): a job forked from a server that imported the engines
once behaves as a plain `python -u -m MODULE` would: its arguments, folder, environment, import
path, streams, exit status, thread count; the signals its client gets reach it; it dies with its
client; without a server the client runs it the plain way."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from gendergap.warm import Server

JOB = '''
import os, sys, time
import torch
try:   # from the first line on: the test signals as soon as it reads it
    print("argv", sys.argv[1:], "cwd", os.getcwd(), "threads", torch.get_num_threads(), "pid", os.getpid(), flush=True)
    print("env", os.environ.get("JOB_VAR"), file=sys.stderr, flush=True)
    if sys.argv[1] == "sleep":
        time.sleep(60)
except KeyboardInterrupt:
    print("interrupted", flush=True)
    sys.exit(7)
sys.exit(int(sys.argv[1]))
'''


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with Server(tmp_path_factory.mktemp("warm") / "server.log") as s:
        yield s


def client(server_path: str, folder, *args, **kw):
    env = {**os.environ, "PYTHONPATH": str(folder), "JOB_VAR": "mine", "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-m", "gendergap.warm", "run", server_path, "--", "-u", "-m", "job_mod",
                             *args], cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            **kw)


@pytest.fixture
def folder(tmp_path):
    (tmp_path / "job_mod.py").write_text(JOB)
    return tmp_path


def test_a_warm_job_is_a_plain_job(server, folder):
    p = client(server.path, folder, "3")
    out, err = p.communicate(timeout=120)
    assert p.returncode == 3, (out, err)
    assert f"argv ['3'] cwd {folder} threads 1" in out    # its PYTHONPATH, folder and OMP_NUM_THREADS
    assert "env mine" in err
    pid = int(out.split("pid")[1])
    assert pid != p.pid
    # started warm: the server's child, not the client's
    assert "ready" in (server.log.read_text())


def test_a_signal_to_the_client_reaches_the_job(server, folder):
    p = client(server.path, folder, "sleep")
    line = p.stdout.readline()
    assert line.startswith("argv"), line
    p.send_signal(signal.SIGINT)
    out, _ = p.communicate(timeout=30)
    assert p.returncode == 7 and "interrupted" in out


def test_a_signal_before_the_job_is_known_waits_for_it(tmp_path):
    """The job writes to the client's streams as soon as it is forked, before its pid reaches the
    client: a signal sent on seeing that first line must reach the job, not end the client (it did:
    exit 1, in one CI run of 900 tests). A stand-in server holds the pid back until the client has
    been signalled."""
    path = str(tmp_path / "s")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)
    p = subprocess.Popen([sys.executable, "-m", "gendergap.warm", "run", path, "--", "-u", "-m", "anything"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    conn, _ = listener.accept()
    conn.settimeout(60)
    request = b""
    while not request.endswith(b"\n"):   # the request is sent after the client's handlers are set
        msg, fds, _flags, _addr = socket.recv_fds(conn, 1 << 16, 3)
        request += msg
        for fd in fds:
            os.close(fd)
    p.send_signal(signal.SIGINT)
    time.sleep(0.5)
    assert p.poll() is None, p.communicate()   # the client waits for the job's pid
    # SIGINT at its default in the stand-in job: a test run started in the background by a shell without
    # job control inherits it ignored (bash does that to `cmd &`), and exec keeps an ignored signal ignored
    job = subprocess.Popen(["sleep", "60"], preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    conn.sendall(json.dumps({"pid": job.pid}).encode() + b"\n")
    assert job.wait(timeout=30) == -signal.SIGINT   # the held signal went to the job
    conn.sendall(json.dumps({"exit": 7}).encode() + b"\n")
    assert p.wait(timeout=30) == 7
    conn.close()
    listener.close()


def test_the_job_dies_with_its_client(server, folder):
    p = client(server.path, folder, "sleep")
    pid = int(p.stdout.readline().split("pid")[1])
    p.kill()
    p.wait()
    deadline = time.time() + 10
    while time.time() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail("the job outlived its client")


def test_without_a_server_the_job_runs_the_plain_way(folder, tmp_path):
    p = client(str(tmp_path / "no-server"), folder, "5")
    out, err = p.communicate(timeout=120)
    assert p.returncode == 5 and f"argv ['5'] cwd {folder}" in out
    assert int(out.split("pid")[1]) == p.pid      # exec'd in place


def test_a_warm_jobs_cpu_time_counts_as_the_sweeps(folder, tmp_path):
    """The server waits for its children and is waited for: `/usr/bin/time` on a sweep (its
    RUSAGE_CHILDREN) counts the CPU seconds of jobs that ran warm."""
    import resource
    (folder / "burn.py").write_text("import time\nt = time.process_time()\n"
                                    "while time.process_time() - t < 1.5:\n    pass\n")
    def cpu():
        r = resource.getrusage(resource.RUSAGE_CHILDREN)
        return r.ru_utime + r.ru_stime
    before = cpu()
    with Server(tmp_path / "log") as s:
        env = {**os.environ, "PYTHONPATH": str(folder)}
        subprocess.run([sys.executable, "-m", "gendergap.warm", "run", s.path, "--", "-u", "-m", "burn"], env=env,
                       check=True, timeout=120)
    used = cpu() - before
    own = float((tmp_path / "log").read_text().split("own CPU ")[1].split()[0])   # its imports
    assert used - own >= 1.4, (used, own)


STARTER = '''
import os, shlex, subprocess, sys
from ssl_pretrain.run import FAST_PYTHON_ENV
fast = os.environ.get(FAST_PYTHON_ENV)
print("job pid", os.getpid(), "fast", bool(fast), flush=True)
sys.exit(subprocess.run([*shlex.split(fast), "-u", "-m", "engine_mod"]).returncode)
'''
ENGINE = '''
import os, sys, time
print("engine ppid", os.getppid(), "preloaded", "xml.dom.minidom" in sys.modules, flush=True)
t = time.process_time()
while time.process_time() - t < 1.0:
    pass
'''


def test_a_warm_job_starts_its_engine_processes_warm_and_counts_their_cpu(folder, tmp_path):
    """A job the server started may start its engines' processes there too (ssl_pretrain.run.
    start_fairseq(warm=True) for ST's fairseq): FAST_PYTHON_ENV is set in its environment, the
    engine comes up with the server's extra imports, as the server's child (not the job's) -- so its
    CPU-seconds reach the job through the job's ledger (LEDGER_ENV), as gendergap.jobs counts them."""
    from gendergap.warm import LEDGER_ENV, ledger_seconds
    (folder / "starter_mod.py").write_text(STARTER)
    (folder / "engine_mod.py").write_text(ENGINE)
    ledger = tmp_path / "ledger.txt"
    with Server(tmp_path / "log", preload=("xml.dom.minidom",)) as s:
        env = {**os.environ, "PYTHONPATH": str(folder), LEDGER_ENV: str(ledger)}
        out = subprocess.run([sys.executable, "-m", "gendergap.warm", "run", s.path, "--", "-u", "-m", "starter_mod"],
                             env=env, cwd=folder, capture_output=True, text=True, timeout=120)
        server_pid = s.proc.pid
    assert out.returncode == 0, out.stderr[-2000:]
    assert "fast True" in out.stdout
    job_pid = int(out.stdout.split("job pid")[1].split()[0])
    engine_ppid = int(out.stdout.split("engine ppid")[1].split()[0])
    assert engine_ppid == server_pid != job_pid
    assert "preloaded True" in out.stdout
    # the engine's ~1 s and the job's own (both clients add a line; each line is one warm child)
    lines = ledger.read_text().split()
    assert len(lines) == 2, lines
    assert ledger_seconds(ledger) >= 0.95
    assert ledger_seconds(tmp_path / "absent.txt") == 0.0
    ledger.write_text("1.5\n0.2")     # a line cut short by a kill is lost, not the rest
    assert ledger_seconds(ledger) == pytest.approx(1.7)

