//! Consumer groups balanced per topic, with fast failover, on real Kafka and
//! the real binary: three dispatcher replicas on 12-partition topics each own
//! 4 partitions of `deliveries` and 4 of every retry tier (one consumer per
//! topic, all in one group). A replica killed with SIGKILL has its partitions
//! owned by the others again within 15 s with the default session timeout
//! (10 s), its replacement gets its share back, and every delivery arrives —
//! duplicates only with the same `webhook-id`.
//!
//! Ownership is read from each replica's own `hookline_consumer_assigned_partitions`
//! gauges, so the test also checks what an operator sees.

#![allow(clippy::unwrap_used)]

mod common;

use std::{
    collections::{BTreeMap, HashSet},
    time::Duration,
};

use common::{delivery, Env};
use hookline_envelope::Delivery;
use hookline_testkit::{receiver::Behaviour, stage::Stage};
use tokio::time::Instant;

const PARTITIONS: u64 = 12;
const REPLICAS: usize = 3;
const TENANTS: usize = 24;
const PER_TENANT: usize = 30;
/// The failover promise with the default `--group-session-timeout` (10 s).
const FAILOVER: Duration = Duration::from_secs(15);
/// The consumers of a dispatcher with the default ladder.
const CONSUMERS: [&str; 5] = [
    "deliveries",
    "retry-10s",
    "retry-1m",
    "retry-15m",
    "retry-2h",
];

/// `consumer` label → assigned partitions, from one replica's exposition.
fn assigned(exposition: &str) -> BTreeMap<String, u64> {
    exposition
        .lines()
        .filter(|l| l.starts_with("hookline_consumer_assigned_partitions{"))
        .filter_map(|l| {
            let consumer = l.split("consumer=\"").nth(1)?.split('"').next()?;
            let value = l.rsplit(' ').next()?.parse::<f64>().ok()?;
            Some((consumer.to_owned(), value as u64))
        })
        .collect()
}

/// Every replica's ownership, in order; a replica that does not answer is empty.
async fn ownership(replicas: &[&Stage]) -> Vec<BTreeMap<String, u64>> {
    let mut all = Vec::new();
    for r in replicas {
        all.push(r.metrics().await.map(|m| assigned(&m)).unwrap_or_default());
    }
    all
}

/// Whether every consumer's partitions are spread ⌊P/N⌋..⌈P/N⌉ over `seen`
/// and add up to all of them.
fn balanced(seen: &[BTreeMap<String, u64>]) -> bool {
    let n = seen.len() as u64;
    let (low, high) = (PARTITIONS / n, PARTITIONS.div_ceil(n));
    CONSUMERS.iter().all(|c| {
        let counts: Vec<u64> = seen
            .iter()
            .map(|r| r.get(*c).copied().unwrap_or(0))
            .collect();
        counts.iter().sum::<u64>() == PARTITIONS && counts.iter().all(|k| (low..=high).contains(k))
    })
}

/// Waits until `replicas` own every partition, balanced; fails with what it saw.
async fn wait_balanced(replicas: &[&Stage], within: Duration, what: &str) -> Duration {
    let start = Instant::now();
    loop {
        let seen = ownership(replicas).await;
        if balanced(&seen) {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < within,
            "{what}: not balanced within {within:?}; partitions per replica and consumer: {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_split_every_topic_evenly_and_take_over_a_killed_ones_partitions() {
    let env = Env::new("balance", PARTITIONS as i32).await;
    env.receiver.set(
        "/hook",
        Behaviour::status(204).delay(Duration::from_millis(20)),
    );
    let mut all: Vec<Delivery> = Vec::new();
    for t in 0..TENANTS {
        let sub = env.subscription(&format!("sub-{t}"), &format!("tenant-{t}"), "/hook", "one");
        env.put(&sub).await;
        all.extend((0..PER_TENANT).map(|n| delivery(&sub, n)));
    }
    let logs = tempfile::tempdir().unwrap();
    // Gauges refresh every second with a 3 s stall timeout; the session
    // timeout is the default, which is what the failover bound is about.
    let mut replicas = Vec::new();
    for n in 0..REPLICAS {
        let log = logs.path().join(format!("dispatcher-{n}.log"));
        replicas.push(
            env.spawn_stage(&["--consumer-stall-timeout", "3s"], &log)
                .await,
        );
    }
    let refs: Vec<&Stage> = replicas.iter().collect();
    wait_balanced(&refs, Duration::from_secs(90), "three replicas").await;
    let seen = ownership(&refs).await;
    for (n, r) in seen.iter().enumerate() {
        for c in CONSUMERS {
            assert_eq!(r.get(c), Some(&4), "replica {n}, {c}: {seen:?}");
        }
    }

    env.publish(&all).await;
    let total = all.len();
    assert!(
        env.receiver
            .wait_until(Duration::from_secs(60), |r| r.len() >= total / 4)
            .await,
        "only {} of {total} arrived before the kill",
        env.receiver.count()
    );
    replicas[0].kill().await.unwrap();
    let survivors: Vec<&Stage> = replicas[1..].iter().collect();
    let took = wait_balanced(&survivors, FAILOVER, "after kill -9 of one replica").await;
    println!("failover: the survivors owned every partition {took:?} after the kill");

    // Its replacement (same flags, a new member) gets its share back.
    replicas[0].restart().await.unwrap();
    let refs: Vec<&Stage> = replicas.iter().collect();
    wait_balanced(
        &refs,
        Duration::from_secs(60),
        "after the replacement joined",
    )
    .await;

    let expected: HashSet<String> = all.iter().map(|d| d.delivery_id.clone()).collect();
    let arrived = env
        .receiver
        .wait_until(Duration::from_secs(120), |r| {
            r.iter()
                .map(|q| q.header("webhook-id"))
                .collect::<HashSet<_>>()
                .len()
                >= total
        })
        .await;
    let requests = env.receiver.requests();
    let ids: HashSet<String> = requests
        .iter()
        .map(|r| r.header("webhook-id").to_owned())
        .collect();
    assert!(
        arrived,
        "{} of {total} deliveries arrived; missing e.g. {:?}",
        ids.len(),
        expected.difference(&ids).take(3).collect::<Vec<_>>()
    );
    assert_eq!(
        ids, expected,
        "every request carries an expected webhook-id"
    );
    println!(
        "{} requests for {total} deliveries ({} duplicates, each with the webhook-id of its original)",
        requests.len(),
        requests.len() - total
    );
    for r in replicas {
        r.stop().await.unwrap();
    }
}
