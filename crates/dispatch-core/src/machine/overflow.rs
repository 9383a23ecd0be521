//! Overflow lanes, as the machine decides them: which records of `deliveries`
//! are moved to a lane topic instead of being buffered, and when a lane is
//! known to hold nothing older of a subscription than what `deliveries` holds.
//!
//! The unit promoted is a *tenant* on one partition of `deliveries`, as the
//! tenant is the unit of isolation (and of fairness): a tenant whose backlog
//! fills a partition's buffer is moved aside however many subscriptions it
//! spreads that backlog over. (Counting by subscription would miss a tenant of
//! eight subscriptions with 625 records each in a 5,000-record buffer.)
//!
//! A record moved from partition `p` of `deliveries` goes to partition `p` of
//! lane `Topics::lane_of(tenant)`, in the transaction that commits its source
//! offset (a hand-off like a retry: never lost, never doubled). The replica
//! that owns `deliveries` partition `p` also reads partition `p` of every lane
//! (`crates/dispatcher/src/engine/lanes.rs` assigns them with it), so both FIFOs of a subscription
//! feed the same lane of `hookline_core::Lanes` in this replica.
//!
//! Order for `max_in_flight = 1` (first attempts start in event order) holds
//! across promotion and demotion because a subscription's records enter the
//! scheduler in source order: once its tenant is promoted, *all* its records
//! of the partition go to the lane (its queued ones are withdrawn and moved, in
//! order, behind anything it already has there); after demotion, an ordered
//! subscription's records keep going to the lane until the lane partition is
//! *in sync* — every record this replica moved there has been fetched back
//! (the `hookline-moved-from` header carries each one's source offset), and
//! the lane was read to its end once since the assignment (so nothing an
//! earlier owner moved is left unfetched). Only then does it start from
//! `deliveries` again, behind whatever it still has queued from the lane.
//! Records the scheduler holds start in FIFO order within the subscription's
//! cap, so nothing starts from the new place while anything older waits in the
//! old one.

use std::collections::HashMap;

use hookline_core::{Change, OverflowSettings, Promotions};
use hookline_envelope::Topics;

use crate::part::{Input, Key, Part};

/// What this replica knows of one lane partition (lane, partition).
#[derive(Debug, Default, Clone)]
struct LaneSync {
    /// Read to its end once since it was assigned.
    eof: bool,
    /// Moves handed off and not yet committed (or abandoned).
    pending: usize,
    /// The highest source offset moved there and committed.
    moved: Option<i64>,
    /// The highest source offset fetched back from it.
    fetched: Option<i64>,
}

impl LaneSync {
    fn in_sync(&self) -> bool {
        self.eof && self.pending == 0 && self.moved <= self.fetched
    }
}

/// A (partition of `deliveries`, tenant) the controller promotes.
pub type Hot = (i32, String);

/// The overflow state of one machine.
#[derive(Debug)]
pub struct Overflow {
    /// The `deliveries` input, when lanes are on.
    source: Option<u16>,
    /// The input of lane `k`, by `k`.
    lanes: Vec<u16>,
    promotions: Promotions<Hot>,
    sync: HashMap<(usize, i32), LaneSync>,
    /// Moves handed off, by source record: its lane.
    moving: HashMap<Key, usize>,
    /// Records of `deliveries` queued since the controller's last look, by
    /// partition and tenant ([`arrived`](Self::arrived)).
    arrivals: HashMap<i32, HashMap<String, usize>>,
}

impl Overflow {
    pub fn new(inputs: &[Input], settings: OverflowSettings) -> Self {
        let mut lanes: Vec<(usize, u16)> = inputs
            .iter()
            .enumerate()
            .filter_map(|(i, input)| Some((input.lane?, u16::try_from(i).ok()?)))
            .collect();
        lanes.sort_unstable();
        let lanes: Vec<u16> = lanes.into_iter().map(|(_, i)| i).collect();
        let source = inputs
            .iter()
            .position(Input::is_source)
            .and_then(|i| u16::try_from(i).ok())
            .filter(|_| settings.lanes > 0 && !lanes.is_empty());
        let settings = OverflowSettings {
            lanes: settings.lanes.min(lanes.len()),
            ..settings
        };
        Self {
            source,
            lanes,
            promotions: Promotions::new(settings),
            sync: HashMap::new(),
            moving: HashMap::new(),
            arrivals: HashMap::new(),
        }
    }

    /// The lane index of `part`, when it is a lane's partition.
    pub fn lane_of_part(&self, part: Part) -> Option<usize> {
        self.lanes.iter().position(|i| *i == part.input)
    }

    pub fn is_source(&self, part: Part) -> bool {
        self.source == Some(part.input)
    }

    /// The partition of lane `lane` that mirrors `partition` of `deliveries`.
    pub fn lane_part(&self, lane: usize, partition: i32) -> Option<Part> {
        Some(Part {
            input: *self.lanes.get(lane)?,
            partition,
        })
    }

