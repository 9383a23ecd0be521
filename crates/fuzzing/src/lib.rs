//! Run settings shared by the proptest-based fuzz targets (envelope decode,
//! classification, the HTTP client): `HOOKLINE_FUZZ_CASES` sets how many
//! inputs, `HOOKLINE_FUZZ_SEED` replays a run (each target prints its seed).
//!
//! A crate of its own, with no dependencies, so that the fuzz targets of
//! `hookline-core` and `hookline-envelope` do not build `hookline-testkit`
//! (librdkafka, hyper, rustls) for two environment variables.

/// `HOOKLINE_FUZZ_CASES`, or `default`. A value that is not a whole number
/// fails the test rather than silently running the default.
pub fn cases(default: u32) -> u32 {
    match std::env::var("HOOKLINE_FUZZ_CASES") {
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("HOOKLINE_FUZZ_CASES={v:?}: expected a whole number")),
        Err(_) => default,
    }
}

/// `HOOKLINE_FUZZ_SEED`, or one taken from the clock.
pub fn seed() -> u64 {
    match std::env::var("HOOKLINE_FUZZ_SEED") {
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("HOOKLINE_FUZZ_SEED={v:?}: expected a whole number")),
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64),
    }
}
