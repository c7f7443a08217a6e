-- Schema v7: the inbox. Every platform message that passed the trigger rules is recorded when
-- it is handed to the router, keyed by its platform and message id, so a message is answered
-- at most once across restarts, and one still `queued` when the daemon stopped or crashed is
-- found at the next start (`conversation::inbox`). `payload` is the message as the router got
-- it (JSON), to answer it again; it is dropped with the row after the retention window.
CREATE TABLE inbox (
    platform       TEXT    NOT NULL,
    message_id     TEXT    NOT NULL,
    channel_id     TEXT    NOT NULL,
    user_id        TEXT    NOT NULL,
    received_at_ms INTEGER NOT NULL,
    state          TEXT    NOT NULL CHECK (state IN ('queued', 'answered', 'failed', 'skipped')),
    reason         TEXT,
    attempts       INTEGER NOT NULL DEFAULT 0,
    updated_at_ms  INTEGER NOT NULL,
    payload        TEXT    NOT NULL,
    PRIMARY KEY (platform, message_id)
) WITHOUT ROWID;
CREATE INDEX inbox_state ON inbox (state, received_at_ms);
CREATE INDEX inbox_received ON inbox (received_at_ms);
