//! The allow-list entries (`agent.sandbox.egressAllowHosts`): exact lowercase host names with
//! an optional port, never a wildcard or an IP address.

use std::net::IpAddr;

use super::DEFAULT_PORT;

/// Longest DNS name (RFC 1035, without the trailing dot).
const MAX_NAME_BYTES: usize = 253;

/// Longest DNS label.
const MAX_LABEL_BYTES: usize = 63;

/// Why an allow-list entry is refused (`agent.sandbox.egressAllowHosts.N` names it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllowEntryError {
    /// The port part is not 1–65535.
    #[error("{0:?}: the port must be a number from 1 to 65535")]
    BadPort(String),
    /// An IP address instead of a name: the proxy serves names only.
    #[error("{0:?} is, or reads as, an IP address; list host names only")]
    IpLiteral(String),
    /// A `*` anywhere: only exact names are served.
    #[error("{0:?}: wildcards are not supported; list every host exactly")]
    Wildcard(String),
    /// Not a lowercase DNS name.
    #[error(
        "{0:?} is not a lowercase host name (labels of a-z, 0-9 and inner `-`, separated by `.`)"
    )]
    NotAHostName(String),
}

/// One allow-list entry: an exact host name and port.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AllowedHost {
    /// Lowercase DNS name, no trailing dot.
    pub host: String,
    /// The port ([`DEFAULT_PORT`] when the entry names none).
    pub port: u16,
}

/// Parses one `agent.sandbox.egressAllowHosts` entry: `host` or `host:port`, the host a
/// lowercase DNS name (no wildcard, no IP literal, no numeric last label, which resolvers would
/// read as an address).
pub fn parse_allow_entry(entry: &str) -> Result<AllowedHost, AllowEntryError> {
    if entry.contains('*') {
        return Err(AllowEntryError::Wildcard(entry.to_owned()));
    }
    if entry.parse::<IpAddr>().is_ok() || entry.starts_with('[') {
        return Err(AllowEntryError::IpLiteral(entry.to_owned()));
    }
    let (host, port) = match entry.rsplit_once(':') {
        None => (entry, DEFAULT_PORT),
        Some((host, port)) => {
            let port = port
                .parse::<u16>()
                .ok()
                .filter(|p| *p != 0 && !port.starts_with('+'))
                .ok_or_else(|| AllowEntryError::BadPort(entry.to_owned()))?;
            (host, port)
        }
    };
    if host.parse::<IpAddr>().is_ok() {
        return Err(AllowEntryError::IpLiteral(entry.to_owned()));
    }
    if !is_host_name(host) {
        return Err(AllowEntryError::NotAHostName(entry.to_owned()));
    }
    if host
        .rsplit('.')
        .next()
        .is_some_and(|last| last.bytes().all(|b| b.is_ascii_digit()))
    {
        return Err(AllowEntryError::IpLiteral(entry.to_owned()));
    }
    Ok(AllowedHost {
        host: host.to_owned(),
        port,
    })
}

/// A lowercase DNS name: labels of `a-z0-9-`, 1–63 bytes, no hyphen at either end.
fn is_host_name(host: &str) -> bool {
    !host.is_empty()
        && host.len() <= MAX_NAME_BYTES
        && host.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= MAX_LABEL_BYTES
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allow_entries_are_exact_lowercase_names_with_an_optional_port() {
        let entry = |s: &str| parse_allow_entry(s);
        assert_eq!(
            entry("api.github.com").unwrap(),
            AllowedHost {
                host: "api.github.com".into(),
                port: 443
            }
        );
        assert_eq!(entry("registry.npmjs.org:8443").unwrap().port, 8443);
        assert_eq!(entry("localhost").unwrap().host, "localhost");
        for (bad, want) in [
            ("*.github.com", "wildcards"),
            ("1.2.3.4", "IP address"),
            ("1.2.3.4:443", "IP address"),
            ("::1", "IP address"),
            ("[::1]:443", "IP address"),
            ("2130706433", "IP address"),
            ("host.123", "IP address"),
            ("API.github.com", "lowercase host name"),
            ("-bad.com", "lowercase host name"),
            ("a..b", "lowercase host name"),
            ("example.com.", "lowercase host name"),
            ("http://example.com", "port"),
            ("", "lowercase host name"),
            ("ex ample.com", "lowercase host name"),
            ("example.com:0", "port"),
            ("example.com:65536", "port"),
            ("example.com:+443", "port"),
            ("example.com:", "port"),
        ] {
            let err = entry(bad).expect_err(bad).to_string();
            assert!(err.contains(want), "{bad:?}: {err}");
        }
    }
}
