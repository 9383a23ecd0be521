//! Pure decisions of hookline: classification, retry ladder, circuit breaker, due scheduling,
//! offset watermarks, the duplicate-admission window, fair lanes (deficit round
//! robin in worker-seconds, tenant weights) with rate limits and subscription matching. No I/O and no clock reads: `now` and
//! jitter are arguments, so every decision is exactly testable.

pub mod admission;
pub mod backoff;
pub mod breaker;
pub mod burst;
pub mod classify;
pub mod due;
pub mod egress;
pub mod epoch;
pub mod fair;
pub mod ladder;
pub mod lanes;
pub mod matching;
pub mod overflow;
pub mod rate;
pub mod read_past;
pub mod stall;
pub mod trace;
pub mod watermark;

pub use admission::{Admission, AdmissionWindow, Fingerprint, KeyHash, Observed, PayloadMatch};
pub use backoff::Backoff;
pub use breaker::{
    Admit, Breaker, BreakerError, BreakerSettings, Opened, Shared, Signal, Transition,
};
pub use burst::{BurstRouter, BurstSettings, Route};
pub use classify::{
    classify, parse_retry_after, status_class, AttemptResult, Classification, DeadLetterReason,
    FailureKind, Outcome, RejectReason, StatusClass, Verdict, MAX_RETRY_AFTER, OUTCOMES,
};
pub use due::{head_decision, DueTimers, HeadDecision};
pub use egress::{
    blocked_range, noncanonical_ipv4, numeric_ipv4, BlockedRange, Cidr, CidrError, EgressDenied,
    EgressPolicy,
};
pub use fair::{TenantWeights, Usage, WeightError};
pub use ladder::{
    ExhaustReason, Ladder, LadderError, LadderSetting, Release, RetryDecision, Tier,
    DEFAULT_MAX_RETRY_AFTER, DEFAULT_MAX_RETRY_AFTER_TEXT, DEFAULT_TIERS, MAX_LADDER_DURATION,
};
pub use lanes::{Flow, Job, LaneError, LaneKey, LaneLimits, LaneSettings, Lanes, Started};
pub use matching::{EventTypeFilter, EventTypePattern, PatternError, MAX_PATTERN_LEN};
pub use overflow::{Change, OverflowSettings, Promotions};
pub use rate::{InvalidRate, RateLimit, TokenBucket};
pub use stall::{PartitionView, StallDetector, StallVerdict};
pub use trace::TraceContext;
pub use watermark::{PartitionWatermark, WatermarkError};
