//! A fault-injecting webhook receiver for tests: a hyper server on 127.0.0.1:0
//! (plain HTTP, or HTTPS with a fresh self-signed certificate, HTTP/1.1 and h2)
//! that records every request — method, path, version, headers, body, arrival
//! time — and answers per path as told: a status, a delay, fail the first N
//! requests then succeed, fail for a while (an outage: from the path's first
//! request, however few requests arrive meanwhile), fail the first request of
//! chosen `webhook-id`s, a `Retry-After`. Stops when dropped.

use std::{
    collections::HashMap,
    convert::Infallible,
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::{Duration, Instant, SystemTime},
};

use anyhow::Context;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{
    body::Incoming,
    header::{HeaderMap, HeaderValue},
    service::service_fn,
    Method, Request, Response,
};
use hyper_util::{
    rt::{TokioExecutor, TokioIo},
    server::conn::auto,
};
use tokio::{net::TcpListener, sync::Notify, task::JoinHandle};

/// How the receiver answers requests to one path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Behaviour {
    /// Status once the failures are used up.
    pub status: u16,
    /// Wait this long before answering (the request is recorded on arrival).
    pub delay: Duration,
    /// Answer the first `fail_first` requests with `fail_status`.
    pub fail_first: u32,
    pub fail_status: u16,
    /// Answer with `fail_status` every request that arrives within this long
    /// of the path's first request: an outage that ends on the clock, not
    /// after a number of requests (a circuit breaker sends few meanwhile).
    pub fail_for: Duration,
    /// `Retry-After` value sent with failures (and with `status` if it is not 2xx).
    pub retry_after: Option<String>,
    /// Response body.
    pub body: Bytes,
    /// Extra response headers (e.g. `location` for a redirect).
    pub headers: Vec<(String, String)>,
    /// Answer the first `fail_times_of` requests carrying each of these
    /// `webhook-id`s with `fail_status` (later ones as the rest of the behaviour says).
    pub fail_first_of: std::collections::BTreeSet<String>,
    pub fail_times_of: u32,
}

impl Default for Behaviour {
    fn default() -> Self {
        Self {
            status: 204,
            delay: Duration::ZERO,
            fail_first: 0,
            fail_status: 503,
            fail_for: Duration::ZERO,
            retry_after: None,
            body: Bytes::new(),
            headers: Vec::new(),
            fail_first_of: Default::default(),
            fail_times_of: 0,
        }
    }
}

impl Behaviour {
    pub fn status(status: u16) -> Self {
        Self {
            status,
            ..Self::default()
        }
    }

    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    pub fn fail_first(mut self, times: u32, status: u16) -> Self {
        self.fail_first = times;
        self.fail_status = status;
        self
    }

    /// Fails every request with `status` for `outage` from the path's first
    /// request, then answers as the rest of the behaviour says.
    pub fn fail_for(mut self, outage: Duration, status: u16) -> Self {
        self.fail_for = outage;
        self.fail_status = status;
        self
    }

    pub fn retry_after(mut self, value: impl Into<String>) -> Self {
        self.retry_after = Some(value.into());
        self
    }

    pub fn body(mut self, body: impl Into<Bytes>) -> Self {
        self.body = body.into();
        self
    }

    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Fails the first `times` requests of each of `ids` (by `webhook-id`) with `status`.
    pub fn fail_first_of(
        mut self,
        ids: impl IntoIterator<Item = impl Into<String>>,
        times: u32,
        status: u16,
    ) -> Self {
        self.fail_first_of = ids.into_iter().map(Into::into).collect();
        self.fail_times_of = times;
        self.fail_status = status;
        self
    }
}

/// One request as it arrived.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: Method,
    pub path: String,
    pub version: hyper::Version,
    pub headers: HeaderMap,
    pub body: Bytes,
    /// Monotonic arrival time, for waits and ordering.
    pub at: Instant,
    /// Wall-clock arrival time, to compare with record timestamps.
    pub received_at: SystemTime,
    /// The status the receiver answered (decided on arrival, sent after any delay).
    pub status: u16,
}

impl Recorded {
    /// A header as a string ("" when absent or not UTF-8).
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }
}

