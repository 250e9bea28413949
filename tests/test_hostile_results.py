"""Issue 60, parts 3 and 4: the shared temp dir is shared, and a result belongs to its model.

- Leftovers in the temp dir (corpora/base/leftovers.py): a corpus synthesis removes a killed run's
  espeak-ng overlay only when it is this user's real folder, well named, a day old and its process
  is gone here; a planted name (a huge number, a symlink) crashes nothing and is followed nowhere,
  and a fresh folder of a dead pid (a live run on another host or PID namespace) is kept.
- The warm server (gendergap/warm.py) dies with its sweep from its first instruction, during its
  imports too, and takes its socket folder with it; a later sweep removes a stale one.
- A checkpoint registry with two entries of one name is refused in one line.
- An ASR run's trained weights are recorded by sha256 at the end of training (run.json `weights`);
  `asr decode` and `asr export` refuse another model's file or CKPT folder in one line (exit 2);
  a run without the record decodes only with --trust-checkpoint.

Temp-dir cases use a TMPDIR of their own (tempfile.tempdir / $TMPDIR), never the real one's files.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from asr_helpers import one_thread, tiny_wav2vec2, write_corpus  # noqa: F401 (fixture)
from cli_helpers import run_lines
from gendergap.cli import main

REPO = Path(__file__).resolve().parents[1]
DAY_AGO = time.time() - 25 * 3600


@pytest.fixture
def tmpdir_of_our_own(tmp_path, monkeypatch):
    """A temp dir for this test only: what tempfile.gettempdir() returns here and in children."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    monkeypatch.setenv("TMPDIR", str(tmp))
    return tmp


def _dead_pid() -> int:
    gone = subprocess.Popen(["true"])
    gone.wait()
    return gone.pid


def _aged(path: Path) -> Path:
    """``path`` (a folder, made if need be; or a link), last changed a day ago."""
    if not os.path.lexists(path):
        path.mkdir()
    os.utime(path, (DAY_AGO, DAY_AGO), follow_symlinks=False)
    return path


# --------------------------------------------------------------------------- synthesis overlays

def _planted_link(link: Path, tmp_path: Path) -> tuple[Path, Path]:
    """A day-old symlink at a leftover's name, pointing at someone's folder holding keep.txt."""
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("mine")
    link.symlink_to(victim, target_is_directory=True)
    _aged(link)
    return link, victim


def test_a_planted_overlay_name_never_crashes_the_synthesis_nor_is_followed(tmpdir_of_our_own, tmp_path):
    """A name with a number no pid has used to reach os.kill: OverflowError, every user's `corpus
    synth` broken by one planted folder. A planted symlink to someone's folder is never removed
    through (nor is the link: it is not a real folder)."""
    from corpora.synth.build import OVERLAY_PREFIX, _remove_stale_overlays
    huge = [_aged(tmpdir_of_our_own / f"{OVERLAY_PREFIX}{n}-x") for n in ("9" * 30, "99999999999", "4294967296")]
    link, victim = _planted_link(tmpdir_of_our_own / f"{OVERLAY_PREFIX}{_dead_pid()}-lnk", tmp_path)
    _remove_stale_overlays()   # no OverflowError
    assert all(p.is_dir() for p in huge)   # not well-formed: not ours to judge
    assert link.is_symlink() and (victim / "keep.txt").read_text() == "mine"


def test_an_overlay_of_a_live_run_elsewhere_or_of_another_user_is_kept(tmpdir_of_our_own, monkeypatch):
    """A pid dead here may be a live synthesis on another host or in another PID namespace sharing
    the temp dir: its fresh folder stays. Only this user's day-old folder of a dead pid goes."""
    from corpora.synth.build import OVERLAY_PREFIX, _remove_stale_overlays
    dead = _dead_pid()
    fresh = tmpdir_of_our_own / f"{OVERLAY_PREFIX}{dead}-fresh"
    fresh.mkdir()
    (fresh / "espeak-ng-data").mkdir()   # a live run's data
    stale = _aged(tmpdir_of_our_own / f"{OVERLAY_PREFIX}{dead}-stale")
    live = _aged(tmpdir_of_our_own / f"{OVERLAY_PREFIX}{os.getpid()}-live")
    # another user's day-old folder of a dead pid: seen as such by making this process someone else
    real_uid = os.getuid()
    monkeypatch.setattr(os, "getuid", lambda: real_uid + 1)
    _remove_stale_overlays()
    assert stale.is_dir()
    monkeypatch.setattr(os, "getuid", lambda: real_uid)
    _remove_stale_overlays()
    assert fresh.is_dir() and (fresh / "espeak-ng-data").is_dir() and live.is_dir()
    assert not stale.exists()


