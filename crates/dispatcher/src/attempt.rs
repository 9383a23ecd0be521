//! One attempt: sign at attempt time, POST, classify, and decide the follow-up
//! (a retry record or a dead letter). The follow-up is not produced here: it is
//! handed to the engine (`Ended::Handoff`), which commits it with the source
//! offset in a Kafka transaction (`engine/commit.rs`).

use std::{
    sync::Arc,
    time::{Instant, SystemTime, UNIX_EPOCH},
};

pub(crate) use hookline_dispatch_core::attempt::{Finished, Refusal, Target};
use hookline_dispatch_core::build::{AfterAttempt, HandoffBuilder};

use crate::{
    attempt_log::{self, Logged},
    events,
    handoff::Handoff,
    outcome::{self, plan, AttemptFacts, RetryPolicy},
    part::{Key, NoTarget},
};
use bytes::Bytes;
use hookline_core::{classify, epoch, trace, AttemptResult, FailureKind, Signal};
use hookline_envelope::Delivery;
use hookline_runtime::{
    http::{Failure, Outgoing, WebhookClient},
    signing::{self, SecretStore},
};
use hyper::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE, USER_AGENT};

/// Header carrying the event type (Standard Webhooks leaves it to the sender).
pub const HEADER_EVENT_TYPE: &str = "webhook-event-type";

/// Header carrying the attempt's start, microseconds since the Unix epoch: a
/// receiver (or the bench) can tell the wait before the dispatcher started
/// the request from the time the request itself took. One integer formatted
/// per attempt; not signed, so not to be trusted for anything but timing.
pub const HEADER_ATTEMPT_STARTED: &str = "webhook-attempt-started";

/// `hookline/<version>`.
pub const USER_AGENT_VALUE: &str = concat!("hookline/", env!("CARGO_PKG_VERSION"));

/// What every attempt shares.
pub(crate) struct AttemptContext {
    pub client: WebhookClient,
    pub secrets: SecretStore,
    pub retry_policy: RetryPolicy,
    /// How long a strictly ordered subscription's head may wait in backoff.
    pub strict_head_wait: std::time::Duration,
    /// Where follow-ups go, with their attempt-log records.
    pub handoffs: HandoffBuilder,
}

impl std::fmt::Debug for AttemptContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AttemptContext")
            .field("retry_policy", &self.retry_policy)
            .finish_non_exhaustive()
    }
}

/// How an attempt task ended, for the engine.
#[derive(Debug)]
pub(crate) enum Ended {
    /// Nothing more to write (delivered): finish the source offset now, after
    /// queueing its attempt-log record (`engine/commit.rs`).
    Done(Vec<Logged>),
    /// A follow-up to commit with the source offset, and what the attempt said
    /// of its endpoint's health (for its breaker).
    Handoff(Box<Handoff>, Signal),
    /// Nothing can be written (no topic for the tier): leave the offset unfinished.
    Abandoned,
    /// A strictly ordered delivery to try again in place: `record` (this attempt
    /// counted, due at its `due_at`) goes back to the head of its lane; its
    /// attempt-log record is queued like a delivered one's (its offset stays
    /// below it meanwhile).
    Hold(Box<Delivery>, Signal, Vec<Logged>),
}

/// Runs one attempt of `delivery` (the record at `key`) and decides its follow-up;
/// a `strict` one (from `deliveries.strict`) is held in place instead of retried
/// on a tier (`outcome::strict`).
pub(crate) async fn run(
    ctx: Arc<AttemptContext>,
    key: Key,
    delivery: Delivery,
    target: Target,
    (refusal, strict): (Option<Refusal>, bool),
) -> Ended {
    let started = SystemTime::now();
    let clock = Instant::now();
    let (result, detail) = match refusal {
        Some(r) => (AttemptResult::Failed(r.kind), Some(r.detail)),
        None => attempt(&ctx, &delivery, &target, started).await,
    };
    let now = SystemTime::now();
    let classification = classify(&result, now);
    let signal = Signal::of(&classification);
    let took = clock.elapsed();
    let responded = attempt_log::responded(&result);
    let facts = AttemptFacts {
        classification,
        started_ms: epoch::millis(started),
        now_ms: epoch::millis(now),
        detail: detail.as_deref(),
    };
    let mut follow_up = plan(&delivery, &facts, &ctx.retry_policy, rand::random::<f64>());
    if strict {
        follow_up = outcome::strict(follow_up, &facts, &ctx.retry_policy, ctx.strict_head_wait);
    }
    events::AttemptEnded {
        delivery: &delivery,
        facts: &facts,
        took,
    }
    .emit();
    let took_ms = i64::try_from(took.as_millis()).unwrap_or(i64::MAX);
    match ctx
        .handoffs
        .after_attempt(key, delivery, &facts, follow_up, (responded, took_ms))
    {
        Ok(AfterAttempt::Done(log)) => Ended::Done(log),
        Ok(AfterAttempt::Hold(record, log)) => Ended::Hold(record, signal, log),
        Ok(AfterAttempt::Handoff(handoff)) => Ended::Handoff(handoff, signal),
        Err(missing) => {
            events::missing_topic(missing);
            Ended::Abandoned
        }
    }
}

/// The hand-off of a delivery that is not attempted because its subscription has
/// gone (`why`): its dead letter, written with the source offset like any other.
pub(crate) fn unattempted(
    ctx: &AttemptContext,
    key: Key,
    delivery: Delivery,
    why: &NoTarget,
    now: SystemTime,
) -> Handoff {
    let (handoff, letter) =
        ctx.handoffs
            .unattempted(key, delivery, why, &ctx.retry_policy, epoch::millis(now));
    if let crate::handoff::Written::Dead { reason, .. } = &handoff.written {
        events::NotAttempted {
            letter: &letter,
            reason: *reason,
        }
        .emit();
    }
    handoff
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
    let headers = match headers(delivery, &signed, epoch::micros(now)) {
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

fn headers(
    delivery: &Delivery,
    signed: &signing::SignatureHeaders,
    started_us: i64,
) -> Result<HeaderMap, String> {
    let value = |what: &str, v: &str| {
        HeaderValue::from_str(v).map_err(|_| format!("{what} is not a valid header value"))
    };
    let mut h = HeaderMap::with_capacity(9);
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
    h.insert(
        HeaderName::from_static(HEADER_ATTEMPT_STARTED),
        HeaderValue::from(started_us),
    );
    // The event's W3C trace context, checked by fan-out; passed on unchanged.
    // One that is not a valid header value is left out, never fails the attempt.
    for (name, v) in [
        (trace::TRACEPARENT, delivery.traceparent.as_deref()),
        (trace::TRACESTATE, delivery.tracestate.as_deref()),
    ] {
        if let Some(v) = v.and_then(|v| HeaderValue::from_str(v).ok()) {
            h.insert(HeaderName::from_static(name), v);
        }
    }
    Ok(h)
}
