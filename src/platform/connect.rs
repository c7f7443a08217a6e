//! How a chat platform is built from the configuration and connected: a [`Connector`] per
//! platform (its `build` lives in the platform's folder), listed in
//! [`CONNECTORS`](super::CONNECTORS), the one list the composition root iterates — so a
//! platform is added with its folder and an entry there, never with a block of its own in the
//! daemon. A platform's facts outside this layer (secrets, environment variables, trigger
//! rules, file sources, whether it is enabled) are its `config::PLATFORMS` entry;
//! `every_platform_has_a_connector` holds the two lists together.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::duties::PlaceDuties;
use super::{ConnectionState, EventSink, PlatformAdapter, PlatformKind, UserCommandSpec};
use crate::config::PlatformsConfig;

/// A platform's receive loop: runs until the daemon drains (the token), feeding the sink and
/// keeping the connection flag readiness reads.
pub type ReceiveLoop = Box<
    dyn FnOnce(
            EventSink,
            ConnectionState,
            CancellationToken,
        ) -> Pin<Box<dyn Future<Output = anyhow::Result<()>> + Send>>
        + Send,
>;

/// Builds one platform's adapter and its receive loop.
pub type Build = fn(
    &PlatformsConfig,
    reqwest::Client,
    Vec<UserCommandSpec>,
    Arc<dyn PlaceDuties>,
) -> anyhow::Result<Connected>;

/// A connected platform: its adapter and the receive loop that feeds its events.
pub type Connected = (Arc<dyn PlatformAdapter>, ReceiveLoop);

/// One platform's entry.
#[derive(Debug)]
pub struct Connector {
    /// The platform.
    pub kind: PlatformKind,
    /// Its adapter and receive loop from the configuration (called only when it is enabled),
    /// sharing the daemon's HTTP client; `commands` are the user commands to offer, `duties`
    /// what the `places:` rules ask of the bot (for the platform's own permission checks).
    pub build: Build,
}

#[cfg(test)]
mod tests {
    use crate::config::PLATFORMS;
    use crate::platform::CONNECTORS;

    /// Each platform has its facts (`config::PLATFORMS`) and its connector, and no list has one
    /// the other lacks.
    #[test]
    fn every_platform_has_a_connector() {
        let mut facts: Vec<&str> = PLATFORMS.iter().map(|p| p.key).collect();
        let mut connectors: Vec<&str> = CONNECTORS.iter().map(|c| c.kind.as_str()).collect();
        facts.sort_unstable();
        connectors.sort_unstable();
        assert_eq!(facts, connectors);
    }
}
