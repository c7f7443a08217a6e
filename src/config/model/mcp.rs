//! `mcp`: MCP servers whose tools the agent may use, brokered by the daemon (`docs/MCP.md`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// `mcp`: the servers.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct McpConfig {
    /// The servers, each under a name of its own.
    pub servers: Vec<McpServerConfig>,
    /// MCP tool calls one user's conversations may make per UTC day, every server together
    /// (null: no limit); counted with the user's tokens in the daily usage.
    pub calls_per_user_per_day: Option<u32>,
}

/// How an MCP server is reached.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum McpKind {
    /// Streamable HTTP: JSON-RPC posted to `url`, answered as JSON or an event stream.
    #[default]
    Http,
    /// The older HTTP+SSE transport: an event stream opened at `url` names the endpoint the
    /// messages are posted to; the answers come on the stream.
    Sse,
    /// A program (`command`) speaking JSON-RPC on its stdin and stdout, started by the daemon
    /// for each session that uses it, in a sandbox of its own with the agent's rules.
    Stdio,
}

/// One MCP server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct McpServerConfig {
    /// Its name: lowercase letters, digits and `-` (the agent sees it, and its endpoint is
    /// `/mcp/<session>/<name>`).
    pub name: String,
    /// What it is for, told to the agent with its tools.
    pub description: String,
    /// How it is reached.
    pub kind: McpKind,
    /// Its endpoint (`https://…`; plain `http` only for a `local` server); `http` and `sse`.
    pub url: String,
    /// `stdio`: the program and its arguments (the program on the daemon's `PATH`, or a path;
    /// it must be visible in the sandbox: under `/usr` or in `agent.sandbox.readOnlyPaths`).
    pub command: Vec<String>,
    /// `stdio`: environment variables for this server's process only, e.g.
    /// `API_KEY: "${FEED_KEY}"`: secrets, redacted from logs like the headers.
    pub env: BTreeMap<String, String>,
    /// Headers sent with every request, e.g. `Authorization: "Bearer ${WIKI_TOKEN}"`: the values
    /// stay in the daemon (the agent never sees them).
    pub headers: BTreeMap<String, String>,
    /// The tools the agent may see and call, by name; none until listed.
    pub tools: Vec<String>,
    /// The `places` rules (by name, `default` for where no rule fits) where the agent gets this
    /// server; empty: everywhere.
    pub places: Vec<String>,
    /// The server is on this machine or the local network: its address is not screened (a
    /// server whose name resolves to a loopback, private or link-local address is refused
    /// unless this is set).
    pub local: bool,
    /// Longest wait for the server's answer to begin, and between two parts of a stream.
    pub timeout_ms: u64,
    /// Largest request the agent may send, in KB.
    pub max_request_kb: u32,
    /// Largest answer passed back, in KB (a stream is cut past it).
    pub max_response_kb: u32,
}

impl Default for McpServerConfig {
    fn default() -> Self {
        Self {
            name: String::new(),
            description: String::new(),
            kind: McpKind::Http,
            url: String::new(),
            command: Vec::new(),
            env: BTreeMap::new(),
            headers: BTreeMap::new(),
            tools: Vec::new(),
            places: Vec::new(),
            local: false,
            timeout_ms: 30_000,
            max_request_kb: 256,
            max_response_kb: 1_024,
        }
    }
}

impl McpServerConfig {
    /// Whether a session in place `place` (a rule's name, or `default`) gets this server.
    pub fn serves_place(&self, place: &str) -> bool {
        self.places.is_empty() || self.places.iter().any(|p| p == place)
    }
}