#[derive(Debug, Default)]
struct State {
    requests: Mutex<Vec<Recorded>>,
    behaviours: Mutex<HashMap<String, Behaviour>>,
    seen: Mutex<HashMap<String, u32>>,
    /// When each path's first request arrived.
    first_at: Mutex<HashMap<String, Instant>>,
    /// Requests seen per `webhook-id`, of the ids a behaviour fails.
    seen_ids: Mutex<HashMap<String, u32>>,
    /// Per path: requests being handled now, and the most at once.
    in_flight: Mutex<HashMap<String, (usize, usize)>>,
    /// TCP connections accepted.
    connections: std::sync::atomic::AtomicUsize,
    arrived: Notify,
}

/// Counts a request of `path` as in flight until dropped.
struct InFlight {
    state: Arc<State>,
    path: String,
}

impl InFlight {
    fn start(state: &Arc<State>, path: &str) -> Self {
        let mut all = lock(&state.in_flight);
        let (now, most) = all.entry(path.to_owned()).or_default();
        *now += 1;
        *most = (*most).max(*now);
        drop(all);
        Self {
            state: Arc::clone(state),
            path: path.to_owned(),
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if let Some((now, _)) = lock(&self.state.in_flight).get_mut(&self.path) {
            *now = now.saturating_sub(1);
        }
    }
}

/// The running receiver.
#[derive(Debug)]
pub struct Receiver {
    addr: SocketAddr,
    scheme: &'static str,
    state: Arc<State>,
    task: JoinHandle<()>,
    ca_pem: Option<String>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
        // What was recorded goes now, not whenever the last connection task
        // (which holds the state too) ends: after a bench's throughput window
        // that is ~1M requests and a few GiB, and freeing them took a core for
        // about a second — in the middle of the next window, when the last
        // connection closed late.
        drop(std::mem::take(&mut *lock(&self.state.requests)));
        drop(std::mem::take(&mut *lock(&self.state.seen_ids)));
    }
}

impl Receiver {
    /// A plain-HTTP receiver; every path answers 204 until told otherwise.
    pub async fn start() -> anyhow::Result<Self> {
        Self::spawn(None).await
    }

    /// An HTTPS receiver with a fresh self-signed certificate for `localhost` and
    /// 127.0.0.1; [`ca_pem`](Self::ca_pem) is the certificate to trust.
    pub async fn start_tls() -> anyhow::Result<Self> {
        let cert = rcgen::generate_simple_self_signed(vec![
            "localhost".to_owned(),
            "127.0.0.1".to_owned(),
        ])
        .context("generating a test certificate")?;
        let ca_pem = cert.cert.pem();
        let key = rustls::pki_types::PrivateKeyDer::Pkcs8(
            rustls::pki_types::PrivatePkcs8KeyDer::from(cert.key_pair.serialize_der()),
        );
        let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(vec![cert.cert.der().clone()], key)
        .context("building the TLS server config")?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        let mut receiver =
            Self::spawn(Some(tokio_rustls::TlsAcceptor::from(Arc::new(config)))).await?;
        receiver.ca_pem = Some(ca_pem);
        Ok(receiver)
    }

