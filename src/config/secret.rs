//! A string that must never be printed: platform tokens, API keys.
//!
//! `Debug`, `Display` and `Serialize` all print `***` (or an empty marker when unset), so a
//! secret cannot leak through logs, `check-config` output or error messages by accident. The
//! value is reachable only through [`Secret::expose`], which makes every use greppable.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// What a set secret prints as.
pub const MASK: &str = "***";

/// A secret string with a redacting `Debug`, `Display` and `Serialize`.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a value.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The real value. Call only where the secret is actually used (an HTTP header, a login).
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// True when no value is configured.
    pub fn is_empty(&self) -> bool {
        self.0.trim().is_empty()
    }

    fn masked(&self) -> &'static str {
        if self.is_empty() { "" } else { MASK }
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secret({:?})", self.masked())
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.masked())
    }
}

impl Serialize for Secret {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.masked())
    }
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(Secret)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_display_and_serialize_mask_the_value() {
        let s = Secret::new("hunter2-token");
        assert_eq!(format!("{s:?}"), "Secret(\"***\")");
        assert_eq!(s.to_string(), "***");
        assert_eq!(serde_json::to_string(&s).unwrap(), "\"***\"");
        assert_eq!(s.expose(), "hunter2-token");
    }

    #[test]
    fn empty_secret_prints_empty() {
        let s = Secret::default();
        assert!(s.is_empty());
        assert_eq!(s.to_string(), "");
    }
}
