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

use std::{collections::HashMap, sync::Arc, time::Duration};

use anyhow::Context as _;
use bytes::Bytes;
use hookline_envelope::{decode, delivery_id, DomainEvent};
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
    producer::{FutureProducer, FutureRecord},
    types::RDKafkaErrorCode,
};
use tokio::{sync::Semaphore, task::JoinHandle};

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
/// and `max_in_flight` requests per subscription.
pub fn start(
    p: &Pipeline,
    subs: HashMap<String, Vec<String>>,
    max_in_flight: usize,
) -> anyhow::Result<Bare> {
    let topics = p.topics.clone();
    let events: StreamConsumer = kafka::client_config()
        .set("group.id", &p.groups.fanout)
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "true")
        .set("auto.commit.interval.ms", "100")
        .create()
        .context("creating the bare events consumer")?;
    events.subscribe(&[topics.events()])?;
    let producer: FutureProducer = kafka::client_config()
        .set("linger.ms", "1")
        .create()
        .context("creating the bare producer")?;
    let deliveries: StreamConsumer = kafka::client_config()
        .set("group.id", format!("{}bare-dispatch", topics.prefix()))
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "true")
        .set("auto.commit.interval.ms", "100")
        .create()
        .context("creating the bare deliveries consumer")?;
    deliveries.subscribe(&[topics.deliveries()])?;
    let url: hyper::Uri = p.receiver.url("/ok").parse()?;
    let slots = Arc::new(Semaphore::new(
        subs.values().map(Vec::len).sum::<usize>().max(1) * max_in_flight,
    ));

    let out = topics.deliveries().to_owned();
    let fan = tokio::spawn(async move {
        loop {
            let msg = match events.recv().await {
                Ok(m) => m,
                Err(e) => {
                    eprintln!("bare events consumer: {e}");
                    continue;
                }
            };
            let Some(event) = msg.payload().and_then(|v| decode::<DomainEvent>(v).ok()) else {
                continue;
            };
            for sub in subs.get(&event.tenant_id).into_iter().flatten() {
                let id = delivery_id(&event.event_id, sub);
                loop {
                    let record = FutureRecord::to(&out)
                        .key(event.tenant_id.as_bytes())
                        .payload(&event.payload)
                        .headers(OwnedHeaders::new().insert(Header {
                            key: ID_HEADER,
                            value: Some(id.as_bytes()),
                        }));
                    match producer.send_result(record) {
                        // The report is not awaited: the commit-free path.
                        Ok(_report) => break,
                        Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
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
    });

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
