//! fetch-context: recent messages of the conversation, a keyword search of it, or the
//! session user's profile. Messages are returned oldest first.

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};

use super::common::{Deps, invalid, params, platform_error};
use crate::platform::ChatMessage;
use crate::skill_api::{CallContext, SkillError, SkillHandler};

/// The `fetch-context` skill: more of the conversation, or who the user is.
pub(crate) struct FetchContext(pub Deps);

#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum Kind {
    RecentMessages,
    SearchMessages,
    UserInfo,
}

#[derive(Deserialize)]
struct ContextParams {
    #[serde(rename = "type")]
    kind: Kind,
    #[serde(default)]
    query: Option<String>,
    limit: usize,
}

#[async_trait]
impl SkillHandler for FetchContext {
    fn name(&self) -> &str {
        "fetch-context"
    }

    fn read_only(&self) -> bool {
        true
    }

    async fn call(&self, ctx: &CallContext, raw: Value) -> Result<Value, SkillError> {
        let p: ContextParams = params(raw)?;
        let session = ctx.session();
        let adapter = self.0.adapter(session)?;
        let channel = &session.origin.channel_id;
        let mut messages = match p.kind {
            Kind::UserInfo => {
                let user = adapter
                    .user_info(channel, &session.origin.user_id)
                    .await
                    .map_err(platform_error)?;
                return Ok(json!({
                    "userId": user.user_id,
                    "username": user.username,
                    "displayName": user.display_name,
                    "platform": session.origin.platform,
                    "isDm": session.origin.is_dm,
                }));
            }
            Kind::RecentMessages => adapter
                .recent_messages(channel, p.limit)
                .await
                .map_err(platform_error)?,
            Kind::SearchMessages => {
                let query = p.query.as_deref().map(str::trim).unwrap_or_default();
                if query.is_empty() {
                    return Err(invalid(
                        "/query",
                        "--type search_messages needs keywords: write them to a file and pass \
                         --query-file <file>",
                    ));
                }
                adapter
                    .search_messages(channel, query, p.limit)
                    .await
                    .map_err(platform_error)?
            }
        };
        oldest_first(&mut messages, p.limit);
        Ok(json!({"messages": messages}))
    }
}

/// Sorts by time (stable, so same-second messages keep the platform's order) and keeps the
/// newest `limit`.
fn oldest_first(messages: &mut Vec<ChatMessage>, limit: usize) {
    messages.sort_by_key(|m| m.timestamp);
    if messages.len() > limit {
        messages.drain(..messages.len() - limit);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::DateTime;

    fn message(id: &str, secs: i64) -> ChatMessage {
        ChatMessage {
            message_id: id.into(),
            user_id: "u".into(),
            username: "u".into(),
            content: String::new(),
            timestamp: DateTime::from_timestamp(secs, 0).unwrap_or_default(),
            is_bot: false,
            attachments: Vec::new(),
        }
    }

    #[test]
    fn messages_are_sorted_oldest_first_and_capped_to_the_newest() {
        let mut list = vec![message("c", 3), message("a", 1), message("b", 2)];
        oldest_first(&mut list, 2);
        let ids: Vec<&str> = list.iter().map(|m| m.message_id.as_str()).collect();
        assert_eq!(ids, ["b", "c"]);
    }
}
