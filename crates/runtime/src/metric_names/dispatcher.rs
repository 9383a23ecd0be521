//! The dispatcher stage.

pub(super) fn describe() {}
