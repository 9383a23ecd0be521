//! Topic provisioning: one idempotent command creates every hookline topic with
//! the right settings, alters the settings that differ, never shrinks a topic,
//! grows one only when asked, and only previews unless told to execute.
//!
//! Guarantees: [`spec::desired`] refuses settings that would lose data (retention
//! under 7 days or not far above a retry tier's delay, a compacted ready queue,
//! an uncompacted `subscriptions`, a quarantine or DLQ that cannot hold what its
//! source topic accepts); [`plan::plan`] is a pure function from desired and
//! observed state to a list of actions, so a second run after a successful one
//! plans nothing; [`admin`] only carries out a plan.

pub mod admin;
pub mod cli;
pub mod plan;
pub mod spec;

pub use cli::{run, TopicsArgs};
pub use plan::{plan, Action, ConfigChange, ObservedTopic, Plan, PlanOptions};
pub use spec::{desired, wrong_topic_config, Settings, TopicSpec};

/// Why provisioning cannot go ahead. Kept apart from [`crate::RuntimeError`]
/// because its refusals are lists meant for an operator, not one failure.
#[derive(Debug, thiserror::Error)]
pub enum ProvisionError {
    /// The requested settings are unsafe or malformed; every problem is listed.
    #[error("invalid topic settings:\n  - {}", .0.join("\n  - "))]
    Invalid(Vec<String>),
    /// The cluster's topics cannot be brought to the settings without a step
    /// this command refuses to take (shrinking, or growing without the flag).
    #[error("refusing to change topics:\n  - {}", .0.join("\n  - "))]
    Refused(Vec<String>),
    /// A shared adapter (client configuration) failed.
    #[error(transparent)]
    Runtime(#[from] crate::RuntimeError),
    /// The broker rejected or failed an admin request.
    #[error("kafka {context}: {source}")]
    Kafka {
        /// What was being done.
        context: String,
        /// librdkafka's error.
        #[source]
        source: rdkafka::error::KafkaError,
    },
    /// The broker answered an admin request for one topic with an error code.
    #[error("{what} for topic {topic} failed: {code}")]
    Topic {
        /// The operation.
        what: &'static str,
        /// The topic.
        topic: String,
        /// The broker's error code.
        code: rdkafka::types::RDKafkaErrorCode,
    },
    /// Writing the report failed.
    #[error("cannot write the report: {0}")]
    Io(#[from] std::io::Error),
}

#[cfg(test)]
mod tests;
