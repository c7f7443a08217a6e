//! A [`PlatformAdapter`] decorator that counts failed platform calls
//! (`air_friends_platform_errors_total{platform, operation, kind}`), so operators see Discord or
//! Misskey trouble whichever component made the call (handlers, router, scheduler); and
//! `air_friends_platform_connected{platform}` (1 or 0), read at scrape time from the same
//! [`ConnectionState`] `/readyz` reports.
//!
//! Wrapping an adapter creates its every `(operation, kind)` error counter at 0, so the first
//! failure shows in `rate()`.

use crate::sync::Recover;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;

use super::{
    ChannelId, ChatMessage, ConnectionState, CustomEmoji, FileDelivery, MessageId, Missed,
    OutgoingFile, PlatformAdapter, PlatformError, PlatformKind, ReactionEmoji, SentMessage,
    TextLimits, UserId, UserInfo,
};
use crate::observability::Metrics;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabels {
    platform: &'static str,
    operation: &'static str,
    kind: &'static str,
}

/// Every `operation` label: one per [`PlatformAdapter`] call.
const OPERATIONS: [&str; 17] = [
    "send_message",
    "edit_message",
    "delete_message",
    "get_message",
    "recent_messages",
    "search_messages",
    "user_info",
    "add_reaction",
    "remove_reaction",
    "send_files",
    "send_dm",
    "send_dm_files",
    "custom_emojis",
    "start_typing",
    "missed_messages",
    "thread_starter",
    "open_thread",
];

/// Every `kind` label ([`PlatformError::kind`]).
const ERROR_KINDS: [&str; 8] = [
    "rate_limited",
    "not_found",
    "forbidden",
    "invalid_id",
    "invalid_input",
    "transport",
    "api",
    "unsupported",
];

/// The platforms whose connection is reported, in registration order.
type Connections = Arc<Mutex<Vec<(&'static str, ConnectionState)>>>;

/// The error counter shared by all metered adapters, and the connection states.
#[derive(Clone, Debug, Default)]
pub struct PlatformMetrics {
    errors: Family<ErrorLabels, Counter>,
    connections: Connections,
}

impl PlatformMetrics {
    /// Registers the families.
    pub fn new(metrics: &Metrics) -> Self {
        let m = Self::default();
        metrics.register(|r| {
            r.register(
                "platform_errors",
                "Failed platform calls by platform, operation and error kind",
                m.errors.clone(),
            );
            r.register_collector(Box::new(ConnectedCollector(m.connections.clone())));
        });
        m
    }

    /// Reports `state` as `platform_connected{platform}` from now on.
    pub fn watch_connection(&self, platform: PlatformKind, state: ConnectionState) {
        self.connections.locked().push((platform.as_str(), state));
    }

    /// Wraps `inner` so its failures are counted (each counter starting at 0).
    pub fn wrap(&self, inner: Arc<dyn PlatformAdapter>) -> Arc<dyn PlatformAdapter> {
        let platform = inner.kind().as_str();
        for operation in OPERATIONS {
            for kind in ERROR_KINDS {
                drop(self.errors.get_or_create(&ErrorLabels {
                    platform,
                    operation,
                    kind,
                }));
            }
        }
        Arc::new(Metered {
            inner,
            metrics: self.clone(),
        })
    }

    /// How many failures were counted (tests).
    pub fn count(
        &self,
        platform: &'static str,
        operation: &'static str,
        kind: &'static str,
    ) -> u64 {
        self.errors
            .get_or_create(&ErrorLabels {
                platform,
                operation,
                kind,
            })
            .get()
    }
}

/// Encodes `platform_connected` from the live connection states on every scrape.
#[derive(Debug)]
struct ConnectedCollector(Connections);

impl Collector for ConnectedCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let connections = self.0.locked().clone();
        if connections.is_empty() {
            return Ok(());
        }
        let mut family = encoder.encode_descriptor(
            "platform_connected",
            "Whether the platform connection is up (1) or down (0), as /readyz reports it",
            None,
            MetricType::Gauge,
        )?;
        for (platform, state) in connections {
            let gauge = ConstGauge::new(i64::from(state.is_connected()));
            gauge.encode(family.encode_family(&[("platform", platform)])?)?;
        }
        Ok(())
    }
}

struct Metered {
    inner: Arc<dyn PlatformAdapter>,
    metrics: PlatformMetrics,
}

