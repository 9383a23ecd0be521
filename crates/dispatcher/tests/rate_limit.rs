//! `rate_limit_per_s` on real Kafka: a rate-limited subscription's attempts reach
//! its endpoint no faster than its token bucket allows (a burst of `ceil(rate)`,
//! then `rate` per second), every delivery still arrives, and an unlimited
//! subscription of the same tenant on the same partition is not held back by it.

#![allow(clippy::unwrap_used)]

mod common;

use std::{
    collections::HashSet,
    time::{Duration, Instant},
};

use common::{delivery, Env};
use hookline_envelope::Delivery;

const RATE: f64 = 5.0;
const CAPACITY: usize = 5;
const N: usize = 30;
/// Allowed compression of the arrival times relative to the start times: network
/// and scheduling jitter between the dispatcher's start and the receiver's clock.
const SLACK: Duration = Duration::from_millis(200);

/// One partition, one tenant, two subscriptions: `/limited` at 5 per second, whose
/// 30 deliveries are produced first, and `/free`, unlimited, whose 30 follow.
///
/// Stated bounds: for every two arrivals at `/limited`, the arrivals between them
/// (inclusive) number at most `5 + 5 × (gap + 200 ms)`; so no 1 s window holds more
/// than 11 (10 from the bucket, one of slack). All 30 arrive, in about 5 s. Every
/// `/free` delivery arrives within 5 s of being produced, before `/limited` has
/// finished.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limited_subscription_is_paced_and_does_not_hold_back_others() {
    let env = Env::new("disp-rate", 1).await;
    let mut limited = env.subscription("sub-limited", "acme", "/limited", "one");
    limited.rate_limit_per_s = Some(RATE);
    limited.max_in_flight = 8;
    let free = env.subscription("sub-free", "acme", "/free", "one");
    env.put(&limited).await;
    env.put(&free).await;
    let running = env.start(&[]);

    let mut all: Vec<Delivery> = (0..N).map(|n| delivery(&limited, n)).collect();
    all.extend((0..N).map(|n| delivery(&free, n)));
    env.publish(&all).await;
    let produced = Instant::now();

    let free_done = env
        .receiver
        .wait_until(Duration::from_secs(30), |r| {
            r.iter().filter(|q| q.path == "/free").count() >= N
        })
        .await;
    let free_waited = produced.elapsed();
    let limited_then = env.receiver.requests_to("/limited").len();
    let limited_done = env
        .receiver
        .wait_until(Duration::from_secs(60), |r| {
            r.iter().filter(|q| q.path == "/limited").count() >= N
        })
        .await;
    env.committed_to_end(Duration::from_secs(30)).await;
    running.shutdown().await;

    assert!(
        free_done,
        "unlimited subscription: {} of {N} arrived",
        env.receiver.requests_to("/free").len()
    );
    assert!(
        limited_done,
        "limited subscription: {} of {N} arrived",
        env.receiver.requests_to("/limited").len()
    );
    eprintln!("/free: {N} within {free_waited:?}, while /limited had {limited_then}/{N}");
    // By order, not by the clock: the unlimited subscription finished while
    // the limited one was still being held back.
    assert!(
        limited_then < N,
        "the limited subscription finished first, so nothing was shown"
    );

    let reqs = env.receiver.requests_to("/limited");
    let ids: HashSet<&str> = reqs.iter().map(|r| r.header("webhook-id")).collect();
    assert_eq!(ids.len(), N, "each delivery once");
    let mut times: Vec<Instant> = reqs.iter().map(|r| r.at).collect();
    times.sort();
    for i in 0..times.len() {
        for j in i..times.len() {
            let gap = times[j] - times[i] + SLACK;
            let allowed = CAPACITY + (RATE * gap.as_secs_f64()).floor() as usize;
            assert!(
                j - i < allowed,
                "{} arrivals within {:?} at {RATE}/s",
                j - i + 1,
                times[j] - times[i]
            );
        }
    }
    let busiest_second = (0..times.len())
        .map(|i| {
            times[i..]
                .iter()
                .take_while(|t| **t - times[i] <= Duration::from_secs(1))
                .count()
        })
        .max()
        .unwrap();
    let spread = times[N - 1] - times[0];
    eprintln!("/limited: {N} over {spread:?}, at most {busiest_second} in any 1 s");
    assert!(busiest_second <= 11, "{busiest_second} arrivals in 1 s");
    // 25 tokens beyond the burst at 5 per second: at least 5 s, less some jitter.
    assert!(
        spread >= Duration::from_millis(4_800),
        "30 arrivals in {spread:?}"
    );
}
