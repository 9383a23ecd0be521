//! `latency`: end-to-end wait, from the moment an event is produced (stamped
//! in its payload) to its webhook's arrival at the receiver, for every
//! delivery, at a fixed open-loop rate below saturation: `BENCH_RATE`, else
//! the rate the `limit` scenario measured at in the same run, else 30% of the
//! throughput measured in the same run, else 100 events/s. Each event has
//! `BENCH_LATENCY_FANOUT` subscriptions (default 1, as the latency guard
//! is stated), not the throughput scenario's `BENCH_FANOUT`.
//!
//! When the `throughput` scenario ran before it in the same run, hookline is
//! then measured a second time at half the events/s it sustained there, at
//! that scenario's fan-out (`BENCH_FANOUT`): half of the peak as it was
//! measured (the guard's second point: p99 at half the peak). Its events go to tenants of
//! their own (`p0`, `p1`, …) with `BENCH_FANOUT` subscriptions each.
//!
//! For hookline it also breaks the wait down by hop, each measured from the
//! event's production: fanout produced the delivery record (the record's
//! Kafka timestamp, taken when fanout sends it inside its transaction), the
//! record became readable to a `read_committed` consumer (an observer in the
//! bench reading `deliveries` as the dispatcher does: the commit plus one
//! fetch), the dispatcher started the POST (its `webhook-attempt-started`
//! header), and the receiver got it.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use hookline_envelope::{decode, Delivery};
use hookline_runtime::kafka::{Offsets, ReadCommitted as _, StartAt};
use hookline_testkit::{kafka, receiver::Recorded};
use rdkafka::{
    consumer::{Consumer, StreamConsumer},
    message::Headers,
    Message, Timestamp,
};

use serde_json::Value;

use super::{pace, start, waits, waits_ms, warm_up, Context, Path, STALL};
use crate::{
    broker_gc,
    params::Params,
    pipeline::{epoch_us, now_us, sent_us, Pipeline, Spec, ATTEMPT_STARTED_HEADER},
    report::Outcome,
    stats::{ms, Summary},
};

pub async fn run(params: &Params, ctx: &mut Context) -> Outcome {
    let mut out = Outcome::new("latency");
    let mut p = match Pipeline::create(Spec::new("latency")).await {
        Ok(p) => p,
        Err(e) => return out.failed(e),
    };
    let result = body(&mut p, params, ctx, &mut out, Path::Hookline).await;
    out.finish(p, result.map(drop)).await
}

/// The rate of the latency measurement, and where it came from.
pub fn rate(params: &Params, ctx: &Context) -> (f64, String) {
    match (
        params.rate,
        ctx.limit_latency.map(|(r, _)| r),
        ctx.throughput_events_per_s,
    ) {
        (Some(r), _, _) => (r, "BENCH_RATE".to_owned()),
        (None, Some(r), _) => (r, "the limit's rate in this run".to_owned()),
        (None, None, Some(t)) => (
            (0.3 * t).max(1.0),
            format!("30% of {t:.0} events/s measured"),
        ),
        (None, None, None) => (
            100.0,
            "default; run throughput first or set BENCH_RATE".to_owned(),
        ),
    }
}

