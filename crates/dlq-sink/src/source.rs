//! Where `inspect` and `replay` read from: a DLQ or quarantine topic, or the archive.
//!
//! Guarantees: a topic is read by assignment — every partition, from the beginning up to its
//! high watermark taken at start — with no consumer group membership and no commits, so the
//! sink's group is never disturbed and records written meanwhile (say, replays that fail
//! again) are not read. The archive is read file by file, pruned by date and tenant
//! directories. Either way each coordinate (topic, partition, offset) is returned once:
//! copies the sink archived again after a crash, and records a topic fetch repeats, are
//! skipped and counted ([`Source::duplicates_skipped`]); the cost is in `dedup`.

use std::{
    collections::{HashMap, VecDeque},
    time::{Duration, SystemTime},
};

use apache_avro::{from_value, Reader};
use hookline_core::epoch;
use hookline_envelope::error_chain;
use hookline_runtime::{config::CommonArgs, kafka, RuntimeError};
use object_store::path::Path;
use rdkafka::{
    consumer::{Consumer, StreamConsumer},
    error::KafkaError,
    message::{Headers, Message},
    Offset, TopicPartitionList,
};

use crate::{
    dedup::{ArchiveCoords, TopicCursor},
    filter::Filter,
    row::{ArchiveHeader, ArchiveRow, Kind, RawRecord},
    store::{ArchiveStore, StoreError},
};

const METADATA_TIMEOUT: Duration = Duration::from_secs(10);
/// A partition that yields nothing for this long while behind its target is an error.
const STALL_TIMEOUT: Duration = Duration::from_secs(30);

/// Why reading failed.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// Kafka failed.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// The topic is missing or unreadable.
    #[error("cannot read {topic}: {why}")]
    Topic {
        /// The topic.
        topic: String,
        /// What went wrong.
        why: String,
    },
    /// The archive failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// An archive file is not a readable Avro container of archive rows.
    #[error("archive file {path} is unreadable: {why}")]
    BadFile {
        /// The file.
        path: String,
        /// What is wrong.
        why: String,
    },
}

/// Rows from a topic or the archive.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Source {
    /// A topic read to its high watermark at start.
    Topic(TopicSource),
    /// Archive files.
    Archive(ArchiveSource),
}

impl Source {
    /// The next row, or `None` at the end.
    pub async fn next(&mut self) -> Result<Option<ArchiveRow>, SourceError> {
        match self {
            Self::Topic(t) => t.next().await,
            Self::Archive(a) => a.next().await,
        }
    }

    /// Records not returned because their coordinate was already returned.
    pub fn duplicates_skipped(&self) -> u64 {
        match self {
            Self::Topic(t) => t.cursor.skipped(),
            Self::Archive(a) => a.seen.skipped(),
        }
    }

    /// How many records (topic) or files (archive) there are to read, for progress.
    pub fn total(&self) -> u64 {
        match self {
            Self::Topic(t) => t.total,
            Self::Archive(a) => a.total_files,
        }
    }
}

/// A topic read by assignment.
pub struct TopicSource {
    consumer: StreamConsumer<kafka::QuietContext>,
    kind: Kind,
    topic: String,
    /// partition → high watermark at start; removed when reached.
    open: HashMap<i32, i64>,
    cursor: TopicCursor,
    total: u64,
}

impl std::fmt::Debug for TopicSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TopicSource")
            .field("topic", &self.topic)
            .field("open", &self.open)
            .finish()
    }
}

impl TopicSource {
    /// Assigns every partition of `topic` from the beginning.
    pub async fn open(common: &CommonArgs, topic: &str, kind: Kind) -> Result<Self, SourceError> {
        let client_id = format!("hookline-dlq-sink-reader-{}", std::process::id());
        let consumer: StreamConsumer<kafka::QuietContext> =
            kafka::reader_config(common, &client_id, kafka::AtEnd::Report)?
                .create_with_context(kafka::QuietContext)
                .map_err(|e| RuntimeError::kafka("creating the reader", e))?;
        let bad = |why: String| SourceError::Topic {
            topic: topic.to_owned(),
            why,
        };
        let metadata = consumer
            .fetch_metadata(Some(topic), METADATA_TIMEOUT)
            .map_err(|e| bad(format!("metadata: {e}")))?;
        let partitions: Vec<i32> = metadata
            .topics()
            .iter()
            .find(|t| t.name() == topic && t.error().is_none())
            .map(|t| t.partitions().iter().map(|p| p.id()).collect())
            .unwrap_or_default();
        if partitions.is_empty() {
            return Err(bad(
                "the topic does not exist (check --brokers and --topic-prefix)".into(),
            ));
        }
        let mut tpl = TopicPartitionList::new();
        let mut open = HashMap::new();
        let mut total = 0;
        for p in partitions {
            let (low, high) = consumer
                .fetch_watermarks(topic, p, METADATA_TIMEOUT)
                .map_err(|e| bad(format!("watermarks of partition {p}: {e}")))?;
            if high > low {
                tpl.add_partition_offset(topic, p, Offset::Beginning)
                    .map_err(|e| bad(e.to_string()))?;
                open.insert(p, high);
                total += (high - low) as u64;
            }
        }
        consumer
            .assign(&tpl)
            .map_err(|e| bad(format!("assign: {e}")))?;
        Ok(Self {
            consumer,
            kind,
            topic: topic.to_owned(),
            open,
            cursor: TopicCursor::default(),
            total,
        })
    }

