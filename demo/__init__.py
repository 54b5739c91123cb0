"""`make demo`: a governed agent run, end to end, on a fresh machine (see demo/__main__.py)."""
