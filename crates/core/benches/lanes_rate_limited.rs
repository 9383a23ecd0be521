//! The scheduler's cost per record as the number of rate-limited
//! subscriptions grows: every subscription has a rate limit far above what it
//! is sent (so none is ever held back), records are pushed round-robin over
//! them, then started and completed. Prints nanoseconds per record (push +
//! start + complete) for each count; asserts nothing.
//!
//! `cargo bench -p hookline-core --bench lanes_rate_limited`
//! Parameters (env): BENCH_RECORDS per count (default 200000).

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hookline_core::lanes::{Job, LaneKey, LaneLimits, LaneSettings, Lanes};

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// ns per record for `records` records over `subscriptions` rate-limited subscriptions.
fn per_record(subscriptions: usize, records: usize) -> f64 {
    let limits = LaneLimits {
        global_in_flight: 1 << 20,
        tenant_in_flight: 1 << 20,
        partition_records: usize::MAX / 4,
        partition_bytes: usize::MAX / 4,
        total_records: usize::MAX / 4,
        total_bytes: usize::MAX / 4,
        retry_total_records: usize::MAX / 4,
        retry_total_bytes: usize::MAX / 4,
        ..LaneLimits::DEFAULT
    };
    let Ok(mut lanes) = Lanes::<i32>::new(limits) else {
        panic!("the bench's limits are valid");
    };
    let ids: Vec<String> = (0..subscriptions).map(|i| format!("sub-{i}")).collect();
    let tenants: Vec<String> = (0..subscriptions)
        .map(|i| format!("tenant-{}", i % 100))
        .collect();
    let settings = LaneSettings {
        max_in_flight: 1 << 20,
        rate_per_s: Some(1e9),
    };
    let mut now = UNIX_EPOCH + Duration::from_secs(1_764_700_000);
    // One record per subscription queued first, so every subscription holds
    // something (and keeps its bucket) for the whole run.
    let mut next = 0i64;
    let push = |lanes: &mut Lanes<i32>, now: SystemTime, next: &mut i64| {
        let i = *next as usize % subscriptions;
        let job = Job {
            partition: 0,
            offset: *next,
            lane: LaneKey {
                subscription_id: ids[i].clone(),
            },
            tenant_id: tenants[i].clone(),
            retry: false,
            overflow: false,
            bytes: 512,
        };
        *next += 1;
        if lanes.push_with(job, settings, now).is_err() {
            panic!("offsets are unique");
        }
    };
    for _ in 0..subscriptions {
        push(&mut lanes, now, &mut next);
    }
    let start = Instant::now();
    for _ in 0..records {
        now += Duration::from_micros(10);
        push(&mut lanes, now, &mut next);
        let Some(started) = lanes.pop_ready_at(now) else {
            panic!("nothing is held back");
        };
        if lanes.complete(&started).is_err() {
            panic!("it was in flight");
        }
    }
    start.elapsed().as_nanos() as f64 / records as f64
}

fn main() {
    let records = env_usize("BENCH_RECORDS", 200_000);
    println!("lanes_rate_limited   push + start + complete per record, {records} records per row");
    for subscriptions in [1, 100, 1_000, 10_000] {
        let ns = per_record(subscriptions, records);
        println!("  {subscriptions:>6} rate-limited subscriptions   {ns:>9.0} ns/record");
    }
}
