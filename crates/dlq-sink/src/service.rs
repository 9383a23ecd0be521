//! The archiving loop: reads `deliveries.dlq`, `events.quarantine` and (unless
//! `--archive-attempts=false`) the attempt log `deliveries.attempts` in a consumer group,
//! appends every record to an open archive file and commits a partition's offset only after
//! every file holding its earlier records is durable.
//!
//! Guarantees: at least once into the archive. A crash or a revoked partition re-reads from
//! the last commit, so rows can be archived twice (same coordinates), never lost; `inspect`
//! and `replay` read each coordinate once and count the copies (`source`). The sink does not
//! skip what is already archived: a partition's rows are spread over independently written
//! files per date and tenant, so only a listing of the whole archive could tell. A record
//! that does not decode is archived raw with the reason; nothing read is skipped. On stop,
//! every open file is written and the offsets committed synchronously before returning.

use std::{
    sync::Arc,
    time::{Duration, SystemTime},
};

use bytes::Bytes;
use hookline_core::{epoch, Backoff};
use hookline_envelope::Topics;
use hookline_runtime::{
    group_watch,
    health::Health,
    kafka::{self, RevokeRecorder},
    retry::{self, Then},
};
use rdkafka::{
    consumer::{CommitMode, Consumer, StreamConsumer},
    message::{BorrowedMessage, Message},
    Offset, TopicPartitionList,
};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::{
    archive::{FileKey, Limits, OpenFiles},
    events::{self, Coordinates},
    metrics as sm,
    row::{ArchiveRow, Kind},
    source::row_of,
    store::ArchiveStore,
    Config, DlqSinkError, STAGE,
};

const LOOP: &str = "dlq_sink";
const TICK: Duration = Duration::from_millis(200);
/// Waits between tries of an archive write: 200 ms doubling to 10 s, each
/// shortened by up to half so replicas do not retry a shared store in step.
const WRITE_RETRY: Backoff =
    Backoff::new(Duration::from_millis(200), Duration::from_secs(10)).with_jitter(0.5);

pub(crate) struct SinkLoop {
    consumer: Arc<StreamConsumer<RevokeRecorder>>,
    topics: Topics,
    store: ArchiveStore,
    files: OpenFiles,
    health: Health,
    committed: std::collections::HashMap<(String, i32), i64>,
    grace: Duration,
    stall_timeout: Duration,
    attempts: bool,
    stop: CancellationToken,
}

impl SinkLoop {
    pub(crate) fn new(
        config: &Config,
        topics: Topics,
        store: ArchiveStore,
        limits: Limits,
        health: Health,
        stop: CancellationToken,
    ) -> Result<Self, DlqSinkError> {
        let consumer = kafka::manual_commit_consumer(
            &config.common,
            "hookline-dlq-sink",
            &config.sink.group_id,
        )?;
        Ok(Self {
            consumer: Arc::new(consumer),
            stall_timeout: config.common.consumer_stall_timeout,
            topics,
            store,
            files: OpenFiles::new(limits),
            health,
            committed: Default::default(),
            grace: config.common.shutdown_grace,
            attempts: config.sink.archive_attempts,
            stop,
        })
    }

