//! The open archive files of the sink and the offsets that are safe to commit.
//!
//! Guarantees: rows are grouped into one Avro object container file per (kind, date, tenant,
//! topic, partition); a file is due when it is over `max_file_bytes` or older than
//! `max_file_age`, or while all open files together exceed the buffer limits (largest first).
//! [`OpenFiles::committable`] never names an offset past a row that is not yet durable: per
//! partition it is the lowest first offset of a file still open or being written, else one
//! past the last row read. Time is passed in; nothing here does I/O.

use std::{
    collections::{btree_map::Entry, BTreeMap, HashMap},
    time::Duration,
};

use apache_avro::{Codec, DeflateSettings, Writer};

use crate::row::{reason_label, ArchiveRow, Kind, SCHEMA};

/// Where a file goes: `kind=…/date=…/tenant=…/part-<opened ms>-<topic>-<partition>-<first offset>.avro`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct FileKey {
    pub kind: Kind,
    pub date: String,
    pub tenant: String,
    pub topic: String,
    pub partition: i32,
}

/// Rotation and buffering limits.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub max_file_bytes: usize,
    pub max_file_age: Duration,
    pub max_buffered_bytes: usize,
    pub max_open_files: usize,
}

struct OpenFile {
    writer: Writer<'static, Vec<u8>>,
    opened_ms: i64,
    first_offset: i64,
    rows: u64,
    approx_bytes: usize,
    oldest_ts_ms: i64,
    reasons: BTreeMap<&'static str, u64>,
}

/// A file taken out of the open set, ready to be written.
#[derive(Debug)]
pub(crate) struct SealedFile {
    pub key: FileKey,
    /// Path relative to the archive root.
    pub relative_path: String,
    pub bytes: Vec<u8>,
    pub rows: u64,
    pub first_offset: i64,
    /// Rows per bounded reason label.
    pub reasons: BTreeMap<&'static str, u64>,
}

/// Why a row could not be added to a file.
#[derive(Debug, thiserror::Error)]
#[error("cannot encode an archive row of {topic}/{partition}@{offset}")]
pub struct EncodeError {
    topic: String,
    partition: i32,
    offset: i64,
    #[source]
    source: apache_avro::Error,
}

/// Open files plus per-partition read positions.
pub(crate) struct OpenFiles {
    limits: Limits,
    files: BTreeMap<FileKey, OpenFile>,
    /// Files sealed but not yet durable: their first offsets still hold commits back.
    writing: BTreeMap<FileKey, i64>,
    /// (topic, partition) → one past the last row appended.
    next_offset: HashMap<(String, i32), i64>,
    buffered_bytes: usize,
}

impl std::fmt::Debug for OpenFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenFiles")
            .field("files", &self.files.len())
            .field("writing", &self.writing)
            .field("buffered_bytes", &self.buffered_bytes)
            .finish()
    }
}

/// Rough per-row overhead on top of key and value bytes, for size accounting.
const ROW_OVERHEAD: usize = 160;

impl OpenFiles {
    pub(crate) fn new(limits: Limits) -> Self {
        Self {
            limits,
            files: BTreeMap::new(),
            writing: BTreeMap::new(),
            next_offset: HashMap::new(),
            buffered_bytes: 0,
        }
    }

    /// Appends one row read from Kafka (rows of a partition arrive in offset order).
    pub(crate) fn append(
        &mut self,
        kind: Kind,
        row: &ArchiveRow,
        now_ms: i64,
    ) -> Result<(), EncodeError> {
        let key = FileKey {
            kind,
            date: row.date_dir(),
            tenant: row.tenant_dir(),
            topic: row.topic.clone(),
            partition: row.partition,
        };
        let failed = |source| EncodeError {
            topic: row.topic.clone(),
            partition: row.partition,
            offset: row.offset,
            source,
        };
        let file = match self.files.entry(key) {
            Entry::Occupied(open) => open.into_mut(),
            Entry::Vacant(slot) => slot.insert(OpenFile {
                writer: Writer::with_codec(
                    &SCHEMA,
                    Vec::new(),
                    Codec::Deflate(DeflateSettings::default()),
                )
                .map_err(failed)?,
                opened_ms: now_ms,
                first_offset: row.offset,
                rows: 0,
                approx_bytes: 0,
                oldest_ts_ms: row.kafka_timestamp.unwrap_or(now_ms),
                reasons: BTreeMap::new(),
            }),
        };
        file.writer.append_ser(row).map_err(failed)?;
        let size = ROW_OVERHEAD
            + row.value.as_ref().map_or(0, Vec::len)
            + row.key.as_ref().map_or(0, Vec::len);
        file.rows += 1;
        file.approx_bytes += size;
        file.oldest_ts_ms = file.oldest_ts_ms.min(row.kafka_timestamp.unwrap_or(now_ms));
        *file.reasons.entry(reason_label(&row.reason)).or_default() += 1;
        self.buffered_bytes += size;
        self.next_offset
            .insert((row.topic.clone(), row.partition), row.offset + 1);
        Ok(())
    }

