//! MCP metrics: requests per server by outcome, and tool calls per server and allowed tool by
//! outcome. Labels are bounded: servers and tools come from the configuration (a refused
//! tool's name, chosen by the agent, is counted as `not_allowed`, never as a label).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

use crate::observability::Metrics;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    server: String,
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    server: String,
    tool: String,
    outcome: String,
}

/// Handles to the MCP metric families.
#[derive(Clone, Debug, Default)]
pub struct McpMetrics {
    requests: Family<RequestLabels, Counter>,
    calls: Family<CallLabels, Counter>,
}

impl McpMetrics {
    /// Registers the families in `metrics`.
    pub fn new(metrics: &Metrics) -> Self {
        let m = Self::default();
        metrics.register(|r| {
            r.register(
                "mcp_requests",
                "Requests of agents to MCP servers through the broker, by server and outcome",
                m.requests.clone(),
            );
            r.register(
                "mcp_tool_calls",
                "MCP tool calls through the broker, by server, tool and outcome",
                m.calls.clone(),
            );
        });
        m
    }

    /// One request to `server` and how the broker ended it.
    pub(super) fn request(&self, server: &str, outcome: &str) {
        self.requests
            .get_or_create(&RequestLabels {
                server: server.to_owned(),
                outcome: outcome.to_owned(),
            })
            .inc();
    }

    /// One tool call (`tool` an allowed name, or `not_allowed`) and its outcome.
    pub(super) fn call(&self, server: &str, tool: &str, outcome: &str) {
        self.calls
            .get_or_create(&CallLabels {
                server: server.to_owned(),
                tool: tool.to_owned(),
                outcome: outcome.to_owned(),
            })
            .inc();
    }
}
