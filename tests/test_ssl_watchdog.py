"""The watchdog on fairseq log lines: NaN injection -> rollback to the last good checkpoint, lower lr."""
from __future__ import annotations

import json

import pytest

from ssl_pretrain import watchdog as wd


def inner(n: int, loss, ppl: float = 40.0) -> str:
    """A train_inner line exactly as fairseq's json log format writes it (hydra logging)."""
    payload = {"epoch": 1, "update": n / 10, "loss": str(loss), "ntokens": "128", "code_perplexity": str(ppl),
               "accuracy": "0.2", "num_updates": str(n), "lr": "0.002", "gnorm": "1.2"}
    return f"[2026-11-22 03:48:46,320][train_inner][INFO] - {json.dumps(payload)}"


def saved(name: str, n: int) -> str:
    return (f"[2026-11-22 03:48:46,236][fairseq.checkpoint_utils][INFO] - Saved checkpoint {name} "
            f"(epoch 1 @ {n} updates, score 4.677) (writing took 0.026 seconds)")


def healthy_log(save_dir, upto: int = 30) -> list[str]:
    lines = []
    for n in range(1, upto + 1):
        lines.append(inner(n, 6.0 - 0.05 * n))
        if n % 10 == 0:
            lines.append(saved(str(save_dir / f"checkpoint_1_{n}.pt"), n))
    return lines


def make_checkpoints(save_dir, updates):
    """Checkpoint files whose bytes say which update they hold (the watchdog only moves files)."""
    save_dir.mkdir(parents=True, exist_ok=True)
    for n in updates:
        (save_dir / f"checkpoint_1_{n}.pt").write_bytes(f"state@{n}".encode())
    (save_dir / "checkpoint_last.pt").write_bytes(f"state@{max(updates)}".encode())


def test_parse_json_and_simple_lines():
    r = wd.parse_line(inner(7, 5.5, 33.0), 4)
    assert (r.kind, r.num_updates, r.values["loss"], r.values["code_perplexity"], r.lineno) == (
        "train_inner", 7, 5.5, 33.0, 4)
    simple = "epoch 001:     10 / 20 loss=nan, ntokens=128, num_updates=10, lr=0.002, gnorm=1.2"
    s = wd.parse_line(simple)
    assert s.num_updates == 10 and s.values["loss"] != s.values["loss"]  # NaN
    assert wd.parse_line("[x][fairseq.trainer][INFO] - begin training epoch 3") is None
    ev = wd.parse_line("FloatingPointError: Minimum loss scale reached (0.0001). Your loss is probably exploding.")
    assert ev.kind == "event" and ev.values["event"] == "min_loss_scale"
    v = wd.parse_line('[t][valid][INFO] - {"epoch": 2, "valid_loss": "4.5", "valid_num_updates": "4"}')
    assert v.kind == "valid" and v.values["loss"] == 4.5 and v.num_updates == 4


def test_healthy_log_does_not_trip(tmp_path):
    assert wd.check(wd.parse_lines(healthy_log(tmp_path)), wd.Policy(stuck_window=5)) is None


def test_nan_injection_rolls_back_and_lowers_lr(tmp_path):
    save_dir = tmp_path / "checkpoints"
    make_checkpoints(save_dir, [10, 20, 30])
    lines = healthy_log(save_dir, 30) + [inner(31, 5.0), inner(32, "nan"), inner(33, "inf")]
    records = wd.parse_lines(lines)
    trip = wd.check(records, wd.Policy())
    assert (trip.reason, trip.num_updates, trip.good_until) == ("nan", 32, 31)

    action = wd.plan_recovery(trip, wd.candidate_checkpoints(save_dir, records), lr=0.002, restarts=0,
                              policy=wd.Policy(lr_factor=0.5))
    assert action.kind == "rollback" and action.checkpoint_updates == 30
    assert action.new_lr == pytest.approx(0.001) and action.restart == 1
    aside = wd.apply_rollback(action, save_dir)
    assert (save_dir / "checkpoint_last.pt").read_bytes() == b"state@30"
    assert "checkpoint_last.pt" in aside and (save_dir / "checkpoint_last.pt.bad1").exists()

    journal = tmp_path / "watchdog.jsonl"
    wd.journal(journal, "trip", **vars(trip))
    wd.journal(journal, "rollback", **vars(action))
    events = wd.read_journal(journal)
    assert [e["event"] for e in events] == ["trip", "rollback"] and events[1]["new_lr"] == pytest.approx(0.001)


def test_a_rollback_never_replaces_a_file_already_at_its_aside_name(tmp_path):
    """A `.bad1` already there (a user's copy, an earlier rollback's) stays byte for byte; the bad
    trajectory goes to the next free name and the good state is still restored (issue 60)."""
    save_dir = tmp_path / "checkpoints"
    make_checkpoints(save_dir, [10, 20, 30])
    (save_dir / "checkpoint_last.pt.bad1").write_bytes(b"the user's")
    lines = healthy_log(save_dir, 24) + [inner(25, "nan")] + [saved(str(save_dir / "checkpoint_1_30.pt"), 30)]
    records = wd.parse_lines(lines)
    action = wd.plan_recovery(wd.check(records, wd.Policy()), wd.candidate_checkpoints(save_dir, records), 0.002, 0,
                              wd.Policy())
    wd.apply_rollback(action, save_dir)
    assert (save_dir / "checkpoint_last.pt.bad1").read_bytes() == b"the user's"
    assert (save_dir / "checkpoint_last.pt.bad1.1").read_bytes() == b"state@30"
    assert (save_dir / "checkpoint_last.pt").read_bytes() == b"state@20"


