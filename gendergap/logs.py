"""How gendergap logs: one format for the CLI and for every job process of a sweep."""
from __future__ import annotations

import logging
import sys


def setup_logging(quiet: bool = False) -> None:
    logging.basicConfig(level=logging.WARNING if quiet else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S",
                        stream=sys.stderr, force=True)
