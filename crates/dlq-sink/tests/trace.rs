//! `trace` end to end through a real dispatcher and sink, with a ladder of seconds: a
//! delivery that fails twice and then arrives, one rejected (dead-lettered) and replayed with
//! `replay --execute` once its endpoint recovers, and one whose subscription is deleted while
//! it waits on a tier (dead-lettered `cancelled`). `trace` shows each timeline completely and
//! in order, from the attempt-log topic and, once the sink archived it, from the archive.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, SystemTime};

use clap::Parser;
use common::{wait_for_archive, Env};
use hookline_core::epoch;
use hookline_envelope::{encode, Delivery, Subscription};
use hookline_testkit::{
    kafka,
    receiver::{Behaviour, Receiver},
    records,
};
use rdkafka::producer::FutureRecord;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

#[derive(Parser)]
struct DispatcherCli {
    #[command(flatten)]
    config: hookline_dispatcher::Config,
}

const TIERS: &str = "t1=3s,t2=4s,t3=5s";

async fn put(env: &Env, sub: &Subscription) {
    env.producer
        .send(
            FutureRecord::to(env.topics.subscriptions())
                .key(sub.subscription_id.as_bytes())
                .payload(&encode(sub)),
            Duration::from_secs(10),
        )
        .await
        .map_err(|(e, _)| e)
        .unwrap();
}

async fn delete(env: &Env, id: &str) {
    env.producer
        .send(
            FutureRecord::<[u8], [u8]>::to(env.topics.subscriptions()).key(id.as_bytes()),
            Duration::from_secs(10),
        )
        .await
        .map_err(|(e, _)| e)
        .unwrap();
}

fn subscription(id: &str, url: &str) -> Subscription {
    Subscription {
        subscription_id: id.into(),
        tenant_id: "acme".into(),
        url: url.into(),
        event_types: vec!["*".into()],
        secret_ref: "acme-key".into(),
        enabled: true,
        max_in_flight: 1,
        rate_limit_per_s: None,
        disabled_reason: None,
        disabled_at: None,
        ordering: "unordered".into(),
        version: 1,
        updated_at: epoch::millis(SystemTime::now()),
    }
}

fn first_attempt(sub: &Subscription, event_id: &str) -> Delivery {
    records::delivery(sub, event_id, epoch::millis(SystemTime::now())).build()
}

/// `trace --json` steps as `(step, outcome, attempt, status, from_tier, tier)`.
fn steps(stdout: &str) -> Vec<(String, String, i64, Option<i64>, String, String)> {
    let s = |v: &Value| v.as_str().unwrap_or("-").to_owned();
    stdout
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .map(|v| {
            (
                s(&v["step"]),
                s(&v["outcome"]),
                v["attempt"].as_i64().unwrap_or(0),
                v["status"].as_i64(),
                s(&v["from_tier"]),
                s(&v["tier"]),
            )
        })
        .collect()
}

fn step(
    step: &str,
    outcome: &str,
    attempt: i64,
    status: Option<i64>,
    from: &str,
    tier: &str,
) -> (String, String, i64, Option<i64>, String, String) {
    (
        step.into(),
        outcome.into(),
        attempt,
        status,
        from.into(),
        tier.into(),
    )
}

