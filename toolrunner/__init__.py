"""toolrunner: runs a granted tool call in a hardened, short-lived Docker container.

Modules, in the order a call passes through them:

- ``errors``: the typed refusals, each with a stable code and a gRPC status
- ``runner``: grant check, idempotency, concurrency, the whole call (``ToolRunner``)
- ``argv``: fills a tool's argv template from its validated arguments (no shell)
- ``images``: pins each tool's image to a local image id; never pulls
- ``container``: the hardened container spec and one container's life (attach, start, timeout, remove)
- ``scrub`` / ``output``: masking secrets and credentials; the head-and-tail output cap
- ``receipts``: the claim of each grant and its receipt, in SQLite or on a fleet's shared PostgreSQL
- ``instance``: the toolrunner's name in the receipt store, the same across its restarts
- ``health``: NOT_SERVING while a shared receipt store does not answer
- ``reaper``: removes labelled containers past their deadline
- ``watchdog``: a process that removes the runner's containers when the runner ends, however it ends
- ``server`` / ``cli``: the gRPC service and ``warden toolrunner serve``
"""
