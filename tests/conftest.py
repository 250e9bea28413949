"""Shared test set-up: engines run offline, on the CPU, deterministically."""
import os
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")
# a command run without --feature-store must not write into the checkout's runs/features
os.environ.setdefault("GENDERGAP_FEATURE_STORE", os.path.join(tempfile.mkdtemp(prefix="gendergap-store-"), "features"))

from slurm_helpers import slurm_cluster  # noqa: E402,F401  -- the one-node SLURM cluster fixture


def pytest_collection_modifyitems(config, items):
    """Groups for pytest-xdist, then the `gpu` skips.

    Under `--dist loadgroup` (scripts/run_tests.sh) each test file is one group, so a file's
    module-scoped trained fixtures are built once, on one worker. The files that submit to the
    one-node SLURM cluster share one group: on one worker their jobs never wait behind another
    file's in the queue (a test waits for its jobs with a time-out).

    `gpu` tests run where torch sees a CUDA device and are skipped, saying why, elsewhere."""
    import pytest
    import torch
    slurm_files = {item.path for item in items if "slurm_cluster" in getattr(item, "fixturenames", ())}
    for item in items:
        group = "slurm" if item.path in slurm_files else item.path.name
        item.add_marker(pytest.mark.xdist_group(group))
    if torch.cuda.is_available():
        return
    why = ("no CUDA device: torch " + torch.__version__ + (" is a CPU-only build" if torch.version.cuda is None
                                                            else " sees no GPU"))
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(pytest.mark.skip(reason=why))
