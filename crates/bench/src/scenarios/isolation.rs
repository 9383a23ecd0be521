//! `isolation`: a small tenant's wait (produced → received) while a whale
//! tenant's backlog (100,000 deliveries by default) drains through a slow
//! endpoint, against the same small tenant alone, and the ratio of the two p99s
//! (the goal: during ≤ 1.2 × alone). Every topic has one partition, so the
//! whale and the small tenant share the dispatcher's partition — the worst
//! case: only the dispatcher's overflow lanes, fair share and caps keep them
//! apart.
//!
//! The whale's events go through fanout like any other, and `events` is FIFO
//! too: while fanout writes the whale's deliveries, the small tenant's events
//! behind them wait at fanout, not at the dispatcher. So the small tenant's
//! waits are split at the moment fanout has committed the whale's last event:
//! *during the whale's fan-out* (fanout's throughput decides) and *during the
//! whale's drain* (the dispatcher's isolation decides; the goal's figure).
//! Each phase's p99 (alone too) is also broken down by hop (fanout produced
//! the delivery record, a `read_committed` reader of `deliveries` had it, the
//! dispatcher started the POST, the receiver had it; see `latency`), and so
//! is each of the drain's slowest waits, so a slow wait says where it was
//! spent.

use std::{
    sync::{
        atomic::{AtomicI64, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use hookline_testkit::{
    kafka,
    receiver::{Behaviour, Recorded},
};

use super::{
    latency::{hop_samples, HopWaits, Observer},
    pace, waits, waits_ms, warm_up, Context, STALL,
};
use crate::{
    params::Params,
    pipeline::{now_us, Pipeline, Spec, ATTEMPT_STARTED_HEADER},
    report::Outcome,
    stats::{ms, Summary},
};

const WHALE_SUBSCRIPTIONS: usize = 8;
const MAX_IN_FLIGHT: i32 = 4;
/// How many of the small tenant's slowest waits during the drain are shown.
const SLOWEST_SHOWN: usize = 5;

pub async fn run(params: &Params, _ctx: &mut Context) -> Outcome {
    let mut out = Outcome::new("isolation");
    let mut spec = Spec::new("isolation");
    spec.partitions = 1;
    let mut p = match Pipeline::create(spec).await {
        Ok(p) => p,
        Err(e) => return out.failed(e),
    };
    let result = body(&mut p, params, &mut out).await;
    out.finish(p, result).await
}

async fn body(p: &mut Pipeline, params: &Params, out: &mut Outcome) -> anyhow::Result<()> {
    let slow = Duration::from_millis(params.slow_ms);
    p.receiver.set("/whale", Behaviour::default().delay(slow));
    let mut subs = vec![p.subscription("small-s0", "small", "/small", MAX_IN_FLIGHT)];
    subs.extend(
        (0..WHALE_SUBSCRIPTIONS)
            .map(|i| p.subscription(&format!("whale-s{i}"), "whale", "/whale", MAX_IN_FLIGHT)),
    );
    p.put_subscriptions(&subs).await?;
    p.start().await?;
    let mut seq = 0;
    warm_up(p, &mut seq, &["small".to_owned()], params.payload).await?;
    let observer = Observer::start(p).await?;

    // Baseline: the small tenant alone, as long as `BENCH_SECONDS`: its p99
    // is the ratio's denominator, and from 300 samples (half as long) it was
    // the 3rd slowest wait and swung 17–81 ms between runs of one build.
    let alone_for = params.scaled(1.0);
    let alone_from = now_us();
    pace(
        p,
        &mut seq,
        params.small_rate,
        alone_for,
        params.payload,
        |_| "small".into(),
        |_| false,
    )
    .await?;
    anyhow::ensure!(
        p.wait_for_requests(p.expected(), STALL).await,
        "baseline: the small tenant's deliveries did not all arrive"
    );
    let alone = Summary::of(waits_ms(&p.receiver.requests_to("/small"), |_, sent| {
        sent >= alone_from
    }));

    // The whale's backlog in one go, then the small tenant at the same rate
    // for as long as the whale drains (bounded).
    let whale_events = params.whale_deliveries.div_ceil(WHALE_SUBSCRIPTIONS);
    let whale_total = whale_events * WHALE_SUBSCRIPTIONS;
    let whale_from = now_us();
    let backlog: Vec<_> = (0..whale_events)
        .map(|_| {
            seq += 1;
            p.event(seq, "whale", params.payload)
        })
        .collect();
    p.produce(backlog).await?;
    let drain_started = Instant::now();
    // When fanout has committed past the whale's last event (polled every
    // 100 ms): the small tenant's events produced after it no longer wait at
    // fanout behind the whale.
    let (_, whale_end) = kafka::group_progress(&p.groups.fanout, p.topics.events()).await?;
    let fanned_out_us = Arc::new(AtomicI64::new(i64::MAX));
    let watch = {
        let (group, topic) = (p.groups.fanout.clone(), p.topics.events().to_owned());
        let fanned_out_us = Arc::clone(&fanned_out_us);
        tokio::spawn(async move {
            loop {
                if let Ok((committed, _)) = kafka::group_progress(&group, &topic).await {
                    if committed >= whale_end {
                        fanned_out_us.store(now_us(), Ordering::Relaxed);
                        return;
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    let longest = params.scaled(3.0).max(Duration::from_secs(60));
    pace(
        p,
        &mut seq,
        params.small_rate,
        longest,
        params.payload,
        |_| "small".into(),
        |p| p.receiver.count_to("/whale") >= whale_total,
    )
    .await?;
    let tally = p.settle(STALL).await?;
    watch.abort();
    let fanned_out_us = fanned_out_us.load(Ordering::Relaxed);
    let whale = p.receiver.requests_to("/whale");
    let whale_done = whale.iter().map(|r| r.at).max().unwrap_or(drain_started);
    let whale_done_us = whale
        .iter()
        .map(|r| crate::pipeline::epoch_us(r.received_at))
        .max()
        .unwrap_or(whale_from);
    let drain_secs = whale_done.duration_since(drain_started).as_secs_f64();
    let fan_out_secs = (fanned_out_us.min(whale_done_us) - whale_from) as f64 / 1e6;
    let small = p.receiver.requests_to("/small");
    let fanning_out = Summary::of(waits_ms(&small, |_, sent| {
        sent >= whale_from && sent <= fanned_out_us
    }));
    let during = Summary::of(waits_ms(&small, |_, sent| {
        sent > fanned_out_us && sent <= whale_done_us
    }));
    let seen = observer.seen();
    drop(observer);

    let ratio = |d: f64, a: f64| if a > 0.0 { d / a } else { f64::NAN };
    let p50_ratio = ratio(during.p50_ms, alone.p50_ms);
    let p99_ratio = ratio(during.p99_ms, alone.p99_ms);
    out.settings = serde_json::json!({
        "partitions": 1,
        "small_rate_events_per_s": params.small_rate,
        "baseline_s": alone_for.as_secs_f64(),
        "whale_subscriptions": WHALE_SUBSCRIPTIONS,
        "max_in_flight_per_subscription": MAX_IN_FLIGHT,
        "whale_endpoint_ms": params.slow_ms,
        "whale_deliveries": whale_total,
    });
    out.figure(
        "small alone p50/p99",
        format!(
            "{} / {} (n={})",
            ms(alone.p50_ms),
            ms(alone.p99_ms),
            alone.n
        ),
        "small_alone",
        alone,
    );
    out.figure(
        "small during fan-out p50/p99",
        format!(
            "{} / {} (n={}; fanout wrote the whale's {whale_total} deliveries in {fan_out_secs:.1} s, and events behind them wait at fanout)",
            ms(fanning_out.p50_ms),
            ms(fanning_out.p99_ms),
            fanning_out.n
        ),
        "small_during_whale_fan_out",
        serde_json::json!({ "summary": fanning_out, "fan_out_s": fan_out_secs }),
    );
    out.figure(
        "small during whale drain p50/p99",
        format!(
            "{} / {} (n={})",
            ms(during.p50_ms),
            ms(during.p99_ms),
            during.n
        ),
        "small_during_whale",
        during,
    );
    let phases = [
        (
            "  alone p99 by hop",
            "small_alone_hops_p99",
            alone_from,
            whale_from.saturating_sub(1),
        ),
        (
            "  fan-out p99 by hop",
            "small_during_whale_fan_out_hops_p99",
            whale_from,
            fanned_out_us,
        ),
        (
            "  drain p99 by hop",
            "small_during_whale_hops_p99",
            fanned_out_us.saturating_add(1),
            whale_done_us,
        ),
    ];
    for (label, key, from, to) in phases {
        let in_phase = small
            .iter()
            .filter(|r| crate::pipeline::sent_us(&r.body).is_some_and(|t| t >= from && t <= to));
        let [produced, readable, started, received] =
            hop_samples(in_phase, &seen).map(|s| Summary::of(s).p99_ms);
        out.figure(
            label,
            format!(
                "fanout produced {}, readable {}, POST started {}, received {}",
                ms(produced),
                ms(readable),
                ms(started),
                ms(received)
            ),
            key,
            serde_json::json!({
                "fanout_produced_ms": produced,
                "readable_ms": readable,
                "post_started_ms": started,
                "received_ms": received,
            }),
        );
    }
    out.figure(
        "small during drain / alone",
        format!("p50 {p50_ratio:.2} x, p99 {p99_ratio:.2} x (goal: p99 <= 1.2 x)"),
        "small_during_over_alone",
        serde_json::json!({ "p50": p50_ratio, "p99": p99_ratio }),
    );
    // Where the slowest waits of the drain fall: seconds after fanout had
    // committed the whale (early ones waited for the whale's records ahead of
    // them to be moved to its lane), and how long after its event was
    // produced each hop had it.
    let mut slow = waits(&small, |_, sent| {
        sent > fanned_out_us && sent <= whale_done_us
    });
    slow.sort_unstable_by_key(|(wait, ..)| std::cmp::Reverse(*wait));
    slow.truncate(SLOWEST_SHOWN);
    let started = |r: &Recorded, sent: i64| {
        r.header(ATTEMPT_STARTED_HEADER)
            .parse::<i64>()
            .ok()
            .map(|s| s - sent)
    };
    let slowest: Vec<String> = slow
        .iter()
        .map(|(wait, sent, r)| {
            let at = format!(
                "{:.0} ms at t={:.2}s",
                *wait as f64 / 1000.0,
                (sent - fanned_out_us) as f64 / 1e6
            );
            match HopWaits::of(r, &seen) {
                Some(h) => format!(
                    "{at} (fanout produced +{:.0}, readable +{:.0}, POST started +{})",
                    h.produced_ms,
                    h.readable_ms,
                    h.started_ms
                        .map_or("?".to_owned(), |s| format!("{s:.0} ms")),
                ),
                None => format!(
                    "{at} (POST started +{})",
                    started(r, *sent)
                        .map_or("?".to_owned(), |s| format!("{:.0} ms", s as f64 / 1000.0)),
                ),
            }
        })
        .collect();
    out.figure(
        "  slowest during drain",
        if slowest.is_empty() {
            "none".to_owned()
        } else {
            slowest.join(", ")
        },
        "small_during_whale_slowest",
        serde_json::json!(slow
            .iter()
            .map(|(wait, sent, r)| serde_json::json!({
                "wait_us": wait,
                "sent_after_fan_out_us": sent - fanned_out_us,
                "post_started_after_us": started(r, *sent),
                "hops_ms": HopWaits::of(r, &seen).map(|h| serde_json::json!({
                    "fanout_produced": h.produced_ms,
                    "readable": h.readable_ms,
                    "post_started": h.started_ms,
                })),
            }))
            .collect::<Vec<_>>()),
    );
    out.figure(
        "whale backlog",
        format!(
            "{whale_total} deliveries through a {} ms endpoint drained in {drain_secs:.1} s ({:.0}/s)",
            params.slow_ms,
            whale_total as f64 / drain_secs.max(1e-9)
        ),
        "whale_drain_s",
        drain_secs,
    );
    out.deliveries = Some(tally);
    Ok(())
}
