//! The overflow lanes' side of the adapter. Partition `p` of every lane
//! follows partition `p` of `deliveries`: assigned to this replica's lane
//! consumers, by hand, right after the group assigns `p` here, and revoked
//! (drained and committed with it) before the group may hand `p` over. So a
//! subscription's records, from `deliveries` and from its lane, are scheduled
//! by one replica, in one FIFO (`machine/overflow.rs`).

use std::time::SystemTime;

use hookline_envelope::Delivery;
use rdkafka::{
    consumer::Consumer,
    message::{Headers, Message, OwnedMessage},
    Offset, TopicPartitionList,
};

use crate::{
    events,
    handoff::{Handoff, Written},
    part::{Key, Part},
};

use super::Engine;

/// The header of a moved record: its offset in `deliveries`.
pub(crate) const MOVED_FROM: &str = "hookline-moved-from";

impl Engine {
    /// The lane partitions that follow `parts` (partitions of any input; only
    /// those of `deliveries` have lanes).
    pub(super) fn lane_parts(&self, parts: &[Part]) -> Vec<Part> {
        let overflow = self.machine.overflow();
        parts
            .iter()
            .filter(|p| overflow.is_source(**p))
            .flat_map(|p| {
                (0..self.lane_count).filter_map(move |lane| overflow.lane_part(lane, p.partition))
            })
            .collect()
    }

    /// Assigns the lanes' partitions that follow newly assigned `deliveries`
    /// partitions, from their committed offsets.
    pub(super) fn assign_lanes(&mut self, source: &[Part]) {
        let lanes = self.lane_parts(source);
        if lanes.is_empty() {
            return;
        }
        for part in &lanes {
            let input = usize::from(part.input);
            let mut tpl = TopicPartitionList::new();
            if let Err(error) =
                tpl.add_partition_offset(&self.topics[input], part.partition, Offset::Stored)
            {
                events::LaneAssignFailed {
                    part,
                    error: &error,
                }
                .emit();
                continue;
            }
            if let Err(error) = self.consumers[input].incremental_assign(&tpl) {
                events::LaneAssignFailed {
                    part,
                    error: &error,
                }
                .emit();
            }
        }
        self.machine.assign(&lanes);
    }

    /// After a revoke of `deliveries` partitions was drained and committed:
    /// hands their lanes' partitions back too.
    pub(super) fn unassign_lanes(&self, lanes: &[Part]) {
        for part in lanes {
            let input = usize::from(part.input);
            let mut tpl = TopicPartitionList::new();
            tpl.add_partition(&self.topics[input], part.partition);
            if let Err(error) = self.consumers[input].incremental_unassign(&tpl) {
                events::LaneAssignFailed {
                    part,
                    error: &error,
                }
                .emit();
            }
        }
    }

    /// A fetched record of a lane: its source offset for the machine.
    pub(super) fn note_lane_record(&mut self, part: Part, msg: &OwnedMessage) {
        if self.machine.overflow().lane_of_part(part).is_none() {
            return;
        }
        let moved_from = msg.headers().and_then(|headers| {
            headers
                .iter()
                .find(|h| h.key == MOVED_FROM)
                .and_then(|h| h.value)
                .and_then(|v| std::str::from_utf8(v).ok())
                .and_then(|v| v.parse::<i64>().ok())
        });
        self.machine.lane_record(part, moved_from);
    }

    /// Hands a record of `deliveries` to the next transaction, as it is, for
    /// partition `key.0.partition` of overflow lane `lane`; the machine
    /// finishes its offset in that transaction. `value` is the record's bytes.
    pub(super) fn move_to_lane(
        &mut self,
        key: Key,
        lane: usize,
        (record_key, value): (Option<Vec<u8>>, Vec<u8>),
    ) {
        let Some(topic) = self.ctx.topics.lanes().nth(lane) else {
            // Unreachable: the machine has as many lanes as the topics.
            self.machine
                .complete(key, crate::attempt::Finished::Abandoned);
            return;
        };
        self.commits.defer(Handoff {
            key,
            topic: topic.to_owned(),
            partition: Some(key.0.partition),
            record_key,
            value,
            headers: vec![(MOVED_FROM, key.1.to_string())],
            written: Written::Moved { lane },
            disable: None,
            log: Vec::new(),
        });
    }

