//! The egress-checking resolver and connector. Every address a connection may go
//! to passes [`EgressPolicy::check`] first: names through [`EgressResolver`], which
//! returns only allowed addresses (so the TCP connect can only reach a checked
//! one — no second lookup, no DNS rebinding window), and IP-literal hosts through
//! [`EgressConnector`], because hyper skips the resolver for those.

use std::{
    future::Future,
    net::{IpAddr, SocketAddr},
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
};

use hookline_core::egress::{EgressDenied, EgressPolicy};
use hyper::Uri;
use hyper_util::{
    client::legacy::connect::{dns::Name, HttpConnector},
    rt::TokioIo,
};
use tokio::net::TcpStream;
use tower_service::Service;

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type BoxFuture<T> = Pin<Box<dyn Future<Output = Result<T, BoxError>> + Send>>;

/// Why a connection was not even attempted.
#[derive(Debug, thiserror::Error)]
pub enum EgressError {
    /// The policy refused the address (every resolved address, for a name).
    #[error(transparent)]
    Denied(#[from] EgressDenied),
    /// The name could not be resolved.
    #[error("cannot resolve the host: {0}")]
    Dns(#[source] std::io::Error),
    /// The name resolved to nothing.
    #[error("the host resolved to no address")]
    NoAddress,
}

/// A DNS resolver (the system's, via `getaddrinfo` on the blocking pool) that
/// drops every address the policy denies.
#[derive(Debug, Clone)]
pub struct EgressResolver {
    policy: Arc<EgressPolicy>,
}

impl EgressResolver {
    pub fn new(policy: Arc<EgressPolicy>) -> Self {
        Self { policy }
    }

    /// Resolves `host` and keeps the allowed addresses, or says why there are none.
    pub async fn resolve(&self, host: &str) -> Result<Vec<SocketAddr>, EgressError> {
        let found: Vec<SocketAddr> = tokio::net::lookup_host((host, 0))
            .await
            .map_err(EgressError::Dns)?
            .collect();
        filter(&self.policy, found)
    }
}

fn filter(policy: &EgressPolicy, found: Vec<SocketAddr>) -> Result<Vec<SocketAddr>, EgressError> {
    let mut first_denial = None;
    let allowed: Vec<SocketAddr> = found
        .into_iter()
        .filter(|addr| match policy.check(addr.ip()) {
            Ok(()) => true,
            Err(denied) => {
                first_denial.get_or_insert(denied);
                false
            }
        })
        .collect();
    match (allowed.is_empty(), first_denial) {
        (false, _) => Ok(allowed),
        (true, Some(denied)) => Err(EgressError::Denied(denied)),
        (true, None) => Err(EgressError::NoAddress),
    }
}

impl Service<Name> for EgressResolver {
    type Response = std::vec::IntoIter<SocketAddr>;
    type Error = EgressError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, EgressError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, name: Name) -> Self::Future {
        let this = self.clone();
        Box::pin(async move { this.resolve(name.as_str()).await.map(Vec::into_iter) })
    }
}

/// hyper's TCP connector behind the egress resolver, with IP-literal hosts
/// checked before they reach it.
#[derive(Debug, Clone)]
pub struct EgressConnector {
    inner: HttpConnector<EgressResolver>,
    policy: Arc<EgressPolicy>,
}

impl EgressConnector {
    pub fn new(inner: HttpConnector<EgressResolver>, policy: Arc<EgressPolicy>) -> Self {
        Self { inner, policy }
    }
}

/// The host of `uri` as an IP address, if it is an IP literal (`[..]` stripped,
/// as hyper does before it decides to skip the resolver).
pub fn literal_ip(uri: &Uri) -> Option<IpAddr> {
    let host = uri.host()?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    host.parse().ok()
}

impl Service<Uri> for EgressConnector {
    type Response = TokioIo<TcpStream>;
    type Error = BoxError;
    type Future = BoxFuture<Self::Response>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        if let Some(ip) = literal_ip(&uri) {
            if let Err(denied) = self.policy.check(ip) {
                return Box::pin(async move { Err(EgressError::Denied(denied).into()) });
            }
        }
        let connecting = self.inner.call(uri);
        Box::pin(async move { connecting.await.map_err(Into::into) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(allow: &[&str]) -> Arc<EgressPolicy> {
        Arc::new(EgressPolicy::new(
            allow.iter().map(|c| c.parse().unwrap()).collect(),
        ))
    }

    #[tokio::test]
    async fn a_name_resolving_to_loopback_is_denied_without_the_allow_list() {
        let resolver = EgressResolver::new(policy(&[]));
        match resolver.resolve("localhost").await {
            Err(EgressError::Denied(d)) => assert!(d.ip.is_loopback(), "{d}"),
            other => panic!("expected a denial, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn the_allow_list_admits_only_the_named_range() {
        let resolver = EgressResolver::new(policy(&["127.0.0.0/8"]));
        let addrs = resolver.resolve("localhost").await.unwrap();
        assert!(!addrs.is_empty());
        // `localhost` may also resolve to ::1, which 127.0.0.0/8 does not admit.
        assert!(addrs
            .iter()
            .all(|a| a.ip().is_ipv4() && a.ip().is_loopback()));
    }

    #[test]
    fn filter_keeps_allowed_and_reports_the_first_denial() {
        let p = policy(&[]);
        let a = |s: &str| -> SocketAddr { s.parse().unwrap() };
        let mixed = filter(&p, vec![a("10.0.0.1:0"), a("93.184.216.34:0")]).unwrap();
        assert_eq!(mixed, vec![a("93.184.216.34:0")]);
        match filter(&p, vec![a("169.254.169.254:0"), a("[::1]:0")]) {
            Err(EgressError::Denied(d)) => assert_eq!(d.ip, a("169.254.169.254:0").ip()),
            other => panic!("{other:?}"),
        }
        assert!(matches!(filter(&p, vec![]), Err(EgressError::NoAddress)));
    }

    #[test]
    fn literal_ip_table() {
        let cases = [
            ("https://127.0.0.1/x", Some("127.0.0.1")),
            ("https://[::1]:8443/", Some("::1")),
            ("https://[::ffff:10.0.0.1]/", Some("::ffff:10.0.0.1")),
            ("https://example.com/", None),
            ("https://2130706433/", None), // a name to hyper: it goes to the resolver
        ];
        for (uri, want) in cases {
            let uri: Uri = uri.parse().unwrap();
            assert_eq!(
                literal_ip(&uri),
                want.map(|w| w.parse::<IpAddr>().unwrap()),
                "{uri}"
            );
        }
    }
}
