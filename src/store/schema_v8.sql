-- Schema v8: catch-up cursors. Per platform and feed (a Discord channel or DM, a Misskey chat,
-- Misskey's mentions and replies), the newest message the daemon saw there and when the bot was
-- last addressed there, so that after a start or a fresh connection the daemon fetches what
-- arrived while it was away (`conversation::catch_up`). Rows not addressed within the inbox's
-- retention are deleted with the inbox's records.
CREATE TABLE catch_up_cursors (
    platform        TEXT    NOT NULL,
    feed            TEXT    NOT NULL,
    last_id         TEXT    NOT NULL,
    last_at_ms      INTEGER NOT NULL,
    addressed_at_ms INTEGER NOT NULL,
    PRIMARY KEY (platform, feed)
) WITHOUT ROWID;
CREATE INDEX catch_up_cursors_addressed ON catch_up_cursors (addressed_at_ms);
