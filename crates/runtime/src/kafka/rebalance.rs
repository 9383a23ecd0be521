//! Rebalances of hookline's group consumers: every `ConsumerContext` applies them with
//! [`cooperative_rebalance`], and a stage whose loop owns its partitions' state and commits
//! itself ([`manual_commit_consumer`]) uses [`RevokeRecorder`], whose callbacks only note
//! what was revoked for the loop to act on after `recv` returns. No producing or committing
//! happens inside a callback.

use std::{collections::BTreeSet, sync::Mutex};

use rdkafka::{
    consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance, StreamConsumer},
    error::KafkaError,
    ClientContext, TopicPartitionList,
};

use crate::{config::CommonArgs, health::Health, RuntimeError};

/// The readiness condition a stage holds until each of its group consumers has
/// had its first assignment, empty or not. Before it, the replica is not in
/// its group yet: a group forms over rebalances that its members learn of at
/// their next heartbeat (after a kill -9, once the dead member's session has
/// expired), and a replica that said ready before it would let a rollout take
/// the next one down while the group is still forming.
pub const GROUP_MEMBERSHIP: &str = "group membership";

/// What [`GROUP_MEMBERSHIP`] says while the named consumers wait.
pub fn joining(consumers: &[&str]) -> Result<(), String> {
    if consumers.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "joining the consumer group: no assignment yet for {}",
            consumers.join(", ")
        ))
    }
}

/// A rebalance of a consumer configured with
/// [`ASSIGNMENT_STRATEGY`](super::ASSIGNMENT_STRATEGY): the
/// context's `pre_rebalance`, then `incremental_assign`/`incremental_unassign`,
/// then its `post_rebalance`. Every hookline `ConsumerContext` overrides
/// `rebalance` with this.
///
/// rdkafka's default `rebalance` asks librdkafka for the rebalance protocol at
/// callback time. When a consumer's group session is lost (a broker restart
/// that outlasts `session.timeout.ms`), librdkafka can answer NONE there; the
/// default then calls the eager `assign(NULL)`, librdkafka refuses it for a
/// cooperative assignor, the error is dropped, and the consumer waits for an
/// unassign that never comes: it never rejoins its group (seen in `make faults`
/// `broker_restart`: fanout idle, its group empty). The strategy is ours, so
/// the incremental calls are always the right ones; the eager ones are only a
/// fallback if librdkafka refuses them, and every refusal is logged.
pub fn cooperative_rebalance<C: ConsumerContext>(
    context: &C,
    consumer: &BaseConsumer<C>,
    err: rdkafka::types::RDKafkaRespErr,
    tpl: &mut rdkafka::TopicPartitionList,
) {
    use rdkafka::types::RDKafkaRespErr;
    let rebalance = match err {
        RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => Rebalance::Assign(tpl),
        RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS => Rebalance::Revoke(tpl),
        other => Rebalance::Error(KafkaError::Rebalance(other.into())),
    };
    context.pre_rebalance(consumer, &rebalance);
    let applied = match &rebalance {
        Rebalance::Assign(tpl) => consumer.incremental_assign(tpl).or_else(|error| {
            tracing::warn!(%error, "incremental_assign refused; assigning eagerly");
            consumer.assign(tpl)
        }),
        Rebalance::Revoke(tpl) => consumer.incremental_unassign(tpl).or_else(|error| {
            tracing::warn!(%error, "incremental_unassign refused; unassigning eagerly");
            consumer.unassign()
        }),
        Rebalance::Error(error) => {
            tracing::warn!(%error, "rebalance error");
            Ok(())
        }
    };
    match (applied, &rebalance) {
        (Err(error), _) => {
            tracing::error!(%error, "could not apply a rebalance; the consumer may stop receiving")
        }
        (Ok(()), Rebalance::Assign(tpl)) => record_assigned(tpl),
        (Ok(()), _) => {}
    }
    context.post_rebalance(consumer, &rebalance);
}

/// Every topic a group consumer of this process has been assigned a partition
/// of, since the process started.
static ASSIGNED_TOPICS: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());

fn record_assigned(tpl: &TopicPartitionList) {
    let mut seen = ASSIGNED_TOPICS.lock().unwrap_or_else(|p| p.into_inner());
    for e in tpl.elements() {
        if !seen.contains(e.topic()) {
            seen.insert(e.topic().to_owned());
        }
    }
}

/// Every topic a group consumer of this process has been assigned a partition
/// of so far: a program that runs the stages in its own process (the demo)
/// waits on it until they consume, rather than producing into a group's join
/// delay.
pub fn assigned_topics() -> BTreeSet<String> {
    ASSIGNED_TOPICS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone()
}

/// The `(topic, partition)` pairs of a partition list, in its order.
pub fn partitions(tpl: &TopicPartitionList) -> Vec<(String, i32)> {
    tpl.elements()
        .iter()
        .map(|e| (e.topic().to_owned(), e.partition()))
        .collect()
}

/// A consumer context whose rebalance callbacks only log and record the revoked
/// partitions; the stage's loop takes them with [`take_revoked`](Self::take_revoked)
/// and drops their state.
#[derive(Debug, Default)]
pub struct RevokeRecorder {
    revoked: Mutex<Vec<(String, i32)>>,
    /// Where to report [`GROUP_MEMBERSHIP`] at the first assignment.
    joining: Mutex<Option<Health>>,
}

