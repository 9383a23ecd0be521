//! The desired state of every hookline topic, derived from a few settings and
//! per-topic overrides, and the safety rules it must satisfy before anything is
//! planned. Topic names come from [`hookline_envelope::Topics`] only.

use std::{collections::BTreeMap, time::Duration};

use hookline_envelope::Topics;

use super::ProvisionError;
use crate::config::parse_duration;

/// No hookline topic that deletes old records keeps them for less than this:
/// the DLQ replay window and recovery from a stuck consumer both need days.
pub const MIN_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);

/// A retry tier's retention must be at least this many times its delay, so a
/// record waiting for its due time (or a paused partition) is never deleted.
pub const TIER_RETENTION_FACTOR: u32 = 24;

/// Room the wrapping topics (retry tiers, DLQ, quarantine) get above their
/// source's `max.message.bytes` for the envelope fields they add.
pub const WRAP_OVERHEAD_BYTES: u64 = 64 * 1024;

/// Broker config keys this command manages on every topic.
pub const CLEANUP_POLICY: &str = "cleanup.policy";
/// Retention in milliseconds (`-1` keeps forever).
pub const RETENTION_MS: &str = "retention.ms";
/// Largest record batch the topic accepts.
pub const MAX_MESSAGE_BYTES: &str = "max.message.bytes";
/// Replicas that must acknowledge an `acks=all` write.
pub const MIN_INSYNC_REPLICAS: &str = "min.insync.replicas";

/// The settings the topics are derived from (flags of `topics`).
#[derive(Debug, Clone)]
pub struct Settings {
    /// Prefix of every topic name.
    pub prefix: String,
    /// The retry ladder: tier name and its delay, in ladder order.
    pub tiers: Vec<(String, Duration)>,
    /// Partitions of every topic unless overridden.
    pub partitions: i32,
    /// Replication factor of every topic unless overridden.
    pub replication: i32,
    /// Retention of every deleting topic unless overridden.
    pub retention: Duration,
    /// `max.message.bytes` of `events`, `subscriptions` and `deliveries`; the
    /// wrapping topics get [`WRAP_OVERHEAD_BYTES`] more.
    pub max_message_bytes: u64,
    /// `(logical topic, key, value)`: `partitions`, `replication`, `retention`
    /// (a duration) or any topic config key, for one unprefixed topic name.
    pub overrides: Vec<(String, String, String)>,
}

/// What one topic should look like.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicSpec {
    /// Full topic name, with prefix.
    pub name: String,
    /// Partition count.
    pub partitions: i32,
    /// Replication factor.
    pub replication: i32,
    /// Topic configs this command manages.
    pub configs: BTreeMap<String, String>,
}

/// The role of a topic, which decides its defaults and its safety rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Events,
    Subscriptions,
    Deliveries,
    Retry(Duration),
    Dlq,
    Quarantine,
    /// The attempt log: small records, kept like every deleting topic (at least
    /// [`MIN_RETENTION`]), so `trace` and the archive see a week at least.
    Attempts,
}

