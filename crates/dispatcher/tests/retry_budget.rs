//! Retries and first attempts have separate buffer budgets: a
//! flood of due retries fills the retries' budget and pauses its tier, never a
//! `deliveries` partition, so first attempts keep their latency.

#![allow(clippy::unwrap_used)]

mod common;

use std::{
    collections::HashMap,
    time::{Duration, Instant, SystemTime},
};

use common::{delivery, now_ms, Env};
use hookline_envelope::Delivery;
use hookline_testkit::{receiver::Behaviour, stage::Stage};

const LADDER: &[(&str, &str)] = &[("t1", "1s"), ("t2", "1h")];
const BROKEN: usize = 50_000;
/// Small tenants' first attempts: 20 per second for 20 s.
const FIRST: usize = 400;
const RATE_PER_S: u64 = 20;
/// Every first attempt must reach its receiver within this of being produced.
/// Alone, the path is fetch (`--fetch-wait-max` 10 ms) + start + POST to a local
/// receiver: tens of milliseconds, a few hundred on a loaded 2-core machine. A
/// `deliveries` partition paused by the buffer waits for half the budget to
/// drain, and the broken tenant drains 32 attempts per 2 s: 1,000 records take
/// about a minute. 3 s separates the two by an order of magnitude either way.
const BOUND: Duration = Duration::from_secs(3);

/// `hookline_dispatcher_backpressure_pauses_total` for one consumer and reason.
fn pauses(metrics: &str, consumer: &str, reason: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with("hookline_dispatcher_backpressure_pauses_total{"))
        .filter(|l| {
            l.contains(&format!("consumer=\"{consumer}\""))
                && l.contains(&format!("reason=\"{reason}\""))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .fold(0.0, |a, b| a + b)
}

async fn wait_metrics(stage: &Stage, within: Duration, what: &str, done: impl Fn(&str) -> bool) {
    let start = Instant::now();
    loop {
        let metrics = stage.metrics().await.unwrap_or_default();
        if done(&metrics) {
            return;
        }
        assert!(
            start.elapsed() < within,
            "not {what} within {within:?}; log:\n{}",
            stage.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Two partitions per topic. 50,000 retries of a broken tenant (20
/// subscriptions; its endpoint answers 503 after 2 s, so its tenant cap of 32
/// drains 16 a second) are due in t1 before the dispatcher starts, with budgets
/// of 2,000 records each for retries and for first attempts and partitions
/// allowed 10,000 (so only the class totals bind). Once the flood has paused t1
/// for its buffer, three small tenants' first attempts are produced one by one
/// at 20 a second. Stated: no `deliveries` partition is ever paused for the
/// buffer, and every first attempt arrives within [`BOUND`] of being produced.
/// With one budget for both, the retries fill it and every first attempt waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn due_retries_never_pause_first_attempts() {
    let env = Env::with_ladder("retry-budget", 2, LADDER).await;
    env.receiver.set(
        "/broken",
        Behaviour::status(503).delay(Duration::from_secs(2)),
    );
    let broken: Vec<_> = (0..20)
        .map(|i| env.subscription(&format!("sub-broken-{i}"), "broken", "/broken", "one"))
        .collect();
    let small: Vec<_> = (0..3)
        .map(|i| {
            env.subscription(
                &format!("sub-small-{i}"),
                &format!("small-{i}"),
                "/small",
                "one",
            )
        })
        .collect();
    for sub in broken.iter().chain(&small) {
        env.put(sub).await;
    }
    let now = now_ms();
    let retries: Vec<Delivery> = (0..BROKEN)
        .map(|n| {
            let mut d = delivery(&broken[n % broken.len()], n);
            d.attempt = 1;
            d.first_attempt_at = Some(now - 2000);
            d.last_attempt_at = Some(now - 2000);
            d.last_outcome = Some("http_503".into());
            d.due_at = now - 1000;
            d
        })
        .collect();
    env.publish_to_tier(0, &retries).await;

    let logs = tempfile::tempdir().unwrap();
    let stage = env
        .spawn_stage(
            &[
                "--partition-buffer-records",
                "10000",
                "--buffer-records",
                "2000",
                "--retry-buffer-records",
                "2000",
            ],
            &logs.path().join("dispatcher.log"),
        )
        .await;
    // The flood fills the retries' budget: t1 is paused for its buffer.
    wait_metrics(
        &stage,
        Duration::from_secs(90),
        "t1 paused for its buffer",
        |m| pauses(m, "t1", "buffer") >= 1.0,
    )
    .await;

    let mut produced: HashMap<String, SystemTime> = HashMap::new();
    let tick = Duration::from_millis(1000 / RATE_PER_S);
    let started = tokio::time::Instant::now();
    for n in 0..FIRST {
        tokio::time::sleep_until(started + tick * u32::try_from(n).unwrap()).await;
        let d = delivery(&small[n % small.len()], n);
        produced.insert(d.delivery_id.clone(), SystemTime::now());
        env.publish(&[d]).await;
    }
    let all = env
        .receiver
        .wait_until(BOUND * 2, |r| {
            r.iter().filter(|q| q.path == "/small").count() >= FIRST
        })
        .await;
    let metrics = stage.metrics().await.unwrap();
    let requests = env.receiver.requests();
    let mut stage = stage;
    let _ = stage.terminate(Duration::from_secs(40)).await;

    let mut latencies: Vec<(Duration, &str)> = requests
        .iter()
        .filter(|r| r.path == "/small")
        .filter_map(|r| {
            let id = r.header("webhook-id");
            let sent = produced.get(id)?;
            Some((r.received_at.duration_since(*sent).unwrap_or_default(), id))
        })
        .collect();
    latencies.sort();
    let broken_attempts = requests.iter().filter(|r| r.path == "/broken").count();
    let p = |q: f64| latencies[((latencies.len() - 1) as f64 * q) as usize].0;
    eprintln!(
        "first attempts: {} received, p50 {:?}, p99 {:?}, max {:?}; broken retries attempted: {broken_attempts}; \
         pauses for buffer: deliveries {}, t1 {}",
        latencies.len(),
        p(0.5),
        p(0.99),
        p(1.0),
        pauses(&metrics, "deliveries", "buffer"),
        pauses(&metrics, "t1", "buffer"),
    );
    assert_eq!(
        pauses(&metrics, "deliveries", "buffer"),
        0.0,
        "a deliveries partition was paused for the buffer"
    );
    assert!(all, "{} of {FIRST} first attempts arrived", latencies.len());
    let worst = latencies.last().unwrap();
    assert!(
        worst.0 <= BOUND,
        "first attempt {} took {:?} (bound {BOUND:?})",
        worst.1,
        worst.0
    );
    // The flood was real and still being worked: the broken tenant was capped,
    // far from its 50,000 retries done.
    assert!(
        broken_attempts > 32,
        "only {broken_attempts} broken attempts"
    );
    assert!(broken_attempts < BROKEN / 10);
}
