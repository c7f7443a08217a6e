-- Schema v4: memory maintenance (consolidation) runs.
--
-- One row per run of the maintenance job on one workspace and one visibility (public and
-- private memories are consolidated separately). The scheduler reads the newest `started_at`
-- of a workspace to keep to `memory.maintenance.intervalHours`; `air-friends stats` and the
-- logs report the counts.
CREATE TABLE maintenance_runs (
    id          INTEGER PRIMARY KEY,
    workspace   TEXT    NOT NULL,
    visibility  TEXT    NOT NULL CHECK (visibility IN ('public', 'private')),
    started_at  INTEGER NOT NULL,
    finished_at INTEGER NOT NULL,
    outcome     TEXT    NOT NULL,
    dry_run     INTEGER NOT NULL,
    read        INTEGER NOT NULL DEFAULT 0 CHECK (read >= 0),
    saved       INTEGER NOT NULL DEFAULT 0 CHECK (saved >= 0),
    disabled    INTEGER NOT NULL DEFAULT 0 CHECK (disabled >= 0),
    tokens      INTEGER NOT NULL DEFAULT 0 CHECK (tokens >= 0)
);
CREATE INDEX maintenance_runs_by_workspace ON maintenance_runs (workspace, started_at);