impl Metered {
    fn note<T>(
        &self,
        operation: &'static str,
        result: Result<T, PlatformError>,
    ) -> Result<T, PlatformError> {
        if let Err(e) = &result {
            self.metrics
                .errors
                .get_or_create(&ErrorLabels {
                    platform: self.inner.kind().as_str(),
                    operation,
                    kind: e.kind(),
                })
                .inc();
        }
        result
    }
}

#[async_trait]
impl PlatformAdapter for Metered {
    fn kind(&self) -> PlatformKind {
        self.inner.kind()
    }

    fn bot_user_id(&self) -> Option<UserId> {
        self.inner.bot_user_id()
    }

    fn text_limit(&self, channel_id: &ChannelId) -> TextLimits {
        self.inner.text_limit(channel_id)
    }

    fn dm_text_limit(&self) -> TextLimits {
        self.inner.dm_text_limit()
    }

    async fn send_message(
        &self,
        channel_id: &ChannelId,
        text: &str,
        reply_to: Option<&MessageId>,
    ) -> Result<SentMessage, PlatformError> {
        self.note(
            "send_message",
            self.inner.send_message(channel_id, text, reply_to).await,
        )
    }

    async fn edit_message(
        &self,
        channel_id: &ChannelId,
        message_id: &MessageId,
        text: &str,
        reply_to: Option<&MessageId>,
    ) -> Result<SentMessage, PlatformError> {
        self.note(
            "edit_message",
            self.inner
                .edit_message(channel_id, message_id, text, reply_to)
                .await,
        )
    }

    async fn delete_message(
        &self,
        channel_id: &ChannelId,
        message_id: &MessageId,
    ) -> Result<(), PlatformError> {
        self.note(
            "delete_message",
            self.inner.delete_message(channel_id, message_id).await,
        )
    }

    async fn get_message(
        &self,
        channel_id: &ChannelId,
        message_id: &MessageId,
    ) -> Result<ChatMessage, PlatformError> {
        self.note(
            "get_message",
            self.inner.get_message(channel_id, message_id).await,
        )
    }

    async fn recent_messages(
        &self,
        channel_id: &ChannelId,
        limit: usize,
    ) -> Result<Vec<ChatMessage>, PlatformError> {
        self.note(
            "recent_messages",
            self.inner.recent_messages(channel_id, limit).await,
        )
    }

    fn catch_up_feed(&self, channel_id: &ChannelId) -> ChannelId {
        self.inner.catch_up_feed(channel_id)
    }

    async fn missed_messages(
        &self,
        feed: &ChannelId,
        after: &MessageId,
        max: usize,
    ) -> Result<Missed, PlatformError> {
        self.note(
            "missed_messages",
            self.inner.missed_messages(feed, after, max).await,
        )
    }

    async fn search_messages(
        &self,
        channel_id: &ChannelId,
        query: &str,
        limit: usize,
    ) -> Result<Vec<ChatMessage>, PlatformError> {
        self.note(
            "search_messages",
            self.inner.search_messages(channel_id, query, limit).await,
        )
    }

    async fn user_info(
        &self,
        channel_id: &ChannelId,
        user_id: &UserId,
    ) -> Result<UserInfo, PlatformError> {
        self.note("user_info", self.inner.user_info(channel_id, user_id).await)
    }

    async fn add_reaction(
        &self,
        channel_id: &ChannelId,
        message_id: &MessageId,
        emoji: &ReactionEmoji,
    ) -> Result<(), PlatformError> {
        self.note(
            "add_reaction",
            self.inner.add_reaction(channel_id, message_id, emoji).await,
        )
    }

    async fn remove_reaction(
        &self,
        channel_id: &ChannelId,
        message_id: &MessageId,
        emoji: &ReactionEmoji,
    ) -> Result<(), PlatformError> {
        self.note(
            "remove_reaction",
            self.inner
                .remove_reaction(channel_id, message_id, emoji)
                .await,
        )
    }

    async fn send_files(
        &self,
        channel_id: &ChannelId,
        files: Vec<OutgoingFile>,
        caption: Option<&str>,
        reply_to: Option<&MessageId>,
    ) -> Result<FileDelivery, PlatformError> {
        self.note(
            "send_files",
            self.inner
                .send_files(channel_id, files, caption, reply_to)
                .await,
        )
    }