impl RevokeRecorder {
    /// Holds `health` unready on [`GROUP_MEMBERSHIP`] until this consumer's
    /// first assignment. Call it before subscribing.
    pub fn hold_ready_until_assigned(&self, health: &Health, consumer: &str) {
        health.set_ready(GROUP_MEMBERSHIP, joining(&[consumer]));
        *self.joining.lock().unwrap_or_else(|p| p.into_inner()) = Some(health.clone());
    }

    /// Partitions revoked since the last call.
    pub fn take_revoked(&self) -> Vec<(String, i32)> {
        std::mem::take(&mut *self.revoked.lock().unwrap_or_else(|p| p.into_inner()))
    }

    fn record(&self, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Revoke(tpl) => {
                let revoked = partitions(tpl);
                tracing::info!(partitions = ?revoked, "partitions revoked");
                self.revoked
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .extend(revoked);
            }
            Rebalance::Assign(tpl) => {
                tracing::info!(partitions = ?partitions(tpl), "partitions assigned");
                let joined = self
                    .joining
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .take();
                if let Some(health) = joined {
                    health.set_ready(GROUP_MEMBERSHIP, Ok(()));
                }
            }
            Rebalance::Error(e) => tracing::warn!(error = %e, "rebalance error"),
        }
    }
}

/// The consumer of a stage whose loop commits itself after its output is durable:
/// [`group_reader_config`](super::group_reader_config) (committed records only, from the
/// earliest offset when the group has none, no automatic offset store or commit), revokes
/// recorded.
pub fn manual_commit_consumer(
    common: &CommonArgs,
    client_id: &str,
    group_id: &str,
) -> Result<StreamConsumer<RevokeRecorder>, RuntimeError> {
    super::group_reader_config(common, client_id, group_id, None)?
        .create_with_context(RevokeRecorder::default())
        .map_err(|e| RuntimeError::kafka(format!("creating the {client_id} consumer"), e))
}

impl ClientContext for RevokeRecorder {}

impl ConsumerContext for RevokeRecorder {
    fn rebalance(
        &self,
        consumer: &BaseConsumer<Self>,
        err: rdkafka::types::RDKafkaRespErr,
        tpl: &mut TopicPartitionList,
    ) {
        cooperative_rebalance(self, consumer, err, tpl);
    }

    fn pre_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        self.record(rebalance);
    }
}

#[cfg(test)]
mod tests {
    use rdkafka::{error::RDKafkaErrorCode, Offset};

    use super::*;

    fn list(parts: &[(&str, i32)]) -> TopicPartitionList {
        let mut tpl = TopicPartitionList::new();
        for (topic, partition) in parts {
            tpl.add_partition_offset(topic, *partition, Offset::Invalid)
                .unwrap();
        }
        tpl
    }

    #[test]
    fn revoked_partitions_are_kept_until_taken_once() {
        let c = RevokeRecorder::default();
        c.record(&Rebalance::Revoke(&list(&[
            ("p.events", 0),
            ("p.events", 3),
        ])));
        c.record(&Rebalance::Revoke(&list(&[("p.deliveries", 1)])));
        assert_eq!(
            c.take_revoked(),
            [
                ("p.events".to_owned(), 0),
                ("p.events".to_owned(), 3),
                ("p.deliveries".to_owned(), 1)
            ]
        );
        assert!(c.take_revoked().is_empty());
    }

    #[test]
    fn assignments_and_errors_revoke_nothing() {
        let c = RevokeRecorder::default();
        c.record(&Rebalance::Assign(&list(&[("p.events", 0)])));
        c.record(&Rebalance::Error(KafkaError::Rebalance(
            RDKafkaErrorCode::Fail,
        )));
        assert!(c.take_revoked().is_empty());
    }

    #[test]
    fn readiness_is_held_until_the_first_assignment_even_an_empty_one() {
        let health = Health::new(std::time::Duration::from_secs(30));
        health.set_ready("stage", Ok(()));
        let c = RevokeRecorder::default();
        c.hold_ready_until_assigned(&health, "events");
        let verdict = health.readiness();
        assert!(!verdict.ok);
        assert!(
            verdict.detail.contains(
                "group membership: not ready: joining the consumer group: no assignment yet for events"
            ),
            "{}",
            verdict.detail
        );
        c.record(&Rebalance::Revoke(&list(&[])));
        c.record(&Rebalance::Error(KafkaError::Rebalance(
            RDKafkaErrorCode::Fail,
        )));
        assert!(!health.readiness().ok, "only an assignment is a join");
        c.record(&Rebalance::Assign(&list(&[])));
        assert!(health.readiness().ok, "{}", health.readiness().detail);
        // Later rebalances leave it alone.
        health.set_ready(GROUP_MEMBERSHIP, Err("someone else's".into()));
        c.record(&Rebalance::Assign(&list(&[("p.events", 0)])));
        assert!(!health.readiness().ok);
    }

    #[test]
    fn partitions_keep_the_list_order() {
        let tpl = list(&[("b", 2), ("a", 1)]);
        assert_eq!(partitions(&tpl), [("b".to_owned(), 2), ("a".to_owned(), 1)]);
    }
}
