//! Flags of the dispatcher, validated once at start into [`Settings`]; a bad value
//! fails with a message naming the flag and its environment variable.

use std::{path::PathBuf, time::Duration};

use clap::Args;
use hookline_core::{egress::Cidr, EgressPolicy, Ladder, LaneLimits, Tier};
use hookline_runtime::{
    config::{parse_duration, CommonArgs},
    http::{read_pem_certs, HttpSettings},
    provision::spec::parse_tier,
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
        default_value = "hookline-dispatcher"
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
    #[arg(long, env = "HOOKLINE_CONNECT_TIMEOUT", default_value = "5s", value_parser = parse_duration)]
    pub connect_timeout: Duration,

    /// Longest a whole attempt may take: connect, send, read the capped response.
    #[arg(long, env = "HOOKLINE_REQUEST_TIMEOUT", default_value = "15s", value_parser = parse_duration)]
    pub request_timeout: Duration,

    /// Most bytes of a response body read (the rest is discarded).
    #[arg(long, env = "HOOKLINE_MAX_RESPONSE_BYTES", default_value_t = 4096)]
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
    #[arg(long, env = "HOOKLINE_POOL_IDLE_TIMEOUT", default_value = "90s", value_parser = parse_duration)]
    pub pool_idle_timeout: Duration,

    /// Most idle connections kept per endpoint host.
    #[arg(long, env = "HOOKLINE_POOL_MAX_IDLE_PER_HOST", default_value_t = 32)]
    pub pool_max_idle_per_host: usize,

    /// Most attempts in flight in this replica.
    #[arg(long, env = "HOOKLINE_GLOBAL_IN_FLIGHT", default_value_t = 256)]
    pub global_in_flight: u32,

    /// Most attempts in flight for one tenant.
    #[arg(long, env = "HOOKLINE_TENANT_IN_FLIGHT", default_value_t = 32)]
    pub tenant_in_flight: u32,

    /// Percentage of the global slots retries may hold (1-100).
    #[arg(long, env = "HOOKLINE_RETRY_SHARE_PERCENT", default_value_t = 50)]
    pub retry_share_percent: u8,

    /// Records buffered per partition before it is paused.
    #[arg(
        long,
        env = "HOOKLINE_PARTITION_BUFFER_RECORDS",
        default_value_t = 5_000
    )]
    pub partition_buffer_records: usize,

    /// Payload bytes buffered per partition before it is paused.
    #[arg(long, env = "HOOKLINE_PARTITION_BUFFER_BYTES", default_value_t = 32 << 20)]
    pub partition_buffer_bytes: usize,

    /// Records buffered in all, before every partition that adds more is paused.
    #[arg(long, env = "HOOKLINE_BUFFER_RECORDS", default_value_t = 50_000)]
    pub buffer_records: usize,

    /// Payload bytes buffered in all.
    #[arg(long, env = "HOOKLINE_BUFFER_BYTES", default_value_t = 256 << 20)]
    pub buffer_bytes: usize,

    /// The retry ladder as NAME=DELAY, in order, comma-separated; each tier is the
    /// topic `deliveries.NAME` (default: retry-10s=10s,retry-1m=1m,retry-15m=15m,
    /// retry-2h=2h). Must match the tiers the topics were provisioned with.
    #[arg(long, env = "HOOKLINE_RETRY_TIERS", value_delimiter = ',',
          value_parser = parse_tier, value_name = "NAME=DELAY")]
    pub retry_tiers: Vec<(String, Duration)>,

    /// Attempts (first one included) after which a failing delivery is dead-lettered.
    #[arg(long, env = "HOOKLINE_MAX_ATTEMPTS", default_value_t = 15)]
    pub max_attempts: u32,

    /// Age (since the first attempt) past which no retry is scheduled.
    #[arg(long, env = "HOOKLINE_MAX_AGE", default_value = "24h", value_parser = parse_duration)]
    pub max_age: Duration,

    /// Most random delay added to a retry's due time (it only ever delays). It
    /// also bounds how late a retry can be: a tier partition is attempted in
    /// order, so a record can wait behind a head due up to the jitter after it.
    #[arg(long, env = "HOOKLINE_RETRY_JITTER", default_value = "500ms", value_parser = parse_duration)]
    pub retry_jitter: Duration,
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
}

impl Config {
    pub(crate) fn settings(&self) -> Result<Settings, DispatcherError> {
        let d = &self.dispatcher;
        let bad = |flag: &'static str, why: String| DispatcherError::Config { flag, why };
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
            partition_records: d.partition_buffer_records,
            partition_bytes: d.partition_buffer_bytes,
            total_records: d.buffer_records,
            total_bytes: d.buffer_bytes,
        };
        lanes.validate().map_err(|e| {
            bad(
                "--global-in-flight, --tenant-in-flight, --retry-share-percent, --*buffer-*",
                e.to_string(),
            )
        })?;
        let ladder = ladder(d)?;
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
                pool_max_idle_per_host: d.pool_max_idle_per_host,
                extra_roots,
            },
            max_payload_bytes: d.max_payload_bytes,
            lanes,
            shutdown_grace: self.common.shutdown_grace,
            ladder,
        })
    }
}

/// The retry ladder from `--retry-tiers`, `--max-attempts`, `--max-age` and
/// `--retry-jitter`; an error names the flag to fix.
fn ladder(d: &DispatcherArgs) -> Result<Ladder, DispatcherError> {
    use hookline_core::{LadderError as E, LadderSetting};
    let tiers: Vec<Tier> = if d.retry_tiers.is_empty() {
        Ladder::default().tiers().to_vec()
    } else {
        d.retry_tiers
            .iter()
            .map(|(name, delay)| Tier::new(name.clone(), *delay))
            .collect()
    };
    Ladder::new(tiers, d.max_attempts, d.max_age, d.retry_jitter).map_err(|e| {
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
        let err = parse(&["--retry-tiers", "fast"]).unwrap_err().to_string();
        assert!(err.contains("--retry-tiers"), "{err}");
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
            (&["--tls-extra-ca", "/nonexistent/ca.pem"], "--tls-extra-ca"),
            (&["--max-attempts", "0"], "--max-attempts"),
            (&["--max-age", "0s"], "--max-age"),
            (&["--retry-jitter", "400d"], "--retry-jitter"),
            (&["--retry-tiers", "a=10s,b=5s"], "--retry-tiers"),
            (&["--retry-tiers", "a=10s,a=1m"], "--retry-tiers"),
            (&["--retry-tiers", "a=0s"], "--retry-tiers"),
            (&["--retry-tiers", "a/b=1s"], "--retry-tiers"),
        ];
        for (args, flag) in cases {
            let err = parse(args).unwrap().settings().unwrap_err().to_string();
            assert!(err.contains(flag), "{args:?}: {err}");
        }
    }
}
