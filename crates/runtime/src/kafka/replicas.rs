//! Why a stage's writes do not go through while the cluster refuses them: a
//! partition with fewer in-sync replicas than its `min.insync.replicas`
//! answers every `acks=all` write NOT_ENOUGH_REPLICAS, and one without a
//! leader takes none. librdkafka retries such writes by itself and tells the
//! application nothing until they time out, so a stage whose transaction
//! waits asks the cluster's metadata and says which partitions hold it up:
//! one warning per change, counted, and the stage unready with that reason
//! until a transaction commits again. The writes themselves are retried as
//! before (the batch stays in memory), so nothing is lost meanwhile.

use std::{collections::HashMap, fmt, time::Duration};

use rdkafka::{
    admin::{AdminClient, AdminOptions, ResourceSpecifier},
    client::DefaultClientContext,
    metadata::Metadata,
};

use crate::{config::CommonArgs, health::Health, metric_names as m};

/// The readiness condition refused writes hold unready.
pub const WRITES_READY: &str = "kafka writes";

/// How long a transaction's records may wait for their acknowledgements
/// before the stage asks why (a healthy commit takes milliseconds; a leader
/// moving, a few hundred).
pub const SLOW_WRITES: Duration = Duration::from_secs(3);

/// Why a partition takes no `acks=all` write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shortfall {
    /// Fewer in-sync replicas than `min.insync.replicas`: NOT_ENOUGH_REPLICAS.
    InSync { in_sync: usize, min: usize },
    /// No leader at all.
    NoLeader,
}

/// The partitions of one topic that refuse writes, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub topic: String,
    /// (partition, why), by partition.
    pub partitions: Vec<(i32, Shortfall)>,
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |want: fn(&Shortfall) -> bool| {
            self.partitions
                .iter()
                .filter(|(_, s)| want(s))
                .map(|(p, _)| p.to_string())
                .collect::<Vec<_>>()
        };
        let short = list(|s| matches!(s, Shortfall::InSync { .. }));
        let leaderless = list(|s| *s == Shortfall::NoLeader);
        let mut parts = Vec::new();
        if !short.is_empty() {
            let (in_sync, min) = self
                .partitions
                .iter()
                .find_map(|(_, s)| match s {
                    Shortfall::InSync { in_sync, min } => Some((*in_sync, *min)),
                    Shortfall::NoLeader => None,
                })
                .unwrap_or_default();
            parts.push(format!(
                "writes to {}[{}] refused: not enough in-sync replicas ({in_sync} in sync, min.insync.replicas {min})",
                self.topic,
                short.join(",")
            ));
        }
        if !leaderless.is_empty() {
            parts.push(format!(
                "writes to {}[{}] wait: no leader",
                self.topic,
                leaderless.join(",")
            ));
        }
        f.write_str(&parts.join("; "))
    }
}

/// The partitions of `topic` that refuse `acks=all` writes, given each
/// partition's (id, leader, in-sync replicas) and the topic's
/// `min.insync.replicas`; `None` when every partition takes them.
pub fn refused(
    topic: &str,
    partitions: &[(i32, i32, usize)],
    min_insync: usize,
) -> Option<Refused> {
    let mut short: Vec<(i32, Shortfall)> = partitions
        .iter()
        .filter_map(|&(id, leader, in_sync)| {
            if leader < 0 {
                Some((id, Shortfall::NoLeader))
            } else if in_sync < min_insync {
                Some((
                    id,
                    Shortfall::InSync {
                        in_sync,
                        min: min_insync,
                    },
                ))
            } else {
                None
            }
        })
        .collect();
    short.sort_by_key(|(id, _)| *id);
    (!short.is_empty()).then(|| Refused {
        topic: topic.to_owned(),
        partitions: short,
    })
}

/// One stage's view of its refused writes: the first diagnosis of a change
/// is logged at warn level, counted and makes the stage unready; a commit
/// ([`Writes::flowing`]) makes it ready again and says so.
#[derive(Debug)]
pub struct Writes {
    health: Health,
    stage: &'static str,
    current: Vec<Refused>,
    /// `min.insync.replicas` of each topic asked about (it rarely changes).
    min_insync: HashMap<String, usize>,
}

impl Writes {
    pub fn new(health: Health, stage: &'static str) -> Self {
        Self {
            health,
            stage,
            current: Vec::new(),
            min_insync: HashMap::new(),
        }
    }

    /// Records what holds the writes up now (nothing: no change; the cause
    /// is elsewhere, a coordinator or the network, and the transaction's own
    /// error says so).
    pub fn refused(&mut self, now: Vec<Refused>) {
        if now.is_empty() || now == self.current {
            return;
        }
        let reason = now
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ");
        tracing::warn!(
            stage = self.stage,
            partitions = now.iter().map(|r| r.partitions.len()).sum::<usize>(),
            "kafka writes held up: {reason}; retrying until the replicas are back"
        );
        metrics::counter!(m::KAFKA_WRITES_REFUSED, m::label::STAGE => self.stage).increment(1);
        self.health.set_ready(WRITES_READY, Err(reason));
        self.current = now;
    }

