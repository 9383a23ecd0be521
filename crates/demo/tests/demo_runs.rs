//! `make demo` ends by itself with a summary that adds up, and every path of
//! the story happened: delivered, recovered after 503s, rejected, exhausted
//! after the whole ladder, quarantined; and no Kafka client outlives it.

use std::process::Command;

#[test]
fn demo_settles_and_its_summary_adds_up() {
    let out = Command::new(env!("CARGO_BIN_EXE_hookline-demo"))
        .args([
            "--events-per-tenant",
            "6",
            "--publish-over",
            "2s",
            "--deadline",
            "90s",
        ])
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("run hookline-demo");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "demo failed:\n{stdout}\n{stderr}");
    let line = |label: &str| -> usize {
        stdout
            .lines()
            .find(|l| l.trim_start().starts_with(label))
            .and_then(|l| {
                l.trim_start()[label.len()..]
                    .split_whitespace()
                    .find_map(|w| w.parse().ok())
            })
            .unwrap_or_else(|| panic!("no `{label}` line in:\n{stdout}"))
    };
    assert!(stdout.contains("(adds up)"), "{stdout}");
    // 6 events x 5 tenants, round-robin over three types: see scenario.rs.
    assert_eq!(line("deliveries expected"), 24, "{stdout}");
    assert_eq!(line("delivered"), 18, "{stdout}");
    // The 410 disables its subscription: its other three deliveries are kept, unattempted.
    assert_eq!(line("dead-lettered"), 6, "{stdout}");
    assert_eq!(line("gone"), 1, "{stdout}");
    assert_eq!(line("subscription_disabled"), 3, "{stdout}");
    // The down endpoint's two deliveries climb the whole ladder before its
    // breaker could park them.
    assert_eq!(line("exhausted"), 2, "{stdout}");
    assert_eq!(line("still retrying"), 0, "{stdout}");
    assert!(stdout.contains("quarantined: 2"), "{stdout}");
    // The mock cluster listens in-process for the whole run, so a refused
    // connection means a client outlived its stage and tried to reach the
    // cluster after the demo had dropped it.
    assert!(
        !stderr.contains("Connection refused"),
        "a Kafka client outlived its stage:\n{stderr}"
    );
}
