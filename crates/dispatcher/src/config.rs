//! Flags of the dispatcher, validated once at start into [`Settings`]; a bad value
//! fails with a message naming the flag and its environment variable, and so does
//! a pair of values that cannot work together (see [`Config::settings`]). The
//! flags default to the library defaults (`LaneLimits::DEFAULT`,
//! `hookline_runtime::http::defaults`); the timings the dispatcher gives
//! librdkafka live here too, each with why.

use std::{path::PathBuf, time::Duration};

use clap::Args;
use hookline_core::{
    egress::Cidr, ladder, BreakerError, BreakerSettings, EgressPolicy, Ladder, LaneLimits,
    OverflowSettings, TenantWeights, Tier,
};
use hookline_runtime::{
    config::{parse_duration, CommonArgs},
    http::{defaults as http, read_pem_certs, HttpSettings},
    kafka,
    provision::spec::LadderArgs,
};

use crate::DispatcherError;

/// Configuration of the dispatcher service.
#[derive(Debug, Clone, Args)]
pub struct Config {
    /// Options shared by every service.
    #[command(flatten)]
    pub common: CommonArgs,

    /// Dispatcher options.
    #[command(flatten)]
    pub dispatcher: DispatcherArgs,
}

/// Options of the delivery engine.
#[derive(Debug, Clone, Args)]
pub struct DispatcherArgs {
    /// Consumer group of the dispatcher replicas.
    #[arg(
        long,
        env = "HOOKLINE_DISPATCHER_GROUP",
        default_value = hookline_runtime::acls::DISPATCHER_GROUP
    )]
    pub group_id: String,

    /// Directory of signing secrets: one file per `secret_ref`, one `whsec_...`
    /// per line (a mounted Kubernetes Secret).
    #[arg(
        long,
        env = "HOOKLINE_SECRETS_DIR",
        default_value = "/etc/hookline/secrets"
    )]
    pub secrets_dir: PathBuf,

    /// How often the secrets directory is re-read (e.g. `5s`).
    #[arg(long, env = "HOOKLINE_SECRETS_POLL_INTERVAL", default_value = "5s", value_parser = parse_duration)]
    pub secrets_poll_interval: Duration,

    /// Longest wait for a TCP connection to an endpoint.
    #[arg(long, env = "HOOKLINE_CONNECT_TIMEOUT", default_value = http::CONNECT_TIMEOUT_TEXT, value_parser = parse_duration)]
    pub connect_timeout: Duration,

    /// Longest a whole attempt may take: connect, send, read the capped response.
    #[arg(long, env = "HOOKLINE_REQUEST_TIMEOUT", default_value = http::REQUEST_TIMEOUT_TEXT, value_parser = parse_duration)]
    pub request_timeout: Duration,

    /// Most bytes of a response body read (the rest is discarded).
    #[arg(long, env = "HOOKLINE_MAX_RESPONSE_BYTES", default_value_t = http::MAX_RESPONSE_BYTES)]
    pub max_response_bytes: usize,

    /// Largest payload POSTed; larger deliveries are dead-lettered as `payload_too_large`.
    #[arg(long, env = "HOOKLINE_MAX_PAYLOAD_BYTES", default_value_t = 1024 * 1024)]
    pub max_payload_bytes: usize,

    /// Allow plain `http://` endpoints (default: https only).
    #[arg(long, env = "HOOKLINE_EGRESS_ALLOW_HTTP")]
    pub egress_allow_http: bool,

    /// CIDRs exempt from the egress block list (loopback, private, link-local…),
    /// comma-separated, e.g. `10.20.0.0/16`.
    #[arg(long, env = "HOOKLINE_EGRESS_ALLOW_CIDR", value_delimiter = ',', value_parser = parse_cidr)]
    pub egress_allow_cidr: Vec<Cidr>,

    /// PEM file of CA certificates trusted in addition to the Mozilla roots.
    #[arg(long, env = "HOOKLINE_TLS_EXTRA_CA")]
    pub tls_extra_ca: Option<PathBuf>,

    /// Idle keep-alive connections are closed after this long.
    #[arg(long, env = "HOOKLINE_POOL_IDLE_TIMEOUT", default_value = http::POOL_IDLE_TIMEOUT_TEXT, value_parser = parse_duration)]
    pub pool_idle_timeout: Duration,

    /// Most idle connections kept per endpoint host [default: as many as
    /// --global-in-flight, so none that the next attempt to the host could
    /// reuse is closed; idle ones close after --pool-idle-timeout].
    #[arg(long, env = "HOOKLINE_POOL_MAX_IDLE_PER_HOST")]
    pub pool_max_idle_per_host: Option<usize>,

    /// Most attempts in flight in this replica.
    #[arg(long, env = "HOOKLINE_GLOBAL_IN_FLIGHT", default_value_t = LaneLimits::DEFAULT.global_in_flight)]
    pub global_in_flight: u32,

    /// Most attempts in flight for one tenant.
    #[arg(long, env = "HOOKLINE_TENANT_IN_FLIGHT", default_value_t = LaneLimits::DEFAULT.tenant_in_flight)]
    pub tenant_in_flight: u32,

    /// Percentage of the global slots retries may hold (1-100).
    #[arg(long, env = "HOOKLINE_RETRY_SHARE_PERCENT", default_value_t = LaneLimits::DEFAULT.retry_share_percent)]
    pub retry_share_percent: u8,

    /// Records buffered per partition before it is paused.
    #[arg(
        long,
        env = "HOOKLINE_PARTITION_BUFFER_RECORDS",
        default_value_t = LaneLimits::DEFAULT.partition_records
    )]
    pub partition_buffer_records: usize,

    /// Payload bytes buffered per partition before it is paused.
    #[arg(long, env = "HOOKLINE_PARTITION_BUFFER_BYTES", default_value_t = LaneLimits::DEFAULT.partition_bytes)]
    pub partition_buffer_bytes: usize,

    /// First attempts' buffer: records buffered in all from `deliveries` and
    /// `deliveries.strict`, before every such partition that adds more is paused.
    #[arg(long, env = "HOOKLINE_BUFFER_RECORDS", default_value_t = LaneLimits::DEFAULT.total_records)]
    pub buffer_records: usize,

    /// First attempts' buffer: payload bytes in all.
    #[arg(long, env = "HOOKLINE_BUFFER_BYTES", default_value_t = LaneLimits::DEFAULT.total_bytes)]
    pub buffer_bytes: usize,

    /// Most tenants promoted to an overflow lane at once (each on one
    /// partition of `deliveries`), 0 to 8; 0 turns overflow off. A promoted
    /// tenant's records move to `deliveries.lane-N`, so the partition behind
    /// it keeps flowing whatever its backlog.
    #[arg(long, env = "HOOKLINE_OVERFLOW_LANES", default_value_t = OverflowSettings::DEFAULT.lanes)]
    pub overflow_lanes: usize,

    /// A tenant's records buffered and not started on one partition (all its
    /// subscriptions together) at or above which (for
    /// `--overflow-promote-after`) it is promoted.
    #[arg(long, env = "HOOKLINE_OVERFLOW_PROMOTE_RECORDS", default_value_t = OverflowSettings::DEFAULT.promote_records)]
    pub overflow_promote_records: usize,

    /// How long the backlog must stay at or above the promotion threshold.
    #[arg(long, env = "HOOKLINE_OVERFLOW_PROMOTE_AFTER", default_value = "1s", value_parser = parse_duration)]
    pub overflow_promote_after: Duration,

    /// A tenant's backlog on one partition at or above which it is promoted
    /// at once, without waiting out `--overflow-promote-after`: it already
    /// holds enough of the partition's buffer to stall the tenants behind it.
    /// Looked at as soon as that many of its records arrived since the last
    /// look, not only at the next one (every 200 ms). Default: half of `--partition-buffer-records` (at least
    /// `--overflow-promote-records`); 0 never.
    #[arg(long, env = "HOOKLINE_OVERFLOW_PROMOTE_AT_ONCE_RECORDS")]
    pub overflow_promote_at_once_records: Option<usize>,

    /// A promoted tenant's backlog at or below which (for
    /// `--overflow-demote-after`) it is demoted.
    #[arg(long, env = "HOOKLINE_OVERFLOW_DEMOTE_RECORDS", default_value_t = OverflowSettings::DEFAULT.demote_records)]
    pub overflow_demote_records: usize,

    /// How long the backlog must stay at or below the demotion threshold.
    #[arg(long, env = "HOOKLINE_OVERFLOW_DEMOTE_AFTER", default_value = "30s", value_parser = parse_duration)]
    pub overflow_demote_after: Duration,

    /// Percentage of the global slots that records read back from overflow
    /// lanes may hold together (1-100), however many tenants are promoted:
    /// the rest stays for the partitions they were moved out of.
    #[arg(long, env = "HOOKLINE_OVERFLOW_SHARE_PERCENT", default_value_t = LaneLimits::DEFAULT.overflow_share_percent)]
    pub overflow_share_percent: u8,

    /// Retries' buffer, apart from first attempts': records buffered in all from
    /// the retry tiers, before every tier partition that adds more is paused.
    #[arg(
        long,
        env = "HOOKLINE_RETRY_BUFFER_RECORDS",
        default_value_t = LaneLimits::DEFAULT.retry_total_records
    )]
    pub retry_buffer_records: usize,

    /// Retries' buffer: payload bytes in all.
    #[arg(
        long,
        env = "HOOKLINE_RETRY_BUFFER_BYTES",
        default_value_t = LaneLimits::DEFAULT.retry_total_bytes
    )]
    pub retry_buffer_bytes: usize,

    /// A tenant's weight in the worker-seconds fair share, `TENANT=WEIGHT`
    /// (0.01 to 100; unlisted tenants weigh 1); repeatable.
    #[arg(
        long = "tenant-weight",
        env = "HOOKLINE_TENANT_WEIGHTS",
        value_delimiter = ','
    )]
    pub tenant_weights: Vec<String>,

    /// The retry ladder (`hookline-fanout topics` reads the same flag).
    #[command(flatten)]
    pub ladder: LadderArgs,

    /// Attempts (first one included) after which a failing delivery is dead-lettered.
    #[arg(long, env = "HOOKLINE_MAX_ATTEMPTS", default_value_t = ladder::DEFAULT_MAX_ATTEMPTS)]
    pub max_attempts: u32,

    /// Age of a delivery, since the delivery was created (its `created_at`), past
    /// which no retry is scheduled.
    #[arg(long, env = "HOOKLINE_MAX_AGE", default_value = ladder::DEFAULT_MAX_AGE_TEXT, value_parser = parse_duration)]
    pub max_age: Duration,

    /// Most random delay added to a retry's due time (it only ever delays). It
    /// also bounds how late a retry can be: a tier partition is attempted in
    /// order, so a record can wait behind a head due up to the jitter after it.
    #[arg(long, env = "HOOKLINE_RETRY_JITTER", default_value = ladder::DEFAULT_MAX_JITTER_TEXT, value_parser = parse_duration)]
    pub retry_jitter: Duration,

    /// Longest `Retry-After` honoured: a longer hint waits this long (`0s` ignores
    /// hints). A hint is waited exactly, re-parked through the tiers when it is
    /// longer than the last; `--max-age` still bounds it.
    #[arg(long, env = "HOOKLINE_MAX_RETRY_AFTER", default_value = ladder::DEFAULT_MAX_RETRY_AFTER_TEXT, value_parser = parse_duration)]
    pub max_retry_after: Duration,

    /// A subscription's circuit breaker opens after this many failures in a row
    /// (5xx, timeouts, transport errors; not throttles or 4xx); 0: never by a run.
    /// While open nothing is sent to it: its due deliveries are parked on a tier
    /// without spending an attempt. `--breaker-failures 0 --breaker-failure-ratio 0`
    /// turns the breaker off.
    #[arg(long, env = "HOOKLINE_BREAKER_FAILURES", default_value_t = BreakerSettings::DEFAULT.consecutive_failures)]
    pub breaker_failures: u32,

    /// It also opens when this share of at least `--breaker-min-attempts` attempts
    /// over `--breaker-window` failed; 0: never by a ratio.
    #[arg(long, env = "HOOKLINE_BREAKER_FAILURE_RATIO", default_value_t = BreakerSettings::DEFAULT.failure_ratio)]
    pub breaker_failure_ratio: f64,

    #[arg(long, env = "HOOKLINE_BREAKER_MIN_ATTEMPTS", default_value_t = BreakerSettings::DEFAULT.min_attempts)]
    pub breaker_min_attempts: u32,

    #[arg(long, env = "HOOKLINE_BREAKER_WINDOW", default_value = "1m", value_parser = parse_duration)]
    pub breaker_window: Duration,

    /// How long it stays open before one delivery probes; doubled after each
    /// failed probe, up to `--breaker-open-max`.
    #[arg(long, env = "HOOKLINE_BREAKER_OPEN", default_value = "30s", value_parser = parse_duration)]
    pub breaker_open: Duration,

    #[arg(long, env = "HOOKLINE_BREAKER_OPEN_MAX", default_value = "10m", value_parser = parse_duration)]
    pub breaker_open_max: Duration,

    /// A breaker open this long disables its subscription (`disabled_reason =
    /// breaker_open`; its deliveries are then kept for replay); 0s: never.
    #[arg(long, env = "HOOKLINE_BREAKER_DISABLE_AFTER", default_value = "5d", value_parser = parse_duration)]
    pub breaker_disable_after: Duration,

    /// Longest a strictly ordered subscription's head (`ordering = strict`) may
    /// wait in backoff, from its first attempt: a retry that would be due later
    /// is dead-lettered `head_wait` instead, and the next delivery goes. Every
    /// later delivery of the subscription waits behind the head meanwhile.
    #[arg(long, env = "HOOKLINE_STRICT_HEAD_WAIT", default_value = "1h", value_parser = parse_duration)]
    pub strict_head_wait: Duration,

    /// Most kilobytes librdkafka prefetches per `deliveries` partition
    /// (`queued.max.messages.kbytes`): memory held before the engine asks.
    #[arg(long, env = "HOOKLINE_READY_PREFETCH_KBYTES", default_value_t = 16_384)]
    pub ready_prefetch_kbytes: u32,

    /// Most kilobytes prefetched per retry-tier partition; a tier is mostly
    /// paused until its head is due, so it needs less.
    #[arg(long, env = "HOOKLINE_TIER_PREFETCH_KBYTES", default_value_t = 4_096)]
    pub tier_prefetch_kbytes: u32,

    /// Longest the broker holds a fetch waiting for data (`fetch.wait.max.ms`).
    /// A resumed tier partition joins the next fetch, which waits for the long
    /// poll of the others to return: this bounds how late a due retry is
    /// fetched. It also bounds how late a delivery is fetched once fanout's
    /// transaction commits: a `read_committed` long poll was seen answered
    /// only when it expired, not at the commit (the bench's `readable` hop:
    /// ~100 ms after fanout's send at 100ms). Each idle consumer asks the
    /// broker once per this interval (librdkafka's default is 500ms).
    #[arg(long, env = "HOOKLINE_FETCH_WAIT_MAX", default_value = "10ms", value_parser = parse_duration)]
    pub fetch_wait_max: Duration,

    /// Transactional id of this replica's producer (default
    /// `<group>-` and the `--group-instance-id`, else
    /// `$HOSTNAME-<pid>`). Unique between live replicas (two under one id fence
    /// each other) and stable across restarts of one: a restart then fences its
    /// predecessor and aborts its open transaction at once.
    #[arg(long, env = "HOOKLINE_DISPATCHER_TRANSACTIONAL_ID")]
    pub transactional_id: Option<String>,

    /// Longest a finished delivery's offset waits before it is committed (in a
    /// transaction). Retry records, dead letters and quarantined records do not
    /// wait for it: they commit as soon as the previous transaction ends. It
    /// bounds the re-attempts after a crash.
    #[arg(long, env = "HOOKLINE_COMMIT_INTERVAL", default_value = "100ms", value_parser = parse_duration)]
    pub commit_interval: Duration,

    /// Write the attempt log: one `AttemptRecord` per attempt, parking and
    /// dead-lettering on `deliveries.attempts`, in the transactions that commit
    /// the follow-ups and offsets. `--attempt-log=false` turns it off.
    #[arg(
        long,
        env = "HOOKLINE_ATTEMPT_LOG",
        default_value_t = true,
        action = clap::ArgAction::Set,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true"
    )]
    pub attempt_log: bool,

    /// Timeout of one transaction operation (commit, offsets, abort).
    #[arg(long, env = "HOOKLINE_DISPATCHER_TXN_TIMEOUT", default_value = "30s", value_parser = parse_duration)]
    pub txn_timeout: Duration,
}

