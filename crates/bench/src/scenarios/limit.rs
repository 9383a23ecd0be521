//! `limit`: the throughput and latency scenarios, the same events through the
//! same broker, topics and receiver, carried by the bare path of `bare.rs`
//! instead of hookline (no transactions, signing, lanes or retries). It runs
//! first whenever it is named, so `throughput` and `latency` print hookline's
//! figure beside it and the ratio.
//!
//! Its latency is measured a second time with the bare path's hand-off in
//! Kafka transactions (`Path::BareTxn`), at the same rate and fan-out: what
//! exactly-once costs on this broker with librdkafka before hookline adds
//! anything, printed as its own rows (`in transactions`, with its hops) and
//! beside hookline's latency.

use super::{latency, throughput, Context, Path};
use crate::{
    params::Params,
    pipeline::{Pipeline, Spec, Tally},
    report::Outcome,
};

pub async fn run(params: &Params, ctx: &mut Context) -> Outcome {
    let mut out = Outcome::new("limit");
    let mut p = match Pipeline::create(Spec::new("limit-throughput")).await {
        Ok(p) => p,
        Err(e) => return out.failed(e),
    };
    match throughput::body(&mut p, params, ctx, &mut out, Path::Bare).await {
        Ok(measured) => ctx.limit = Some(measured),
        Err(e) => return out.finish(p, Err(e)).await,
    }
    let settings = std::mem::take(&mut out.settings);
    let tally = out.deliveries.take();
    if let Err(e) = p.stop().await {
        return out.failed(e);
    }
    let mut p = match Pipeline::create(Spec::new("limit-latency")).await {
        Ok(p) => p,
        Err(e) => return out.failed(e),
    };
    let result = latency::body(&mut p, params, ctx, &mut out, Path::Bare).await;
    if let Ok(waits) = &result {
        let rate = out.settings["rate_events_per_s"].as_f64().unwrap_or(0.0);
        ctx.limit_latency = Some((rate, *waits));
    }
    let latency_settings = std::mem::take(&mut out.settings);
    merge(&mut out, tally);
    if let Err(e) = result {
        out.settings = serde_json::json!({ "throughput": settings, "latency": latency_settings });
        return out.finish(p, Err(e)).await;
    }
    let tally = out.deliveries.take();
    if let Err(e) = p.stop().await {
        return out.failed(e);
    }

    // The same latency window, the hand-off in transactions.
    let mut p = match Pipeline::create(Spec::new("limit-txn-latency")).await {
        Ok(p) => p,
        Err(e) => return out.failed(e),
    };
    let mut txn = Outcome::new("limit");
    let result = latency::body(&mut p, params, ctx, &mut txn, Path::BareTxn).await;
    if let Ok(waits) = &result {
        let rate = txn.settings["rate_events_per_s"].as_f64().unwrap_or(0.0);
        ctx.limit_txn_latency = Some((rate, *waits));
    }
    for (label, text) in txn.rows {
        let label = match label.as_str() {
            "rate" => continue,
            "produced → received p50/p99/p999" => "in transactions p50/p99/p999".to_owned(),
            _ => label,
        };
        out.rows.push((label, text));
    }
    out.figures
        .insert("transactional".to_owned(), txn.figures.into());
    out.settings = serde_json::json!({
        "throughput": settings,
        "latency": latency_settings,
        "transactional_latency": txn.settings,
    });
    out.deliveries = txn.deliveries;
    merge(&mut out, tally);
    out.finish(p, result.map(drop)).await
}

/// Adds `earlier`'s tally (a previous window of the scenario) to `out`'s.
fn merge(out: &mut Outcome, earlier: Option<Tally>) {
    if let (Some(a), Some(b)) = (earlier, out.deliveries.as_mut()) {
        b.expected += a.expected;
        b.delivered += a.delivered;
        b.duplicates += a.duplicates;
        b.failed_attempts += a.failed_attempts;
    }
}
