//! A transactional producer for consume-transform-produce: records and the
//! consumed offsets of one or more group consumers commit atomically, so a
//! `read_committed` reader sees each record exactly once and a crash or a
//! zombie (fenced by its group generation, KIP-447) never doubles one.
//!
//! The caller keeps its batch in memory: a transaction that fails is aborted
//! (or the producer re-created, which fences the old one under the same
//! transactional id) and the batch goes into the next transaction. Timeouts of
//! the blocking calls (a broker restarting) are resumed as librdkafka asks,
//! not aborted mid-commit.
//!
//! Every blocking call runs on a blocking thread under a deadline of its own
//! ([`bounded`]): librdkafka's `send_offsets_to_transaction` can block past
//! its timeout for good when the group coordinator's broker goes away
//! (confluentinc/librdkafka#5456, #5511; seen in the fault suite's
//! `broker_restart`: fanout's, and the dispatcher's, transactions stopped for
//! the rest of the run). A call past its deadline gives the producer up as
//! [`TxnError::Stuck`]: it is re-created, and the new one fences the old
//! (whose thread is left to its call).

use std::time::Duration;

use hookline_core::Backoff;
use rdkafka::{
    consumer::ConsumerGroupMetadata,
    error::{KafkaError, KafkaResult},
    producer::{DeliveryFuture, FutureProducer, FutureRecord, Producer},
    types::RDKafkaErrorCode,
    TopicPartitionList,
};
use tokio_util::sync::CancellationToken;

use super::replicas::{Writes, SLOW_WRITES};
use crate::{
    config::CommonArgs,
    health::Health,
    retry::{self, Then},
    RuntimeError,
};

/// How long a metadata request of [`Transactor::why_slow`] may take.
const METADATA_TIMEOUT: Duration = Duration::from_secs(5);

/// Pause between resumptions of a retriable transactional call.
const RESUME_PAUSE: Duration = Duration::from_millis(200);

/// Waits between tries to re-create the producer while the broker is away:
/// 1 s doubling to 5 s, each shortened by up to half.
const RECREATE_RETRY: Backoff =
    Backoff::new(Duration::from_secs(1), Duration::from_secs(5)).with_jitter(0.5);

/// How long a blocking call may run past its own timeout before the
/// producer is given up on ([`bounded`]).
const STUCK_SLACK: Duration = Duration::from_secs(5);

/// How a transaction failed.
#[derive(Debug)]
pub enum TxnError {
    /// Abort and go on with a new transaction.
    Abortable(KafkaError),
    /// The producer is unusable (fenced or fatal): re-create it.
    Fatal(KafkaError),
    /// A blocking librdkafka call did not return within its timeout and
    /// [`STUCK_SLACK`]: the producer is re-created without being asked
    /// anything more (an abort would wait behind the stuck call).
    Stuck {
        call: &'static str,
        waited: Duration,
    },
}

impl std::fmt::Display for TxnError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Abortable(e) => write!(f, "abortable: {e}"),
            Self::Fatal(e) => write!(f, "fatal: {e}"),
            Self::Stuck { call, waited } => write!(
                f,
                "stuck: librdkafka's {call} did not return within {waited:?}"
            ),
        }
    }
}

/// What [`Transactor::new`] configures.
#[derive(Debug, Clone)]
pub struct TxnSpec {
    /// `client.id`.
    pub client_id: &'static str,
    /// `transactional.id`: stable per replica, so a restarted replica fences its
    /// predecessor and aborts its open transaction at once.
    pub transactional_id: String,
    /// `transaction.timeout.ms`: how long a crashed replica's open transaction
    /// (under an id no successor reuses) holds back `read_committed` readers.
    pub transaction_timeout: Duration,
    /// Timeout of one blocking call (init, offsets, commit, abort).
    pub call_timeout: Duration,
    /// `linger.ms`.
    pub linger: Duration,
}

/// One consumer's offsets for a transaction, with its group metadata taken
/// when the transaction is committed (its current generation).
pub type GroupOffsets = (TopicPartitionList, ConsumerGroupMetadata);