impl Config {
    /// The transactional id to use.
    pub fn transactional_id(&self) -> String {
        self.dispatcher.transactional_id.clone().unwrap_or_else(|| {
            hookline_runtime::kafka::txn::default_transactional_id(
                &self.dispatcher.group_id,
                &self.common,
            )
        })
    }
}

/// Time a drained or revoked attempt gets after the request timeout to make its
/// follow-up durable, before it is abandoned (its record then stays unfinished).
/// The engine's drain and revoke wait `request_timeout + DRAIN_SLACK`.
pub(crate) const DRAIN_SLACK: Duration = Duration::from_secs(5);

/// Time the rebalance callback waits, after the engine's drain of a revoke, for
/// the engine to store and commit; past it the partitions are handed over
/// uncommitted (the next owner re-attempts from the last commit).
pub(crate) const REVOKE_COMMIT_SLACK: Duration = Duration::from_secs(10);

/// librdkafka's `queued.max.messages.kbytes` range.
const PREFETCH_KBYTES: std::ops::RangeInclusive<u32> = 1..=2_097_151;

/// Longest `--commit-interval`: the offsets of finished deliveries wait this
/// long at most, and a crash re-attempts what they cover.
const MAX_COMMIT_INTERVAL: Duration = Duration::from_secs(10);

