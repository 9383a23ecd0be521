//! The duplicate-admission window against a real broker, through the real
//! `hookline-fanout` binary: a repeat within the window fans out once and is
//! counted, across a kill -9 too (the window is rebuilt from the partition, from
//! the stream time committed in the offset's metadata); outside the window the
//! event fans out again under the same delivery ids; another payload under the
//! same id is quarantined. Record timestamps are set explicitly (they are the
//! window's clock), an hour in the past, so nothing depends on wall time and a
//! rebuild that fell back to "now" would find none of them.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{counter, pairs, Env};
use hookline_envelope::{delivery_id, encode, Delivery};
use hookline_testkit::{
    kafka,
    records::{event, subscription},
    stage::Stage,
};
use rdkafka::{
    consumer::{BaseConsumer, Consumer},
    message::Message,
    TopicPartitionList,
};

const DRAIN: Duration = Duration::from_secs(60);
const DUPLICATES: &str = "hookline_fanout_duplicates_total";

/// An hour ago, in ms: the record time of the first event of a test.
fn an_hour_ago() -> i64 {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    i64::try_from(now.as_millis()).unwrap() - 3_600_000
}

async fn two_subscriptions(env: &Env) {
    let url = "https://hooks.example/in";
    env.put(&subscription("acme-all", "acme", &["*"], url))
        .await;
    env.put(&subscription("acme-inv", "acme", &["invoice.*"], url))
        .await;
}

fn expected(ids: &[&str]) -> Vec<(String, String)> {
    let mut v: Vec<_> = ids
        .iter()
        .flat_map(|id| ["acme-all", "acme-inv"].map(|s| (id.to_string(), s.to_string())))
        .collect();
    v.sort();
    v
}

/// Waits until fanout has drained `events`, then stops it: the deliveries
/// written and its last metrics.
async fn drain_and_stop(env: &Env, fanout: Stage) -> (Vec<Delivery>, String) {
    env.drained(DRAIN).await;
    let deliveries = env.deliveries().await;
    let metrics = fanout.metrics().await.unwrap();
    fanout.stop().await.unwrap();
    (deliveries, metrics)
}