# --------------------------------------------------------------------------- the warm server

SWEEP = """
import os, sys, time
from pathlib import Path
from gendergap.warm import Server
s = Server(Path(sys.argv[1]), preload=tuple(sys.argv[2:])).__enter__()
print(s.proc.pid, s.dir, flush=True)
time.sleep(600)
"""


def _gone(pid: int) -> bool:
    """The process is gone (a zombie nobody reaps counts as gone: it runs nothing)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False
    return state in ("Z", "X")


def _kill_sweep(tmp_path: Path, *extra: str, wait_for: str | None = None) -> tuple[int, str]:
    """Start a sweep's warm server in a child ("the sweep"), SIGKILL the sweep (at once, or once the
    server's log says ``wait_for``); returns (server pid, socket folder)."""
    log = tmp_path / "server.log"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)]), "OMP_NUM_THREADS": "1"}
    sweep = subprocess.Popen([sys.executable, "-c", SWEEP, str(log), *extra], cwd=REPO, env=env,
                             stdout=subprocess.PIPE, text=True)
    server = None
    try:
        pid, folder = sweep.stdout.readline().split()
        server = int(pid)
        deadline = time.monotonic() + 120
        while wait_for and wait_for not in (log.read_text() if log.exists() else ""):
            assert time.monotonic() < deadline and not _gone(server), log.read_text()
            time.sleep(0.1)
        sweep.send_signal(signal.SIGKILL)
        sweep.wait()
        return server, folder
    except BaseException:
        if server is not None and not _gone(server):
            os.kill(server, signal.SIGKILL)
        raise
    finally:
        sweep.kill()
        sweep.wait()