    /// Archives until `stop`, then writes every open file and commits.
    pub(crate) async fn run(mut self) -> Result<(), DlqSinkError> {
        let stop = self.stop.clone();
        let mut wanted = vec![self.topics.dlq(), self.topics.quarantine()];
        if self.attempts {
            wanted.push(self.topics.attempts());
        }
        self.consumer
            .context()
            .hold_ready_until_assigned(&self.health, "dead-letters");
        self.consumer
            .subscribe(&wanted)
            .map_err(|e| hookline_runtime::RuntimeError::kafka("subscribing", e))?;
        // Stalled or unassigned shows in `/readyz`; stopped when this
        // returns, however it returns, and waited for after the drain.
        let watch = group_watch::watch_while_held(
            &self.consumer,
            group_watch::WatchSpec {
                stage: STAGE,
                consumer: "dead-letters",
                stall_timeout: self.stall_timeout,
            },
            &self.health,
        );
        self.health.set_ready(STAGE, Ok(()));
        tracing::info!(topics = ?wanted, archive = %self.store, "archiving");
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let received = tokio::select! {
                _ = stop.cancelled() => break,
                _ = tick.tick() => None,
                r = self.consumer.recv() => Some(r.map(|m| self.to_row(&m))),
            };
            self.forget_revoked();
            match received {
                Some(Ok(Some((kind, row)))) => {
                    self.files
                        .append(kind, &row, epoch::millis(SystemTime::now()))?
                }
                Some(Ok(None)) => {}
                Some(Err(error)) => events::ConsumerError { error: &error }.emit(),
                None => {}
            }
            self.health.beat(LOOP);
            let now = epoch::millis(SystemTime::now());
            sm::backlog(
                self.files.oldest_unarchived_ms(),
                now,
                self.files.buffered_rows(),
            );
            let due = self.files.due(now);
            if !due.is_empty() {
                self.write(due, None).await?;
                self.commit(CommitMode::Async);
            }
        }
        let drained = self.drain().await;
        watch.stop().await;
        drained
    }

    async fn drain(mut self) -> Result<(), DlqSinkError> {
        self.forget_revoked();
        let open = self.files.all();
        tracing::info!(files = open.len(), "draining: writing open archive files");
        let deadline = Instant::now() + self.grace;
        let result = self.write(open, Some(deadline)).await;
        // Commit what is durable even if some file could not be written in time, and
        // every position again synchronously, in case an earlier async commit was lost.
        self.committed.clear();
        self.commit(CommitMode::Sync);
        self.health.forget(LOOP);
        result
    }

    fn forget_revoked(&mut self) {
        for (topic, partition) in self.consumer.context().take_revoked() {
            let dropped = self.files.drop_partition(&topic, partition);
            self.committed.remove(&(topic.clone(), partition));
            if dropped > 0 {
                events::RevokedRowsDropped {
                    topic: &topic,
                    partition,
                    dropped,
                }
                .emit();
            }
        }
    }

    fn to_row(&self, msg: &BorrowedMessage<'_>) -> Option<(Kind, ArchiveRow)> {
        let kind = if msg.topic() == self.topics.dlq() {
            Kind::Dlq
        } else if msg.topic() == self.topics.quarantine() {
            Kind::Quarantine
        } else if msg.topic() == self.topics.attempts() {
            Kind::Attempts
        } else {
            events::UnexpectedTopic { topic: msg.topic() }.emit();
            return None;
        };
        let row = row_of(kind, msg, epoch::millis(SystemTime::now()));
        if let Some(error) = &row.decode_error {
            events::ArchivedRaw {
                at: Coordinates {
                    topic: &row.topic,
                    partition: row.partition,
                    offset: row.offset,
                },
                error,
            }
            .emit();
        }
        Some((kind, row))
    }

    /// Writes each file durably, retrying with back-off; gives up only at
    /// `deadline`, which a stop asked for while retrying sets to the grace.
    async fn write(
        &mut self,
        keys: Vec<FileKey>,
        mut deadline: Option<Instant>,
    ) -> Result<(), DlqSinkError> {
        for key in keys {
            let Some(mut file) = self.files.seal(&key).map_err(DlqSinkError::Avro)? else {
                continue;
            };
            let path = self.store.path(&file.relative_path);
            let bytes = Bytes::from(std::mem::take(&mut file.bytes));
            let (store, health, stop, grace) = (&self.store, &self.health, &self.stop, self.grace);
            let written = retry::retry_until(
                WRITE_RETRY,
                || {
                    let (path, bytes) = (&path, bytes.clone());
                    async move {
                        let started = Instant::now();
                        let result = store.put_durable(path, bytes).await;
                        if result.is_err() {
                            sm::write_failed(started.elapsed());
                        }
                        result.map(|()| started.elapsed())
                    }
                },
                |error, wait| {
                    health.set_ready(STAGE, Err(format!("cannot write to the archive: {error}")));
                    events::ArchiveWriteFailed {
                        path: &path,
                        error: &hookline_envelope::error_chain(error),
                        retry_in_ms: u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
                    }
                    .emit();
                    health.beat(LOOP);
                    if deadline.is_none() && stop.is_cancelled() {
                        deadline = Some(Instant::now() + grace);
                    }
                    Then::until(deadline)
                },
            )
            .await;
            let took = written.map_err(DlqSinkError::Store)?;
            sm::file_written(&file, bytes.len(), took);
            self.files.written(&key);
            tracing::debug!(%path, rows = file.rows, first_offset = file.first_offset, bytes = bytes.len(), "archive file written");
            self.health.set_ready(STAGE, Ok(()));
        }
        Ok(())
    }

    /// Commits every partition whose durable position moved.
    fn commit(&mut self, mode: CommitMode) {
        let mut tpl = TopicPartitionList::new();
        let mut moved = Vec::new();
        for (topic, partition, offset) in self.files.committable() {
            let key = (topic.clone(), partition);
            if self.committed.get(&key) == Some(&offset) {
                continue;
            }
            if tpl
                .add_partition_offset(&topic, partition, Offset::Offset(offset))
                .is_ok()
            {
                moved.push((key, offset));
            }
        }
        if moved.is_empty() {
            return;
        }
        match self.consumer.commit(&tpl, mode) {
            Ok(()) => {
                sm::commit(true);
                self.committed.extend(moved);
            }
            Err(error) => {
                events::CommitFailed { error: &error }.emit();
            }
        }
    }
}