def test_an_incomplete_checkpoint_never_replaces_one_set_aside_before(tmp_path):
    from downstream_asr.common import set_aside_incomplete_checkpoints
    save = tmp_path / "save"
    (save / "CKPT+1").mkdir(parents=True)
    (save / "CKPT+1" / "CKPT.yaml").write_text("end-of-epoch: [unclosed\n")
    (save / "INCOMPLETE-CKPT+1").mkdir()
    (save / "INCOMPLETE-CKPT+1" / "keep.txt").write_text("earlier")
    assert set_aside_incomplete_checkpoints(save) == ["CKPT+1"]
    assert (save / "INCOMPLETE-CKPT+1" / "keep.txt").read_text() == "earlier"
    assert (save / "INCOMPLETE-CKPT+1.1" / "CKPT.yaml").is_file() and not (save / "CKPT+1").exists()


def test_nan_before_last_save_skips_newer_checkpoints(tmp_path):
    """The loss went NaN at update 25; checkpoints 30 (and checkpoint_last) hold bad weights."""
    save_dir = tmp_path / "checkpoints"
    make_checkpoints(save_dir, [10, 20, 30])
    lines = healthy_log(save_dir, 24) + [inner(25, "nan")] + [saved(str(save_dir / "checkpoint_1_30.pt"), 30)]
    records = wd.parse_lines(lines)
    trip = wd.check(records, wd.Policy())
    action = wd.plan_recovery(trip, wd.candidate_checkpoints(save_dir, records), 0.002, 0, wd.Policy())
    assert action.checkpoint_updates == 20
    aside = wd.apply_rollback(action, save_dir)
    assert (save_dir / "checkpoint_last.pt").read_bytes() == b"state@20"
    assert "checkpoint_1_30.pt" in aside and not (save_dir / "checkpoint_1_30.pt").exists()


def test_min_loss_scale_collapse_stuck_and_give_up(tmp_path):
    base = healthy_log(tmp_path, 12)
    ev = base + ["FloatingPointError: Minimum loss scale reached (0.0001). Your loss is probably exploding."]
    t = wd.check(wd.parse_lines(ev), wd.Policy())
    assert t.reason == "min_loss_scale" and t.good_until == 12

    collapse = base + [inner(13 + i, 4.0, ppl=1.3) for i in range(3)]
    t = wd.check(wd.parse_lines(collapse), wd.Policy(code_ppl_min=2.0, code_ppl_patience=3))
    assert t.reason == "code_collapse" and t.num_updates == 15
    assert wd.check(wd.parse_lines(collapse), wd.Policy(code_ppl_patience=4)) is None

    flat = [inner(n, 5.0) for n in range(1, 21)]
    t = wd.check(wd.parse_lines(flat), wd.Policy(stuck_window=10))
    assert t.reason == "stuck" and t.num_updates == 20
    a = wd.plan_recovery(t, [], 0.002, 0, wd.Policy(stuck_window=10))
    assert a.reseed and a.checkpoint is None  # nothing saved yet: restart from scratch

    a = wd.plan_recovery(t, [], 0.002, 3, wd.Policy(max_restarts=3))
    assert a.kind == "give_up"


