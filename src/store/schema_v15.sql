-- Schema v15: MCP tool calls per workspace and UTC day, counted with the tokens and the voice in
-- `llm_usage` (what `mcp.callsPerUserPerDay` limits); every server together.
ALTER TABLE llm_usage ADD COLUMN mcp_calls INTEGER NOT NULL DEFAULT 0 CHECK (mcp_calls >= 0);
