//! The operations endpoint: `/metrics` (Prometheus text), `/healthz`,
//! `/readyz`, served on one port until shutdown. At most
//! [`OpsLimits::max_connections`] connections are served at once (a client past
//! the cap waits in the listen backlog); a connection that sends nothing, or not
//! a request's headers, within [`OpsLimits::header_read_timeout`] is closed, and
//! none lives longer than [`OpsLimits::max_connection_age`] (a keep-alive
//! scraper reconnects), so idle or slow clients cannot hold the slots for good.

use std::{
    convert::Infallible,
    net::SocketAddr,
    sync::Arc,
    time::{Duration, Instant},
};

use bytes::Bytes;
use http_body_util::Full;
use hyper::{body::Incoming, service::service_fn, Method, Request, Response, StatusCode};
use hyper_util::{
    rt::{TokioExecutor, TokioIo, TokioTimer},
    server::conn::auto,
};
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::{net::TcpListener, sync::Semaphore};
use tokio_util::sync::CancellationToken;

use crate::{health::Health, RuntimeError};

/// Bounds on the clients of the operations endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpsLimits {
    /// Connections served at once; probes and a scraper or two need a handful.
    pub max_connections: usize,
    /// Longest a connection may take to send its first byte, and then each
    /// request's headers.
    pub header_read_timeout: Duration,
    /// Longest a connection is kept, idle keep-alive included.
    pub max_connection_age: Duration,
}

impl Default for OpsLimits {
    fn default() -> Self {
        Self {
            max_connections: 32,
            header_read_timeout: Duration::from_secs(10),
            max_connection_age: Duration::from_secs(60),
        }
    }
}

/// A bound operations endpoint; `serve` runs it until the token is cancelled.
#[derive(Debug)]
pub struct OpsServer {
    listener: TcpListener,
    health: Health,
    metrics: PrometheusHandle,
    limits: OpsLimits,
}

impl OpsServer {
    /// Binds now so a port conflict fails start-up instead of a background task.
    pub async fn bind(
        addr: SocketAddr,
        health: Health,
        metrics: PrometheusHandle,
    ) -> Result<Self, RuntimeError> {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| RuntimeError::Bind { addr, source })?;
        Ok(Self {
            listener,
            health,
            metrics,
            limits: OpsLimits::default(),
        })
    }

    /// Replaces the default [`OpsLimits`].
    pub fn with_limits(mut self, limits: OpsLimits) -> Self {
        self.limits = limits;
        self
    }

    /// The address actually bound (useful with port 0).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `stop` is cancelled.
    pub async fn serve(self, stop: CancellationToken) {
        let slots = Arc::new(Semaphore::new(self.limits.max_connections.max(1)));
        let mut builder = auto::Builder::new(TokioExecutor::new());
        builder
            .http1()
            .timer(TokioTimer::new())
            .header_read_timeout(self.limits.header_read_timeout);
        let builder = Arc::new(builder);
        loop {
            // A slot first: past the cap, clients wait in the listen backlog
            // instead of each holding a task here.
            let slot = tokio::select! {
                _ = stop.cancelled() => return,
                slot = Arc::clone(&slots).acquire_owned() => match slot {
                    Ok(slot) => slot,
                    Err(_) => return, // never closed
                },
            };
            let accepted = tokio::select! {
                _ = stop.cancelled() => return,
                accepted = self.listener.accept() => accepted,
            };
            let (stream, _) = match accepted {
                Ok(conn) => conn,
                Err(error) => {
                    tracing::warn!(%error, "ops endpoint accept failed");
                    continue;
                }
            };
            let health = self.health.clone();
            let metrics = self.metrics.clone();
            let stop = stop.clone();
            let builder = Arc::clone(&builder);
            let limits = self.limits;
            tokio::spawn(async move {
                let _slot = slot;
                // hyper's header timeout starts with the first byte (the auto
                // builder reads it to tell HTTP/1 from HTTP/2): wait for it here.
                let mut first = [0_u8; 1];
                let first =
                    tokio::time::timeout(limits.header_read_timeout, stream.peek(&mut first));
                if !matches!(first.await, Ok(Ok(1..))) {
                    return;
                }
                let service = service_fn(move |req| {
                    let reply = respond(&req, &health, &metrics);
                    async move { Ok::<_, Infallible>(reply) }
                });
                let conn = builder.serve_connection(TokioIo::new(stream), service);
                tokio::select! {
                    _ = conn => {}
                    _ = tokio::time::sleep(limits.max_connection_age) => {}
                    _ = stop.cancelled() => {}
                }
            });
        }
    }
}

fn respond(
    req: &Request<Incoming>,
    health: &Health,
    metrics: &PrometheusHandle,
) -> Response<Full<Bytes>> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "GET only\n".to_owned());
    }
    match req.uri().path() {
        "/metrics" => {
            let mut reply = text(StatusCode::OK, metrics.render());
            reply.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static("text/plain; version=0.0.4"),
            );
            reply
        }
        "/healthz" => verdict(health.liveness(Instant::now())),
        "/readyz" => verdict(health.readiness()),
        "/capacity" => match health.report("capacity") {
            Some(json) => {
                let mut reply = text(StatusCode::OK, json);
                reply.headers_mut().insert(
                    hyper::header::CONTENT_TYPE,
                    hyper::header::HeaderValue::from_static("application/json"),
                );
                reply
            }
            None => text(
                StatusCode::NOT_FOUND,
                "no capacity report here: a running dispatcher or fanout publishes one\n"
                    .to_owned(),
            ),
        },
        _ => text(
            StatusCode::NOT_FOUND,
            "try /metrics, /healthz or /readyz\n".to_owned(),
        ),
    }
}

