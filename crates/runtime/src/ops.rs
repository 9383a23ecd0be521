//! Start-up of the operations side every service shares: metrics recorder,
//! health state and the `/metrics` `/healthz` `/readyz` endpoint.

use std::{net::SocketAddr, time::Duration};

use metrics_exporter_prometheus::PrometheusHandle;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::{health::Health, metric_names, server::OpsServer, RuntimeError};

/// A loop that has not beaten for this long fails `/healthz`.
pub const LIVENESS_STALE_AFTER: Duration = Duration::from_secs(60);

/// The running operations endpoint of one service.
#[derive(Debug)]
pub struct Ops {
    /// Shared health state: loops beat, components report readiness.
    pub health: Health,
    /// The Prometheus handle (render it for tests and the demo).
    pub metrics: PrometheusHandle,
    addr: SocketAddr,
    stop: CancellationToken,
    task: JoinHandle<()>,
}

impl Ops {
    /// Installs the recorder, binds the endpoint and starts serving.
    pub async fn start(addr: SocketAddr, stage: &'static str) -> Result<Self, RuntimeError> {
        let metrics = crate::telemetry::metrics_recorder()?;
        metrics::gauge!(
            metric_names::BUILD_INFO,
            metric_names::label::STAGE => stage,
            "version" => env!("CARGO_PKG_VERSION")
        )
        .set(1.0);
        let health = Health::new(LIVENESS_STALE_AFTER);
        let server = OpsServer::bind(addr, health.clone(), metrics.clone()).await?;
        let addr = server
            .local_addr()
            .map_err(|source| RuntimeError::Bind { addr, source })?;
        let stop = CancellationToken::new();
        let task = tokio::spawn(server.serve(stop.clone()));
        tracing::info!(%addr, stage, "serving /metrics, /healthz and /readyz");
        Ok(Self {
            health,
            metrics,
            addr,
            stop,
            task,
        })
    }

    /// The bound address of the endpoint.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops the endpoint (last, so probes see the drain).
    pub async fn stop(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }
}
