//! Flags and `HOOKLINE_*` environment variables shared by every service,
//! validated once at start so a bad value fails fast with the flag's name.

use std::{net::SocketAddr, time::Duration};

use clap::{Args, ValueEnum};

use crate::{
    passthrough::{self, ClientKind},
    RuntimeError,
};

/// The `--brokers` default: the broker `make kafka-up` starts.
pub const DEFAULT_BROKERS: &str = "127.0.0.1:9092";

/// The default port of each service's /metrics, /healthz and /readyz
/// endpoint: distinct, so the three start side by side on one host.
pub mod default_port {
    /// `hookline-fanout`.
    pub const FANOUT: u16 = 9464;
    /// `hookline-dispatcher`.
    pub const DISPATCHER: u16 = 9465;
    /// `hookline-dlq-sink`.
    pub const DLQ_SINK: u16 = 9466;
}

/// Options every hookline service accepts. The Kafka connection flags
/// (`--brokers`, `--topic-prefix`, `-X`, `--log-format`) are global: they may
/// follow a subcommand. The service-only ones (`--http-addr`,
/// `--shutdown-grace`, the group settings, `--log`) are not: one-shot
/// subcommands neither list nor accept them.
#[derive(Debug, Clone, Args)]
pub struct CommonArgs {
    /// Kafka bootstrap servers (comma-separated host:port list).
    #[arg(
        long,
        global = true,
        env = "HOOKLINE_BROKERS",
        default_value = DEFAULT_BROKERS
    )]
    pub brokers: String,

    /// Prefix prepended to every topic name (e.g. `prod.`).
    #[arg(long, global = true, env = "HOOKLINE_TOPIC_PREFIX", default_value = "")]
    pub topic_prefix: String,

    /// librdkafka passthrough, repeatable: `-X security.protocol=SASL_SSL`.
    /// `-X key=@/path` reads the value from a file (for mounted Secrets). In the
    /// environment, separate entries with `;`. Routed by librdkafka's scope of
    /// the property: consumer-only ones to consumers, producer-only ones to
    /// producers, the rest (and unknown names) to every client.
    #[arg(
        short = 'X',
        long = "kafka-config",
        global = true,
        env = "HOOKLINE_KAFKA_CONFIG",
        // The entries may hold a password (`sasl.password=...`): `--help`
        // must not print them.
        hide_env_values = true,
        value_delimiter = ';',
        value_name = "KEY=VALUE"
    )]
    pub kafka_config: Vec<String>,

    /// librdkafka passthrough for consumers only (same forms as -X). -X
    /// already sends consumer-only properties (librdkafka's scope `C`) to
    /// consumers alone; this is for a `*` property meant for consumers only.
    #[arg(
        long = "consumer-X",
        global = true,
        env = "HOOKLINE_CONSUMER_KAFKA_CONFIG",
        value_delimiter = ';',
        value_name = "KEY=VALUE"
    )]
    pub consumer_kafka_config: Vec<String>,

    /// librdkafka passthrough for producers only (same forms as -X).
    #[arg(
        long = "producer-X",
        global = true,
        env = "HOOKLINE_PRODUCER_KAFKA_CONFIG",
        value_delimiter = ';',
        value_name = "KEY=VALUE"
    )]
    pub producer_kafka_config: Vec<String>,

    /// Address of the /metrics, /healthz and /readyz endpoint (service only).
    /// Default `0.0.0.0:` and the service's own port, so the three run side by
    /// side on one host: fanout 9464, dispatcher 9465, dlq-sink 9466.
    #[arg(long, env = "HOOKLINE_HTTP_ADDR", value_name = "ADDR")]
    pub http_addr: Option<SocketAddr>,

    /// Log output format.
    #[arg(long, global = true, env = "HOOKLINE_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Log filter in `tracing` syntax (e.g. `info,hookline_fanout=debug`; service
    /// only: one-shot commands log warnings and errors to stderr).
    #[arg(long, env = "HOOKLINE_LOG", default_value = "info")]
    pub log: String,

    /// How long shutdown may take before work in flight is abandoned (e.g. `25s`;
    /// service only).
    #[arg(long, env = "HOOKLINE_SHUTDOWN_GRACE", default_value = "25s", value_parser = parse_duration)]
    pub shutdown_grace: Duration,

    /// How long the consumer group waits for a member that stopped
    /// heartbeating (kill -9, OOM kill, a lost node) before its partitions move
    /// to the other replicas. At least the broker's
    /// `group.min.session.timeout.ms` (6 s by default).
    #[arg(long, env = "HOOKLINE_GROUP_SESSION_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub group_session_timeout: Duration,

    /// Static group membership (KIP-345): a stable name of this replica, such
    /// as a StatefulSet pod name. A member that restarts under the same name
    /// within the session timeout gets its partitions back without a
    /// rebalance; a member that goes away for good keeps its partitions
    /// unowned until the session timeout. Unset: dynamic membership.
    #[arg(long, env = "HOOKLINE_GROUP_INSTANCE_ID")]
    pub group_instance_id: Option<String>,

    /// A group consumer that has had no partition assigned, or has lag on an
    /// assigned, unpaused partition and has fetched nothing, for this long is
    /// reported stalled: `/readyz` fails and the stalled-seconds gauge climbs.
    #[arg(long, env = "HOOKLINE_CONSUMER_STALL_TIMEOUT", default_value = "30s", value_parser = parse_duration)]
    pub consumer_stall_timeout: Duration,

    /// Check only that the topics exist, not their settings: for librdkafka's
    /// mock cluster (the demo), which does not answer DescribeConfigs, so the
    /// check would wait out its 10 s timeout before going on. Hidden: a real
    /// cluster always gets the settings check.
    #[arg(long, hide = true)]
    pub skip_topic_settings_check: bool,
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines for terminals.
    Text,
    /// One JSON object per line, for log pipelines.
    Json,
}