fn verdict(v: crate::health::Verdict) -> Response<Full<Bytes>> {
    let status = if v.ok {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    text(status, v.detail)
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut reply = Response::new(Full::new(Bytes::from(body)));
    *reply.status_mut() = status;
    reply
}

#[cfg(test)]
mod tests {
    use metrics_exporter_prometheus::PrometheusBuilder;
    use tokio::{
        io::{AsyncReadExt, AsyncWriteExt},
        net::TcpStream,
    };

    use super::*;

    const PROBE: &[u8] = b"GET /healthz HTTP/1.1\r\nhost: ops\r\nconnection: close\r\n\r\n";

    async fn start(limits: OpsLimits) -> (SocketAddr, CancellationToken) {
        let handle = PrometheusBuilder::new().build_recorder().handle();
        let server = OpsServer::bind(
            "127.0.0.1:0".parse().unwrap(),
            Health::new(Duration::from_secs(60)),
            handle,
        )
        .await
        .unwrap()
        .with_limits(limits);
        let addr = server.local_addr().unwrap();
        let stop = CancellationToken::new();
        tokio::spawn(server.serve(stop.clone()));
        (addr, stop)
    }

    /// Sends a probe and reads the whole reply (the server closes after it).
    async fn probe(stream: &mut TcpStream) -> String {
        stream.write_all(PROBE).await.unwrap();
        let mut reply = Vec::new();
        stream.read_to_end(&mut reply).await.unwrap();
        String::from_utf8_lossy(&reply).into_owned()
    }

    #[tokio::test]
    async fn a_client_past_the_cap_waits_for_a_free_slot() {
        let limits = OpsLimits {
            max_connections: 2,
            header_read_timeout: Duration::from_secs(30),
            max_connection_age: Duration::from_secs(30),
        };
        let (addr, stop) = start(limits).await;
        let idle_a = TcpStream::connect(addr).await.unwrap();
        let _idle_b = TcpStream::connect(addr).await.unwrap();
        let mut third = TcpStream::connect(addr).await.unwrap();
        third.write_all(PROBE).await.unwrap();
        let mut byte = [0_u8; 1];
        let early = tokio::time::timeout(Duration::from_millis(300), third.read(&mut byte)).await;
        assert!(early.is_err(), "served past the cap of 2");
        drop(idle_a);
        let mut reply = Vec::new();
        tokio::time::timeout(Duration::from_secs(5), third.read_to_end(&mut reply))
            .await
            .expect("served once a slot is free")
            .unwrap();
        assert!(String::from_utf8_lossy(&reply).starts_with("HTTP/1.1 200"));
        stop.cancel();
    }

    #[tokio::test]
    async fn a_silent_connection_is_closed_and_frees_its_slot() {
        let limits = OpsLimits {
            max_connections: 1,
            header_read_timeout: Duration::from_millis(200),
            max_connection_age: Duration::from_secs(30),
        };
        let (addr, stop) = start(limits).await;
        let mut silent = TcpStream::connect(addr).await.unwrap();
        let mut rest = Vec::new();
        // Closed (an end of stream or a reset), whatever hyper says first.
        let _closed = tokio::time::timeout(Duration::from_secs(5), silent.read_to_end(&mut rest))
            .await
            .expect("the server closes a connection that sends nothing");
        let mut next = TcpStream::connect(addr).await.unwrap();
        let reply = tokio::time::timeout(Duration::from_secs(5), probe(&mut next))
            .await
            .expect("the freed slot serves the next client");
        assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
        stop.cancel();
    }

    #[tokio::test]
    async fn a_kept_alive_connection_is_closed_at_its_age() {
        let limits = OpsLimits {
            max_connections: 1,
            header_read_timeout: Duration::from_secs(30),
            max_connection_age: Duration::from_millis(300),
        };
        let (addr, stop) = start(limits).await;
        let mut kept = TcpStream::connect(addr).await.unwrap();
        kept.write_all(b"GET /readyz HTTP/1.1\r\nhost: ops\r\n\r\n")
            .await
            .unwrap();
        let mut reply = Vec::new();
        let _closed = tokio::time::timeout(Duration::from_secs(5), kept.read_to_end(&mut reply))
            .await
            .expect("closed at its age although the client keeps it alive");
        assert!(String::from_utf8_lossy(&reply).starts_with("HTTP/1.1 503"));
        let mut next = TcpStream::connect(addr).await.unwrap();
        let reply = tokio::time::timeout(Duration::from_secs(5), probe(&mut next))
            .await
            .expect("the freed slot serves the next client");
        assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
        stop.cancel();
    }
}
