//! Kafka client configuration: the common settings every client gets and the
//! operator's `-X` passthrough (security, tuning). Settings a service sets
//! after this for its correctness (isolation level, offset handling,
//! transactional id, idempotence) deliberately win over the passthrough.

use std::time::Duration;

use crate::{config::CommonArgs, passthrough::ClientKind, RuntimeError};
use hookline_envelope::{QuarantinedHeader, SourceRecord};
use rdkafka::{
    consumer::ConsumerContext,
    error::KafkaError,
    message::{Headers, Message},
    ClientConfig, ClientContext,
};

pub mod access;
mod reading;
mod rebalance;
pub mod replicas;
pub mod txn;

pub use reading::{group_reader_config, reader_config, AtEnd, Offsets, ReadCommitted, StartAt};
pub use rebalance::{
    assigned_topics, cooperative_rebalance, joining, manual_commit_consumer, partitions,
    RevokeRecorder, GROUP_MEMBERSHIP,
};

/// A client context that logs librdkafka's errors through `tracing`, except
/// end-of-partition notices, which readers that follow a topic expect.
#[derive(Debug, Default, Clone, Copy)]
pub struct QuietContext;

impl ClientContext for QuietContext {
    fn error(&self, error: KafkaError, reason: &str) {
        match error {
            KafkaError::PartitionEOF(_)
            | KafkaError::Global(rdkafka::types::RDKafkaErrorCode::PartitionEOF) => {
                tracing::debug!(%reason, "end of partition")
            }
            other => tracing::warn!(error = %other, %reason, "librdkafka error"),
        }
    }
}

impl ConsumerContext for QuietContext {}

/// The `partition.assignment.strategy` of every hookline group consumer.
pub const ASSIGNMENT_STRATEGY: &str = "cooperative-sticky";

/// A base configuration of an admin or metadata-only client for `client_id`,
/// with bootstrap servers and the passthrough every client takes (librdkafka's
/// `*` properties); the caller adds its own settings on top.
pub fn client_config(common: &CommonArgs, client_id: &str) -> Result<ClientConfig, RuntimeError> {
    client_config_for(common, client_id, ClientKind::Other)
}

/// A base consumer configuration: [`client_config`] plus the consumer-only
/// passthrough (`-X` properties of scope `C`, then `--consumer-X`), over
/// [`CONSUMER_DEFAULTS`] (an operator's `-X` of the same key wins).
pub fn consumer_config(common: &CommonArgs, client_id: &str) -> Result<ClientConfig, RuntimeError> {
    overlay(
        defaults(CONSUMER_DEFAULTS),
        common,
        client_id,
        ClientKind::Consumer,
    )
}

/// librdkafka defaults every hookline consumer changes.
///
/// `fetch.queue.backoff.ms` (librdkafka: 1000): once a partition's prefetch
/// queue passes `queued.max.messages.kbytes`, librdkafka does not fetch it
/// again for this long, even when the queue empties sooner — and a pause
/// empties it at once (a paused partition's prefetched records are dropped
/// and fetched again from the application's position on resume). A
/// dispatcher moving a whale's burst to its overflow lane filled its 16 MiB
/// queue in one fetch, paused for pending writes, resumed 20 ms later and
/// then sat idle for the rest of the second, again and again: the tenants
/// behind the burst waited up to 5.6–5.9 s instead of 1.8–3.1 s (README,
/// "Isolation with a 100,000-delivery whale"). 10 ms costs a timer check per
/// full partition, no request.
pub const CONSUMER_DEFAULTS: &[(&str, &str)] = &[("fetch.queue.backoff.ms", "10")];

/// A base producer configuration: [`client_config`] plus the producer-only
/// passthrough (`-X` properties of scope `P`, then `--producer-X`).
pub fn producer_config(common: &CommonArgs, client_id: &str) -> Result<ClientConfig, RuntimeError> {
    client_config_for(common, client_id, ClientKind::Producer)
}

