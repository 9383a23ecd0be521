//! The circuit breakers the replicas share (`subscriptions.health`), on real
//! Kafka with the real binary: a breaker open before a kill -9 is still open
//! after the restart, so the endpoint gets nothing before the probe time; and
//! the auto-disable clock counts from the first opening, across the restart.

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
