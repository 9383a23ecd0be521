//! The engine's gauges and the partitions it holds on purpose, refreshed every
//! few ticks from the machine's counts.

use std::time::{Duration, SystemTime};

use crate::metrics;

use super::Engine;

impl Engine {
    /// Tells each consumer's watch which of its partitions are held on
    /// purpose (backpressure, a head not yet due, a rewind): their lag is
    /// expected, not a stall.
    pub(super) fn publish_held(&self) {
        let mut held: Vec<Vec<(String, i32)>> = vec![Vec::new(); self.topics.len()];
        for part in self.machine.held() {
            let input = usize::from(part.input);
            held[input].push((self.topics[input].clone(), part.partition));
        }
        for (handle, parts) in self.on_purpose.iter().zip(held) {
            handle.set(parts);
        }
    }

    pub(super) fn gauges(&self) {
        let now = SystemTime::now();
        let counts = self.machine.counts(now);
        let age = |t: Option<SystemTime>| {
            t.map_or(Duration::ZERO, |t| {
                now.duration_since(t).unwrap_or_default()
            })
        };
        let inputs = self.machine.inputs();
        let oldest_ready = inputs
            .iter()
            .zip(&counts)
            .map(|(input, c)| (input.label, age(c.oldest_ready)))
            .collect();
        let tiers = inputs
            .iter()
            .zip(&counts)
            .filter(|(input, _)| input.retry())
            .map(|(input, c)| metrics::TierGauges {
                tier: input.label,
                oldest_due_age: age(c.oldest_ready),
                waiting: c.waiting,
                due: c.due,
                paused: c.not_due,
            })
            .collect();
        let lanes = self.machine.lanes();
        let (first_attempts, retries) = self.machine.running_attempts_by_class();
        metrics::gauges(&metrics::Gauges {
            in_flight: self.machine.running_attempts(),
            in_flight_by_class: [("first_attempt", first_attempts), ("retry", retries)],
            lanes: lanes.lane_count(),
            rate_limited: lanes.rate_limited_subscriptions(),
            buffered: lanes.buffered_records(),
            breakers_open: self.machine.breakers_open(),
            oldest_ready,
            tiers,
        });
    }
}
