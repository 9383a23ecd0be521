//! One attempt: sign at attempt time, POST, classify, and make the follow-up
//! (retry record or dead letter) durable before reporting the source record
//! finished. A follow-up that cannot be produced is retried until it is, or until
//! the attempt is cancelled (drain or revoke), in which case the source record
//! stays unfinished and is attempted again by whoever reads it next.

use std::{
    sync::Arc,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use bytes::Bytes;
use hookline_core::{classify, epoch, AttemptResult, FailureKind};
use hookline_envelope::{encode, Delivery, Topics};
use hookline_runtime::{
    http::{Failure, Outgoing, WebhookClient},
    signing::{self, SecretStore},
};
use hyper::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE, USER_AGENT};
use rdkafka::producer::{FutureProducer, FutureRecord};
use tokio_util::sync::CancellationToken;

use crate::{
    events,
    outcome::{plan, AttemptFacts, FollowUp, RetryPolicy},
};

/// Header carrying the event type (Standard Webhooks leaves it to the sender).
pub const HEADER_EVENT_TYPE: &str = "webhook-event-type";

/// `hookline/<version>`.
pub const USER_AGENT_VALUE: &str = concat!("hookline/", env!("CARGO_PKG_VERSION"));

/// What every attempt shares.
pub(crate) struct AttemptContext {
    pub client: WebhookClient,
    pub secrets: SecretStore,
    pub producer: FutureProducer,
    pub topics: Topics,
    pub retry_policy: RetryPolicy,
}

impl std::fmt::Debug for AttemptContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AttemptContext")
            .field("retry_policy", &self.retry_policy)
            .finish_non_exhaustive()
    }
}

/// Where the subscription said to send it, read at attempt time.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub url: String,
    pub secret_ref: String,
}

/// An attempt refused before it is sent, decided by the engine's machine; it
/// is classified and followed up (dead-lettered) like any other failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal {
    pub kind: FailureKind,
    pub detail: String,
}

impl Refusal {
    /// A payload over `--max-payload-bytes`.
    pub(crate) fn payload_too_large(len: usize, limit: usize) -> Self {
        Self {
            kind: FailureKind::PayloadTooLarge,
            detail: format!("payload of {len} bytes exceeds --max-payload-bytes {limit}"),
        }
    }
}

/// How an attempt ended, for the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Finished {
    /// Delivered, or its follow-up is durable: finish the source offset.
    Durable,
    /// Cancelled before the follow-up was durable: leave the offset unfinished.
    Abandoned,
}

/// Runs one attempt to its durable end (or cancellation).
pub(crate) async fn run(
    ctx: Arc<AttemptContext>,
    delivery: Delivery,
    target: Target,
    refusal: Option<Refusal>,
    cancel: CancellationToken,
) -> Finished {
    let started = SystemTime::now();
    let clock = Instant::now();
    let (result, detail) = match refusal {
        Some(r) => (AttemptResult::Failed(r.kind), Some(r.detail)),
        None => attempt(&ctx, &delivery, &target, started).await,
    };
    let now = SystemTime::now();
    let classification = classify(&result, now);
    let took = clock.elapsed();
    let facts = AttemptFacts {
        classification,
        started_ms: epoch::millis(started),
        now_ms: epoch::millis(now),
        detail: detail.as_deref(),
    };
    let follow_up = plan(&delivery, &facts, &ctx.retry_policy, rand::random::<f64>());
    events::AttemptEnded {
        delivery: &delivery,
        facts: &facts,
        took,
    }
    .emit();
    let (topic, value, tier) = match &follow_up {
        FollowUp::Done => return Finished::Durable,
        FollowUp::Retry { tier, record } => {
            let Some((name, topic)) = ctx.topics.retries().nth(*tier) else {
                events::NoSuchRetryTier { tier: *tier }.emit();
                return Finished::Abandoned;
            };
            (topic.to_owned(), encode(record.as_ref()), Some(name))
        }
        FollowUp::Dead { letter, .. } => {
            (ctx.topics.dlq().to_owned(), encode(letter.as_ref()), None)
        }
    };
    let key = Some(delivery.tenant_id.as_bytes());
    let finished = produce_until_durable(&ctx.producer, &topic, key, &value, &cancel).await;
    if finished == Finished::Durable {
        match (&follow_up, tier) {
            (FollowUp::Dead { reason, .. }, _) => events::DeadLettered {
                reason: *reason,
                delivery: &delivery,
            }
            .emit(),
            (_, Some(tier)) => events::RetryWritten {
                tier,
                delivery: &delivery,
            }
            .emit(),
            _ => {}
        }
    }
    finished
}

