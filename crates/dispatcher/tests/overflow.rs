//! Isolation at any backlog size, on real Kafka (one partition): a whale's
//! backlog of 20× the partition buffer, through a 200 ms endpoint, with a small
//! tenant's deliveries produced behind it on the same partition. Overflow lanes
//! move the whale out of the way, so every small delivery arrives within a
//! bound that does not depend on the whale's backlog (without lanes it would
//! wait for the whole backlog: about 40 s here, minutes in production); every
//! whale delivery arrives, the `max_in_flight = 1` one's first arrivals in
//! published order — across a kill -9 of the dispatcher in the middle.

#![allow(clippy::unwrap_used)]

mod common;

use std::{
    collections::{BTreeSet, HashMap},
    process::{Command, Stdio},
    time::{Duration, SystemTime},
};

use common::{delivery, now_ms, Env};
use hookline_envelope::Delivery;
use hookline_testkit::{process::KillOnDrop, receiver::Behaviour};

/// Every dispatcher here: a partition buffer of 50 records (the whale's
/// backlog below is 20× it), and promotion at 10 records for 500 ms, or at
/// once at 25 (`--overflow-promote-at-once-records` defaults to half the
/// partition buffer).
const LANE_FLAGS: [&str; 8] = [
    "--partition-buffer-records",
    "50",
    "--overflow-promote-records",
    "10",
    "--overflow-demote-records",
    "2",
    "--overflow-promote-after",
    "500ms",
];
const ORDERED: usize = 150;
const WIDE: usize = 850;
/// How long the whale's endpoint takes to answer.
const SLOW: Duration = Duration::from_millis(200);
/// Each small delivery must arrive within this of being produced: promotion
/// comes at the next look (every 200 ms) once the whale holds half the buffer,
/// at most `--overflow-promote-after` (500 ms) after it holds 10, then the
/// moves commit (a transaction, ~100 ms); 3 s leaves room for a loaded CI machine and
/// does not grow with the whale's backlog (which would take 40 s to drain).
const BOUND: Duration = Duration::from_secs(3);

/// Both processes are one replica restarted, as a container restarted in its
/// pod is: the same transactional id (in a pod the default is the pod's name
/// and pid 1), so the restart's `init_transactions` aborts at once whatever
/// the killed process left open. Under a new id the restart would first wait
/// for the broker to time that transaction out (the dispatcher's 10 s
/// `transaction.timeout.ms`): when the kill lands while offsets are being
/// committed, the committed offsets of those partitions stay unreadable until
/// then (KIP-447) — crash recovery, the same with or without a whale, not the
/// bound this test holds the dispatcher to (the fault suite's
/// `kill_dispatcher_retrying` covers the new-id restart).
fn spawn(env: &Env) -> KillOnDrop {
    let transactional_id = format!("{}-replica-0", env.group);
    let mut flags = vec![
        "--group-session-timeout",
        "6s",
        "--transactional-id",
        &transactional_id,
    ];
    flags.extend(LANE_FLAGS);
    let args = env.args(&flags);
    KillOnDrop::new(
        Command::new(env!("CARGO_BIN_EXE_hookline-dispatcher"))
            .args(&args[1..])
            .env(
                "HOOKLINE_LOG",
                hookline_testkit::pipeline::with_stage_log("warn,hookline_dispatcher::events=info"),
            )
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start hookline-dispatcher"),
    )
}

