//! The duplicate-admission windows of the assigned `events` partitions (the
//! decisions are [`hookline_core::admission`]'s) and their rebuild on assignment.
//!
//! Guarantee: a partition's window has observed exactly the partition's records
//! before the next one the front reader judges, whether they were judged live
//! or read back by [`rebuild`], so a restart or a rebalance changes no decision
//! (beyond what `--dedup-max-keys` evicts early). The stream time that locates
//! the rebuild's start rides in the committed offset's metadata, written in the
//! same transaction as the offset (`crate::read_past::encode`, at or before
//! the committed offset's record, so the rebuild reads at least what it
//! needs); without it (first run, the window just turned on) the rebuild
//! starts one window before now: exact when the records after the commit carry
//! timestamps close to now, approximate otherwise.

use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use hookline_core::admission::{self, Admission, AdmissionWindow};
use hookline_envelope::DomainEvent;
use hookline_runtime::{config::CommonArgs, kafka, RuntimeError};
use rdkafka::{
    consumer::{BaseConsumer, Consumer},
    error::KafkaError,
    message::{BorrowedMessage, Message},
    Offset, TopicPartitionList,
};

use crate::{metrics as fm, transform};

/// Longest a rebuild waits for its next record before it fails (and is retried).
const REBUILD_STALL: Duration = Duration::from_secs(30);
/// Longest the lookup of the window's first offset waits before the rebuild
/// fails and is retried (the loop's `REBUILD_RETRY`, from 1 s) by a new
/// reader. The lookup is one request to the partition's leader, answered in
/// milliseconds; but a reader whose metadata still names a broker that died
/// sends it there, and librdkafka then waits out the whole timeout ("Meta
/// data fetch error: OperationTimedOut") where a new reader, with the
/// cluster's current metadata, answers at once. With `REBUILD_STALL` here a
/// partition's first record after a broker's death waited 30 s.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(5);
const POLL: Duration = Duration::from_millis(200);

/// The windows of the partitions this replica owns.
#[derive(Debug)]
pub(crate) struct Windows {
    window: Duration,
    max_keys: usize,
    partitions: HashMap<i32, AdmissionWindow>,
}

impl Windows {
    pub(crate) fn new(window: Duration, max_keys: u64) -> Self {
        Self {
            window,
            max_keys: usize::try_from(max_keys).unwrap_or(usize::MAX),
            partitions: HashMap::new(),
        }
    }

    /// Whether `partition`'s window is in place (rebuilt or started since its
    /// assignment).
    pub(crate) fn has(&self, partition: i32) -> bool {
        self.partitions.contains_key(&partition)
    }

    pub(crate) fn install(&mut self, partition: i32, window: AdmissionWindow) {
        self.partitions.insert(partition, window);
    }

    /// Forgets a revoked partition's window: its next owner rebuilds it.
    pub(crate) fn forget(&mut self, partition: i32) {
        self.partitions.remove(&partition);
    }

    /// Decides one usable event, the partition's next record, and counts what the
    /// window had to evict early. A record without a timestamp is not part of the
    /// window (so the rebuild, which skips it too, agrees).
    pub(crate) fn admit(
        &mut self,
        partition: i32,
        timestamp_ms: Option<i64>,
        event: &DomainEvent,
    ) -> Admission {
        let (Some(window), Some(at)) = (self.partitions.get_mut(&partition), timestamp_ms) else {
            return Admission::Admit;
        };
        let (key, print) = transform::admission_key(event);
        let observed = window.observe(key, print, at);
        fm::evicted_early(observed.evicted_early);
        observed.admission
    }

    /// The stream time of `partition`'s window: the largest record time seen.
    pub(crate) fn stream_time(&self, partition: i32) -> Option<i64> {
        self.partitions.get(&partition)?.stream_time()
    }

    pub(crate) fn window(&self) -> Duration {
        self.window
    }

    pub(crate) fn max_keys(&self) -> usize {
        self.max_keys
    }
}

/// A record's Kafka timestamp (create or log-append time), the window's clock.
pub(crate) fn record_time<M: Message>(msg: &M) -> Option<i64> {
    msg.timestamp().to_millis()
}

/// What to rebuild: one partition, up to (not including) `end`, the offset of
/// the first record the loop will process.
#[derive(Debug, Clone)]
pub(crate) struct RebuildSpec {
    pub topic: String,
    pub partition: i32,
    pub end: i64,
    /// Where the window reaches back from: the committed stream time, else now.
    pub from_stream_time: i64,
    pub window: Duration,
    pub max_keys: usize,
    pub max_payload_bytes: usize,
}

/// A rebuilt window and the records read for it.
#[derive(Debug)]
pub(crate) struct Rebuilt {
    pub window: AdmissionWindow,
    pub records: u64,
    pub start: i64,
}

/// The group-less, `read_committed` consumer that reads partitions back for
/// their windows. Created on the first rebuild and kept for the next ones: a
/// librdkafka client costs a connection to start and ~100 ms to destroy, and
/// an assignment rebuilds every new partition's window one after another
/// while the loop waits (12 partitions: over a second on every start, all of
/// it added to the first events' latency).
pub(crate) struct Reader {
    consumer: BaseConsumer,
}

impl std::fmt::Debug for Reader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reader").finish_non_exhaustive()
    }
}

impl Reader {
    pub(crate) fn new(common: &CommonArgs) -> Result<Self, RuntimeError> {
        let client_id = "hookline-fanout-dedup-rebuild";
        // It stops at an offset, and takes any event it is handed for an error.
        let consumer = kafka::reader_config(common, client_id, kafka::AtEnd::Quiet)?
            .create()
            .map_err(|e| {
                RuntimeError::kafka("creating the admission-window reader".to_owned(), e)
            })?;
        Ok(Self { consumer })
    }
}