/// A transactional producer, re-created when fenced.
pub struct Transactor {
    common: CommonArgs,
    spec: TxnSpec,
    producer: FutureProducer,
    /// The delivery reports of the open transaction's records, awaited
    /// before its commit ([`Transactor::commit`]).
    reports: std::sync::Mutex<Vec<DeliveryFuture>>,
    /// The topics the open transaction writes to.
    written: std::sync::Mutex<std::collections::BTreeSet<String>>,
    /// Says why writes are held up ([`Transactor::report_writes_to`]).
    writes: Option<tokio::sync::Mutex<Writes>>,
}

impl std::fmt::Debug for Transactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transactor")
            .field("transactional_id", &self.spec.transactional_id)
            .finish_non_exhaustive()
    }
}

impl Transactor {
    /// Creates the producer and initialises its transactions (fencing any
    /// earlier producer with the same transactional id).
    pub async fn new(common: &CommonArgs, spec: TxnSpec) -> Result<Self, RuntimeError> {
        let producer = create(common, &spec).await?;
        Ok(Self {
            common: common.clone(),
            spec,
            producer,
            reports: std::sync::Mutex::default(),
            written: std::sync::Mutex::default(),
            writes: None,
        })
    }

    /// Makes a commit that waits longer than [`SLOW_WRITES`] ask the
    /// cluster why, and hold `stage` unready with the reason (partitions
    /// below `min.insync.replicas`, `kafka::replicas`) until one commits.
    pub fn report_writes_to(mut self, health: Health, stage: &'static str) -> Self {
        self.writes = Some(tokio::sync::Mutex::new(Writes::new(health, stage)));
        self
    }

    /// The transactional id.
    pub fn transactional_id(&self) -> &str {
        &self.spec.transactional_id
    }

    /// Opens a transaction.
    pub fn begin(&self) -> Result<(), TxnError> {
        // Those of a failed transaction before it.
        self.reports().clear();
        self.written().clear();
        self.producer.begin_transaction().map_err(classify)
    }

    /// The open transaction's delivery reports (a poisoned lock only means a
    /// panic elsewhere while it was held: the list is still whole).
    fn reports(&self) -> std::sync::MutexGuard<'_, Vec<DeliveryFuture>> {
        self.reports.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn written(&self) -> std::sync::MutexGuard<'_, std::collections::BTreeSet<String>> {
        self.written.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Enqueues one record in the open transaction, waiting while the producer
    /// queue is full. The commit waits for every record's delivery report
    /// and fails if any send failed.
    pub async fn send(
        &self,
        topic: &str,
        key: Option<&[u8]>,
        value: &[u8],
    ) -> Result<(), TxnError> {
        self.send_to(topic, None, key, value, &[]).await
    }

    /// [`send`](Self::send) to an explicit partition (the partitioner's choice
    /// when `None`), with headers.
    pub async fn send_to(
        &self,
        topic: &str,
        partition: Option<i32>,
        key: Option<&[u8]>,
        value: &[u8],
        headers: &[(&str, String)],
    ) -> Result<(), TxnError> {
        loop {
            let mut record = FutureRecord::<[u8], [u8]>::to(topic).payload(value);
            if let Some(key) = key {
                record = record.key(key);
            }
            if let Some(partition) = partition {
                record = record.partition(partition);
            }
            if !headers.is_empty() {
                let mut owned = rdkafka::message::OwnedHeaders::new_with_capacity(headers.len());
                for (name, value) in headers {
                    owned = owned.insert(rdkafka::message::Header {
                        key: name,
                        value: Some(value.as_bytes()),
                    });
                }
                record = record.headers(owned);
            }
            match self.producer.send_result(record) {
                Ok(report) => {
                    self.reports().push(report);
                    if !self.written().contains(topic) {
                        self.written().insert(topic.to_owned());
                    }
                    return Ok(());
                }
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                Err((e, _)) => return Err(classify(e)),
            }
        }
    }

