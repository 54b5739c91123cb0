"""`warden audit`: read, follow, verify and export the decision log.

Every subcommand opens the log read-only and never creates it: pointing the CLI at the wrong
folder is an error, not an empty log.

Parsing (`parsing`), the subcommands (`commands`) and how records are printed (`output`) are
modules of their own.
"""

from __future__ import annotations

from checkpoint.audit.cli.parsing import register

__all__ = ["register"]