def _wait_gone(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if _gone(pid):
            return True
        time.sleep(0.1)
    return False


def test_a_sweep_killed_while_its_server_imports_leaves_no_server(tmpdir_of_our_own, tmp_path):
    """The server read its sweep's pid only after its imports: a sweep killed before then left a
    server that saw its new parent as the sweep, forever. Now the sweep's pid comes on its command
    line and a watcher checks it from the start; the server goes, and its socket folder with it."""
    (tmp_path / "slow_engine.py").write_text("import time\ntime.sleep(8)\n")   # an engine slow to import
    server, folder = _kill_sweep(tmp_path, "slow_engine")   # killed as soon as the socket is bound
    try:
        assert _wait_gone(server, 30), "the warm server outlived its killed sweep"
        assert not os.path.exists(folder), os.listdir(folder)
        assert not list(tmpdir_of_our_own.glob("gg-warm-*"))
    finally:
        if not _gone(server):
            os.kill(server, signal.SIGKILL)


def test_a_killed_sweeps_socket_folder_goes_with_its_ready_server(tmpdir_of_our_own, tmp_path):
    server, folder = _kill_sweep(tmp_path, wait_for="warm server: ready")
    try:
        assert _wait_gone(server, 30), "the warm server outlived its killed sweep"
        assert not os.path.exists(folder) and not list(tmpdir_of_our_own.glob("gg-warm-*"))
    finally:
        if not _gone(server):
            os.kill(server, signal.SIGKILL)


def test_a_later_sweep_removes_only_stale_socket_folders_of_this_user(tmpdir_of_our_own, tmp_path):
    """Both killed (the server with its sweep): the folder stays until a later sweep, which removes
    this user's day-old gg-warm-PID-* folders whose sweep is gone, and nothing else."""
    from gendergap.warm import Server
    dead = _dead_pid()
    stale = tmpdir_of_our_own / f"gg-warm-{dead}-abcd1234"
    stale.mkdir()
    (stale / "s").write_text("")   # what a killed server's socket leaves
    _aged(stale)
    fresh = tmpdir_of_our_own / f"gg-warm-{dead}-fresh123"   # another host's live sweep
    fresh.mkdir()
    planted = _aged(tmpdir_of_our_own / f"gg-warm-{'9' * 40}-x")
    link, victim = _planted_link(tmpdir_of_our_own / f"gg-warm-{dead}-lnk", tmp_path)
    server = Server(tmp_path / "server.log")   # the cleanup runs here; the server is not started
    try:
        assert not stale.exists()
        assert fresh.is_dir() and planted.is_dir() and link.is_symlink() and (victim / "keep.txt").is_file()
        assert Path(server.dir).name.startswith(f"gg-warm-{os.getpid()}-")   # a later sweep knows whose
    finally:
        os.rmdir(server.dir)


# --------------------------------------------------------------------------- the checkpoint registry

def test_a_registry_with_two_entries_of_one_name_is_refused(tmp_path, capsys, monkeypatch):
    """Two entries named F: a lookup took the first, Table 3 the last (the female-only model
    analysed as 0 % female). Now one line naming the file and the name, exit 2."""
    (tmp_path / "f.pt").write_bytes(b"")
    (tmp_path / "m.pt").write_bytes(b"")
    reg = tmp_path / "checkpoints.json"
    reg.write_text(json.dumps({"checkpoints": [
        {"name": "F", "path": "f.pt", "kind": "fairseq", "female_pct": 100, "male_pct": 0, "unknown_pct": 0},
        {"name": "F", "path": "m.pt", "kind": "fairseq", "female_pct": 0, "male_pct": 100, "unknown_pct": 0}]}))
    from corpora.base.errors import UserError
    from corpora.base.registry_file import read_registry
    with pytest.raises(UserError, match="two entries named 'F'") as e:
        read_registry(reg, "fix it")
    assert e.value.path == str(reg)
    rc, _, err = run_lines(capsys, "ckpt", "list", "--registry", reg)
    assert rc == 2 and len(err) == 1 and str(reg) in err[0] and "two entries named 'F'" in err[0], err


# --------------------------------------------------------------------------- an ASR run's weights

FAST = ["--no-progress", "--bootstrap", "0", "batch_seconds=3", "valid_batch_seconds=6"]


def one_line(capsys) -> str:
    """The error: one line, last, no traceback (after whatever log the run printed first)."""
    err = capsys.readouterr().err.strip().splitlines()
    errors = [line for line in err if line.startswith("gendergap: error: ")]
    assert len(errors) == 1 and err[-1] == errors[0] and not any("Traceback" in line for line in err), err
    return errors[0]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, one_thread):  # noqa: F811 (the fixture)
    """A tiny `asr frozen` run and a tiny `asr finetune` run, trained once for the module."""
    root = tmp_path_factory.mktemp("weights")
    ssl = tiny_wav2vec2(root / "w2v")
    data = write_corpus(root / "data")
    common = ["--ckpt", str(ssl), "--train", str(data["train"]), "--valid", str(data["valid"])]
    frozen = ["asr", "frozen", *common, "--layer", "all", "--out", str(root / "frozen"), "--feature-store",
              str(root / "frozen" / "features"), *FAST, "hidden_size=32", "proj_dim=32", "max_steps=2"]
    assert main(frozen) == 0
    assert main(["asr", "finetune", *common, "--out", str(root / "finetune"), *FAST, "max_steps=1"]) == 0
    return {"root": root, "data": data, "frozen": root / "frozen", "finetune": root / "finetune",
            "frozen_cmd": frozen}


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def _decode(run: Path, test, *extra) -> int:
    return main(["asr", "decode", "--model", str(run), "--test", str(test), "--bootstrap", "0", *extra])


def _perturbed(ckpt_file: Path) -> None:
    """Another model's weights of the same shapes (what another run's copy of the file holds)."""
    import torch
    state = torch.load(ckpt_file, weights_only=True)
    torch.save({k: v + 0.5 if torch.is_tensor(v) and v.is_floating_point() else v for k, v in state.items()}, ckpt_file)


def test_training_records_the_checkpoint_it_ended_with(runs):
    from corpora.base.provenance import file_sha256
    for recipe in ("frozen", "finetune"):
        run = json.loads((runs[recipe] / "run.json").read_text())
        (ckpt,) = (runs[recipe] / "save").glob("CKPT*")
        assert run["weights"]["checkpoint"] == ckpt.name
        files = {p.name for p in ckpt.iterdir() if p.suffix == ".ckpt"} | {"CKPT.yaml"}
        assert set(run["weights"]["sha256"]) == files
        assert all(file_sha256(ckpt / f) == h for f, h in run["weights"]["sha256"].items())


