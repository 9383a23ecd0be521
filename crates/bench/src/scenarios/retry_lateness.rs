//! `retry_lateness`: endpoints that answer 503 `BENCH_RETRY_FAILS` times and
//! then 204, on the ladder of `BENCH_RETRY_LADDER` (seconds) with no jitter. For attempt k ≥ 1 the due
//! time is the previous attempt's arrival + the delay of its tier (tier
//! min(k−1, last)), and lateness is the receiver's arrival time minus that —
//! an upper bound, since the dispatcher starts the delay only once the failed
//! attempt's answer is in and its retry record is written. The dispatcher's
//! own `hookline_dispatcher_retry_lateness_seconds` histogram is read from its
//! /metrics before it stops, for comparison.

use std::{collections::BTreeMap, time::Duration};

use hookline_testkit::receiver::Behaviour;

use super::{pace, Context, STALL};
use crate::{
    params::Params,
    pipeline::{Pipeline, Spec},
    report::Outcome,
    stats::{ms, Summary},
};

const HISTOGRAM: &str = "hookline_dispatcher_retry_lateness_seconds";

pub async fn run(params: &Params, _ctx: &mut Context) -> Outcome {
    let mut out = Outcome::new("retry_lateness");
    let mut spec = Spec::new("retry_lateness");
    spec.tiers = ladder(params);
    spec.dispatcher_args = ["--max-attempts", "10", "--retry-jitter", "0s"]
        .map(str::to_owned)
        .to_vec();
    let mut p = match Pipeline::create(spec).await {
        Ok(p) => p,
        Err(e) => return out.failed(e),
    };
    let result = body(&mut p, params, &mut out).await;
    out.finish(p, result).await
}

/// `BENCH_RETRY_LADDER` as tiers named by their delay (`retry-60s`).
fn ladder(params: &Params) -> Vec<(String, Duration)> {
    params
        .retry_ladder
        .iter()
        .map(|s| (format!("retry-{s}s"), Duration::from_secs(*s)))
        .collect()
}

async fn body(p: &mut Pipeline, params: &Params, out: &mut Outcome) -> anyhow::Result<()> {
    let ladder = ladder(params);
    let n = params.retry_endpoints;
    let subs: Vec<_> = (0..n)
        .map(|i| p.subscription(&format!("r{i}-s0"), &format!("r{i}"), &format!("/r/{i}"), 4))
        .collect();
    for i in 0..n {
        p.receiver.set(
            &format!("/r/{i}"),
            Behaviour::default().fail_first(params.retry_fails, 503),
        );
    }
    p.put_subscriptions(&subs).await?;
    p.start().await?;

    // One event per endpoint, spread over a third of BENCH_SECONDS.
    let spread = params.scaled(1.0 / 3.0);
    let rate = n as f64 / spread.as_secs_f64();
    let mut seq = 0;
    pace(
        p,
        &mut seq,
        rate,
        spread,
        params.payload,
        |i| format!("r{i}"),
        |_| false,
    )
    .await?;
    // A long tier is a long wait without requests, not a stall.
    let longest = ladder.iter().map(|(_, d)| *d).max().unwrap_or_default();
    let tally = p.settle(STALL + longest).await?;
    let histogram = p
        .stage("dispatcher")?
        .metrics()
        .await
        .map(|m| histogram(&m));

    let mut all = Vec::new();
    let mut by_tier: BTreeMap<usize, Vec<f64>> = BTreeMap::new();
    let mut wrong_count = 0;
    for i in 0..n {
        let mut reqs = p.receiver.requests_to(&format!("/r/{i}"));
        reqs.sort_by_key(|r| r.at);
        if reqs.len() != params.retry_fails as usize + 1 {
            wrong_count += 1;
        }
        for k in 1..reqs.len() {
            let tier = (k - 1).min(ladder.len() - 1);
            let due = reqs[k - 1].at + ladder[tier].1;
            let late_ms = if reqs[k].at >= due {
                reqs[k].at.duration_since(due).as_secs_f64() * 1e3
            } else {
                -(due.duration_since(reqs[k].at).as_secs_f64() * 1e3)
            };
            all.push(late_ms);
            by_tier.entry(tier).or_default().push(late_ms);
        }
    }
    anyhow::ensure!(
        wrong_count == 0,
        "{wrong_count} of {n} endpoints did not get exactly {} attempts",
        params.retry_fails + 1
    );
    let early = all.iter().filter(|l| **l < 0.0).count();

    out.settings = serde_json::json!({
        "ladder": ladder.iter().map(|(n, d)| format!("{n}={}s", d.as_secs())).collect::<Vec<_>>(),
        "retry_jitter": "0s",
        "endpoints": n,
        "fails_before_success": params.retry_fails,
        "spread_s": spread.as_secs_f64(),
    });
    let overall = Summary::of(all);
    out.figure(
        "lateness p50/p99 (receiver)",
        format!(
            "{} / {} (max {}, n={}, {early} early)",
            ms(overall.p50_ms),
            ms(overall.p99_ms),
            ms(overall.max_ms),
            overall.n
        ),
        "lateness_receiver",
        overall,
    );
    let mut per_tier = serde_json::Map::new();
    for (tier, v) in by_tier {
        let s = Summary::of(v);
        out.rows.push((
            format!("  after {}", ladder[tier].0),
            format!("{} / {} (n={})", ms(s.p50_ms), ms(s.p99_ms), s.n),
        ));
        per_tier.insert(ladder[tier].0.clone(), serde_json::to_value(s)?);
    }
    out.figures
        .insert("lateness_receiver_by_tier".to_owned(), per_tier.into());
    match histogram {
        Ok(Some(h)) => out.figure(
            "dispatcher histogram",
            format!(
                "n={}, mean {}, p50 ≤ {}, p99 ≤ {} (bucket bounds)",
                h.count,
                ms(h.mean_ms),
                ms(h.p50_le_ms),
                ms(h.p99_le_ms)
            ),
            "lateness_dispatcher_histogram",
            h,
        ),
        Ok(None) => out.figure(
            "dispatcher histogram",
            format!("{HISTOGRAM} not exported"),
            "lateness_dispatcher_histogram",
            serde_json::Value::Null,
        ),
        Err(e) => out.figure(
            "dispatcher histogram",
            format!("cannot read /metrics: {e}"),
            "lateness_dispatcher_histogram",
            serde_json::Value::Null,
        ),
    }
    out.deliveries = Some(tally);
    Ok(())
}