    /// A transaction committed: the writes flow again.
    pub fn flowing(&mut self) {
        if !self.current.is_empty() {
            tracing::info!(stage = self.stage, "kafka writes flowing again");
            self.health.set_ready(WRITES_READY, Ok(()));
            self.current.clear();
        }
    }

    /// The topics whose `min.insync.replicas` is not known yet.
    pub fn unknown<'a>(&self, topics: &'a [String]) -> Vec<&'a str> {
        topics
            .iter()
            .filter(|t| !self.min_insync.contains_key(*t))
            .map(String::as_str)
            .collect()
    }

    /// Diagnoses `topics` from `metadata` (one topic's or several).
    pub fn diagnose(&self, metadata: &Metadata) -> Vec<Refused> {
        metadata
            .topics()
            .iter()
            .filter_map(|t| {
                let min = *self.min_insync.get(t.name())?;
                let parts: Vec<(i32, i32, usize)> = t
                    .partitions()
                    .iter()
                    .map(|p| (p.id(), p.leader(), p.isr().len()))
                    .collect();
                refused(t.name(), &parts, min)
            })
            .collect()
    }

    /// Learns the `min.insync.replicas` of `topics` from the cluster.
    pub async fn learn_min_insync(&mut self, common: &CommonArgs, topics: &[&str]) {
        if topics.is_empty() {
            return;
        }
        let admin: AdminClient<DefaultClientContext> =
            match super::client_config(common, "hookline-writes-check").and_then(|c| {
                c.create()
                    .map_err(|e| crate::RuntimeError::kafka("creating the admin client", e))
            }) {
                Ok(admin) => admin,
                Err(error) => {
                    tracing::debug!(%error, "cannot ask topics' min.insync.replicas");
                    return;
                }
            };
        let specifiers: Vec<ResourceSpecifier<'_>> =
            topics.iter().map(|t| ResourceSpecifier::Topic(t)).collect();
        let opts = AdminOptions::new().request_timeout(Some(Duration::from_secs(5)));
        let Ok(results) = admin.describe_configs(&specifiers, &opts).await else {
            return;
        };
        for (topic, result) in topics.iter().zip(results) {
            let min = result.ok().and_then(|r| {
                r.get("min.insync.replicas")
                    .and_then(|e| e.value.as_deref())
                    .and_then(|v| v.trim().parse::<usize>().ok())
            });
            if let Some(min) = min {
                self.min_insync.insert((*topic).to_owned(), min);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (partition, leader, in sync) of each partition.
    type Parts = &'static [(i32, i32, usize)];
    /// The partitions that refuse writes, and why (None: none).
    type Want = Option<Vec<(i32, Shortfall)>>;

    #[test]
    fn partitions_below_min_isr_or_without_leader_refuse_writes() {
        let cases: [(Parts, usize, Want); 4] = [
            (&[(0, 1, 3), (1, 2, 2), (2, 3, 3)], 2, None),
            (
                &[(0, 1, 1), (1, 1, 3), (2, 1, 1)],
                2,
                Some(vec![
                    (0, Shortfall::InSync { in_sync: 1, min: 2 }),
                    (2, Shortfall::InSync { in_sync: 1, min: 2 }),
                ]),
            ),
            (
                &[(1, -1, 0), (0, 2, 1)],
                2,
                Some(vec![
                    (0, Shortfall::InSync { in_sync: 1, min: 2 }),
                    (1, Shortfall::NoLeader),
                ]),
            ),
            // min.insync.replicas 1 (a dev broker): one replica is enough.
            (&[(0, 1, 1)], 1, None),
        ];
        for (parts, min, want) in cases {
            let got = refused("deliveries", parts, min).map(|r| r.partitions);
            assert_eq!(got, want, "{parts:?} min {min}");
        }
    }

    #[test]
    fn the_reason_names_topic_partitions_and_replicas() {
        let r = refused("p.deliveries", &[(3, 1, 1), (4, -1, 0)], 2).unwrap();
        assert_eq!(
            r.to_string(),
            "writes to p.deliveries[3] refused: not enough in-sync replicas \
             (1 in sync, min.insync.replicas 2); writes to p.deliveries[4] wait: no leader"
        );
    }

    #[test]
    fn refused_writes_are_unready_until_a_commit() {
        let health = Health::new(Duration::from_secs(60));
        health.set_ready("loop", Ok(()));
        let mut writes = Writes::new(health.clone(), "fanout");
        writes.refused(Vec::new());
        assert!(health.readiness().ok, "nothing diagnosed: no change");
        let now = vec![refused("deliveries", &[(3, 1, 1)], 2).unwrap()];
        writes.refused(now.clone());
        let verdict = health.readiness();
        assert!(!verdict.ok);
        assert!(
            verdict
                .detail
                .contains("writes to deliveries[3] refused: not enough in-sync replicas"),
            "{}",
            verdict.detail
        );
        writes.refused(now);
        assert!(!health.readiness().ok);
        writes.flowing();
        assert!(health.readiness().ok);
    }
}
