//! The dlq-sink stage.

pub(super) fn describe() {}
