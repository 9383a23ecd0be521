//! The named scenarios and what they share: a warm-up that proves the whole
//! pipeline is joined and connected before anything is measured, and an
//! open-loop pacer that produces at a fixed rate whatever the pipeline does.

pub mod backlog;
pub mod isolation;
pub mod latency;
pub mod limit;
pub mod retry_lateness;
pub mod throughput;

use std::time::Duration;

use anyhow::Context as _;
use hookline_testkit::receiver::Recorded;
use tokio::time::Instant;

use crate::{
    bare::{self, Bare},
    pipeline::{epoch_us, sent_us, Pipeline},
    stats::Summary,
};
use hookline_envelope::Subscription;

/// Names accepted on the command line, in the order `all` runs them (`limit`
/// first whenever it is named, so the others can print their ratio to it).
pub const ALL: &[&str] = &[
    "limit",
    "throughput",
    "latency",
    "isolation",
    "retry_lateness",
    "backlog",
];

/// What later scenarios may use from earlier ones.
#[derive(Debug, Default)]
pub struct Context {
    /// Events/s hookline's throughput scenario sustained (its peak, at
    /// `BENCH_FANOUT`).
    pub throughput_events_per_s: Option<f64>,
    /// What the `limit` scenario's saturated window measured.
    pub limit: Option<throughput::Measured>,
    /// The `limit` scenario's rate (events/s) and end-to-end waits.
    pub limit_latency: Option<(f64, Summary)>,
    /// The same, with the hand-off in transactions (`Path::BareTxn`).
    pub limit_txn_latency: Option<(f64, Summary)>,
}

/// What carries the events from `events` to the receiver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Path {
    /// The three hookline processes.
    Hookline,
    /// The bare loops of `bare.rs`, in the bench process.
    Bare,
    /// The same, with the events → deliveries hand-off in Kafka transactions
    /// as fanout's: the floor of a path that keeps it exactly once.
    BareTxn,
}

/// Starts `path` on `p` with `subs` already written; the bare loops run until
/// the returned value is dropped.
pub async fn start(
    p: &mut Pipeline,
    path: Path,
    subs: &[Subscription],
) -> anyhow::Result<Option<Bare>> {
    match path {
        Path::Hookline => p.start().await.map(|()| None),
        Path::Bare | Path::BareTxn => {
            let mut by_tenant: std::collections::HashMap<String, Vec<String>> =
                std::collections::HashMap::new();
            for s in subs {
                by_tenant
                    .entry(s.tenant_id.clone())
                    .or_default()
                    .push(s.subscription_id.clone());
            }
            let in_flight = subs
                .first()
                .map_or(16, |s| usize::try_from(s.max_in_flight).unwrap_or(16));
            bare::start(p, by_tenant, in_flight, path == Path::BareTxn)
                .await
                .map(Some)
        }
    }
}

/// Stall after which a scenario stops waiting for deliveries and counts them.
pub const STALL: Duration = Duration::from_secs(60);

/// One event per tenant, all delivered, before anything is measured.
pub async fn warm_up(
    p: &mut Pipeline,
    seq: &mut u64,
    tenants: &[String],
    payload: usize,
) -> anyhow::Result<()> {
    let events = tenants
        .iter()
        .map(|t| {
            *seq += 1;
            p.event(*seq, t, payload)
        })
        .collect();
    p.produce(events).await?;
    anyhow::ensure!(
        p.wait_for_requests(p.expected(), STALL).await,
        "warm-up: only {} of {} deliveries arrived",
        p.receiver.count(),
        p.expected()
    );
    Ok(())
}

/// Produces `rate` events/s for `duration` (or until `until` says stop), taking
/// the tenant of each from `tenant`, without waiting for acknowledgements in
/// between; returns the events sent and the achieved rate.
pub async fn pace(
    p: &mut Pipeline,
    seq: &mut u64,
    rate: f64,
    duration: Duration,
    payload: usize,
    mut tenant: impl FnMut(u64) -> String,
    mut until: impl FnMut(&Pipeline) -> bool,
) -> anyhow::Result<(u64, f64)> {
    let start = Instant::now();
    let total = (rate * duration.as_secs_f64()).ceil() as u64;
    let mut sent = 0u64;
    let mut acks = Vec::with_capacity(total as usize);
    let mut checked = start;
    while sent < total {
        // `until` may read the receiver's records: not on every tick.
        if checked.elapsed() >= Duration::from_millis(100) {
            if until(p) {
                break;
            }
            checked = Instant::now();
        }
        let due = ((start.elapsed().as_secs_f64() * rate) as u64 + 1).min(total);
        while sent < due {
            *seq += 1;
            let event = p.event(*seq, &tenant(sent), payload);
            acks.push(p.send(&event)?);
            sent += 1;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let secs = start.elapsed().as_secs_f64();
    for ack in acks {
        ack.await
            .context("producer dropped an event")?
            .map_err(|(e, _)| anyhow::anyhow!("producing an event: {e}"))?;
    }
    Ok((sent, sent as f64 / secs.max(1e-9)))
}

/// Each delivery's first successful arrival among the requests `keep`
/// selects: its wait in µs from its production (stamped in its payload), when
/// it was produced (µs since the epoch) and the request.
pub fn waits(
    requests: &[Recorded],
    mut keep: impl FnMut(&Recorded, i64) -> bool,
) -> Vec<(i64, i64, &Recorded)> {
    let mut seen = std::collections::HashSet::new();
    requests
        .iter()
        .filter(|r| (200..300).contains(&r.status))
        .filter_map(|r| Some((r, sent_us(&r.body)?)))
        .filter(|(r, sent)| keep(r, *sent) && seen.insert(r.header("webhook-id").to_owned()))
        .map(|(r, sent)| (epoch_us(r.received_at) - sent, sent, r))
        .collect()
}

/// [`waits`] in milliseconds.
pub fn waits_ms(requests: &[Recorded], keep: impl FnMut(&Recorded, i64) -> bool) -> Vec<f64> {
    waits(requests, keep)
        .into_iter()
        .map(|(wait, ..)| wait as f64 / 1000.0)
        .collect()
}
