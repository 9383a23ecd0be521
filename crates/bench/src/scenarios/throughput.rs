//! `throughput`: the pipeline kept saturated for `BENCH_SECONDS` — events are
//! produced as fast as the pipeline drains them, with at most `BENCH_BACKLOG`
//! deliveries in flight so the final drain is short — and measured over the
//! window after a warm-up: events/s consumed by fanout (its committed offsets)
//! and deliveries/s received (the receiver answers 204). Also the dispatcher's
//! CPU per delivery and, when `limit` ran, the limit measured again after it.

use std::time::Duration;

use hookline_testkit::kafka;
use tokio::time::Instant;

use super::{start, warm_up, Context, Path, STALL};
use crate::{
    params::Params,
    pipeline::{Pipeline, Spec},
    report::Outcome,
};

/// Events per produce call.
const BATCH: usize = 500;

pub async fn run(params: &Params, ctx: &mut Context) -> Outcome {
    let mut out = Outcome::new("throughput");
    let mut p = match Pipeline::create(Spec::new("throughput")).await {
        Ok(p) => p,
        Err(e) => return out.failed(e),
    };
    let result = body(&mut p, params, ctx, &mut out, Path::Hookline).await;
    let mut out = out.finish(p, result.map(drop)).await;
    cpu_per_delivery(&mut out);
    if let (None, Some(before)) = (&out.error, ctx.limit) {
        limit_again(params, ctx, &mut out, before, Path::Bare).await;
        limit_again(params, ctx, &mut out, before, Path::BareTxn).await;
    }
    out
}

/// The dispatcher's CPU per delivery over its whole run (the warm-up
/// included): steadier from one run to the next than the rate, which moves
/// with whatever else the machine is doing.
fn cpu_per_delivery(out: &mut Outcome) {
    let cpu_s = out
        .stages
        .iter()
        .find(|s| s.usage.stage == "dispatcher")
        .map(|s| s.usage.cpu_s);
    let delivered = out.deliveries.as_ref().map_or(0, |t| t.delivered);
    if let (Some(cpu_s), true) = (cpu_s, delivered > 0) {
        let us = cpu_s * 1e6 / delivered as f64;
        out.figure(
            "dispatcher CPU per delivery",
            format!("{us:.1} µs ({cpu_s:.1} CPU s, {delivered} deliveries, warm-up included)"),
            "dispatcher_cpu_us_per_delivery",
            us,
        );
    }
}

/// The `limit` measured once more, after hookline's window: on this machine
/// the bare path's rate moves by up to 2.5× between consecutive runs, so a
/// ratio is only worth what the limit's drift around it says. Printed beside
/// the first measurement with hookline's ratio to each; a failure here is
/// printed, not the scenario's. With `Path::BareTxn`, the bare path with its
/// hand-off in transactions: what exactly-once alone costs at saturation.
async fn limit_again(
    params: &Params,
    ctx: &mut Context,
    out: &mut Outcome,
    before: Measured,
    path: Path,
) {
    let (label, spec, key) = match path {
        Path::BareTxn => (
            "limit in transactions, after it",
            "limit-txn-again",
            "limit_txn_deliveries_per_s",
        ),
        _ => (
            "limit again, after it",
            "limit-again",
            "limit_again_deliveries_per_s",
        ),
    };
    let mut scratch = Outcome::new("limit");
    let text = match Pipeline::create(Spec::new(spec)).await {
        Err(e) => format!("failed: {e:#}"),
        Ok(mut p) => {
            let measured = body(&mut p, params, ctx, &mut scratch, path).await;
            let stopped = p.stop().await;
            match (measured, stopped) {
                (Ok(after), Ok(_)) => {
                    let ours = out
                        .figures
                        .get("deliveries_per_s")
                        .and_then(serde_json::Value::as_f64)
                        .unwrap_or(0.0);
                    out.figures
                        .insert(key.to_owned(), after.deliveries_per_s.into());
                    format!(
                        "{:.0} deliveries/s (before: {:.0}); ratio {:.2} to it, {:.2} to the one before",
                        after.deliveries_per_s,
                        before.deliveries_per_s,
                        ours / after.deliveries_per_s,
                        ours / before.deliveries_per_s,
                    )
                }
                (Err(e), _) | (_, Err(e)) => format!("failed: {e:#}"),
            }
        }
    };
    out.rows.push((label.to_owned(), text));
}

/// What the window measured.
#[derive(Debug, Clone, Copy)]
pub struct Measured {
    pub events_per_s: f64,
    pub deliveries_per_s: f64,
}

