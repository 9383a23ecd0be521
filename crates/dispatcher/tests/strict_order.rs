//! Strict ordering on real Kafka: a subscription with `ordering = strict`
//! receives its deliveries in exactly the published order while its endpoint
//! answers 503 to the first attempt of a random third of them, across a kill -9
//! of the dispatcher in the middle; a failed head is tried again in place, no
//! earlier than its ladder step, and nothing of its subscription passes it.
//! Another subscription of the same tenant, on the same partition, goes on
//! meanwhile. A head that keeps failing past `--strict-head-wait` is
//! dead-lettered `head_wait`, and the next goes.

#![allow(clippy::unwrap_used)]

mod common;

use std::{
    collections::{BTreeSet, HashMap},
    time::Duration,
};

use common::{delivery, Env};
use hookline_envelope::{Delivery, Subscription};
use hookline_testkit::{
    process::KillOnDrop,
    receiver::{Behaviour, Recorded},
};

const EVENTS: usize = 500;
/// The ladder's first step: a failed head's retry is due this long after it.
const STEP: Duration = Duration::from_millis(200);
const LADDER: &[(&str, &str)] = &[("t1", "200ms"), ("t2", "400ms")];

fn spawn(env: &Env, extra: &[&str]) -> KillOnDrop {
    let mut flags = vec!["--group-session-timeout", "6s", "--retry-jitter", "0s"];
    flags.extend(extra);
    env.spawn_killable(&flags)
}

fn strict(env: &Env, id: &str, path: &str) -> Subscription {
    let mut sub = env.subscription(id, "acme", path, "one");
    sub.ordering = "strict".into();
    // Strict is one at a time whatever this says.
    sub.max_in_flight = 8;
    sub
}

/// The index of each request's delivery in `published`.
fn indices(requests: &[Recorded], published: &HashMap<String, usize>) -> Vec<usize> {
    requests
        .iter()
        .map(|r| published[r.header("webhook-id")])
        .collect()
}