/// Signs and POSTs; returns the result and a short detail for a dead letter.
async fn attempt(
    ctx: &AttemptContext,
    delivery: &Delivery,
    target: &Target,
    now: SystemTime,
) -> (AttemptResult, Option<String>) {
    let failed = |kind: FailureKind, detail: String| (AttemptResult::Failed(kind), Some(detail));
    let keys = match ctx.secrets.get(&target.secret_ref) {
        Ok(keys) => keys,
        Err(error) => {
            events::SecretUnavailable {
                delivery,
                error: &error,
            }
            .emit();
            return failed(FailureKind::MissingSecret, error.to_string());
        }
    };
    let timestamp = i64::try_from(now.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs())
        .unwrap_or(i64::MAX);
    let signed = signing::sign(&keys, &delivery.delivery_id, timestamp, &delivery.payload);
    let headers = match headers(delivery, &signed) {
        Ok(h) => h,
        Err(why) => return failed(FailureKind::InvalidUrl, why),
    };
    let outgoing = Outgoing {
        url: target.url.clone(),
        headers,
        body: Bytes::copy_from_slice(&delivery.payload),
    };
    match ctx.client.post(outgoing).await {
        Ok(incoming) => {
            let detail = (!incoming.body.is_empty())
                .then(|| String::from_utf8_lossy(&incoming.body).into_owned());
            (
                AttemptResult::Response {
                    status: incoming.status,
                    retry_after: incoming.retry_after,
                },
                detail,
            )
        }
        Err(Failure { kind, detail }) => failed(kind, detail),
    }
}

fn headers(delivery: &Delivery, signed: &signing::SignatureHeaders) -> Result<HeaderMap, String> {
    let value = |what: &str, v: &str| {
        HeaderValue::from_str(v).map_err(|_| format!("{what} is not a valid header value"))
    };
    let mut h = HeaderMap::with_capacity(6);
    let content_type = value("content_type", &delivery.content_type)
        .unwrap_or_else(|_| HeaderValue::from_static("application/octet-stream"));
    h.insert(CONTENT_TYPE, content_type);
    h.insert(USER_AGENT, HeaderValue::from_static(USER_AGENT_VALUE));
    h.insert(
        HeaderName::from_static(signing::HEADER_ID),
        value("delivery_id", &signed.id)?,
    );
    h.insert(
        HeaderName::from_static(signing::HEADER_TIMESTAMP),
        HeaderValue::from(signed.timestamp),
    );
    h.insert(
        HeaderName::from_static(signing::HEADER_SIGNATURE),
        value("signature", &signed.signature)?,
    );
    h.insert(
        HeaderName::from_static(HEADER_EVENT_TYPE),
        value("event_type", &delivery.event_type)?,
    );
    Ok(h)
}

/// Produces one record, retrying with backoff until acknowledged or cancelled.
pub(crate) async fn produce_until_durable(
    producer: &FutureProducer,
    topic: &str,
    key: Option<&[u8]>,
    value: &[u8],
    cancel: &CancellationToken,
) -> Finished {
    let mut backoff = Duration::from_millis(100);
    loop {
        let mut record = FutureRecord::<[u8], [u8]>::to(topic).payload(value);
        if let Some(key) = key {
            record = record.key(key);
        }
        let sent = tokio::select! {
            _ = cancel.cancelled() => return Finished::Abandoned,
            r = producer.send(record, Duration::from_secs(5)) => r,
        };
        match sent {
            Ok(_) => return Finished::Durable,
            Err((error, _)) => {
                events::FollowUpFailed {
                    topic,
                    error: &error,
                    backoff,
                }
                .emit();
                tokio::select! {
                    _ = cancel.cancelled() => return Finished::Abandoned,
                    _ = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
        }
    }
}
