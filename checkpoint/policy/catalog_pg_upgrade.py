"""Version 2 of the catalog's PostgreSQL schema: the one table shape (catalog_items.py).

`warden store migrate` runs it in one transaction with the version stamp (warden/store/migrations.py):
it makes `checkpoint_catalog_items` and `checkpoint_catalog_heads`, moves every row of the tables of
version 1 into them in the order they were first written, and drops those tables. The files of each
revision (`checkpoint_policy_revisions`) stay where they are. Released scripts never change.

A write to an item or a head moves the change counter of its store (a learning: the learnings', the
rest: the catalog's) in the same transaction, as the old tables' triggers did, so the replicas'
feed (catalog_feed.py) follows the new tables as it followed the old.
"""

from __future__ import annotations

_ACTS = "source, proposed_by, proposed_for, proposed_at, note, decided_by, decided_at, decision_note"
_ORDER = "_inserted bigint GENERATED ALWAYS AS IDENTITY"


def _digest(column: str) -> str:
    return f"encode(sha256(convert_to({column}, 'UTF8')), 'hex')"


def _items(kind: str, tenant: str, versions: str, lifecycle: str, key: str) -> str:
    """The items of one kind: each version with its state, then any state without a version row."""
    join = " AND ".join(f"l.{c} = v.{c}" for c in key.split(", "))
    name = "agent" if "agent" in key else "name"
    acts = ", ".join(f"l.{c}" for c in _ACTS.split(", "))
    revision = "v.policy_revision" if versions == "checkpoint_agent_versions" else "NULL"
    return f"""
    INSERT INTO checkpoint_catalog_items (kind, tenant, name, version, body, digest, revision, first_seen, state, {_ACTS})
    SELECT {kind}, {tenant}, v.{name}, v.version, v.snapshot, {_digest("v.snapshot")}, {revision}, v.first_seen,
           l.status, {acts}
    FROM {versions} v LEFT JOIN {lifecycle} l ON {join} ORDER BY v._inserted;
    INSERT INTO checkpoint_catalog_items (kind, tenant, name, version, state, {_ACTS})
    SELECT {kind.replace("v.", "l.")}, {tenant.replace("v.", "l.")}, l.{name}, l.version, l.status, {acts}
    FROM {lifecycle} l WHERE NOT EXISTS (SELECT 1 FROM {versions} v WHERE {join}) ORDER BY l._inserted;"""


_LEARNING_BODY = ", ".join(f"'{c}', {c}" for c in (
    "agent", "agent_version", "tool", "code", "text", "severity", "severity_capped", "match", "suggested_match",
    "proposed_at", "reviewed_at", "occurrences", "last_occurrence_at", "triggers", "last_triggered_at", "stale_at",
    "provenance", "dedup"))

ONE_TABLE = f"""
    CREATE TABLE checkpoint_catalog_items (
        kind text NOT NULL, tenant text NOT NULL, name text NOT NULL, version text NOT NULL, state text, body text,
        digest text, revision text, first_seen text, source text, proposed_by text, proposed_for text,
        proposed_at text, note text, decided_by text, decided_at text, decision_note text, {_ORDER},
        PRIMARY KEY (kind, tenant, name, version));
    CREATE INDEX checkpoint_catalog_items_kind ON checkpoint_catalog_items (kind, state);
    CREATE TABLE checkpoint_catalog_heads (
        kind text NOT NULL, tenant text NOT NULL, name text NOT NULL, version text, file_version text, {_ORDER},
        PRIMARY KEY (kind, tenant, name));
    {_items("'agent'", "''", "checkpoint_agent_versions", "checkpoint_agent_lifecycle", "agent, version")}
    {_items("v.kind", "v.tenant", "checkpoint_entry_versions", "checkpoint_entry_lifecycle", "kind, tenant, name, version")}
    INSERT INTO checkpoint_catalog_items (kind, tenant, name, version, state, source, proposed_by, decided_by,
                                          decision_note, body, digest)
    SELECT 'learning', tenant, id, '', status, source, proposed_by, reviewed_by, review_note, b.body, {_digest("b.body")}
    FROM checkpoint_learnings, LATERAL (SELECT jsonb_build_object({_LEARNING_BODY})::text AS body) b
    ORDER BY _inserted;
    INSERT INTO checkpoint_catalog_heads (kind, tenant, name, version, file_version)
    SELECT 'agent', '', agent, version, file_version FROM checkpoint_agent_live ORDER BY _inserted;
    INSERT INTO checkpoint_catalog_heads (kind, tenant, name, version, file_version)
    SELECT kind, tenant, name, version, file_version FROM checkpoint_entry_live ORDER BY _inserted;
    DROP TABLE checkpoint_agent_versions, checkpoint_agent_lifecycle, checkpoint_agent_live,
               checkpoint_entry_versions, checkpoint_entry_lifecycle, checkpoint_entry_live, checkpoint_learnings;

    CREATE FUNCTION checkpoint_catalog_items_count() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE
        kind text;
    BEGIN
        IF TG_OP = 'DELETE' THEN kind := OLD.kind; ELSE kind := NEW.kind; END IF;
        UPDATE checkpoint_catalog_changes SET version = version + 1
        WHERE store = CASE WHEN kind = 'learning' THEN 'learnings' ELSE 'catalog' END;
        RETURN NULL;
    END $$;
    CREATE TRIGGER checkpoint_catalog_items_changed AFTER INSERT OR UPDATE OR DELETE ON checkpoint_catalog_items
        FOR EACH ROW EXECUTE FUNCTION checkpoint_catalog_items_count();
    CREATE TRIGGER checkpoint_catalog_heads_changed AFTER INSERT OR UPDATE OR DELETE ON checkpoint_catalog_heads
        FOR EACH ROW EXECUTE FUNCTION checkpoint_catalog_items_count();
"""
