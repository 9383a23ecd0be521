//! The one home of offsets: each assigned partition's watermark (the lowest
//! offset not yet finished), and the only code that stores or commits. Only a
//! watermark is ever stored, so the committed offset never passes a record that
//! is queued, in flight, or whose follow-up is not yet durable: a crash
//! re-attempts (with the same `webhook-id`) rather than loses.

use std::{collections::BTreeMap, sync::Arc};

use hookline_core::{PartitionWatermark, WatermarkError};
use rdkafka::{
    consumer::{BaseConsumer, CommitMode, Consumer},
    error::KafkaError,
    types::RDKafkaErrorCode,
    Offset, TopicPartitionList,
};

use crate::{consumer::DispatchContext, events, part::Part};

#[derive(Debug, Default)]
struct Tracked {
    watermark: PartitionWatermark,
    /// The offset last stored for this partition.
    stored: Option<i64>,
}

/// Watermarks of the assigned partitions.
#[derive(Debug, Default)]
pub(crate) struct Offsets {
    parts: BTreeMap<Part, Tracked>,
}

impl Offsets {
    /// Starts a partition afresh (on assignment): it is read from its committed offset.
    pub(crate) fn assign(&mut self, part: Part) {
        self.parts.insert(part, Tracked::default());
    }

    pub(crate) fn track(&mut self, part: Part, offset: i64) -> Result<(), WatermarkError> {
        self.parts.entry(part).or_default().watermark.track(offset)
    }

    /// Marks a record done; a partition no longer assigned is ignored.
    pub(crate) fn finish(&mut self, part: Part, offset: i64) -> Result<(), WatermarkError> {
        match self.parts.get_mut(&part) {
            Some(t) => t.watermark.finish(offset),
            None => Ok(()),
        }
    }

    /// The offset that would be committed for `part` (for tests and gauges).
    #[cfg(test)]
    pub(crate) fn committable(&self, part: Part) -> Option<i64> {
        self.parts.get(&part)?.watermark.committable()
    }

    /// For a seek back to `offset`: forgets that offset and every later one (they
    /// are fetched and tracked again), via `PartitionWatermark::reset_to`, so the
    /// stored offset never passes them. Returns how many unfinished were dropped.
    pub(crate) fn reset_to(&mut self, part: Part, offset: i64) -> usize {
        self.parts
            .get_mut(&part)
            .map_or(0, |t| t.watermark.reset_to(offset))
    }

    /// Forgets partitions (after their final store and commit on revoke).
    pub(crate) fn forget(&mut self, parts: &[Part]) {
        for p in parts {
            self.parts.remove(p);
        }
    }

    /// Stores the watermark of every partition in `only` (all when `None`) whose
    /// watermark moved since it was last stored, each with the consumer of its
    /// input (`consumers` is indexed like the engine's inputs).
    pub(crate) fn store(
        &mut self,
        consumers: &[Arc<BaseConsumer<DispatchContext>>],
        topic_of: impl Fn(Part) -> String,
        only: Option<&[Part]>,
    ) {
        for (input, consumer) in consumers.iter().enumerate() {
            self.store_input(consumer, input, &topic_of, only);
        }
    }

    fn store_input(
        &mut self,
        consumer: &BaseConsumer<DispatchContext>,
        input: usize,
        topic_of: &impl Fn(Part) -> String,
        only: Option<&[Part]>,
    ) {
        let mut tpl = TopicPartitionList::new();
        let mut moved = Vec::new();
        for (part, t) in &self.parts {
            if usize::from(part.input) != input || only.is_some_and(|o| !o.contains(part)) {
                continue;
            }
            let Some(committable) = t.watermark.committable() else {
                continue;
            };
            if t.stored == Some(committable) {
                continue;
            }
            if tpl
                .add_partition_offset(
                    &topic_of(*part),
                    part.partition,
                    Offset::Offset(committable),
                )
                .is_ok()
            {
                moved.push((*part, committable));
            }
        }
        if moved.is_empty() {
            return;
        }
        match consumer.store_offsets(&tpl) {
            Ok(()) => {
                for (part, offset) in moved {
                    if let Some(t) = self.parts.get_mut(&part) {
                        t.stored = Some(offset);
                    }
                }
            }
            // A partition being handed over refuses stores; its new owner re-reads.
            Err(error) => events::OffsetStoreFailed { error: &error }.emit(),
        }
    }
}

/// Commits the stored offsets of `consumers` now and waits for the broker
/// (revoke, shutdown).
pub(crate) async fn commit_now(consumers: &[Arc<BaseConsumer<DispatchContext>>]) {
    let consumers = consumers.to_vec();
    let commit = move || -> Vec<KafkaError> {
        consumers
            .iter()
            .filter_map(|c| c.commit_consumer_state(CommitMode::Sync).err())
            .filter(|e| *e != KafkaError::ConsumerCommit(RDKafkaErrorCode::NoOffset))
            .collect()
    };
    match tokio::task::spawn_blocking(commit).await {
        Ok(errors) if errors.is_empty() => tracing::debug!("offsets committed"),
        Ok(errors) => {
            for error in errors {
                events::CommitFailed { error: &error }.emit()
            }
        }
        Err(error) => events::CommitFailed { error: &error }.emit(),
    }
}
