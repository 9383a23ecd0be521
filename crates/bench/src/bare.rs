//! The bare path the `limit` scenario measures: the least that moves the same
//! events through the same broker, topics and receiver. Two loops in the
//! bench process: one consumes `events` (auto-commit every 100 ms), decodes
//! each event and produces one record per matching subscription to
//! `deliveries` (no transaction, `linger.ms=1`, the delivery id in a header,
//! the payload as the value); the other consumes `deliveries` and POSTs each
//! payload to the receiver with its `webhook-id` (hyper's pooled client, at
//! most 16 requests per subscription in flight, as the hookline scenarios
//! allow). No signing, lanes, retries topics, dead letters or ordering:
//! whatever hookline does beyond this is what its figure pays for.
//!
//! With `transactional`, the first loop hands off as fanout does, exactly
//! once: it collects what is ready (no sooner than 1 ms after its previous
//! commit, as fanout's `--txn-gap`), then produces the batch and its input
//! offsets in one transaction (`retry.backoff.ms=5`, as the stages), and the
//! second loop reads `read_committed`. That is the floor of any path that
//! keeps the hand-off in Kafka transactions with librdkafka on this broker:
//! what hookline adds to it is its own.

use std::{collections::HashMap, sync::Arc, time::Duration};

use anyhow::Context as _;
use bytes::Bytes;
use futures::FutureExt as _;
use hookline_envelope::{decode, delivery_id, DomainEvent};
use hookline_runtime::kafka::{Offsets, ReadCommitted as _, StartAt};
use hookline_testkit::kafka;
use http_body_util::Full;
use hyper_util::{
    client::legacy::{connect::HttpConnector, Client},
    rt::TokioExecutor,
};
use rdkafka::{
    consumer::{Consumer, StreamConsumer},
    error::KafkaError,
    message::{Header, Headers, Message, OwnedHeaders},
    producer::{FutureProducer, FutureRecord, Producer},
    types::RDKafkaErrorCode,
    Offset, TopicPartitionList,
};
use tokio::{sync::Semaphore, task::JoinHandle, time::Instant};

use crate::pipeline::Pipeline;

/// Header of a bare delivery record: its `webhook-id`.
const ID_HEADER: &str = "webhook-id";

