-- Schema v9: model usage per place. The tokens of `llm_usage` again, per workspace, `places:`
-- rule name (`default` where no rule applied) and UTC day, for a place's own daily limit
-- (`places[].tokensPerUserPerDay`). Only ever added to, like `llm_usage`.
CREATE TABLE llm_usage_place (
    workspace     TEXT    NOT NULL,
    place         TEXT    NOT NULL,
    day           TEXT    NOT NULL,
    input_tokens  INTEGER NOT NULL DEFAULT 0 CHECK (input_tokens >= 0),
    output_tokens INTEGER NOT NULL DEFAULT 0 CHECK (output_tokens >= 0),
    requests      INTEGER NOT NULL DEFAULT 0 CHECK (requests >= 0),
    PRIMARY KEY (workspace, place, day)
) WITHOUT ROWID;
