//! The chart's alerts, tested on the series the real dispatcher binary exports
//! on real Kafka: each scenario's `/metrics` is scraped every second
//! and `promtool test rules` runs the chart's rules on those samples
//! (`hookline_testkit::scraped`). The three scenarios run at once:
//!
//! - backlog: a hanging endpoint holds the 4 records a `deliveries` partition
//!   may buffer in flight, so the partition is paused, and 100 more records are
//!   written behind it, unfetched: the oldest-ready age rises (from the record at
//!   the partition's position; the buffer has nothing queued) and
//!   `HooklineReadyQueueOldestAge` fires;
//! - stalled tier: the same on a retry tier whose records are all due:
//!   the oldest-due age rises and `HooklineRetryTierStalled` fires;
//! - healthy: as many records to a fast endpoint: neither fires.
//!
//! The rule expressions are the chart's; their thresholds and `for`s are its
//! values scaled from minutes to seconds, so a run takes half a minute.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::{delivery, Env};
use hookline_testkit::{
    receiver::Behaviour,
    scraped::{self, Expect, Scrapes},
    stage::Stage,
};
use tokio::time::Instant;

/// Seconds of scraping after the backlog is written.
const SCRAPED_S: usize = 32;
/// The chart's alert values, scaled to a run of [`SCRAPED_S`].
const SETS: &[(&str, &str)] = &[
    ("oldestReadyAgeSeconds", "10"),
    ("oldestReadyAgeFor", "10s"),
    ("tierStalledSeconds", "10"),
    ("tierStalledFor", "10s"),
    ("tierStalledWindow", "15s"),
];
/// Records a partition may buffer: all of them in flight at once.
const BUFFER: usize = 4;
const BACKLOG: usize = 100;
const READY_ALERT: &str = "HooklineReadyQueueOldestAge";
const TIER_ALERT: &str = "HooklineRetryTierStalled";

/// Where the records go.
#[derive(Clone, Copy)]
enum To {
    Deliveries,
    FirstTier,
}

/// Scrapes `stage` once a second for `seconds`; a scrape's column is the
/// second it was taken in.
async fn scrape(stage: &Stage, seconds: usize) -> Scrapes {
    let mut scrapes = Scrapes::new("dispatcher-0");
    let start = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tick.tick().await;
        let column = usize::try_from((start.elapsed().as_millis() + 500) / 1000).unwrap();
        if column >= seconds {
            return scrapes;
        }
        if let Ok(exposition) = stage.metrics().await {
            scrapes.push(column, &exposition);
        }
    }
}

/// One scenario: `behaviour` at the endpoint; [`BUFFER`] records to `to`,
/// which fill the partition's buffer, then [`BACKLOG`] more; scraped for
/// [`SCRAPED_S`] from then.
async fn run(name: &str, behaviour: Behaviour, to: To) -> Scrapes {
    let env = Env::new(name, 1).await;
    env.receiver.set("/hook", behaviour);
    let mut sub = env.subscription("s1", "t1", "/hook", "one");
    sub.max_in_flight = i32::try_from(BUFFER).unwrap();
    env.put(&sub).await;
    let logs = tempfile::tempdir().unwrap();
    // The attempts hang past the run: the buffer stays full, the partition paused.
    let mut stage = spawn(&env, &logs.path().join("dispatcher.log")).await;
    let records = |n: std::ops::Range<usize>| n.map(|n| delivery(&sub, n)).collect::<Vec<_>>();
    publish(&env, to, &records(0..BUFFER)).await;
    assert!(
        env.receiver
            .wait_until(Duration::from_secs(30), |r| r.len() >= BUFFER)
            .await,
        "{name}: the first {BUFFER} records were not attempted\n{}",
        stage.log_tail()
    );
    publish(&env, to, &records(BUFFER..BUFFER + BACKLOG)).await;
    let scrapes = scrape(&stage, SCRAPED_S).await;
    // Killed, not drained: a drain would wait for the hanging attempts.
    stage.kill().await.unwrap();
    scrapes
}

async fn publish(env: &Env, to: To, records: &[hookline_envelope::Delivery]) {
    match to {
        To::Deliveries => env.publish(records).await,
        To::FirstTier => env.publish_to_tier(0, records).await,
    }
}

