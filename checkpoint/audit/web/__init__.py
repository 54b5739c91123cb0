"""The auditor's read-only web view of the decision log (`warden audit serve`, docs/audit.md)."""