/// [`producer_config`] with `settings` set before the passthrough, so that
/// an operator's `-X` of the same key wins over them.
pub fn producer_config_with(
    common: &CommonArgs,
    client_id: &str,
    settings: &[(&str, &str)],
) -> Result<ClientConfig, RuntimeError> {
    overlay(defaults(settings), common, client_id, ClientKind::Producer)
}

/// A configuration holding only `settings`, for [`overlay`] to go over.
fn defaults(settings: &[(&str, &str)]) -> ClientConfig {
    let mut config = ClientConfig::new();
    for (key, value) in settings {
        config.set(*key, *value);
    }
    config
}

fn client_config_for(
    common: &CommonArgs,
    client_id: &str,
    kind: ClientKind,
) -> Result<ClientConfig, RuntimeError> {
    overlay(ClientConfig::new(), common, client_id, kind)
}

/// Sets bootstrap servers and client id on `config`, then the passthrough
/// for `kind`.
fn overlay(
    mut config: ClientConfig,
    common: &CommonArgs,
    client_id: &str,
    kind: ClientKind,
) -> Result<ClientConfig, RuntimeError> {
    config
        .set("bootstrap.servers", &common.brokers)
        .set("client.id", client_id);
    for (key, value) in common.kafka_overrides_for(kind)? {
        config.set(key, value);
    }
    Ok(config)
}

/// Group settings hookline sets itself, with what sets them instead; a `-X`
/// entry for one of them is refused at start rather than silently overridden.
const OWNED_GROUP_SETTINGS: &[(&str, &str)] = &[
    ("group.id", "use the stage's --group-id"),
    (
        "group.instance.id",
        "use --group-instance-id / HOOKLINE_GROUP_INSTANCE_ID",
    ),
    (
        "session.timeout.ms",
        "use --group-session-timeout / HOOKLINE_GROUP_SESSION_TIMEOUT",
    ),
    (
        "heartbeat.interval.ms",
        "derived from --group-session-timeout",
    ),
    ("partition.assignment.strategy", "always cooperative-sticky"),
    (
        "group.protocol",
        "hookline uses the classic protocol with cooperative-sticky",
    ),
];

/// The broker's default `group.max.session.timeout.ms`; longer is refused by it.
const MAX_SESSION_TIMEOUT: Duration = Duration::from_secs(30 * 60);

/// librdkafka's default `max.poll.interval.ms`.
pub const DEFAULT_MAX_POLL_INTERVAL: Duration = Duration::from_secs(300);

/// The `max.poll.interval.ms` every group consumer runs with: the last
/// `-X max.poll.interval.ms=…` (the one librdkafka keeps), else librdkafka's
/// default. A consumer that does not poll for this long (a rebalance callback
/// that blocks, say) leaves its group.
pub fn max_poll_interval(common: &CommonArgs) -> Result<Duration, RuntimeError> {
    let set = common
        .kafka_overrides_for(ClientKind::Consumer)?
        .into_iter()
        .rev()
        .find(|(key, _)| key == "max.poll.interval.ms");
    let Some((_, value)) = set else {
        return Ok(DEFAULT_MAX_POLL_INTERVAL);
    };
    value
        .trim()
        .parse::<u64>()
        .ok()
        .filter(|ms| *ms > 0)
        .map(Duration::from_millis)
        .ok_or_else(|| RuntimeError::Flag {
            flag: "-X max.poll.interval.ms",
            why: format!("`{value}` is not a positive whole number of milliseconds"),
        })
}

