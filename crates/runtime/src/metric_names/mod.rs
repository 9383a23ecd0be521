//! The one home of metric names, one file per stage: `hookline_<stage>_<what>_<unit>`,
//! counters ending in `_total`, labels from small fixed sets (never tenant, URL or ids).

/// Label keys used across stages.
pub mod label {
    /// The stage (`fanout`, `dispatcher`, `dlq_sink`).
    pub const STAGE: &str = "stage";
    /// A logical topic name without prefix (`events`, `deliveries`, ...).
    pub const TOPIC: &str = "topic";
    /// A retry tier name (`retry-10s`, ...).
    pub const TIER: &str = "tier";
    /// A bounded attempt outcome (`delivered`, `http_5xx`, `timeout`, ...).
    pub const OUTCOME: &str = "outcome";
    /// An HTTP status class (`2xx`, `4xx`, `5xx`, `none`).
    pub const STATUS_CLASS: &str = "status_class";
    /// A bounded reason (`not_avro`, `exhausted`, ...).
    pub const REASON: &str = "reason";
    /// A circuit breaker's state (`open`, `closed`).
    pub const STATE: &str = "state";
    /// A stage's group consumer (`events`, `deliveries`, a tier, `dead-letters`).
    pub const CONSUMER: &str = "consumer";
    /// Whether a duplicate's payload matched (`same`, `changed`).
    pub const PAYLOAD: &str = "payload";
    /// A bounded kind of error event (`commit_failed`, `attempt_panicked`, ...).
    pub const KIND: &str = "kind";
    /// Attempt class: `first_attempt` or `retry`.
    pub const CLASS: &str = "class";
    /// An overflow lane: `lane-0` to `lane-7`.
    pub const LANE: &str = "lane";
    /// An overflow lane change: `promoted` or `demoted`.
    pub const CHANGE: &str = "change";
}

/// Always 1, with the stage and version as labels.
pub const BUILD_INFO: &str = "hookline_build_info";

mod consumer;
mod dispatcher;
mod dlq_sink;
mod fanout;
mod subscriptions;

pub use consumer::*;
pub use dispatcher::*;
pub use dlq_sink::*;
pub use fanout::*;
pub use subscriptions::*;

/// Registers help texts so `/metrics` is self-describing.
pub fn describe_all() {
    metrics::describe_gauge!(BUILD_INFO, "Always 1; labels carry version and stage.");
    subscriptions::describe();
    consumer::describe();
    fanout::describe();
    dispatcher::describe();
    dlq_sink::describe();
}
