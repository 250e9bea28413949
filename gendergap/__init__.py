"""gendergap: gender make-up of SSL pretraining vs. fairness of downstream ASR and ST."""
# The package's one version: setup.cfg reads it (`attr:`), `gendergap --version` prints it, and
# CITATION.cff, docs/index.md's BibTeX and CHANGELOG.md's newest release must carry the same
# (tests/test_release_docs.py).
__version__ = "0.1.0"
