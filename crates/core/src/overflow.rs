//! When a key is moved to an overflow lane, and when it comes back: the
//! promotion controller of the dispatcher's isolation (docs/design.md#overflow-lanes). Pure state,
//! time passed in. The dispatcher's key is a tenant on one partition of
//! `deliveries` (the unit of isolation).
//!
//! Fairness reorders only what a replica has fetched, and a Kafka partition is
//! FIFO: once one tenant's backlog on a partition is larger than the
//! partition's buffer, every tenant behind it on that partition waits for its
//! endpoint. So a key whose buffered backlog stays at or above
//! [`OverflowSettings::promote_records`] for
//! [`promote_after`](OverflowSettings::promote_after) is *promoted*: the
//! dispatcher moves its records of that partition to an overflow lane topic,
//! and the partition behind it keeps flowing. It is demoted when its backlog
//! stays at or below [`demote_records`](OverflowSettings::demote_records) for
//! [`demote_after`](OverflowSettings::demote_after). Both thresholds and both
//! times are hysteresis: a bursty tenant does not flap. One exception: a key
//! whose backlog reaches
//! [`promote_at_once_records`](OverflowSettings::promote_at_once_records) (by
//! default half of a partition's buffer) is promoted at that observation —
//! it already holds enough of the partition's buffer to stall the tenants
//! behind it, and every second of hysteresis is a second they wait.
//!
//! Guarantees (tested below):
//! - at most [`lanes`](OverflowSettings::lanes) keys are promoted at once;
//!   when more qualify, the largest backlogs go first and
//!   [`Promotions::waiting`] counts the rest (the ceiling alert);
//! - a promotion needs the backlog high at every observation for the whole
//!   `promote_after` (or at least `promote_at_once_records` at one), a
//!   demotion needs it low for the whole `demote_after`; one observation on
//!   the other side restarts the clock;
//! - `lanes = 0` promotes nothing.

use std::{
    collections::BTreeMap,
    time::{Duration, SystemTime},
};

/// The promotion controller's thresholds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OverflowSettings {
    /// Most keys (tenants, per partition they are promoted on) promoted at
    /// once in one replica; 0 turns overflow off.
    pub lanes: usize,
    /// Backlog (records buffered, not started) at or above which a key is
    /// promoted once it has stayed there `promote_after`.
    pub promote_records: usize,
    pub promote_after: Duration,
    /// Backlog at or above which a key is promoted at once, without waiting
    /// out `promote_after`; 0 never. At least `promote_records` when set.
    pub promote_at_once_records: usize,
    /// Backlog at or below which a promoted key is demoted once it has
    /// stayed there `demote_after`.
    pub demote_records: usize,
    pub demote_after: Duration,
}

impl OverflowSettings {
    /// The product's defaults (the dispatcher's `--overflow-*` flags).
    pub const DEFAULT: Self = Self {
        lanes: 8,
        promote_records: 1_000,
        promote_after: Duration::from_secs(1),
        // Half of the dispatcher's default partition buffer (5,000).
        promote_at_once_records: 2_500,
        demote_records: 100,
        demote_after: Duration::from_secs(30),
    };

    /// Why these settings cannot work, if they cannot.
    pub fn validate(&self) -> Result<(), String> {
        if self.promote_records == 0 {
            return Err("the promotion threshold must be at least 1 record".into());
        }
        if self.demote_records >= self.promote_records {
            return Err(format!(
                "the demotion threshold ({}) must be below the promotion threshold ({})",
                self.demote_records, self.promote_records
            ));
        }
        if self.promote_at_once_records != 0 && self.promote_at_once_records < self.promote_records
        {
            return Err(format!(
                "the promote-at-once threshold ({}) must be 0 (never) or at least the promotion threshold ({})",
                self.promote_at_once_records, self.promote_records
            ));
        }
        Ok(())
    }
}

impl Default for OverflowSettings {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// A decision of [`Promotions::observe`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change<K> {
    Promote(K),
    Demote(K),
}

#[derive(Debug, Clone, Default)]
struct State {
    promoted_since: Option<SystemTime>,
    /// Since when the backlog has been on the other side of the threshold.
    crossed_since: Option<SystemTime>,
}

/// Which keys (e.g. (partition, tenant)) are promoted.
#[derive(Debug, Clone)]
pub struct Promotions<K> {
    settings: OverflowSettings,
    states: BTreeMap<K, State>,
    waiting: usize,
}

impl<K: Ord + Clone> Promotions<K> {
    pub fn new(settings: OverflowSettings) -> Self {
        Self {
            settings,
            states: BTreeMap::new(),
            waiting: 0,
        }
    }