/// The two loops; aborted when dropped.
pub struct Bare {
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Bare {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Starts both loops on `p`'s topics, with `subs` (tenant → subscription ids)
/// and `max_in_flight` requests per subscription; the events → deliveries
/// hand-off in Kafka transactions when `transactional`.
pub async fn start(
    p: &Pipeline,
    subs: HashMap<String, Vec<String>>,
    max_in_flight: usize,
    transactional: bool,
) -> anyhow::Result<Bare> {
    let topics = p.topics.clone();
    let events: StreamConsumer = kafka::client_config()
        .set("group.id", &p.groups.fanout)
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", (!transactional).to_string())
        .set("auto.commit.interval.ms", "100")
        .create()
        .context("creating the bare events consumer")?;
    events.subscribe(&[topics.events()])?;
    let mut producer = kafka::client_config();
    producer.set("linger.ms", "1");
    if transactional {
        producer
            .set(
                "transactional.id",
                format!("{}bare-fanout", topics.prefix()),
            )
            .set("retry.backoff.ms", "5")
            .set("transaction.timeout.ms", "20000");
    }
    let producer: FutureProducer = producer.create().context("creating the bare producer")?;
    if transactional {
        let producer = producer.clone();
        tokio::task::spawn_blocking(move || producer.init_transactions(TXN_CALL))
            .await?
            .context("initialising the bare producer's transactions")?;
    }
    let deliveries: StreamConsumer = kafka::client_config()
        .set("group.id", format!("{}bare-dispatch", topics.prefix()))
        .read_committed(
            StartAt::Earliest,
            Offsets::AutoCommit {
                every: Duration::from_millis(100),
            },
        )
        .create()
        .context("creating the bare deliveries consumer")?;
    deliveries.subscribe(&[topics.deliveries()])?;
    let url: hyper::Uri = p.receiver.url("/ok").parse()?;
    let slots = Arc::new(Semaphore::new(
        subs.values().map(Vec::len).sum::<usize>().max(1) * max_in_flight,
    ));

    let out = topics.deliveries().to_owned();
    let fan = if transactional {
        tokio::spawn(fan_in_transactions(events, producer, subs, out))
    } else {
        tokio::spawn(async move {
            loop {
                let msg = match events.recv().await {
                    Ok(m) => m,
                    Err(e) => {
                        eprintln!("bare events consumer: {e}");
                        continue;
                    }
                };
                let Some(f) = msg.payload().and_then(|v| fanned(v, &subs)) else {
                    continue;
                };
                for id in &f.ids {
                    loop {
                        let record = delivery_record(&out, &f, id);
                        match producer.send_result(record) {
                            // The report is not awaited: the commit-free path.
                            Ok(_report) => break,
                            Err((
                                KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull),
                                _,
                            )) => {
                                tokio::time::sleep(Duration::from_millis(1)).await;
                            }
                            Err((e, _)) => {
                                eprintln!("bare producer: {e}");
                                break;
                            }
                        }
                    }
                }
            }
        })
    };

    let client: Client<HttpConnector, Full<Bytes>> =
        Client::builder(TokioExecutor::new()).build_http();
    let post = tokio::spawn(async move {
        loop {
            let msg = match deliveries.recv().await {
                Ok(m) => m,
                Err(e) => {
                    eprintln!("bare deliveries consumer: {e}");
                    continue;
                }
            };
            let id = msg
                .headers()
                .and_then(|h| h.iter().find(|h| h.key == ID_HEADER))
                .and_then(|h| h.value)
                .map(<[u8]>::to_vec)
                .unwrap_or_default();
            let body = Bytes::copy_from_slice(msg.payload().unwrap_or_default());
            let Ok(permit) = Arc::clone(&slots).acquire_owned().await else {
                return;
            };
            let (client, url) = (client.clone(), url.clone());
            tokio::spawn(async move {
                let _permit = permit;
                // Again until it is answered: the receiver says 204.
                loop {
                    let request = hyper::Request::post(url.clone())
                        .header(ID_HEADER, id.as_slice())
                        .header(hyper::header::CONTENT_TYPE, "application/json")
                        .body(Full::new(body.clone()));
                    let Ok(request) = request else { return };
                    match client.request(request).await {
                        Ok(response) if response.status().is_success() => return,
                        _ => tokio::time::sleep(Duration::from_millis(10)).await,
                    }
                }
            });
        }
    });
    Ok(Bare {
        tasks: vec![fan, post],
    })
}

/// Timeout of each blocking transaction call.
const TXN_CALL: Duration = Duration::from_secs(30);

/// The least gap between a commit and the next transaction's end: fanout's
/// `--txn-gap` default, which keeps a transaction from being answered
/// `CONCURRENT_TRANSACTIONS` while the previous commit's markers are written.
const TXN_GAP: Duration = Duration::from_millis(1);

/// Most events in one transaction: fanout's `--txn-max-events` default.
const TXN_MAX_EVENTS: usize = 2000;

/// One event, decoded: its key, the delivery ids it fans out to, its payload.
struct Fanned {
    tenant: String,
    ids: Vec<String>,
    payload: Vec<u8>,
}

/// The event in `value` and its delivery ids under `subs`; `None` when it
/// does not decode.
fn fanned(value: &[u8], subs: &HashMap<String, Vec<String>>) -> Option<Fanned> {
    let event = decode::<DomainEvent>(value).ok()?;
    let ids = subs
        .get(&event.tenant_id)
        .into_iter()
        .flatten()
        .map(|sub| delivery_id(&event.event_id, sub))
        .collect();
    Some(Fanned {
        tenant: event.tenant_id,
        ids,
        payload: event.payload,
    })
}

/// The bare delivery record of `f` for delivery `id`: keyed by tenant, the
/// payload as the value, the id in a header.
fn delivery_record<'a>(out: &'a str, f: &'a Fanned, id: &'a str) -> FutureRecord<'a, [u8], [u8]> {
    FutureRecord::to(out)
        .key(f.tenant.as_bytes())
        .payload(f.payload.as_slice())
        .headers(OwnedHeaders::new().insert(Header {
            key: ID_HEADER,
            value: Some(id.as_bytes()),
        }))
}