@pytest.mark.slow
def test_nan_injected_into_a_live_run_rolls_back_and_restarts_with_half_the_lr(tmp_path, monkeypatch):
    """A real tiny fairseq run; a NaN line appended to its log mid-run trips the watchdog,
    which stops fairseq, restores checkpoint_1_10.pt-or-later and finishes with lr / 2."""
    import threading
    import time

    from ssl_helpers import write_manifest, write_wavs
    from ssl_pretrain.run import run_pretraining

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    root = tmp_path / "audio"
    manifest = write_manifest(root, write_wavs(root, n=8), tmp_path / "m")
    out = tmp_path / "run"
    overrides = ["optimization.max_update=40", "checkpoint.save_interval_updates=10", "common.log_interval=1",
                 "dataset.validate_interval=1000", "checkpoint.save_interval=1000"]
    injected = {}

    def inject():
        log = out / "train.log"
        deadline = time.time() + 300
        while time.time() < deadline:
            if log.exists():
                records = wd.parse_lines(log.read_text().splitlines())
                done = [r.num_updates for r in records if r.kind == "train_inner"]
                if any(r.kind == "saved" for r in records) and done and done[-1] >= 13:
                    with open(log, "a") as f:
                        f.write(inner(done[-1] + 1, "nan") + "\n")
                    injected["at"] = done[-1] + 1
                    return
            time.sleep(0.05)

    thread = threading.Thread(target=inject)
    thread.start()
    summary = run_pretraining("tiny", manifest, out, seed=1, overrides=overrides, poll_s=0.2)
    thread.join()
    assert "at" in injected, "the run ended before the NaN could be injected"
    assert summary["final_updates"] == 40 and summary["restarts"] == 1
    assert summary["lr"] == pytest.approx(0.001)  # tiny preset: 0.002, halved

    events = wd.read_journal(out / "watchdog.jsonl")
    assert [e["event"] for e in events] == ["trip", "rollback"]
    trip, rollback = events
    assert trip["reason"] == "nan" and trip["num_updates"] == injected["at"]
    # saves happen every 10 updates; here they fall on epoch ends, where fairseq writes
    # checkpoint_last.pt (+ best) but no numbered file: the log says which update it holds
    assert rollback["checkpoint_updates"] == 10 * ((injected["at"] - 1) // 10)
    assert rollback["old_lr"] == pytest.approx(0.002) and rollback["new_lr"] == pytest.approx(0.001)

    # the restarted fairseq resumed from the rolled-back update and ran with the lower peak lr:
    # during warm-up (200 updates) fairseq's lr is peak * num_updates / 200
    text = (out / "train.log").read_text()
    before, after = text.split("by rollback from", 1)
    assert f"@ {rollback['checkpoint_updates']} updates" in after.split("\n")[0] or \
        f"@ {rollback['checkpoint_updates']} updates" in before.rsplit("\n", 1)[-1]
    assert "(epoch" in after and "Loaded checkpoint" in after
    peak_before = [r.values["lr"] * 200 / r.num_updates for r in wd.parse_lines(before.splitlines())
                   if r.kind == "train_inner" and r.values.get("loss") == r.values.get("loss")]
    peak_after = [r.values["lr"] * 200 / r.num_updates for r in wd.parse_lines(after.splitlines())
                  if r.kind == "train_inner"]
    assert peak_before and peak_after
    assert all(p == pytest.approx(0.002, rel=0.06) for p in peak_before)
    assert all(p == pytest.approx(0.001, rel=0.06) for p in peak_after)
    first_after = min(r.num_updates for r in wd.parse_lines(after.splitlines()) if r.kind == "train_inner")
    assert first_after == rollback["checkpoint_updates"] + 1


def test_rollback_takes_the_newest_good_checkpoint_even_when_it_is_checkpoint_last(tmp_path):
    """Numbered checkpoints every 10 updates, checkpoint_last.pt saved at update 25 (an epoch end:
    fairseq writes no numbered file there); NaN at 27. The newest good state is
    checkpoint_last.pt @ 25, not checkpoint_1_20.pt."""
    save_dir = tmp_path / "checkpoints"
    make_checkpoints(save_dir, [10, 20])
    (save_dir / "checkpoint_last.pt").write_bytes(b"state@25")
    lines = healthy_log(save_dir, 20) + [inner(n, 5.0) for n in range(21, 26)] + \
        [saved(str(save_dir / "checkpoint_last.pt"), 25), inner(26, 4.9), inner(27, "nan")]
    records = wd.parse_lines(lines)
    trip = wd.check(records, wd.Policy())
    assert (trip.reason, trip.good_until) == ("nan", 26)
    action = wd.plan_recovery(trip, wd.candidate_checkpoints(save_dir, records), 0.002, 0, wd.Policy())
    assert (action.checkpoint_updates, action.checkpoint) == (25, str(save_dir / "checkpoint_last.pt"))
    aside = wd.apply_rollback(action, save_dir)
    assert (save_dir / "checkpoint_last.pt").read_bytes() == b"state@25"        # restored, not state@20
    assert aside == ["checkpoint_last.pt"] and (save_dir / "checkpoint_1_20.pt").exists()
    assert (save_dir / "checkpoint_last.pt.bad1").read_bytes() == b"state@25"   # kept aside, never deleted


def test_at_equal_updates_the_numbered_checkpoint_wins(tmp_path):
    """checkpoint_last.pt and checkpoint_1_30.pt both hold update 30: the rollback copies the
    numbered file (checkpoint_last.pt is the one set aside)."""
    save_dir = tmp_path / "checkpoints"
    make_checkpoints(save_dir, [10, 20, 30])
    records = wd.parse_lines(healthy_log(save_dir, 30) + [inner(31, "nan")])
    trip = wd.check(records, wd.Policy())
    action = wd.plan_recovery(trip, wd.candidate_checkpoints(save_dir, records), 0.002, 0, wd.Policy())
    assert (action.checkpoint_updates, action.checkpoint) == (30, str(save_dir / "checkpoint_1_30.pt"))
    # a checkpoint_last.pt newer than the last healthy update is never picked
    records = wd.parse_lines(healthy_log(save_dir, 28) + [inner(29, "nan")] +
                             [saved(str(save_dir / "checkpoint_last.pt"), 30)])
    trip = wd.check(records, wd.Policy())
    action = wd.plan_recovery(trip, wd.candidate_checkpoints(save_dir, records), 0.002, 0, wd.Policy())
    assert action.checkpoint_updates == 20
