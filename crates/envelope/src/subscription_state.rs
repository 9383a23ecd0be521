//! Enabling and disabling a subscription: the record written back with the
//! state flipped and the next version, so that every reader of the compacted
//! topic (highest version wins) takes it. The one place both the dispatcher
//! (a 410 Gone) and `hookline-fanout subscriptions enable|disable` build it.

use crate::Subscription;

/// Why a subscription was disabled: its `disabled_reason`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DisabledReason {
    /// The endpoint answered 410 Gone.
    Gone,
    /// Its circuit breaker stayed open longer than allowed.
    BreakerOpen,
    /// An operator disabled it.
    Operator,
}

impl DisabledReason {
    /// Every reason, for metric labels.
    pub const ALL: [Self; 3] = [Self::Gone, Self::BreakerOpen, Self::Operator];

    /// The `disabled_reason` value (and metric label).
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Gone => "gone",
            Self::BreakerOpen => "breaker_open",
            Self::Operator => "operator",
        }
    }
}

/// `record` disabled for `reason` at `now_ms`, as its next version.
pub fn disabled(record: &Subscription, reason: DisabledReason, now_ms: i64) -> Subscription {
    Subscription {
        enabled: false,
        disabled_reason: Some(reason.as_str().to_owned()),
        disabled_at: Some(now_ms),
        version: record.version.saturating_add(1),
        updated_at: now_ms,
        ..record.clone()
    }
}

/// `record` enabled at `now_ms` (the reason and time cleared), as its next version.
pub fn enabled(record: &Subscription, now_ms: i64) -> Subscription {
    Subscription {
        enabled: true,
        disabled_reason: None,
        disabled_at: None,
        version: record.version.saturating_add(1),
        updated_at: now_ms,
        ..record.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> Subscription {
        Subscription {
            subscription_id: "s".into(),
            tenant_id: "acme".into(),
            url: "https://example.com/h".into(),
            event_types: vec!["*".into()],
            secret_ref: "k".into(),
            enabled: true,
            max_in_flight: 3,
            rate_limit_per_s: Some(2.0),
            disabled_reason: None,
            disabled_at: None,
            ordering: "unordered".into(),
            version: 41,
            updated_at: 1,
        }
    }

    #[test]
    fn disabling_keeps_everything_but_the_state_and_takes_the_next_version() {
        let off = disabled(&record(), DisabledReason::Gone, 500);
        assert!(!off.enabled);
        assert_eq!(off.disabled_reason.as_deref(), Some("gone"));
        assert_eq!(
            (off.disabled_at, off.version, off.updated_at),
            (Some(500), 42, 500)
        );
        let back = enabled(&off, 900);
        assert!(back.enabled);
        assert_eq!(
            (back.disabled_reason.as_deref(), back.disabled_at),
            (None, None)
        );
        assert_eq!((back.version, back.updated_at), (43, 900));
        let same = |s: &Subscription| {
            (
                s.subscription_id.clone(),
                s.tenant_id.clone(),
                s.url.clone(),
                s.event_types.clone(),
                s.secret_ref.clone(),
                s.max_in_flight,
                s.rate_limit_per_s,
            )
        };
        assert_eq!(same(&back), same(&record()));
    }

    #[test]
    fn reasons_are_the_documented_labels() {
        let labels: Vec<&str> = DisabledReason::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(labels, ["gone", "breaker_open", "operator"]);
    }
}
