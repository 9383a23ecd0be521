//! Test-only support: the real Kafka broker every integration test shares,
//! unique names so tests never see each other, small client helpers, and the
//! process harness (`stage`, `pipeline`) that `make bench` and `make faults`
//! run the real binaries with. Nothing here is used by the services themselves.

pub mod hostile;
pub mod kafka;
pub mod logs;
pub mod pipeline;
pub mod receiver;
pub mod records;
pub mod stage;

pub use kafka::{brokers, unique_name};
