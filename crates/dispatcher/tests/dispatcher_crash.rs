//! At least once across a crash: the real `hookline-dispatcher` binary is killed
//! with SIGKILL mid-load and restarted; every delivery then arrives at least
//! once, and every duplicate carries the same `webhook-id` (and body).

#![allow(clippy::unwrap_used)]

mod common;

use std::{
    collections::{HashMap, HashSet},
    time::Duration,
};

use common::{delivery, Env};
use hookline_envelope::Delivery;
use hookline_testkit::{process::KillOnDrop, receiver::Behaviour};

const TENANTS: usize = 3;
const PER_TENANT: usize = 300;

fn spawn(env: &Env) -> KillOnDrop {
    env.spawn_killable(&["--group-session-timeout", "6s"])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_mid_load_loses_nothing_and_duplicates_keep_their_webhook_id() {
    let env = Env::new("disp-crash", 3).await;
    env.receiver.set(
        "/hook",
        Behaviour::status(204).delay(Duration::from_millis(40)),
    );
    let mut all: Vec<Delivery> = Vec::new();
    for t in 0..TENANTS {
        let mut sub = env.subscription(&format!("sub-{t}"), &format!("tenant-{t}"), "/hook", "one");
        sub.max_in_flight = 2;
        env.put(&sub).await;
        all.extend((0..PER_TENANT).map(|n| delivery(&sub, n)));
    }
    env.publish(&all).await;
    let total = all.len();

    let mut first = spawn(&env);
    let midway = env
        .receiver
        .wait_until(Duration::from_secs(60), |r| r.len() >= total / 4)
        .await;
    assert!(
        midway,
        "only {} arrived before the kill",
        env.receiver.count()
    );
    first.kill(); // SIGKILL: no drain, no commit
    let at_kill = env.receiver.count();
    assert!(at_kill < total, "the kill came too late to test anything");

    let mut second = spawn(&env);
    let expected: HashSet<&str> = all.iter().map(|d| d.delivery_id.as_str()).collect();
    let complete = env
        .receiver
        .wait_until(Duration::from_secs(120), |r| {
            let seen: HashSet<&str> = r.iter().map(|q| q.header("webhook-id")).collect();
            expected.iter().all(|id| seen.contains(id))
        })
        .await;
    second.kill();

    let requests = env.receiver.requests();
    let seen: HashSet<&str> = requests.iter().map(|q| q.header("webhook-id")).collect();
    let missing: Vec<&&str> = expected.iter().filter(|id| !seen.contains(**id)).collect();
    assert!(
        complete,
        "{} deliveries never arrived, e.g. {:?}",
        missing.len(),
        missing.first()
    );

    // Duplicates: the same body always came with the same webhook-id.
    let mut id_by_body: HashMap<&[u8], &str> = HashMap::new();
    let mut duplicates = 0;
    for q in &requests {
        if let Some(previous) = id_by_body.insert(&q.body[..], q.header("webhook-id")) {
            duplicates += 1;
            assert_eq!(
                previous,
                q.header("webhook-id"),
                "a duplicate changed its webhook-id"
            );
        }
    }
    let by_id: HashMap<&str, &Delivery> = all.iter().map(|d| (d.delivery_id.as_str(), d)).collect();
    for q in &requests {
        let d = by_id[q.header("webhook-id")];
        assert_eq!(
            &q.body[..],
            &d.payload[..],
            "webhook-id and body belong together"
        );
    }
    eprintln!(
        "{total} deliveries: {} requests, {duplicates} duplicates after a kill at {at_kill}",
        requests.len()
    );
}