/// Every topic's desired state, or every reason the settings are unsafe.
pub fn desired(settings: &Settings) -> Result<Vec<TopicSpec>, ProvisionError> {
    let tier_names: Vec<&str> = settings.tiers.iter().map(|(t, _)| t.as_str()).collect();
    let topics = Topics::new(&settings.prefix, &tier_names)
        .map_err(|e| ProvisionError::Invalid(vec![e.to_string()]))?;
    let mut roles = vec![
        (topics.events(), Role::Events),
        (topics.subscriptions(), Role::Subscriptions),
        (topics.deliveries(), Role::Deliveries),
        (topics.strict(), Role::Deliveries),
    ];
    roles.extend(
        topics
            .retries()
            .zip(&settings.tiers)
            .map(|((_, topic), (_, delay))| (topic, Role::Retry(*delay))),
    );
    roles.extend([
        (topics.dlq(), Role::Dlq),
        (topics.quarantine(), Role::Quarantine),
        (topics.attempts(), Role::Attempts),
        // Compacted and kept like the table it describes.
        (topics.health(), Role::Subscriptions),
    ]);
    // Overflow lanes take a moved record to its source partition's number.
    roles.extend(topics.lanes().map(|lane| (lane, Role::Deliveries)));

    let mut problems = Vec::new();
    let mut specs: Vec<(TopicSpec, Role)> = roles
        .iter()
        .map(|(name, role)| (default_spec(settings, name, *role), *role))
        .collect();
    for (logical, key, value) in &settings.overrides {
        let full = format!("{}{logical}", settings.prefix);
        match specs.iter_mut().find(|(s, _)| s.name == full) {
            Some((spec, _)) => {
                if let Err(why) = apply_override(spec, key, value) {
                    problems.push(format!("{logical}: {why}"));
                }
            }
            None => problems.push(format!(
                "unknown topic `{logical}` in an override; use one of: {}",
                roles
                    .iter()
                    .map(|(n, _)| &n[settings.prefix.len()..])
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        }
    }
    // A record moved from partition p of deliveries goes to partition p of its
    // lane: each lane has deliveries' partitions unless set, and never fewer.
    let deliveries = specs
        .iter()
        .find(|(s, _)| s.name == topics.deliveries())
        .map_or(settings.partitions, |(s, _)| s.partitions);
    for (spec, _) in specs.iter_mut().filter(|(s, _)| topics.is_lane(&s.name)) {
        let logical = &spec.name[settings.prefix.len()..];
        let set = settings
            .overrides
            .iter()
            .any(|(t, key, _)| t == logical && key == "partitions");
        if !set {
            spec.partitions = deliveries;
        } else if spec.partitions < deliveries {
            problems.push(format!(
                "{logical}: {} partitions, fewer than deliveries' {deliveries}; a record moved \
                 from partition p of deliveries goes to partition p of its lane",
                spec.partitions
            ));
        }
    }
    for (spec, role) in &specs {
        check_spec(spec, *role, &mut problems);
    }
    let bytes = |role: Role| {
        specs
            .iter()
            .find(|(_, r)| *r == role)
            .and_then(|(s, _)| s.configs.get(MAX_MESSAGE_BYTES)?.parse::<u64>().ok())
    };
    for (spec, role) in &specs {
        let source = match role {
            Role::Quarantine => Role::Events,
            Role::Retry(_) | Role::Dlq => Role::Deliveries,
            _ => continue,
        };
        let mine = spec
            .configs
            .get(MAX_MESSAGE_BYTES)
            .and_then(|v| v.parse::<u64>().ok());
        if let (Some(mine), Some(theirs)) = (mine, bytes(source)) {
            if mine < theirs {
                problems.push(format!(
                    "{}: max.message.bytes {mine} is below its source topic's {theirs}; \
                     a record the source accepts could not be moved here",
                    spec.name
                ));
            }
        }
    }
    if problems.is_empty() {
        Ok(specs.into_iter().map(|(s, _)| s).collect())
    } else {
        Err(ProvisionError::Invalid(problems))
    }
}

fn default_spec(settings: &Settings, name: &str, role: Role) -> TopicSpec {
    let mut configs = BTreeMap::new();
    let base = settings.max_message_bytes;
    let (policy, bytes) = match role {
        Role::Subscriptions => ("compact", base),
        Role::Events | Role::Deliveries | Role::Attempts => ("delete", base),
        Role::Retry(_) | Role::Dlq | Role::Quarantine => ("delete", base + WRAP_OVERHEAD_BYTES),
    };
    configs.insert(CLEANUP_POLICY.to_owned(), policy.to_owned());
    configs.insert(MAX_MESSAGE_BYTES.to_owned(), bytes.to_string());
    if role != Role::Subscriptions {
        configs.insert(
            RETENTION_MS.to_owned(),
            settings.retention.as_millis().to_string(),
        );
    }
    let mut spec = TopicSpec {
        name: name.to_owned(),
        partitions: settings.partitions,
        replication: settings.replication,
        configs,
    };
    set_min_insync(&mut spec);
    spec
}

/// `acks=all` writes survive one broker loss with three replicas.
fn set_min_insync(spec: &mut TopicSpec) {
    let value = if spec.replication >= 3 { 2 } else { 1 };
    spec.configs
        .insert(MIN_INSYNC_REPLICAS.to_owned(), value.to_string());
}

fn apply_override(spec: &mut TopicSpec, key: &str, value: &str) -> Result<(), String> {
    let int = |v: &str| {
        v.trim()
            .parse::<i32>()
            .map_err(|_| format!("`{key}={v}` is not a whole number"))
    };
    match key {
        "partitions" => spec.partitions = int(value)?,
        "replication" | "replication.factor" => {
            spec.replication = int(value)?;
            set_min_insync(spec);
        }
        "retention" => {
            let ms = if value.trim() == "-1" || value.trim() == "forever" {
                "-1".to_owned()
            } else {
                parse_duration(value)?.as_millis().to_string()
            };
            spec.configs.insert(RETENTION_MS.to_owned(), ms);
        }
        key if key.is_empty() || !key.chars().all(|c| c.is_ascii_lowercase() || c == '.') => {
            return Err(format!("`{key}` is not a topic config key"));
        }
        key => {
            spec.configs.insert(key.to_owned(), value.trim().to_owned());
        }
    }
    Ok(())
}

fn check_spec(spec: &TopicSpec, role: Role, problems: &mut Vec<String>) {
    let name = &spec.name;
    if spec.partitions < 1 {
        problems.push(format!("{name}: partitions must be at least 1"));
    }
    if spec.replication < 1 {
        problems.push(format!("{name}: replication factor must be at least 1"));
    }
    if let Some(Ok(isr)) = spec
        .configs
        .get(MIN_INSYNC_REPLICAS)
        .map(|v| v.parse::<i32>())
    {
        if isr > spec.replication {
            problems.push(format!(
                "{name}: min.insync.replicas {isr} exceeds the replication factor {}; \
                 every write would fail",
                spec.replication
            ));
        }
    }
    let policy = spec.configs.get(CLEANUP_POLICY).map(String::as_str);
    if let Some(why) = wrong_policy(role == Role::Subscriptions, policy) {
        problems.push(format!("{name}: {why}"));
    }
    if role == Role::Subscriptions {
        return;
    }
    let retention = spec.configs.get(RETENTION_MS).map(|v| v.parse::<i64>());
    let floor = match role {
        Role::Retry(delay) => MIN_RETENTION.max(delay * TIER_RETENTION_FACTOR),
        _ => MIN_RETENTION,
    };
    match retention {
        Some(Ok(-1)) => {}
        Some(Ok(ms)) if ms >= 0 && (ms as u128) >= floor.as_millis() => {}
        Some(Ok(ms)) => problems.push(format!(
            "{name}: retention {} is below the minimum {}{}",
            humantime::format_duration(Duration::from_millis(ms.max(0) as u64)),
            humantime::format_duration(floor),
            match role {
                Role::Retry(d) => format!(
                    " (7 days, and {TIER_RETENTION_FACTOR}x the tier delay of {})",
                    humantime::format_duration(d)
                ),
                _ => String::new(),
            }
        )),
        Some(Err(_)) => problems.push(format!("{name}: retention.ms is not a number")),
        None => problems.push(format!("{name}: no retention set")),
    }
}

/// Why a topic's `cleanup.policy` is wrong for its role, if it is. Compaction
/// keeps one record per key: right for the tables keyed by subscription (the
/// subscriptions and their shared breakers), silent data loss for any
/// tenant-keyed queue.
fn wrong_policy(compacted_role: bool, policy: Option<&str>) -> Option<String> {
    let parts: Vec<&str> = policy
        .unwrap_or("delete")
        .split(',')
        .map(str::trim)
        .collect();
    let compact = parts.contains(&"compact");
    let delete = parts.contains(&"delete");
    match (compacted_role, compact, delete) {
        (true, true, false) => None,
        (true, _, _) => Some(format!(
            "cleanup.policy is `{}`, must be `compact` (a table keyed by subscription would lose entries)",
            policy.unwrap_or("delete")
        )),
        (false, true, _) => Some(format!(
            "cleanup.policy is `{}`, must be `delete` (compaction keeps one record per tenant key)",
            policy.unwrap_or("")
        )),
        (false, false, _) => None,
    }
}

/// Checks an existing topic's effective `cleanup.policy` against its role, for
/// services that verify their topics at start: `Some(reason)` when wrong.
pub fn wrong_topic_config(topics: &Topics, topic: &str, policy: Option<&str>) -> Option<String> {
    let compacted = topic == topics.subscriptions() || topic == topics.health();
    wrong_policy(compacted, policy).map(|why| format!("{topic}: {why}"))
}

/// The retry ladder, one flag and one variable for every command that needs it:
/// `hookline-fanout topics` creates the tiers, the dispatcher consumes them.
/// Both flatten this struct, so the two cannot be configured apart.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct LadderArgs {
    /// The retry ladder as NAME=DELAY, in order, comma-separated; each tier is
    /// the topic `deliveries.NAME`. Default:
    /// `retry-10s=10s,retry-1m=1m,retry-15m=15m,retry-2h=2h`.
    /// `hookline-fanout topics` and the dispatcher read the same flag and
    /// variable: give both the same value.
    #[arg(long = "retry-tiers", env = "HOOKLINE_RETRY_TIERS", value_delimiter = ',',
          value_parser = parse_tier, value_name = "NAME=DELAY")]
    pub retry_tiers: Vec<(String, Duration)>,
}

