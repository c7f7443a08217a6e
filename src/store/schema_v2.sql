-- Schema version 2: tokens the model gateway metered, per workspace (`platform/userId`) and UTC
-- day (`YYYY-MM-DD`), for the daily budgets (`agent.budget`). One row per (workspace, day),
-- added to as responses finish; `requests` counts the metered model responses.
CREATE TABLE llm_usage (
    workspace     TEXT    NOT NULL,
    day           TEXT    NOT NULL,
    input_tokens  INTEGER NOT NULL DEFAULT 0 CHECK (input_tokens >= 0),
    output_tokens INTEGER NOT NULL DEFAULT 0 CHECK (output_tokens >= 0),
    requests      INTEGER NOT NULL DEFAULT 0 CHECK (requests >= 0),
    PRIMARY KEY (workspace, day)
) WITHOUT ROWID;
-- The all-users total of a day (`tokensPerDay`).
CREATE INDEX llm_usage_by_day ON llm_usage (day);
