//! The overflow lanes' side of the adapter. Partition `p` of every lane
//! follows partition `p` of `deliveries`: assigned to this replica's lane
//! consumers, by hand, right after the group assigns `p` here, and revoked
//! (drained and committed with it) before the group may hand `p` over. So a
//! subscription's records, from `deliveries` and from its lane, are scheduled
//! by one replica, in one FIFO (`machine/overflow.rs`).
//!
//! A lane's partitions are assigned at their committed offsets, asked for
//! here until the group coordinator answers. Assigned with `Offset::Stored`
//! instead, librdkafka asks once, and when the coordinator has just moved
//! (a broker shutting down) that fetch fails "Not coordinator" and the
//! partition is never fetched: the deliveries moved to it before were not
//! attempted again (seen in a rolling restart of the brokers).

use std::{
    collections::BTreeMap,
    sync::Arc,
    time::{Duration, SystemTime},
};

use hookline_core::Backoff;
use hookline_envelope::Delivery;
use rdkafka::{
    consumer::Consumer,
    message::{Headers, Message, OwnedMessage},
    Offset, TopicPartitionList,
};
use tokio::time::Instant;

use crate::{
    events,
    part::{Key, Part},
};

use super::Engine;

/// The header of a moved record: its offset in `deliveries`.
pub(crate) use hookline_dispatch_core::build::MOVED_FROM;

/// Longest one ask for a lane's committed offsets waits.
const LANE_OFFSETS_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest the asks go on before a lane partition is left to librdkafka's
/// own fetch: well past a coordinator's move, which takes seconds.
const LANE_OFFSETS_FOR: Duration = Duration::from_secs(60);
const LANE_OFFSETS_RETRY: Backoff =
    Backoff::new(Duration::from_millis(200), Duration::from_secs(2)).with_jitter(0.5);

/// Where a lane partition is read from, given its committed offset: there,
/// or from the beginning when nothing is committed yet (a lane partition
/// nobody has finished a record of holds only records still to do).
fn start_at(committed: Offset) -> Offset {
    match committed {
        Offset::Offset(o) if o >= 0 => Offset::Offset(o),
        _ => Offset::Beginning,
    }
}

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
    /// partitions, from their committed offsets (the beginning where none is
    /// committed, as `auto.offset.reset` would).
    pub(super) async fn assign_lanes(&mut self, source: &[Part]) {
        let lanes = self.lane_parts(source);
        if lanes.is_empty() {
            return;
        }
        let mut by_input: BTreeMap<u16, Vec<i32>> = BTreeMap::new();
        for part in &lanes {
            by_input.entry(part.input).or_default().push(part.partition);
        }
        for (input, partitions) in by_input {
            let index = usize::from(input);
            let offsets = self.lane_offsets(index, &partitions).await;
            let mut tpl = TopicPartitionList::new();
            for (partition, offset) in offsets {
                if let Err(error) = tpl.add_partition_offset(&self.topics[index], partition, offset)
                {
                    events::LaneAssignFailed {
                        part: &(input, partition),
                        error: &error,
                    }
                    .emit();
                }
            }
            if let Err(error) = self.consumers[index].incremental_assign(&tpl) {
                events::LaneAssignFailed {
                    part: &(input, &partitions),
                    error: &error,
                }
                .emit();
            }
        }
        self.machine.assign(&lanes);
    }

    /// The committed offsets of `partitions` of lane input `index`, asked
    /// for until the coordinator answers (the loop beats its health
    /// meanwhile). Only past `LANE_OFFSETS_FOR` does a partition fall back
    /// to `Offset::Stored`, librdkafka's own single try.
    async fn lane_offsets(&mut self, index: usize, partitions: &[i32]) -> Vec<(i32, Offset)> {
        let topic = self.topics[index].clone();
        let mut query = TopicPartitionList::new();
        for &partition in partitions {
            query.add_partition(&topic, partition);
        }
        let deadline = Instant::now() + LANE_OFFSETS_FOR;
        let mut backoff = LANE_OFFSETS_RETRY;
        loop {
            let consumer = Arc::clone(&self.consumers[index]);
            let asked = query.clone();
            let answer = tokio::task::spawn_blocking(move || {
                consumer.committed_offsets(asked, LANE_OFFSETS_TIMEOUT)
            })
            .await;
            let error = match answer {
                Ok(Ok(committed)) => {
                    return partitions
                        .iter()
                        .map(|&partition| {
                            let offset = committed
                                .find_partition(&topic, partition)
                                .map_or(Offset::Invalid, |e| e.offset());
                            (partition, start_at(offset))
                        })
                        .collect();
                }
                Ok(Err(error)) => error.to_string(),
                Err(join) => join.to_string(),
            };
            events::LaneAssignFailed {
                part: &(index, partitions),
                error: &format!("reading the committed offsets: {error}"),
            }
            .emit();
            self.health.beat(super::LOOP);
            if Instant::now() >= deadline {
                return partitions.iter().map(|&p| (p, Offset::Stored)).collect();
            }
            hookline_runtime::retry::pause(&mut backoff).await;
        }
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

#[cfg(test)]
mod tests {
    use rdkafka::Offset;

    use super::start_at;

    #[test]
    fn a_lane_partition_starts_at_its_committed_offset_or_the_beginning() {
        assert_eq!(start_at(Offset::Offset(42)), Offset::Offset(42));
        assert_eq!(start_at(Offset::Offset(0)), Offset::Offset(0));
        for nothing_committed in [
            Offset::Invalid,
            Offset::Beginning,
            Offset::End,
            Offset::Stored,
        ] {
            assert_eq!(start_at(nothing_committed), Offset::Beginning);
        }
    }
}
