"""Runs that outlive their driver: on a PostgreSQL store, each run is a DBOS workflow
(workflow.py), and every driver watches the others' leases (leases.py) so that the runs of a
driver that died are recovered by one that lives. The SQLite store keeps the single-machine path
of driver/loop.py (a restarted driver continues its own runs) and uses nothing here."""
