"""Where warden's state lives: one store setting for every process.

`--store`, `WARDEN_STORE` or `[store] url` in the settings file name either the embedded default,
SQLite files in a folder (`sqlite:///var/lib/warden`, one machine), or a PostgreSQL database that a
fleet of checkpoints, drivers and toolrunners shares (`postgresql://warden@db/warden`).

- `url`: reading the setting, and showing it without its password.
- `errors`: what a store raises; each error carries a stable code.
- `pg`: a bounded connection pool with statement timeouts; database failures become errors with codes.
- `migrations`: versioned schemas, applied by `warden store migrate`, checked at every start.
"""
