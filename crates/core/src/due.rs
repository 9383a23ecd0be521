//! Pause-until-due: a tier partition's head is never reported ready before its
//! `due_at`, and a paused partition is never reported due before its resume time.
//!
//! Every record in a tier has the same delay, so the head of a partition is the
//! earliest due (up to the ladder's jitter). When the head is not due the engine
//! pauses the partition, seeks back to the head, and records the resume time here;
//! [`DueTimers::next_wakeup`] is what it sleeps until, [`DueTimers::due`] what it
//! resumes. The engine must resume after every (re)assignment as well: librdkafka
//! keeps the pause flag across rebalances.

use std::collections::{BTreeMap, BTreeSet};
use std::time::SystemTime;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeadDecision {
    /// `now ≥ due_at`: attempt it.
    Ready,
    /// Pause the partition until `until` (= `due_at`).
    Wait { until: SystemTime },
}

/// Whether a head record due at `due_at` may be attempted at `now`.
pub fn head_decision(due_at: SystemTime, now: SystemTime) -> HeadDecision {
    if now >= due_at {
        HeadDecision::Ready
    } else {
        HeadDecision::Wait { until: due_at }
    }
}

/// Paused partitions and their resume times, keyed by e.g. `(topic, partition)`.
/// At most one timer per key; pausing again replaces it.
#[derive(Debug, Clone)]
pub struct DueTimers<K> {
    by_key: BTreeMap<K, SystemTime>,
    by_time: BTreeSet<(SystemTime, K)>,
}

impl<K: Ord + Clone> Default for DueTimers<K> {
    fn default() -> Self {
        Self {
            by_key: BTreeMap::new(),
            by_time: BTreeSet::new(),
        }
    }
}

