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
    part::{Key, Part},
};

use super::Engine;

/// The header of a moved record: its offset in `deliveries`.
pub(crate) use hookline_dispatch_core::build::MOVED_FROM;

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
    pub(super) fn move_to_lane(&mut self, key: Key, lane: usize, read: (Option<Vec<u8>>, Vec<u8>)) {
        match self.ctx.handoffs.moved(key, lane, read) {
            Ok(handoff) => self.commits.defer(handoff),
            Err(missing) => {
                events::missing_topic(missing);
                self.machine
                    .complete(key, crate::attempt::Finished::Abandoned);
            }
        }
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

    /// Publishes who holds this replica's capacity, served at `/capacity`
    /// and read by `hookline-dispatcher capacity` ([`crate::capacity`]).
    pub(super) fn publish_capacity(&self) {
        let now = SystemTime::now();
        let overflow = self.machine.overflow();
        let promoted = overflow
            .promoted()
            .map(|((partition, tenant), since)| crate::capacity::Promoted {
                partition: *partition,
                tenant_id: tenant.clone(),
                lane: crate::metrics::lane_label(overflow.lane_for(tenant)).to_owned(),
                since_ms: hookline_core::epoch::millis(since),
                for_s: now.duration_since(since).unwrap_or_default().as_secs(),
            })
            .collect();
        let report = crate::capacity::Report::new(
            now,
            promoted,
            overflow.ceiling(),
            overflow.waiting(),
            self.machine.lanes().usage(now),
        );
        match serde_json::to_string(&report) {
            Ok(json) => self.health.set_report("capacity", json),
            Err(e) => tracing::warn!(error = %e, "the capacity report could not be written"),
        }
    }
}
