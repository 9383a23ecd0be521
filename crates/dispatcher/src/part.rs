//! The names every part of the dispatcher shares: which input a record came
//! from and where in it. A leaf module, so the engine, its decisions and the
//! offsets can all use them without importing one another.

/// One consumed topic.
#[derive(Debug, Clone)]
pub(crate) struct Input {
    pub topic: String,
    /// Metric label: `deliveries` or the tier name.
    pub label: &'static str,
    /// Records are retries (they count against the retry share).
    pub retry: bool,
}

/// A partition of an input, as lanes and offsets key it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Part {
    pub input: u16,
    pub partition: i32,
}

/// One record: its partition and offset.
pub(crate) type Key = (Part, i64);