impl<K: Ord + Clone> DueTimers<K> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Records that `key` is paused until `until`, replacing any earlier timer for it.
    pub fn pause(&mut self, key: K, until: SystemTime) {
        if let Some(old) = self.by_key.insert(key.clone(), until) {
            self.by_time.remove(&(old, key.clone()));
        }
        self.by_time.insert((until, key));
    }

    /// Forgets `key` (revoked, or resumed for another reason); returns its resume time.
    pub fn cancel(&mut self, key: &K) -> Option<SystemTime> {
        let until = self.by_key.remove(key)?;
        self.by_time.remove(&(until, key.clone()));
        Some(until)
    }

    /// The earliest resume time, if anything is paused: what to sleep until.
    pub fn next_wakeup(&self) -> Option<SystemTime> {
        self.by_time.first().map(|(t, _)| *t)
    }

    /// Removes and returns every key whose resume time is ≤ `now`, earliest first.
    pub fn due(&mut self, now: SystemTime) -> Vec<K> {
        let mut ready = Vec::new();
        while let Some((t, _)) = self.by_time.first() {
            if *t > now {
                break;
            }
            if let Some((_, key)) = self.by_time.pop_first() {
                self.by_key.remove(&key);
                ready.push(key);
            }
        }
        ready
    }

    pub fn resume_at(&self, key: &K) -> Option<SystemTime> {
        self.by_key.get(key).copied()
    }

    pub fn is_paused(&self, key: &K) -> bool {
        self.by_key.contains_key(key)
    }

    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }

    /// Paused keys with their resume times, in key order (e.g. for an oldest-due gauge).
    pub fn iter(&self) -> impl Iterator<Item = (&K, SystemTime)> + '_ {
        self.by_key.iter().map(|(k, t)| (k, *t))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use proptest::prelude::*;

    use super::*;

    fn at(ms: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_millis(ms)
    }

    #[test]
    fn head_decision_table() {
        let cases = [
            (1000, 999, HeadDecision::Wait { until: at(1000) }),
            (1000, 0, HeadDecision::Wait { until: at(1000) }),
            (1000, 1000, HeadDecision::Ready),
            (1000, 1001, HeadDecision::Ready),
            (0, 5, HeadDecision::Ready),
        ];
        for (due, now, expected) in cases {
            assert_eq!(
                head_decision(at(due), at(now)),
                expected,
                "due {due} now {now}"
            );
        }
    }

    #[test]
    fn timers_pop_in_time_order_and_only_when_due() {
        let mut t = DueTimers::new();
        assert_eq!(t.next_wakeup(), None);
        t.pause(("retry-1m", 0), at(300));
        t.pause(("retry-1m", 1), at(100));
        t.pause(("retry-10s", 0), at(200));
        assert_eq!(t.len(), 3);
        assert_eq!(t.next_wakeup(), Some(at(100)));
        assert!(t.due(at(99)).is_empty());
        assert_eq!(t.due(at(200)), vec![("retry-1m", 1), ("retry-10s", 0)]);
        assert_eq!(t.next_wakeup(), Some(at(300)));
        assert!(!t.is_paused(&("retry-1m", 1)));
        assert!(t.is_paused(&("retry-1m", 0)));
        assert_eq!(t.due(at(10_000)), vec![("retry-1m", 0)]);
        assert!(t.is_empty());
        assert_eq!(t.next_wakeup(), None);
    }

    #[test]
    fn pausing_again_replaces_the_timer() {
        let mut t = DueTimers::new();
        t.pause(7, at(100));
        t.pause(7, at(500));
        assert_eq!(t.len(), 1);
        assert_eq!(t.resume_at(&7), Some(at(500)));
        assert!(t.due(at(100)).is_empty());
        t.pause(7, at(50));
        assert_eq!(t.next_wakeup(), Some(at(50)));
        assert_eq!(t.due(at(50)), vec![7]);
    }

    #[test]
    fn cancel_on_revoke_forgets_the_partition() {
        let mut t = DueTimers::new();
        t.pause(1, at(100));
        t.pause(2, at(200));
        assert_eq!(t.cancel(&1), Some(at(100)));
        assert_eq!(t.cancel(&1), None);
        assert_eq!(t.next_wakeup(), Some(at(200)));
        assert_eq!(t.due(at(1000)), vec![2]);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Pause(u8, u16),
        Cancel(u8),
        Due(u16),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u8..8, 0u16..1000).prop_map(|(k, t)| Op::Pause(k, t)),
            (0u8..8).prop_map(Op::Cancel),
            (0u16..1000).prop_map(Op::Due),
        ]
    }

    proptest! {
        #[test]
        fn never_ready_before_due(due in 0u64..u64::from(u32::MAX), now in 0u64..u64::from(u32::MAX)) {
            match head_decision(at(due), at(now)) {
                HeadDecision::Ready => prop_assert!(now >= due),
                HeadDecision::Wait { until } => {
                    prop_assert!(now < due);
                    prop_assert_eq!(until, at(due));
                }
            }
        }

        #[test]
        fn timers_agree_with_a_model(ops in prop::collection::vec(op(), 0..60)) {
            let mut t = DueTimers::new();
            let mut model: BTreeMap<u8, u16> = BTreeMap::new();
            for op in ops {
                match op {
                    Op::Pause(k, until) => {
                        t.pause(k, at(u64::from(until)));
                        model.insert(k, until);
                    }
                    Op::Cancel(k) => {
                        prop_assert_eq!(t.cancel(&k), model.remove(&k).map(|u| at(u64::from(u))));
                    }
                    Op::Due(now) => {
                        let got = t.due(at(u64::from(now)));
                        let mut expected: Vec<(u16, u8)> =
                            model.iter().filter(|(_, u)| **u <= now).map(|(k, u)| (*u, *k)).collect();
                        expected.sort_unstable();
                        let expected: Vec<u8> = expected.into_iter().map(|(_, k)| k).collect();
                        prop_assert_eq!(&got, &expected);
                        for k in &got {
                            model.remove(k);
                        }
                    }
                }
                prop_assert_eq!(t.len(), model.len());
                prop_assert_eq!(t.next_wakeup(), model.values().min().map(|u| at(u64::from(*u))));
            }
        }
    }
}
