//! `backlog`: the dispatcher's memory while `BENCH_QUEUED` deliveries
//! (1,000,000 by default) are queued for it, against the same dispatcher with
//! nothing queued, and how long the backlog takes to drain (its RSS must stay
//! flat, bounded by its buffer settings, not by the backlog).
//!
//! After a warm-up, the idle dispatcher's RSS is sampled, then it is stopped
//! (SIGTERM, a clean drain) while fanout writes the backlog: `BENCH_TENANTS`
//! tenants of one subscription each, round-robin. One tenant's endpoint fails
//! the first attempt of every `FAIL_EVERY`th of its deliveries (503), so an
//! eightieth of the backlog (with the default 20 tenants) also passes through
//! the first retry tier while the rest drains. Not every one: the circuit
//! breaker is on, with its defaults, and a run of failures or a failure ratio
//! of a half would open it and park the tenant's deliveries instead; one in
//! four keeps it closed. Then the dispatcher starts again (same
//! binary and flags) on the whole backlog, and its RSS is read from
//! `/proc/<pid>/status` every second until every delivery has arrived.

use std::time::{Duration, Instant};

use hookline_envelope::delivery_id;
use hookline_testkit::{kafka, receiver::Behaviour};

use super::{warm_up, Context, STALL};
use crate::{
    params::Params,
    pipeline::{Pipeline, Spec},
    report::Outcome,
};

const MAX_IN_FLIGHT: i32 = 16;
/// The flaky tenant's endpoint fails the first attempt of one delivery in this many.
const FAIL_EVERY: usize = 4;
const LADDER: &[(&str, u64)] = &[("retry-1s", 1), ("retry-2s", 2), ("retry-4s", 4)];
/// How long the idle dispatcher's RSS is sampled.
const IDLE_SAMPLES: usize = 5;
/// Events produced per call; the bench keeps no more in memory at once.
const CHUNK: usize = 50_000;
/// Longest fanout may take to write the backlog.
const FAN_OUT_LIMIT: Duration = Duration::from_secs(1_200);

pub async fn run(params: &Params, _ctx: &mut Context) -> Outcome {
    let mut out = Outcome::new("backlog");
    let mut spec = Spec::new("backlog");
    spec.tiers = LADDER
        .iter()
        .map(|(n, s)| ((*n).to_owned(), Duration::from_secs(*s)))
        .collect();
    let mut p = match Pipeline::create(spec).await {
        Ok(p) => p,
        Err(e) => return out.failed(e),
    };
    let result = body(&mut p, params, &mut out).await;
    out.finish(p, result).await
}

/// The resident set of `pid` in MiB, from `/proc/<pid>/status` (`VmRSS`).
fn rss_mib(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some(kb / 1024.0)
}

