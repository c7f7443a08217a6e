//! The MCP broker: the agent reaches the MCP servers of `mcp.servers` only through the daemon,
//! at `/mcp/<session>/<server>` on its session's socket (the relay's `http://127.0.0.1:3001`),
//! with its caller token. The daemon forwards to the configured URL with the configured
//! headers (the agent never sees them), and holds the rules ([`filter`]): only the allowed
//! tools are listed and may be called, nothing else of the server's is offered; an answer is
//! streamed back event by event ([`events`]), capped, never followed to another host (no
//! redirects), and a server's name must resolve to public addresses unless it is marked
//! `local`. Every tool call is an audit record and a metric ([`metrics`]).
//!
//! The route's checks, in order (the first failure answers): the server exists (404); the
//! session is authenticated as for the Skill API and the gateway, its turn open
//! (`session::authenticate`: 401/403/409); the server serves the session's place (403); the
//! body is within `maxRequestKb` (413) and is JSON-RPC (400); the broker's rules
//! ([`filter::inspect`]). Only then is anything sent.
//!
//! Documented for operators in `docs/MCP.md`.

pub mod events;
pub mod filter;
pub mod link;
pub mod metrics;
mod relay;
mod route;
mod sse;
pub mod stdio;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::Router;
use axum::http::{HeaderMap, HeaderName, HeaderValue};
use axum::routing::any;

use crate::attachments::{Lookup, PublicResolver};
use crate::config::{McpConfig, McpKind, McpServerConfig};
use crate::session::SessionRegistry;
use crate::store::Store;

use link::Links;
pub use metrics::McpMetrics;
pub use stdio::StdioHost;

/// The route the broker serves.
pub const ROUTE: &str = "/mcp/{session_id}/{server}";

/// Why the broker could not be built (configuration that skipped validation).
#[derive(Debug, thiserror::Error)]
pub enum McpBuildError {
    /// A server's URL does not parse.
    #[error("mcp.servers {name}: {url:?} is not a URL")]
    Url {
        /// The server.
        name: String,
        /// The configured value.
        url: String,
    },
    /// A header is not valid HTTP.
    #[error("mcp.servers {name}: the header {header:?} is not valid HTTP")]
    Header {
        /// The server.
        name: String,
        /// The header's name.
        header: String,
    },
    /// The HTTP client could not be built.
    #[error("cannot build the MCP client: {0}")]
    Client(#[from] reqwest::Error),
}

/// One configured server, ready to forward to.
#[derive(Debug)]
struct Server {
    name: String,
    url: reqwest::Url,
    /// The configured headers, marked sensitive.
    headers: HeaderMap,
    allowed: BTreeSet<String>,
    config: McpServerConfig,
    client: reqwest::Client,
    /// For an `sse` server's event stream: the same, without the read timeout (a stream may
    /// be quiet for long).
    stream_client: reqwest::Client,
}

/// The broker; cheap to clone.
#[derive(Clone, Debug)]
pub struct Broker {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    servers: BTreeMap<String, Server>,
    sessions: SessionRegistry,
    metrics: McpMetrics,
    /// Where each user's calls of the day are counted (`None`: not counted, no limit).
    store: Option<Store>,
    /// `mcp.callsPerUserPerDay`.
    calls_per_day: Option<u32>,
    /// How `stdio` servers are started (set once by the daemon: [`Broker::with_stdio`]).
    stdio: OnceLock<StdioHost>,
    /// The connections kept to `stdio` and `sse` servers.
    links: Links,
    /// Whether the task closing ended sessions' connections runs.
    reaping: AtomicBool,
}

impl Broker {
    /// The servers of `config`, for the sessions of `sessions`. Names of servers not marked
    /// `local` resolve through `lookup` to public addresses only.
    pub fn new(
        config: &McpConfig,
        sessions: SessionRegistry,
        metrics: McpMetrics,
        lookup: Arc<dyn Lookup>,
    ) -> Result<Self, McpBuildError> {
        Self::counted(config, sessions, metrics, lookup, None)
    }

    /// [`new`](Self::new), counting each user's tool calls of the day in `store` (and holding
    /// them to `mcp.callsPerUserPerDay`).
    pub fn counted(
        config: &McpConfig,
        sessions: SessionRegistry,
        metrics: McpMetrics,
        lookup: Arc<dyn Lookup>,
        store: Option<Store>,
    ) -> Result<Self, McpBuildError> {
        let mut servers = BTreeMap::new();
        for s in &config.servers {
            servers.insert(s.name.clone(), Server::new(s, lookup.clone())?);
        }
        Ok(Broker {
            inner: Arc::new(Inner {
                servers,
                sessions,
                metrics,
                store,
                calls_per_day: config.calls_per_user_per_day,
                stdio: OnceLock::new(),
                links: Links::default(),
                reaping: AtomicBool::new(false),
            }),
        })
    }

