//! `latency`: end-to-end wait, from the moment an event is produced (stamped
//! in its payload) to its webhook's arrival at the receiver, for every
//! delivery, at a fixed open-loop rate below saturation: `BENCH_RATE`, else
//! 30% of the throughput measured in the same run, else 100 events/s.

use super::{pace, waits_ms, warm_up, Context, STALL};
use crate::{
    params::Params,
    pipeline::{Pipeline, Spec},
    report::Outcome,
    stats::{ms, Summary},
};

pub async fn run(params: &Params, ctx: &mut Context) -> Outcome {
    let mut out = Outcome::new("latency");
    let mut p = match Pipeline::create(Spec::new("latency")).await {
        Ok(p) => p,
        Err(e) => return out.failed(e),
    };
    let result = body(&mut p, params, ctx, &mut out).await;
    out.finish(p, result).await
}

async fn body(
    p: &mut Pipeline,
    params: &Params,
    ctx: &Context,
    out: &mut Outcome,
) -> anyhow::Result<()> {
    let (rate, source) = match (params.rate, ctx.throughput_events_per_s) {
        (Some(r), _) => (r, "BENCH_RATE".to_owned()),
        (None, Some(t)) => (
            (0.3 * t).max(1.0),
            format!("30% of {t:.0} events/s measured"),
        ),
        (None, None) => (
            100.0,
            "default; run throughput first or set BENCH_RATE".to_owned(),
        ),
    };
    let tenants: Vec<String> = (0..params.tenants).map(|t| format!("t{t}")).collect();
    let subs: Vec<_> = tenants
        .iter()
        .flat_map(|t| (0..params.fanout).map(move |s| (t.clone(), s)))
        .map(|(t, s)| p.subscription(&format!("{t}-s{s}"), &t, "/ok", 16))
        .collect();
    p.put_subscriptions(&subs).await?;
    p.start().await?;
    let mut seq = 0;
    warm_up(p, &mut seq, &tenants, params.payload).await?;
    let before = p.receiver.count();

    let duration = params.scaled(1.0);
    out.settings = serde_json::json!({
        "rate_events_per_s": rate,
        "rate_source": source,
        "duration_s": duration.as_secs_f64(),
        "tenants": params.tenants,
        "subscriptions": subs.len(),
        "partitions": 3,
    });
    let n = tenants.len() as u64;
    let (sent, achieved) = pace(
        p,
        &mut seq,
        rate,
        duration,
        params.payload,
        |i| format!("t{}", i % n),
        |_| false,
    )
    .await?;
    let tally = p.settle(STALL).await?;
    let waits = Summary::of(waits_ms(&p.receiver.requests()[before..], |_, _| true));

    out.figure(
        "rate",
        format!(
            "{achieved:.0} events/s ({:.0} deliveries/s) for {:.0} s; {source}",
            achieved * params.fanout as f64,
            duration.as_secs_f64()
        ),
        "events_per_s",
        achieved,
    );
    out.figure(
        "produced → received p50/p99/p999",
        format!(
            "{} / {} / {} (max {}, n={})",
            ms(waits.p50_ms),
            ms(waits.p99_ms),
            ms(waits.p999_ms),
            ms(waits.max_ms),
            waits.n
        ),
        "end_to_end",
        waits,
    );
    out.figures.insert("events".to_owned(), sent.into());
    out.deliveries = Some(tally);
    Ok(())
}
