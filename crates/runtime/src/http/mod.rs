//! The webhook HTTP client: hyper 1 over hyper-rustls (HTTP/1.1 and HTTP/2 by
//! ALPN, pooled keep-alive connections), behind the egress policy.
//!
//! Guarantees: a request goes only to an address the [`EgressPolicy`] allowed
//! (https only unless plain http is allowed); it takes at most the connect timeout
//! to connect and the total timeout for everything, body included; redirects are
//! returned, never followed; at most `max_response_bytes` of a response body are
//! read, and a body still arriving at the deadline is cut there (the status line
//! already decided). Every failure is reduced to a bounded [`FailureKind`].

mod classify;
pub mod egress;

use std::{path::Path, sync::Arc, time::Duration};

use bytes::{Bytes, BytesMut};
use hookline_core::{egress::EgressPolicy, FailureKind};
use http_body_util::{BodyExt, Full};
use hyper::{header::HeaderMap, Method, Request, Uri, Version};
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::{
    client::legacy::{connect::HttpConnector, Client},
    rt::{TokioExecutor, TokioTimer},
};
use rustls::pki_types::{pem::PemObject, CertificateDer};

pub use classify::failure_kind;
pub use egress::{EgressConnector, EgressError, EgressResolver};

/// Settings of the client.
#[derive(Debug, Clone)]
pub struct HttpSettings {
    pub connect_timeout: Duration,
    /// Connect, send, and read the capped response, all together.
    pub request_timeout: Duration,
    pub max_response_bytes: usize,
    /// Allow `http://` URLs (tests, trusted networks). https is always allowed.
    pub allow_http: bool,
    pub egress: EgressPolicy,
    pub pool_idle_timeout: Duration,
    pub pool_max_idle_per_host: usize,
    /// Trusted in addition to the Mozilla roots (e.g. a test CA).
    pub extra_roots: Vec<CertificateDer<'static>>,
}

/// The defaults of [`HttpSettings`], the one home of them: the dispatcher's
/// flags default to the `*_TEXT` forms, made from the same literal as the value.
pub mod defaults {
    use std::time::Duration;

