-- Schema v16: the operator's decisions about a user, made in the console: blocked (nothing
-- they send is answered) and their own daily token budget (in place of
-- `agent.budget.tokensPerUserPerDay`). A row is kept through the user's erasure: erasing
-- their data must not lift a block (`store::erasure::Holds::Operator`).
CREATE TABLE user_controls (
    platform       TEXT    NOT NULL,
    user_id        TEXT    NOT NULL,
    blocked        INTEGER NOT NULL DEFAULT 0 CHECK (blocked IN (0, 1)),
    tokens_per_day INTEGER CHECK (tokens_per_day IS NULL OR tokens_per_day >= 0),
    changed_at_ms  INTEGER NOT NULL,
    changed_by     TEXT    NOT NULL,
    PRIMARY KEY (platform, user_id)
) WITHOUT ROWID;