/// Saturates `p` through `path` and adds the figures to `out`.
pub async fn body(
    p: &mut Pipeline,
    params: &Params,
    ctx: &mut Context,
    out: &mut Outcome,
    path: Path,
) -> anyhow::Result<Measured> {
    let tenants: Vec<String> = (0..params.tenants).map(|t| format!("t{t}")).collect();
    let subs: Vec<_> = tenants
        .iter()
        .flat_map(|t| (0..params.fanout).map(move |s| (t.clone(), s)))
        .map(|(t, s)| p.subscription(&format!("{t}-s{s}"), &t, "/ok", 16))
        .collect();
    p.put_subscriptions(&subs).await?;
    let _bare = start(p, path, &subs).await?;
    let mut seq = 0;
    warm_up(p, &mut seq, &tenants, params.payload).await?;

    let ramp = params.scaled(1.0 / 6.0);
    let window = params.scaled(1.0);
    out.settings = serde_json::json!({
        "tenants": params.tenants,
        "subscriptions": subs.len(),
        "max_in_flight_per_subscription": 16,
        "backlog_cap_deliveries": params.backlog,
        "ramp_s": ramp.as_secs_f64(),
        "window_s": window.as_secs_f64(),
        "partitions": 3,
    });
    let start = Instant::now();
    let mut window_start: Option<(Instant, usize, i64)> = None;
    let mut slices: Vec<(Instant, usize)> = Vec::new();
    let end = loop {
        let now = Instant::now();
        if window_start.is_none() && now >= start + ramp {
            let (committed, _) = kafka::group_progress(&p.groups.fanout, p.topics.events()).await?;
            window_start = Some((Instant::now(), p.receiver.count(), committed));
            slices.push((Instant::now(), p.receiver.count()));
        }
        if let Some((t0, _, _)) = window_start {
            if slices
                .last()
                .is_some_and(|(t, _)| t.elapsed() >= Duration::from_secs(5))
            {
                slices.push((Instant::now(), p.receiver.count()));
            }
            if now >= t0 + window {
                let (committed, _) =
                    kafka::group_progress(&p.groups.fanout, p.topics.events()).await?;
                break (Instant::now(), p.receiver.count(), committed);
            }
        }
        let in_flight = p.expected().saturating_sub(p.receiver.count());
        let room = params.backlog.saturating_sub(in_flight) / params.fanout;
        if room >= BATCH.min(params.backlog / params.fanout / 4).max(1) {
            let events = (0..room.min(BATCH))
                .map(|_| {
                    seq += 1;
                    p.event(seq, &tenants[seq as usize % tenants.len()], params.payload)
                })
                .collect();
            p.produce(events).await?;
        } else {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    let (t0, count0, committed0) = window_start.unwrap_or(end);
    let secs = end.0.duration_since(t0).as_secs_f64().max(1e-9);
    let events_per_s = (end.2 - committed0) as f64 / secs;
    let deliveries_per_s = (end.1 - count0) as f64 / secs;
    let slice_rates: Vec<f64> = slices
        .windows(2)
        .map(|w| (w[1].1 - w[0].1) as f64 / w[1].0.duration_since(w[0].0).as_secs_f64())
        .collect();
    let (lo, hi) = slice_rates
        .iter()
        .fold((f64::INFINITY, 0.0f64), |(lo, hi), r| {
            (lo.min(*r), hi.max(*r))
        });
    if path == Path::Hookline {
        ctx.throughput_events_per_s = Some(events_per_s);
    }

    let tally = p.settle(STALL).await?;
    let limit = ctx.limit.filter(|_| path == Path::Hookline);
    out.versus(
        "events/s in (fanout)",
        events_per_s,
        limit.map(|l| l.events_per_s),
        "events_per_s",
    );
    out.versus(
        "deliveries/s out",
        deliveries_per_s,
        limit.map(|l| l.deliveries_per_s),
        "deliveries_per_s",
    );
    out.figure(
        "deliveries/s, 5 s slices",
        if slice_rates.is_empty() {
            "n/a".to_owned()
        } else {
            format!("min {lo:.0}, max {hi:.0}")
        },
        "deliveries_per_s_slices",
        &slice_rates,
    );
    out.figure(
        "measured window",
        format!(
            "{secs:.1} s, {} deliveries, fan-out {}, {} B payload",
            end.1 - count0,
            params.fanout,
            params.payload
        ),
        "window_s",
        secs,
    );
    out.deliveries = Some(tally);
    Ok(Measured {
        events_per_s,
        deliveries_per_s,
    })
}