    /// [`send`](Self::send), then waits for the record's delivery report: the
    /// partition the partitioner chose (fanout learns where a tenant's
    /// deliveries go this way, `hookline_core::burst`). Takes one produce
    /// round trip; a failed delivery fails the transaction as it would at the
    /// commit.
    pub async fn send_located(
        &self,
        topic: &str,
        key: Option<&[u8]>,
        value: &[u8],
    ) -> Result<i32, TxnError> {
        loop {
            let mut record = FutureRecord::<[u8], [u8]>::to(topic).payload(value);
            if let Some(key) = key {
                record = record.key(key);
            }
            match self.producer.send_result(record) {
                Ok(report) => {
                    if !self.written().contains(topic) {
                        self.written().insert(topic.to_owned());
                    }
                    return match report.await {
                        Ok(Ok(delivery)) => Ok(delivery.partition),
                        Ok(Err((e, _))) => Err(classify(e)),
                        Err(_) => Err(TxnError::Abortable(KafkaError::Canceled)),
                    };
                }
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                Err((e, _)) => return Err(classify(e)),
            }
        }
    }

    /// Adds each consumer's offsets to the open transaction and commits it.
    /// One that waits longer than [`SLOW_WRITES`] asks the cluster why,
    /// every [`SLOW_WRITES`] until it ends ([`Transactor::report_writes_to`]).
    pub async fn commit(&self, offsets: Vec<GroupOffsets>) -> Result<(), TxnError> {
        let Some(writes) = &self.writes else {
            return self.commit_now(offsets).await;
        };
        let committing = self.commit_now(offsets);
        tokio::pin!(committing);
        // Asked again every SLOW_WRITES while the commit waits: a commit
        // that began slow for another reason (a leader moving) may be held
        // up by replicas only later.
        let result = loop {
            if let Ok(result) = tokio::time::timeout(SLOW_WRITES, &mut committing).await {
                break result;
            }
            let asking = self.why_slow(writes);
            tokio::pin!(asking);
            tokio::select! {
                result = &mut committing => break result,
                () = &mut asking => {}
            }
        };
        if result.is_ok() {
            writes.lock().await.flowing();
        }
        result
    }

    /// Asks the cluster's metadata which partitions the open transaction
    /// waits for: its topics', and those of the coordinators' own topics
    /// (`__transaction_state`, `__consumer_offsets`), which must take the
    /// commit's writes too.
    async fn why_slow(&self, writes: &tokio::sync::Mutex<Writes>) {
        let mut topics: Vec<String> = self.written().iter().cloned().collect();
        topics.extend(["__transaction_state", "__consumer_offsets"].map(str::to_owned));
        let mut writes = writes.lock().await;
        let unknown: Vec<&str> = writes.unknown(&topics);
        if !unknown.is_empty() {
            writes.learn_min_insync(&self.common, &unknown).await;
        }
        let mut refused = Vec::new();
        for topic in topics {
            let producer = self.producer.clone();
            let asked = bounded("fetch_metadata", METADATA_TIMEOUT, move || {
                producer
                    .client()
                    .fetch_metadata(Some(&topic), METADATA_TIMEOUT)
            })
            .await;
            match asked {
                Ok(Ok(metadata)) => refused.extend(writes.diagnose(&metadata)),
                Ok(Err(error)) => tracing::debug!(%error, "cannot read metadata"),
                Err(_) => return,
            }
        }
        writes.refused(refused);
    }

    async fn commit_now(&self, offsets: Vec<GroupOffsets>) -> Result<(), TxnError> {
        let timeout = self.spec.call_timeout;
        let offsets = std::sync::Arc::new(offsets);
        for group in 0..offsets.len() {
            if offsets[group].0.count() == 0 {
                continue;
            }
            let (producer, offsets) = (self.producer.clone(), std::sync::Arc::clone(&offsets));
            retrying("send_offsets_to_transaction", timeout, move || {
                let (tpl, metadata) = &offsets[group];
                producer.send_offsets_to_transaction(tpl, metadata, timeout)
            })
            .await?;
        }
        let reports = std::mem::take(&mut *self.reports());
        await_reports(&self.producer, reports, timeout).await;
        let producer = self.producer.clone();
        retrying("commit_transaction", timeout, move || {
            producer.commit_transaction(timeout)
        })
        .await
    }

