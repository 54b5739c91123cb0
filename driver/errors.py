"""Typed driver errors, each with a stable code.

    DriverError (code)
    ├── ProviderError (code = provider_<kind>): the model provider refused or failed a call;
    │                  counts toward the `provider` breaker
    ├── GoalError (code = invalid_goal): a goal file a person wrote is not valid
    ├── RunStateError (code = run_not_found / run_not_<status> / ...): an action that does not
    │                  fit the run's state (approving a run that awaits nothing, resuming past
    │                  turns_total, ...)
    ├── RoleRequired (code = role_required): the person lacks the tenant role the action needs
    │                  (driver/access.py); PERMISSION_DENIED on the operator API
    └── DependencyUnavailable (code = checkpoint_unavailable / toolrunner_unavailable): a process
                       the loop must ask is unreachable; the run pauses (fail closed)

Codes never change meaning: tests, dashboards and the CLI count by them.
"""

from __future__ import annotations


class DriverError(Exception):
    code = "driver_error"

    def __init__(self, message: str, *, code: str | None = None):
        super().__init__(message)
        if code:
            self.code = code
        self.message = message

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class ProviderError(DriverError):
    """`kind` is one of overloaded, credit, quota, auth, unavailable, error."""

    def __init__(self, kind: str, message: str, *, status: int | None = None):
        super().__init__(message, code=f"provider_{kind}")
        self.kind = kind
        self.status = status


class GoalError(DriverError):
    code = "invalid_goal"


class RunStateError(DriverError):
    code = "invalid_run_state"


class RoleRequired(DriverError):
    code = "role_required"


class DependencyUnavailable(DriverError):
    pass
