//! Flags of the fanout service, validated at start.

use std::time::Duration;

use clap::Args;
use hookline_core::BurstSettings;
use hookline_runtime::config::{parse_duration, CommonArgs};

/// Configuration of the fanout service.
#[derive(Debug, Clone, Args)]
pub struct Config {
    /// Options shared by every service.
    #[command(flatten)]
    pub common: CommonArgs,

    /// Fanout options.
    #[command(flatten)]
    pub fanout: FanoutArgs,
}

/// Options of the fan-out loop.
#[derive(Debug, Clone, Args)]
pub struct FanoutArgs {
    /// Consumer group of the fanout replicas on `events`.
    #[arg(long, env = "HOOKLINE_FANOUT_GROUP", default_value = hookline_runtime::acls::FANOUT_GROUP)]
    pub group_id: String,

    /// Transactional id of this replica; stable across restarts of the same
    /// replica fences its zombies, and two live replicas must never share one.
    /// Defaults to `<group>-` and the `--group-instance-id`, else
    /// `$HOSTNAME-<pid>`.
    #[arg(long, env = "HOOKLINE_FANOUT_TRANSACTIONAL_ID")]
    pub transactional_id: Option<String>,

    /// Most events in one transaction. Larger batches amortise the commit
    /// round trips (see the fanout_throughput bench).
    #[arg(long, env = "HOOKLINE_FANOUT_TXN_MAX_EVENTS", default_value_t = 2000,
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub txn_max_events: u32,

    /// Most event bytes held in one transaction (bounds memory with large payloads).
    #[arg(long, env = "HOOKLINE_FANOUT_TXN_MAX_BYTES", default_value_t = 16 * 1024 * 1024,
          value_parser = clap::value_parser!(u64).range(1024..))]
    pub txn_max_bytes: u64,

    /// Longest a transaction collects events before it commits (e.g. `100ms`):
    /// an upper bound, not a wait. A transaction commits as soon as the
    /// consumer has no further event ready (or a count/byte bound is hit), so
    /// one event alone commits at once and batches grow with the load.
    #[arg(long, env = "HOOKLINE_FANOUT_TXN_MAX_INTERVAL", default_value = "100ms",
          value_parser = parse_duration)]
    pub txn_max_interval: Duration,

    /// Least time from one transaction's commit to the next one's start
    /// (`0ms` turns it off). Events that arrive meanwhile join the batch.
    /// The transaction coordinator answers a transaction that starts while it
    /// still writes the previous commit's markers with
    /// CONCURRENT_TRANSACTIONS, and librdkafka then retries the partitions'
    /// registration only after a fixed 20 ms: a short gap costs less (the
    /// markers take 1–2 ms on a local broker; the timer rounds the gap up to
    /// the next millisecond).
    #[arg(long, env = "HOOKLINE_FANOUT_TXN_GAP", default_value = "1ms",
          value_parser = parse_duration)]
    pub txn_gap: Duration,

    /// Largest event payload fanned out; larger events are quarantined. Keep it
    /// below the `deliveries` topic's max.message.bytes.
    #[arg(long, env = "HOOKLINE_FANOUT_MAX_PAYLOAD_BYTES", default_value_t = 768 * 1024)]
    pub max_payload_bytes: usize,

    /// Timeout of one transaction operation (commit, offsets, abort).
    #[arg(long, env = "HOOKLINE_FANOUT_TXN_TIMEOUT", default_value = "30s",
          value_parser = parse_duration)]
    pub txn_timeout: Duration,

    /// Duplicate-admission window, in Kafka record time per `events` partition:
    /// an event whose (tenant_id, event_id) appeared on its partition this
    /// recently fans out to nothing (a changed payload is quarantined). `0`
    /// turns it off. Keep `events` retention well above it: the window is
    /// rebuilt from the partition's records on assignment.
    #[arg(long, env = "HOOKLINE_DEDUP_WINDOW", default_value = "5m",
          value_parser = parse_duration)]
    pub dedup_window: Duration,

    /// Most keys the window holds per assigned partition; beyond it the oldest
    /// are evicted early (counted), which shortens the window for them.
    #[arg(long, env = "HOOKLINE_DEDUP_MAX_KEYS", default_value_t = 1_000_000,
          value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    pub dedup_max_keys: u64,

    /// Overflow lanes in use, 0 to 8: must be the dispatcher's
    /// `--overflow-lanes` (the same variable, so one setting serves both), as
    /// a tenant's lane is a hash of its id over this many. 0 routes nothing.
    #[arg(long, env = "HOOKLINE_OVERFLOW_LANES", default_value_t = BurstSettings::DEFAULT.lanes)]
    pub overflow_lanes: usize,

    /// Deliveries of one tenant within one `--overflow-route-window` at which
    /// fanout writes the tenant's further unordered deliveries straight to its
    /// overflow lane instead of `deliveries` (the dispatcher would promote it
    /// at once, then have to move them); 0 never. Keep it at the dispatcher's
    /// `--overflow-promote-at-once-records` (half its partition buffer).
    #[arg(long, env = "HOOKLINE_OVERFLOW_ROUTE_RECORDS", default_value_t = BurstSettings::DEFAULT.route_records)]
    pub overflow_route_records: usize,

    /// The window `--overflow-route-records` is counted in.
    #[arg(long, env = "HOOKLINE_OVERFLOW_ROUTE_WINDOW", default_value = "200ms",
          value_parser = parse_duration)]
    pub overflow_route_window: Duration,

    /// How long a routed tenant's deliveries per window stay at or below a
    /// twenty-fifth of `--overflow-route-records` before they go to
    /// `deliveries` again.
    #[arg(long, env = "HOOKLINE_OVERFLOW_ROUTE_HOLD", default_value = "30s",
          value_parser = parse_duration)]
    pub overflow_route_hold: Duration,
}

impl FanoutArgs {
    /// The burst router's settings from the `--overflow-*` flags.
    pub fn bursts(&self) -> Result<BurstSettings, String> {
        if self.overflow_lanes > hookline_envelope::OVERFLOW_LANES {
            return Err(format!(
                "--overflow-lanes {} is more than the {} lane topics",
                self.overflow_lanes,
                hookline_envelope::OVERFLOW_LANES
            ));
        }
        let settings = BurstSettings {
            lanes: self.overflow_lanes,
            route_records: self.overflow_route_records,
            window: self.overflow_route_window,
            hold: self.overflow_route_hold,
        };
        settings.validate().map(|()| settings)
    }

    /// The duplicate-admission window, or `None` when `--dedup-window 0` turned it off.
    pub fn dedup(&self) -> Option<Duration> {
        (!self.dedup_window.is_zero()).then_some(self.dedup_window)
    }

    /// The transactional id to use.
    pub fn transactional_id(&self, common: &hookline_runtime::config::CommonArgs) -> String {
        self.transactional_id.clone().unwrap_or_else(|| {
            hookline_runtime::kafka::txn::default_transactional_id(&self.group_id, common)
        })
    }
}
