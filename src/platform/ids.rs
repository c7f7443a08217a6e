//! The id types of the platform seam: [`ChannelId`], [`MessageId`] and [`UserId`], each the
//! platform's own id text (a Discord snowflake, a Misskey `note:{id}` / `chat:{id}` channel, a
//! Misskey note or user id).
//!
//! They exist so that an id's kind is in its type: a message id cannot be passed where a channel
//! id is expected. They hold no rule about the text: only the adapter interprets an id, and a
//! malformed one is still its [`PlatformError::InvalidId`](super::PlatformError::InvalidId). The
//! serde form is the bare string (`#[serde(transparent)]`), so the Skill API's JSON is unchanged.

use std::borrow::Borrow;
use std::fmt;

use serde::{Deserialize, Serialize};

/// Defines one id newtype over `String` with the conversions and traits every id shares.
macro_rules! platform_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            /// The id from the platform's text, as is.
            pub fn new(id: impl Into<String>) -> Self {
                Self(id.into())
            }

            /// The id as text (what the platform's API takes).
            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// The id's text, owned.
            pub fn into_string(self) -> String {
                self.0
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({:?})", stringify!($name), self.0)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl From<String> for $name {
            fn from(id: String) -> Self {
                Self(id)
            }
        }

        impl From<&str> for $name {
            fn from(id: &str) -> Self {
                Self(id.to_owned())
            }
        }

        impl From<&String> for $name {
            fn from(id: &String) -> Self {
                Self(id.clone())
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }

        impl PartialEq<String> for $name {
            fn eq(&self, other: &String) -> bool {
                &self.0 == other
            }
        }
    };
}

platform_id!(
    /// A channel to read from or answer in: a Discord channel or DM channel snowflake, a Misskey
    /// `note:{noteId}` (a note thread) or `chat:{userId}` (a chat), the console's one channel.
    ChannelId
);

platform_id!(
    /// One message: a Discord message snowflake, a Misskey note or chat-message id.
    MessageId
);

platform_id!(
    /// A user (or the bot itself): a Discord user snowflake, a Misskey user id.
    UserId
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_is_its_text_in_display_serde_and_lookups() {
        let id = ChannelId::new("note:9abc");
        assert_eq!(id.to_string(), "note:9abc");
        assert_eq!(format!("{id:?}"), r#"ChannelId("note:9abc")"#);
        assert_eq!(serde_json::to_string(&id).expect("json"), r#""note:9abc""#);
        let back: ChannelId = serde_json::from_str(r#""note:9abc""#).expect("json");
        assert_eq!(back, id);
        let set: std::collections::HashSet<MessageId> = [MessageId::from("m1")].into();
        assert!(set.contains("m1"));
        assert_eq!(UserId::from("u1".to_owned()).into_string(), "u1");
    }
}
