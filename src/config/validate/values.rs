//! Checks of single values the sections share or that need more than a comparison: listener
//! hosts, log filters, provider URLs, environment variable names, whitelist entries, ids.

use std::net::IpAddr;

/// The levels `logging.level` accepts on its own or after `target=`.
pub(super) const LOG_LEVELS: &[&str] = &["off", "error", "warn", "info", "debug", "trace"];

/// `logging.level`: a tracing `EnvFilter` whose every directive is a level or ends in `=level`.
/// `EnvFilter` alone would take a bare word such as `loud` as "everything from target `loud`",
/// which silences the daemon's own logs.
pub(super) fn check_log_filter(filter: &str) -> Result<(), String> {
    let is_level = |s: &str| LOG_LEVELS.iter().any(|l| l.eq_ignore_ascii_case(s.trim()));
    let directives: Vec<&str> = filter
        .split(',')
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .collect();
    if directives.is_empty() {
        return Err("is empty".into());
    }
    for d in &directives {
        let level_ok = match d.rsplit_once('=') {
            Some((_, level)) => is_level(level),
            None => is_level(d),
        };
        if !level_ok {
            return Err(format!(
                "is not a log level or filter (`{d}` names no level)"
            ));
        }
    }
    tracing_subscriber::EnvFilter::try_new(filter)
        .map(drop)
        .map_err(|e| format!("is not a log level or filter ({e})"))
}

/// Parses a listener host: an IP address or `localhost`.
pub fn parse_host(host: &str) -> Option<IpAddr> {
    if host.eq_ignore_ascii_case("localhost") {
        return Some(IpAddr::from([127, 0, 0, 1]));
    }
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .parse()
        .ok()
}

pub(super) fn is_snowflake(id: &str) -> bool {
    crate::names::parse_snowflake(id).is_some()
}

/// Skill names (see [`crate::names::is_skill_name`]).
pub fn is_skill_name(name: &str) -> bool {
    crate::names::is_skill_name(name)
}

/// A provider's `baseUrl`: `http(s)://host[:port][/path]`, no credentials, query or fragment;
/// plain `http` only to a loopback host when a key would be sent.
pub(super) fn check_base_url(url: &str, sends_key: bool) -> Result<(), String> {
    let parsed = reqwest::Url::parse(url).map_err(|e| format!("{url:?} is not a URL ({e})"))?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
        return Err(format!("{url:?} must be an http(s) URL with a host"));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err("must not carry credentials; name the key variable in apiKeyEnv".into());
    }
    if parsed.query().is_some() || parsed.fragment().is_some() {
        return Err(format!("{url:?} must not have a query or fragment"));
    }
    let loopback = parsed
        .host_str()
        .and_then(parse_host)
        .is_some_and(|ip| ip.is_loopback());
    if sends_key && parsed.scheme() == "http" && !loopback {
        return Err(format!(
            "{url:?} would send the key unencrypted; use https (plain http only to loopback or with apiKeyEnv: \"\")"
        ));
    }
    Ok(())
}

pub(super) fn is_env_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

pub(super) fn check_whitelist_entry(entry: &str) -> Result<(), String> {
    let parts: Vec<&str> = entry.split('/').collect();
    let [platform, kind, id] = parts.as_slice() else {
        return Err(format!(
            "{entry:?} must look like `platform/account/ID` or `platform/channel/ID`"
        ));
    };
    // Every configured platform (`PLATFORMS`), and the local console of `air-friends chat`.
    let known: Vec<&str> = crate::config::PLATFORMS
        .iter()
        .map(|p| p.key)
        .chain(["console"])
        .collect();
    if !known.contains(platform) {
        let (last, rest) = known.split_last().unwrap_or((&"console", &[]));
        return Err(format!(
            "{entry:?}: platform must be {} or {last}",
            rest.join(", ")
        ));
    }
    if !matches!(*kind, "account" | "channel") {
        return Err(format!(
            "{entry:?}: the middle part must be account or channel"
        ));
    }
    if id.is_empty() {
        return Err(format!("{entry:?}: the ID is missing"));
    }
    Ok(())
}