    pub fn settings(&self) -> &OverflowSettings {
        &self.settings
    }

    /// One observation at `now` of every key's backlog (a key left out has
    /// none). Returns what changes, promotions largest backlog first.
    pub fn observe(
        &mut self,
        backlog: impl IntoIterator<Item = (K, usize)>,
        now: SystemTime,
    ) -> Vec<Change<K>> {
        let s = self.settings;
        let backlog: BTreeMap<K, usize> = backlog.into_iter().collect();
        let mut changes = Vec::new();
        let mut candidates: Vec<(usize, K)> = Vec::new();
        let held_for = |since: Option<SystemTime>, need: Duration| {
            since.is_some_and(|t| now.duration_since(t).unwrap_or_default() >= need)
        };
        // Every key seen now, and every key remembered.
        let keys: Vec<K> = {
            let mut k: Vec<K> = backlog.keys().cloned().collect();
            k.extend(self.states.keys().cloned());
            k.sort();
            k.dedup();
            k
        };
        for key in keys {
            let b = backlog.get(&key).copied().unwrap_or(0);
            let state = self.states.entry(key.clone()).or_default();
            if state.promoted_since.is_some() {
                if b <= s.demote_records {
                    let since = *state.crossed_since.get_or_insert(now);
                    if held_for(Some(since), s.demote_after) {
                        self.states.remove(&key);
                        changes.push(Change::Demote(key));
                    }
                } else {
                    state.crossed_since = None;
                }
            } else if b >= s.promote_records && s.lanes > 0 {
                let since = *state.crossed_since.get_or_insert(now);
                let at_once = s.promote_at_once_records != 0 && b >= s.promote_at_once_records;
                if at_once || held_for(Some(since), s.promote_after) {
                    candidates.push((b, key));
                }
            } else {
                self.states.remove(&key);
            }
        }
        candidates.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        let mut free = s.lanes.saturating_sub(self.promoted());
        self.waiting = 0;
        for (_, key) in candidates {
            if free == 0 {
                self.waiting += 1;
                continue;
            }
            free -= 1;
            if let Some(state) = self.states.get_mut(&key) {
                state.promoted_since = Some(now);
                state.crossed_since = None;
            }
            changes.push(Change::Promote(key));
        }
        changes
    }

    /// Whether `key` is promoted.
    pub fn is_promoted(&self, key: &K) -> bool {
        self.states
            .get(key)
            .is_some_and(|s| s.promoted_since.is_some())
    }

    /// How many keys are promoted.
    pub fn promoted(&self) -> usize {
        self.states
            .values()
            .filter(|s| s.promoted_since.is_some())
            .count()
    }

    /// Keys that qualified at the last observation but found every lane taken.
    pub fn waiting(&self) -> usize {
        self.waiting
    }

    /// Every promoted key and since when.
    pub fn iter_promoted(&self) -> impl Iterator<Item = (&K, SystemTime)> {
        self.states
            .iter()
            .filter_map(|(k, s)| s.promoted_since.map(|t| (k, t)))
    }

    /// Forgets every key `which` matches (a revoked partition), promoted or not.
    pub fn forget(&mut self, which: impl Fn(&K) -> bool) {
        self.states.retain(|k, _| !which(k));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_millis(ms)
    }

    fn settings(lanes: usize) -> OverflowSettings {
        OverflowSettings {
            lanes,
            promote_records: 100,
            promote_after: Duration::from_millis(1_000),
            promote_at_once_records: 1_000,
            demote_records: 10,
            demote_after: Duration::from_millis(5_000),
        }
    }

    #[test]
    fn promotes_only_after_the_backlog_stayed_high_for_the_whole_time() {
        let mut p = Promotions::new(settings(8));
        assert!(p.observe([("a", 150)], at(0)).is_empty());
        assert!(p.observe([("a", 150)], at(900)).is_empty());
        // One low observation restarts the clock.
        assert!(p.observe([("a", 99)], at(950)).is_empty());
        assert!(p.observe([("a", 150)], at(1_000)).is_empty());
        assert!(p.observe([("a", 150)], at(1_999)).is_empty());
        assert_eq!(p.observe([("a", 150)], at(2_000)), [Change::Promote("a")]);
        assert!(p.is_promoted(&"a"));
        assert_eq!(p.promoted(), 1);
    }