fn trace(env: &Env, args: &[&str]) -> String {
    let mut all = vec!["trace", "--json"];
    all.extend_from_slice(args);
    let (code, stdout, stderr) = env.cli(&all);
    assert_eq!(code, 0, "{stderr}");
    stdout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trace_shows_retries_a_replay_and_a_cancellation_in_order_from_topic_and_archive() {
    let env = Env::new("trace").await;
    let tiers: Vec<String> = ["t1", "t2", "t3"]
        .iter()
        .map(|t| format!("{}deliveries.{t}", env.prefix))
        .collect();
    let plain: Vec<(&str, i32)> = tiers.iter().map(|t| (t.as_str(), 1)).collect();
    kafka::create_topics(&plain, &[]).await.unwrap();
    let receiver = Receiver::start().await.unwrap();
    receiver.set("/flaky", Behaviour::status(204).fail_first(2, 503));
    receiver.set("/reject", Behaviour::status(404));
    receiver.set("/doomed", Behaviour::status(503));
    let secrets = tempfile::tempdir().unwrap();
    std::fs::write(
        secrets.path().join("acme-key"),
        "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n",
    )
    .unwrap();
    let flaky = subscription("sub-flaky", &receiver.url("/flaky"));
    let reject = subscription("sub-reject", &receiver.url("/reject"));
    let doomed = subscription("sub-doomed", &receiver.url("/doomed"));
    for s in [&flaky, &reject, &doomed] {
        put(&env, s).await;
    }
    let group = format!("{}dispatcher", env.prefix);
    let brokers = kafka::brokers();
    let args = vec![
        "hookline-dispatcher",
        "--brokers",
        &brokers,
        "--topic-prefix",
        &env.prefix,
        "--http-addr",
        "127.0.0.1:0",
        "--group-id",
        &group,
        "--secrets-dir",
        secrets.path().to_str().unwrap(),
        "--egress-allow-http",
        "--egress-allow-cidr",
        "127.0.0.0/8",
        "--retry-tiers",
        TIERS,
        "--retry-jitter",
        "0s",
    ];
    let config = DispatcherCli::try_parse_from(args).unwrap().config;
    let stop = CancellationToken::new();
    let dispatcher = tokio::spawn(hookline_dispatcher::run(config, stop.clone()));
    let sink = env.start(&[]);

    let d_flaky = first_attempt(&flaky, "evt-flaky");
    let d_reject = first_attempt(&reject, "evt-reject");
    let d_doomed = first_attempt(&doomed, "evt-doomed");
    for d in [&d_flaky, &d_reject, &d_doomed] {
        env.send(
            env.topics.deliveries(),
            Some(d.tenant_id.as_bytes()),
            &encode(d),
            None,
        )
        .await;
    }
    // The doomed delivery's first attempt failed: delete its subscription while
    // it waits on t1 (3 s), so its retry finds it gone.
    assert!(
        receiver
            .wait_until(Duration::from_secs(60), |r| r
                .iter()
                .any(|q| q.path == "/doomed"))
            .await
    );
    delete(&env, "sub-doomed").await;
    assert!(
        receiver
            .wait_until(Duration::from_secs(60), |r| r
                .iter()
                .any(|q| q.path == "/flaky" && q.status == 204))
            .await,
        "the flaky delivery never arrived"
    );
    // Both dead letters are in the DLQ: replay the rejected one once its endpoint is fixed.
    let dlq = env.topics.dlq().to_owned();
    wait_for_archive(env.archive_dir(), Duration::from_secs(60), |got| {
        got.iter().filter(|(t, _, _)| *t == dlq).count() >= 2
    })
    .await;
    receiver.set("/reject", Behaviour::status(204));
    let (code, stdout, stderr) = env.cli(&["replay", "--subscription", "sub-reject", "--execute"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("replayed 1, failed 0"), "{stdout}");
    assert!(
        receiver
            .wait_until(Duration::from_secs(60), |r| r
                .iter()
                .any(|q| q.path == "/reject" && q.status == 204))
            .await,
        "the replay never arrived"
    );
    // Every attempt record is committed: each is in (or before) the transaction
    // that moves its record's offset, here to the end of every topic read.
    for topic in [env.topics.deliveries(), &tiers[0], &tiers[1]] {
        kafka::wait_committed_to_end(&group, topic, Duration::from_secs(30)).await;
    }
    let attempts = env.topics.attempts().to_owned();
    // Data records only (the high watermark counts transaction markers too).
    let total = kafka::read_to_end(&attempts).await.unwrap().len();

    // The fan-out, dated by the created_at every record carries (fanout writes
    // no record of its own); a replay keeps it, so there is one.
    let fanned_out = || step("fanned_out", "-", 0, None, "-", "-");
    let flaky_steps = vec![
        fanned_out(),
        step("attempted", "retried", 1, Some(503), "-", "t1"),
        step("attempted", "retried", 2, Some(503), "t1", "t2"),
        step("attempted", "delivered", 3, Some(204), "t2", "-"),
    ];
    let reject_steps = vec![
        fanned_out(),
        step("attempted", "rejected", 1, Some(404), "-", "-"),
        step("dead_lettered", "rejected_4xx", 1, Some(404), "-", "-"),
        step("replayed", "-", 0, None, "-", "-"),
        step("attempted", "delivered", 1, Some(204), "-", "-"),
    ];
    let doomed_steps = vec![
        fanned_out(),
        step("attempted", "retried", 1, Some(503), "-", "t1"),
        step("dead_lettered", "cancelled", 1, None, "t1", "-"),
    ];
    let from_topic_flaky = trace(&env, &["--subscription", "sub-flaky", "--since", "1h"]);
    assert_eq!(steps(&from_topic_flaky), flaky_steps, "{from_topic_flaky}");
    let from_topic_reject = trace(&env, &["--delivery-id", &d_reject.delivery_id]);
    assert_eq!(
        steps(&from_topic_reject),
        reject_steps,
        "{from_topic_reject}"
    );
    let replayed: Vec<Value> = from_topic_reject
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(replayed[3]["replay_of"]["topic"], dlq.as_str());
    let from_topic_doomed = trace(&env, &["--event-id", "evt-doomed"]);
    assert_eq!(
        steps(&from_topic_doomed),
        doomed_steps,
        "{from_topic_doomed}"
    );
    // The fan-out is at the delivery's created_at.
    for (out, d) in [
        (&from_topic_flaky, &d_flaky),
        (&from_topic_reject, &d_reject),
        (&from_topic_doomed, &d_doomed),
    ] {
        let first: Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
        let created = chrono::DateTime::<chrono::Utc>::from_timestamp_millis(d.created_at)
            .unwrap()
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        assert_eq!(first["at"], created.as_str(), "{out}");
    }
    // Times only ever move forward along a timeline.
    for out in [&from_topic_flaky, &from_topic_reject, &from_topic_doomed] {
        let at: Vec<String> = out
            .lines()
            .map(|l| {
                serde_json::from_str::<Value>(l).unwrap()["at"]
                    .as_str()
                    .unwrap()
                    .to_owned()
            })
            .collect();
        assert!(at.windows(2).all(|w| w[0] <= w[1]), "{at:?}");
    }
    // The table names every step too.
    let (code, table, stderr) = env.cli(&["trace", "--tenant", "acme"]);
    assert_eq!(code, 0, "{stderr}");
    for want in [
        "fanned out",
        "retried → t1",
        "delivered",
        "dead-lettered (rejected_4xx)",
        "replayed from",
        "dead-lettered (cancelled)",
        &d_doomed.delivery_id,
    ] {
        assert!(table.contains(want), "{want} not in:\n{table}");
    }
    assert!(stderr.contains("deliveries 3"), "{stderr}");

    // The sink archives the attempt log: the same timelines from the archive.
    wait_for_archive(env.archive_dir(), Duration::from_secs(60), |got| {
        got.iter().filter(|(t, _, _)| *t == attempts).count() >= total
    })
    .await;
    let dir = env.archive_dir().to_str().unwrap().to_owned();
    assert_eq!(
        trace(&env, &["--archive", &dir, "--subscription", "sub-flaky"]),
        from_topic_flaky
    );
    assert_eq!(
        trace(
            &env,
            &["--from-archive", "--delivery-id", &d_reject.delivery_id]
        ),
        from_topic_reject
    );
    assert_eq!(
        trace(&env, &["--archive", &dir, "--event-id", "evt-doomed"]),
        from_topic_doomed
    );

    stop.cancel();
    dispatcher.await.unwrap().unwrap();
    sink.stop().await;
}
