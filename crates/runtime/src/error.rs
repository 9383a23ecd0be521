//! The runtime crate's error type: every failure names what was being done.

use std::net::SocketAddr;

/// Errors raised by the shared adapters.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// A `-X key=value` passthrough entry is malformed.
    #[error("invalid librdkafka passthrough `{entry}`: {why} (expected -X key=value or -X key=@/path/to/file)")]
    Passthrough { entry: String, why: String },
    /// A passthrough value read from a file could not be read.
    #[error("cannot read librdkafka setting `{key}` from {path}: {source}")]
    PassthroughFile {
        key: String,
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// A `-X` entry sets a group setting hookline owns; the flag named sets it.
    #[error("-X {key} cannot be passed through: hookline sets it ({instead})")]
    OwnedSetting { key: String, instead: &'static str },
    /// A shared flag has a value that cannot work.
    #[error("invalid {flag}: {why}")]
    Flag { flag: &'static str, why: String },
    /// librdkafka refused a client configuration or an operation.
    #[error("kafka {context}: {source}")]
    Kafka {
        context: String,
        #[source]
        source: rdkafka::error::KafkaError,
    },
    /// The health/metrics endpoint could not bind.
    #[error("cannot listen on {addr} for /metrics, /healthz and /readyz (flag --http-addr / HOOKLINE_HTTP_ADDR): {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    /// The Prometheus recorder could not be installed.
    #[error("cannot install the metrics recorder: {0}")]
    Metrics(String),
    /// The subscription table did not catch up in time.
    #[error("the subscription table on {topic} did not catch up within {timeout:?}; is the topic there and the broker reachable?")]
    NotCaughtUp {
        topic: String,
        timeout: std::time::Duration,
    },
    /// Tracing could not be initialised.
    #[error("cannot initialise logging: {0}")]
    Logging(String),
    /// A second shutdown signal arrived while draining; the drain was given up.
    #[error("second signal; exiting without draining")]
    Forced,
}

impl RuntimeError {
    /// Wraps a librdkafka error with what was being attempted.
    pub fn kafka(context: impl Into<String>, source: rdkafka::error::KafkaError) -> Self {
        Self::Kafka {
            context: context.into(),
            source,
        }
    }
}