/// librdkafka's `fetch.wait.max.ms` range.
const MAX_FETCH_WAIT: Duration = Duration::from_secs(300);

/// librdkafka settings of the dispatcher that are not flags: each is part of
/// the delivery guarantee or has no reason to differ between deployments.
pub(crate) mod librdkafka {
    use std::time::Duration;

    /// `linger.ms` of the transactional producer: a transaction's records are
    /// flushed by its commit, so lingering only delays that.
    pub(crate) const PRODUCER_LINGER: Duration = Duration::from_millis(1);
    /// `transaction.timeout.ms`: how long a crashed replica's open transaction
    /// (under a transactional id no successor reuses) holds back the
    /// `read_committed` readers of the tiers and the DLQ. Transactions take
    /// milliseconds; a restarted replica with the same id aborts it at once.
    pub(crate) const TRANSACTION_TIMEOUT: Duration = Duration::from_secs(10);

    /// `Duration` as librdkafka's milliseconds.
    pub(crate) fn ms(d: Duration) -> String {
        d.as_millis().to_string()
    }
}

/// The librdkafka values an operator can tune, validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct KafkaTuning {
    pub ready_prefetch_kbytes: u32,
    pub tier_prefetch_kbytes: u32,
    pub fetch_wait_max: Duration,
}

