"""The checkpoint registry moves with a study (issue 29, item 8): a checkpoint inside the
registry's folder (a study's own pretraining runs) is stored relative to it, so a copied study
resolves its own copy once the original is deleted; one outside stays absolute."""
from __future__ import annotations

import json
import shutil

from ssl_pretrain.registry import Registry


def test_a_copied_registry_resolves_its_own_checkpoints(tmp_path):
    study = tmp_path / "study"
    own = study / "ssl" / "F" / "checkpoints" / "checkpoint_best.pt"
    own.parent.mkdir(parents=True)
    own.write_bytes(b"own")
    outside = tmp_path / "models" / "lb.pt"
    outside.parent.mkdir()
    outside.write_bytes(b"lb")
    reg = Registry(study / "checkpoints.json")
    assert reg.add("F-tiny", own, kind="fairseq")["path"] == str(own.resolve())
    reg.add("LB", outside, kind="fairseq")
    stored = {e["name"]: e["path"] for e in json.loads((study / "checkpoints.json").read_text())["checkpoints"]}
    assert stored == {"F-tiny": "ssl/F/checkpoints/checkpoint_best.pt", "LB": str(outside.resolve())}
    shutil.copytree(study, tmp_path / "copy")
    shutil.rmtree(study)
    copy = Registry(tmp_path / "copy" / "checkpoints.json")
    assert copy.get("F-tiny")["path"] == str((tmp_path / "copy" / "ssl/F/checkpoints/checkpoint_best.pt").resolve())
    assert copy.get("LB")["path"] == str(outside.resolve())
    # replacing one entry keeps the other's stored form
    copy.add("LB", outside, kind="fairseq", replace=True)
    assert json.loads((tmp_path / "copy" / "checkpoints.json").read_text())["checkpoints"][0]["path"] == \
        "ssl/F/checkpoints/checkpoint_best.pt"
