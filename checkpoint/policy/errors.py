"""Policy load errors: every problem in a set, reported at once, sorted by file and line."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class PolicyError:
    file: str
    line: int
    message: str
    column: int = 0  # where the YAML parser knows it; 0: the line alone

    def __str__(self) -> str:
        # line 0: the problem is the file or folder itself, not a place in it
        if not self.line:
            return f"{self.file}: {self.message}"
        return f"{self.file}:{self.line}:{self.column}: {self.message}" if self.column else \
            f"{self.file}:{self.line}: {self.message}"


class PolicyLoadError(Exception):
    """The set did not load; nothing of it is used. `errors` holds every problem found."""

    code = "policy_error"

    def __init__(self, errors: list[PolicyError]):
        self.errors = sorted(set(errors))
        super().__init__("\n".join(str(e) for e in self.errors))