    /// Where a fetched record of `deliveries` of `tenant_id` goes:
    /// `Some(lane)` to be moved there, `None` to be buffered here. `ordered`:
    /// its subscription starts one at a time (`max_in_flight = 1`).
    pub fn route(&self, part: Part, tenant_id: &str, ordered: bool) -> Option<usize> {
        if !self.is_source(part) {
            return None;
        }
        let lane = self.lane_for(tenant_id);
        let hot = (part.partition, tenant_id.to_owned());
        if self.promotions.is_promoted(&hot) {
            return Some(lane);
        }
        let in_sync = self
            .sync
            .get(&(lane, part.partition))
            .is_some_and(LaneSync::in_sync);
        (ordered && !in_sync).then_some(lane)
    }

    /// The lane a tenant's records move to.
    pub fn lane_for(&self, tenant_id: &str) -> usize {
        Topics::lane_of(tenant_id, self.lanes.len())
    }

    /// A move of `key` to `lane` was handed off.
    pub fn moving(&mut self, key: Key, lane: usize) {
        self.sync
            .entry((lane, key.0.partition))
            .or_default()
            .pending += 1;
        self.moving.insert(key, lane);
    }

    /// Work of `key` ended: when it was a move, `durable` says it committed.
    pub fn ended(&mut self, key: Key, durable: bool) {
        let Some(lane) = self.moving.remove(&key) else {
            return;
        };
        if let Some(sync) = self.sync.get_mut(&(lane, key.0.partition)) {
            sync.pending = sync.pending.saturating_sub(1);
            if durable {
                sync.moved = sync.moved.max(Some(key.1));
            }
        }
    }

    /// A record of lane partition `part` was fetched; `moved_from` is its
    /// source offset (its `hookline-moved-from` header).
    pub fn fetched(&mut self, part: Part, moved_from: Option<i64>) {
        let Some(lane) = self.lane_of_part(part) else {
            return;
        };
        let sync = self.sync.entry((lane, part.partition)).or_default();
        sync.fetched = sync.fetched.max(moved_from);
    }

    /// Lane partition `part` was read to its end.
    pub fn eof(&mut self, part: Part) {
        if let Some(lane) = self.lane_of_part(part) {
            self.sync.entry((lane, part.partition)).or_default().eof = true;
        }
    }

    /// Partitions (re)assigned or revoked: what was known of them is forgotten.
    pub fn reset(&mut self, part: Part) {
        if let Some(lane) = self.lane_of_part(part) {
            self.sync.remove(&(lane, part.partition));
        }
        if self.is_source(part) {
            self.promotions.forget(|(p, _)| *p == part.partition);
            self.arrivals.remove(&part.partition);
        }
    }

    /// A record of `tenant_id` was queued from `part`: whether the tenant's
    /// records queued there since the last look alone reach
    /// `promote_at_once_records`, so the controller should look now rather
    /// than at the next tick. A burst that fills half a partition's buffer
    /// (fanout writes ~70,000 records a second) does so well within a tick,
    /// and every record of it queued before the look is one more to move out
    /// of the way of the tenants behind it. Counting only what arrived since
    /// the last look keeps this to a map lookup a record; the look itself
    /// walks the buffer, at most once per `promote_at_once_records` records
    /// queued (also when no lane is free).
    pub fn arrived(&mut self, part: Part, tenant_id: &str) -> bool {
        let at_once = self.promotions.settings().promote_at_once_records;
        if at_once == 0 || !self.is_source(part) {
            return false;
        }
        let counts = self.arrivals.entry(part.partition).or_default();
        let n = match counts.get_mut(tenant_id) {
            Some(n) => {
                *n += 1;
                *n
            }
            None => {
                counts.insert(tenant_id.to_owned(), 1);
                1
            }
        };
        n >= at_once
    }

    /// One observation of the backlog (records buffered and not started, from
    /// `deliveries` and the lanes, by partition and tenant).
    pub fn observe(
        &mut self,
        backlog: HashMap<Hot, usize>,
        now: std::time::SystemTime,
    ) -> Vec<Change<Hot>> {
        self.arrivals.clear();
        self.promotions.observe(backlog, now)
    }

    /// Whether `part`'s records count in the backlog the controller sees, and
    /// as which partition of `deliveries`.
    pub fn backlog_partition(&self, part: Part) -> Option<i32> {
        (self.is_source(part) || self.lane_of_part(part).is_some()).then_some(part.partition)
    }

    pub fn source(&self) -> Option<u16> {
        self.source
    }

    /// Promoted (partition, tenant) pairs, and since when.
    pub fn promoted(&self) -> impl Iterator<Item = (&Hot, std::time::SystemTime)> {
        self.promotions.iter_promoted()
    }

    pub fn promoted_count(&self) -> usize {
        self.promotions.promoted()
    }

    /// Tenants that qualified for a lane and found none free.
    pub fn waiting(&self) -> usize {
        self.promotions.waiting()
    }

    /// The lane ceiling in use.
    pub fn ceiling(&self) -> usize {
        self.promotions.settings().lanes
    }
}