/// The lateness histogram summed over tiers.
#[derive(Debug, Clone, Copy, serde::Serialize)]
struct Histogram {
    count: u64,
    mean_ms: f64,
    p50_le_ms: f64,
    p99_le_ms: f64,
}

fn histogram(exposition: &str) -> Option<Histogram> {
    let mut buckets: BTreeMap<u64, f64> = BTreeMap::new();
    let (mut sum, mut count) = (0.0, 0.0);
    for line in exposition.lines().filter(|l| l.starts_with(HISTOGRAM)) {
        let (name_labels, value) = line.rsplit_once(' ')?;
        let value: f64 = value.parse().ok()?;
        let name = name_labels.split('{').next().unwrap_or_default();
        match name.strip_prefix(HISTOGRAM) {
            Some("_bucket") => {
                let le = name_labels.split("le=\"").nth(1)?.split('"').next()?;
                let le: f64 = if le == "+Inf" {
                    f64::INFINITY
                } else {
                    le.parse().ok()?
                };
                *buckets.entry(le.to_bits()).or_default() += value;
            }
            Some("_sum") => sum += value,
            Some("_count") => count += value,
            _ => {}
        }
    }
    if count == 0.0 {
        return None;
    }
    let mut sorted: Vec<(f64, f64)> = buckets
        .into_iter()
        .map(|(b, c)| (f64::from_bits(b), c))
        .collect();
    sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
    let le = |q: f64| {
        sorted
            .iter()
            .find(|(_, c)| *c >= q * count)
            .map(|(le, _)| le * 1e3)
            .unwrap_or(f64::NAN)
    };
    Some(Histogram {
        count: count as u64,
        mean_ms: sum / count * 1e3,
        p50_le_ms: le(0.5),
        p99_le_ms: le(0.99),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_the_histogram_over_tiers() {
        let text = "\
# TYPE hookline_dispatcher_retry_lateness_seconds histogram
hookline_dispatcher_retry_lateness_seconds_bucket{tier=\"retry-1s\",le=\"0.01\"} 1
hookline_dispatcher_retry_lateness_seconds_bucket{tier=\"retry-1s\",le=\"0.1\"} 2
hookline_dispatcher_retry_lateness_seconds_bucket{tier=\"retry-1s\",le=\"+Inf\"} 2
hookline_dispatcher_retry_lateness_seconds_sum{tier=\"retry-1s\"} 0.06
hookline_dispatcher_retry_lateness_seconds_count{tier=\"retry-1s\"} 2
hookline_dispatcher_retry_lateness_seconds_bucket{tier=\"retry-2s\",le=\"0.01\"} 0
hookline_dispatcher_retry_lateness_seconds_bucket{tier=\"retry-2s\",le=\"0.1\"} 2
hookline_dispatcher_retry_lateness_seconds_bucket{tier=\"retry-2s\",le=\"+Inf\"} 2
hookline_dispatcher_retry_lateness_seconds_sum{tier=\"retry-2s\"} 0.1
hookline_dispatcher_retry_lateness_seconds_count{tier=\"retry-2s\"} 2
";
        let h = histogram(text).expect("a histogram");
        assert_eq!(h.count, 4);
        assert!((h.mean_ms - 40.0).abs() < 1e-9);
        assert_eq!((h.p50_le_ms, h.p99_le_ms), (100.0, 100.0));
        assert!(histogram("other_metric 1").is_none());
    }
}