/// Produces one small delivery every 100 ms for `for_`, returning them.
async fn trickle(
    env: &Env,
    sub: &hookline_envelope::Subscription,
    from: usize,
    for_: Duration,
) -> Vec<Delivery> {
    let mut sent = Vec::new();
    let until = tokio::time::Instant::now() + for_;
    let mut n = from;
    while tokio::time::Instant::now() < until {
        let d = delivery(sub, n);
        env.publish(std::slice::from_ref(&d)).await;
        sent.push(d);
        n += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    sent
}

/// Asserts every small delivery of `sent` arrived within [`BOUND`] of its creation.
fn assert_within_bound(env: &Env, phase: &str, sent: &[Delivery]) {
    let arrived: HashMap<String, SystemTime> = env
        .receiver
        .requests_to("/small")
        .into_iter()
        .map(|r| (r.header("webhook-id").to_owned(), r.received_at))
        .collect();
    let mut worst = Duration::ZERO;
    let mut which = 0;
    for (n, d) in sent.iter().enumerate() {
        let at = arrived
            .get(&d.delivery_id)
            .unwrap_or_else(|| panic!("{phase}: small delivery {} never arrived", d.delivery_id));
        let created = hookline_core::epoch::from_millis(d.created_at);
        let waited = at.duration_since(created).unwrap_or_default();
        if waited > worst {
            (worst, which) = (waited, n);
        }
    }
    eprintln!(
        "{phase}: {} small deliveries, the slowest took {worst:?} (number {which}, {})",
        sent.len(),
        sent[which].delivery_id
    );
    assert!(
        worst <= BOUND,
        "{phase}: small delivery number {which} of {} waited {worst:?} behind the whale (bound {BOUND:?})",
        sent.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whale_20x_the_buffer_moves_to_a_lane_and_the_small_tenant_waits_for_nothing() {
    let env = Env::new("overflow-whale", 1).await;
    let mut ordered = env.subscription("whale-1", "whale-co", "/ordered", "one");
    ordered.max_in_flight = 1;
    let mut wide = env.subscription("whale-8", "whale-co", "/wide", "one");
    wide.max_in_flight = 8;
    let small = env.subscription("small", "small-co", "/small", "one");
    for sub in [&ordered, &wide, &small] {
        env.put(sub).await;
    }
    env.receiver
        .set("/ordered", Behaviour::status(204).delay(SLOW));
    env.receiver
        .set("/wide", Behaviour::status(204).delay(SLOW));
    env.receiver.set("/small", Behaviour::status(204));
    // The whale's backlog, interleaved as one tenant's two subscriptions would be.
    let mut whale = Vec::new();
    let (mut o, mut w) = (0, 0);
    while o < ORDERED || w < WIDE {
        if o < ORDERED && (w >= WIDE || (o + w) % 7 == 0) {
            whale.push(delivery(&ordered, o));
            o += 1;
        } else {
            whale.push(delivery(&wide, w));
            w += 1;
        }
    }
    env.publish(&whale).await;
    let ordered_ids: Vec<String> = (0..ORDERED)
        .map(|n| delivery(&ordered, n).delivery_id)
        .collect();

    let mut first = spawn(&env);
    // Ready when the whale's first request arrives; then the small tenant
    // produces behind the whale on the same partition, while it drains.
    assert!(
        env.receiver
            .wait_until(Duration::from_secs(60), |r| !r.is_empty())
            .await,
        "the dispatcher delivered nothing"
    );
    let before = trickle(&env, &small, 0, Duration::from_secs(8)).await;
    assert!(
        env.receiver
            .wait_until(BOUND, |r| r.iter().filter(|q| q.path == "/small").count()
                >= before.len())
            .await,
        "small deliveries missing before the kill"
    );
    let whale_before = env.receiver.requests_to("/ordered").len();
    assert!(
        whale_before < ORDERED,
        "the whale drained before the kill: nothing left to test"
    );
    first.kill();
    assert_within_bound(&env, "before the kill", &before);

    let mut second = spawn(&env);
    // The restart is ready when it delivers again; then the small tenant goes on.
    let restarted = now_ms();
    let ready = env
        .receiver
        .wait_until(Duration::from_secs(60), |r| {
            r.iter()
                .any(|q| hookline_core::epoch::millis(q.received_at) > restarted + 1)
        })
        .await;
    assert!(ready, "the restarted dispatcher delivered nothing");
    let after = trickle(&env, &small, before.len(), Duration::from_secs(8)).await;
    let all_ids: BTreeSet<String> = whale.iter().map(|d| d.delivery_id.clone()).collect();
    let complete = env
        .receiver
        .wait_until(Duration::from_secs(180), |r| {
            // Called under the receiver's lock on every arrival: scan only
            // once there can be enough requests, not O(n) per arrival.
            if r.len() < all_ids.len() {
                return false;
            }
            let ok: BTreeSet<&str> = r
                .iter()
                .filter(|q| q.path != "/small" && q.status == 204)
                .map(|q| q.header("webhook-id"))
                .collect();
            all_ids.iter().all(|id| ok.contains(id.as_str()))
        })
        .await;
    assert_within_bound(&env, "after the restart", &after);
    second.kill();
    let arrived: BTreeSet<String> = env
        .receiver
        .requests()
        .iter()
        .map(|q| q.header("webhook-id").to_owned())
        .collect();
    assert!(
        complete,
        "{} of {} whale deliveries arrived",
        all_ids.iter().filter(|id| arrived.contains(*id)).count(),
        all_ids.len()
    );
    // The ordered subscription: the first arrival of each delivery, in order.
    let mut firsts: Vec<String> = Vec::new();
    for q in env.receiver.requests_to("/ordered") {
        let id = q.header("webhook-id").to_owned();
        if !firsts.contains(&id) {
            firsts.push(id);
        }
    }
    assert_eq!(firsts, ordered_ids, "max_in_flight = 1 out of order");
    // And never two at once.
    assert_eq!(env.receiver.max_in_flight("/ordered"), 1);
}

/// Runs `hookline-dispatcher capacity` with `args`: (success, stdout, stderr).
async fn capacity(args: &[&str]) -> (bool, String, String) {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_hookline-dispatcher"))
        .arg("capacity")
        .args(args)
        .output()
        .await
        .expect("run hookline-dispatcher capacity");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Attribution without tenant labels on metrics: while a whale is promoted,
/// `hookline-dispatcher capacity` (reading the replica's `/capacity`) names
/// the promoted subscription with its lane, and ranks the whale's tenant
/// first; a replica that cannot be read is listed and fails the command.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capacity_names_the_promoted_whale_and_who_holds_the_slots() {
    let env = Env::new("overflow-capacity", 1).await;
    let mut whale = env.subscription("whale-sub", "whale-co", "/whale", "one");
    whale.max_in_flight = 2;
    let small = env.subscription("small-sub", "small-co", "/small", "one");
    for sub in [&whale, &small] {
        env.put(sub).await;
    }
    env.receiver
        .set("/whale", Behaviour::status(204).delay(SLOW));
    env.receiver.set("/small", Behaviour::status(204));
    let backlog: Vec<Delivery> = (0..400).map(|n| delivery(&whale, n)).collect();
    env.publish(&backlog).await;
    env.publish(&[delivery(&small, 0)]).await;

    let logs = tempfile::tempdir().unwrap();
    let stage = env
        .spawn_stage(&LANE_FLAGS, &logs.path().join("dispatcher.log"))
        .await;
    let from = stage.addr().to_string();

    // The report is refreshed every second: wait for the promotion to show,
    // with the whale holding records again. Right after the promotion it can
    // hold none for a moment: its buffered records were moved to the lane and
    // are not read back yet, and its last attempts from `deliveries` are done.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let holding = |fleet: &serde_json::Value| {
        fleet["top_tenants"].as_array().is_some_and(|top| {
            top.iter().any(|t| {
                // Worker-seconds count finished attempts: a report read
                // while the whale's first ones are in flight shows 0.
                t["tenant_id"] == "whale-co"
                    && t["buffered"].as_u64().unwrap_or(0) + t["in_flight"].as_u64().unwrap_or(0)
                        > 0
                    && t["worker_seconds"].as_f64().unwrap_or(0.0) > 0.0
            })
        })
    };
    let fleet = loop {
        // Until the engine's first report (a second after it starts), the
        // replica answers 404 and the command lists it as unreachable.
        let (ok, out, err) = capacity(&["--from", &from, "--json"]).await;
        let fleet: serde_json::Value = serde_json::from_str(&out).unwrap();
        let promoted = fleet["replicas"][0]["overflow"]["promoted"].as_array();
        if ok
            && promoted.is_some_and(|p| p.iter().any(|p| p["tenant_id"] == "whale-co"))
            && holding(&fleet)
        {
            break fleet;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the whale was never reported promoted and holding records: {out} {err}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let replica = &fleet["replicas"][0];
    assert_eq!(replica["from"], from.as_str());
    assert_eq!(replica["overflow"]["ceiling"], 8);
    let promoted = &replica["overflow"]["promoted"][0];
    assert_eq!(promoted["partition"], 0);
    let lane = format!(
        "lane-{}",
        hookline_envelope::Topics::lane_of("whale-co", hookline_envelope::OVERFLOW_LANES)
    );
    assert_eq!(promoted["lane"], lane.as_str());
    let top = &fleet["top_tenants"][0];
    assert_eq!(top["tenant_id"], "whale-co", "{fleet}");
    assert!(top["worker_seconds"].as_f64().unwrap() > 0.0, "{fleet}");
    assert_eq!(
        fleet["top_subscriptions"][0]["subscription_id"],
        "whale-sub"
    );

    // The table, and a second replica that does not answer.
    let (ok, out, err) = capacity(&["--from", &format!("{from},127.0.0.1:1")]).await;
    assert!(!ok, "an unreadable replica must fail the command:\n{out}");
    assert!(err.contains("1 of 2 replicas could not be read"), "{err}");
    assert!(out.contains("127.0.0.1:1  UNREACHABLE"), "{out}");
    let row = out
        .lines()
        .find(|l| l.contains("whale-co") && l.contains(&lane))
        .unwrap_or_else(|| panic!("no promoted row in:\n{out}"));
    assert!(row.starts_with(&from), "{row}");
    assert!(out.contains("TOP TENANTS"), "{out}");

    let (ok, _, err) = capacity(&["--from", "https://127.0.0.1:1"]).await;
    assert!(!ok && err.contains("only http://"), "{err}");
    stage.stop().await.unwrap();
}
