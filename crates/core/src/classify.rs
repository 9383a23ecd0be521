//! Attempt classification: every attempt result maps to exactly one verdict
//! (delivered, retry, rejected) and one [`Outcome`], whose label is from the
//! bounded set [`OUTCOMES`] and whose [`StatusClass`] is derived from it as a
//! value (never by parsing the label), so metrics never grow a label per status
//! code or per error text.
//!
//! Rules (docs/design.md#classification):
//! - 2xx: delivered.
//! - 408, 425, 429 and 5xx: retry, honouring `Retry-After` (see [`parse_retry_after`]).
//! - other 4xx: rejected (`rejected_4xx`); 3xx: rejected (`redirect`) — redirects are
//!   never followed, so retrying one would only repeat it.
//! - 1xx as a final status and codes outside 100..=599: retry, like a protocol
//!   error. RFC 9110 §15 says a client receiving an invalid status code SHOULD treat
//!   it as a 5xx; a final 1xx is equally a broken exchange, not a receiver's "no".
//! - Transport failures (timeouts, refused, reset, DNS, TLS, protocol): retry.
//! - `MissingSecret`: retry. The subscription names a secret the dispatcher cannot
//!   load yet; an operator can fix that without the delivery being lost, and the
//!   ladder's `max_attempts`/`max_age` still bound how long we wait.
//! - Our own refusals that cannot heal by waiting — `EgressDenied`,
//!   `PayloadTooLarge`, `InvalidUrl` — are rejected with that reason.

use std::time::{Duration, SystemTime};

/// Longest `Retry-After` honoured. Larger hints (or dates further out) are clamped
/// to this, so a hostile or buggy receiver cannot overflow time arithmetic; the
/// ladder clamps further to its last tier anyway.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(7 * 24 * 60 * 60);

/// How an attempt failed before a status line was received (or was refused by us).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailureKind {
    /// The whole request exceeded its total timeout.
    Timeout,
    ConnectTimeout,
    ConnectRefused,
    ConnectionReset,
    Dns,
    Tls,
    /// Malformed or unexpected HTTP from the receiver.
    Protocol,
    /// The egress policy refused the resolved address or the URL scheme.
    EgressDenied,
    /// We refused to send a payload over our size limit.
    PayloadTooLarge,
    /// The subscription's `secret_ref` could not be resolved.
    MissingSecret,
    /// The subscription URL does not parse or is not usable.
    InvalidUrl,
}

impl FailureKind {
    /// Every failure kind.
    pub const ALL: [Self; 11] = [
        Self::Timeout,
        Self::ConnectTimeout,
        Self::ConnectRefused,
        Self::ConnectionReset,
        Self::Dns,
        Self::Tls,
        Self::Protocol,
        Self::EgressDenied,
        Self::PayloadTooLarge,
        Self::MissingSecret,
        Self::InvalidUrl,
    ];

    /// The outcome label of this failure.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Timeout => "timeout",
            Self::ConnectTimeout => "connect_timeout",
            Self::ConnectRefused => "connect_refused",
            Self::ConnectionReset => "connection_reset",
            Self::Dns => "dns",
            Self::Tls => "tls",
            Self::Protocol => "protocol",
            Self::EgressDenied => "egress_denied",
            Self::PayloadTooLarge => "payload_too_large",
            Self::MissingSecret => "missing_secret",
            Self::InvalidUrl => "invalid_url",
        }
    }
}

/// What happened on one attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttemptResult {
    /// A status line arrived; `retry_after` is the raw `Retry-After` header, if any.
    Response {
        status: u16,
        retry_after: Option<String>,
    },
    Failed(FailureKind),
}

/// Why a delivery is dead-lettered without further attempts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RejectReason {
    /// A 4xx other than 408, 410, 425 and 429.
    Http4xx,
    /// 410 Gone: the endpoint says it will never take deliveries again, so the dispatcher
    /// also disables the subscription (`disabled_reason = gone`).
    Gone,
    /// A 3xx: redirects are not followed.
    Redirect,
    EgressDenied,
    PayloadTooLarge,
    InvalidUrl,
}

