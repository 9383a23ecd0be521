//! Which tenants fanout writes straight to their overflow lane: the burst
//! router. Pure state, time passed in.
//!
//! The dispatcher promotes a tenant whose backlog fills half of a partition's
//! buffer and then *moves* its records to a lane ([`crate::overflow`]); a
//! burst already written to `deliveries` has to be read and rewritten, record
//! by record, before the tenants behind it on the partition are reached, so
//! their wait grows with the burst. Fanout sees the burst coming: a tenant
//! whose deliveries in one window (200 ms by default) reach the dispatcher's
//! promote-at-once threshold (2,500, half its default partition buffer) would
//! be promoted by the dispatcher at once anyway. Fanout *routes* it instead:
//! from that record on, the tenant's unordered deliveries are written to
//! partition `p` of its lane (`p` the partition its deliveries go to, learnt
//! from the first one's delivery report), in the same transaction as
//! everything else, so they are never in the way at all.
//!
//! Only unordered deliveries are routed (a subscription with
//! `max_in_flight > 1` that is not `ordering: strict`): a lane record does
//! not wait for the older records of its subscription in `deliveries`, so an
//! ordered subscription's records stay in `deliveries`, where the
//! dispatcher's own promotion keeps them in order.
//!
//! A routed tenant goes back to `deliveries` once its deliveries per window
//! stay at or below a twenty-fifth of the threshold (100 by default) for
//! `hold` (30 s): hysteresis, so a bursty tenant does not flap. At most
//! `lanes` tenants are routed at once per fanout replica (the largest bursts
//! first), as with the dispatcher's ceiling; the hysteresis and the ceiling
//! are [`Promotions`]'.

use std::{
    collections::HashMap,
    time::{Duration, SystemTime},
};

use crate::overflow::{Change, OverflowSettings, Promotions};

/// The router's settings (fanout's `--overflow-*` flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BurstSettings {
    /// Lane topics in use (the dispatcher's `--overflow-lanes`), and the most
    /// tenants routed at once; 0 routes nothing.
    pub lanes: usize,
    /// Deliveries of one tenant within one window at which it is routed; 0
    /// routes nothing.
    pub route_records: usize,
    pub window: Duration,
    /// How long a routed tenant's deliveries per window stay at or below
    /// `route_records / 25` before it goes back to `deliveries`.
    pub hold: Duration,
}

impl BurstSettings {
    pub const DEFAULT: Self = Self {
        lanes: 8,
        // The dispatcher's default promote-at-once threshold.
        route_records: 2_500,
        window: Duration::from_millis(200),
        hold: Duration::from_secs(30),
    };

    /// Whether anything is ever routed.
    pub fn enabled(&self) -> bool {
        self.lanes > 0 && self.route_records > 0
    }

    /// Deliveries per window at or below which a routed tenant counts as calm.
    pub fn calm_records(&self) -> usize {
        self.route_records / 25
    }

    /// Why these settings cannot work, if they cannot.
    pub fn validate(&self) -> Result<(), String> {
        if self.enabled() && self.window.is_zero() {
            return Err("the routing window must be longer than zero".into());
        }
        Ok(())
    }
}

impl Default for BurstSettings {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Where one delivery goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// To `deliveries`, as always.
    Deliveries,
    /// To `deliveries`, and its partition is to be reported back
    /// ([`BurstRouter::located`]): the tenant is routed, and where its lane
    /// records go is not known yet.
    Locate,
    /// To partition `partition` of the tenant's lane (`Topics::lane_of`).
    Lane { partition: i32 },
}

/// The routing decisions of one fanout replica.
#[derive(Debug, Clone)]
pub struct BurstRouter {
    settings: BurstSettings,
    promotions: Promotions<String>,
    window_start: Option<SystemTime>,
    /// Deliveries per tenant in the current window.
    counts: HashMap<String, usize>,
    /// The partition of `deliveries` each routed tenant's records go to.
    partitions: HashMap<String, i32>,
    changes: Vec<Change<String>>,
}

impl BurstRouter {
    pub fn new(settings: BurstSettings) -> Self {
        let route = settings.route_records.max(1);
        Self {
            settings,
            promotions: Promotions::new(OverflowSettings {
                lanes: if settings.enabled() {
                    settings.lanes
                } else {
                    0
                },
                promote_records: route,
                promote_after: Duration::ZERO,
                promote_at_once_records: route,
                demote_records: settings.calm_records().min(route - 1),
                demote_after: settings.hold,
            }),
            window_start: None,
            counts: HashMap::new(),
            partitions: HashMap::new(),
            changes: Vec::new(),
        }
    }

