//! The dispatcher on real Kafka against a local receiver: signed requests with
//! the right headers and bodies, cancellation at attempt time, retries to the
//! first tier, dead letters, egress refusals, and fairness between tenants.

#![allow(clippy::unwrap_used)]

mod common;

use std::{
    collections::HashSet,
    time::{Duration, Instant, SystemTime},
};

use base64::{engine::general_purpose::STANDARD, Engine};
use common::{delivery, now_ms, Env};
use hmac::{Hmac, Mac};
use hookline_envelope::{decode, DeadLetter, Delivery, Subscription};
use hookline_testkit::{
    kafka,
    receiver::{Behaviour, Recorded},
};
use rdkafka::message::Message;
use sha2::Sha256;

/// Verifies a `webhook-signature` the way a receiver does: any `v1,` entry that
/// matches HMAC-SHA256(key, "{id}.{ts}.{body}") for this key.
fn signed_with(req: &Recorded, whsec: &str) -> bool {
    let key = STANDARD
        .decode(whsec.trim().strip_prefix("whsec_").unwrap())
        .unwrap();
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).unwrap();
    mac.update(
        format!(
            "{}.{}.",
            req.header("webhook-id"),
            req.header("webhook-timestamp")
        )
        .as_bytes(),
    );
    mac.update(&req.body);
    let expected = format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()));
    req.header("webhook-signature")
        .split(' ')
        .any(|s| s == expected)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_arrive_signed_with_headers_and_body_and_disabled_or_deleted_ones_are_kept() {
    let env = Env::new("disp-headers", 3).await;
    let one = env.subscription("sub-one", "acme", "/one", "one");
    let two = env.subscription("sub-two", "globex", "/two", "two");
    let mut disabled = env.subscription("sub-off", "initech", "/off", "one");
    disabled.enabled = false;
    let deleted = env.subscription("sub-gone", "umbrella", "/gone", "one");
    for s in [&one, &two, &disabled, &deleted] {
        env.put(s).await;
    }
    env.delete("sub-gone").await;
    let running = env.start(&[]);

    let mut all: Vec<Delivery> = Vec::new();
    for s in [&one, &two, &disabled, &deleted] {
        all.extend((0..10).map(|n| delivery(s, n)));
    }
    env.publish(&all).await;
    let arrived = env
        .receiver
        .wait_until(Duration::from_secs(60), |r| r.len() >= 20)
        .await;
    if !arrived {
        // Seen once in a few CI runs, never reproduced locally (24 runs, idle
        // and with both cores busy): say as much as possible when it happens.
        let count = env.receiver.count();
        let progress = kafka::group_progress(&env.group, env.topics.deliveries()).await;
        let state = running.state().await;
        panic!(
            "only {count} requests arrived; committed/high on deliveries {progress:?}; the dispatcher {state} (RUST_LOG=info shows its log)"
        );
    }
    // Every record is finished (delivered or kept) before the commit reaches the end.
    env.committed_to_end(Duration::from_secs(30)).await;
    running.shutdown().await;

    let requests = env.receiver.requests();
    assert_eq!(requests.len(), 20, "kept deliveries are never POSTed");
    assert!(env.receiver.requests_to("/off").is_empty());
    assert!(env.receiver.requests_to("/gone").is_empty());
    // The disabled subscription's deliveries and the deleted one's are dead letters,
    // unattempted and unchanged, so `replay` sends them as they were.
    let mut kept: Vec<(String, String)> = Vec::new();
    for dl in env.dead_letters().await {
        let original = all
            .iter()
            .find(|d| d.delivery_id == dl.delivery.delivery_id)
            .expect("a dead letter of a published delivery");
        assert_eq!(&dl.delivery, original, "kept unchanged");
        assert_eq!(dl.last_status, None);
        kept.push((dl.delivery.subscription_id.clone(), dl.reason.clone()));
    }
    kept.sort();
    let expected: Vec<(String, String)> = [
        ("sub-gone", "cancelled"),
        ("sub-off", "subscription_disabled"),
    ]
    .iter()
    .flat_map(|(s, r)| std::iter::repeat_n((s.to_string(), r.to_string()), 10))
    .collect();
    assert_eq!(kept, expected);
    let secrets: std::collections::HashMap<&str, Vec<&str>> = common::SECRETS
        .iter()
        .map(|(name, content)| {
            let keys = content
                .lines()
                .filter(|l| l.starts_with("whsec_"))
                .collect();
            (*name, keys)
        })
        .collect();
    let now_s = now_ms() / 1000;
    for d in all
        .iter()
        .filter(|d| d.subscription_id == "sub-one" || d.subscription_id == "sub-two")
    {
        let req = requests
            .iter()
            .find(|r| r.header("webhook-id") == d.delivery_id)
            .unwrap_or_else(|| panic!("{} did not arrive", d.delivery_id));
        assert_eq!(req.method, "POST");
        assert_eq!(&req.body[..], &d.payload[..], "the exact payload");
        assert_eq!(req.header("content-type"), "application/json");
        assert_eq!(req.header("webhook-event-type"), "invoice.paid");
        assert!(req.header("user-agent").starts_with("hookline/"));
        let ts: i64 = req.header("webhook-timestamp").parse().unwrap();
        assert!((ts - now_s).abs() < 120, "timestamp {ts} is now-ish");
        // The attempt's start in µs: before the request arrived, and after the
        // delivery was created.
        let started: i64 = req.header("webhook-attempt-started").parse().unwrap();
        let arrived = hookline_core::epoch::micros(req.received_at);
        assert!(
            started <= arrived && started >= d.created_at * 1000,
            "attempt started at {started} µs, created {} ms, arrived {arrived} µs",
            d.created_at
        );
        let secret_ref = if d.subscription_id == "sub-one" {
            "one"
        } else {
            "two"
        };
        let keys = &secrets[secret_ref];
        assert_eq!(
            req.header("webhook-signature").split(' ').count(),
            keys.len(),
            "one signature per active key"
        );
        for key in keys {
            assert!(
                signed_with(req, key),
                "{} not signed with every key",
                d.delivery_id
            );
        }
        assert!(
            !signed_with(req, "whsec_d3Jvbmcta2V5"),
            "a wrong key never verifies"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_go_to_the_first_tier_and_rejections_to_the_dlq() {
    let env = Env::new("disp-outcomes", 1).await;
    env.receiver
        .set("/busy", Behaviour::status(503).retry_after("3"));
    env.receiver
        .set("/gone", Behaviour::status(410).body("no such hook"));
    let busy = env.subscription("sub-busy", "t1", "/busy", "one");
    let gone = env.subscription("sub-gone", "t2", "/gone", "one");
    let mut private = env.subscription("sub-private", "t3", "/x", "one");
    private.url = "https://10.1.2.3/hook".to_owned();
    let nosecret = env.subscription("sub-nosecret", "t4", "/nosecret", "missing");
    for s in [&busy, &gone, &private, &nosecret] {
        env.put(s).await;
    }
    let running = env.start(&[]);
    let ds = [
        delivery(&busy, 0),
        delivery(&gone, 0),
        delivery(&private, 0),
        delivery(&nosecret, 0),
    ];
    let before = now_ms();
    env.publish(&ds).await;
    env.committed_to_end(Duration::from_secs(60)).await;
    running.shutdown().await;

    let (_, first_tier) = env.topics.retries().next().unwrap();
    let retries: Vec<Delivery> = kafka::read_to_end(first_tier)
        .await
        .unwrap()
        .iter()
        .map(|m| decode(m.payload().unwrap()).unwrap())
        .collect();
    let mut outcomes: Vec<(String, String)> = retries
        .iter()
        .map(|r| (r.subscription_id.clone(), r.last_outcome.clone().unwrap()))
        .collect();
    outcomes.sort();
    assert_eq!(
        outcomes,
        [
            ("sub-busy".to_owned(), "http_503".to_owned()),
            ("sub-nosecret".to_owned(), "missing_secret".to_owned()),
        ]
    );
    for r in &retries {
        assert_eq!(r.attempt, 1);
        let first = r.first_attempt_at.unwrap();
        assert!(first >= before);
        assert_eq!(r.last_attempt_at, Some(first));
        let wait = r.due_at - first;
        assert!(
            (10_000..20_000).contains(&wait),
            "due 10 s after the attempt, got {wait} ms"
        );
        let original = ds.iter().find(|d| d.delivery_id == r.delivery_id).unwrap();
        assert_eq!(r.payload, original.payload);
    }
    assert!(
        env.receiver.requests_to("/nosecret").is_empty(),
        "never sent unsigned"
    );

    let dead: Vec<DeadLetter> = kafka::read_to_end(env.topics.dlq())
        .await
        .unwrap()
        .iter()
        .map(|m| decode(m.payload().unwrap()).unwrap())
        .collect();
    let mut reasons: Vec<(String, String, Option<i32>)> = dead
        .iter()
        .map(|d| {
            (
                d.delivery.subscription_id.clone(),
                d.reason.clone(),
                d.last_status,
            )
        })
        .collect();
    reasons.sort();
    assert_eq!(
        reasons,
        [
            ("sub-gone".to_owned(), "gone".to_owned(), Some(410)),
            ("sub-private".to_owned(), "egress_denied".to_owned(), None),
        ]
    );
    let gone_dl = dead.iter().find(|d| d.reason == "gone").unwrap();
    assert_eq!(gone_dl.detail.as_deref(), Some("no such hook"));
    assert_eq!(gone_dl.delivery.attempt, 1);
}

/// A delivery's trace context goes out as the W3C headers on every attempt, the
/// retry's too; a delivery without one sends none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_trace_context_is_sent_on_every_attempt() {
    const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let env = Env::with_ladder("disp-trace", 1, &[("t1", "1s")]).await;
    env.receiver
        .set("/traced", Behaviour::status(204).fail_first(1, 503));
    let mut sub = env.subscription("sub-traced", "t1", "/traced", "one");
    // In order: the traced delivery is the one whose first attempt fails.
    sub.max_in_flight = 1;
    env.put(&sub).await;
    let running = env.start(&["--retry-jitter", "0s"]);
    let mut traced = delivery(&sub, 0);
    traced.traceparent = Some(TP.into());
    traced.tracestate = Some("congo=t61rcWkgMzE".into());
    let plain = delivery(&sub, 1);
    env.publish(&[traced.clone(), plain.clone()]).await;
    let done = env
        .receiver
        .wait_until(Duration::from_secs(60), |r| {
            r.iter().filter(|q| q.status == 204).count() >= 2
        })
        .await;
    assert!(done, "only {} requests arrived", env.receiver.count());
    running.shutdown().await;

    let requests = env.receiver.requests();
    let of = |id: &str| -> Vec<&Recorded> {
        requests
            .iter()
            .filter(|r| r.header("webhook-id") == id)
            .collect()
    };
    let traced_reqs = of(&traced.delivery_id);
    assert_eq!(
        traced_reqs.iter().map(|r| r.status).collect::<Vec<_>>(),
        [503, 204],
        "the first attempt and its retry"
    );
    for r in &traced_reqs {
        assert_eq!(r.header("traceparent"), TP);
        assert_eq!(r.header("tracestate"), "congo=t61rcWkgMzE");
    }
    for r in of(&plain.delivery_id) {
        assert_eq!(r.header("traceparent"), "", "no trace context invented");
    }
}

/// A 410 Gone disables the subscription, in the transaction of its dead letter: the
/// subscription is written back disabled (`gone`, the next version), and the
/// deliveries behind it are kept unattempted (`subscription_disabled`), also before
/// the replica's table shows the new version. The other tenant is untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_410_disables_the_subscription_and_keeps_its_later_deliveries() {
    let env = Env::new("disp-410", 1).await;
    env.receiver.set("/gone", Behaviour::status(410));
    let mut gone = env.subscription("sub-gone", "t1", "/gone", "one");
    // One at a time, so the deliveries behind the 410 start only after it.
    gone.max_in_flight = 1;
    let fine = env.subscription("sub-fine", "t2", "/fine", "one");
    for s in [&gone, &fine] {
        env.put(s).await;
    }
    let running = env.start(&[]);
    // Behind the first, on the same partition: started once the 410 is in.
    let ds: Vec<Delivery> = (0..4)
        .map(|n| delivery(&gone, n))
        .chain((0..3).map(|n| delivery(&fine, n)))
        .collect();
    let before = now_ms();
    env.publish(&ds).await;
    env.committed_to_end(Duration::from_secs(60)).await;
    running.shutdown().await;

    assert_eq!(
        env.receiver.requests_to("/gone").len(),
        1,
        "one attempt, then no more"
    );
    assert_eq!(env.receiver.requests_to("/fine").len(), 3);
    let mut dead = env.dead_letters().await;
    dead.sort_by_key(|d| d.delivery.attempt == 0);
    let reasons: Vec<(&str, i32)> = dead
        .iter()
        .map(|d| (d.reason.as_str(), d.delivery.attempt))
        .collect();
    assert_eq!(
        reasons,
        [
            ("gone", 1),
            ("subscription_disabled", 0),
            ("subscription_disabled", 0),
            ("subscription_disabled", 0),
        ]
    );
    for d in &dead[1..] {
        assert_eq!(
            d.detail.as_deref(),
            Some("subscription sub-gone is disabled (gone); not attempted")
        );
    }
    let written: Vec<Subscription> = kafka::read_to_end(env.topics.subscriptions())
        .await
        .unwrap()
        .iter()
        .filter(|m| m.key() == Some(b"sub-gone".as_slice()))
        .map(|m| decode(m.payload().unwrap()).unwrap())
        .collect();
    let last = written.last().unwrap();
    assert_eq!(written.len(), 2, "put, then one disable: {written:?}");
    assert!(!last.enabled);
    assert_eq!(last.disabled_reason.as_deref(), Some("gone"));
    assert!(last.disabled_at.unwrap() >= before);
    assert_eq!(last.version, gone.version + 1);
    assert_eq!(
        (&last.url, &last.event_types, &last.secret_ref),
        (&gone.url, &gone.event_types, &gone.secret_ref)
    );
}

/// One partition, two tenants: a whale with 2 000 deliveries to an endpoint that
/// takes 200 ms per response (8 in flight: 40/s, so its backlog needs ≥ 50 s), and
/// a small tenant whose 20 deliveries are produced *after* the whale's.
///
/// Stated by order, not by the clock: every small-tenant delivery arrives before
/// the whale has received half of its deliveries (the time it took is printed;
/// `make bench` measures it). (The partition
/// buffer, 5 000 records by default, holds the whole backlog; a backlog larger
/// than the buffer delays later tenants by (backlog − buffer) / whale rate.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_tenant_not_blocked_by_whale() {
    const WHALE: usize = 2000;
    const SMALL: usize = 20;
    let env = Env::new("disp-whale", 1).await;
    env.receiver.set(
        "/whale",
        Behaviour::status(204).delay(Duration::from_millis(200)),
    );
    let mut whale = env.subscription("sub-whale", "whale", "/whale", "one");
    whale.max_in_flight = 8;
    let small = env.subscription("sub-small", "small", "/small", "one");
    env.put(&whale).await;
    env.put(&small).await;
    let running = env.start(&[]);

    let whales: Vec<Delivery> = (0..WHALE).map(|n| delivery(&whale, n)).collect();
    env.publish(&whales).await;
    // Let the whale's backlog reach the dispatcher first.
    assert!(
        env.receiver
            .wait_until(Duration::from_secs(60), |r| r.len() >= 16)
            .await
    );
    let smalls: Vec<Delivery> = (0..SMALL).map(|n| delivery(&small, n)).collect();
    env.publish(&smalls).await;
    let produced = Instant::now();
    let produced_wall = SystemTime::now();
    let all_small = env
        .receiver
        .wait_until(Duration::from_secs(30), |r| {
            r.iter().filter(|q| q.path == "/small").count() >= SMALL
        })
        .await;
    let waited = produced.elapsed();
    let requests = env.receiver.requests();
    running.shutdown().await;
    let last_small = requests.iter().rposition(|r| r.path == "/small");
    let whale_done = requests[..last_small.unwrap_or(0)]
        .iter()
        .filter(|r| r.path == "/whale")
        .count();

    assert!(
        all_small,
        "small tenant starved: {} of {SMALL} arrived",
        env.receiver.requests_to("/small").len()
    );
    let small_reqs = env.receiver.requests_to("/small");
    let worst = small_reqs
        .iter()
        .map(|r| {
            r.received_at
                .duration_since(produced_wall)
                .unwrap_or_default()
        })
        .max()
        .unwrap();
    eprintln!(
        "small tenant: {SMALL} deliveries within {waited:?} (worst {worst:?}); whale had {whale_done}/{WHALE}"
    );
    assert!(
        whale_done < WHALE / 2,
        "the small tenant waited behind the whale: {whale_done} of {WHALE} whale deliveries came first"
    );
    let ids: HashSet<&str> = small_reqs.iter().map(|r| r.header("webhook-id")).collect();
    assert_eq!(ids.len(), SMALL);
}