    /// After a failed transaction: aborts it, or re-creates the producer when
    /// it cannot (or the error was fatal). Retries the re-creation while the
    /// broker is unreachable; gives up only when `stop` is cancelled.
    pub async fn recover(
        &mut self,
        error: &TxnError,
        stop: &CancellationToken,
    ) -> Result<(), RuntimeError> {
        if matches!(error, TxnError::Abortable(_)) && self.abort().await {
            return Ok(());
        }
        let (common, spec) = (&self.common, &self.spec);
        self.producer = retry::retry_until(
            RECREATE_RETRY,
            || create(common, spec),
            |error, wait| {
                if stop.is_cancelled() {
                    return Then::GiveUp;
                }
                tracing::warn!(%error, retry_in_ms = wait.as_millis() as u64, "could not re-create the transactional producer; retrying");
                Then::Retry
            },
        )
        .await?;
        Ok(())
    }

    /// Aborts the open transaction; false if the producer could not.
    async fn abort(&self) -> bool {
        let producer = self.producer.clone();
        let timeout = self.spec.call_timeout;
        match retrying("abort_transaction", timeout, move || {
            producer.abort_transaction(timeout)
        })
        .await
        {
            Ok(()) => true,
            Err(error) => {
                tracing::warn!(%error, "abort_transaction failed; re-creating the producer");
                false
            }
        }
    }
}

/// Settings of every transactional producer that `-X` may override.
///
/// `retry.backoff.ms`: a transaction begun right after the previous one's
/// commit is answered CONCURRENT_TRANSACTIONS by the coordinator while it
/// still writes that commit's markers (a few ms). librdkafka retries
/// `AddPartitionsToTxn` after a fixed 20 ms, but `AddOffsetsToTxn` after
/// `retry.backoff.ms`, 100 ms by default ("Retrying AddOffsetsToTxnRequest
/// ... in 100ms" in the debug log): the transaction and every record in it
/// waited that long (the Java client cut the same backoff to 20 ms,
/// KAFKA-5477). librdkafka doubles it per retry up to `retry.backoff.max.ms`,
/// set to its default here so the pair is visibly consistent; a broker that
/// stays away is still retried at up to 1 s. Shorter is not better: 1 ms gave
/// a p50 of 25 and 27 ms against 24 and 22 ms at 5 (`hookline-bench latency`,
/// 450 events/s, alternated on one broker, 2026-12-04): the coordinator is
/// asked more often while it writes the markers, not answered sooner.
///
/// `compression.type`: lz4, cheap to compress and to read back; `-X
/// compression.type=...` chooses another (it used to be set after the
/// overlay, so such a `-X` was silently ignored).
const TRANSACTIONAL_DEFAULTS: &[(&str, &str)] = &[
    ("retry.backoff.ms", "5"),
    ("retry.backoff.max.ms", "1000"),
    ("compression.type", "lz4"),
];

async fn create(common: &CommonArgs, spec: &TxnSpec) -> Result<FutureProducer, RuntimeError> {
    let producer: FutureProducer =
        super::producer_config_with(common, spec.client_id, TRANSACTIONAL_DEFAULTS)?
            .set("transactional.id", &spec.transactional_id)
            .set("enable.idempotence", "true")
            .set("acks", "all")
            .set("linger.ms", spec.linger.as_millis().to_string())
            .set(
                "transaction.timeout.ms",
                spec.transaction_timeout.as_millis().to_string(),
            )
            .create()
            .map_err(|e| RuntimeError::kafka("creating the transactional producer", e))?;
    let timeout = spec.call_timeout;
    let p = producer.clone();
    bounded("init_transactions", timeout, move || {
        p.init_transactions(timeout)
    })
    .await
    .map_err(|e| {
        RuntimeError::kafka(
            format!("initialising transactions ({e})"),
            KafkaError::Canceled,
        )
    })?
    .map_err(|e| RuntimeError::kafka("initialising transactions", e))?;
    tracing::info!(transactional_id = %spec.transactional_id, "transactional producer ready");
    Ok(producer)
}