    /// Starts `stdio` servers with `host` (the agents' sandbox). Without it their requests are
    /// answered 502: such a server is never started unconfined by mistake.
    pub fn with_stdio(self, host: StdioHost) -> Self {
        let _ = self.inner.stdio.set(host);
        self
    }

    /// The connections kept to `stdio` and `sse` servers.
    pub fn links(&self) -> &Links {
        &self.inner.links
    }

    /// Closes the connections of sessions that ended and those idle for [`link::IDLE`], now.
    pub fn reap(&self) -> usize {
        let sessions = &self.inner.sessions;
        self.inner
            .links
            .reap(|id| sessions.lookup(id).is_none(), link::IDLE)
    }

    /// Runs [`reap`](Self::reap) every [`link::REAP_EVERY`] from now on (once per broker; the
    /// task ends with the broker).
    fn reap_in_background(&self) {
        if self.inner.reaping.swap(true, Ordering::AcqRel) {
            return;
        }
        let weak = Arc::downgrade(&self.inner);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(link::REAP_EVERY).await;
                let Some(inner) = weak.upgrade() else { break };
                let closed = Broker { inner }.reap();
                if closed > 0 {
                    tracing::debug!(closed, "mcp connections closed");
                }
            }
        });
    }

    /// The broker's route with its state, to merge into the Skill API's router.
    pub fn router(&self) -> Router {
        Router::new()
            .route(ROUTE, any(route::broker))
            .with_state(self.clone())
    }

    /// The configured servers a session in place `place` gets: name, description and allowed
    /// tools.
    pub fn servers_for<'a>(&'a self, place: &'a str) -> impl Iterator<Item = &'a McpServerConfig> {
        self.inner
            .servers
            .values()
            .map(|s| &s.config)
            .filter(move |c| c.serves_place(place))
    }
}

impl Server {
    fn new(config: &McpServerConfig, lookup: Arc<dyn Lookup>) -> Result<Self, McpBuildError> {
        let name = config.name.clone();
        // A stdio server is never connected to: its "URL" only names it.
        let url = match config.kind {
            McpKind::Stdio => reqwest::Url::parse(&format!("stdio:{name}")),
            McpKind::Http | McpKind::Sse => reqwest::Url::parse(&config.url),
        }
        .map_err(|_| McpBuildError::Url {
            name: name.clone(),
            url: config.url.clone(),
        })?;
        let mut headers = HeaderMap::new();
        for (key, value) in &config.headers {
            let bad = || McpBuildError::Header {
                name: name.clone(),
                header: key.clone(),
            };
            let key = HeaderName::from_bytes(key.as_bytes()).map_err(|_| bad())?;
            let mut value = HeaderValue::from_str(value).map_err(|_| bad())?;
            value.set_sensitive(true);
            headers.insert(key, value);
        }
        let timeout = Duration::from_millis(config.timeout_ms);
        // A local server's name may resolve anywhere; every other name only to public
        // addresses.
        let trusted = config
            .local
            .then(|| url.host_str().map(str::to_owned))
            .flatten();
        let resolver = Arc::new(PublicResolver::trusting(trusted, lookup));
        let builder = || {
            reqwest::Client::builder()
                .connect_timeout(timeout)
                .redirect(reqwest::redirect::Policy::none())
                .no_proxy()
                .dns_resolver(resolver.clone())
                .user_agent(concat!("air-friends/", env!("CARGO_PKG_VERSION")))
        };
        Ok(Server {
            name,
            url,
            headers,
            allowed: config.tools.iter().cloned().collect(),
            config: config.clone(),
            client: builder().read_timeout(timeout).build()?,
            stream_client: builder().build()?,
        })
    }

    /// Whether the URL names an address that is not public while the server is not `local`
    /// (an IP literal never reaches the resolver).
    fn literal_not_public(&self) -> bool {
        if self.config.local {
            return false;
        }
        self.url
            .host_str()
            .and_then(|h| h.trim_matches(['[', ']']).parse::<std::net::IpAddr>().ok())
            .is_some_and(|ip| !crate::egress::is_public(ip))
    }
}
