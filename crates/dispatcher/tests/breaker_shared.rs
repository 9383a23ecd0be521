//! What the replicas share per subscription (`subscriptions.health`), on real
//! Kafka with the real binary: a breaker open before a kill -9 is still open
//! after the restart, so the endpoint gets nothing before the probe time; the
//! auto-disable clock counts from the first opening, across the restart; and a
//! strict head waiting in place keeps its attempts and due time.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, SystemTime};

use common::{delivery, Env};
use hookline_envelope::Delivery;
use hookline_testkit::{process::KillOnDrop, receiver::Behaviour};

const LADDER: &[(&str, &str)] = &[("t1", "1s"), ("t2", "2s"), ("t3", "3s")];

fn spawn(env: &Env, extra: &[&str]) -> KillOnDrop {
    let mut flags = vec!["--group-session-timeout", "6s", "--retry-jitter", "0s"];
    flags.extend_from_slice(extra);
    env.spawn_killable(&flags)
}

/// Opened on the third failure; the kill comes after the commit interval has
/// carried the breaker's record. The restarted replica adopts it before it
/// fetches anything: nothing reaches the (recovered) endpoint before the probe
/// time, 20 s after the opening — not even the first attempts published after
/// the restart, though the restart has its partitions long before (one group
/// session, 6 s); then everything arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_breaker_survives_a_kill_9_and_nothing_is_sent_before_its_probe() {
    const N: usize = 10;
    let env = Env::with_ladder("brk-restart", 1, LADDER).await;
    env.receiver.set("/down", Behaviour::status(500));
    let mut sub = env.subscription("sub-down", "tenant-down", "/down", "one");
    sub.max_in_flight = 1;
    env.put(&sub).await;
    let flags = [
        "--breaker-failures",
        "3",
        "--breaker-open",
        "20s",
        "--breaker-open-max",
        "40s",
    ];
    let mut first = spawn(&env, &flags);
    let ds: Vec<Delivery> = (0..N).map(|n| delivery(&sub, n)).collect();
    env.publish(&ds).await;
    let opened = env
        .receiver
        .wait_until(Duration::from_secs(60), |r| r.len() >= 3)
        .await;
    assert!(opened, "the endpoint was never tried");
    let opened_at = env.receiver.requests()[2].received_at;
    tokio::time::sleep(Duration::from_secs(2)).await;
    first.kill();
    let failed = env.receiver.count();
    assert_eq!(failed, 3, "nothing was sent while open");
    env.receiver.set("/down", Behaviour::status(204));
    let restarted_at = SystemTime::now();
    let mut second = spawn(&env, &flags);
    // New first attempts: what a replica that forgot the breaker would send
    // as soon as it has its partitions.
    let more: Vec<Delivery> = (N..2 * N).map(|n| delivery(&sub, n)).collect();
    env.publish(&more).await;
    let done = env
        .receiver
        .wait_until(Duration::from_secs(90), |r| {
            r.iter().filter(|q| q.status == 204).count() >= 2 * N
        })
        .await;
    second.kill();
    assert!(done, "only {} requests arrived", env.receiver.count());
    let reqs = env.receiver.requests();
    let first_after = reqs[failed].received_at;
    let probe_at = opened_at + Duration::from_secs(20);
    assert!(
        first_after + Duration::from_millis(500) >= probe_at,
        "the restarted replica sent {:?} after its restart, {:?} before the probe time",
        first_after.duration_since(restarted_at).unwrap_or_default(),
        probe_at.duration_since(first_after).unwrap_or_default()
    );
}

