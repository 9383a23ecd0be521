//! The attempt log on real Kafka: every attempt, parking and dead-lettering of
//! a delivery is one `AttemptRecord` on `deliveries.attempts`, keyed by its
//! tenant, in order, committed with the offsets (read here `read_committed`);
//! `--attempt-log=false` writes none.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::{delivery, Env};
use hookline_envelope::{decode, AttemptRecord};
use hookline_testkit::{kafka, receiver::Behaviour};
use rdkafka::message::Message;

const LADDER: &[(&str, &str)] = &[("t1", "1s"), ("t2", "2s"), ("t3", "3s")];

/// Every committed attempt record, with its key, in topic order (one partition).
async fn attempt_records(env: &Env) -> Vec<(String, AttemptRecord)> {
    kafka::read_to_end(env.topics.attempts())
        .await
        .unwrap()
        .iter()
        .map(|m| {
            (
                String::from_utf8(m.key().unwrap().to_vec()).unwrap(),
                decode::<AttemptRecord>(m.payload().unwrap()).unwrap(),
            )
        })
        .collect()
}

/// `(kind, outcome, attempt, status, from_tier, tier)` of each record.
type Step = (
    String,
    String,
    i32,
    Option<i32>,
    Option<String>,
    Option<String>,
);

fn steps(records: &[&AttemptRecord]) -> Vec<Step> {
    records
        .iter()
        .map(|r| {
            (
                r.kind.clone(),
                r.outcome.clone(),
                r.attempt,
                r.status,
                r.from_tier.clone(),
                r.tier.clone(),
            )
        })
        .collect()
}

fn step(
    kind: &str,
    outcome: &str,
    attempt: i32,
    status: Option<i32>,
    from: Option<&str>,
    tier: Option<&str>,
) -> Step {
    (
        kind.into(),
        outcome.into(),
        attempt,
        status,
        from.map(Into::into),
        tier.map(Into::into),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_attempt_parking_and_dead_lettering_is_logged_in_order() {
    let env = Env::with_ladder("attempt-log", 1, LADDER).await;
    env.receiver
        .set("/flaky", Behaviour::status(204).fail_first(2, 503));
    env.receiver
        .set("/missing", Behaviour::status(404).body("secret-ish body"));
    let flaky = env.subscription("sub-flaky", "tenant-a", "/flaky", "one");
    let missing = env.subscription("sub-missing", "tenant-b", "/missing", "one");
    let gone = env.subscription("sub-gone", "tenant-c", "/never", "one");
    for s in [&flaky, &missing] {
        env.put(s).await;
    }
    let mut d_flaky = delivery(&flaky, 0);
    d_flaky.traceparent = Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into());
    let d_missing = delivery(&missing, 0);
    // Its subscription was never put: deleted, as far as the dispatcher knows.
    let d_gone = delivery(&gone, 0);
    let running = env.start(&["--retry-jitter", "0s", "--max-attempts", "5"]);
    env.publish(&[d_flaky.clone(), d_missing.clone(), d_gone.clone()])
        .await;
    let arrived = env
        .receiver
        .wait_until(Duration::from_secs(60), |r| {
            r.iter().any(|q| q.path == "/flaky" && q.status == 204)
        })
        .await;
    assert!(arrived, "only {} requests arrived", env.receiver.count());
    env.committed_to_end(Duration::from_secs(30)).await;
    for i in 0..2 {
        let (_, topic) = env.topics.retries().nth(i).unwrap();
        env.topic_committed_to_end(topic, Duration::from_secs(30))
            .await;
    }
    running.shutdown().await;

    let records = attempt_records(&env).await;
    for (key, r) in &records {
        assert_eq!(key, &r.tenant_id, "keyed by tenant");
        assert!(r.policy_version.as_deref().unwrap().starts_with("ladder-"));
    }
    // Every record dates its delivery's fan-out, for `trace`'s first step.
    for d in [&d_flaky, &d_missing, &d_gone] {
        for (_, r) in records
            .iter()
            .filter(|(_, r)| r.delivery_id == d.delivery_id)
        {
            assert_eq!(r.created_at, Some(d.created_at), "{r:?}");
        }
    }
    let of = |id: &str| -> Vec<&AttemptRecord> {
        records
            .iter()
            .map(|(_, r)| r)
            .filter(|r| r.delivery_id == id)
            .collect()
    };

    let flaky = of(&d_flaky.delivery_id);
    assert_eq!(
        steps(&flaky),
        [
            step("attempted", "retried", 1, Some(503), None, Some("t1")),
            step("attempted", "retried", 2, Some(503), Some("t1"), Some("t2")),
            step("attempted", "delivered", 3, Some(204), Some("t2"), None),
        ]
    );
    for pair in flaky.windows(2) {
        assert!(pair[0].at <= pair[1].at, "in order: {pair:?}");
        // A retry is never due before the attempt after it starts.
        assert!(pair[0].next_due_at.unwrap() <= pair[1].at, "{pair:?}");
    }
    for r in &flaky {
        assert!(r.duration_ms.is_some_and(|ms| ms >= 0));
        assert_eq!(r.event_id, d_flaky.event_id);
        assert_eq!(r.subscription_id, "sub-flaky");
        assert_eq!(
            r.trace_id.as_deref(),
            Some("4bf92f3577b34da6a3ce929d0e0e4736")
        );
        assert_eq!(r.detail, None, "a response's body is never logged");
    }
    assert_eq!(flaky[0].classification.as_deref(), Some("http_503"));

    let missing = of(&d_missing.delivery_id);
    assert_eq!(
        steps(&missing),
        [
            step("attempted", "rejected", 1, Some(404), None, None),
            step("dead_lettered", "rejected_4xx", 1, Some(404), None, None),
        ]
    );
    assert!(missing.iter().all(|r| r.detail.is_none()), "{missing:?}");

    let gone = of(&d_gone.delivery_id);
    assert_eq!(
        steps(&gone),
        [step("dead_lettered", "cancelled", 0, None, None, None)]
    );
    assert!(gone[0].detail.as_deref().unwrap().contains("deleted"));
    assert_eq!(gone[0].duration_ms, None);

    assert_eq!(records.len(), 6, "nothing else: {records:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attempt_log_false_writes_no_record() {
    let env = Env::with_ladder("attempt-log-off", 1, LADDER).await;
    env.receiver
        .set("/flaky", Behaviour::status(204).fail_first(1, 503));
    let sub = env.subscription("sub-off", "tenant-off", "/flaky", "one");
    env.put(&sub).await;
    let running = env.start(&["--attempt-log=false", "--retry-jitter", "0s"]);
    env.publish(&[delivery(&sub, 0)]).await;
    let arrived = env
        .receiver
        .wait_until(Duration::from_secs(60), |r| {
            r.iter().any(|q| q.status == 204)
        })
        .await;
    assert!(arrived);
    let (_, t1) = env.topics.retries().next().unwrap();
    env.topic_committed_to_end(t1, Duration::from_secs(30))
        .await;
    running.shutdown().await;
    assert_eq!(env.receiver.count(), 2, "it was attempted twice");
    assert!(attempt_records(&env).await.is_empty());
}
