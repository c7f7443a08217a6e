-- Schema v12: operator schedules (`schedules:`, `schedules::Scheduler`). One row per schedule:
-- the timetable its next run was computed from (a changed cron or zone is computed again),
-- its next run, and when its last run started (what `quietIfNoActivity` compares the place's
-- newest message with). One row per run, whether it ran or was skipped, so `stats` and the
-- metrics show what happened; a run still `running` when the daemon stopped is marked
-- `interrupted` at the next start. The bot's own posts: no user is named anywhere.
CREATE TABLE schedules (
    name           TEXT    NOT NULL PRIMARY KEY,
    timetable      TEXT    NOT NULL,
    next_run_ms    INTEGER,
    last_run_ms    INTEGER
) WITHOUT ROWID;
CREATE TABLE schedule_runs (
    id             INTEGER PRIMARY KEY,
    name           TEXT    NOT NULL,
    due_ms         INTEGER NOT NULL,
    started_ms     INTEGER NOT NULL,
    finished_ms    INTEGER,
    trigger        TEXT    NOT NULL,
    outcome        TEXT    NOT NULL,
    detail         TEXT,
    tokens         INTEGER NOT NULL DEFAULT 0 CHECK (tokens >= 0)
);
CREATE INDEX schedule_runs_by_name ON schedule_runs (name, started_ms);
CREATE INDEX schedule_runs_by_start ON schedule_runs (started_ms);