/// The dispatcher binary with a request timeout longer than the run.
async fn spawn(env: &Env, log: &std::path::Path) -> Stage {
    let mut args = env.args(&[
        "--log-format",
        "json",
        "--log",
        "warn,hookline_runtime::ops=info",
        "--partition-buffer-records",
        &BUFFER.to_string(),
        // A paused partition with a backlog is the point here, not a promotion.
        "--overflow-lanes",
        "0",
    ]);
    for (flag, value) in [("--request-timeout", "120s"), ("--shutdown-grace", "130s")] {
        let i = args.iter().position(|a| a == flag).unwrap();
        args[i + 1] = value.to_owned();
    }
    Stage::start_exe(
        "dispatcher",
        env!("CARGO_BIN_EXE_hookline-dispatcher").into(),
        &args[1..],
        log,
    )
    .await
    .unwrap()
}

/// The last sample of a series, and the most it rose from its first.
fn last_and_rise(values: &[Option<f64>]) -> (f64, f64) {
    let present: Vec<f64> = values.iter().flatten().copied().collect();
    let last = present.last().copied().unwrap_or_default();
    (last, last - present.first().copied().unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alerts_fire_on_the_series_a_paused_backlog_really_exports() {
    let hang = || Behaviour::status(200).delay(Duration::from_secs(300));
    let (backlog, stalled, healthy) = tokio::join!(
        run("alerts-backlog", hang(), To::Deliveries),
        run("alerts-tier", hang(), To::FirstTier),
        run("alerts-healthy", Behaviour::status(204), To::Deliveries),
    );

    // The gauges themselves: a backlog behind a paused partition ages.
    let ready = backlog.values(&[
        "hookline_dispatcher_oldest_ready_age_seconds{",
        "topic=\"deliveries\"",
    ]);
    let (age, rise) = last_and_rise(&ready);
    assert!(
        age >= (SCRAPED_S - 4) as f64 && rise >= (SCRAPED_S - 6) as f64,
        "oldest ready age over the backlog run: {ready:?}"
    );
    let due = stalled.values(&[
        "hookline_dispatcher_tier_oldest_due_age_seconds{",
        "tier=\"retry-10s\"",
    ]);
    let (age, rise) = last_and_rise(&due);
    assert!(
        age >= (SCRAPED_S - 4) as f64 && rise >= (SCRAPED_S - 6) as f64,
        "oldest due age of retry-10s over the stalled run: {due:?}"
    );
    let healthy_age = healthy.values(&[
        "hookline_dispatcher_oldest_ready_age_seconds{",
        "topic=\"deliveries\"",
    ]);
    assert!(
        healthy_age.iter().flatten().all(|a| *a < 5.0),
        "oldest ready age over the healthy run: {healthy_age:?}"
    );

    // The alerts, by promtool on those samples.
    let end = SCRAPED_S - 1;
    let silent = |at_s, alert| Expect {
        at_s,
        alert,
        firing: None,
    };
    let cases = [
        scraped::case(
            "a paused deliveries partition with a backlog behind it",
            &backlog,
            &[
                silent(5, READY_ALERT),
                Expect {
                    at_s: end,
                    alert: READY_ALERT,
                    firing: Some(r#"severity="page",topic="deliveries""#),
                },
            ],
        ),
        scraped::case(
            "a paused retry tier with due records behind it",
            &stalled,
            &[
                silent(5, TIER_ALERT),
                Expect {
                    at_s: end,
                    alert: TIER_ALERT,
                    firing: Some(r#"severity="page",tier="retry-10s""#),
                },
            ],
        ),
        scraped::case(
            "the same traffic to a healthy endpoint",
            &healthy,
            &[silent(end, READY_ALERT), silent(end, TIER_ALERT)],
        ),
    ];
    let rules = scraped::render_rules(SETS).unwrap();
    let dir = tempfile::tempdir().unwrap();
    if let Err(e) = scraped::promtool_test(dir.path(), &rules, &cases) {
        let kept = dir.keep();
        panic!("{e:#}\n(kept in {})", kept.display());
    }
}
