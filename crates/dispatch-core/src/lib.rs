//! The dispatcher's decisions, with no I/O: the delivery state machine
//! ([`machine`]), what follows an attempt ([`outcome`]), the watermark of each
//! partition's offsets ([`offsets`]), how far a held partition's backlog reaches
//! ([`backlog`]), the rules of where a delivery goes ([`directory`]), and the
//! building of every record the dispatcher hands to a transaction ([`handoff`],
//! [`build`], [`disable`], [`attempt_log`], [`health`]). Records, completions, timers,
//! assignments and revocations go in with `now`; actions and hand-offs come out.
//!
//! This crate depends on `hookline-core` and `hookline-envelope` only: no
//! rdkafka, tokio or hyper, so the compiler keeps the decisions free of I/O.
//! The dispatcher's engine (`crates/dispatcher/src/engine/`) carries them out
//! against Kafka and HTTP. See docs/design.md#the-engine.

pub mod attempt;
pub mod attempt_log;
pub mod backlog;
pub mod build;
pub mod directory;
pub mod disable;
pub mod handoff;
pub mod health;
pub mod machine;
pub mod offsets;
pub mod outcome;
pub mod part;
