//! `topics`: the flags of the provisioning command and its run: observe, plan,
//! print the plan, and apply it only with `--execute`.

use std::{io::Write, time::Duration};

use clap::Args;

use super::{
    admin::Admin,
    plan::{plan, PlanOptions},
    spec::{desired, parse_override, LadderArgs, Settings},
    Plan, ProvisionError,
};
use crate::{
    config::{parse_duration, CommonArgs},
    kafka::client_config,
};

/// Create or correct every hookline topic. Previews by default.
#[derive(Debug, Clone, Args)]
pub struct TopicsArgs {
    /// Apply the plan (without it, only print what would change).
    #[arg(long, env = "HOOKLINE_TOPICS_EXECUTE")]
    pub execute: bool,

    /// Add partitions to topics that have fewer than the settings ask for.
    /// Adding partitions moves tenant keys; records already queued may be
    /// overtaken. Shrinking is never done.
    #[arg(long, env = "HOOKLINE_TOPICS_ALLOW_PARTITION_INCREASE")]
    pub allow_partition_increase: bool,

    /// Partitions of every topic (per topic: `--set events:partitions=24`).
    #[arg(long, env = "HOOKLINE_TOPICS_PARTITIONS", default_value_t = 12,
          value_parser = clap::value_parser!(i32).range(1..))]
    pub partitions: i32,

    /// Replication factor of every topic (default 3, min.insync.replicas 2; 1
    /// and 1 on a one-broker cluster, said in the preview). A cluster with
    /// fewer brokers than this is refused before anything is planned.
    #[arg(long, env = "HOOKLINE_TOPICS_REPLICATION_FACTOR",
          value_parser = clap::value_parser!(i32).range(1..), conflicts_with = "dev")]
    pub replication_factor: Option<i32>,

    /// A development cluster (`make kafka-up`): replication factor 1 and
    /// min.insync.replicas 1, so no copy survives the loss of a broker.
    #[arg(long, env = "HOOKLINE_TOPICS_DEV")]
    pub dev: bool,

    /// Retention of every topic except the compacted `subscriptions`; at least
    /// 7d (per topic: `--set deliveries.dlq:retention=30d`).
    #[arg(long, env = "HOOKLINE_TOPICS_RETENTION", default_value = "7d",
          value_parser = parse_duration)]
    pub retention: Duration,

    /// max.message.bytes of events, subscriptions and deliveries; retry tiers,
    /// the DLQ and the quarantine get 64 KiB more for the fields they add.
    #[arg(
        long,
        env = "HOOKLINE_TOPICS_MAX_MESSAGE_BYTES",
        default_value_t = 1024 * 1024
    )]
    pub max_message_bytes: u64,

    /// The retry ladder (the dispatcher's flag and variable).
    #[command(flatten)]
    pub ladder: LadderArgs,

    /// Per-topic setting, repeatable: TOPIC:KEY=VALUE with TOPIC unprefixed
    /// (`events`, `deliveries.retry-2h`, ...) and KEY `partitions`,
    /// `replication`, `retention` (a duration) or any topic config key. In the
    /// environment, separate entries with `;`.
    #[arg(long = "set", env = "HOOKLINE_TOPICS_SET", value_delimiter = ';',
          value_parser = parse_override, value_name = "TOPIC:KEY=VALUE")]
    pub set: Vec<(String, String, String)>,

    /// Timeout of each admin request.
    #[arg(long = "admin-timeout", env = "HOOKLINE_TOPICS_ADMIN_TIMEOUT", default_value = "30s",
          value_parser = parse_duration)]
    pub timeout: Duration,
}

impl TopicsArgs {
    /// The settings these flags describe, with the topic prefix from `common`
    /// and the replication factor [`replication`] chose.
    pub fn settings(&self, common: &CommonArgs, replication: i32) -> Settings {
        Settings {
            prefix: common.topic_prefix.clone(),
            tiers: self.ladder.tiers(),
            partitions: self.partitions,
            replication,
            retention: self.retention,
            max_message_bytes: self.max_message_bytes,
            overrides: self.set.clone(),
        }
    }
}