def test_another_models_weights_file_in_save_is_refused(runs, tmp_path, capsys):
    """Another run's model.ckpt copied over this run's: decoded as this run's model, exit 0 (a WER of
    98.7 filed for a model of 30.3). Now one line naming the file, exit 2 -- --trust-checkpoint too."""
    copy = _copy(runs["frozen"], tmp_path / "frozen")
    (weights,) = copy.glob("save/CKPT*/model.ckpt")
    _perturbed(weights)
    for extra in ((), ("--trust-checkpoint",)):
        capsys.readouterr()
        assert _decode(copy, runs["data"]["test"], *extra) == 2
        line = one_line(capsys)
        assert str(weights) in line and "sha256" in line and "another model's" in line, line
    assert not (copy / "test.hyp.tsv").exists()


def test_a_newer_ckpt_folder_copied_into_save_is_refused(runs, tmp_path, capsys):
    """A CKPT folder copied in from another run, with a better validation score: decoding picked it
    and said nothing. Now refused before anything is loaded: it is not the recorded checkpoint."""
    copy = _copy(runs["frozen"], tmp_path / "frozen")
    (own,) = (copy / "save").glob("CKPT*")
    other = copy / "save" / (own.name + "-other")
    shutil.copytree(own, other)
    _perturbed(other / "model.ckpt")
    meta = (other / "CKPT.yaml").read_text()
    lines = [("CER: 0.0" if line.startswith("CER:") else line) for line in meta.splitlines()]
    (other / "CKPT.yaml").write_text("\n".join(lines) + "\n")
    capsys.readouterr()
    assert _decode(copy, runs["data"]["test"]) == 2
    line = one_line(capsys)
    assert other.name in line and own.name in line and "another model's" in line, line
    # without the intruder the run decodes its own model
    shutil.rmtree(other)
    assert _decode(copy, runs["data"]["test"]) == 0


def test_export_of_a_run_with_another_models_head_is_refused(runs, tmp_path, capsys):
    copy = _copy(runs["finetune"], tmp_path / "finetune")
    (head,) = copy.glob("save/CKPT*/head.ckpt")
    _perturbed(head)
    capsys.readouterr()
    assert main(["asr", "export", str(copy), "--out", str(tmp_path / "export")]) == 2
    line = one_line(capsys)
    assert str(head) in line and "another model's" in line, line
    assert not (tmp_path / "export").exists()
    assert _decode(copy, runs["data"]["test"]) == 2
    assert str(head) in one_line(capsys)


def test_a_run_without_the_record_decodes_only_with_trust_checkpoint(runs, tmp_path, capsys):
    """A run trained before the record (or whose training never finished): refused, with the way
    out; --trust-checkpoint decodes it with a warning; its training command run again records it."""
    copy = _copy(runs["frozen"], tmp_path / "frozen")
    run = json.loads((copy / "run.json").read_text())
    run.pop("weights", None)   # (an older gendergap wrote none)
    (copy / "run.json").write_text(json.dumps(run))
    capsys.readouterr()
    assert _decode(copy, runs["data"]["test"]) == 2
    line = one_line(capsys)
    assert str(copy / "run.json") in line and "no record of its trained weights" in line
    assert "--trust-checkpoint" in line and "same budget" in line
    assert _decode(copy, runs["data"]["test"], "--trust-checkpoint") == 0
    assert "no record of this run's trained weights" in capsys.readouterr().err
    # the way out the line names: the same training command, which trains no further
    (own,) = (copy / "save").glob("CKPT*")
    cmd = list(runs["frozen_cmd"])
    cmd[cmd.index("--out") + 1] = str(copy)
    cmd[cmd.index("--feature-store") + 1] = str(copy / "features")
    assert main(cmd) == 0
    assert [p.name for p in (copy / "save").glob("CKPT*")] == [own.name]
    assert json.loads((copy / "run.json").read_text())["weights"]["checkpoint"] == own.name
    assert _decode(copy, runs["data"]["test"]) == 0
