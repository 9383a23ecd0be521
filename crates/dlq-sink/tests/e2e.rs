//! End to end through a real dispatcher: deliveries rejected by a failing receiver are
//! dead-lettered and archived by the sink; a replay preview sends nothing; once the receiver
//! is healthy, `replay --execute` from the archive gets every one of them delivered with its
//! original `webhook-id`. A 410 disables its subscription and the deliveries after it are kept,
//! to be replayed once it is enabled again.

#![allow(clippy::unwrap_used)]

mod common;

use std::{
    collections::BTreeSet,
    time::{Duration, SystemTime},
};

use clap::Parser;
use common::{wait_for_archive, Env};
use hookline_core::epoch;
use hookline_envelope::{delivery_id, encode, Delivery, Subscription};
use hookline_testkit::{
    kafka,
    receiver::{Behaviour, Receiver},
    records,
};
use rdkafka::producer::FutureRecord;
use tokio_util::sync::CancellationToken;

#[derive(Parser)]
struct DispatcherCli {
    #[command(flatten)]
    config: hookline_dispatcher::Config,
}

const DELIVERIES: usize = 6;

type Dispatcher = tokio::task::JoinHandle<Result<(), hookline_dispatcher::DispatcherError>>;

/// A dispatcher for `env` in this process, signing with the secrets in `secrets`.
fn start_dispatcher(env: &Env, secrets: &std::path::Path) -> (CancellationToken, Dispatcher) {
    let group = format!("{}dispatcher", env.prefix);
    let brokers = kafka::brokers();
    let dispatcher_args = [
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
        secrets.to_str().unwrap(),
        "--egress-allow-http",
        "--egress-allow-cidr",
        "127.0.0.0/8",
    ];
    let config = DispatcherCli::try_parse_from(dispatcher_args)
        .unwrap()
        .config;
    let stop = CancellationToken::new();
    (
        stop.clone(),
        tokio::spawn(hookline_dispatcher::run(config, stop)),
    )
}

/// An enabled subscription of tenant `acme` for every event type, posting to `url`,
/// and a secrets directory holding its signing secret.
fn subscribed(id: &str, url: &str, max_in_flight: i32) -> (tempfile::TempDir, Subscription) {
    let secrets = tempfile::tempdir().unwrap();
    std::fs::write(
        secrets.path().join("acme-key"),
        "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n",
    )
    .unwrap();
    let sub = Subscription {
        subscription_id: id.into(),
        tenant_id: "acme".into(),
        url: url.into(),
        event_types: vec!["*".into()],
        secret_ref: "acme-key".into(),
        enabled: true,
        max_in_flight,
        rate_limit_per_s: None,
        disabled_reason: None,
        disabled_at: None,
        ordering: "unordered".into(),
        version: 1,
        updated_at: epoch::millis(SystemTime::now()),
    };
    (secrets, sub)
}

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

