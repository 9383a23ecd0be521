//! The bench's parameters, all from `BENCH_*` environment variables so
//! `make bench` passes them through untouched.

use serde::Serialize;

/// Parameters shared by the scenarios.
#[derive(Debug, Clone, Serialize)]
pub struct Params {
    /// `BENCH_SECONDS`: the measured window of throughput and latency; every
    /// other phase is scaled from it.
    pub seconds: u64,
    /// `BENCH_FANOUT`: subscriptions per event (per tenant) of the
    /// throughput scenario (the limit's and hookline's).
    pub fanout: usize,
    /// `BENCH_LATENCY_FANOUT`: subscriptions per event (per tenant) of the
    /// latency scenario, the limit's and hookline's (default 1: the latency
    /// guard of docs/benchmarks.md is stated at fan-out 1).
    pub latency_fanout: usize,
    /// `BENCH_PAYLOAD`: payload bytes per event.
    pub payload: usize,
    /// `BENCH_TENANTS`: tenants of the throughput and latency scenarios.
    pub tenants: usize,
    /// `BENCH_BACKLOG`: most deliveries in the pipeline while measuring throughput.
    pub backlog: usize,
    /// `BENCH_RATE`: events/s of the latency scenario (default: 30% of the
    /// throughput measured in the same run, else 100).
    pub rate: Option<f64>,
    /// `BENCH_SLOW_MS`: response time of the whale's endpoint.
    pub slow_ms: u64,
    /// `BENCH_WHALE_EVENTS`: the whale's import in `isolation`, in events
    /// (each matches its 8 subscriptions).
    pub whale_events: usize,
    /// `BENCH_SMALL_RATE`: the small tenant's events/s in the isolation scenario.
    pub small_rate: f64,
    /// `BENCH_QUEUED`: deliveries queued for the dispatcher in `backlog`.
    pub queued: usize,
    /// `BENCH_RETRY_ENDPOINTS`: endpoints (one delivery each) of retry_lateness.
    pub retry_endpoints: usize,
    /// `BENCH_RETRY_FAILS`: failures (503) each of them answers before 204
    /// (default: one per tier of the ladder).
    pub retry_fails: u32,
    /// `BENCH_RETRY_LADDER`: retry_lateness's tier delays in whole seconds,
    /// comma-separated (`1,2,4`; e.g. `1,2,4,60` for a tier of a minute).
    pub retry_ladder: Vec<u64>,
}

fn env<T: std::str::FromStr>(name: &str) -> anyhow::Result<Option<T>> {
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => v
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| anyhow::anyhow!("{name}={v:?} is not a valid number")),
        _ => Ok(None),
    }
}

/// `BENCH_RETRY_LADDER`: whole seconds, comma-separated, each at least 1.
fn ladder(value: Option<&str>) -> anyhow::Result<Vec<u64>> {
    let value = value
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .unwrap_or("1,2,4");
    let tiers: Vec<u64> = value
        .split(',')
        .map(|t| match t.trim().parse::<u64>() {
            Ok(s) if s >= 1 => Ok(s),
            _ => Err(anyhow::anyhow!(
                "BENCH_RETRY_LADDER={value:?}: each tier is a whole number of seconds, at least 1 (e.g. 1,2,4,60)"
            )),
        })
        .collect::<anyhow::Result<_>>()?;
    Ok(tiers)
}

impl Params {
    pub fn from_env() -> anyhow::Result<Self> {
        let seconds = env("BENCH_SECONDS")?.unwrap_or(30u64).max(1);
        let p = Self {
            seconds,
            fanout: env("BENCH_FANOUT")?.unwrap_or(3usize).max(1),
            latency_fanout: env("BENCH_LATENCY_FANOUT")?.unwrap_or(1usize).max(1),
            payload: env("BENCH_PAYLOAD")?.unwrap_or(512usize),
            tenants: env("BENCH_TENANTS")?.unwrap_or(20usize).max(1),
            backlog: env("BENCH_BACKLOG")?.unwrap_or(20_000usize).max(100),
            rate: env("BENCH_RATE")?,
            slow_ms: env("BENCH_SLOW_MS")?.unwrap_or(20u64),
            whale_events: env("BENCH_WHALE_EVENTS")?.unwrap_or(100_000usize).max(1),
            small_rate: env("BENCH_SMALL_RATE")?.unwrap_or(20.0f64),
            queued: env("BENCH_QUEUED")?.unwrap_or(1_000_000usize).max(1_000),
            retry_endpoints: env("BENCH_RETRY_ENDPOINTS")?.unwrap_or(100usize).max(1),
            retry_fails: 0,
            retry_ladder: ladder(std::env::var("BENCH_RETRY_LADDER").ok().as_deref())?,
        };
        let p = Self {
            retry_fails: env("BENCH_RETRY_FAILS")?.unwrap_or(p.retry_ladder.len() as u32),
            ..p
        };
        if let Some(rate) = p.rate {
            anyhow::ensure!(rate > 0.0, "BENCH_RATE must be positive");
        }
        anyhow::ensure!(p.small_rate > 0.0, "BENCH_SMALL_RATE must be positive");
        // The old name, counted in deliveries, would otherwise be ignored
        // without a word and the import be the default's size.
        anyhow::ensure!(
            std::env::var_os("BENCH_WHALE_DELIVERIES").is_none(),
            "BENCH_WHALE_DELIVERIES is gone: set BENCH_WHALE_EVENTS (events, 8 deliveries each) instead"
        );
        Ok(p)
    }

    /// `BENCH_SECONDS` as a duration times `factor`.
    pub fn scaled(&self, factor: f64) -> std::time::Duration {
        std::time::Duration::from_secs_f64(self.seconds as f64 * factor)
    }
}

#[cfg(test)]
mod tests {
    use super::ladder;

    #[test]
    fn the_ladder_is_whole_seconds() {
        assert_eq!(ladder(None).unwrap(), [1, 2, 4]);
        assert_eq!(ladder(Some(" 1, 2,4,60 ")).unwrap(), [1, 2, 4, 60]);
        for bad in ["1,,2", "0", "1.5", "1s", "-1"] {
            let e = ladder(Some(bad)).unwrap_err().to_string();
            assert!(e.contains("BENCH_RETRY_LADDER"), "{bad}: {e}");
        }
    }
}