    async fn send_dm(&self, user_id: &UserId, text: &str) -> Result<SentMessage, PlatformError> {
        self.note("send_dm", self.inner.send_dm(user_id, text).await)
    }

    async fn send_dm_files(
        &self,
        user_id: &UserId,
        files: Vec<OutgoingFile>,
        caption: Option<&str>,
    ) -> Result<FileDelivery, PlatformError> {
        self.note(
            "send_dm_files",
            self.inner.send_dm_files(user_id, files, caption).await,
        )
    }

    async fn custom_emojis(
        &self,
        channel_id: &ChannelId,
    ) -> Result<Vec<CustomEmoji>, PlatformError> {
        self.note("custom_emojis", self.inner.custom_emojis(channel_id).await)
    }

    async fn start_typing(&self, channel_id: &ChannelId) -> Result<(), PlatformError> {
        self.note("start_typing", self.inner.start_typing(channel_id).await)
    }

    async fn thread_starter(
        &self,
        channel_id: &ChannelId,
    ) -> Result<Option<ChatMessage>, PlatformError> {
        self.note(
            "thread_starter",
            self.inner.thread_starter(channel_id).await,
        )
    }

    async fn open_thread(
        &self,
        channel_id: &ChannelId,
        message_id: &MessageId,
        name: &str,
    ) -> Result<Option<ChannelId>, PlatformError> {
        self.note(
            "open_thread",
            self.inner.open_thread(channel_id, message_id, name).await,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::fake::{FakePlatform, Op};

    #[tokio::test]
    async fn failures_are_counted_and_results_pass_through() {
        let fake = Arc::new(FakePlatform::discord());
        let metrics = PlatformMetrics::default();
        let metered = metrics.wrap(fake.clone());
        let msg = fake.push_incoming("c1", "u1", "hi");
        fake.fail_next(Op::SendMessage, PlatformError::Transport("reset".into()));
        assert!(
            metered
                .send_message(&"c1".into(), "x", Some(&msg.message_id))
                .await
                .is_err()
        );
        assert!(
            metered
                .send_message(&"c1".into(), "y", Some(&msg.message_id))
                .await
                .is_ok()
        );
        assert_eq!(metrics.count("discord", "send_message", "transport"), 1);
        assert_eq!(fake.sent_texts(), vec!["y"]);
        assert_eq!(metered.kind(), PlatformKind::Discord);
    }

    fn scrape(metrics: &Metrics) -> String {
        metrics
            .encode(crate::observability::Format::PrometheusText)
            .unwrap()
    }

    #[test]
    fn known_label_sets_are_exported_at_zero() {
        let metrics = Metrics::new();
        let platform = PlatformMetrics::new(&metrics);
        platform.wrap(Arc::new(FakePlatform::discord()));
        let text = scrape(&metrics);
        for operation in OPERATIONS {
            for kind in ERROR_KINDS {
                let line = format!(
                    r#"air_friends_platform_errors_total{{platform="discord",operation="{operation}",kind="{kind}"}} 0"#
                );
                assert!(text.contains(&line), "{line} missing in\n{text}");
            }
        }
        assert!(!text.contains(r#"platform="misskey""#), "{text}");
    }

    #[test]
    fn connected_gauge_follows_the_connection_state() {
        let metrics = Metrics::new();
        let platform = PlatformMetrics::new(&metrics);
        assert!(!scrape(&metrics).contains("platform_connected"));
        let (discord, misskey) = (ConnectionState::new(), ConnectionState::new());
        platform.watch_connection(PlatformKind::Discord, discord.clone());
        platform.watch_connection(PlatformKind::Misskey, misskey.clone());
        let expect = |d: u8, m: u8| {
            let text = scrape(&metrics);
            assert!(
                text.contains("# TYPE air_friends_platform_connected gauge\n"),
                "{text}"
            );
            for line in [
                format!(r#"air_friends_platform_connected{{platform="discord"}} {d}"#),
                format!(r#"air_friends_platform_connected{{platform="misskey"}} {m}"#),
            ] {
                assert!(text.contains(&line), "{line} missing in\n{text}");
            }
        };
        expect(0, 0);
        discord.set(true);
        expect(1, 0);
        discord.set(false);
        misskey.set(true);
        expect(0, 1);
    }
}