/// Reads the partition from the first record whose timestamp is at least one
/// window before `from_stream_time` up to `end` with `reader`, feeding every
/// usable event to a new window exactly as the live loop does. The reader is
/// left without an assignment. Blocking: run it off the runtime.
pub(crate) fn rebuild(reader: &Reader, spec: &RebuildSpec) -> Result<Rebuilt, RuntimeError> {
    let result = read_back(&reader.consumer, spec);
    // Stop fetching until the next rebuild; an error here leaves the reader
    // fetching a partition nobody reads, which its next `assign` replaces.
    if let Err(error) = reader.consumer.unassign() {
        tracing::debug!(%error, "unassigning the admission-window reader");
    }
    result
}

fn read_back(consumer: &BaseConsumer, spec: &RebuildSpec) -> Result<Rebuilt, RuntimeError> {
    let err = |context: &str, e: KafkaError| RuntimeError::kafka(context.to_owned(), e);
    let mut window = AdmissionWindow::new(spec.window, spec.max_keys);
    // Kafka reads negative timestamps as "latest"/"earliest"; none is stored.
    let from = admission::rebuild_from(spec.from_stream_time, spec.window).max(0);
    let mut query = TopicPartitionList::new();
    query
        .add_partition_offset(&spec.topic, spec.partition, Offset::Offset(from))
        .map_err(|e| err("building the offsets_for_times query", e))?;
    let found = consumer
        .offsets_for_times(query, LOOKUP_TIMEOUT)
        .map_err(|e| err("looking up the admission window's first offset", e))?;
    let start = match found
        .find_partition(&spec.topic, spec.partition)
        .map(|e| (e.offset(), e.error()))
    {
        Some((_, Err(e))) => return Err(err("looking up the admission window's first offset", e)),
        Some((Offset::Offset(o), _)) => o,
        // No record that recent: nothing to rebuild from.
        Some((Offset::End, _)) => spec.end,
        other => {
            return Err(RuntimeError::kafka(
                format!(
                    "offsets_for_times answered {other:?} for the admission window's first offset"
                ),
                KafkaError::OffsetFetch(rdkafka::types::RDKafkaErrorCode::InvalidArgument),
            ))
        }
    };
    let mut records = 0;
    if start >= spec.end {
        return Ok(Rebuilt {
            window,
            records,
            start,
        });
    }
    let mut assignment = TopicPartitionList::new();
    assignment
        .add_partition_offset(&spec.topic, spec.partition, Offset::Offset(start))
        .map_err(|e| err("assigning the admission-window reader", e))?;
    consumer
        .assign(&assignment)
        .map_err(|e| err("assigning the admission-window reader", e))?;
    // The reader is reused: anything but this partition's records from
    // `start` on, in order, is left over from an earlier read and skipped, so
    // no record is observed twice.
    let mut next = start;
    let mut last_progress = Instant::now();
    loop {
        match consumer.poll(POLL) {
            None => {}
            Some(Ok(msg))
                if msg.topic() != spec.topic
                    || msg.partition() != spec.partition
                    || msg.offset() < next => {}
            Some(Ok(msg)) => {
                last_progress = Instant::now();
                if msg.offset() >= spec.end {
                    break;
                }
                next = msg.offset() + 1;
                records += 1;
                observe(&mut window, &msg, spec.max_payload_bytes);
            }
            Some(Err(e)) => return Err(err("reading the admission window back", e)),
        }
        if last_progress.elapsed() > REBUILD_STALL {
            return Err(RuntimeError::kafka(
                format!(
                    "reading the admission window back: no record for {REBUILD_STALL:?} before offset {}",
                    spec.end
                ),
                KafkaError::NoMessageReceived,
            ));
        }
    }
    Ok(Rebuilt {
        window,
        records,
        start,
    })
}

/// The live loop's test of which records the window sees, applied to a record
/// read back.
fn observe(window: &mut AdmissionWindow, msg: &BorrowedMessage<'_>, max_payload_bytes: usize) {
    let (Some(at), Ok(event)) = (
        record_time(msg),
        transform::usable_event(msg.payload(), max_payload_bytes),
    ) else {
        return;
    };
    let (key, print) = transform::admission_key(&event);
    fm::evicted_early(window.observe(key, print, at).evicted_early);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stream_time_is_the_largest_record_time_seen() {
        let mut windows = Windows::new(Duration::from_secs(60), 10);
        assert_eq!(windows.stream_time(3), None);
        windows.install(3, AdmissionWindow::new(Duration::from_secs(60), 10));
        assert_eq!(windows.stream_time(3), None, "no record seen yet");
        let event = hookline_envelope::DomainEvent {
            event_id: "e".into(),
            tenant_id: "t".into(),
            event_type: "a".into(),
            occurred_at: 0,
            content_type: "application/json".into(),
            payload: vec![],
            attributes: Default::default(),
        };
        assert_eq!(
            windows.admit(3, Some(1_700_000_000_123), &event),
            Admission::Admit
        );
        assert_eq!(
            windows.admit(3, Some(1_700_000_000_000), &event),
            Admission::Duplicate(admission::PayloadMatch::Same)
        );
        assert_eq!(windows.stream_time(3), Some(1_700_000_000_123));
        // Without a window (off, or not yet rebuilt) or a timestamp: admitted, unrecorded.
        assert_eq!(windows.admit(4, Some(1), &event), Admission::Admit);
        assert_eq!(windows.admit(3, None, &event), Admission::Admit);
        windows.forget(3);
        assert!(!windows.has(3));
    }
}
