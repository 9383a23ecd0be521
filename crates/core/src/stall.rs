//! Whether a group consumer is consuming: a consumer that silently never
//! consumes is an outage that pages nobody, so each stage feeds what it sees
//! of its consumer (the assigned partitions, their positions and high
//! watermarks) into a [`StallDetector`] with `now`, and gets back a verdict it
//! turns into readiness and gauges.
//!
//! Guarantees: a consumer is *stalled* only if, for at least the timeout, it
//! had lag on some assigned partition the stage is not holding paused on
//! purpose and no such partition's position moved; it is *unassigned* only
//! if it had no partition at all for at least the timeout. A partition whose
//! lag is unknown (its high watermark could not be read) counts as neither
//! lagging nor progressing.

use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

/// One assigned partition as the consumer sees it now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionView {
    /// Topic and partition.
    pub topic: String,
    pub partition: i32,
    /// The next offset the application will receive: the position, or the
    /// committed offset (or log start) before anything was consumed.
    pub next: Option<i64>,
    /// The partition's high watermark on the broker, if it could be read.
    pub high: Option<i64>,
    /// The stage paused the partition on purpose (backpressure, a retry not
    /// yet due): its lag is expected and not a stall.
    pub held: bool,
}

/// What the detector concluded at one observation.
#[derive(Debug, Clone, PartialEq)]
pub struct StallVerdict {
    /// `Err(why)` once the consumer is stalled or unassigned past the timeout.
    pub ready: Result<(), String>,
    /// How long the consumer has had lag without progress (zero otherwise).
    pub stalled_for: Duration,
    /// How long the consumer has had no partition (zero while it has some).
    pub unassigned_for: Duration,
    /// Records between position and high watermark, over unheld partitions.
    pub lag: i64,
    /// Partitions assigned now.
    pub assigned: usize,
}

/// Tracks one consumer across observations.
#[derive(Debug, Clone)]
pub struct StallDetector {
    timeout: Duration,
    /// Last progress (or the start): lag was zero, or a position moved.
    last_progress: Instant,
    /// When the assignment last became empty (or the start), while empty.
    unassigned_since: Option<Instant>,
    /// Positions at the previous observation.
    positions: HashMap<(String, i32), Option<i64>>,
}

impl StallDetector {
    /// A detector for a consumer that subscribed at `start`.
    pub fn new(timeout: Duration, start: Instant) -> Self {
        Self {
            timeout,
            last_progress: start,
            unassigned_since: Some(start),
            positions: HashMap::new(),
        }
    }

