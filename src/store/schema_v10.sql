-- Schema v10: conversation continuity. Per conversation (platform, private or public, the
-- conversation's id, the user): the folder under {repoPath}/agent-state/ that holds its
-- agent's own session data, the agent's session id there, the fingerprint of what that agent
-- started with (prompts, skills, place), what its session has been shown (message ids, JSON),
-- and how far it has gone (turns, estimated prompt tokens). A conversation whose agent was
-- stopped resumes from it (`conversation::continuity`).
CREATE TABLE continuity (
    conversation   TEXT    NOT NULL PRIMARY KEY,
    platform       TEXT    NOT NULL,
    user_id        TEXT    NOT NULL,
    folder         TEXT    NOT NULL UNIQUE,
    acp_session    TEXT,
    fingerprint    INTEGER NOT NULL,
    shown          TEXT    NOT NULL DEFAULT '[]',
    turns          INTEGER NOT NULL DEFAULT 0 CHECK (turns >= 0),
    context_tokens INTEGER NOT NULL DEFAULT 0 CHECK (context_tokens >= 0),
    updated_ms     INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX continuity_user ON continuity (platform, user_id);
CREATE INDEX continuity_updated ON continuity (updated_ms);