impl RejectReason {
    /// Every reason.
    pub const ALL: [Self; 6] = [
        Self::Http4xx,
        Self::Gone,
        Self::Redirect,
        Self::EgressDenied,
        Self::PayloadTooLarge,
        Self::InvalidUrl,
    ];

    /// The `DeadLetter.reason` value (and metric label).
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Http4xx => "rejected_4xx",
            Self::Gone => "gone",
            Self::Redirect => "redirect",
            Self::EgressDenied => "egress_denied",
            Self::PayloadTooLarge => "payload_too_large",
            Self::InvalidUrl => "invalid_url",
        }
    }
}

/// Why a delivery was dead-lettered: the `DeadLetter.reason` value and its metric label.
/// The one list of them. A delivery is dead-lettered only when it is rejected or the ladder
/// gives up on it, so a failure that is retried (`missing_secret`, a timeout) is never one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeadLetterReason {
    /// The ladder gave up: `max_attempts` or `max_age` (the dead letter's `detail` says which).
    Exhausted,
    /// A verdict of [`Verdict::Rejected`].
    Rejected(RejectReason),
    /// Its subscription is disabled (by an operator, a 410 or the breaker): kept, not
    /// attempted, for `replay --subscription` once it is enabled again.
    SubscriptionDisabled,
    /// Its subscription was deleted (or now belongs to another tenant): kept, not
    /// attempted, so that `inspect` counts it and nothing vanishes silently.
    Cancelled,
    /// The head of a strictly ordered subscription waited longer than
    /// `--strict-head-wait` in backoff: dead-lettered so that the later ones go on.
    HeadWait,
}

impl DeadLetterReason {
    /// Every reason a dead letter can carry.
    pub const ALL: [DeadLetterReason; 4 + RejectReason::ALL.len()] = {
        let mut all = [Self::Exhausted; 4 + RejectReason::ALL.len()];
        let mut i = 0;
        while i < RejectReason::ALL.len() {
            all[i + 1] = Self::Rejected(RejectReason::ALL[i]);
            i += 1;
        }
        all[i + 1] = Self::SubscriptionDisabled;
        all[i + 2] = Self::Cancelled;
        all[i + 3] = Self::HeadWait;
        all
    };

    /// The `DeadLetter.reason` value: `exhausted`, or the [`RejectReason`]'s.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Exhausted => "exhausted",
            Self::Rejected(reason) => reason.as_str(),
            Self::SubscriptionDisabled => "subscription_disabled",
            Self::Cancelled => "cancelled",
            Self::HeadWait => "head_wait",
        }
    }
}

impl From<RejectReason> for DeadLetterReason {
    fn from(reason: RejectReason) -> Self {
        Self::Rejected(reason)
    }
}

/// What to do with the delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Delivered,
    /// Try again later; `retry_after` is the receiver's parsed, clamped hint.
    Retry {
        retry_after: Option<Duration>,
    },
    Rejected {
        reason: RejectReason,
    },
}

/// The class of an attempt's HTTP status: the `status_class` metric label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StatusClass {
    /// 100..=199 (`1xx`).
    Informational,
    /// 200..=299 (`2xx`).
    Success,
    /// 300..=399 (`3xx`).
    Redirection,
    /// 400..=499 (`4xx`).
    ClientError,
    /// 500..=599 (`5xx`).
    ServerError,
    /// Outside 100..=599 (`invalid`).
    Invalid,
    /// No status line arrived (`none`).
    NoResponse,
}

impl StatusClass {
    /// Every class.
    pub const ALL: [Self; 7] = [
        Self::Informational,
        Self::Success,
        Self::Redirection,
        Self::ClientError,
        Self::ServerError,
        Self::Invalid,
        Self::NoResponse,
    ];

    /// The class of a status code.
    pub fn of(status: u16) -> Self {
        match status {
            100..=199 => Self::Informational,
            200..=299 => Self::Success,
            300..=399 => Self::Redirection,
            400..=499 => Self::ClientError,
            500..=599 => Self::ServerError,
            _ => Self::Invalid,
        }
    }

