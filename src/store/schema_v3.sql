-- Schema version 3. When a memory was last used — returned by memory-search or shown in a
-- prompt — and how often. The prompt's important memories are chosen newest-or-most-recently-
-- used first within their own token budget (`context.importantMemoriesBudget`). A side table,
-- because memories are append-only; one row per memory that was ever used.
CREATE TABLE memory_use (
    memory_seq   INTEGER PRIMARY KEY REFERENCES memories (seq),
    last_used_at INTEGER NOT NULL,
    uses         INTEGER NOT NULL DEFAULT 1 CHECK (uses >= 1)
);

-- Skill calls per hour (its start, ms), skill and outcome code (`OK` or the error code), for
-- `air-friends stats`; `buckets` is the JSON array of call counts per latency bucket
-- (`analytics::LATENCY_BUCKETS_MS`, then one for slower). Written once a minute by the Skill
-- API's call log.
CREATE TABLE skill_calls (
    hour    INTEGER NOT NULL,
    skill   TEXT    NOT NULL,
    code    TEXT    NOT NULL,
    calls   INTEGER NOT NULL CHECK (calls >= 0),
    buckets TEXT    NOT NULL,
    PRIMARY KEY (hour, skill, code)
) WITHOUT ROWID;

-- Meaning-based recall (`memory.embeddings`): one vector per memory, little-endian f32,
-- normalised, with the model that made it. `embedding_queue` holds the memories still
-- without one. Its trigger (`memories_embedding_queue`) exists only while embeddings are on:
-- the daemon creates it, and queues every memory without a vector, when it starts with them,
-- and drops it when it starts without (`vectors::set_queueing`), so saves pay for the queue
-- only when it is used.
CREATE TABLE memory_vectors (
    memory_seq INTEGER PRIMARY KEY REFERENCES memories (seq),
    model      TEXT    NOT NULL,
    vector     BLOB    NOT NULL
);
CREATE TABLE embedding_queue (
    memory_seq INTEGER PRIMARY KEY REFERENCES memories (seq)
);

-- Memories counted by workspace and current state, kept in step with every insert and every
-- change of visibility, importance or enabled (the triggers run in the writing transaction),
-- so memory-stats reads at most eight rows however many memories a workspace holds.
CREATE TABLE memory_counts (
    workspace  TEXT    NOT NULL,
    visibility TEXT    NOT NULL,
    enabled    INTEGER NOT NULL,
    importance TEXT    NOT NULL,
    n          INTEGER NOT NULL CHECK (n >= 0),
    PRIMARY KEY (workspace, visibility, enabled, importance)
) WITHOUT ROWID;
INSERT INTO memory_counts (workspace, visibility, enabled, importance, n)
    SELECT workspace, visibility, enabled, importance, count(*) FROM memories
    GROUP BY workspace, visibility, enabled, importance;
CREATE TRIGGER memory_counts_insert AFTER INSERT ON memories
BEGIN
    INSERT INTO memory_counts (workspace, visibility, enabled, importance, n)
    VALUES (new.workspace, new.visibility, new.enabled, new.importance, 1)
    ON CONFLICT (workspace, visibility, enabled, importance) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER memory_counts_update AFTER UPDATE OF visibility, enabled, importance ON memories
WHEN old.visibility IS NOT new.visibility OR old.enabled IS NOT new.enabled
     OR old.importance IS NOT new.importance
BEGIN
    UPDATE memory_counts SET n = n - 1
    WHERE workspace = old.workspace AND visibility = old.visibility
      AND enabled = old.enabled AND importance = old.importance;
    INSERT INTO memory_counts (workspace, visibility, enabled, importance, n)
    VALUES (new.workspace, new.visibility, new.enabled, new.importance, 1)
    ON CONFLICT (workspace, visibility, enabled, importance) DO UPDATE SET n = n + 1;
END;
