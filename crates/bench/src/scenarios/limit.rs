//! `limit`: the throughput and latency scenarios, the same events through the
//! same broker, topics and receiver, carried by the bare path of `bare.rs`
//! instead of hookline (no transactions, signing, lanes or retries). It runs
//! first whenever it is named, so `throughput` and `latency` print hookline's
//! figure beside it and the ratio.

use super::{latency, throughput, Context, Path};
use crate::{
    params::Params,
    pipeline::{Pipeline, Spec},
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
    out.settings = serde_json::json!({ "throughput": settings, "latency": out.settings });
    if let (Some(a), Some(b)) = (tally, out.deliveries.as_mut()) {
        b.expected += a.expected;
        b.delivered += a.delivered;
        b.duplicates += a.duplicates;
        b.failed_attempts += a.failed_attempts;
    }
    out.finish(p, result.map(drop)).await
}
