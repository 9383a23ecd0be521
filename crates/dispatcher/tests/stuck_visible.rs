//! A consumer that cannot consume is visible, on real Kafka and the real
//! binary: a foreign member holds the dispatcher's group with another
//! assignment protocol, so the coordinator refuses every dispatcher consumer's
//! join. The dispatcher is not ready from its start (it has not joined its
//! group); once the stall timeout passes, `/readyz` also names the consumer
//! and `hookline_consumer_unassigned_seconds` climbs; when the foreign member
//! leaves, the dispatcher joins, owns every partition and is ready.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::Env;
use hookline_testkit::{
    kafka,
    stage::{http_get, Stage},
};
use rdkafka::consumer::{Consumer, StreamConsumer};
use tokio::time::Instant;

/// The value of `metric` for the `deliveries` consumer, if exported.
fn deliveries_gauge(exposition: &str, metric: &str) -> Option<f64> {
    exposition
        .lines()
        .filter(|l| l.starts_with(&format!("{metric}{{")))
        .find(|l| l.contains("consumer=\"deliveries\""))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

/// Polls `/readyz` and `/metrics` until `done` holds; fails with what it saw.
async fn wait_for(
    stage: &Stage,
    within: Duration,
    what: &str,
    done: impl Fn(u16, &str, &str) -> bool,
) {
    let start = Instant::now();
    loop {
        let (status, readyz) = http_get(stage.addr(), "/readyz").await.unwrap();
        let metrics = stage.metrics().await.unwrap();
        if done(status, &readyz, &metrics) {
            return;
        }
        assert!(
            start.elapsed() < within,
            "{what}: not seen within {within:?}; /readyz {status}:\n{readyz}\nassigned {:?}, unassigned for {:?}",
            deliveries_gauge(&metrics, "hookline_consumer_assigned_partitions"),
            deliveries_gauge(&metrics, "hookline_consumer_unassigned_seconds"),
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dispatcher_refused_by_its_group_turns_unready_and_recovers() {
    let env = Env::new("stuck", 3).await;
    // The foreign member: same group, the eager `range` protocol.
    let foreign: StreamConsumer = kafka::client_config()
        .set("group.id", &env.group)
        .set("partition.assignment.strategy", "range")
        .create()
        .unwrap();
    foreign.subscribe(&[env.topics.deliveries()]).unwrap();
    let start = Instant::now();
    while foreign.assignment().unwrap().count() == 0 {
        // Polling serves the join; the topic is empty, so nothing arrives.
        let _ = tokio::time::timeout(Duration::from_millis(200), foreign.recv()).await;
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the foreign member got no assignment"
        );
    }
    let polling = tokio::spawn(async move {
        loop {
            let _ = foreign.recv().await;
        }
    });

    let logs = tempfile::tempdir().unwrap();
    let stage = env
        .spawn_stage_with(
            &["--consumer-stall-timeout", "3s"],
            &logs.path().join("dispatcher.log"),
            false,
        )
        .await;
    // Once started: not in the group, naming the consumers that wait.
    wait_for(
        &stage,
        Duration::from_secs(60),
        "unready while joining",
        |status, readyz, _| {
            status == 503
                && readyz.contains(
                    "joining the consumer group: no assignment yet for deliveries, strict",
                )
        },
    )
    .await;
    wait_for(
        &stage,
        Duration::from_secs(60),
        "unready for want of an assignment",
        |status, readyz, metrics| {
            status == 503
                && readyz.contains("consumer deliveries: not ready: no partition assigned")
                && deliveries_gauge(metrics, "hookline_consumer_unassigned_seconds")
                    .is_some_and(|s| s >= 3.0)
        },
    )
    .await;

    // The foreign member leaves; the dispatcher's consumers can join.
    polling.abort();
    let _ = polling.await;
    wait_for(
        &stage,
        Duration::from_secs(60),
        "ready again and owning deliveries",
        |status, _, metrics| {
            status == 200
                && deliveries_gauge(metrics, "hookline_consumer_assigned_partitions") == Some(3.0)
                && deliveries_gauge(metrics, "hookline_consumer_unassigned_seconds") == Some(0.0)
        },
    )
    .await;
    stage.stop().await.unwrap();
}