    macro_rules! seconds {
        ($(#[$doc:meta])* $value:ident, $text:ident = $secs:literal) => {
            $(#[$doc])*
            pub const $value: Duration = Duration::from_secs($secs);
            #[doc = concat!("[`", stringify!($value), "`] as a flag default: `", $secs, "s`.")]
            pub const $text: &str = concat!($secs, "s");
        };
    }

    seconds!(
        /// Longest wait for a TCP connection.
        CONNECT_TIMEOUT, CONNECT_TIMEOUT_TEXT = 5
    );
    seconds!(
        /// Longest a whole attempt may take.
        REQUEST_TIMEOUT, REQUEST_TIMEOUT_TEXT = 15
    );
    seconds!(
        /// Idle keep-alive connections are closed after this long.
        POOL_IDLE_TIMEOUT, POOL_IDLE_TIMEOUT_TEXT = 90
    );
    /// Most bytes of a response body read.
    pub const MAX_RESPONSE_BYTES: usize = 4096;
    /// Most idle connections kept per host: the dispatcher's default
    /// `--global-in-flight` (its flag defaults to whatever that is set to).
    /// No more attempts than that run at once, so a cap this high never
    /// closes a connection the next attempt to the host could reuse; idle
    /// ones still close after [`POOL_IDLE_TIMEOUT`]. A lower cap closes every
    /// connection returned beyond it, and the attempts after open new ones:
    /// at 32, with a few hundred attempts in flight to one host, that churn
    /// took half of the dispatcher's throughput in `make bench`.
    pub const POOL_MAX_IDLE_PER_HOST: usize =
        hookline_core::LaneLimits::DEFAULT_GLOBAL_IN_FLIGHT as usize;
}

impl Default for HttpSettings {
    fn default() -> Self {
        Self {
            connect_timeout: defaults::CONNECT_TIMEOUT,
            request_timeout: defaults::REQUEST_TIMEOUT,
            max_response_bytes: defaults::MAX_RESPONSE_BYTES,
            allow_http: false,
            egress: EgressPolicy::default(),
            pool_idle_timeout: defaults::POOL_IDLE_TIMEOUT,
            pool_max_idle_per_host: defaults::POOL_MAX_IDLE_PER_HOST,
            extra_roots: Vec::new(),
        }
    }
}

/// Why the client could not be built.
#[derive(Debug, thiserror::Error)]
pub enum HttpSetupError {
    #[error("cannot read CA certificates from {path}: {source}")]
    Roots {
        path: String,
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    #[error("CA certificate in {path} is not usable: {source}")]
    BadRoot {
        path: String,
        #[source]
        source: rustls::Error,
    },
    #[error("cannot configure TLS: {0}")]
    Tls(#[source] rustls::Error),
}

/// Reads PEM certificates for [`HttpSettings::extra_roots`].
pub fn read_pem_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, HttpSetupError> {
    let err = |source| HttpSetupError::Roots {
        path: path.display().to_string(),
        source,
    };
    CertificateDer::pem_file_iter(path)
        .map_err(err)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(err)
}

/// One POST to make.
#[derive(Debug, Clone)]
pub struct Outgoing {
    pub url: String,
    pub headers: HeaderMap,
    pub body: Bytes,
}

/// What came back: the status line, `Retry-After`, and the first bytes of the body.
#[derive(Debug, Clone)]
pub struct Incoming {
    pub status: u16,
    pub retry_after: Option<String>,
    pub version: Version,
    /// At most `max_response_bytes`.
    pub body: Bytes,
}

/// A failed attempt: its bounded kind and a short, secret-free explanation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub kind: FailureKind,
    pub detail: String,
}

type Connector = HttpsConnector<EgressConnector>;

/// The shared client; cheap to clone (one connection pool).
#[derive(Debug, Clone)]
pub struct WebhookClient {
    client: Client<Connector, Full<Bytes>>,
    settings: Arc<HttpSettings>,
}

impl WebhookClient {
    pub fn new(settings: HttpSettings) -> Result<Self, HttpSetupError> {
        let policy = Arc::new(settings.egress.clone());
        let mut tcp = HttpConnector::new_with_resolver(EgressResolver::new(policy.clone()));
        // hyper-rustls hands https URIs to this connector.
        tcp.enforce_http(false);
        tcp.set_connect_timeout(Some(settings.connect_timeout));
        tcp.set_nodelay(true);
        tcp.set_keepalive(Some(Duration::from_secs(60)));
        let tcp = EgressConnector::new(tcp, policy);

        let mut roots = rustls::RootCertStore::empty();
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        for cert in &settings.extra_roots {
            roots
                .add(cert.clone())
                .map_err(|source| HttpSetupError::BadRoot {
                    path: "--tls-extra-ca".into(),
                    source,
                })?;
        }
        let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(HttpSetupError::Tls)?
        .with_root_certificates(roots)
        .with_no_client_auth();
        let https = HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .enable_http2()
            .wrap_connector(tcp);
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(settings.pool_idle_timeout)
            .pool_max_idle_per_host(settings.pool_max_idle_per_host)
            .pool_timer(TokioTimer::new())
            .timer(TokioTimer::new())
            .build(https);
        Ok(Self {
            client,
            settings: Arc::new(settings),
        })
    }

    pub fn settings(&self) -> &HttpSettings {
        &self.settings
    }

    /// POSTs `req`, honouring the egress policy and the timeouts.
    pub async fn post(&self, req: Outgoing) -> Result<Incoming, Failure> {
        let uri = self.check_url(&req.url)?;
        let deadline = tokio::time::Instant::now() + self.settings.request_timeout;
        self.exchange(uri, req, deadline).await
    }

    fn check_url(&self, url: &str) -> Result<Uri, Failure> {
        let invalid = |why: &str| Failure {
            kind: FailureKind::InvalidUrl,
            detail: why.to_owned(),
        };
        let uri: Uri = url.parse().map_err(|_| invalid("the URL does not parse"))?;
        if uri.host().is_none_or(str::is_empty) {
            return Err(invalid("the URL has no host"));
        }
        if uri.authority().is_some_and(|a| a.as_str().contains('@')) {
            return Err(invalid("credentials in the URL are not allowed"));
        }
        if let Some(failure) = self.noncanonical_host(&uri) {
            return Err(failure);
        }
        match uri.scheme_str() {
            Some("https") => Ok(uri),
            Some("http") if self.settings.allow_http => Ok(uri),
            Some("http") => Err(Failure {
                kind: FailureKind::EgressDenied,
                detail: "plain http is not allowed (https only)".into(),
            }),
            _ => Err(invalid("the scheme is not http or https")),
        }
    }

    /// A host in a legacy numeric IPv4 spelling (`127.1`, `2130706433`,
    /// `0x7f000001`, `0177.0.0.1`): the system resolver reads it as that
    /// address, but TLS cannot name it, so over https it would fail before the
    /// connector's egress check as a transport error ("invalid dns name",
    /// retried as `connect_refused`). Refused here instead, on the first
    /// attempt: `egress_denied` when the policy refuses the address, else
    /// `invalid_url` naming the canonical form.
    fn noncanonical_host(&self, uri: &Uri) -> Option<Failure> {
        let host = uri.host()?;
        let ip = hookline_core::noncanonical_ipv4(host)?;
        Some(match self.settings.egress.check(ip.into()) {
            Err(denied) => Failure {
                kind: FailureKind::EgressDenied,
                detail: format!("the host `{host}` is a spelling of {ip}: {denied}"),
            },
            Ok(()) => Failure {
                kind: FailureKind::InvalidUrl,
                detail: format!(
                    "the host `{host}` is a non-canonical spelling of {ip}; write it as {ip}"
                ),
            },
        })
    }

    /// Until `deadline`: a response head, or a failure. After the head, the body
    /// is read until the cap, its end, or `deadline`, whichever comes first.
    async fn exchange(
        &self,
        uri: Uri,
        req: Outgoing,
        deadline: tokio::time::Instant,
    ) -> Result<Incoming, Failure> {
        let mut request = Request::builder()
            .method(Method::POST)
            .uri(uri)
            .body(Full::new(req.body))
            .map_err(|e| Failure {
                kind: FailureKind::InvalidUrl,
                detail: e.to_string(),
            })?;
        *request.headers_mut() = req.headers;
        let response = match tokio::time::timeout_at(deadline, self.client.request(request)).await {
            Ok(Ok(response)) => response,
            Ok(Err(e)) => {
                return Err(Failure {
                    kind: failure_kind(&e),
                    detail: classify::describe(&e),
                })
            }
            Err(_elapsed) => {
                return Err(Failure {
                    kind: FailureKind::Timeout,
                    detail: format!(
                        "no response head within {:?}",
                        self.settings.request_timeout
                    ),
                })
            }
        };
        let status = response.status().as_u16();
        let version = response.version();
        let retry_after = response
            .headers()
            .get(hyper::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let body = read_capped(
            response.into_body(),
            self.settings.max_response_bytes,
            deadline,
        )
        .await;
        Ok(Incoming {
            status,
            retry_after,
            version,
            body,
        })
    }
}

/// Reads at most `cap` bytes until `deadline`. An error mid-body or the deadline
/// keeps what arrived: the status line already decided the outcome, so a body
/// that stalls (or drips) must not turn a `200` into a retry, as a body that
/// breaks off does not. Dropping the unfinished body closes the connection.
async fn read_capped(
    mut body: hyper::body::Incoming,
    cap: usize,
    deadline: tokio::time::Instant,
) -> Bytes {
    let mut buf = BytesMut::new();
    while buf.len() < cap {
        match tokio::time::timeout_at(deadline, body.frame()).await {
            Ok(Some(Ok(frame))) => {
                if let Ok(data) = frame.into_data() {
                    let take = data.len().min(cap - buf.len());
                    buf.extend_from_slice(&data[..take]);
                }
            }
            Ok(Some(Err(_)) | None) | Err(_) => break,
        }
    }
    buf.freeze()
}

#[cfg(test)]
mod fuzz_tests;
#[cfg(test)]
mod tests;
