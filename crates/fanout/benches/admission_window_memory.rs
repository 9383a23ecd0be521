//! Memory per key of the duplicate-admission window: fills one partition's
//! window with BENCH_KEYS distinct keys (default 1,000,000, the default
//! `--dedup-max-keys`), all within the window, and prints the growth of the
//! resident set per key. Prints figures; asserts nothing. No broker needed.
//!
//! `cargo bench -p hookline-fanout --bench admission_window_memory`

use std::time::Duration;

use hookline_core::admission::{AdmissionWindow, Fingerprint, KeyHash};

fn main() {
    let n: u64 = std::env::var("BENCH_KEYS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let before = hookline_testkit::rss_kib();
    let mut window = AdmissionWindow::new(Duration::from_secs(300), usize::MAX);
    for i in 0..n {
        // Spread like a real hash; timestamps advance 1 ms per 10 events (all
        // inside the 5-minute window at the default 1,000,000 keys).
        let key = KeyHash([i.wrapping_mul(0x9e37_79b9_7f4a_7c15), i]);
        window.observe(key, Fingerprint(i), 1_700_000_000_000 + (i / 10) as i64);
    }
    let after = hookline_testkit::rss_kib();
    let bytes = (after.saturating_sub(before) * 1024) as f64 / n as f64;
    println!(
        "{n} keys held: {} (RSS {before} KiB -> {after} KiB): {bytes:.0} bytes per key",
        window.len()
    );
}
