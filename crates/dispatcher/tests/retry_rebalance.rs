//! Pause-until-due across a rebalance: two `hookline-dispatcher` processes share
//! the group; every first attempt fails, so both hold retry-tier partitions
//! paused until due; one is killed with SIGKILL while they are paused. The
//! survivor takes the partitions over (librdkafka keeps a pause flag across
//! rebalances, so it must resume them itself), nothing stays paused forever,
//! nothing is lost, and no retry is attempted before its `due_at`.
//!
//! The circuit breaker is on with its defaults, so no subscription fails 10
//! times in a row: each has fewer deliveries than that (its first attempts are
//! its only failures), and none is parked.

#![allow(clippy::unwrap_used)]

mod common;

use std::{
    collections::HashMap,
    time::{Duration, UNIX_EPOCH},
};

use common::{delivery, Env};
use hookline_envelope::Delivery;
use hookline_testkit::{process::KillOnDrop, receiver::Behaviour};

const TENANTS: usize = 8;
const SUBS_PER_TENANT: usize = 3;
/// Deliveries per subscription: under `--breaker-failures` (10).
const PER_SUB: usize = 8;

fn spawn(env: &Env) -> KillOnDrop {
    env.spawn_killable(&["--group-session-timeout", "6s", "--retry-jitter", "500ms"])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_replica_leaves_no_partition_paused_and_loses_nothing() {
    let env = Env::with_ladder("ladder-rebalance", 4, &[("t1", "8s"), ("t2", "9s")]).await;
    let mut all: Vec<Delivery> = Vec::new();
    for t in 0..TENANTS {
        for s in 0..SUBS_PER_TENANT {
            let path = format!("/h-{t}-{s}");
            // Every first attempt fails; every retry succeeds.
            env.receiver.set(
                &path,
                Behaviour::status(204).fail_first(PER_SUB as u32, 503),
            );
            let sub = env.subscription(
                &format!("sub-{t}-{s}"),
                &format!("tenant-{t}"),
                &path,
                "one",
            );
            env.put(&sub).await;
            all.extend((0..PER_SUB).map(|n| delivery(&sub, n)));
        }
    }
    let total = all.len();
    let mut a = spawn(&env);
    let mut b = spawn(&env);
    // Let both join before the load, so both own tier partitions.
    tokio::time::sleep(Duration::from_secs(5)).await;
    env.publish(&all).await;
    let failed = env
        .receiver
        .wait_until(Duration::from_secs(60), |r| r.len() >= total)
        .await;
    assert!(failed, "only {} first attempts", env.receiver.count());
    let (_, t1) = env.topics.retries().next().unwrap();
    env.committed_to_end(Duration::from_secs(30)).await;
    // Every retry is written (and due ~8 s after its attempt): partitions are paused.
    let retries = env.tier_records(0).await;
    assert!(retries.len() >= total, "{} retries written", retries.len());
    assert!(
        env.receiver.requests().iter().all(|r| r.status == 503),
        "a retry arrived before the kill; the tier delay is too short for this test"
    );
    a.kill(); // SIGKILL while its tier partitions are paused until due

    let delivered = env
        .receiver
        .wait_until(Duration::from_secs(90), |r| {
            let ok: std::collections::HashSet<&str> = r
                .iter()
                .filter(|q| q.status == 204)
                .map(|q| q.header("webhook-id"))
                .collect();
            ok.len() >= total
        })
        .await;
    // Nothing stays paused: the survivor commits every tier record.
    env.topic_committed_to_end(t1, Duration::from_secs(60))
        .await;
    b.kill();

    let requests = env.receiver.requests();
    let mut first_ok: HashMap<&str, i64> = HashMap::new();
    for r in requests.iter().filter(|r| r.status == 204) {
        let at = r
            .received_at
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64;
        let e = first_ok.entry(r.header("webhook-id")).or_insert(at);
        *e = (*e).min(at);
    }
    let missing = all
        .iter()
        .filter(|d| !first_ok.contains_key(d.delivery_id.as_str()))
        .count();
    assert!(
        delivered && missing == 0,
        "{missing} of {total} never delivered"
    );
    // Never early: each delivering attempt came after the due time of a retry
    // record of that delivery (the earliest, in case a replay duplicated one).
    let mut due: HashMap<&str, i64> = HashMap::new();
    for r in &retries {
        let e = due.entry(r.delivery_id.as_str()).or_insert(r.due_at);
        *e = (*e).min(r.due_at);
    }
    let mut lateness: Vec<i64> = Vec::new();
    for (id, at) in &first_ok {
        let due_at = due[id];
        assert!(*at >= due_at, "{id} attempted {} ms early", due_at - at);
        lateness.push(at - due_at);
    }
    lateness.sort_unstable();
    eprintln!(
        "{total} deliveries, all delivered after the kill; lateness behind due_at: p50 {} ms, max {} ms",
        lateness[lateness.len() / 2],
        lateness[lateness.len() - 1]
    );
}
