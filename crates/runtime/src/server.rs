//! The operations endpoint: `/metrics` (Prometheus text), `/healthz`,
//! `/readyz`, served on one port until shutdown.

use std::{convert::Infallible, net::SocketAddr, time::Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::{body::Incoming, service::service_fn, Method, Request, Response, StatusCode};
use hyper_util::{
    rt::{TokioExecutor, TokioIo},
    server::conn::auto,
};
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::{health::Health, RuntimeError};

/// A bound operations endpoint; `serve` runs it until the token is cancelled.
#[derive(Debug)]
pub struct OpsServer {
    listener: TcpListener,
    health: Health,
    metrics: PrometheusHandle,
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
        })
    }

    /// The address actually bound (useful with port 0).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `stop` is cancelled.
    pub async fn serve(self, stop: CancellationToken) {
        loop {
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
            tokio::spawn(async move {
                let service = service_fn(move |req| {
                    let reply = respond(&req, &health, &metrics);
                    async move { Ok::<_, Infallible>(reply) }
                });
                let builder = auto::Builder::new(TokioExecutor::new());
                let conn = builder.serve_connection(TokioIo::new(stream), service);
                tokio::select! {
                    _ = conn => {}
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
