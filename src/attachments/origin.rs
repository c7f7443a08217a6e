//! Where an attachment may be downloaded from. The daemon fetches URLs that arrive in platform
//! events written by strangers, so a URL is a request the attacker chose: without this check a
//! message could make the daemon read its own ops listener, the cloud metadata address or a
//! service on the operator's network, and hand the answer to the agent.
//!
//! * Each platform has **trusted origins** (scheme, host and port exactly): the Discord API host
//!   and the Misskey instance as configured. They are trusted wherever they point, loopback
//!   included (a Misskey on the operator's LAN, the fake servers of the tests).
//! * **Public hosts**: Discord's CDN names and the operator's `attachments.allowHosts`, `https`
//!   only, on their port, and only to addresses that pass [`crate::egress::is_public`] — checked
//!   on the resolved addresses by [`PublicResolver`], so a name that resolves to `127.0.0.1`
//!   or `169.254.169.254` is never connected to.
//! * Everything else is refused before any connection: IP literals, other ports of a trusted
//!   host, other schemes. Redirects are followed by the downloader one hop at a time, each hop
//!   checked here again.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::Arc;

use reqwest::Url;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

use crate::config::{FileSources, discord_file_sources, misskey_file_sources};
use crate::egress::{AllowedHost, is_public};

/// One origin: scheme, lowercase host, port.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Origin {
    scheme: String,
    host: String,
    port: u16,
}

impl Origin {
    fn of(url: &Url) -> Option<Origin> {
        Some(Origin {
            scheme: url.scheme().to_owned(),
            host: url.host_str()?.to_ascii_lowercase(),
            port: url.port_or_known_default()?,
        })
    }
}

/// Why a URL is not fetched.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotAllowed {
    /// Not an absolute `http(s)` URL.
    #[error("the link is not a web address")]
    NotHttp,
    /// Neither a trusted origin nor a public host of this platform.
    #[error("the link points outside the platform's own servers")]
    OtherHost,
}

/// The origins one platform's attachments may come from.
#[derive(Debug, Clone, Default)]
pub struct Origins {
    trusted: Vec<Origin>,
    public: Vec<AllowedHost>,
}

impl Origins {
    /// A platform's [`FileSources`] (its facts, `config::PLATFORMS`), plus `extra` public hosts
    /// (`attachments.allowHosts`).
    pub fn of_sources(sources: &FileSources, extra: &[AllowedHost]) -> Self {
        let mut public: Vec<AllowedHost> = sources
            .public_hosts
            .iter()
            .map(|h| AllowedHost {
                host: (*h).to_owned(),
                port: 443,
            })
            .collect();
        public.extend_from_slice(extra);
        Origins {
            trusted: Url::parse(&sources.trusted)
                .ok()
                .as_ref()
                .and_then(Origin::of)
                .into_iter()
                .collect(),
            public,
        }
    }

    /// Discord's: the API host (`apiBaseUrl`, Discord's own when unset) and the CDN hosts, plus
    /// `extra`.
    pub fn discord(api_base_url: Option<&str>, extra: &[AllowedHost]) -> Self {
        Self::of_sources(&discord_file_sources(api_base_url), extra)
    }

    /// Misskey's: the instance (`host[:port]`, `https` when `secure`), plus `extra` (object
    /// storage, an external media proxy).
    pub fn misskey(host: &str, secure: bool, extra: &[AllowedHost]) -> Self {
        Self::of_sources(&misskey_file_sources(host, secure), extra)
    }

    /// Whether `url` may be fetched (the resolved addresses of a public host are checked
    /// again by [`PublicResolver`]).
    pub fn check(&self, url: &Url) -> Result<(), NotAllowed> {
        if !matches!(url.scheme(), "http" | "https") {
            return Err(NotAllowed::NotHttp);
        }
        let origin = Origin::of(url).ok_or(NotAllowed::NotHttp)?;
        if self.trusted.contains(&origin) {
            return Ok(());
        }
        let public = origin.scheme == "https"
            && self
                .public
                .iter()
                .any(|h| h.host == origin.host && h.port == origin.port);
        if public {
            Ok(())
        } else {
            Err(NotAllowed::OtherHost)
        }
    }

