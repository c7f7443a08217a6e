//! The checks of `mcp.servers` that need only the file: names, the endpoint (https, or plain
//! http and private addresses only for a server marked `local`), the headers, the tool
//! allow-list, the places named, the limits. Whether the server answers is the machine's
//! (`check-config` warns; `/readyz` does not depend on it).

use super::Problems;
use super::values::parse_host;
use crate::config::{Config, McpKind, McpServerConfig};

/// Variables a stdio server's `env` may not set: the sandbox sets them (home, proxies), or
/// they change what runs (the dynamic linker's, `PATH`).
const RESERVED_ENV: [&str; 10] = [
    "PATH",
    "HOME",
    "HTTPS_PROXY",
    "HTTP_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "https_proxy",
    "http_proxy",
    "all_proxy",
    "no_proxy",
];

/// Headers the broker sets or that describe the connection: never configured.
const RESERVED_HEADERS: [&str; 8] = [
    "host",
    "content-length",
    "content-type",
    "accept",
    "connection",
    "transfer-encoding",
    "mcp-session-id",
    "mcp-protocol-version",
];

impl Config {
    /// Every entry of `mcp.servers`.
    pub(super) fn check_mcp(&self, v: &mut Problems) {
        if self.mcp.calls_per_user_per_day == Some(0) {
            v.add(
                "mcp.callsPerUserPerDay",
                "must be at least 1 (null: no limit; remove the servers to turn MCP off)",
            );
        }
        let mut names: Vec<&str> = Vec::new();
        for (i, s) in self.mcp.servers.iter().enumerate() {
            let key = format!("mcp.servers.{i}");
            if !is_server_name(&s.name) {
                v.add(
                    format!("{key}.name"),
                    format!(
                        "{:?} is not a server name (1-40 of a-z, 0-9 and `-`, starting with a letter)",
                        s.name
                    ),
                );
            } else if let Some(first) = names.iter().position(|n| *n == s.name) {
                v.add(
                    format!("{key}.name"),
                    format!("{:?} is already the name of mcp.servers.{first}", s.name),
                );
            }
            names.push(&s.name);
            match s.kind {
                McpKind::Http | McpKind::Sse => {
                    if let Err(why) = check_url(&s.url, s.local) {
                        v.add(format!("{key}.url"), why);
                    }
                    if !s.command.is_empty() || !s.env.is_empty() {
                        v.add(
                            key.clone(),
                            "command and env are for kind: stdio; a remote server takes url and headers",
                        );
                    }
                }
                McpKind::Stdio => check_stdio(s, &key, v),
            }
            for name in s.headers.keys() {
                let lower = name.to_ascii_lowercase();
                if axum::http::HeaderName::from_bytes(name.as_bytes()).is_err() {
                    v.add(
                        format!("{key}.headers"),
                        format!("{name:?} is not a header name"),
                    );
                } else if RESERVED_HEADERS.contains(&lower.as_str()) {
                    v.add(
                        format!("{key}.headers.{name}"),
                        "set by the broker for every request; not configurable",
                    );
                }
            }
            for (t, tool) in s.tools.iter().enumerate() {
                if tool.trim().is_empty() || tool.len() > 128 {
                    v.add(
                        format!("{key}.tools.{t}"),
                        "a tool name of 1-128 characters",
                    );
                } else if s.tools[..t].contains(tool) {
                    v.add(
                        format!("{key}.tools.{t}"),
                        format!("{tool:?} is listed twice"),
                    );
                }
            }
            for (p, place) in s.places.iter().enumerate() {
                let known = place == crate::config::DEFAULT_PLACE
                    || self.places.iter().any(|r| &r.name == place);
                if !known {
                    v.add(
                        format!("{key}.places.{p}"),
                        format!("{place:?} is not the name of a places rule (or `default`)"),
                    );
                }
            }
            if s.timeout_ms == 0 || s.max_request_kb == 0 || s.max_response_kb == 0 {
                v.add(
                    key.clone(),
                    "timeoutMs, maxRequestKb and maxResponseKb must be greater than 0",
                );
            }
        }
    }
}

/// A `stdio` server: a command, variable names that are names and not the sandbox's own, and
/// nothing of a remote server's.
fn check_stdio(s: &McpServerConfig, key: &str, v: &mut Problems) {
    match s.command.first() {
        None => v.add(
            format!("{key}.command"),
            "a stdio server needs its command: [program, arguments...]",
        ),
        Some(program) if program.trim().is_empty() || program.contains('\0') => v.add(
            format!("{key}.command.0"),
            "the program must be a name on PATH or a path",
        ),
        Some(_) => {}
    }
    if !s.url.is_empty() || !s.headers.is_empty() || s.local {
        v.add(
            key.to_owned(),
            "url, headers and local are for remote servers (kind: http or sse); a stdio server takes command and env",
        );
    }
    for name in s.env.keys() {
        let is_name = !name.is_empty()
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !is_name {
            v.add(
                format!("{key}.env"),
                format!("{name:?} is not an environment variable name"),
            );
        } else if RESERVED_ENV.contains(&name.as_str()) || name.starts_with("LD_") {
            v.add(
                format!("{key}.env.{name}"),
                "set by the sandbox (or it would change what runs); not configurable",
            );
        }
    }
}

/// A server name: 1-40 of `a-z`, `0-9` and `-`, starting with a letter.
pub(crate) fn is_server_name(name: &str) -> bool {
    (1..=40).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// The endpoint: an http(s) URL with a host, no credentials or fragment; plain `http` and an
/// address that is not public only for a `local` server.
fn check_url(url: &str, local: bool) -> Result<(), String> {
    let parsed = reqwest::Url::parse(url).map_err(|e| format!("{url:?} is not a URL ({e})"))?;
    let host = parsed
        .host_str()
        .filter(|_| matches!(parsed.scheme(), "http" | "https"))
        .ok_or_else(|| format!("{url:?} must be an http(s) URL with a host"))?;
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err("must not carry credentials; put them in headers".into());
    }
    if parsed.fragment().is_some() {
        return Err(format!("{url:?} must not have a fragment"));
    }
    if local {
        return Ok(());
    }
    if parsed.scheme() == "http" {
        return Err(format!(
            "{url:?} would send the server's headers unencrypted; use https, or set local: true for a server on this machine or network"
        ));
    }
    if let Some(ip) = parse_host(host).filter(|ip| !crate::egress::is_public(*ip)) {
        return Err(format!(
            "{ip} is not a public address; set local: true for a server on this machine or network"
        ));
    }
    Ok(())
}