/// The first loop, exactly once: each batch of what is ready, and the offsets
/// after it, in one transaction. An error stops the loop (the scenario then
/// reports the deliveries it lost): a floor is measured on the happy path.
async fn fan_in_transactions(
    events: StreamConsumer,
    producer: FutureProducer,
    subs: HashMap<String, Vec<String>>,
    out: String,
) {
    let mut committed_at: Option<Instant> = None;
    loop {
        let mut batch: Vec<Fanned> = Vec::new();
        let mut next: HashMap<(String, i32), i64> = HashMap::new();
        let mut take = |msg: &rdkafka::message::BorrowedMessage<'_>| {
            next.insert((msg.topic().to_owned(), msg.partition()), msg.offset() + 1);
            batch.extend(msg.payload().and_then(|v| fanned(v, &subs)));
        };
        match events.recv().await {
            Ok(m) => take(&m),
            Err(e) => {
                eprintln!("bare events consumer: {e}");
                continue;
            }
        }
        // What is ready now; then, within the gap after the last commit,
        // what arrives before it ends.
        let gap_ends = committed_at.map(|at| at + TXN_GAP);
        let (mut empty, mut taken) = (0, 1);
        while taken < TXN_MAX_EVENTS {
            match events.recv().now_or_never() {
                Some(Ok(m)) => {
                    empty = 0;
                    taken += 1;
                    take(&m);
                }
                Some(Err(e)) => eprintln!("bare events consumer: {e}"),
                // A non-message event may have been served instead: twice.
                None if empty == 0 => {
                    empty += 1;
                    tokio::task::yield_now().await;
                }
                None => match gap_ends.filter(|&g| Instant::now() < g) {
                    Some(g) => tokio::select! {
                        () = tokio::time::sleep_until(g) => break,
                        r = events.recv() => match r {
                            Ok(m) => {
                                taken += 1;
                                take(&m);
                            }
                            Err(e) => eprintln!("bare events consumer: {e}"),
                        },
                    },
                    None => break,
                },
            }
        }
        if let Err(e) = commit(&events, &producer, &out, batch, next).await {
            eprintln!("bare transactional hand-off stopped: {e:#}");
            return;
        }
        committed_at = Some(Instant::now());
    }
}

/// One transaction: `batch`'s records and the `next` offsets of its input.
async fn commit(
    events: &StreamConsumer,
    producer: &FutureProducer,
    out: &str,
    batch: Vec<Fanned>,
    next: HashMap<(String, i32), i64>,
) -> anyhow::Result<()> {
    producer.begin_transaction()?;
    let mut reports = Vec::new();
    for f in &batch {
        for id in &f.ids {
            reports.push(
                producer
                    .send_result(delivery_record(out, f, id))
                    .map_err(|(e, _)| anyhow::anyhow!("producing a delivery: {e}"))?,
            );
        }
    }
    let mut offsets = TopicPartitionList::new();
    for ((topic, partition), offset) in next {
        offsets.add_partition_offset(&topic, partition, Offset::Offset(offset))?;
    }
    let group = events
        .group_metadata()
        .context("the events consumer has no group metadata")?;
    let p = producer.clone();
    let sent_offsets = tokio::task::spawn_blocking(move || {
        p.send_offsets_to_transaction(&offsets, &group, TXN_CALL)
    });
    for report in reports {
        report
            .await
            .context("a delivery report was dropped")?
            .map_err(|(e, _)| anyhow::anyhow!("a delivery failed: {e}"))?;
    }
    sent_offsets.await??;
    // A record leaves the in-flight count only after its report's callback
    // returns; committing before that makes librdkafka's flush poll for up to
    // 100 ms (README, "The speed work, part 2").
    while producer.in_flight_count() > 0 {
        tokio::task::yield_now().await;
    }
    let p = producer.clone();
    tokio::task::spawn_blocking(move || p.commit_transaction(TXN_CALL)).await??;
    Ok(())
}