async fn body(p: &mut Pipeline, params: &Params, out: &mut Outcome) -> anyhow::Result<()> {
    let tenants: Vec<String> = (0..params.tenants).map(|t| format!("q{t}")).collect();
    let flaky = tenants[0].clone();
    let subs: Vec<_> = tenants
        .iter()
        .map(|t| p.subscription(&format!("{t}-s0"), t, &format!("/q/{t}"), MAX_IN_FLIGHT))
        .collect();
    p.put_subscriptions(&subs).await?;
    p.start().await?;
    let mut seq = 0;
    warm_up(p, &mut seq, &tenants, params.payload).await?;

    // The idle dispatcher, after the warm-up.
    let mut idle = Vec::new();
    for _ in 0..IDLE_SAMPLES {
        idle.extend(rss_mib(p.stage("dispatcher")?.pid()));
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let idle_mib = idle.iter().copied().fold(0.0, f64::max);
    anyhow::ensure!(idle_mib > 0.0, "could not read the dispatcher's RSS");

    // The backlog, written by fanout while the dispatcher is stopped.
    p.stage_mut("dispatcher")?
        .terminate(Duration::from_secs(60))
        .await?;
    let per_tenant = params.queued.div_ceil(tenants.len());
    let queued = per_tenant * tenants.len();
    let flaky_sub = format!("{flaky}-s0");
    let mut failing: std::collections::BTreeSet<String> = Default::default();
    let mut flaky_seen = 0;
    let writing = Instant::now();
    let mut left = queued;
    while left > 0 {
        let chunk: Vec<_> = (0..left.min(CHUNK))
            .map(|i| {
                seq += 1;
                let tenant = &tenants[i % tenants.len()];
                if *tenant == flaky {
                    if flaky_seen % FAIL_EVERY == 0 {
                        failing.insert(delivery_id(&p.event_id(seq), &flaky_sub));
                    }
                    flaky_seen += 1;
                }
                p.event(seq, tenant, params.payload)
            })
            .collect();
        left -= chunk.len();
        p.produce(chunk).await?;
    }
    let (_, end) = kafka::group_progress(&p.groups.fanout, p.topics.events()).await?;
    loop {
        let (committed, _) = kafka::group_progress(&p.groups.fanout, p.topics.events()).await?;
        if committed >= end {
            break;
        }
        anyhow::ensure!(
            writing.elapsed() < FAN_OUT_LIMIT,
            "fanout did not write the backlog within {FAN_OUT_LIMIT:?} ({committed} of {end} events)"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let fan_out_secs = writing.elapsed().as_secs_f64();
    let retried = failing.len();
    p.receiver.set(
        &format!("/q/{flaky}"),
        Behaviour::default().fail_first_of(failing, 1, 503),
    );

    // The dispatcher again, on the whole backlog.
    let before = p.receiver.count();
    let draining = Instant::now();
    p.stage_mut("dispatcher")?.restart().await?;
    let pid = p.stage("dispatcher")?.pid();
    let requests = queued + retried; // every delivery once, the failing ones twice
    let mut timeline: Vec<(f64, f64, usize)> = Vec::new();
    let mut last_progress = (Instant::now(), before);
    while p.receiver.count() - before < requests {
        let done = p.receiver.count() - before;
        if let Some(rss) = rss_mib(pid) {
            timeline.push((draining.elapsed().as_secs_f64(), rss, done));
        }
        if done > last_progress.1 {
            last_progress = (Instant::now(), done);
        }
        anyhow::ensure!(
            last_progress.0.elapsed() < STALL,
            "the backlog stopped draining: {done} of {requests} requests after {:.0} s",
            draining.elapsed().as_secs_f64()
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let drain_secs = draining.elapsed().as_secs_f64();
    let mut after = Vec::new();
    for _ in 0..IDLE_SAMPLES {
        tokio::time::sleep(Duration::from_secs(1)).await;
        after.extend(rss_mib(pid));
    }
    let tally = p.settle(STALL).await?;

    let during: Vec<f64> = timeline.iter().map(|(_, rss, _)| *rss).collect();
    let peak = during.iter().copied().fold(0.0, f64::max);
    let mut sorted = during.clone();
    sorted.sort_by(f64::total_cmp);
    let median = sorted.get(sorted.len() / 2).copied().unwrap_or(f64::NAN);
    let after_mib = after.iter().copied().fold(0.0, f64::max);
    // RSS at each tenth of the drain, to show it flat (or not).
    let tenths: Vec<String> = (0..10)
        .filter_map(|k| {
            let want = requests * k / 10;
            timeline
                .iter()
                .find(|(_, _, done)| *done >= want)
                .map(|(_, rss, _)| format!("{rss:.0}"))
        })
        .collect();
    out.settings = serde_json::json!({
        "queued_deliveries": queued,
        "tenants": tenants.len(),
        "first_attempt_fails_for": format!("tenant {flaky}: {retried} of its {per_tenant} deliveries into retry-1s"),
        "ladder": LADDER.iter().map(|(n, s)| format!("{n}={s}s")).collect::<Vec<_>>(),
        "max_in_flight_per_subscription": MAX_IN_FLIGHT,
    });
    out.figure(
        "dispatcher RSS idle (nothing queued)",
        format!("{idle_mib:.0} MiB"),
        "rss_idle_mib",
        idle_mib,
    );
    out.figure(
        "dispatcher RSS draining the backlog",
        format!(
            "median {median:.0} MiB, peak {peak:.0} MiB ({:.2} x idle), n={} samples",
            peak / idle_mib,
            during.len()
        ),
        "rss_draining_mib",
        serde_json::json!({ "median": median, "peak": peak, "peak_over_idle": peak / idle_mib }),
    );
    out.figure(
        "  RSS at each tenth of the drain",
        format!("{} MiB", tenths.join(", ")),
        "rss_by_tenth_mib",
        serde_json::json!(tenths),
    );
    out.figure(
        "dispatcher RSS after the drain",
        format!("{after_mib:.0} MiB"),
        "rss_after_mib",
        after_mib,
    );
    out.figure(
        "backlog",
        format!(
            "{queued} deliveries written by fanout in {fan_out_secs:.0} s, drained in {drain_secs:.0} s ({:.0}/s, {retried} of them retried once)",
            requests as f64 / drain_secs.max(1e-9)
        ),
        "drain_s",
        drain_secs,
    );
    out.deliveries = Some(tally);
    Ok(())
}
