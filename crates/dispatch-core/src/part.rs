//! The names every part of the dispatcher shares: which input a record came
//! from and where in it. A leaf module, so the engine, its decisions and the
//! offsets can all use them without importing one another.

/// One consumed topic.
#[derive(Debug, Clone)]
pub struct Input {
    pub topic: String,
    /// Metric label: `deliveries` or the tier name.
    pub label: &'static str,
    /// The retry tier it is (an index into the ladder), or `None` for `deliveries`
    /// and `deliveries.strict`.
    pub tier: Option<usize>,
    /// `deliveries.strict`: a record in backoff is held at the head of its lane,
    /// in place, never written to a tier, so the later ones wait behind it.
    pub strict: bool,
    /// The overflow lane it is (`deliveries.lane-N`): first attempts moved out
    /// of `deliveries`, read by the owner of the same `deliveries` partition.
    pub lane: Option<usize>,
}

impl Input {
    /// Records are retries: they count against the retry share and wait until due.
    pub fn retry(&self) -> bool {
        self.tier.is_some()
    }

    /// An overflow lane: its records count against the overflow share.
    pub fn overflow(&self) -> bool {
        self.lane.is_some()
    }

    /// A retry tier or an overflow lane: its consumer reports to the engine's
    /// bulk inbox, taken after the first-attempt one (`crates/dispatcher/src/engine/inbox.rs`).
    pub fn bulk(&self) -> bool {
        self.retry() || self.overflow()
    }

    /// `deliveries` itself: the ready queue records are moved out of.
    pub fn is_source(&self) -> bool {
        self.tier.is_none() && !self.strict && self.lane.is_none()
    }
}

/// A partition of an input, as lanes and offsets key it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Part {
    pub input: u16,
    pub partition: i32,
}

/// One record: its partition and offset.
pub type Key = (Part, i64);

/// Why a delivery has nowhere to go when it starts. It is not attempted: it is kept as
/// a dead letter (in the same transaction that moves its offset), never dropped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoTarget {
    /// Its subscription is disabled; `reason` is the record's `disabled_reason`.
    Disabled { reason: Option<String> },
    /// Its subscription is deleted (or was never known here).
    Deleted,
    /// Its subscription now belongs to another tenant than the delivery's.
    OtherTenant,
}

impl NoTarget {
    /// The dead letter's reason: `subscription_disabled` (sent by `replay` once the
    /// subscription is enabled again) or `cancelled`.
    pub fn reason(&self) -> hookline_core::DeadLetterReason {
        match self {
            Self::Disabled { .. } => hookline_core::DeadLetterReason::SubscriptionDisabled,
            Self::Deleted | Self::OtherTenant => hookline_core::DeadLetterReason::Cancelled,
        }
    }

    /// The dead letter's detail.
    pub fn detail(&self, subscription_id: &str) -> String {
        match self {
            Self::Disabled { reason: Some(r) } => {
                format!("subscription {subscription_id} is disabled ({r}); not attempted")
            }
            Self::Disabled { reason: None } => {
                format!("subscription {subscription_id} is disabled; not attempted")
            }
            Self::Deleted => format!("subscription {subscription_id} is deleted; not attempted"),
            Self::OtherTenant => format!(
                "subscription {subscription_id} belongs to another tenant now; not attempted"
            ),
        }
    }
}

/// Why a delivery was parked on a tier without an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParkReason {
    /// Its tier released it before its due time (a long `Retry-After`).
    NotDue,
    /// Its subscription's circuit breaker is open.
    BreakerOpen,
}

impl ParkReason {
    pub const ALL: [Self; 2] = [Self::NotDue, Self::BreakerOpen];

    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NotDue => "not_due",
            Self::BreakerOpen => "breaker_open",
        }
    }
}