fn parse_cidr(s: &str) -> Result<Cidr, String> {
    s.parse::<Cidr>().map_err(|e| e.to_string())
}

/// Validated settings the engine runs with.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub group_id: String,
    pub secrets_dir: PathBuf,
    pub secrets_poll_interval: Duration,
    pub http: HttpSettings,
    pub max_payload_bytes: usize,
    pub lanes: LaneLimits,
    pub shutdown_grace: Duration,
    pub ladder: Ladder,
    pub breaker: BreakerSettings,
    pub overflow: OverflowSettings,
    pub strict_head_wait: Duration,
    pub kafka: KafkaTuning,
    pub commits: CommitSettings,
    pub attempt_log: bool,
}

/// How follow-ups and offsets are committed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CommitSettings {
    pub transactional_id: String,
    pub interval: Duration,
    pub call_timeout: Duration,
}

impl Settings {
    /// How long the rebalance callback waits for the engine to confirm a revoke.
    pub(crate) fn revoke_wait(&self) -> Duration {
        revoke_wait(self.http.request_timeout)
    }
}

fn revoke_wait(request_timeout: Duration) -> Duration {
    request_timeout + DRAIN_SLACK + REVOKE_COMMIT_SLACK
}

impl Config {
    /// Validates the flags and the relations between them:
    /// - `--connect-timeout` ≤ `--request-timeout` ≤ `--shutdown-grace`, so an
    ///   attempt can connect and in-flight attempts can finish while draining;
    /// - the revoke wait (request timeout + [`DRAIN_SLACK`] +
    ///   [`REVOKE_COMMIT_SLACK`]) shorter than `max.poll.interval.ms` (`-X`): the
    ///   wait runs inside the rebalance callback, where the consumer cannot poll,
    ///   and a consumer that does not poll for that long is thrown out of its group.
    ///   The session timeout is no bound on it: librdkafka heartbeats from its own
    ///   thread while the callback waits;
    /// - the group flags ([`kafka::check_group_flags`]: session timeout range,
    ///   `max.poll.interval.ms` ≥ session timeout, `-X` refusals), checked here so
    ///   they fail before anything starts.
    pub(crate) fn settings(&self) -> Result<Settings, DispatcherError> {
        let d = &self.dispatcher;
        let bad = |flag: &'static str, why: String| DispatcherError::Config { flag, why };
        kafka::check_group_flags(&self.common)?;
        if d.connect_timeout.is_zero() {
            return Err(bad(
                "--connect-timeout / HOOKLINE_CONNECT_TIMEOUT",
                "must be greater than zero".into(),
            ));
        }
        if d.request_timeout < d.connect_timeout {
            return Err(bad(
                "--request-timeout / HOOKLINE_REQUEST_TIMEOUT",
                format!(
                    "{:?} is shorter than --connect-timeout {:?}",
                    d.request_timeout, d.connect_timeout
                ),
            ));
        }
        if self.common.shutdown_grace < d.request_timeout {
            return Err(bad(
                "--shutdown-grace / HOOKLINE_SHUTDOWN_GRACE",
                format!(
                    "{:?} is shorter than --request-timeout {:?}; attempts in flight could not finish while draining",
                    self.common.shutdown_grace, d.request_timeout
                ),
            ));
        }
        let poll = kafka::max_poll_interval(&self.common)?;
        let revoke = revoke_wait(d.request_timeout);
        if revoke >= poll {
            return Err(bad(
                "--request-timeout / HOOKLINE_REQUEST_TIMEOUT",
                format!(
                    "{:?} plus {:?} of drain and commit slack is {revoke:?}, not shorter than \
                     -X max.poll.interval.ms {poll:?}: a revoke waits that long inside the \
                     rebalance callback, where the consumer cannot poll, and would be thrown \
                     out of its group; lower --request-timeout or raise -X max.poll.interval.ms \
                     above {revoke:?}",
                    d.request_timeout,
                    DRAIN_SLACK + REVOKE_COMMIT_SLACK,
                ),
            ));
        }
        for (flag, kbytes) in [
            (
                "--ready-prefetch-kbytes / HOOKLINE_READY_PREFETCH_KBYTES",
                d.ready_prefetch_kbytes,
            ),
            (
                "--tier-prefetch-kbytes / HOOKLINE_TIER_PREFETCH_KBYTES",
                d.tier_prefetch_kbytes,
            ),
        ] {
            if !PREFETCH_KBYTES.contains(&kbytes) {
                return Err(bad(
                    flag,
                    format!("{kbytes} is outside librdkafka's {PREFETCH_KBYTES:?}"),
                ));
            }
        }
        if d.fetch_wait_max > MAX_FETCH_WAIT {
            return Err(bad(
                "--fetch-wait-max / HOOKLINE_FETCH_WAIT_MAX",
                format!("{:?} is longer than librdkafka's 5m", d.fetch_wait_max),
            ));
        }
        if d.commit_interval.is_zero() || d.commit_interval > MAX_COMMIT_INTERVAL {
            return Err(bad(
                "--commit-interval / HOOKLINE_COMMIT_INTERVAL",
                format!(
                    "{:?} is outside 1ms..={MAX_COMMIT_INTERVAL:?}",
                    d.commit_interval
                ),
            ));
        }
        if d.txn_timeout.is_zero() {
            return Err(bad(
                "--txn-timeout / HOOKLINE_DISPATCHER_TXN_TIMEOUT",
                "must be greater than zero".into(),
            ));
        }
        let transactional_id = self.transactional_id();
        if transactional_id.is_empty() {
            return Err(bad(
                "--transactional-id / HOOKLINE_DISPATCHER_TRANSACTIONAL_ID",
                "must not be empty".into(),
            ));
        }
        if d.secrets_poll_interval.is_zero() {
            return Err(bad(
                "--secrets-poll-interval / HOOKLINE_SECRETS_POLL_INTERVAL",
                "must be greater than zero".into(),
            ));
        }
        if d.max_payload_bytes == 0 || d.max_response_bytes == 0 {
            return Err(bad(
                "--max-payload-bytes / --max-response-bytes",
                "must be at least 1".into(),
            ));
        }
        let lanes = LaneLimits {
            global_in_flight: d.global_in_flight,
            tenant_in_flight: d.tenant_in_flight,
            retry_share_percent: d.retry_share_percent,
            overflow_share_percent: d.overflow_share_percent,
            partition_records: d.partition_buffer_records,
            partition_bytes: d.partition_buffer_bytes,
            total_records: d.buffer_records,
            total_bytes: d.buffer_bytes,
            retry_total_records: d.retry_buffer_records,
            retry_total_bytes: d.retry_buffer_bytes,
            tenant_weights: TenantWeights::parse(d.tenant_weights.iter().map(String::as_str))
                .map_err(|e| bad("--tenant-weight / HOOKLINE_TENANT_WEIGHTS", e.to_string()))?,
        };
        lanes.validate().map_err(|e| {
            bad(
                "--global-in-flight, --tenant-in-flight, --retry-share-percent, --overflow-share-percent, --*buffer-*",
                e.to_string(),
            )
        })?;
        let ladder = ladder(d)?;
        let overflow = overflow(d)?;
        let extra_roots = match &d.tls_extra_ca {
            None => Vec::new(),
            Some(path) => read_pem_certs(path)
                .map_err(|e| bad("--tls-extra-ca / HOOKLINE_TLS_EXTRA_CA", e.to_string()))?,
        };
        Ok(Settings {
            group_id: d.group_id.clone(),
            secrets_dir: d.secrets_dir.clone(),
            secrets_poll_interval: d.secrets_poll_interval,
            http: HttpSettings {
                connect_timeout: d.connect_timeout,
                request_timeout: d.request_timeout,
                max_response_bytes: d.max_response_bytes,
                allow_http: d.egress_allow_http,
                egress: EgressPolicy::new(d.egress_allow_cidr.clone()),
                pool_idle_timeout: d.pool_idle_timeout,
                pool_max_idle_per_host: d
                    .pool_max_idle_per_host
                    .unwrap_or(d.global_in_flight as usize),
                extra_roots,
            },
            max_payload_bytes: d.max_payload_bytes,
            lanes,
            shutdown_grace: self.common.shutdown_grace,
            ladder,
            breaker: breaker(d)?,
            overflow,
            strict_head_wait: d.strict_head_wait,
            kafka: KafkaTuning {
                ready_prefetch_kbytes: d.ready_prefetch_kbytes,
                tier_prefetch_kbytes: d.tier_prefetch_kbytes,
                fetch_wait_max: d.fetch_wait_max,
            },
            commits: CommitSettings {
                transactional_id,
                interval: d.commit_interval,
                call_timeout: d.txn_timeout,
            },
            attempt_log: d.attempt_log,
        })
    }
}