/// Observes the cluster, prints the plan to `out`, and applies it with
/// `--execute`. Returns the plan that was printed (and applied, if executed).
pub async fn run(
    common: &CommonArgs,
    args: &TopicsArgs,
    out: &mut impl Write,
) -> Result<Plan, ProvisionError> {
    // Bad settings are refused before connecting (the replication factor is
    // checked against the cluster below, once its broker count is known).
    desired(&args.settings(common, args.replication_factor.unwrap_or(1)))?;
    let admin = Admin::new(client_config(common, "hookline-topics")?, args.timeout)?;
    let brokers = admin.brokers().await?;
    let (replication, said) = replication(args, brokers)?;
    let specs = desired(&args.settings(common, replication))?;
    too_few_brokers(&specs, brokers)?;
    if let Some(said) = said {
        writeln!(out, "! note     {said}")?;
    }
    let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
    let observed = admin.observe(&names).await?;
    let plan = plan(
        &specs,
        &observed,
        PlanOptions {
            allow_partition_increase: args.allow_partition_increase,
        },
    )?;
    for action in &plan.actions {
        writeln!(out, "{action}")?;
    }
    for name in &plan.unchanged {
        writeln!(out, "= ok       {name}")?;
    }
    for note in &plan.notes {
        writeln!(out, "! note     {note}")?;
    }
    let summary = summary(&plan);
    if plan.is_empty() {
        writeln!(out, "topics: all {} as desired; nothing to do", specs.len())?;
    } else if args.execute {
        admin.apply(&plan.actions).await?;
        writeln!(out, "topics: applied {summary}")?;
    } else {
        writeln!(
            out,
            "topics: would apply {summary} (preview; re-run with --execute to apply)"
        )?;
    }
    Ok(plan)
}

/// The replication factor of every topic, and what to say about it: `--dev`
/// or a one-broker cluster gives 1 (said, since no copy then survives a broker
/// loss); an explicit `--replication-factor` is kept; else 3, refused when the
/// cluster has fewer brokers, naming what to pass.
pub fn replication(
    args: &TopicsArgs,
    brokers: usize,
) -> Result<(i32, Option<String>), ProvisionError> {
    const DEFAULT: i32 = 3;
    let dev = "replication factor 1, min.insync.replicas 1: no copy survives a broker loss \
               (development only)";
    if args.dev {
        return Ok((1, Some(format!("--dev: {dev}"))));
    }
    match args.replication_factor {
        Some(r) => Ok((r, None)),
        None if brokers == 1 => Ok((
            1,
            Some(format!(
                "the cluster has one broker: {dev}; pass --replication-factor to choose"
            )),
        )),
        None if (brokers as i32) < DEFAULT => Err(ProvisionError::Refused(vec![format!(
            "the cluster has {brokers} brokers, fewer than the default replication factor \
             {DEFAULT}: pass --replication-factor {brokers} (or --dev for a development cluster)"
        )])),
        None => Ok((DEFAULT, None)),
    }
}

/// Refuses specs whose replication factor the cluster's `brokers` cannot
/// hold (CreateTopics would fail with InvalidReplicationFactor), naming the fix.
pub fn too_few_brokers(specs: &[super::TopicSpec], brokers: usize) -> Result<(), ProvisionError> {
    let problems: Vec<String> = specs
        .iter()
        .filter(|s| s.replication as usize > brokers)
        .map(|s| {
            format!(
                "{}: replication factor {} but the cluster has {brokers} broker{}: pass \
                 --replication-factor {brokers} (or --dev for a development cluster), or \
                 lower a `--set {}:replication=` override",
                s.name,
                s.replication,
                if brokers == 1 { "" } else { "s" },
                s.name,
            )
        })
        .collect();
    if problems.is_empty() {
        Ok(())
    } else {
        Err(ProvisionError::Refused(problems))
    }
}

fn summary(plan: &Plan) -> String {
    use super::Action;
    let count = |f: fn(&Action) -> bool| plan.actions.iter().filter(|a| f(a)).count();
    format!(
        "{} create, {} alter, {} grow",
        count(|a| matches!(a, Action::Create(_))),
        count(|a| matches!(a, Action::AlterConfigs { .. })),
        count(|a| matches!(a, Action::AddPartitions { .. })),
    )
}