    /// Host names of the trusted origins (their addresses are not screened).
    pub fn trusted_hosts(&self) -> impl Iterator<Item = &str> {
        self.trusted.iter().map(|o| o.host.as_str())
    }
}

/// The downloader's DNS resolver: the trusted origins' names resolve as the system says; every
/// other name only to public addresses. Without an address left the lookup fails with
/// [`NonPublicAddress`], which the downloader reports as "not allowed".
#[derive(Clone)]
pub struct PublicResolver {
    trusted: Arc<HashSet<String>>,
    lookup: Arc<dyn Lookup>,
}

impl std::fmt::Debug for PublicResolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PublicResolver")
            .field("trusted", &self.trusted)
            .finish_non_exhaustive()
    }
}

/// Name lookup (the system resolver; tests substitute their own answers).
pub trait Lookup: Send + Sync + 'static {
    /// The addresses of `host`.
    fn lookup(&self, host: String) -> Resolving;
}

/// The system resolver (getaddrinfo through tokio).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemLookup;

impl Lookup for SystemLookup {
    fn lookup(&self, host: String) -> Resolving {
        Box::pin(async move {
            let addrs: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            Ok(Box::new(addrs.into_iter()) as Addrs)
        })
    }
}

/// A name that resolved to no public address.
#[derive(Debug, thiserror::Error)]
#[error("{0} resolves to no public address")]
pub struct NonPublicAddress(pub String);

impl PublicResolver {
    /// A resolver trusting the names of `origins`' trusted origins.
    pub fn new<'a>(
        origins: impl IntoIterator<Item = &'a Origins>,
        lookup: Arc<dyn Lookup>,
    ) -> Self {
        let trusted = origins
            .into_iter()
            .flat_map(|o| o.trusted_hosts().map(str::to_owned));
        Self::trusting(trusted, lookup)
    }

    /// A resolver trusting the names `hosts` (any address) and screening every other name.
    pub fn trusting(hosts: impl IntoIterator<Item = String>, lookup: Arc<dyn Lookup>) -> Self {
        PublicResolver {
            trusted: Arc::new(hosts.into_iter().map(|h| h.to_ascii_lowercase()).collect()),
            lookup,
        }
    }
}