/// Paces events at `rate` through `path` and adds the figures to `out`;
/// returns the end-to-end summary.
pub async fn body(
    p: &mut Pipeline,
    params: &Params,
    ctx: &Context,
    out: &mut Outcome,
    path: Path,
) -> anyhow::Result<Summary> {
    let (rate, source) = match path {
        Path::Hookline => rate(params, ctx),
        Path::Bare | Path::BareTxn => match params.rate {
            Some(r) => (r, "BENCH_RATE".to_owned()),
            None => (450.0, "default of the limit".to_owned()),
        },
    };
    // The peak the half-peak window halves: hookline's, when measured.
    let peak = match path {
        Path::Hookline => ctx.throughput_events_per_s,
        Path::Bare | Path::BareTxn => None,
    };
    let tenants = |prefix: &str| -> Vec<String> {
        (0..params.tenants)
            .map(|t| format!("{prefix}{t}"))
            .collect()
    };
    let (tenants, peak_tenants) = (tenants("t"), peak.map(|_| tenants("p")).unwrap_or_default());
    let subs: Vec<_> = tenants
        .iter()
        .flat_map(|t| (0..params.latency_fanout).map(move |s| (t.clone(), s)))
        .chain(
            peak_tenants
                .iter()
                .flat_map(|t| (0..params.fanout).map(move |s| (t.clone(), s))),
        )
        .map(|(t, s)| p.subscription(&format!("{t}-s{s}"), &t, "/ok", 16))
        .collect();
    p.put_subscriptions(&subs).await?;
    let _bare = start(p, path, &subs).await?;
    let mut seq = 0;
    let everyone: Vec<String> = tenants.iter().chain(&peak_tenants).cloned().collect();
    warm_up(p, &mut seq, &everyone, params.payload).await?;
    let before = p.receiver.count();
    let observer = match path {
        Path::Hookline | Path::BareTxn => Some(Observer::start(p).await?),
        Path::Bare => None,
    };

    let duration = params.scaled(1.0);
    out.settings = serde_json::json!({
        "rate_events_per_s": rate,
        "rate_source": source,
        "duration_s": duration.as_secs_f64(),
        "tenants": params.tenants,
        "fanout": params.latency_fanout,
        "subscriptions": tenants.len() * params.latency_fanout,
        "partitions": 3,
    });
    let n = tenants.len() as u64;
    let (mut sent, achieved) = pace(
        p,
        &mut seq,
        rate,
        duration,
        params.payload,
        |i| format!("t{}", i % n),
        |_| false,
    )
    .await?;
    let mut tally = p.settle(STALL).await?;
    let requests = p.receiver.requests();
    let waits = Summary::of(waits_ms(&requests[before..], |_, _| true));

    out.figure(
        "rate",
        format!(
            "{achieved:.0} events/s ({:.0} deliveries/s, fan-out {}) for {:.0} s; {source}",
            achieved * params.latency_fanout as f64,
            params.latency_fanout,
            duration.as_secs_f64()
        ),
        "rate_events_per_s",
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
    if path == Path::Hookline {
        let limits = [
            (
                "  limit p50/p99 (ratio)",
                "limit_end_to_end",
                ctx.limit_latency,
            ),
            (
                "  limit in transactions (ratio)",
                "limit_txn_end_to_end",
                ctx.limit_txn_latency,
            ),
        ];
        for (label, key, limit) in limits {
            if let Some((limit_rate, limit)) = limit {
                versus_limit(out, label, key, (rate, &waits), (limit_rate, limit));
            }
        }
    }
    if let Some(observer) = &observer {
        hops(out, "", &requests[before..], &observer.seen());
    }
    spanning_gc(out, "", &requests[before..]);
    drop(requests);
    // The latency guard's second figure: at half the events/s this run
    // sustained, at the fan-out it sustained them at (only when the
    // throughput scenario ran before).
    if let Some(peak) = peak {
        let before = p.receiver.count();
        let (more, achieved) = pace(
            p,
            &mut seq,
            peak / 2.0,
            duration,
            params.payload,
            |i| format!("p{}", i % n),
            |_| false,
        )
        .await?;
        tally = p.settle(STALL).await?;
        sent += more;
        let at_half = Summary::of(waits_ms(&p.receiver.requests()[before..], |_, _| true));
        out.figure(
            "at half the peak p50/p99/p999",
            format!(
                "{} / {} / {} (max {}, n={}) at {achieved:.0} events/s ({:.0} deliveries/s, fan-out {}), half of the {peak:.0} events/s throughput sustained in this run",
                ms(at_half.p50_ms),
                ms(at_half.p99_ms),
                ms(at_half.p999_ms),
                ms(at_half.max_ms),
                at_half.n,
                achieved * params.fanout as f64,
                params.fanout,
            ),
            "half_peak_end_to_end",
            serde_json::json!({
                "summary": at_half,
                "rate_events_per_s": achieved,
                "peak_events_per_s": peak,
                "fanout": params.fanout,
            }),
        );
        let requests = p.receiver.requests();
        if let Some(observer) = &observer {
            hops(out, "half_peak_", &requests[before..], &observer.seen());
        }
        spanning_gc(out, "half_peak_", &requests[before..]);
    }
    out.figures.insert("events".to_owned(), sent.into());
    out.deliveries = Some(tally);
    Ok(waits)
}

/// A row with a limit's p50 / p99 beside hookline's `waits` at `rate`, and
/// how many times the limit's wait hookline's is.
fn versus_limit(
    out: &mut Outcome,
    label: &str,
    key: &str,
    (rate, waits): (f64, &Summary),
    (limit_rate, limit): (f64, Summary),
) {
    let same = (limit_rate - rate).abs() < 1e-6;
    out.figure(
        label,
        format!(
            "{} / {} ({:.1}× / {:.1}×){}",
            ms(limit.p50_ms),
            ms(limit.p99_ms),
            waits.p50_ms / limit.p50_ms,
            waits.p99_ms / limit.p99_ms,
            if same {
                String::new()
            } else {
                format!("; it ran at {limit_rate:.0} events/s")
            }
        ),
        key,
        limit,
    );
}

/// What the observer saw of one delivery record, µs since the epoch.
#[derive(Debug, Clone, Copy)]
pub(super) struct Seen {
    /// The record's timestamp (CreateTime: when fanout sent it).
    pub(super) produced_us: i64,
    /// When the observer was handed it (read_committed).
    pub(super) readable_us: i64,
}

/// A `read_committed` consumer of `deliveries`, as the dispatcher reads it,
/// noting when each delivery record was produced and became readable.
/// (`isolation` uses it too, to say where its slowest waits were spent.)
pub(super) struct Observer {
    seen: Arc<Mutex<HashMap<String, Seen>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Observer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Observer {
    /// Starts reading at the end of `deliveries` (so the warm-up's are
    /// skipped) and returns once assigned.
    pub(super) async fn start(p: &Pipeline) -> anyhow::Result<Self> {
        let consumer: StreamConsumer = kafka::client_config()
            .set("group.id", format!("{}hop-observer", p.topics.prefix()))
            .read_committed(StartAt::Latest, Offsets::Explicit)
            // As the dispatcher's default `--fetch-wait-max`.
            .set("fetch.wait.max.ms", "10")
            .create()?;
        consumer.subscribe(&[p.topics.deliveries()])?;
        // Joined and positioned before anything is measured.
        let deadline = tokio::time::Instant::now() + STALL;
        while consumer.assignment()?.count() == 0 {
            anyhow::ensure!(
                tokio::time::Instant::now() < deadline,
                "the hop observer was never assigned a partition"
            );
            // The assignment arrives through polling.
            let _ =
                tokio::time::timeout(std::time::Duration::from_millis(100), consumer.recv()).await;
        }
        let seen = Arc::new(Mutex::new(HashMap::new()));
        let into = Arc::clone(&seen);
        let task = tokio::spawn(async move {
            loop {
                let Ok(msg) = consumer.recv().await else {
                    continue;
                };
                let readable_us = now_us();
                let produced_us = match msg.timestamp() {
                    Timestamp::CreateTime(t) | Timestamp::LogAppendTime(t) => t * 1000,
                    Timestamp::NotAvailable => continue,
                };
                // A hookline delivery record, or the bare path's (its id in
                // a header, the payload as the value).
                let id = msg
                    .headers()
                    .and_then(|h| h.iter().find(|h| h.key == "webhook-id"))
                    .and_then(|h| std::str::from_utf8(h.value?).ok())
                    .map(str::to_owned)
                    .or_else(|| {
                        msg.payload()
                            .and_then(|v| decode::<Delivery>(v).ok())
                            .map(|d| d.delivery_id)
                    });
                let Some(id) = id else {
                    continue;
                };
                into.lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .insert(
                        id,
                        Seen {
                            produced_us,
                            readable_us,
                        },
                    );
            }
        });
        Ok(Self { seen, task })
    }

    pub(super) fn seen(&self) -> HashMap<String, Seen> {
        self.seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

/// One delivery's waits (ms since its event was produced) at each hop; the
/// POST's start is `None` when the request has no such header.
#[derive(Debug, Clone, Copy)]
pub(super) struct HopWaits {
    pub(super) produced_ms: f64,
    pub(super) readable_ms: f64,
    pub(super) started_ms: Option<f64>,
    pub(super) received_ms: f64,
}

impl HopWaits {
    /// The hops of `r` (a request that carries its event's send time), if the
    /// observer saw its record.
    pub(super) fn of(r: &Recorded, seen: &HashMap<String, Seen>) -> Option<Self> {
        let sent = sent_us(&r.body)?;
        let s = seen.get(r.header("webhook-id"))?;
        let since = |t: i64| (t - sent) as f64 / 1000.0;
        Some(Self {
            produced_ms: since(s.produced_us),
            readable_ms: since(s.readable_us),
            started_ms: r
                .header(ATTEMPT_STARTED_HEADER)
                .parse::<i64>()
                .ok()
                .map(since),
            received_ms: since(epoch_us(r.received_at)),
        })
    }
}

/// Per-hop samples of the successful requests (each delivery once): fanout
/// produced, readable, POST started, received.
pub(super) fn hop_samples<'a>(
    requests: impl IntoIterator<Item = &'a Recorded>,
    seen: &HashMap<String, Seen>,
) -> [Vec<f64>; 4] {
    let (mut produced, mut readable, mut started, mut received) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut once = std::collections::HashSet::new();
    for r in requests
        .into_iter()
        .filter(|r| (200..300).contains(&r.status))
    {
        let Some(h) = HopWaits::of(r, seen) else {
            continue;
        };
        if !once.insert(r.header("webhook-id")) {
            continue;
        }
        produced.push(h.produced_ms);
        readable.push(h.readable_ms);
        started.extend(h.started_ms);
        received.push(h.received_ms);
    }
    [produced, readable, started, received]
}

/// The per-hop rows: each point's wait since the event was produced.
/// How many of the waits of `requests` spanned one of the broker's GC pauses
/// (`broker_gc`): of all, and of the slowest 1% (those at or above the p99);
/// and the p99 of those that spanned none, the tail the pauses left alone.
/// Nothing when the GC log is not known.
fn spanning_gc(out: &mut Outcome, key_prefix: &str, requests: &[Recorded]) {
    let Some(log) = broker_gc::Log::from_env() else {
        return;
    };
    let label = "  waits spanning a broker GC pause";
    let key = format!("{key_prefix}spanning_broker_gc");
    let mut spans: Vec<(i64, i64)> = waits(requests, |_, _| true)
        .into_iter()
        .map(|(wait, sent, _)| (sent, sent + wait))
        .collect();
    let (Some(from), Some(to)) = (
        spans.iter().map(|s| s.0).min(),
        spans.iter().map(|s| s.1).max(),
    ) else {
        return;
    };
    let timeline = match log.pauses(from, to) {
        Ok(p) => broker_gc::Timeline::new(p),
        Err(e) => {
            out.figure(label, format!("not read: {e:#}"), &key, Value::Null);
            return;
        }
    };
    spans.sort_by_key(|(start, end)| std::cmp::Reverse(end - start));
    let spanned: Vec<bool> = spans
        .iter()
        .map(|&(start, end)| timeline.spans(start, end))
        .collect();
    let slowest = spans.len().div_ceil(100);
    let all = spanned.iter().filter(|&&s| s).count();
    let tail = spanned[..slowest].iter().filter(|&&s| s).count();
    let untouched = Summary::of(
        spans
            .iter()
            .zip(&spanned)
            .filter(|(_, &s)| !s)
            .map(|((start, end), _)| (end - start) as f64 / 1000.0)
            .collect(),
    );
    let pauses = broker_gc::Pauses::of(timeline.pauses(), (to - from) as f64 / 1e6);
    let share = |k: usize, n: usize| 100.0 * k as f64 / n as f64;
    out.figure(
        label,
        format!(
            "{:.1}% of all, {:.0}% of the slowest 1% ({tail} of {slowest}); p99 of the others {}; pauses: {}",
            share(all, spans.len()),
            share(tail, slowest),
            ms(untouched.p99_ms),
            pauses.text(),
        ),
        &key,
        serde_json::json!({
            "waits": spans.len(),
            "spanning": all,
            "slowest_1pct": slowest,
            "slowest_1pct_spanning": tail,
            "not_spanning": untouched,
            "pauses": pauses,
        }),
    );
}

/// Adds the per-hop figures of `requests`; `key_prefix` tells the figures of
/// the run at half the peak (`"half_peak_"`) from the first run's (`""`).
fn hops(out: &mut Outcome, key_prefix: &str, requests: &[Recorded], seen: &HashMap<String, Seen>) {
    let [produced, readable, started, received] = hop_samples(requests, seen);
    let rows = [
        ("→ fanout produced", "hop_fanout_produced", produced),
        ("→ readable (committed)", "hop_readable", readable),
        ("→ dispatcher POST started", "hop_post_started", started),
        ("→ received", "hop_received", received),
    ];
    for (label, key, samples) in rows {
        // The bare path stamps no POST start.
        if samples.is_empty() {
            continue;
        }
        let s = Summary::of(samples);
        out.figure(
            format!("  {label} p50/p99"),
            format!("{} / {} (n={})", ms(s.p50_ms), ms(s.p99_ms), s.n),
            &format!("{key_prefix}{key}"),
            s,
        );
    }
}