    /// [`move_to_lane`](Self::move_to_lane) for a queued record the machine
    /// withdrew when its subscription was promoted.
    pub(super) fn move_queued(&mut self, key: Key, delivery: &Delivery, lane: usize) {
        let record_key = Some(delivery.tenant_id.as_bytes().to_vec());
        self.move_to_lane(key, lane, (record_key, hookline_envelope::encode(delivery)));
    }

    /// Refreshes the overflow gauges.
    pub(super) fn overflow_gauges(&self) {
        let overflow = self.machine.overflow();
        crate::metrics::overflow_gauges(
            overflow.promoted_count(),
            overflow.ceiling(),
            overflow.waiting(),
        );
    }

    /// Publishes who holds this replica's capacity, served at `/capacity`:
    /// the promoted subscriptions (lane, since when), and the top 20
    /// subscriptions and tenants by worker-seconds (then buffered records),
    /// with their records buffered and attempts in flight.
    /// Ids appear here, never in metric labels.
    pub(super) fn publish_capacity(&self) {
        const TOP: usize = 20;
        let now = SystemTime::now();
        let ms = |t: SystemTime| hookline_core::epoch::millis(t);
        let overflow = self.machine.overflow();
        let promoted: Vec<serde_json::Value> = overflow
            .promoted()
            .map(|((partition, sub), since)| {
                let lane = overflow.lane_for(sub);
                serde_json::json!({
                    "partition": partition,
                    "subscription_id": sub,
                    "lane": crate::metrics::lane_label(lane),
                    "since_ms": ms(since),
                    "for_s": now.duration_since(since).unwrap_or_default().as_secs(),
                })
            })
            .collect();
        // Worker-seconds are slot-held seconds charged by the fair share,
        // decayed with a 60 s half-life (`hookline_core::Lanes::usage`).
        let mut usage = self.machine.lanes().usage(now);
        let weight = |ws: f64, buffered: usize| (ws, buffered);
        usage.subscriptions.sort_by(|a, b| {
            weight(b.worker_seconds, b.buffered_records)
                .partial_cmp(&weight(a.worker_seconds, a.buffered_records))
                .unwrap_or(std::cmp::Ordering::Equal)
        });
        usage.tenants.sort_by(|a, b| {
            weight(b.worker_seconds, b.buffered_records)
                .partial_cmp(&weight(a.worker_seconds, a.buffered_records))
                .unwrap_or(std::cmp::Ordering::Equal)
        });
        let subscriptions: Vec<serde_json::Value> = usage
            .subscriptions
            .iter()
            .take(TOP)
            .map(|u| {
                serde_json::json!({
                    "tenant_id": u.tenant_id, "subscription_id": u.subscription_id,
                    "worker_seconds": u.worker_seconds,
                    "buffered": u.buffered_records, "in_flight": u.in_flight,
                })
            })
            .collect();
        let tenants: Vec<serde_json::Value> = usage
            .tenants
            .iter()
            .take(TOP)
            .map(|u| {
                serde_json::json!({
                    "tenant_id": u.tenant_id, "weight": u.weight,
                    "worker_seconds": u.worker_seconds,
                    "buffered": u.buffered_records, "in_flight": u.in_flight,
                })
            })
            .collect();
        let report = serde_json::json!({
            "at_ms": ms(now),
            "overflow": {
                "ceiling": overflow.ceiling(),
                "promoted": promoted,
                "waiting": overflow.waiting(),
            },
            "top_subscriptions": subscriptions,
            "top_tenants": tenants,
        });
        self.health.set_report("capacity", report.to_string());
    }
}