/// Within one dispatcher's run, requests go in published order: each is the
/// previous one again (the head retried) or a later one, never an earlier one;
/// and a head retried after a failure waited at least the ladder step.
fn assert_in_order(run: &str, requests: &[Recorded], published: &HashMap<String, usize>) {
    let idx = indices(requests, published);
    for (i, pair) in idx.windows(2).enumerate() {
        assert!(
            pair[1] >= pair[0],
            "{run}: request {} is delivery {} after delivery {}: out of order",
            i + 1,
            pair[1],
            pair[0]
        );
        let (prev, next) = (&requests[i], &requests[i + 1]);
        if pair[1] == pair[0] && prev.status == 503 {
            let waited = next.at.duration_since(prev.at);
            assert!(
                waited >= STEP - Duration::from_millis(5),
                "{run}: delivery {} retried after {waited:?}, before its ladder step",
                pair[0]
            );
        }
        if prev.status == 503 {
            assert_eq!(
                pair[1], pair[0],
                "{run}: delivery {} failed and {} went next",
                pair[0], pair[1]
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_strict_subscription_receives_every_event_in_order_through_503s_and_a_kill_9() {
    let env = Env::with_ladder("strict-order", 1, LADDER).await;
    let sub = strict(&env, "strict-1", "/strict");
    env.put(&sub).await;
    let other = env.subscription("plain-1", "acme", "/plain", "one");
    env.put(&other).await;
    let all: Vec<Delivery> = (0..EVENTS).map(|n| delivery(&sub, n)).collect();
    let published: HashMap<String, usize> = all
        .iter()
        .enumerate()
        .map(|(i, d)| (d.delivery_id.clone(), i))
        .collect();
    let failing: BTreeSet<String> = all
        .iter()
        .filter(|_| rand::random::<u32>() % 3 == 0)
        .map(|d| d.delivery_id.clone())
        .collect();
    eprintln!("{} of {EVENTS} fail their first attempt", failing.len());
    env.receiver.set(
        "/strict",
        Behaviour::status(204).fail_first_of(failing.iter().cloned(), 1, 503),
    );
    env.receiver.set("/plain", Behaviour::status(204));
    env.publish_strict(&all).await;
    let plain: Vec<Delivery> = (0..20).map(|n| delivery(&other, n)).collect();
    env.publish_strict(&plain).await;

    let mut first = spawn(&env, &[]);
    let midway = env
        .receiver
        .wait_until(Duration::from_secs(120), |r| {
            r.iter().filter(|q| q.path == "/strict").count() >= EVENTS / 3
        })
        .await;
    assert!(
        midway,
        "only {} arrived before the kill",
        env.receiver.count()
    );
    first.kill(); // SIGKILL: no drain, no commit
    let before = env.receiver.requests_to("/strict").len();
    assert!(before < EVENTS, "the kill came too late to test anything");

    let mut second = spawn(&env, &[]);
    let ids: BTreeSet<&str> = all.iter().map(|d| d.delivery_id.as_str()).collect();
    let complete = env
        .receiver
        .wait_until(Duration::from_secs(240), |r| {
            let ok: BTreeSet<&str> = r
                .iter()
                .filter(|q| q.path == "/strict" && q.status == 204)
                .map(|q| q.header("webhook-id"))
                .collect();
            ids.iter().all(|id| ok.contains(id))
        })
        .await;
    second.kill();
    let requests = env.receiver.requests_to("/strict");
    assert!(
        complete,
        "{} of {EVENTS} delivered",
        requests
            .iter()
            .filter(|q| q.status == 204)
            .map(|q| q.header("webhook-id"))
            .collect::<BTreeSet<_>>()
            .len()
    );

    let (one, two) = requests.split_at(before);
    assert_in_order("before the kill", one, &published);
    assert_in_order("after the restart", two, &published);
    // The restart goes back at most to the head it was holding: it re-reads from
    // the committed offset, which never passes an undelivered delivery.
    let last_before = indices(one, &published).into_iter().max().unwrap();
    let first_after = indices(&two[..1], &published)[0];
    assert!(
        first_after <= last_before + 1,
        "{first_after} after {last_before}: one skipped"
    );
    // Across both runs, the first success of each delivery is in published order.
    let mut delivered: Vec<usize> = Vec::new();
    for i in indices(
        &requests
            .iter()
            .filter(|q| q.status == 204)
            .cloned()
            .collect::<Vec<_>>(),
        &published,
    ) {
        if !delivered.contains(&i) {
            delivered.push(i);
        }
    }
    assert_eq!(delivered, (0..EVENTS).collect::<Vec<_>>());
    let failed = requests.iter().filter(|q| q.status == 503).count();
    assert!(failed >= failing.len() / 2, "{failed} failures answered");
    // The other subscription on the same partition was not held behind them:
    // all of it arrived while the strict one was still being delivered.
    let others = env.receiver.requests_to("/plain");
    assert!(
        others.len() >= plain.len(),
        "{} of {}",
        others.len(),
        plain.len()
    );
    let last_strict = requests.last().unwrap().at;
    assert!(others.iter().all(|q| q.at < last_strict));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_strict_head_past_its_head_wait_is_dead_lettered_and_the_next_goes() {
    let env = Env::with_ladder("strict-head-wait", 1, LADDER).await;
    let sub = strict(&env, "strict-hw", "/hw");
    env.put(&sub).await;
    let all: Vec<Delivery> = (0..3).map(|n| delivery(&sub, n)).collect();
    // The head fails every time; the two behind it succeed at once.
    env.receiver.set(
        "/hw",
        Behaviour::status(204).fail_first_of([all[0].delivery_id.clone()], u32::MAX, 503),
    );
    env.publish_strict(&all).await;
    let mut running = spawn(&env, &["--strict-head-wait", "1300ms"]);
    let done = env
        .receiver
        .wait_until(Duration::from_secs(60), |r| {
            r.iter().filter(|q| q.status == 204).count() >= 2
        })
        .await;
    let letters = {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let letters = env.dead_letters().await;
            if !letters.is_empty() || std::time::Instant::now() > deadline {
                break letters;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    running.kill();
    assert!(done, "{} requests", env.receiver.count());
    let requests = env.receiver.requests_to("/hw");
    let order: Vec<&str> = requests.iter().map(|q| q.header("webhook-id")).collect();
    let head_tries = order
        .iter()
        .take_while(|id| **id == all[0].delivery_id)
        .count();
    // Tried at 0, 200 ms, 600 ms and 1 s after its first attempt; the next
    // would be due at 1.4 s, past the 1.3 s head wait.
    assert_eq!(head_tries, 4, "{order:?}");
    assert_eq!(
        &order[head_tries..],
        [all[1].delivery_id.as_str(), all[2].delivery_id.as_str()],
        "then the rest, in order"
    );
    assert_eq!(letters.len(), 1, "{letters:?}");
    let letter = &letters[0];
    assert_eq!(letter.reason, "head_wait");
    assert_eq!(letter.delivery.delivery_id, all[0].delivery_id);
    assert_eq!(letter.delivery.attempt, 4);
    assert_eq!(letter.last_status, Some(503));
}