    /// Files to write now: full or old ones, then the largest until the buffer fits.
    pub(crate) fn due(&self, now_ms: i64) -> Vec<FileKey> {
        let max_age = i64::try_from(self.limits.max_file_age.as_millis()).unwrap_or(i64::MAX);
        let mut due: Vec<FileKey> = self
            .files
            .iter()
            .filter(|(_, f)| {
                f.approx_bytes >= self.limits.max_file_bytes
                    || now_ms.saturating_sub(f.opened_ms) >= max_age
            })
            .map(|(k, _)| k.clone())
            .collect();
        let mut bytes = self.buffered_bytes
            - due
                .iter()
                .map(|k| self.files[k].approx_bytes)
                .sum::<usize>();
        let mut count = self.files.len() - due.len();
        if bytes > self.limits.max_buffered_bytes || count > self.limits.max_open_files {
            let mut rest: Vec<(&FileKey, &OpenFile)> = self
                .files
                .iter()
                .filter(|(k, _)| !due.contains(k))
                .collect();
            rest.sort_by_key(|(_, f)| std::cmp::Reverse(f.approx_bytes));
            for (k, f) in rest {
                if bytes <= self.limits.max_buffered_bytes && count <= self.limits.max_open_files {
                    break;
                }
                bytes -= f.approx_bytes;
                count -= 1;
                due.push(k.clone());
            }
        }
        due
    }

    /// Every open file (for the drain at shutdown).
    pub(crate) fn all(&self) -> Vec<FileKey> {
        self.files.keys().cloned().collect()
    }

    /// Closes a file's writer and hands its bytes out; its offsets keep holding commits
    /// back until [`Self::written`].
    pub(crate) fn seal(&mut self, key: &FileKey) -> Result<Option<SealedFile>, apache_avro::Error> {
        let Some(file) = self.files.remove(key) else {
            return Ok(None);
        };
        self.buffered_bytes -= file.approx_bytes;
        self.writing.insert(key.clone(), file.first_offset);
        let bytes = file.writer.into_inner()?;
        let relative_path = format!(
            "kind={}/date={}/tenant={}/part-{}-{}-{}-{}.avro",
            key.kind.as_str(),
            key.date,
            key.tenant,
            file.opened_ms,
            key.topic,
            key.partition,
            file.first_offset
        );
        Ok(Some(SealedFile {
            key: key.clone(),
            relative_path,
            bytes,
            rows: file.rows,
            first_offset: file.first_offset,
            reasons: file.reasons,
        }))
    }

    /// Marks a sealed file durable: its offsets may now be committed.
    pub(crate) fn written(&mut self, key: &FileKey) {
        self.writing.remove(key);
    }

    /// Forgets a revoked partition: its rows were not committed, so its new owner reads
    /// and archives them again.
    pub(crate) fn drop_partition(&mut self, topic: &str, partition: i32) -> u64 {
        let mut dropped = 0;
        let buffered = &mut self.buffered_bytes;
        self.files.retain(|k, f| {
            let keep = !(k.topic == topic && k.partition == partition);
            if !keep {
                dropped += f.rows;
                *buffered -= f.approx_bytes;
            }
            keep
        });
        self.writing
            .retain(|k, _| !(k.topic == topic && k.partition == partition));
        self.next_offset.remove(&(topic.to_owned(), partition));
        dropped
    }

    /// (topic, partition, offset) safe to commit for every partition read.
    pub(crate) fn committable(&self) -> Vec<(String, i32, i64)> {
        self.next_offset
            .iter()
            .map(|((topic, partition), next)| {
                let held = self
                    .files
                    .iter()
                    .filter(|(k, _)| &k.topic == topic && k.partition == *partition)
                    .map(|(_, f)| f.first_offset)
                    .chain(
                        self.writing
                            .iter()
                            .filter(|(k, _)| &k.topic == topic && k.partition == *partition)
                            .map(|(_, first)| *first),
                    )
                    .min();
                (topic.clone(), *partition, held.unwrap_or(*next))
            })
            .collect()
    }

    /// Kafka timestamp of the oldest row not yet durable.
    pub(crate) fn oldest_unarchived_ms(&self) -> Option<i64> {
        self.files.values().map(|f| f.oldest_ts_ms).min()
    }

    /// Rows in open files.
    pub(crate) fn buffered_rows(&self) -> u64 {
        self.files.values().map(|f| f.rows).sum()
    }
}

#[cfg(test)]
#[path = "archive_tests.rs"]
mod tests;