    async fn next(&mut self) -> Result<Option<ArchiveRow>, SourceError> {
        while !self.open.is_empty() {
            let received = tokio::time::timeout(STALL_TIMEOUT, self.consumer.recv())
                .await
                .map_err(|_| SourceError::Topic {
                    topic: self.topic.clone(),
                    why: format!(
                        "no progress for {STALL_TIMEOUT:?} on partitions {:?}",
                        self.open.keys().collect::<Vec<_>>()
                    ),
                })?;
            match received {
                Ok(msg) => {
                    let partition = msg.partition();
                    let Some(&target) = self.open.get(&partition) else {
                        continue;
                    };
                    if msg.offset() >= target {
                        self.close(partition);
                        continue;
                    }
                    if !self.cursor.first_time(partition, msg.offset()) {
                        continue;
                    }
                    let last = msg.offset() + 1 >= target;
                    let row = row_of(self.kind, &msg, epoch::millis(SystemTime::now()));
                    drop(msg);
                    if last {
                        self.close(partition);
                    }
                    return Ok(Some(row));
                }
                // The end of the log (control records can sit below the high watermark).
                Err(KafkaError::PartitionEOF(p)) => self.close(p),
                Err(e) => {
                    return Err(SourceError::Topic {
                        topic: self.topic.clone(),
                        why: e.to_string(),
                    })
                }
            }
        }
        Ok(None)
    }

    fn close(&mut self, partition: i32) {
        if self.open.remove(&partition).is_some() {
            let mut tpl = TopicPartitionList::new();
            tpl.add_partition(&self.topic, partition);
            if let Err(error) = self.consumer.incremental_unassign(&tpl) {
                tracing::debug!(%error, partition, "unassign");
            }
        }
    }
}

/// Archive files of one kind, pruned by the filter.
#[derive(Debug)]
pub struct ArchiveSource {
    store: ArchiveStore,
    files: VecDeque<Path>,
    rows: VecDeque<ArchiveRow>,
    seen: ArchiveCoords,
    total_files: u64,
    /// Files read so far.
    pub files_read: u64,
}

impl ArchiveSource {
    /// Lists the files of `kind` whose date and tenant directories can match `filter`.
    pub async fn open(
        store: ArchiveStore,
        kind: Kind,
        filter: &Filter,
    ) -> Result<Self, SourceError> {
        let listed = store.list(&format!("kind={}", kind.as_str())).await?;
        let files: VecDeque<Path> = listed
            .into_iter()
            .map(|m| m.location)
            .filter(|p| p.as_ref().ends_with(".avro"))
            .filter(|p| {
                let mut date_ok = true;
                let mut tenant_ok = true;
                for part in p.parts() {
                    let part = part.as_ref();
                    if let Some(date) = part.strip_prefix("date=") {
                        date_ok = filter.may_match_date(date);
                    } else if let Some(tenant) = part.strip_prefix("tenant=") {
                        tenant_ok = filter.may_match_tenant_dir(tenant);
                    }
                }
                date_ok && tenant_ok
            })
            .collect();
        Ok(Self {
            store,
            total_files: files.len() as u64,
            files,
            rows: VecDeque::new(),
            seen: ArchiveCoords::default(),
            files_read: 0,
        })
    }

    async fn next(&mut self) -> Result<Option<ArchiveRow>, SourceError> {
        loop {
            while let Some(row) = self.rows.pop_front() {
                if self.seen.first_time(&row.topic, row.partition, row.offset) {
                    return Ok(Some(row));
                }
            }
            let Some(path) = self.files.pop_front() else {
                return Ok(None);
            };
            let bytes = self.store.get(&path).await?;
            self.files_read += 1;
            let bad = |why: String| SourceError::BadFile {
                path: path.to_string(),
                why,
            };
            let reader = Reader::new(&bytes[..]).map_err(|e| bad(error_chain(&e)))?;
            for value in reader {
                let value = value.map_err(|e| bad(error_chain(&e)))?;
                let row: ArchiveRow = from_value(&value).map_err(|e| bad(error_chain(&e)))?;
                self.rows.push_back(row);
            }
        }
    }
}

/// The archive row of a consumed message: its coordinates, key, headers and value as
/// read, archived at `now_ms`. The sink loop and `--from-topic` reading both make rows so.
pub(crate) fn row_of<M: Message>(kind: Kind, msg: &M, now_ms: i64) -> ArchiveRow {
    let headers = msg
        .headers()
        .map(|hs| {
            hs.iter()
                .map(|h| ArchiveHeader {
                    name: h.key.to_owned(),
                    value: h.value.map(<[u8]>::to_vec),
                })
                .collect()
        })
        .unwrap_or_default();
    let rec = RawRecord {
        topic: msg.topic(),
        partition: msg.partition(),
        offset: msg.offset(),
        timestamp: msg.timestamp().to_millis(),
        key: msg.key(),
        value: msg.payload(),
    };
    ArchiveRow::from_record(kind, rec, headers, now_ms)
}
