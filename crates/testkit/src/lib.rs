//! Test-only support: the real Kafka broker every integration test shares,
//! unique names so tests never see each other, and small client helpers.
//! Nothing here is used by the services themselves.

pub mod kafka;
pub mod receiver;
pub mod records;

pub use kafka::{brokers, unique_name};
