-- Schema version 1 of the air-friends store. Times are milliseconds since the Unix epoch (UTC).

-- Workspaces (`platform/userId`) get a small integer id. A memory's `seq` (its rowid, also the
-- rowid in both FTS indexes) is `(workspace id << 32) | n` where n counts the workspace's
-- memories, so each workspace is one contiguous rowid range: FTS5 seeks straight to it
-- (`rowid BETWEEN lo AND hi`) and a workspace's rows sit together in the table.
CREATE TABLE workspaces (
    id       INTEGER PRIMARY KEY,
    key      TEXT    NOT NULL UNIQUE,
    next_doc INTEGER NOT NULL DEFAULT 0
);

-- Memories: append-only. Identity, content and the initial metadata never change (enforced by
-- triggers); the "current view" columns are the fold of the initial metadata and every patch in
-- memory_patches, in (created_at, seq) order, maintained by the store.
CREATE TABLE memories (
    seq                INTEGER PRIMARY KEY,
    id                 TEXT    NOT NULL UNIQUE,
    workspace          TEXT    NOT NULL,
    content            TEXT    NOT NULL,
    created_at         INTEGER NOT NULL,
    initial_visibility TEXT    NOT NULL CHECK (initial_visibility IN ('public', 'private')),
    initial_importance TEXT    NOT NULL CHECK (initial_importance IN ('high', 'normal')),
    initial_enabled    INTEGER NOT NULL CHECK (initial_enabled IN (0, 1)),
    initial_related_to TEXT    NOT NULL DEFAULT '[]',
    initial_supersedes TEXT    NOT NULL DEFAULT '[]',
    visibility         TEXT    NOT NULL CHECK (visibility IN ('public', 'private')),
    importance         TEXT    NOT NULL CHECK (importance IN ('high', 'normal')),
    enabled            INTEGER NOT NULL CHECK (enabled IN (0, 1)),
    related_to         TEXT    NOT NULL DEFAULT '[]',
    supersedes         TEXT    NOT NULL DEFAULT '[]',
    updated_at         INTEGER NOT NULL
);
CREATE INDEX memories_by_workspace ON memories (workspace, created_at);
CREATE INDEX memories_by_state ON memories (workspace, visibility, enabled, importance);

CREATE TRIGGER memories_append_only_update
BEFORE UPDATE OF seq, id, workspace, content, created_at, initial_visibility, initial_importance,
                 initial_enabled, initial_related_to, initial_supersedes ON memories
BEGIN
    SELECT RAISE(ABORT, 'memories are append-only: content and identity cannot change');
END;
CREATE TRIGGER memories_append_only_delete BEFORE DELETE ON memories
BEGIN
    SELECT RAISE(ABORT, 'memories are append-only: rows cannot be deleted');
END;

-- Metadata changes, one row per patch; `changes` is the JSON of MemoryPatch.
CREATE TABLE memory_patches (
    seq        INTEGER PRIMARY KEY,
    id         TEXT    NOT NULL UNIQUE,
    memory_seq INTEGER NOT NULL REFERENCES memories (seq),
    changes    TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    origin     TEXT    NOT NULL
);
CREATE INDEX memory_patches_by_memory ON memory_patches (memory_seq, created_at, seq);

CREATE TRIGGER memory_patches_append_only_update BEFORE UPDATE ON memory_patches
BEGIN
    SELECT RAISE(ABORT, 'memory patches are append-only');
END;
CREATE TRIGGER memory_patches_append_only_delete BEFORE DELETE ON memory_patches
BEGIN
    SELECT RAISE(ABORT, 'memory patches are append-only');
END;

-- Substring search (3+ characters, any script): trigram index over the content.
CREATE VIRTUAL TABLE memories_fts USING fts5 (
    content,
    content = 'memories',
    content_rowid = 'seq',
    tokenize = 'trigram case_sensitive 0'
);
CREATE TRIGGER memories_fts_insert AFTER INSERT ON memories
BEGIN
    INSERT INTO memories_fts (rowid, content) VALUES (new.seq, new.content);
END;

-- Short-keyword search (1-2 characters): CJK unigrams + bigrams and short Latin words, computed
-- by the store (search.rs, `short_grams`) and inserted with the memory. Contentless.
CREATE VIRTUAL TABLE memories_grams USING fts5 (
    grams,
    content = '',
    detail = 'none',
    tokenize = 'unicode61 remove_diacritics 0'
);

CREATE TABLE reminders (
    seq             INTEGER PRIMARY KEY,
    id              TEXT    NOT NULL UNIQUE,
    workspace       TEXT    NOT NULL,
    platform        TEXT    NOT NULL,
    user_id         TEXT    NOT NULL,
    message         TEXT    NOT NULL,
    scheduled_at    INTEGER NOT NULL,
    created_at      INTEGER NOT NULL,
    state           TEXT    NOT NULL CHECK (state IN ('pending', 'delivered', 'cancelled', 'failed')),
    attempts        INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    next_attempt_at INTEGER NOT NULL,
    delivered_at    INTEGER,
    late            INTEGER NOT NULL DEFAULT 0 CHECK (late IN (0, 1)),
    last_error      TEXT,
    updated_at      INTEGER NOT NULL
);
CREATE INDEX reminders_due ON reminders (next_attempt_at) WHERE state = 'pending';
CREATE INDEX reminders_by_workspace ON reminders (workspace, state, scheduled_at);
CREATE TRIGGER reminders_no_delete BEFORE DELETE ON reminders
BEGIN
    SELECT RAISE(ABORT, 'reminders are never deleted');
END;