impl Resolve for PublicResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().to_ascii_lowercase();
        let trusted = self.trusted.contains(&host);
        let lookup = self.lookup.lookup(host.clone());
        Box::pin(async move {
            let addrs = lookup.await?;
            if trusted {
                return Ok(addrs);
            }
            let public: Vec<SocketAddr> = addrs.filter(|a| is_public(a.ip())).collect();
            if public.is_empty() {
                return Err(
                    Box::new(NonPublicAddress(host)) as Box<dyn std::error::Error + Send + Sync>
                );
            }
            Ok(Box::new(public.into_iter()) as Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{IpAddr, Ipv4Addr};
    use std::str::FromStr;

    fn url(s: &str) -> Url {
        Url::parse(s).unwrap()
    }

    fn extra(host: &str) -> Vec<AllowedHost> {
        vec![crate::egress::parse_allow_entry(host).unwrap()]
    }

    #[test]
    fn discord_takes_its_api_origin_and_the_cdn_over_https_only() {
        let o = Origins::discord(Some("http://127.0.0.1:4000/api/v10"), &[]);
        assert!(o.check(&url("http://127.0.0.1:4000/files/a.png")).is_ok());
        assert!(
            o.check(&url(
                "https://cdn.discordapp.com/attachments/1/2/a.png?ex=1"
            ))
            .is_ok()
        );
        assert!(o.check(&url("https://media.discordapp.net/x.png")).is_ok());
        assert!(
            o.check(&url(
                "https://images-ext-1.discordapp.net/external/abc/https/example.org/cat.jpg"
            ))
            .is_ok()
        );
        for refused in [
            "http://127.0.0.1:4001/files/a.png",  // another loopback port
            "http://localhost:4000/files/a.png",  // the same port under another name
            "https://127.0.0.1:4000/files/a.png", // another scheme
            "http://cdn.discordapp.com/a.png",    // the CDN without TLS
            "https://cdn.discordapp.com:8443/a.png",
            "https://cdn.discordapp.com.evil.example/a.png",
            "http://169.254.169.254/latest/meta-data/",
            "http://10.0.0.1/a.png",
            "http://[::1]:4000/a.png",
        ] {
            assert_eq!(
                o.check(&url(refused)),
                Err(NotAllowed::OtherHost),
                "{refused}"
            );
        }
        assert_eq!(
            o.check(&url("file:///etc/passwd")),
            Err(NotAllowed::NotHttp)
        );
        assert_eq!(
            o.check(&url("ftp://cdn.discordapp.com/a")),
            Err(NotAllowed::NotHttp)
        );
    }

    #[test]
    fn discord_defaults_to_discord_com_and_misskey_to_its_instance() {
        let d = Origins::discord(None, &[]);
        assert!(d.check(&url("https://discord.com/x")).is_ok());
        assert!(d.check(&url("http://discord.com/x")).is_err());
        let m = Origins::misskey("misskey.example", true, &extra("s3.example.net"));
        assert!(m.check(&url("https://misskey.example/files/abc")).is_ok());
        assert!(
            m.check(&url("https://misskey.example:443/proxy/x.webp"))
                .is_ok()
        );
        assert!(m.check(&url("https://s3.example.net/bucket/x.png")).is_ok());
        assert!(m.check(&url("http://misskey.example/files/abc")).is_err());
        assert!(m.check(&url("https://cdn.discordapp.com/a.png")).is_err());
        let local = Origins::misskey("127.0.0.1:3000", false, &[]);
        assert!(local.check(&url("http://127.0.0.1:3000/files/abc")).is_ok());
        assert!(
            local
                .check(&url("http://127.0.0.1:3001/files/abc"))
                .is_err()
        );
    }

    struct Fixed(Vec<IpAddr>);

    impl Lookup for Fixed {
        fn lookup(&self, _host: String) -> Resolving {
            let addrs: Vec<SocketAddr> = self.0.iter().map(|ip| SocketAddr::new(*ip, 0)).collect();
            Box::pin(async move { Ok(Box::new(addrs.into_iter()) as Addrs) })
        }
    }

    fn resolver(addrs: Vec<IpAddr>) -> PublicResolver {
        let origins = [Origins::misskey("misskey.lan", false, &[])];
        PublicResolver::new(&origins, Arc::new(Fixed(addrs)))
    }

    async fn resolve(r: &PublicResolver, host: &str) -> Result<Vec<IpAddr>, String> {
        r.resolve(Name::from_str(host).unwrap())
            .await
            .map(|a| a.map(|s| s.ip()).collect())
            .map_err(|e| e.to_string())
    }

    #[tokio::test]
    async fn a_public_host_that_resolves_to_a_private_address_is_never_connected_to() {
        let private = vec![
            IpAddr::V4(Ipv4Addr::LOCALHOST),
            IpAddr::V4(Ipv4Addr::new(169, 254, 169, 254)),
            IpAddr::V4(Ipv4Addr::new(192, 168, 1, 2)),
        ];
        let err = resolve(&resolver(private.clone()), "cdn.discordapp.com")
            .await
            .unwrap_err();
        assert!(err.contains("no public address"), "{err}");
        // Mixed answers keep only the public addresses.
        let mut mixed = private.clone();
        mixed.push(IpAddr::V4(Ipv4Addr::new(162, 159, 130, 233)));
        assert_eq!(
            resolve(&resolver(mixed), "cdn.discordapp.com")
                .await
                .unwrap(),
            vec![IpAddr::V4(Ipv4Addr::new(162, 159, 130, 233))]
        );
        // The configured instance is trusted wherever it lives.
        assert_eq!(
            resolve(&resolver(private.clone()), "misskey.lan")
                .await
                .unwrap(),
            private
        );
    }
}