/// The overflow lanes from the `--overflow-*` flags; an error names them.
fn overflow(d: &DispatcherArgs) -> Result<OverflowSettings, DispatcherError> {
    let bad = |flag: &'static str, why: String| DispatcherError::Config { flag, why };
    if d.overflow_lanes > hookline_envelope::OVERFLOW_LANES {
        return Err(bad(
            "--overflow-lanes / HOOKLINE_OVERFLOW_LANES",
            format!(
                "{} is more than the {} lane topics (deliveries.lane-0 to -{})",
                d.overflow_lanes,
                hookline_envelope::OVERFLOW_LANES,
                hookline_envelope::OVERFLOW_LANES - 1
            ),
        ));
    }
    let s = OverflowSettings {
        lanes: d.overflow_lanes,
        promote_records: d.overflow_promote_records,
        promote_after: d.overflow_promote_after,
        promote_at_once_records: d
            .overflow_promote_at_once_records
            .unwrap_or((d.partition_buffer_records / 2).max(d.overflow_promote_records)),
        demote_records: d.overflow_demote_records,
        demote_after: d.overflow_demote_after,
    };
    s.validate().map_err(|why| {
        bad(
            "--overflow-promote-records / --overflow-demote-records / --overflow-promote-at-once-records",
            why,
        )
    })?;
    // A threshold at or above the partition's buffer can never be reached.
    let reachable = |flag: &'static str, records: usize, hint: &str| {
        if s.lanes > 0 && records >= d.partition_buffer_records {
            return Err(bad(
                flag,
                format!(
                    "{records} can never be reached: a partition holds at most --partition-buffer-records ({}){hint}",
                    d.partition_buffer_records
                ),
            ));
        }
        Ok(())
    };
    reachable(
        "--overflow-promote-records / HOOKLINE_OVERFLOW_PROMOTE_RECORDS",
        s.promote_records,
        "",
    )?;
    reachable(
        "--overflow-promote-at-once-records / HOOKLINE_OVERFLOW_PROMOTE_AT_ONCE_RECORDS",
        s.promote_at_once_records,
        "; 0 turns it off",
    )?;
    Ok(s)
}