/// The default transactional id of a stage's replica: its consumer group,
/// `-`, and the replica's identity — its `--group-instance-id` when static
/// membership is on, else `$HOSTNAME` (a pod's name) and the process id (1 for a
/// container's entrypoint, so a restarted container keeps it). A transactional
/// id is global to the cluster: two live producers under one fence each other,
/// so two processes on one host (tests, two groups) must never share one. A
/// restart under the same id fences its predecessor at once; under a new one
/// the predecessor's open transaction times out.
pub fn default_transactional_id(group: &str, common: &CommonArgs) -> String {
    let replica = common
        .group_instance_id
        .clone()
        .filter(|id| !id.is_empty())
        .unwrap_or_else(|| {
            let host = std::env::var("HOSTNAME")
                .ok()
                .filter(|h| !h.is_empty())
                .unwrap_or_else(|| "host".to_owned());
            format!("{host}-{}", std::process::id())
        });
    format!("{}{replica}", transactional_id_prefix(group))
}

/// The prefix of every default transactional id of `group`'s replicas: what
/// a prefixed TransactionalId ACL grants (`hookline-fanout acls`).
pub fn transactional_id_prefix(group: &str) -> String {
    format!("{group}-")
}

/// Waits until every record sent in the open transaction is acknowledged
/// and off the producer's books, so that `commit_transaction` finds nothing
/// in flight; at `timeout` it leaves the rest to `commit_transaction`'s own
/// flush. A failed send is not judged here: the commit fails on it.
///
/// rdkafka's `commit_transaction` flushes first, and its `flush` (since
/// fede1024/rust-rdkafka#777) checks with `rd_kafka_flush(0)` and, while
/// anything is in flight, polls the producer's queue for up to 100 ms before
/// checking again. The `FutureProducer`'s own thread polls that queue too and
/// usually takes the delivery report, so that poll sat out its 100 ms: every
/// transaction whose records were still in flight at the commit (nearly
/// all) took 100 ms longer, and a `read_committed` reader waited for it.
/// Calling `flush` with a short timeout in a loop instead spins (each call
/// wakes every broker thread: 4–16 times the CPU under load). Reading the
/// in-flight count every millisecond started each commit up to a
/// millisecond after the last acknowledgement (1.1 ms in a `debug=protocol`
/// trace of fanout at 450 events/s).
///
/// So the delivery reports wake this the moment the producer's thread has
/// the last one. That thread completes a report inside its delivery
/// callback, and the record leaves the in-flight count only once the
/// callback has returned: committing straight after the last report lost
/// that race often enough to put the 100 ms poll back into fanout's p99
/// (98–101 ms, `hookline-bench latency`). The count is therefore read again
/// after the reports, yielding while the callback finishes (microseconds),
/// then every millisecond.
async fn await_reports(producer: &FutureProducer, reports: Vec<DeliveryFuture>, timeout: Duration) {
    const YIELDS: u32 = 64;
    let all = async {
        for report in reports {
            // The outcome is the commit's to judge; a cancelled report means
            // the producer is gone, which the commit finds too.
            let _ = report.await;
        }
        let mut yields = 0;
        while producer.in_flight_count() > 0 {
            if yields < YIELDS {
                yields += 1;
                tokio::task::yield_now().await;
            } else {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
    };
    if tokio::time::timeout(timeout, all).await.is_err() {
        tracing::warn!(
            ?timeout,
            "records of the transaction still unacknowledged; the commit flushes them"
        );
    }
}

/// Runs a blocking transactional call ([`bounded`] by its timeout), resuming
/// it while librdkafka says the error is retriable (a timeout: the call is
/// resumed, not restarted) and `budget` (the call timeout) has not passed
/// since the first try; then the error stands, and [`classify`] makes the
/// producer be re-created.
///
/// The budget is the whole call's, not each try's: a coordinator librdkafka
/// keeps asking after a broker restart without looking it up again
/// (confluentinc/librdkafka#5511) times out every resumption, and ten of them
/// held fanout's commits for minutes in the fault suite, while a new producer
/// finds the coordinator and fences the old transaction at once.
async fn retrying(
    call: &'static str,
    budget: Duration,
    f: impl Fn() -> KafkaResult<()> + Send + Sync + 'static,
) -> Result<(), TxnError> {
    let f = std::sync::Arc::new(f);
    resume_within(
        budget,
        || {
            let f = std::sync::Arc::clone(&f);
            bounded(call, budget, move || f())
        },
        |e: &KafkaError| match e {
            KafkaError::Transaction(rd) => rd.is_retriable(),
            _ => false,
        },
    )
    .await
    .map_err(|e| match e {
        Resumed::Call(e) => classify(e),
        Resumed::Stuck(stuck) => stuck,
    })
}

/// How a resumed call ended short of success.
#[derive(Debug, PartialEq)]
enum Resumed<E, S> {
    /// The call's own error (not retriable, or past the budget).
    Call(E),
    /// A try did not return ([`bounded`]).
    Stuck(S),
}

/// [`retrying`]'s loop: runs `try_once` until it succeeds, fails with an
/// error `retriable` refuses, or `budget` has passed since the first try; a
/// try that gets stuck ends it at once.
async fn resume_within<E: std::fmt::Display, S, F>(
    budget: Duration,
    mut try_once: impl FnMut() -> F,
    retriable: impl Fn(&E) -> bool,
) -> Result<(), Resumed<E, S>>
where
    F: std::future::Future<Output = Result<Result<(), E>, S>>,
{
    let ends = tokio::time::Instant::now() + budget;
    let mut tries = 1;
    retry::retry_until(
        Backoff::constant(RESUME_PAUSE),
        || {
            let try_once = try_once();
            async move {
                match try_once.await {
                    Ok(done) => done.map_err(Resumed::Call),
                    Err(stuck) => Err(Resumed::Stuck(stuck)),
                }
            }
        },
        |e, wait| match e {
            Resumed::Call(e) if retriable(e) && tokio::time::Instant::now() + wait < ends => {
                tracing::warn!(error = %e, tries, "transactional call timed out; resuming it");
                tries += 1;
                Then::Retry
            }
            _ => Then::GiveUp,
        },
    )
    .await
}

/// Runs a blocking librdkafka call on a thread of its own and waits for it
/// for its `timeout` and [`STUCK_SLACK`] at most: past that it is
/// [`TxnError::Stuck`] and the thread is left to the call (it holds its own
/// handle on the producer, which lives until the call returns). Not tokio's
/// blocking pool: the runtime waits for those threads when it shuts down, and
/// a stuck one would keep the process from exiting.
async fn bounded<T: Send + 'static>(
    call: &'static str,
    timeout: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, TxnError> {
    let waited = timeout + STUCK_SLACK;
    let (done, result) = tokio::sync::oneshot::channel();
    if let Err(error) = std::thread::Builder::new()
        .name("hookline-txn".to_owned())
        .spawn(move || {
            let _ = done.send(f());
        })
    {
        tracing::error!(%error, call, "could not start a transactional call's thread");
        return Err(TxnError::Fatal(KafkaError::Canceled));
    }
    match tokio::time::timeout(waited, result).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(_)) => {
            tracing::error!(
                call,
                "a transactional call's thread ended without an answer"
            );
            Err(TxnError::Fatal(KafkaError::Canceled))
        }
        Err(_) => {
            tracing::error!(
                call,
                ?waited,
                "a transactional call did not return past its timeout \
                 (confluentinc/librdkafka#5456); re-creating the producer"
            );
            Err(TxnError::Stuck { call, waited })
        }
    }
}

