-- Schema v11: a user's data can be erased (`store::erasure`: `air-friends forget-user`, the
-- retention job).
--
-- Memories, their patches and reminders stay append-only for everything else: their delete
-- triggers now let a row go only while the erasing transaction holds a row in `erasing` (it
-- adds one for the workspace it erases and removes it before it commits).
CREATE TABLE erasing (
    workspace TEXT NOT NULL PRIMARY KEY
) WITHOUT ROWID;

DROP TRIGGER memories_append_only_delete;
CREATE TRIGGER memories_append_only_delete BEFORE DELETE ON memories
WHEN NOT EXISTS (SELECT 1 FROM erasing WHERE workspace = old.workspace)
BEGIN
    SELECT RAISE(ABORT, 'memories are append-only: rows cannot be deleted');
END;
DROP TRIGGER memory_patches_append_only_delete;
CREATE TRIGGER memory_patches_append_only_delete BEFORE DELETE ON memory_patches
WHEN NOT EXISTS (SELECT 1 FROM erasing e JOIN memories m ON m.workspace = e.workspace
                 WHERE m.seq = old.memory_seq)
BEGIN
    SELECT RAISE(ABORT, 'memory patches are append-only');
END;
DROP TRIGGER reminders_no_delete;
CREATE TRIGGER reminders_no_delete BEFORE DELETE ON reminders
WHEN NOT EXISTS (SELECT 1 FROM erasing WHERE workspace = old.workspace)
BEGIN
    SELECT RAISE(ABORT, 'reminders are never deleted');
END;

-- The short-keyword index can now delete a row by its rowid alone (`contentless_delete`):
-- until v10 a deletion had to repeat the exact tokens once indexed, which the store cannot
-- know for rows written by an older build. Rebuilt here from the memories (`short_grams`,
-- registered for the migration); rows still queued are indexed from the queue as before.
DROP TABLE memories_grams;
CREATE VIRTUAL TABLE memories_grams USING fts5 (
    grams,
    content = '',
    contentless_delete = 1,
    detail = 'none',
    tokenize = 'unicode61 remove_diacritics 0'
);
INSERT INTO memories_grams (rowid, grams)
    SELECT seq, grams FROM (
        SELECT seq, short_grams(content) AS grams FROM memories
        WHERE seq NOT IN (SELECT seq FROM index_queue)
    )
    WHERE grams <> '' ORDER BY seq;

-- What was asked and done about a user's data (`/forget`, `forget-user`, retention): when,
-- what, by whom (`user`, `operator`, `retention`), the counts (JSON), never the content.
-- `subject` names the user only as HMAC-SHA256 of `platform/userId` under `privacy_key`, so a
-- record outlives an erasure without keeping who it was about; the operator can still match a
-- request to its record (`air-friends forget-user` prints it).
CREATE TABLE privacy_log (
    id           INTEGER PRIMARY KEY,
    at_ms        INTEGER NOT NULL,
    action       TEXT    NOT NULL,
    requested_by TEXT    NOT NULL CHECK (requested_by IN ('user', 'operator', 'retention')),
    subject      TEXT    NOT NULL,
    detail       TEXT    NOT NULL DEFAULT '{}'
);
CREATE INDEX privacy_log_at ON privacy_log (at_ms);
CREATE TABLE privacy_key (
    id  INTEGER PRIMARY KEY CHECK (id = 1),
    key BLOB    NOT NULL
);
INSERT INTO privacy_key (id, key) VALUES (1, randomblob(32));