/// The configuration of one group consumer: [`client_config`], then the
/// group, the assignor ([`ASSIGNMENT_STRATEGY`]), the session timeout from
/// `--group-session-timeout` with a heartbeat a tenth of it (a dead member is
/// noticed at the timeout and the survivors hear of the rebalance within one
/// more heartbeat: 10 s + 1 s by default), and static membership when
/// `--group-instance-id` is set.
/// `member` tells apart several consumers of one process (the dispatcher has
/// one per topic); it suffixes the client and instance ids.
pub fn group_config(
    common: &CommonArgs,
    client_id: &str,
    group_id: &str,
    member: Option<&str>,
) -> Result<ClientConfig, RuntimeError> {
    check_group_flags(common)?;
    let client_id = match member {
        Some(m) => format!("{client_id}-{m}"),
        None => client_id.to_owned(),
    };
    let mut config = consumer_config(common, &client_id)?;
    let session = common.group_session_timeout;
    let heartbeat = (session / 10).max(Duration::from_millis(100));
    config
        .set("group.id", group_id)
        .set("partition.assignment.strategy", ASSIGNMENT_STRATEGY)
        .set("session.timeout.ms", session.as_millis().to_string())
        .set("heartbeat.interval.ms", heartbeat.as_millis().to_string());
    if let Some(instance) = common.group_instance_id.as_deref() {
        let instance = match member {
            Some(m) => format!("{instance}-{m}"),
            None => instance.to_owned(),
        };
        config.set("group.instance.id", instance);
    }
    Ok(config)
}

/// Checks the group flags and refuses `-X` entries for the settings
/// [`group_config`] owns.
pub fn check_group_flags(common: &CommonArgs) -> Result<(), RuntimeError> {
    for (key, _) in common.kafka_overrides_for(ClientKind::Consumer)? {
        if let Some((_, instead)) = OWNED_GROUP_SETTINGS.iter().find(|(k, _)| *k == key) {
            return Err(RuntimeError::OwnedSetting { key, instead });
        }
    }
    let session = common.group_session_timeout;
    if session < Duration::from_secs(1) || session > MAX_SESSION_TIMEOUT {
        return Err(RuntimeError::Flag {
            flag: "--group-session-timeout / HOOKLINE_GROUP_SESSION_TIMEOUT",
            why: format!("{session:?} is outside 1s..30m (brokers accept 6s..30m by default)"),
        });
    }
    // librdkafka refuses this too, but naming neither flag.
    let poll = max_poll_interval(common)?;
    if poll < session {
        return Err(RuntimeError::Flag {
            flag: "-X max.poll.interval.ms",
            why: format!(
                "{poll:?} is shorter than --group-session-timeout / \
                 HOOKLINE_GROUP_SESSION_TIMEOUT {session:?}; raise it or lower the session timeout"
            ),
        });
    }
    if common.consumer_stall_timeout < Duration::from_secs(1) {
        return Err(RuntimeError::Flag {
            flag: "--consumer-stall-timeout / HOOKLINE_CONSUMER_STALL_TIMEOUT",
            why: "must be at least 1s".into(),
        });
    }
    if let Some(id) = common.group_instance_id.as_deref() {
        if id.trim().is_empty() || id.len() > 200 {
            return Err(RuntimeError::Flag {
                flag: "--group-instance-id / HOOKLINE_GROUP_INSTANCE_ID",
                why: "must be a non-empty name of at most 200 characters".into(),
            });
        }
    }
    Ok(())
}

/// Where a consumed message was read and its raw key and value, for
/// [`hookline_envelope::Unusable::quarantine`].
pub fn source_record<M: Message>(msg: &M) -> SourceRecord<'_> {
    SourceRecord {
        topic: msg.topic(),
        partition: msg.partition(),
        offset: msg.offset(),
        key: msg.key(),
        value: msg.payload(),
    }
}

/// The W3C trace context of a message's `traceparent` and `tracestate` headers
/// (names matched without regard to case, as HTTP does; the first of each), if valid.
pub fn trace_context<M: Message>(msg: &M) -> Option<hookline_core::TraceContext> {
    let headers = msg.headers()?;
    let first = |name: &str| {
        headers
            .iter()
            .find(|h| h.key.eq_ignore_ascii_case(name))
            .and_then(|h| h.value)
    };
    hookline_core::TraceContext::from_headers(
        first(hookline_core::trace::TRACEPARENT),
        first(hookline_core::trace::TRACESTATE),
    )
}

