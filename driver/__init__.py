"""The driver: hosts the model loop and owns runs.

The loop (`loop.py`) asks the checkpoint before every model call and tool call, sends allowed calls
to the toolrunner with their grants, and keeps each run's state in its store (`store.py`); every
model response passes the typed boundary (`boundary.py`) first (docs/driver.md).
"""