    pub fn settings(&self) -> &BurstSettings {
        &self.settings
    }

    /// Counts one delivery of `tenant_id` at `now` and says where it goes.
    /// `ordered`: its subscription starts one at a time (`max_in_flight = 1`
    /// or `ordering: strict`), so it stays in `deliveries` (its count still
    /// counts: the partition carries it).
    pub fn route(&mut self, tenant_id: &str, ordered: bool, now: SystemTime) -> Route {
        if !self.settings.enabled() {
            return Route::Deliveries;
        }
        self.close_window(now);
        let n = match self.counts.get_mut(tenant_id) {
            Some(n) => {
                *n += 1;
                *n
            }
            None => {
                self.counts.insert(tenant_id.to_owned(), 1);
                1
            }
        };
        if n == self.settings.route_records && !self.promotions.is_promoted(&tenant_id.to_owned()) {
            self.look(now);
        }
        if ordered || !self.promotions.is_promoted(&tenant_id.to_owned()) {
            return Route::Deliveries;
        }
        match self.partitions.get(tenant_id) {
            Some(&partition) => Route::Lane { partition },
            None => Route::Locate,
        }
    }

    /// A delivery of `tenant_id` answered [`Route::Locate`] went to
    /// `partition` of `deliveries`.
    pub fn located(&mut self, tenant_id: &str, partition: i32) {
        if self.promotions.is_promoted(&tenant_id.to_owned()) {
            self.partitions.insert(tenant_id.to_owned(), partition);
        }
    }

    /// Closes the window when it has run out (also when nothing arrives:
    /// call it now and then so a routed tenant that went quiet goes back).
    pub fn tick(&mut self, now: SystemTime) {
        if self.settings.enabled() {
            self.close_window(now);
        }
    }

    /// Routing changes since the last call: `Promote` a tenant now routed,
    /// `Demote` one back to `deliveries`.
    pub fn take_changes(&mut self) -> Vec<Change<String>> {
        std::mem::take(&mut self.changes)
    }

    /// Whether `tenant_id` is routed now.
    pub fn is_routed(&self, tenant_id: &str) -> bool {
        self.settings.enabled() && self.promotions.is_promoted(&tenant_id.to_owned())
    }

    /// The tenants routed now, each with since when.
    pub fn routed_tenants(&self) -> impl Iterator<Item = (&str, SystemTime)> {
        self.promotions
            .iter_promoted()
            .map(|(t, since)| (t.as_str(), since))
    }

    /// Tenants routed now.
    pub fn routed(&self) -> usize {
        self.promotions.promoted()
    }

    /// Tenants that qualify but find every lane taken.
    pub fn waiting(&self) -> usize {
        self.promotions.waiting()
    }

    fn close_window(&mut self, now: SystemTime) {
        let start = *self.window_start.get_or_insert(now);
        if now.duration_since(start).unwrap_or_default() < self.settings.window {
            return;
        }
        self.look(now);
        self.counts.clear();
        self.window_start = Some(now);
    }

