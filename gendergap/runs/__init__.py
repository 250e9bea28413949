"""Keyword functions behind the CLI leaves that run a model and score it: a package's function, then analysis's scoring; the CLI (cmd_*.py) and the sweep's steps both call them."""
