//! Adapters shared by the hookline services: configuration, Kafka clients,
//! telemetry, the health/metrics endpoint and shutdown. Stage logic lives in the
//! service crates; pure decisions live in `hookline-core`.

pub mod acls;
pub mod config;
pub mod group_watch;
pub mod health;
pub mod http;
pub mod kafka;
pub mod metric_names;
pub mod ops;
pub mod provision;
pub mod server;
pub mod shutdown;
pub mod signing;
pub mod subscriptions;
pub mod telemetry;
pub mod topic_check;

mod error;

pub use error::RuntimeError;