/// Abortable only when librdkafka says so (or the error is not a
/// transactional one); a fatal error, a call still retriable after its
/// [`retrying`] budget, or any other state error leaves the producer in a state
/// only a new one (which fences it) gets out of.
pub fn classify(e: KafkaError) -> TxnError {
    match &e {
        KafkaError::Transaction(rd) if rd.is_fatal() => TxnError::Fatal(e),
        KafkaError::Transaction(rd) if rd.txn_requires_abort() => TxnError::Abortable(e),
        KafkaError::Transaction(_) => TxnError::Fatal(e),
        _ => TxnError::Abortable(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One try's answer: never stuck here.
    type Try = std::future::Ready<Result<Result<(), &'static str>, ()>>;

    /// A try failing `fails` times with `error`, then succeeding; counts tries.
    fn flaky(
        fails: u32,
        error: &'static str,
    ) -> (impl FnMut() -> Try, std::rc::Rc<std::cell::Cell<u32>>) {
        let tries = std::rc::Rc::new(std::cell::Cell::new(0));
        let counted = std::rc::Rc::clone(&tries);
        let call = move || {
            counted.set(counted.get() + 1);
            std::future::ready(Ok(if counted.get() <= fails {
                Err(error)
            } else {
                Ok(())
            }))
        };
        (call, tries)
    }

    #[tokio::test(start_paused = true)]
    async fn a_retriable_call_is_resumed_within_its_budget() {
        let (call, tries) = flaky(2, "timed out");
        assert_eq!(
            resume_within(Duration::from_secs(30), call, |e| *e == "timed out").await,
            Ok(())
        );
        assert_eq!(tries.get(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn past_its_budget_the_error_stands_for_the_producer_to_be_recreated() {
        // A try that used up the budget (a call timeout) is not resumed.
        let (call, tries) = flaky(5, "timed out");
        assert_eq!(
            resume_within(Duration::ZERO, call, |e| *e == "timed out").await,
            Err(Resumed::Call("timed out"))
        );
        assert_eq!(tries.get(), 1);
        // Nor is an error that is not retriable.
        let (call, tries) = flaky(5, "fenced");
        assert_eq!(
            resume_within(Duration::from_secs(30), call, |e| *e == "timed out").await,
            Err(Resumed::Call("fenced"))
        );
        assert_eq!(tries.get(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_stuck_try_ends_the_call_at_once() {
        let tries = std::cell::Cell::new(0);
        let result: Result<(), Resumed<&str, &str>> = resume_within(
            Duration::from_secs(30),
            || {
                tries.set(tries.get() + 1);
                std::future::ready(Err("stuck"))
            },
            |_: &&str| true,
        )
        .await;
        assert_eq!(result, Err(Resumed::Stuck("stuck")));
        assert_eq!(tries.get(), 1);
    }

    /// librdkafka's send_offsets_to_transaction can block past its timeout
    /// for good (confluentinc/librdkafka#5456): such a call is given up at its
    /// timeout and the slack, and the producer is re-created.
    #[tokio::test(start_paused = true)]
    async fn a_call_that_never_returns_is_given_up_past_its_timeout() {
        let (_keep, never) = std::sync::mpsc::channel::<()>();
        let started = tokio::time::Instant::now();
        let result = bounded(
            "send_offsets_to_transaction",
            Duration::from_secs(10),
            move || {
                let _ = never.recv();
            },
        )
        .await;
        match result {
            Err(TxnError::Stuck { call, waited }) => {
                assert_eq!(call, "send_offsets_to_transaction");
                assert_eq!(waited, Duration::from_secs(10) + STUCK_SLACK);
            }
            other => panic!("expected Stuck, got {other:?}"),
        }
        assert!(started.elapsed() >= Duration::from_secs(10) + STUCK_SLACK);
    }

    /// (Not on a paused clock: it would jump past the deadline while the
    /// call's thread runs.)
    #[tokio::test]
    async fn a_call_that_returns_in_time_hands_back_its_value() {
        assert_eq!(
            bounded("flush", Duration::from_secs(10), || 7).await.ok(),
            Some(7)
        );
    }
}