/// The committed offset and metadata of the fanout group on the events
/// partition that holds `tenant`'s records.
async fn committed(env: &Env) -> (i64, String) {
    let events = kafka::read_to_end(env.topics.events()).await.unwrap();
    let partition = events[0].partition();
    let group = env.group.clone();
    let topic = env.topics.events().to_owned();
    tokio::task::spawn_blocking(move || {
        let consumer: BaseConsumer = kafka::client_config()
            .set("group.id", &group)
            .create()
            .unwrap();
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition(&topic, partition);
        let got = consumer
            .committed_offsets(tpl, Duration::from_secs(10))
            .unwrap();
        let elem = got.find_partition(&topic, partition).unwrap();
        (elem.offset().to_raw().unwrap(), elem.metadata().to_owned())
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeat_within_the_window_fans_out_once_and_is_counted() {
    let env = Env::new("fanout-dedup-once").await;
    two_subscriptions(&env).await;
    let t = an_hour_ago();
    env.publish_at(&event("e1", "acme", "invoice.paid"), t)
        .await;
    env.publish_at(&event("e2", "acme", "invoice.paid"), t + 10)
        .await;
    // A producer's retry a second later, and one out of timestamp order.
    env.publish_at(&event("e1", "acme", "invoice.paid"), t + 1_000)
        .await;
    env.publish_at(&event("e2", "acme", "invoice.paid"), t + 5)
        .await;

    let dir = tempfile::tempdir().unwrap();
    let fanout = env.start_binary(&[], &dir.path().join("fanout.log")).await;
    let (deliveries, metrics) = drain_and_stop(&env, fanout).await;

    assert_eq!(pairs(&deliveries), expected(&["e1", "e2"]));
    assert_eq!(counter(&metrics, DUPLICATES, r#"payload="same""#), 2.0);
    assert_eq!(counter(&metrics, DUPLICATES, r#"payload="changed""#), 0.0);
    assert!(env.quarantined().await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_kill_9_the_rebuilt_window_still_fans_out_once() {
    let env = Env::new("fanout-dedup-crash").await;
    two_subscriptions(&env).await;
    let t = an_hour_ago();
    env.publish_at(&event("e1", "acme", "invoice.paid"), t)
        .await;
    env.publish_at(&event("e2", "acme", "invoice.paid"), t + 20)
        .await;

    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("fanout.log");
    let mut fanout = env.start_binary(&[], &log).await;
    env.drained(DRAIN).await;
    // The window's stream time committed with the offset, in the same
    // transaction: the metadata survives send_offsets_to_transaction.
    let (offset, metadata) = committed(&env).await;
    assert_eq!(offset, 2);
    assert_eq!(
        metadata,
        format!("hookline.fanout.v2;stream_time={};front=2;past=", t + 20)
    );

    fanout.kill().await.unwrap();
    // Re-published while fanout is down: within the window of the records,
    // an hour before "now".
    env.publish_at(&event("e1", "acme", "invoice.paid"), t + 30_000)
        .await;
    env.publish_at(&event("e3", "acme", "invoice.paid"), t + 30_010)
        .await;
    env.publish_at(&event("e2", "acme", "invoice.paid"), t + 30_020)
        .await;
    fanout.restart().await.unwrap();
    let (deliveries, metrics) = drain_and_stop(&env, fanout).await;

    assert_eq!(pairs(&deliveries), expected(&["e1", "e2", "e3"]));
    assert_eq!(counter(&metrics, DUPLICATES, r#"payload="same""#), 2.0);
    // The restarted process read e1 and e2 back from the partition.
    assert_eq!(
        counter(&metrics, "hookline_fanout_dedup_rebuild_records_total", ""),
        2.0
    );
    let (offset, metadata) = committed(&env).await;
    assert_eq!(offset, 5);
    assert_eq!(
        metadata,
        format!(
            "hookline.fanout.v2;stream_time={};front=5;past=",
            t + 30_020
        )
    );
}

/// The windows of several partitions are rebuilt one after another by one
/// reader kept between rebuilds: each must observe exactly its own partition's
/// records (none carried over from the partition read before it), or a
/// duplicate would pass or the records read back would be miscounted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_kill_9_every_partition_window_is_rebuilt_from_its_own_records() {
    let env = Env::new("fanout-dedup-partitions").await;
    let tenants = ["acme", "globex", "initech", "umbrella", "hooli", "soylent"];
    let url = "https://hooks.example/in";
    for tenant in tenants {
        env.put(&subscription(&format!("{tenant}-all"), tenant, &["*"], url))
            .await;
    }
    let t = an_hour_ago();
    for (i, tenant) in tenants.iter().enumerate() {
        let at = t + i as i64;
        env.publish_at(&event(&format!("{tenant}-1"), tenant, "a.b"), at)
            .await;
        env.publish_at(&event(&format!("{tenant}-2"), tenant, "a.b"), at + 20)
            .await;
    }
    let partitions: std::collections::BTreeSet<i32> = kafka::read_to_end(env.topics.events())
        .await
        .unwrap()
        .iter()
        .map(|m| m.partition())
        .collect();
    assert!(
        partitions.len() >= 2,
        "the tenants must span partitions for this test to mean anything: {partitions:?}"
    );

    let dir = tempfile::tempdir().unwrap();
    let mut fanout = env.start_binary(&[], &dir.path().join("fanout.log")).await;
    env.drained(DRAIN).await;
    fanout.kill().await.unwrap();
    // Each tenant's first event again (a duplicate within the window) and a new one.
    for (i, tenant) in tenants.iter().enumerate() {
        let at = t + 30_000 + i as i64;
        env.publish_at(&event(&format!("{tenant}-1"), tenant, "a.b"), at)
            .await;
        env.publish_at(&event(&format!("{tenant}-3"), tenant, "a.b"), at + 20)
            .await;
    }
    fanout.restart().await.unwrap();
    let (deliveries, metrics) = drain_and_stop(&env, fanout).await;

    let mut want: Vec<(String, String)> = tenants
        .iter()
        .flat_map(|tenant| (1..=3).map(move |n| (format!("{tenant}-{n}"), format!("{tenant}-all"))))
        .collect();
    want.sort();
    assert_eq!(pairs(&deliveries), want);
    assert_eq!(
        counter(&metrics, DUPLICATES, r#"payload="same""#),
        tenants.len() as f64
    );
    // Every partition's two records per tenant, read back once.
    assert_eq!(
        counter(&metrics, "hookline_fanout_dedup_rebuild_records_total", ""),
        (2 * tenants.len()) as f64
    );
    assert_eq!(
        counter(
            &metrics,
            "hookline_fanout_dedup_rebuilds_total",
            r#"outcome="done""#
        ),
        partitions.len() as f64
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outside_the_window_an_event_fans_out_again_under_the_same_delivery_ids() {
    let env = Env::new("fanout-dedup-outside").await;
    two_subscriptions(&env).await;
    let t = an_hour_ago();
    env.publish_at(&event("e1", "acme", "invoice.paid"), t)
        .await;
    // Another event moves the partition's stream time past e1's window.
    env.publish_at(&event("e2", "acme", "invoice.paid"), t + 2_500)
        .await;
    env.publish_at(&event("e1", "acme", "invoice.paid"), t + 2_600)
        .await;
    // Within the window of the second e1: a duplicate again.
    env.publish_at(&event("e1", "acme", "invoice.paid"), t + 4_000)
        .await;

    let dir = tempfile::tempdir().unwrap();
    let fanout = env
        .start_binary(&["--dedup-window", "2s"], &dir.path().join("fanout.log"))
        .await;
    let (deliveries, metrics) = drain_and_stop(&env, fanout).await;

    let mut want = expected(&["e1", "e1", "e2"]);
    want.sort();
    assert_eq!(pairs(&deliveries), want);
    for d in deliveries.iter().filter(|d| d.event_id == "e1") {
        // The receiver's webhook-id de-duplication catches the second one.
        assert_eq!(d.delivery_id, delivery_id("e1", &d.subscription_id));
    }
    assert_eq!(counter(&metrics, DUPLICATES, r#"payload="same""#), 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_payload_under_the_same_id_is_quarantined_and_counted() {
    let env = Env::new("fanout-dedup-changed").await;
    two_subscriptions(&env).await;
    let t = an_hour_ago();
    let first = event("e1", "acme", "invoice.paid");
    let mut changed = first.clone();
    changed.payload = br#"{"id":"e1","amount":42}"#.to_vec();
    env.publish_at(&first, t).await;
    env.publish_at(&changed, t + 1_000).await;

    let dir = tempfile::tempdir().unwrap();
    let fanout = env.start_binary(&[], &dir.path().join("fanout.log")).await;
    env.drained(DRAIN).await;
    let deliveries = env.deliveries().await;
    let quarantined = env.quarantined().await;
    let metrics = fanout.metrics().await.unwrap();
    fanout.stop().await.unwrap();

    assert_eq!(pairs(&deliveries), expected(&["e1"]));
    assert!(deliveries.iter().all(|d| d.payload == first.payload));
    assert_eq!(quarantined.len(), 1);
    let q = &quarantined[0];
    assert_eq!(q.reason, "duplicate_changed_payload");
    assert_eq!(q.value, encode(&changed), "kept byte for byte");
    assert_eq!(q.source_offset, 1);
    assert!(q.detail.contains("e1"), "{}", q.detail);
    assert_eq!(counter(&metrics, DUPLICATES, r#"payload="changed""#), 1.0);
    assert_eq!(counter(&metrics, DUPLICATES, r#"payload="same""#), 0.0);
    assert_eq!(
        counter(
            &metrics,
            "hookline_fanout_events_quarantined_total",
            r#"reason="duplicate_changed_payload""#
        ),
        1.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zero_window_turns_the_check_off() {
    let env = Env::new("fanout-dedup-off").await;
    two_subscriptions(&env).await;
    let t = an_hour_ago();
    env.publish_at(&event("e1", "acme", "invoice.paid"), t)
        .await;
    env.publish_at(&event("e1", "acme", "invoice.paid"), t + 1)
        .await;

    let dir = tempfile::tempdir().unwrap();
    let fanout = env
        .start_binary(&["--dedup-window", "0"], &dir.path().join("fanout.log"))
        .await;
    env.drained(DRAIN).await;
    let deliveries = env.deliveries().await;
    fanout.stop().await.unwrap();

    assert_eq!(pairs(&deliveries), expected(&["e1", "e1"]));
    assert_eq!(
        committed(&env).await.1,
        "hookline.fanout.v2;stream_time=-;front=2;past=",
        "no window: the checkpoint without a stream time"
    );
}