    fn look(&mut self, now: SystemTime) {
        let counts = self.counts.iter().map(|(t, n)| (t.clone(), *n));
        for change in self.promotions.observe(counts, now) {
            if let Change::Demote(tenant) = &change {
                self.partitions.remove(tenant);
            }
            self.changes.push(change);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: SystemTime = SystemTime::UNIX_EPOCH;

    fn at(ms: u64) -> SystemTime {
        T0 + Duration::from_millis(ms)
    }

    fn settings(route_records: usize) -> BurstSettings {
        BurstSettings {
            route_records,
            ..BurstSettings::DEFAULT
        }
    }

    /// Sends `n` deliveries of `tenant` at `now`, reporting partition 3 for
    /// any located; the routes, in order.
    fn send(r: &mut BurstRouter, tenant: &str, n: usize, now: SystemTime) -> Vec<Route> {
        (0..n)
            .map(|_| {
                let route = r.route(tenant, false, now);
                if route == Route::Locate {
                    r.located(tenant, 3);
                }
                route
            })
            .collect()
    }

    #[test]
    fn a_burst_is_routed_from_the_record_that_reaches_the_threshold() {
        let mut r = BurstRouter::new(settings(100));
        let routes = send(&mut r, "whale", 150, at(0));
        assert!(routes[..99].iter().all(|x| *x == Route::Deliveries));
        assert_eq!(routes[99], Route::Locate, "the 100th is located");
        assert!(routes[100..]
            .iter()
            .all(|x| *x == Route::Lane { partition: 3 }));
        assert_eq!(r.take_changes(), vec![Change::Promote("whale".into())]);
        assert_eq!(r.routed(), 1);
    }

    #[test]
    fn a_steady_tenant_below_the_threshold_per_window_is_never_routed() {
        let mut r = BurstRouter::new(settings(100));
        // 99 per 200 ms window for ten seconds: 495 a second.
        for w in 0..50 {
            let routes = send(&mut r, "steady", 99, at(w * 200));
            assert!(routes.iter().all(|x| *x == Route::Deliveries), "window {w}");
        }
        assert!(r.take_changes().is_empty());
    }

    #[test]
    fn ordered_deliveries_stay_in_deliveries_but_count() {
        let mut r = BurstRouter::new(settings(100));
        for _ in 0..100 {
            assert_eq!(r.route("whale", true, at(0)), Route::Deliveries);
        }
        assert_eq!(
            r.routed(),
            1,
            "the ordered ones brought it to the threshold"
        );
        assert_eq!(r.route("whale", true, at(1)), Route::Deliveries);
        assert_eq!(r.route("whale", false, at(1)), Route::Locate);
    }

    #[test]
    fn a_routed_tenant_goes_back_only_after_staying_calm_for_the_hold() {
        let mut r = BurstRouter::new(settings(100));
        send(&mut r, "whale", 100, at(0));
        r.take_changes();
        // Calm (4 = 100/25 per window) from 200 ms on: back after 30 s.
        let mut back_at = None;
        for w in 1..=200u64 {
            let now = at(w * 200);
            let routes = send(&mut r, "whale", 4, now);
            if back_at.is_none() && !r.take_changes().is_empty() {
                back_at = Some(w * 200);
                assert_eq!(routes[1..], [Route::Deliveries; 3][..]);
            }
        }
        let back_at = back_at.expect("demoted");
        assert!(
            (30_200..=30_600).contains(&back_at),
            "went back at {back_at} ms"
        );
    }

    #[test]
    fn one_busy_window_restarts_the_hold() {
        let mut r = BurstRouter::new(settings(100));
        send(&mut r, "whale", 100, at(0));
        r.take_changes();
        for w in 1..=100u64 {
            // Calm but for one busy window at 20 s.
            let n = if w == 100 { 50 } else { 1 };
            send(&mut r, "whale", n, at(w * 200));
        }
        for w in 101..=200u64 {
            send(&mut r, "whale", 1, at(w * 200));
        }
        // 20.2 s + 30 s: not back yet at 40 s.
        assert!(r.take_changes().is_empty());
        assert_eq!(r.routed(), 1);
        r.tick(at(51_000));
        assert_eq!(r.take_changes(), vec![Change::Demote("whale".into())]);
    }

    #[test]
    fn a_quiet_routed_tenant_goes_back_on_ticks_alone() {
        let mut r = BurstRouter::new(settings(100));
        send(&mut r, "whale", 100, at(0));
        r.take_changes();
        for s in 1..=40u64 {
            r.tick(at(s * 1_000));
        }
        assert_eq!(r.take_changes(), vec![Change::Demote("whale".into())]);
        // Routed again by the next burst, located afresh.
        let routes = send(&mut r, "whale", 100, at(41_000));
        assert_eq!(routes[99], Route::Locate);
    }

    #[test]
    fn at_most_lanes_tenants_are_routed_and_the_rest_wait() {
        let mut r = BurstRouter::new(BurstSettings {
            lanes: 2,
            ..settings(10)
        });
        for t in ["a", "b", "c"] {
            send(&mut r, t, 10, at(0));
        }
        assert_eq!(r.routed(), 2);
        assert_eq!(r.waiting(), 1);
        assert_eq!(r.route("c", false, at(1)), Route::Deliveries);
    }

    #[test]
    fn off_routes_nothing() {
        for s in [
            BurstSettings {
                lanes: 0,
                ..settings(10)
            },
            settings(0),
        ] {
            let mut r = BurstRouter::new(s);
            let routes = send(&mut r, "whale", 1_000, at(0));
            assert!(routes.iter().all(|x| *x == Route::Deliveries));
        }
    }

    #[test]
    fn a_location_for_a_tenant_no_longer_routed_is_ignored() {
        let mut r = BurstRouter::new(settings(10));
        r.located("nobody", 1);
        assert_eq!(send(&mut r, "nobody", 10, at(0))[9], Route::Locate);
    }
}