    /// The metric label (`2xx`, `invalid`, `none`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Informational => "1xx",
            Self::Success => "2xx",
            Self::Redirection => "3xx",
            Self::ClientError => "4xx",
            Self::ServerError => "5xx",
            Self::Invalid => "invalid",
            Self::NoResponse => "none",
        }
    }

    /// The outcome label of a status of this class without a label of its own;
    /// `None` for [`StatusClass::NoResponse`], which has no status.
    fn outcome_label(self) -> Option<&'static str> {
        Some(match self {
            Self::Informational => "http_1xx",
            Self::Success => "http_2xx",
            Self::Redirection => "http_3xx",
            Self::ClientError => "http_4xx",
            Self::ServerError => "http_5xx",
            Self::Invalid => "http_invalid",
            Self::NoResponse => return None,
        })
    }
}

impl std::fmt::Display for StatusClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How an attempt ended, as a value: its label ([`Outcome::as_str`], one of
/// [`OUTCOMES`]) and its [`StatusClass`] are derived from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// A status line arrived with this code: `http_<code>` for codes common in
    /// webhook traffic, else `http_<class>` (`http_invalid` outside 100..=599).
    Response(u16),
    /// None did: a transport failure or our own refusal.
    Failed(FailureKind),
}

impl Outcome {
    /// The bounded label: `Delivery.last_outcome` and the `outcome` metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Response(status) => status_outcome(status),
            Self::Failed(kind) => kind.as_str(),
        }
    }

    /// The status class, [`StatusClass::NoResponse`] for a failure.
    pub fn status_class(self) -> StatusClass {
        match self {
            Self::Response(status) => StatusClass::of(status),
            Self::Failed(_) => StatusClass::NoResponse,
        }
    }

    /// Every label with its status class, built from the same tables
    /// [`Outcome::as_str`] uses: for pre-registering metric series.
    pub fn labels() -> impl Iterator<Item = (&'static str, StatusClass)> {
        let common = COMMON_STATUSES
            .iter()
            .map(|(code, label)| (*label, StatusClass::of(*code)));
        let by_class = StatusClass::ALL
            .into_iter()
            .filter_map(|c| c.outcome_label().map(|label| (label, c)));
        let failures = FailureKind::ALL
            .into_iter()
            .map(|k| (k.as_str(), StatusClass::NoResponse));
        common.chain(by_class).chain(failures)
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Compares the label, so tables of expected labels read as text.
impl PartialEq<&str> for Outcome {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// A verdict plus its bounded outcome (`Delivery.last_outcome`, metric label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Classification {
    pub verdict: Verdict,
    /// Its label is always one of [`OUTCOMES`].
    pub outcome: Outcome,
    /// The HTTP status, when a response arrived (for `DeadLetter.last_status`).
    pub status: Option<u16>,
}

impl Classification {
    /// The status class of the attempt (`none` without a response).
    pub fn status_class(&self) -> StatusClass {
        self.outcome.status_class()
    }
}

/// Every outcome label [`classify`] can produce: `http_<code>` for common codes,
/// `http_<class>` for any other code of a class, `http_invalid` for codes outside
/// 100..=599, and one label per [`FailureKind`]. Fixed at 42 values, so it is safe
/// as a metric label and can be used to pre-register series.
pub const OUTCOMES: &[&str] = &[
    "http_200",
    "http_201",
    "http_202",
    "http_204",
    "http_2xx",
    "http_301",
    "http_302",
    "http_303",
    "http_307",
    "http_308",
    "http_3xx",
    "http_400",
    "http_401",
    "http_403",
    "http_404",
    "http_405",
    "http_408",
    "http_409",
    "http_410",
    "http_413",
    "http_422",
    "http_425",
    "http_429",
    "http_4xx",
    "http_500",
    "http_502",
    "http_503",
    "http_504",
    "http_5xx",
    "http_1xx",
    "http_invalid",
    "timeout",
    "connect_timeout",
    "connect_refused",
    "connection_reset",
    "dns",
    "tls",
    "protocol",
    "egress_denied",
    "payload_too_large",
    "missing_secret",
    "invalid_url",
];

/// Decides what an attempt result means. `now` anchors an HTTP-date `Retry-After`.
pub fn classify(result: &AttemptResult, now: SystemTime) -> Classification {
    match result {
        AttemptResult::Response {
            status,
            retry_after,
        } => {
            let status = *status;
            let verdict = match status {
                200..=299 => Verdict::Delivered,
                408 | 425 | 429 | 500..=599 | 100..=199 => Verdict::Retry {
                    retry_after: retry_after
                        .as_deref()
                        .and_then(|v| parse_retry_after(v, now)),
                },
                300..=399 => Verdict::Rejected {
                    reason: RejectReason::Redirect,
                },
                410 => Verdict::Rejected {
                    reason: RejectReason::Gone,
                },
                400..=499 => Verdict::Rejected {
                    reason: RejectReason::Http4xx,
                },
                // RFC 9110 §15: treat an invalid status as a 5xx.
                _ => Verdict::Retry {
                    retry_after: retry_after
                        .as_deref()
                        .and_then(|v| parse_retry_after(v, now)),
                },
            };
            Classification {
                verdict,
                outcome: Outcome::Response(status),
                status: Some(status),
            }
        }
        AttemptResult::Failed(kind) => {
            let verdict = match kind {
                FailureKind::EgressDenied => Verdict::Rejected {
                    reason: RejectReason::EgressDenied,
                },
                FailureKind::PayloadTooLarge => Verdict::Rejected {
                    reason: RejectReason::PayloadTooLarge,
                },
                FailureKind::InvalidUrl => Verdict::Rejected {
                    reason: RejectReason::InvalidUrl,
                },
                FailureKind::Timeout
                | FailureKind::ConnectTimeout
                | FailureKind::ConnectRefused
                | FailureKind::ConnectionReset
                | FailureKind::Dns
                | FailureKind::Tls
                | FailureKind::Protocol
                | FailureKind::MissingSecret => Verdict::Retry { retry_after: None },
            };
            Classification {
                verdict,
                outcome: Outcome::Failed(*kind),
                status: None,
            }
        }
    }
}

/// The class label of a status (`"2xx"`…), `"invalid"` outside 100..=599; for the
/// `status_class` metric label.
pub fn status_class(status: u16) -> &'static str {
    StatusClass::of(status).as_str()
}

