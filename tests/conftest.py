"""Shared test set-up: engines run offline, on the CPU, deterministically."""
import atexit
import os
import shutil
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")
# a command run without --feature-store must not write into the checkout's runs/features; the
# process that made the folder removes it at exit (xdist's workers inherit the variable)
if "GENDERGAP_FEATURE_STORE" not in os.environ:
    _store_root = tempfile.mkdtemp(prefix="gendergap-store-")
    atexit.register(shutil.rmtree, _store_root, ignore_errors=True)
    os.environ["GENDERGAP_FEATURE_STORE"] = os.path.join(_store_root, "features")

import pytest  # noqa: E402

from slurm_helpers import slurm_cluster  # noqa: E402,F401  -- the one-node SLURM cluster fixture


@pytest.fixture(autouse=True)
def _one_slurm_test_at_a_time(request):
    """`make test` runs test files on parallel workers (pytest-xdist, --dist loadfile: a file's
    tests and its module-scoped fixtures stay on one worker). Tests that submit to the one-node
    SLURM cluster hold this lock while they run: a job asking for both CPUs must not wait behind
    another worker's jobs until its time-out."""
    if "slurm_cluster" not in request.fixturenames:
        yield
        return
    from corpora.base.boundary import locked
    with locked(os.path.join(tempfile.gettempdir(), "gendergap-tests-slurm.lock")):
        yield


# The files that take minutes, longest first (`make test`'s --durations): on parallel workers they
# start first, so the run does not end waiting on one long file that started last.
SLOW_FILES = ("test_slurm.py", "test_boito2022_walkthrough.py", "test_transcribe.py", "test_trace.py",
              "test_sweep.py", "test_slurm_sweep.py", "test_baseline_seeds.py", "test_batch_invariance_st.py")


def pytest_collection_modifyitems(config, items):
    """The slow files first (each file's tests stay together and in order), then the `gpu` tests:
    run where torch sees a CUDA device and skipped, saying why, elsewhere."""
    import pytest
    import torch
    rank = {name: i for i, name in enumerate(SLOW_FILES)}
    items[:] = sorted(items, key=lambda item: rank.get(item.path.name, len(SLOW_FILES)))   # stable
    if torch.cuda.is_available():
        return
    why = ("no CUDA device: torch " + torch.__version__ + (" is a CPU-only build" if torch.version.cuda is None
                                                            else " sees no GPU"))
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(pytest.mark.skip(reason=why))
