//! Logs of the services a test runs in-process: `RUST_LOG` (default `warn`),
//! captured per test by the test harness, so a failing test shows what the
//! stages were doing and a passing one prints nothing.

/// Installs the subscriber once per test binary; later calls do nothing.
pub fn init() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_test_writer()
        .try_init();
}
