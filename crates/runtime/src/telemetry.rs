//! Logging and the Prometheus recorder. Both are process-global and installed
//! once, so the demo can run every stage in one process.

use std::sync::Mutex;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tracing_subscriber::{fmt, EnvFilter};

use crate::{config::LogFormat, metric_names, RuntimeError};

/// Latency buckets in seconds, shared by every `_seconds` histogram so they
/// aggregate across pods: 1 ms to 2 h.
pub const SECONDS_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    300.0, 900.0, 3600.0, 7200.0,
];

/// Size buckets in bytes for `_bytes` histograms: 256 B to 64 MiB.
pub const BYTES_BUCKETS: &[f64] = &[
    256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0, 4194304.0, 16777216.0, 67108864.0,
];

/// The one recorder of this process. A lock, not a `OnceLock` checked then
/// set: stages started at once in one process (the demo, end-to-end tests)
/// raced there — the loser of `install_recorder` looked before the winner had
/// published its handle, got an error and its stage exited at start, silently
/// (a dispatcher or sink in a test that then never consumed).
static RECORDER: Mutex<Option<PrometheusHandle>> = Mutex::new(None);

/// Installs the global Prometheus recorder (once) and returns its handle.
pub fn metrics_recorder() -> Result<PrometheusHandle, RuntimeError> {
    let mut slot = RECORDER.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(handle) = slot.as_ref() {
        return Ok(handle.clone());
    }
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), SECONDS_BUCKETS)
        .and_then(|b| b.set_buckets_for_metric(Matcher::Suffix("_bytes".into()), BYTES_BUCKETS))
        .map_err(|e| RuntimeError::Metrics(e.to_string()))?
        .install_recorder()
        .map_err(|e| RuntimeError::Metrics(e.to_string()))?;
    metric_names::describe_all();
    *slot = Some(handle.clone());
    Ok(handle)
}

/// Initialises `tracing` with the given filter and format. Calling it again is a
/// no-op (the first subscriber stays), which keeps in-process tests simple.
pub fn init_logging(filter: &str, format: LogFormat) -> Result<(), RuntimeError> {
    let filter = EnvFilter::try_new(filter)
        .map_err(|e| RuntimeError::Logging(format!("bad log filter `{filter}`: {e}")))?;
    let builder = fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
    Ok(())
}