fn first_attempt(sub: &Subscription, event_id: &str) -> Delivery {
    records::delivery(sub, event_id, epoch::millis(SystemTime::now()))
        .payload(format!(r#"{{"event":"{event_id}"}}"#).as_bytes())
        .build()
}

/// A 410 disables the subscription; the deliveries published after it are kept
/// (dead letters `subscription_disabled`, never attempted), a delivery of a
/// deleted subscription is kept as `cancelled`, `inspect` counts them by reason,
/// and once the subscription is enabled again `replay --subscription` sends each
/// kept delivery with its own `webhook-id`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_410_disables_the_subscription_and_its_kept_deliveries_are_replayed_after_enable() {
    const KEPT: usize = 3;
    let env = Env::new("e2e-gone").await;
    let receiver = Receiver::start().await.unwrap();
    receiver.set("/gone", Behaviour::status(410));
    let (secrets, sub) = subscribed("sub-gone", &receiver.url("/gone"), 1);
    put(&env, &sub).await;
    let (stop_dispatcher, dispatcher) = start_dispatcher(&env, secrets.path());
    let sink = env.start(&[]);
    let deliveries = env.topics.deliveries().to_owned();
    let send = |d: Delivery| {
        let env = &env;
        let deliveries = deliveries.clone();
        async move {
            env.send(&deliveries, Some(d.tenant_id.as_bytes()), &encode(&d), None)
                .await
        }
    };

    // The 410: dead-lettered `gone`, and the subscription written back disabled.
    send(first_attempt(&sub, "evt-410")).await;
    let dlq = env.topics.dlq().to_owned();
    wait_for_archive(env.archive_dir(), Duration::from_secs(60), |got| {
        got.iter().any(|(t, _, _)| *t == dlq)
    })
    .await;
    // Published after it: kept, never attempted. And one of a deleted subscription.
    let mut kept_ids = BTreeSet::new();
    for n in 0..KEPT {
        let d = first_attempt(&sub, &format!("evt-kept-{n}"));
        kept_ids.insert(d.delivery_id.clone());
        send(d).await;
    }
    let mut orphan = first_attempt(&sub, "evt-orphan");
    orphan.subscription_id = "sub-deleted".into();
    orphan.delivery_id = delivery_id("evt-orphan", "sub-deleted");
    send(orphan).await;
    wait_for_archive(env.archive_dir(), Duration::from_secs(60), |got| {
        got.iter().filter(|(t, _, _)| *t == dlq).count() >= 2 + KEPT
    })
    .await;
    assert_eq!(receiver.count(), 1, "nothing attempted after the 410");
    let (code, stdout, stderr) = env.cli(&["inspect", "--from-archive", "--count-by", "reason"]);
    assert_eq!(code, 0, "{stderr}");
    for (reason, n) in [
        ("gone", 1),
        ("subscription_disabled", KEPT),
        ("cancelled", 1),
    ] {
        assert!(
            stdout
                .lines()
                .any(|l| l.split_whitespace().collect::<Vec<_>>() == [reason, &n.to_string()]),
            "{reason} {n} not in:\n{stdout}"
        );
    }

    // Enabled again (as `hookline-fanout subscriptions enable` writes it), the
    // endpoint healthy: a new delivery arrives, so the dispatcher has the table.
    receiver.set("/gone", Behaviour::status(204));
    let disabled = Subscription {
        enabled: false,
        disabled_reason: Some("gone".into()),
        disabled_at: Some(0),
        ordering: "unordered".into(),
        version: 2,
        ..sub.clone()
    };
    put(
        &env,
        &hookline_runtime::subscriptions::enabled(&disabled, 0),
    )
    .await;
    let probe = first_attempt(&sub, "evt-after-enable");
    let probe_id = probe.delivery_id.clone();
    send(probe).await;
    assert!(
        receiver
            .wait_until(Duration::from_secs(60), |r| r
                .iter()
                .any(|q| q.header("webhook-id") == probe_id))
            .await,
        "a delivery after enabling never arrived"
    );
    let seen = receiver.count();
    let (code, stdout, stderr) = env.cli(&[
        "replay",
        "--from-archive",
        "--subscription",
        "sub-gone",
        "--reason",
        "subscription_disabled",
        "--execute",
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains(&format!("replayed {KEPT}, failed 0")),
        "{stdout}"
    );
    assert!(
        receiver
            .wait_until(Duration::from_secs(60), |r| r.len() >= seen + KEPT)
            .await,
        "{} of {KEPT} replays arrived",
        receiver.count() - seen
    );
    let replayed: BTreeSet<String> = receiver.requests()[seen..]
        .iter()
        .map(|r| r.header("webhook-id").to_owned())
        .collect();
    assert_eq!(
        replayed, kept_ids,
        "each kept delivery, with its own webhook-id"
    );

    stop_dispatcher.cancel();
    dispatcher.await.unwrap().unwrap();
    sink.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_replayed_after_the_receiver_recovers_keep_their_webhook_id() {
    let env = Env::new("e2e-replay").await;
    let receiver = Receiver::start().await.unwrap();
    receiver.set("/hook", Behaviour::status(400));

    let (secrets, sub) = subscribed("sub-acme", &receiver.url("/hook"), 4);
    put(&env, &sub).await;
    let mut ids = BTreeSet::new();
    for n in 0..DELIVERIES {
        let d = first_attempt(&sub, &format!("evt-e2e-{n}"));
        ids.insert(d.delivery_id.clone());
        env.send(env.topics.deliveries(), Some(b"acme"), &encode(&d), None)
            .await;
    }

    // The dispatcher and the sink, in this process.
    let (stop_dispatcher, mut dispatcher) = start_dispatcher(&env, secrets.path());
    let mut sink = env.start(&[]);

    // Every delivery is rejected (400), dead-lettered and archived. A stage
    // that ends meanwhile fails the test at once, with its result.
    let dlq = env.topics.dlq().to_owned();
    let archived = async {
        assert!(
            receiver
                .wait_until(Duration::from_secs(60), |r| r.len() >= DELIVERIES)
                .await,
            "the receiver saw {} of {DELIVERIES} first attempts",
            receiver.count()
        );
        wait_for_archive(env.archive_dir(), Duration::from_secs(60), |got| {
            got.iter().filter(|(t, _, _)| *t == dlq).count() >= DELIVERIES
        })
        .await;
    };
    tokio::select! {
        () = archived => {}
        ended = &mut dispatcher => panic!("the dispatcher ended early: {ended:?}"),
        ended = &mut sink.task => panic!("the sink ended early: {ended:?}"),
    }
    let first_ids: BTreeSet<String> = receiver
        .requests()
        .iter()
        .map(|r| r.header("webhook-id").to_owned())
        .collect();
    assert_eq!(first_ids, ids);

    // The receiver is healthy again. A preview sends nothing.
    receiver.set("/hook", Behaviour::status(204));
    let seen = receiver.count();
    let (code, stdout, stderr) = env.cli(&["replay", "--from-archive", "--tenant", "acme"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains(&format!("preview: {DELIVERIES} record(s)")),
        "{stdout}"
    );
    assert!(stdout.contains("rejected_4xx"), "{stdout}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(receiver.count(), seen, "a preview must send nothing");
    assert_eq!(
        kafka::read_to_end(env.topics.deliveries())
            .await
            .unwrap()
            .len(),
        DELIVERIES,
        "a preview must write nothing"
    );

    // Replay from the archive: each arrives once more, with its original webhook-id.
    let (code, stdout, stderr) = env.cli(&[
        "replay",
        "--from-archive",
        "--tenant",
        "acme",
        "--reason",
        "rejected_4xx",
        "--execute",
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains(&format!("replayed {DELIVERIES}, failed 0")),
        "{stdout}"
    );
    assert!(
        receiver
            .wait_until(Duration::from_secs(60), |r| r.len() >= seen + DELIVERIES)
            .await,
        "the receiver saw {} replays of {DELIVERIES}",
        receiver.count() - seen
    );
    let replays = &receiver.requests()[seen..];
    let replay_ids: BTreeSet<String> = replays
        .iter()
        .map(|r| r.header("webhook-id").to_owned())
        .collect();
    assert_eq!(replay_ids, ids, "replays carry the original webhook-id");
    assert_eq!(replays.len(), DELIVERIES);

    stop_dispatcher.cancel();
    dispatcher.await.unwrap().unwrap();
    sink.stop().await;
}