/// Codes common enough in webhook traffic to get their own outcome label.
const COMMON_STATUSES: &[(u16, &str)] = &[
    (200, "http_200"),
    (201, "http_201"),
    (202, "http_202"),
    (204, "http_204"),
    (301, "http_301"),
    (302, "http_302"),
    (303, "http_303"),
    (307, "http_307"),
    (308, "http_308"),
    (400, "http_400"),
    (401, "http_401"),
    (403, "http_403"),
    (404, "http_404"),
    (405, "http_405"),
    (408, "http_408"),
    (409, "http_409"),
    (410, "http_410"),
    (413, "http_413"),
    (422, "http_422"),
    (425, "http_425"),
    (429, "http_429"),
    (500, "http_500"),
    (502, "http_502"),
    (503, "http_503"),
    (504, "http_504"),
];

fn status_outcome(status: u16) -> &'static str {
    if let Some((_, label)) = COMMON_STATUSES.iter().find(|(code, _)| *code == status) {
        return label;
    }
    match StatusClass::of(status).outcome_label() {
        Some(label) => label,
        None => unreachable!("a status code always has a class"),
    }
}

/// Parses a `Retry-After` value relative to `now` (RFC 9110 §10.2.3):
/// - delta-seconds (`"120"`, surrounding whitespace allowed) → that many seconds;
/// - an HTTP-date (IMF-fixdate, and the obsolete RFC 850 / asctime forms recipients
///   must accept) → the time from `now` until then, zero if it is already past;
/// - anything else (negative, fractional, empty, garbage) → `None`: ignored.
///
/// Results are clamped to [`MAX_RETRY_AFTER`].
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if value.is_empty() {
        return None;
    }
    let hint = if value.bytes().all(|b| b.is_ascii_digit()) {
        // All digits but too long for u64 is still a valid, absurd delay: clamp it.
        value
            .parse::<u64>()
            .map_or(MAX_RETRY_AFTER, Duration::from_secs)
    } else {
        let at = httpdate::parse_http_date(value).ok()?;
        at.duration_since(now).unwrap_or(Duration::ZERO)
    };
    Some(hint.min(MAX_RETRY_AFTER))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn every_reject_reason_is_listed_and_is_a_dead_letter_reason() {
        // The match is exhaustive: a new reason fails to compile here until it is listed.
        let position = |r: RejectReason| match r {
            RejectReason::Http4xx => 0,
            RejectReason::Gone => 1,
            RejectReason::Redirect => 2,
            RejectReason::EgressDenied => 3,
            RejectReason::PayloadTooLarge => 4,
            RejectReason::InvalidUrl => 5,
        };
        for (i, r) in RejectReason::ALL.into_iter().enumerate() {
            assert_eq!(position(r), i, "{r:?}");
            assert!(DeadLetterReason::ALL.contains(&r.into()), "{r:?}");
            assert_eq!(DeadLetterReason::from(r).as_str(), r.as_str());
        }
    }

    #[test]
    fn dead_letter_reasons_are_listed_once_in_order() {
        let labels: Vec<&str> = DeadLetterReason::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(
            labels,
            [
                "exhausted",
                "rejected_4xx",
                "gone",
                "redirect",
                "egress_denied",
                "payload_too_large",
                "invalid_url",
                "subscription_disabled",
                "cancelled",
                "head_wait"
            ]
        );
    }

    #[test]
    fn a_retried_failure_is_never_a_dead_letter_reason() {
        let now = at(NOW);
        for kind in [
            FailureKind::MissingSecret,
            FailureKind::Timeout,
            FailureKind::Dns,
        ] {
            let c = classify(&AttemptResult::Failed(kind), now);
            assert!(matches!(c.verdict, Verdict::Retry { .. }), "{kind:?}");
            assert!(
                DeadLetterReason::ALL
                    .iter()
                    .all(|r| r.as_str() != kind.as_str()),
                "{kind:?}"
            );
        }
    }

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    /// 2015-10-21T07:28:00Z, the date used in RFC examples.
    const NOW: u64 = 1_445_412_480;

    fn response(status: u16, retry_after: Option<&str>) -> AttemptResult {
        AttemptResult::Response {
            status,
            retry_after: retry_after.map(str::to_owned),
        }
    }

    fn retry(secs: Option<u64>) -> Verdict {
        Verdict::Retry {
            retry_after: secs.map(Duration::from_secs),
        }
    }

    fn rejected(reason: RejectReason) -> Verdict {
        Verdict::Rejected { reason }
    }

    #[test]
    fn http_status_table() {
        use RejectReason::*;
        let cases: &[(u16, Option<&str>, Verdict, &str)] = &[
            (200, None, Verdict::Delivered, "http_200"),
            (204, None, Verdict::Delivered, "http_204"),
            (226, None, Verdict::Delivered, "http_2xx"),
            (299, Some("30"), Verdict::Delivered, "http_2xx"),
            (301, None, rejected(Redirect), "http_301"),
            (304, None, rejected(Redirect), "http_3xx"),
            (308, None, rejected(Redirect), "http_308"),
            (400, None, rejected(Http4xx), "http_400"),
            (404, Some("30"), rejected(Http4xx), "http_404"),
            (410, None, rejected(Gone), "http_410"),
            (410, Some("30"), rejected(Gone), "http_410"),
            (413, None, rejected(Http4xx), "http_413"),
            (418, None, rejected(Http4xx), "http_4xx"),
            (499, None, rejected(Http4xx), "http_4xx"),
            (408, None, retry(None), "http_408"),
            (425, None, retry(None), "http_425"),
            (429, Some("120"), retry(Some(120)), "http_429"),
            (500, None, retry(None), "http_500"),
            (503, Some("7"), retry(Some(7)), "http_503"),
            (507, None, retry(None), "http_5xx"),
            (599, None, retry(None), "http_5xx"),
            (100, None, retry(None), "http_1xx"),
            (101, None, retry(None), "http_1xx"),
            (0, None, retry(None), "http_invalid"),
            (99, None, retry(None), "http_invalid"),
            (600, Some("5"), retry(Some(5)), "http_invalid"),
            (999, None, retry(None), "http_invalid"),
            (u16::MAX, None, retry(None), "http_invalid"),
        ];
        for (status, retry_after, verdict, outcome) in cases {
            let c = classify(&response(*status, *retry_after), at(NOW));
            assert_eq!(c.verdict, *verdict, "status {status}");
            assert_eq!(c.outcome, *outcome, "status {status}");
            assert_eq!(c.status, Some(*status));
        }
    }

    #[test]
    fn failure_kind_table() {
        use FailureKind::*;
        let cases: &[(FailureKind, Verdict, &str)] = &[
            (Timeout, retry(None), "timeout"),
            (ConnectTimeout, retry(None), "connect_timeout"),
            (ConnectRefused, retry(None), "connect_refused"),
            (ConnectionReset, retry(None), "connection_reset"),
            (Dns, retry(None), "dns"),
            (Tls, retry(None), "tls"),
            (Protocol, retry(None), "protocol"),
            (MissingSecret, retry(None), "missing_secret"),
            (
                EgressDenied,
                rejected(RejectReason::EgressDenied),
                "egress_denied",
            ),
            (
                PayloadTooLarge,
                rejected(RejectReason::PayloadTooLarge),
                "payload_too_large",
            ),
            (
                InvalidUrl,
                rejected(RejectReason::InvalidUrl),
                "invalid_url",
            ),
        ];
        for (kind, verdict, outcome) in cases {
            let c = classify(&AttemptResult::Failed(*kind), at(NOW));
            assert_eq!(c.verdict, *verdict, "{kind:?}");
            assert_eq!(c.outcome, *outcome, "{kind:?}");
            assert_eq!(c.status, None);
        }
    }

    #[test]
    fn reject_reason_labels() {
        use RejectReason::*;
        let cases = [
            (Http4xx, "rejected_4xx"),
            (Redirect, "redirect"),
            (EgressDenied, "egress_denied"),
            (PayloadTooLarge, "payload_too_large"),
            (InvalidUrl, "invalid_url"),
        ];
        for (reason, label) in cases {
            assert_eq!(reason.as_str(), label);
        }
    }

    #[test]
    fn retry_after_table() {
        let week = MAX_RETRY_AFTER.as_secs();
        let cases: &[(&str, Option<u64>)] = &[
            ("120", Some(120)),
            ("0", Some(0)),
            (" 30 ", Some(30)),
            ("604800", Some(week)),
            ("604801", Some(week)),
            ("99999999999999999999999", Some(week)),
            // IMF-fixdate, 90 s after NOW.
            ("Wed, 21 Oct 2015 07:29:30 GMT", Some(90)),
            // RFC 850 and asctime forms of the same instant.
            ("Wednesday, 21-Oct-15 07:29:30 GMT", Some(90)),
            ("Wed Oct 21 07:29:30 2015", Some(90)),
            // Exactly now and in the past: zero.
            ("Wed, 21 Oct 2015 07:28:00 GMT", Some(0)),
            ("Tue, 20 Oct 2015 07:28:00 GMT", Some(0)),
            // A year out: clamped.
            ("Fri, 21 Oct 2016 07:28:00 GMT", Some(week)),
            ("", None),
            ("   ", None),
            ("-5", None),
            ("1.5", None),
            ("+5", None),
            ("soon", None),
            ("Wed, 21 Oct 2015 25:00:00 GMT", None),
        ];
        for (value, expected) in cases {
            assert_eq!(
                parse_retry_after(value, at(NOW)),
                expected.map(Duration::from_secs),
                "value {value:?}"
            );
        }
    }

    #[test]
    fn retries_on_429_after_http_date_retry_after() {
        let c = classify(
            &response(429, Some("Wed, 21 Oct 2015 07:30:00 GMT")),
            at(NOW),
        );
        assert_eq!(c.verdict, retry(Some(120)));
    }

    #[test]
    fn garbage_retry_after_still_retries_without_hint() {
        let c = classify(&response(503, Some("later please")), at(NOW));
        assert_eq!(c.verdict, retry(None));
    }

    #[test]
    fn status_class_table() {
        let cases = [
            (0, "invalid"),
            (99, "invalid"),
            (100, "1xx"),
            (199, "1xx"),
            (200, "2xx"),
            (302, "3xx"),
            (404, "4xx"),
            (599, "5xx"),
            (600, "invalid"),
        ];
        for (status, class) in cases {
            assert_eq!(status_class(status), class, "status {status}");
        }
    }

    #[test]
    fn outcome_set_is_exactly_what_classify_produces() {
        use std::collections::BTreeSet;
        use FailureKind::*;
        let mut produced: BTreeSet<&str> = (0..=u16::MAX)
            .map(|status| classify(&response(status, None), at(NOW)).outcome.as_str())
            .collect();
        let kinds = [
            Timeout,
            ConnectTimeout,
            ConnectRefused,
            ConnectionReset,
            Dns,
            Tls,
            Protocol,
            EgressDenied,
            PayloadTooLarge,
            MissingSecret,
            InvalidUrl,
        ];
        produced.extend(kinds.iter().map(|k| {
            classify(&AttemptResult::Failed(*k), at(NOW))
                .outcome
                .as_str()
        }));
        let declared: BTreeSet<&str> = OUTCOMES.iter().copied().collect();
        assert_eq!(
            declared.len(),
            OUTCOMES.len(),
            "duplicate label in OUTCOMES"
        );
        assert_eq!(produced, declared);
        assert_eq!(OUTCOMES.len(), 42);
    }

    #[test]
    fn labels_are_the_outcomes_each_with_the_class_classify_gives() {
        use std::collections::{BTreeMap, BTreeSet};
        let labels: BTreeMap<&str, StatusClass> = Outcome::labels().collect();
        assert_eq!(labels.len(), OUTCOMES.len(), "no label twice");
        let declared: BTreeSet<&str> = OUTCOMES.iter().copied().collect();
        assert_eq!(labels.keys().copied().collect::<BTreeSet<_>>(), declared);
        for status in 0..=u16::MAX {
            let c = classify(&response(status, None), at(NOW));
            assert_eq!(labels[c.outcome.as_str()], c.status_class(), "{status}");
            assert_eq!(c.status_class().as_str(), status_class(status));
        }
        for kind in FailureKind::ALL {
            let c = classify(&AttemptResult::Failed(kind), at(NOW));
            assert_eq!(labels[c.outcome.as_str()], StatusClass::NoResponse);
            assert_eq!(c.status_class().as_str(), "none");
        }
    }

    proptest! {
        #[test]
        fn every_status_yields_a_known_outcome_and_consistent_verdict(
            status in any::<u16>(),
            hint in proptest::option::of("[0-9]{1,6}"),
        ) {
            let c = classify(&AttemptResult::Response { status, retry_after: hint.clone() }, at(NOW));
            prop_assert!(OUTCOMES.contains(&c.outcome.as_str()), "{}", c.outcome);
            let class = status_class(status);
            let (exact, by_class) = (format!("http_{status}"), format!("http_{class}"));
            prop_assert!(c.outcome.as_str() == exact || c.outcome.as_str() == by_class, "{}", c.outcome);
            match c.verdict {
                Verdict::Delivered => prop_assert_eq!(class, "2xx"),
                Verdict::Rejected { reason: RejectReason::Redirect } => prop_assert_eq!(class, "3xx"),
                Verdict::Rejected { reason } => {
                    prop_assert_eq!(reason, RejectReason::Http4xx);
                    prop_assert_eq!(class, "4xx");
                    prop_assert!(![408, 425, 429].contains(&status));
                }
                Verdict::Retry { retry_after } => {
                    prop_assert!(!matches!(class, "2xx" | "3xx"));
                    prop_assert!(class != "4xx" || [408, 425, 429].contains(&status));
                    let expected = hint.map(|h| Duration::from_secs(h.parse().unwrap()).min(MAX_RETRY_AFTER));
                    prop_assert_eq!(retry_after, expected);
                }
            }
        }

        #[test]
        fn retry_after_is_bounded_and_never_panics(value in "\\PC{0,40}", now in 0u64..4_000_000_000) {
            if let Some(d) = parse_retry_after(&value, at(now)) {
                prop_assert!(d <= MAX_RETRY_AFTER);
            }
        }

        #[test]
        fn retry_after_http_date_is_relative_to_now(offset in 0u64..(8 * 24 * 3600), now in 0u64..4_000_000_000) {
            let date = httpdate::fmt_http_date(at(now + offset));
            let parsed = parse_retry_after(&date, at(now));
            prop_assert_eq!(parsed, Some(Duration::from_secs(offset).min(MAX_RETRY_AFTER)));
            let past = parse_retry_after(&date, at(now + offset + 1));
            prop_assert_eq!(past, Some(Duration::ZERO));
        }
    }
}