    #[test]
    fn a_backlog_at_the_at_once_threshold_is_promoted_without_waiting() {
        let mut p = Promotions::new(settings(8));
        assert!(p.observe([("a", 999)], at(0)).is_empty(), "just below");
        assert_eq!(p.observe([("a", 1_000)], at(200)), [Change::Promote("a")]);
        // Never seen before: promoted at its first observation.
        assert_eq!(p.observe([("b", 4_000)], at(400)), [Change::Promote("b")]);
        // Demotion keeps its hysteresis.
        assert!(p.observe([("a", 0), ("b", 4_000)], at(600)).is_empty());
        assert!(p.is_promoted(&"a"));
        // The ceiling holds: the largest go first, the rest wait.
        let mut p = Promotions::new(settings(1));
        let burst = [("a", 1_500), ("b", 3_000)];
        assert_eq!(p.observe(burst, at(0)), [Change::Promote("b")]);
        assert_eq!(p.waiting(), 1);
        // 0 turns it off: only the time counts.
        let mut s = settings(8);
        s.promote_at_once_records = 0;
        let mut p = Promotions::new(s);
        assert!(p.observe([("a", 1_000_000)], at(0)).is_empty());
        assert!(p.observe([("a", 1_000_000)], at(999)).is_empty());
        assert_eq!(
            p.observe([("a", 1_000_000)], at(1_000)),
            [Change::Promote("a")]
        );
    }

    #[test]
    fn demotes_only_after_the_backlog_stayed_low_for_the_whole_time() {
        let mut p = Promotions::new(settings(8));
        p.observe([("a", 150)], at(0));
        assert_eq!(p.observe([("a", 150)], at(1_000)), [Change::Promote("a")]);
        // Between the thresholds: stays promoted, no clock runs.
        assert!(p.observe([("a", 50)], at(2_000)).is_empty());
        assert!(p.observe([], at(3_000)).is_empty(), "empty counts as 0");
        assert!(
            p.observe([("a", 11)], at(7_000)).is_empty(),
            "clock restarted"
        );
        assert!(p.observe([("a", 10)], at(7_500)).is_empty());
        assert!(p.observe([("a", 0)], at(12_499)).is_empty());
        assert!(p.is_promoted(&"a"));
        assert_eq!(p.observe([("a", 0)], at(12_500)), [Change::Demote("a")]);
        assert!(!p.is_promoted(&"a"));
        // A burst right after does not promote at once: hysteresis again.
        assert!(p.observe([("a", 500)], at(12_600)).is_empty());
    }

    #[test]
    fn the_ceiling_promotes_the_largest_first_and_counts_the_rest() {
        let mut p = Promotions::new(settings(2));
        let backlog = [("a", 200), ("b", 900), ("c", 500), ("d", 50)];
        p.observe(backlog, at(0));
        let changes = p.observe(backlog, at(1_000));
        assert_eq!(changes, [Change::Promote("b"), Change::Promote("c")]);
        assert_eq!(p.waiting(), 1, "a waits for a lane; d is below the bound");
        assert!(p.observe(backlog, at(1_200)).is_empty());
        assert_eq!(p.waiting(), 1);
        // c drains and is demoted: a takes its lane at once (it waited long enough).
        let drained = [("a", 200), ("b", 900), ("c", 0)];
        p.observe(drained, at(2_000));
        let changes = p.observe(drained, at(7_000));
        assert_eq!(changes, [Change::Demote("c"), Change::Promote("a")]);
        assert_eq!(p.waiting(), 0);
        assert_eq!(p.promoted(), 2);
    }

    #[test]
    fn no_lanes_promotes_nothing_and_forget_drops_keys() {
        let mut p = Promotions::new(settings(0));
        p.observe([("a", 1_000)], at(0));
        assert!(p.observe([("a", 1_000)], at(10_000)).is_empty());
        let mut p = Promotions::new(settings(8));
        p.observe([((1, "a"), 1_000), ((2, "a"), 1_000)], at(0));
        p.observe([((1, "a"), 1_000), ((2, "a"), 1_000)], at(1_000));
        assert_eq!(p.promoted(), 2);
        p.forget(|(part, _)| *part == 1);
        assert!(!p.is_promoted(&(1, "a")) && p.is_promoted(&(2, "a")));
    }

    #[test]
    fn settings_are_validated() {
        assert!(OverflowSettings::DEFAULT.validate().is_ok());
        let mut s = settings(8);
        s.demote_records = 100;
        assert!(s.validate().unwrap_err().contains("below the promotion"));
        s.promote_records = 0;
        assert!(s.validate().is_err());
        let mut s = settings(8);
        s.promote_at_once_records = 99;
        assert!(s.validate().unwrap_err().contains("promote-at-once"));
        s.promote_at_once_records = 100;
        assert!(s.validate().is_ok(), "equal to the promotion threshold");
        s.promote_at_once_records = 0;
        assert!(s.validate().is_ok(), "never");
    }
}
