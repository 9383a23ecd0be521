//! Test-only support: the real Kafka broker every integration test shares,
//! unique names so tests never see each other, small client helpers, and the
//! process harness (`stage`, `pipeline`) that `make bench` and `make faults`
//! run the real binaries with. Nothing here is used by the services themselves.

pub mod allocator;
pub mod hostile;
pub mod kafka;
pub mod logs;
pub mod pipeline;
pub mod process;
pub mod receiver;
pub mod records;
pub mod scraped;
pub mod stage;

/// The resident set of this process in KiB (0 where `/proc` has none), for
/// tests and benches that print memory figures.
pub fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

pub use kafka::{brokers, unique_name};