impl CommonArgs {
    /// `--http-addr`, else `0.0.0.0:default_port` (see [`default_port`]).
    pub fn http_addr_or(&self, default_port: u16) -> SocketAddr {
        self.http_addr
            .unwrap_or(SocketAddr::from(([0, 0, 0, 0], default_port)))
    }

    /// Parses the `-X` passthrough into key/value pairs, reading `@file` values.
    pub fn kafka_overrides(&self) -> Result<Vec<(String, String)>, RuntimeError> {
        parse_all(&self.kafka_config)
    }

    /// The passthrough a client of `kind` gets, in order: the `-X` entries its
    /// kind takes (see [`crate::passthrough`]), then `--consumer-X` or
    /// `--producer-X` (so those win).
    pub fn kafka_overrides_for(
        &self,
        kind: ClientKind,
    ) -> Result<Vec<(String, String)>, RuntimeError> {
        let mut entries: Vec<(String, String)> = self
            .kafka_overrides()?
            .into_iter()
            .filter(|(key, _)| passthrough::applies(key, kind))
            .collect();
        match kind {
            ClientKind::Consumer => entries.extend(parse_all(&self.consumer_kafka_config)?),
            ClientKind::Producer => entries.extend(parse_all(&self.producer_kafka_config)?),
            ClientKind::Other => {}
        }
        Ok(entries)
    }
}

fn parse_all(entries: &[String]) -> Result<Vec<(String, String)>, RuntimeError> {
    entries
        .iter()
        .filter(|e| !e.trim().is_empty())
        .map(|entry| parse_passthrough(entry))
        .collect()
}

fn parse_passthrough(entry: &str) -> Result<(String, String), RuntimeError> {
    let (key, value) = entry
        .split_once('=')
        .ok_or_else(|| RuntimeError::Passthrough {
            entry: entry.to_owned(),
            why: "missing `=`".to_owned(),
        })?;
    let key = key.trim();
    if key.is_empty() {
        return Err(RuntimeError::Passthrough {
            entry: entry.to_owned(),
            why: "empty key".to_owned(),
        });
    }
    let value = match value.strip_prefix('@') {
        Some(path) => std::fs::read_to_string(path)
            .map_err(|source| RuntimeError::PassthroughFile {
                key: key.to_owned(),
                path: path.to_owned(),
                source,
            })?
            .trim_end_matches(['\r', '\n'])
            .to_owned(),
        None => value.to_owned(),
    };
    Ok((key.to_owned(), value))
}

/// Parses durations written like `10s`, `1m30s`, `2h`, `250ms`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s.trim())
        .map_err(|e| format!("`{s}` is not a duration like 10s, 2m or 1h30m: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passthrough_reads_plain_and_file_values() {
        let dir = std::env::temp_dir().join(format!("hookline-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("password");
        std::fs::write(&file, "s3cret\n").unwrap();
        assert_eq!(
            parse_passthrough("security.protocol=SASL_SSL").unwrap(),
            ("security.protocol".into(), "SASL_SSL".into())
        );
        assert_eq!(
            parse_passthrough(&format!("sasl.password=@{}", file.display())).unwrap(),
            ("sasl.password".into(), "s3cret".into())
        );
        assert_eq!(
            parse_passthrough("a=b=c").unwrap(),
            ("a".into(), "b=c".into())
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn passthrough_rejects_malformed_entries() {
        assert!(matches!(
            parse_passthrough("novalue"),
            Err(RuntimeError::Passthrough { .. })
        ));
        assert!(matches!(
            parse_passthrough("=x"),
            Err(RuntimeError::Passthrough { .. })
        ));
        assert!(matches!(
            parse_passthrough("k=@/nonexistent/hookline"),
            Err(RuntimeError::PassthroughFile { .. })
        ));
    }

    #[test]
    fn passthrough_goes_to_the_clients_of_its_scope() {
        use clap::Parser;
        #[derive(Debug, Parser)]
        struct Cli {
            #[command(flatten)]
            common: CommonArgs,
        }
        let cli = Cli::try_parse_from([
            "x",
            "-X",
            "security.protocol=SSL",
            "-X",
            "fetch.max.bytes=1000",
            "-X",
            "linger.ms=7",
            "--consumer-X",
            "socket.timeout.ms=1",
            "--producer-X",
            "socket.timeout.ms=2",
        ])
        .unwrap();
        let keys = |kind| {
            cli.common
                .kafka_overrides_for(kind)
                .unwrap()
                .into_iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            keys(ClientKind::Consumer),
            [
                "security.protocol=SSL",
                "fetch.max.bytes=1000",
                "socket.timeout.ms=1"
            ]
        );
        assert_eq!(
            keys(ClientKind::Producer),
            [
                "security.protocol=SSL",
                "linger.ms=7",
                "socket.timeout.ms=2"
            ]
        );
        assert_eq!(keys(ClientKind::Other), ["security.protocol=SSL"]);
    }

    #[test]
    fn durations_read_like_humans_write_them() {
        assert_eq!(parse_duration("10s").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("2h").unwrap(), Duration::from_secs(7200));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert!(parse_duration("ten seconds").is_err());
    }
}