    /// Records what the consumer looks like at `now` and returns the verdict.
    pub fn observe(&mut self, now: Instant, assigned: &[PartitionView]) -> StallVerdict {
        let mut lag = 0i64;
        let mut moved = false;
        let mut positions = HashMap::with_capacity(assigned.len());
        for p in assigned {
            let key = (p.topic.clone(), p.partition);
            if !p.held {
                if let (Some(next), Some(high)) = (p.next, p.high) {
                    lag = lag.saturating_add((high - next).max(0));
                }
                // A partition new to this consumer is progress too: it was
                // just (re)assigned, which is the group working.
                moved |= self.positions.get(&key).is_none_or(|prev| *prev != p.next);
            }
            positions.insert(key, p.next);
        }
        self.positions = positions;
        if assigned.is_empty() {
            self.unassigned_since.get_or_insert(now);
            self.last_progress = now;
        } else {
            self.unassigned_since = None;
            if lag == 0 || moved {
                self.last_progress = now;
            }
        }
        let stalled_for = now.saturating_duration_since(self.last_progress);
        let unassigned_for = self
            .unassigned_since
            .map_or(Duration::ZERO, |since| now.saturating_duration_since(since));
        let ready = if unassigned_for >= self.timeout {
            Err(format!(
                "no partition assigned for {}s (is the group coordinator reachable, and are there no more replicas than partitions?)",
                unassigned_for.as_secs()
            ))
        } else if stalled_for >= self.timeout {
            Err(format!(
                "{lag} records of lag on {} assigned partitions and nothing fetched for {}s",
                assigned.len(),
                stalled_for.as_secs()
            ))
        } else {
            Ok(())
        };
        StallVerdict {
            ready,
            stalled_for,
            unassigned_for,
            lag,
            assigned: assigned.len(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TIMEOUT: Duration = Duration::from_secs(30);

    fn view(partition: i32, next: Option<i64>, high: Option<i64>, held: bool) -> PartitionView {
        PartitionView {
            topic: "deliveries".into(),
            partition,
            next,
            high,
            held,
        }
    }

    fn at(start: Instant, secs: u64) -> Instant {
        start + Duration::from_secs(secs)
    }

    #[test]
    fn unassigned_past_the_timeout_is_unready_and_assignment_clears_it() {
        let t0 = Instant::now();
        let mut d = StallDetector::new(TIMEOUT, t0);
        assert!(d.observe(at(t0, 29), &[]).ready.is_ok());
        let v = d.observe(at(t0, 30), &[]);
        assert!(v
            .ready
            .unwrap_err()
            .contains("no partition assigned for 30s"));
        assert_eq!(v.unassigned_for, TIMEOUT);
        assert_eq!(v.stalled_for, Duration::ZERO);
        let v = d.observe(at(t0, 31), &[view(0, Some(5), Some(5), false)]);
        assert_eq!(v.ready, Ok(()));
        assert_eq!(v.unassigned_for, Duration::ZERO);
        // Losing every partition starts the clock again from then.
        assert!(d.observe(at(t0, 40), &[]).ready.is_ok());
        assert!(d.observe(at(t0, 70), &[]).ready.is_err());
    }

    #[test]
    fn lag_without_a_moving_position_stalls_after_the_timeout() {
        let t0 = Instant::now();
        let mut d = StallDetector::new(TIMEOUT, t0);
        let stuck = [view(0, Some(0), Some(100), false)];
        assert!(d.observe(at(t0, 1), &stuck).ready.is_ok());
        let v = d.observe(at(t0, 29), &stuck);
        assert!(v.ready.is_ok());
        assert_eq!(v.stalled_for, Duration::from_secs(28));
        let v = d.observe(at(t0, 31), &stuck);
        assert_eq!(v.lag, 100);
        assert!(v.ready.unwrap_err().contains("100 records of lag"));
        // One fetch and the verdict clears at once.
        let v = d.observe(at(t0, 32), &[view(0, Some(10), Some(100), false)]);
        assert_eq!(v.ready, Ok(()));
        assert_eq!(v.stalled_for, Duration::ZERO);
    }

    #[test]
    fn a_consumer_stuck_from_its_assignment_stalls_counting_from_it() {
        // The failure this module exists for: assigned, data waiting, nothing
        // fetched ever.
        let t0 = Instant::now();
        let mut d = StallDetector::new(TIMEOUT, t0);
        d.observe(at(t0, 2), &[view(0, Some(0), Some(6), false)]);
        let v = d.observe(at(t0, 31), &[view(0, Some(0), Some(6), false)]);
        assert!(v.ready.is_ok(), "29 s since the assignment");
        let v = d.observe(at(t0, 32), &[view(0, Some(0), Some(6), false)]);
        assert!(v.ready.is_err());
        assert_eq!(v.stalled_for, TIMEOUT);
    }

    #[test]
    fn caught_up_is_never_stalled() {
        let t0 = Instant::now();
        let mut d = StallDetector::new(TIMEOUT, t0);
        for s in [1, 40, 400] {
            let v = d.observe(at(t0, s), &[view(0, Some(7), Some(7), false)]);
            assert_eq!(v.ready, Ok(()));
            assert_eq!(v.lag, 0);
        }
    }

    #[test]
    fn held_partitions_lag_on_purpose() {
        let t0 = Instant::now();
        let mut d = StallDetector::new(TIMEOUT, t0);
        // A retry tier waiting two hours for its head: paused, lagging, fine.
        let waiting = [view(3, Some(0), Some(500), true)];
        for s in [1, 60, 7200] {
            let v = d.observe(at(t0, s), &waiting);
            assert_eq!(v.ready, Ok(()));
            assert_eq!(v.lag, 0);
        }
        // Beside it, an unheld partition that does not move still stalls.
        let both = [
            view(3, Some(0), Some(500), true),
            view(4, Some(0), Some(9), false),
        ];
        d.observe(at(t0, 7201), &both);
        assert!(d.observe(at(t0, 7240), &both).ready.is_err());
    }

    #[test]
    fn unknown_watermarks_are_neither_lag_nor_stall() {
        let t0 = Instant::now();
        let mut d = StallDetector::new(TIMEOUT, t0);
        let unknown = [view(0, Some(3), None, false)];
        d.observe(at(t0, 1), &unknown);
        let v = d.observe(at(t0, 100), &unknown);
        assert_eq!(v.ready, Ok(()));
        assert_eq!(v.lag, 0);
    }

    #[test]
    fn progress_on_one_partition_is_progress_of_the_consumer() {
        let t0 = Instant::now();
        let mut d = StallDetector::new(TIMEOUT, t0);
        for (s, next) in [(10, 1), (20, 2), (30, 3), (40, 4)] {
            let v = d.observe(
                at(t0, s),
                &[
                    view(0, Some(0), Some(50), false),
                    view(1, Some(next), Some(50), false),
                ],
            );
            assert_eq!(v.ready, Ok(()), "at {s}s");
        }
    }
}
