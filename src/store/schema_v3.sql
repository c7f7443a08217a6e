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
-- without one: every new memory enters it (trigger), and so does every memory already stored
-- when this version is applied; the background job empties it when embeddings are on.
CREATE TABLE memory_vectors (
    memory_seq INTEGER PRIMARY KEY REFERENCES memories (seq),
    model      TEXT    NOT NULL,
    vector     BLOB    NOT NULL
);
CREATE TABLE embedding_queue (
    memory_seq INTEGER PRIMARY KEY REFERENCES memories (seq)
);
CREATE TRIGGER memories_embedding_queue AFTER INSERT ON memories
BEGIN
    INSERT OR IGNORE INTO embedding_queue (memory_seq) VALUES (new.seq);
END;
INSERT OR IGNORE INTO embedding_queue (memory_seq) SELECT seq FROM memories;