/// The circuit breaker from the `--breaker-*` flags; an error names them.
fn breaker(d: &DispatcherArgs) -> Result<BreakerSettings, DispatcherError> {
    let s = BreakerSettings {
        consecutive_failures: d.breaker_failures,
        failure_ratio: d.breaker_failure_ratio,
        min_attempts: d.breaker_min_attempts,
        window: d.breaker_window,
        open_for: d.breaker_open,
        open_max: d.breaker_open_max,
        disable_after: (!d.breaker_disable_after.is_zero()).then_some(d.breaker_disable_after),
    };
    s.validate().map_err(|e| DispatcherError::Config {
        flag: match e {
            BreakerError::Ratio(_) => "--breaker-failure-ratio",
            BreakerError::Window => "--breaker-window / --breaker-min-attempts",
            BreakerError::OpenFor { .. } => "--breaker-open / --breaker-open-max",
        },
        why: e.to_string(),
    })?;
    Ok(s)
}

/// The retry ladder from `--retry-tiers`, `--max-attempts`, `--max-age`,
/// `--retry-jitter` and `--max-retry-after`; an error names the flag to fix.
fn ladder(d: &DispatcherArgs) -> Result<Ladder, DispatcherError> {
    use hookline_core::{LadderError as E, LadderSetting};
    let tiers: Vec<Tier> = if d.ladder.retry_tiers.is_empty() {
        Ladder::default().tiers().to_vec()
    } else {
        d.ladder
            .retry_tiers
            .iter()
            .map(|(name, delay)| Tier::new(name.clone(), *delay))
            .collect()
    };
    let ladder = Ladder::new(tiers, d.max_attempts, d.max_age, d.retry_jitter)
        .and_then(|l| l.with_max_retry_after(d.max_retry_after));
    ladder.map_err(|e| {
        let flag = match &e {
            E::ZeroMaxAttempts => "--max-attempts / HOOKLINE_MAX_ATTEMPTS",
            E::ZeroMaxAge
            | E::TooLong {
                what: LadderSetting::MaxAge,
                ..
            } => "--max-age / HOOKLINE_MAX_AGE",
            E::TooLong {
                what: LadderSetting::MaxJitter,
                ..
            } => "--retry-jitter / HOOKLINE_RETRY_JITTER",
            E::TooLong {
                what: LadderSetting::MaxRetryAfter,
                ..
            } => "--max-retry-after / HOOKLINE_MAX_RETRY_AFTER",
            _ => "--retry-tiers / HOOKLINE_RETRY_TIERS",
        };
        DispatcherError::Config {
            flag,
            why: e.to_string(),
        }
    })
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        config: Config,
    }

    fn parse(args: &[&str]) -> Result<Config, clap::Error> {
        Cli::try_parse_from(std::iter::once("hookline-dispatcher").chain(args.iter().copied()))
            .map(|c| c.config)
    }

    #[test]
    fn defaults_validate() {
        let s = parse(&[]).unwrap().settings().unwrap();
        assert!(!s.http.allow_http);
        assert!(s.http.egress.allowed_cidrs().is_empty());
        assert_eq!(s.http.request_timeout, Duration::from_secs(15));
        assert_eq!(s.ladder, Ladder::default());
    }

    #[test]
    fn the_flag_defaults_are_the_library_defaults() {
        let s = parse(&[]).unwrap().settings().unwrap();
        assert_eq!(s.lanes, LaneLimits::default());
        let h = HttpSettings::default();
        assert_eq!(s.http.connect_timeout, h.connect_timeout);
        assert_eq!(s.http.request_timeout, h.request_timeout);
        assert_eq!(s.http.max_response_bytes, h.max_response_bytes);
        assert_eq!(s.http.pool_idle_timeout, h.pool_idle_timeout);
        assert_eq!(s.http.pool_max_idle_per_host, h.pool_max_idle_per_host);
        assert_eq!(
            s.revoke_wait(),
            Duration::from_secs(30),
            "as before: request + 15s"
        );
    }

    #[test]
    fn idle_connections_kept_follow_the_global_in_flight_unless_set() {
        let idle = |args: &[&str]| {
            parse(args)
                .unwrap()
                .settings()
                .unwrap()
                .http
                .pool_max_idle_per_host
        };
        assert_eq!(idle(&[]), LaneLimits::DEFAULT.global_in_flight as usize);
        assert_eq!(idle(&["--global-in-flight", "1000"]), 1000);
        assert_eq!(
            idle(&[
                "--global-in-flight",
                "1000",
                "--pool-max-idle-per-host",
                "8"
            ]),
            8
        );
    }

    #[test]
    fn tenant_weights_and_retry_budgets_are_read_and_checked_at_start() {
        let s = parse(&[
            "--tenant-weight",
            "acme=3",
            "--tenant-weight",
            "tiny=0.01",
            "--retry-buffer-records",
            "7",
            "--retry-buffer-bytes",
            "9",
        ])
        .unwrap()
        .settings()
        .unwrap();
        assert_eq!(s.lanes.tenant_weights.weight("acme"), 3.0);
        assert_eq!(s.lanes.tenant_weights.weight("tiny"), 0.01);
        assert_eq!(s.lanes.tenant_weights.weight("other"), 1.0);
        assert_eq!(
            (s.lanes.retry_total_records, s.lanes.retry_total_bytes),
            (7, 9)
        );
        for bad in [
            &["--tenant-weight", "acme"][..],
            &["--tenant-weight", "acme=0"],
            &["--tenant-weight", "acme=1000"],
            &["--tenant-weight", "a=1", "--tenant-weight", "a=2"],
        ] {
            let error = parse(bad).unwrap().settings().unwrap_err().to_string();
            assert!(error.contains("--tenant-weight"), "{bad:?}: {error}");
        }
        let error = parse(&["--retry-buffer-records", "0"])
            .unwrap()
            .settings()
            .unwrap_err()
            .to_string();
        assert!(error.contains("retry_total_records"), "{error}");
    }

    /// Each relation checked at start, with a value pair it accepts and one it
    /// refuses; the refusal names every flag involved.
    #[test]
    fn relations_between_values_are_checked_at_start() {
        let cases: &[(&[&str], &[&str])] = &[
            (&["--request-timeout", "5s", "--connect-timeout", "5s"], &[]),
            (
                &["--request-timeout", "4s", "--connect-timeout", "5s"],
                &["--request-timeout", "--connect-timeout"],
            ),
            (
                &["--request-timeout", "30s", "--shutdown-grace", "30s"],
                &[],
            ),
            (
                &["--request-timeout", "31s", "--shutdown-grace", "30s"],
                &["--shutdown-grace", "--request-timeout"],
            ),
            // request 60s + 15s of slack = 75s against max.poll.interval.ms.
            (
                &[
                    "--request-timeout",
                    "60s",
                    "--shutdown-grace",
                    "60s",
                    "-X",
                    "max.poll.interval.ms=75001",
                ],
                &[],
            ),
            (
                &[
                    "--request-timeout",
                    "60s",
                    "--shutdown-grace",
                    "60s",
                    "-X",
                    "max.poll.interval.ms=75000",
                ],
                &["--request-timeout", "-X max.poll.interval.ms"],
            ),
            (
                &["--request-timeout", "5m", "--shutdown-grace", "5m"],
                &["--request-timeout", "-X max.poll.interval.ms"],
            ),
            (&["-X", "max.poll.interval.ms=31000"], &[]),
            (
                &[
                    "--group-session-timeout",
                    "40s",
                    "-X",
                    "max.poll.interval.ms=31000",
                ],
                &["-X max.poll.interval.ms", "--group-session-timeout"],
            ),
            (&["--ready-prefetch-kbytes", "1"], &[]),
            (
                &["--ready-prefetch-kbytes", "0"],
                &["--ready-prefetch-kbytes"],
            ),
            (
                &["--tier-prefetch-kbytes", "3000000"],
                &["--tier-prefetch-kbytes"],
            ),
            (&["--fetch-wait-max", "5m"], &[]),
            (&["--fetch-wait-max", "301s"], &["--fetch-wait-max"]),
        ];
        for (args, flags) in cases {
            let got = parse(args).unwrap().settings();
            match (flags.is_empty(), got) {
                (true, Ok(_)) => {}
                (true, Err(e)) => panic!("{args:?} refused: {e}"),
                (false, Ok(_)) => panic!("{args:?} accepted"),
                (false, Err(e)) => {
                    let e = e.to_string();
                    for flag in *flags {
                        assert!(e.contains(flag), "{args:?}: {e} does not name {flag}");
                    }
                }
            }
        }
    }

    #[test]
    fn the_ladder_comes_from_its_flags() {
        let c = parse(&[
            "--retry-tiers",
            "fast=1s,slow=3s",
            "--max-attempts",
            "4",
            "--max-age",
            "1m",
            "--retry-jitter",
            "0s",
        ])
        .unwrap();
        let l = c.settings().unwrap().ladder;
        let tiers: Vec<(&str, u64)> = l
            .tiers()
            .iter()
            .map(|t| (t.name.as_str(), t.delay.as_secs()))
            .collect();
        assert_eq!(tiers, [("fast", 1), ("slow", 3)]);
        assert_eq!(l.max_attempts(), 4);
        assert_eq!(l.max_age(), Duration::from_secs(60));
        assert_eq!(l.max_jitter(), Duration::ZERO);
        assert_eq!(l.max_retry_after(), hookline_core::DEFAULT_MAX_RETRY_AFTER);
        assert_eq!(c.settings().unwrap().breaker, BreakerSettings::DEFAULT);
        let off = parse(&["--breaker-failures", "0", "--breaker-failure-ratio", "0"]).unwrap();
        assert!(!off.settings().unwrap().breaker.enabled());
        let never = parse(&["--breaker-disable-after", "0s"]).unwrap();
        assert_eq!(never.settings().unwrap().breaker.disable_after, None);
        for (flags, named) in [
            (
                ["--breaker-failure-ratio", "1.5"],
                "--breaker-failure-ratio",
            ),
            (["--breaker-open", "20m"], "--breaker-open"),
            (["--breaker-window", "0s"], "--breaker-window"),
        ] {
            let err = parse(&flags).unwrap().settings().unwrap_err().to_string();
            assert!(err.contains(named), "{flags:?}: {err}");
        }
        let err = parse(&["--retry-tiers", "fast"]).unwrap_err().to_string();
        assert!(err.contains("--retry-tiers"), "{err}");
        let c = parse(&["--max-retry-after", "1h"]).unwrap();
        let l = c.settings().unwrap().ladder;
        assert_eq!(l.max_retry_after(), Duration::from_secs(3600));
        let c = parse(&["--max-retry-after", "400d"]).unwrap();
        let err = c.settings().unwrap_err().to_string();
        assert!(err.contains("--max-retry-after"), "{err}");
    }

    #[test]
    fn allow_list_parses_and_bad_cidrs_name_the_flag() {
        let c = parse(&["--egress-allow-cidr", "127.0.0.0/8,fd00::/8"]).unwrap();
        assert_eq!(c.dispatcher.egress_allow_cidr.len(), 2);
        let err = parse(&["--egress-allow-cidr", "127.0.0.1/8"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("--egress-allow-cidr"), "{err}");
        assert!(err.contains("127.0.0.0/8"), "suggests the network: {err}");
    }

    #[test]
    fn the_transactional_id_is_the_flag_else_group_and_replica() {
        let given = parse(&["--transactional-id", "d-7"]).unwrap();
        assert_eq!(given.settings().unwrap().commits.transactional_id, "d-7");
        let static_member = parse(&["--group-instance-id", "pod-3"]).unwrap();
        assert_eq!(
            static_member.transactional_id(),
            "hookline-dispatcher-pod-3"
        );
        let default = parse(&[]).unwrap().transactional_id();
        let pid = std::process::id().to_string();
        assert!(
            default.starts_with("hookline-dispatcher-") && default.ends_with(&pid),
            "{default}"
        );
    }

    #[test]
    fn promotion_at_once_defaults_to_half_the_partition_buffer() {
        let at_once = |args: &[&str]| {
            parse(args)
                .unwrap()
                .settings()
                .unwrap()
                .overflow
                .promote_at_once_records
        };
        assert_eq!(at_once(&[]), 2_500);
        assert_eq!(at_once(&["--partition-buffer-records", "1200"]), 1_000);
        assert_eq!(at_once(&["--overflow-promote-at-once-records", "0"]), 0);
        assert_eq!(
            at_once(&["--overflow-promote-at-once-records", "4000"]),
            4_000
        );
    }

    #[test]
    fn inconsistent_values_name_the_flag() {
        let cases: &[(&[&str], &str)] = &[
            (
                &["--request-timeout", "1s", "--connect-timeout", "2s"],
                "--request-timeout",
            ),
            (
                &["--request-timeout", "60s", "--shutdown-grace", "30s"],
                "--shutdown-grace",
            ),
            (&["--global-in-flight", "0"], "--global-in-flight"),
            (&["--retry-share-percent", "0"], "--retry-share-percent"),
            (
                &["--overflow-share-percent", "101"],
                "--overflow-share-percent",
            ),
            (&["--tls-extra-ca", "/nonexistent/ca.pem"], "--tls-extra-ca"),
            (&["--max-attempts", "0"], "--max-attempts"),
            (&["--max-age", "0s"], "--max-age"),
            (&["--retry-jitter", "400d"], "--retry-jitter"),
            (&["--retry-tiers", "a=10s,b=5s"], "--retry-tiers"),
            (&["--retry-tiers", "a=10s,a=1m"], "--retry-tiers"),
            (&["--retry-tiers", "a=0s"], "--retry-tiers"),
            (&["--retry-tiers", "a/b=1s"], "--retry-tiers"),
            (&["--commit-interval", "0s"], "--commit-interval"),
            (&["--commit-interval", "11s"], "--commit-interval"),
            (&["--txn-timeout", "0s"], "--txn-timeout"),
            (&["--transactional-id", ""], "--transactional-id"),
            (
                &["--overflow-promote-at-once-records", "999"],
                "--overflow-promote-at-once-records",
            ),
            (
                &["--overflow-promote-at-once-records", "5000"],
                "--overflow-promote-at-once-records",
            ),
        ];
        for (args, flag) in cases {
            let err = parse(args).unwrap().settings().unwrap_err().to_string();
            assert!(err.contains(flag), "{args:?}: {err}");
        }
    }
}