    async fn spawn(tls: Option<tokio_rustls::TlsAcceptor>) -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(State::default());
        let scheme = if tls.is_some() { "https" } else { "http" };
        let task = tokio::spawn(accept_loop(listener, tls, Arc::clone(&state)));
        Ok(Self {
            addr,
            scheme,
            state,
            task,
            ca_pem: None,
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:<port><path>` (or https).
    pub fn url(&self, path: &str) -> String {
        format!("{}://{}{path}", self.scheme, self.addr)
    }

    /// The PEM certificate of an HTTPS receiver.
    pub fn ca_pem(&self) -> Option<&str> {
        self.ca_pem.as_deref()
    }

    /// Sets how `path` answers from now on.
    pub fn set(&self, path: &str, behaviour: Behaviour) {
        lock(&self.state.behaviours).insert(path.to_owned(), behaviour);
    }

    /// Every request so far, in arrival order.
    pub fn requests(&self) -> Vec<Recorded> {
        lock(&self.state.requests).clone()
    }

    /// Requests to `path` so far.
    pub fn requests_to(&self, path: &str) -> Vec<Recorded> {
        lock(&self.state.requests)
            .iter()
            .filter(|r| r.path == path)
            .cloned()
            .collect()
    }

    pub fn count(&self) -> usize {
        lock(&self.state.requests).len()
    }

    /// How many requests to `path` have arrived, without copying them: cheap
    /// enough to poll while deliveries flow. [`requests_to`](Self::requests_to)
    /// clones every recorded request under the lock every handler takes, so
    /// polling it with 100,000 recorded stalls the receiver itself (~100 ms
    /// per call on the bench machine) and shows up as the sender's latency.
    pub fn count_to(&self, path: &str) -> usize {
        lock(&self.state.seen).get(path).map_or(0, |n| *n as usize)
    }

    /// TCP connections accepted so far: how many a sender opened, so a test
    /// can tell a reused keep-alive connection from a new one.
    pub fn connections(&self) -> usize {
        self.state
            .connections
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The most requests to `path` the receiver was handling at once (from
    /// arrival until its answer, delay included): an exact check of a
    /// sender's concurrency cap, with no timing in it.
    pub fn max_in_flight(&self, path: &str) -> usize {
        lock(&self.state.in_flight)
            .get(path)
            .map_or(0, |(_, most)| *most)
    }

    /// Waits until `done` holds for the requests so far, or `timeout` passes;
    /// returns whether it held.
    pub async fn wait_until(
        &self,
        timeout: Duration,
        mut done: impl FnMut(&[Recorded]) -> bool,
    ) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.state.arrived.notified();
            if done(&lock(&self.state.requests)) {
                return true;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return done(&lock(&self.state.requests));
            }
        }
    }
}

async fn accept_loop(
    listener: TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    state: Arc<State>,
) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        state
            .connections
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let state = Arc::clone(&state);
        let tls = tls.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| handle(Arc::clone(&state), req));
            let builder = auto::Builder::new(TokioExecutor::new());
            match tls {
                None => {
                    let _ = builder
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                }
                Some(acceptor) => {
                    if let Ok(stream) = acceptor.accept(stream).await {
                        let _ = builder
                            .serve_connection(TokioIo::new(stream), service)
                            .await;
                    }
                }
            }
        });
    }
}

async fn handle(
    state: Arc<State>,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let at = Instant::now();
    let received_at = SystemTime::now();
    let _in_flight = InFlight::start(&state, req.uri().path());
    let (parts, body) = req.into_parts();
    let body = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let path = parts.uri.path().to_owned();
    let behaviour = lock(&state.behaviours)
        .get(&path)
        .cloned()
        .unwrap_or_default();
    let nth = {
        let mut seen = lock(&state.seen);
        let n = seen.entry(path.clone()).or_default();
        *n += 1;
        *n
    };
    let id = parts
        .headers
        .get("webhook-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    // Counted only for the ids a behaviour fails: a map of every id grows
    // (and rehashes) through a bench's million requests.
    let failing_id = behaviour.fail_first_of.contains(&id) && {
        let mut seen = lock(&state.seen_ids);
        let n = seen.entry(id).or_default();
        *n += 1;
        *n <= behaviour.fail_times_of
    };
    let in_outage = !behaviour.fail_for.is_zero() && {
        let first = *lock(&state.first_at).entry(path.clone()).or_insert(at);
        at.duration_since(first) < behaviour.fail_for
    };
    let status = if nth <= behaviour.fail_first || failing_id || in_outage {
        behaviour.fail_status
    } else {
        behaviour.status
    };
    // Kept as copies: hyper's body and header values are slices of its read
    // buffer, and keeping them would keep that whole buffer (~8 KiB) per
    // request and make hyper allocate a new one for the next: ~5 GiB after a
    // bench's throughput window, and a third of the bench's CPU spent growing
    // the heap while it measured.
    let mut headers = parts.headers;
    for value in headers.values_mut() {
        if let Ok(copy) = HeaderValue::from_bytes(value.as_bytes()) {
            *value = copy;
        }
    }
    lock(&state.requests).push(Recorded {
        method: parts.method,
        path,
        version: parts.version,
        headers,
        body: Bytes::copy_from_slice(&body),
        at,
        received_at,
        status,
    });
    state.arrived.notify_waiters();
    if !behaviour.delay.is_zero() {
        tokio::time::sleep(behaviour.delay).await;
    }
    let mut response = Response::builder().status(status);
    if let Some(ra) = behaviour.retry_after.as_deref().filter(|_| status >= 300) {
        response = response.header("retry-after", ra);
    }
    for (name, value) in &behaviour.headers {
        response = response.header(name, value);
    }
    Ok(response
        .body(Full::new(behaviour.body.clone()))
        .unwrap_or_else(|_| Response::new(Full::new(Bytes::new()))))
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
