//! The pure planner: desired topics and what the cluster has in, a list of
//! actions out. No I/O; the same inputs always give the same plan.

use std::{collections::BTreeMap, fmt};

use super::{spec::TopicSpec, ProvisionError};

/// What the cluster has for one topic.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ObservedTopic {
    /// Partition count.
    pub partitions: i32,
    /// Replication factor (replicas of the first partition).
    pub replication: i32,
    /// Effective value of every config the broker reported.
    pub effective: BTreeMap<String, String>,
    /// The configs set on the topic itself (`DYNAMIC_TOPIC_CONFIG`). A
    /// non-incremental AlterConfigs replaces all of them, so they are resent.
    pub overrides: BTreeMap<String, String>,
}

/// Planner switches.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PlanOptions {
    /// Add partitions where fewer exist than desired. Off by default: adding
    /// partitions moves tenant keys to other partitions, so records of one
    /// tenant already queued can be overtaken by newer ones.
    pub allow_partition_increase: bool,
}

/// One config key that changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigChange {
    /// The config key.
    pub key: String,
    /// The effective value now, if the broker reported one.
    pub from: Option<String>,
    /// The value wanted.
    pub to: String,
}

/// One step of a plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Create a missing topic.
    Create(TopicSpec),
    /// Change configs of an existing topic. `set` is the complete set of topic
    /// overrides to send (existing overrides kept, changes applied).
    AlterConfigs {
        /// The topic.
        topic: String,
        /// What changes.
        changes: Vec<ConfigChange>,
        /// Every override the topic has after the change.
        set: BTreeMap<String, String>,
    },
    /// Add partitions to an existing topic.
    AddPartitions {
        /// The topic.
        topic: String,
        /// Partitions now.
        from: i32,
        /// Partitions after.
        to: i32,
    },
}

/// Actions to take and notes for the operator.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// In order: creations, config changes, partition additions.
    pub actions: Vec<Action>,
    /// Differences this command does not act on (e.g. replication factor).
    pub notes: Vec<String>,
    /// Topics already as desired.
    pub unchanged: Vec<String>,
}

impl Plan {
    /// True when nothing needs doing.
    pub fn is_empty(&self) -> bool {
        self.actions.is_empty()
    }
}

/// Plans the actions that bring `observed` to `desired`, or refuses with every
/// reason: a topic with more partitions than desired (Kafka cannot shrink one),
/// or fewer without [`PlanOptions::allow_partition_increase`].
pub fn plan(
    desired: &[TopicSpec],
    observed: &BTreeMap<String, ObservedTopic>,
    options: PlanOptions,
) -> Result<Plan, ProvisionError> {
    let mut out = Plan::default();
    let mut refusals = Vec::new();
    let mut creates = Vec::new();
    let mut alters = Vec::new();
    let mut grows = Vec::new();
    for spec in desired {
        let Some(have) = observed.get(&spec.name) else {
            creates.push(Action::Create(spec.clone()));
            continue;
        };
        let mut changed = false;
        match have.partitions.cmp(&spec.partitions) {
            std::cmp::Ordering::Greater => refusals.push(format!(
                "{} has {} partitions, the settings ask for {}: Kafka cannot remove partitions; \
                 raise its partitions to {} or more in the settings",
                spec.name, have.partitions, spec.partitions, have.partitions
            )),
            std::cmp::Ordering::Less if !options.allow_partition_increase => refusals.push(format!(
                "{} has {} partitions, the settings ask for {}: adding partitions moves tenant keys \
                 and can reorder records already queued; re-run with --allow-partition-increase \
                 to grow it",
                spec.name, have.partitions, spec.partitions
            )),
            std::cmp::Ordering::Less => {
                changed = true;
                grows.push(Action::AddPartitions {
                    topic: spec.name.clone(),
                    from: have.partitions,
                    to: spec.partitions,
                });
            }
            std::cmp::Ordering::Equal => {}
        }
        if have.replication != spec.replication {
            out.notes.push(format!(
                "{} has replication factor {}, the settings ask for {}: this command does not \
                 move replicas; reassign them with kafka-reassign-partitions",
                spec.name, have.replication, spec.replication
            ));
        }
        let changes: Vec<ConfigChange> = spec
            .configs
            .iter()
            .filter(|(key, want)| {
                !have
                    .effective
                    .get(*key)
                    .is_some_and(|now| same_value(key, now, want))
            })
            .map(|(key, want)| ConfigChange {
                key: key.clone(),
                from: have.effective.get(key).cloned(),
                to: want.clone(),
            })
            .collect();
        if !changes.is_empty() {
            changed = true;
            let mut set = have.overrides.clone();
            set.extend(changes.iter().map(|c| (c.key.clone(), c.to.clone())));
            alters.push(Action::AlterConfigs {
                topic: spec.name.clone(),
                changes,
                set,
            });
        }
        if !changed {
            out.unchanged.push(spec.name.clone());
        }
    }
    if !refusals.is_empty() {
        return Err(ProvisionError::Refused(refusals));
    }
    out.actions.extend(creates);
    out.actions.extend(alters);
    out.actions.extend(grows);
    Ok(out)
}

/// Values compare as numbers when both are numbers, and `cleanup.policy` as a
/// set, so `delete,compact` equals `compact,delete`.
fn same_value(key: &str, now: &str, want: &str) -> bool {
    let (now, want) = (now.trim(), want.trim());
    if let (Ok(a), Ok(b)) = (now.parse::<i64>(), want.parse::<i64>()) {
        return a == b;
    }
    if key == super::spec::CLEANUP_POLICY {
        let set = |v: &str| {
            let mut parts: Vec<String> = v.split(',').map(|p| p.trim().to_owned()).collect();
            parts.sort();
            parts
        };
        return set(now) == set(want);
    }
    now == want
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::Create(spec) => {
                write!(
                    f,
                    "+ create   {}  partitions={} replication={}",
                    spec.name, spec.partitions, spec.replication
                )?;
                for (k, v) in &spec.configs {
                    write!(f, " {k}={v}")?;
                }
                Ok(())
            }
            Action::AlterConfigs { topic, changes, .. } => {
                write!(f, "~ alter    {topic} ")?;
                for c in changes {
                    write!(
                        f,
                        " {}: {} -> {}",
                        c.key,
                        c.from.as_deref().unwrap_or("(unset)"),
                        c.to
                    )?;
                }
                Ok(())
            }
            Action::AddPartitions { topic, from, to } => {
                write!(f, "^ grow     {topic}  partitions: {from} -> {to}")
            }
        }
    }
}