impl LadderArgs {
    /// The tiers given, or the default ladder when none were.
    pub fn tiers(&self) -> Vec<(String, Duration)> {
        if self.retry_tiers.is_empty() {
            default_tiers()
        } else {
            self.retry_tiers.clone()
        }
    }
}

/// `tiers` as a `--retry-tiers` / `HOOKLINE_RETRY_TIERS` value (`NAME=DELAY,...`),
/// which [`parse_tier`] reads back.
pub fn tiers_value(tiers: &[(String, Duration)]) -> String {
    tiers
        .iter()
        .map(|(name, delay)| {
            let delay = humantime::format_duration(*delay)
                .to_string()
                .replace(' ', "");
            format!("{name}={delay}")
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// The `hookline-fanout topics --execute` command line that creates (or
/// corrects) the topics of `common`'s cluster and prefix with the ladder
/// `tiers`: what a service waiting for missing topics tells the operator to run.
/// Flags equal to their defaults are left out.
pub fn topics_command(common: &crate::config::CommonArgs, tiers: &[(String, Duration)]) -> String {
    let mut cmd = String::from("hookline-fanout");
    if common.brokers != crate::config::DEFAULT_BROKERS {
        cmd.push_str(&format!(" --brokers {}", common.brokers));
    }
    if !common.topic_prefix.is_empty() {
        cmd.push_str(&format!(" --topic-prefix {}", common.topic_prefix));
    }
    cmd.push_str(" topics --execute");
    if tiers != default_tiers().as_slice() {
        cmd.push_str(&format!(" --retry-tiers {}", tiers_value(tiers)));
    }
    cmd
}

/// The default ladder's tiers ([`hookline_core::DEFAULT_TIERS`]), as `--retry-tiers` values.
pub fn default_tiers() -> Vec<(String, Duration)> {
    hookline_core::DEFAULT_TIERS
        .iter()
        .map(|(name, delay)| ((*name).to_owned(), *delay))
        .collect()
}

/// Parses one `--retry-tiers` entry, `NAME=DELAY`.
pub fn parse_tier(s: &str) -> Result<(String, Duration), String> {
    let (name, delay) = s
        .split_once('=')
        .ok_or_else(|| format!("`{s}` is not NAME=DELAY (e.g. retry-10s=10s)"))?;
    Ok((name.trim().to_owned(), parse_duration(delay)?))
}

/// Parses a `--set TOPIC:KEY=VALUE` value.
pub fn parse_override(s: &str) -> Result<(String, String, String), String> {
    let err = || format!("`{s}` is not TOPIC:KEY=VALUE (e.g. events:partitions=24)");
    let (topic, rest) = s.split_once(':').ok_or_else(err)?;
    let (key, value) = rest.split_once('=').ok_or_else(err)?;
    if topic.trim().is_empty() || key.trim().is_empty() {
        return Err(err());
    }
    Ok((
        topic.trim().to_owned(),
        key.trim().to_owned(),
        value.trim().to_owned(),
    ))
}