/// `--breaker-disable-after 8s` with an endpoint that never recovers: a kill -9
/// a second after the opening, and the restarted replica still disables the
/// subscription 8 s after the *first* opening (once it has its partitions),
/// not 8 s after an opening of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shortened_auto_disable_fires_across_a_restart() {
    let env = Env::with_ladder("brk-disable", 1, LADDER).await;
    env.receiver.set("/dead", Behaviour::status(500));
    let mut sub = env.subscription("sub-dead", "tenant-dead", "/dead", "one");
    sub.max_in_flight = 1;
    env.put(&sub).await;
    let flags = [
        "--breaker-failures",
        "3",
        "--breaker-open",
        "2s",
        "--breaker-open-max",
        "2s",
        "--breaker-disable-after",
        "8s",
    ];
    let mut first = spawn(&env, &flags);
    let ds: Vec<Delivery> = (0..5).map(|n| delivery(&sub, n)).collect();
    env.publish(&ds).await;
    let opened = env
        .receiver
        .wait_until(Duration::from_secs(60), |r| r.len() >= 3)
        .await;
    assert!(opened, "the endpoint was never tried");
    let opened_at = env.receiver.requests()[2].received_at;
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    first.kill();
    let mut second = spawn(&env, &flags);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let disabled_at = loop {
        let dead = env.dead_letters().await;
        if let Some(d) = dead.iter().find(|d| d.reason == "subscription_disabled") {
            break d.dead_at;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never disabled: {dead:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    second.kill();
    let after = Duration::from_millis(
        u64::try_from(disabled_at - hookline_core::epoch::millis(opened_at)).unwrap(),
    );
    // Adopted: due 8 s after the first opening, when the restart (one group
    // session, 6 s, after the kill) has its partitions: about 8–9 s. An
    // opening of its own would come after the restart and add 8 s: ≥ 15 s.
    assert!(
        after >= Duration::from_secs(8) && after <= Duration::from_secs(12),
        "disabled {after:?} after the first opening"
    );
}

/// A strict head fails twice (the ladder: 2 s, then 20 s); a kill -9 after the
/// second failure; the restarted replica reads the head again and goes on from
/// the shared state: its third attempt waits for the due time, 20 s after the
/// second, though the restart has the partition after one group session (6 s).
/// Then the head and the two behind it arrive, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_strict_head_keeps_its_attempts_and_due_time_across_a_kill_9() {
    let env = Env::with_ladder("strict-shared", 1, &[("t1", "2s"), ("t2", "20s")]).await;
    env.receiver.set("/strict", Behaviour::status(500));
    let mut sub = env.subscription("sub-strict", "tenant-strict", "/strict", "one");
    sub.ordering = "strict".into();
    sub.max_in_flight = 1;
    env.put(&sub).await;
    let mut first = spawn(&env, &[]);
    let ds: Vec<Delivery> = (0..3).map(|n| delivery(&sub, n)).collect();
    env.publish_strict(&ds).await;
    let twice = env
        .receiver
        .wait_until(Duration::from_secs(60), |r| r.len() >= 2)
        .await;
    assert!(twice, "the head was not attempted twice");
    let second_at = env.receiver.requests()[1].received_at;
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    first.kill();
    assert_eq!(
        env.receiver.count(),
        2,
        "the head waits 20 s before its third"
    );
    env.receiver.set("/strict", Behaviour::status(204));
    let restarted_at = SystemTime::now();
    let mut second = spawn(&env, &[]);
    let done = env
        .receiver
        .wait_until(Duration::from_secs(90), |r| {
            r.iter().filter(|q| q.status == 204).count() >= 3
        })
        .await;
    second.kill();
    assert!(done, "only {} requests arrived", env.receiver.count());
    let reqs = env.receiver.requests();
    let ids: Vec<&str> = reqs.iter().map(|r| r.header("webhook-id")).collect();
    let want: Vec<&str> = std::iter::repeat_n(ds[0].delivery_id.as_str(), 3)
        .chain(ds[1..].iter().map(|d| d.delivery_id.as_str()))
        .collect();
    assert_eq!(ids, want, "the head three times, then the rest in order");
    let third = reqs[2].received_at;
    assert!(
        third + Duration::from_millis(500) >= second_at + Duration::from_secs(20),
        "the third attempt came {:?} after the restart, {:?} after the second: it started over",
        third.duration_since(restarted_at).unwrap_or_default(),
        third.duration_since(second_at).unwrap_or_default()
    );
}
