//! The live subscription table, shared by fanout and dispatcher: read from the
//! compacted `subscriptions` topic from the beginning (every partition
//! assigned, no consumer group), then followed. Not ready until it has caught
//! up with the high watermarks seen at start, so a fresh pod never fans out
//! against half a table.

mod follower;
mod table;

pub use follower::{follow, load_snapshot, run_with_table, Subscriptions};
pub use hookline_envelope::subscription_state::{disabled, enabled, DisabledReason};
pub use table::{Applied, LiveSubscription, SubscriptionTable};
