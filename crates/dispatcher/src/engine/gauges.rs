//! The engine's gauges and the partitions it holds on purpose, refreshed every
//! few ticks from the machine's counts and, for partitions with records
//! unfetched behind them, the record at their position (`backlog.rs`): the
//! oldest-ready and oldest-due ages include a backlog a paused partition hides.

use std::time::{Duration, SystemTime};

use crate::{backlog::Peeked, consumer::TopicPartition, metrics};

use super::Engine;

impl Engine {
    /// Every few ticks: peeks at the positions of held partitions not known
    /// yet and sets the gauges once the answer is in (or at the next refresh,
    /// whatever came), so a moved position never shows as an empty backlog.
    pub(super) fn refresh_gauges(&mut self) {
        let behind = self.machine.unfetched_behind();
        let machine = &self.machine;
        let ask = self
            .backlog
            .peeks_wanted(&behind, |part| machine.next_to_fetch(part));
        if !ask.is_empty() && !self.gauges_deferred {
            let positions: Vec<(TopicPartition, i64)> = ask
                .iter()
                .map(|(part, at)| {
                    let topic = self.topics[usize::from(part.input)].clone();
                    ((topic, part.partition), *at)
                })
                .collect();
            if self.peeker.ask(positions) {
                self.backlog.asked(&ask);
                self.gauges_deferred = true;
                return;
            }
        }
        self.gauges_deferred = false;
        self.gauges();
    }

    /// The peeker's answers; the gauges a refresh deferred are set now.
    pub(super) fn on_peeked(&mut self, answers: Vec<(TopicPartition, i64, Peeked)>) {
        for ((topic, partition), at, found) in answers {
            if let Some(part) = self.machine.part(&topic, partition) {
                self.backlog.peeked(part, at, found);
            }
        }
        if std::mem::take(&mut self.gauges_deferred) {
            self.gauges();
        }
    }

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
        let mut counts = self.machine.counts(now);
        let machine = &self.machine;
        self.backlog.fold(
            |part| machine.next_to_fetch(part),
            self.machine.inputs(),
            &mut counts,
            now,
        );
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
        let (first_attempts, retries, overflow) = self.machine.running_attempts_by_class();
        metrics::gauges(&metrics::Gauges {
            in_flight: self.machine.running_attempts(),
            in_flight_by_class: [
                ("first_attempt", first_attempts),
                ("retry", retries),
                ("overflow", overflow),
            ],
            lanes: lanes.lane_count(),
            rate_limited: lanes.rate_limited_subscriptions(),
            buffered: lanes.buffered_records(),
            breakers_open: self.machine.breakers_open(),
            oldest_ready,
            tiers,
        });
    }
}