/// A message's headers, in order and byte for byte, as a quarantined record keeps them.
pub fn quarantined_headers<M: Message>(msg: &M) -> Vec<QuarantinedHeader> {
    msg.headers()
        .map(|hs| {
            hs.iter()
                .map(|h| QuarantinedHeader {
                    name: h.key.to_owned(),
                    value: h.value.map(<[u8]>::to_vec),
                })
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        common: CommonArgs,
    }

    fn common(args: &[&str]) -> CommonArgs {
        Cli::try_parse_from(std::iter::once("hookline").chain(args.iter().copied()))
            .unwrap()
            .common
    }

    #[test]
    fn the_poll_interval_is_librdkafkas_default_or_the_last_x_entry() {
        assert_eq!(
            max_poll_interval(&common(&[])).unwrap(),
            DEFAULT_MAX_POLL_INTERVAL
        );
        let c = common(&[
            "-X",
            "max.poll.interval.ms=60000",
            "-X",
            "max.poll.interval.ms=90000",
        ]);
        assert_eq!(max_poll_interval(&c).unwrap(), Duration::from_secs(90));
        for bad in ["soon", "0", "-5"] {
            let c = common(&["-X", &format!("max.poll.interval.ms={bad}")]);
            let err = max_poll_interval(&c).unwrap_err().to_string();
            assert!(err.contains("-X max.poll.interval.ms"), "{bad}: {err}");
        }
    }

    #[test]
    fn a_poll_interval_shorter_than_the_session_is_refused_naming_both() {
        assert!(check_group_flags(&common(&[])).is_ok());
        let ok = common(&["-X", "max.poll.interval.ms=10000"]);
        assert!(check_group_flags(&ok).is_ok(), "equal to the 10s session");
        let short = common(&["-X", "max.poll.interval.ms=9999"]);
        let err = check_group_flags(&short).unwrap_err().to_string();
        assert!(err.contains("-X max.poll.interval.ms"), "{err}");
        assert!(err.contains("--group-session-timeout"), "{err}");
        let longer_session = common(&[
            "--group-session-timeout",
            "2m",
            "-X",
            "max.poll.interval.ms=60000",
        ]);
        assert!(check_group_flags(&longer_session).is_err());
    }

    #[test]
    fn a_producers_defaults_yield_to_the_passthrough() {
        let defaults = [("retry.backoff.ms", "5"), ("linger.ms", "1")];
        let plain = producer_config_with(&common(&[]), "p", &defaults).unwrap();
        assert_eq!(plain.get("retry.backoff.ms"), Some("5"));
        assert_eq!(plain.get("client.id"), Some("p"));
        let set = common(&["-X", "retry.backoff.ms=250", "--producer-X", "linger.ms=9"]);
        let over = producer_config_with(&set, "p", &defaults).unwrap();
        assert_eq!(over.get("retry.backoff.ms"), Some("250"));
        assert_eq!(over.get("linger.ms"), Some("9"));
    }

    #[test]
    fn every_consumer_fetches_again_soon_after_its_queue_was_full_unless_told_otherwise() {
        let plain = consumer_config(&common(&[]), "c").unwrap();
        assert_eq!(plain.get("fetch.queue.backoff.ms"), Some("10"));
        let grouped = group_config(&common(&[]), "c", "g", Some("m")).unwrap();
        assert_eq!(grouped.get("fetch.queue.backoff.ms"), Some("10"));
        let set = common(&["--consumer-X", "fetch.queue.backoff.ms=500"]);
        let over = group_config(&set, "c", "g", None).unwrap();
        assert_eq!(over.get("fetch.queue.backoff.ms"), Some("500"));
        let producer = producer_config(&common(&[]), "p").unwrap();
        assert_eq!(producer.get("fetch.queue.backoff.ms"), None);
    }
}
