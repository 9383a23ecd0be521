//! Which broker refusals are a missing ACL, and how a stage says so: a
//! [`Denial`] names the resource and the operation the stage was attempting
//! (the row of `hookline-fanout acls` to restore), is logged at error level,
//! and keeps the stage unready until the same work succeeds again. The work
//! itself is retried as before, so nothing is lost while the ACL is missing.

use rdkafka::{error::KafkaError, types::RDKafkaErrorCode};

use crate::health::Health;

/// The readiness condition a denial holds unready.
pub const ACCESS_READY: &str = "kafka access";

/// The kind of resource an authorization failure is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Denied {
    Topic,
    Group,
    TransactionalId,
    Cluster,
}

/// The kind of resource `e` was refused on, if it is an authorization failure.
pub fn denied(e: &KafkaError) -> Option<Denied> {
    match e.rdkafka_error_code()? {
        RDKafkaErrorCode::TopicAuthorizationFailed => Some(Denied::Topic),
        RDKafkaErrorCode::GroupAuthorizationFailed => Some(Denied::Group),
        RDKafkaErrorCode::TransactionalIdAuthorizationFailed => Some(Denied::TransactionalId),
        RDKafkaErrorCode::ClusterAuthorizationFailed => Some(Denied::Cluster),
        _ => None,
    }
}

/// A refused operation on a named resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denial {
    /// `topic`, `group`, `transactional-id` or `cluster`, as in the ACL table.
    pub resource: &'static str,
    /// The resource's name (empty for the cluster).
    pub name: String,
    /// The ACL operation that was refused (`Write`, `Read`, ...).
    pub operation: &'static str,
}

impl std::fmt::Display for Denial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the broker refused {} on {} {}: grant that ACL (hookline-fanout acls lists them)",
            self.operation, self.resource, self.name
        )
    }
}

/// Tracks one stage's denials: the first of a run of failures is logged at
/// error level and makes the stage unready; [`Access::granted`] after a
/// success makes it ready again and says so.
#[derive(Debug)]
pub struct Access {
    health: Health,
    stage: &'static str,
    current: Option<Denial>,
}

impl Access {
    pub fn new(health: Health, stage: &'static str) -> Self {
        Self {
            health,
            stage,
            current: None,
        }
    }

    /// Records `denial` (caused by `error`): unready, and one error line per change.
    pub fn refused(&mut self, denial: Denial, error: &dyn std::fmt::Display) {
        if self.current.as_ref() != Some(&denial) {
            tracing::error!(
                stage = self.stage,
                resource = denial.resource,
                name = %denial.name,
                operation = denial.operation,
                %error,
                "kafka ACL missing: {denial}"
            );
            self.health.set_ready(ACCESS_READY, Err(denial.to_string()));
            self.current = Some(denial);
        }
    }

    /// The work that was refused succeeded: ready again.
    pub fn granted(&mut self) {
        if let Some(denial) = self.current.take() {
            tracing::info!(
                stage = self.stage,
                resource = denial.resource,
                name = %denial.name,
                operation = denial.operation,
                "kafka access restored"
            );
            self.health.set_ready(ACCESS_READY, Ok(()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_authorization_failures_are_denials() {
        let cases = [
            (
                RDKafkaErrorCode::TopicAuthorizationFailed,
                Some(Denied::Topic),
            ),
            (
                RDKafkaErrorCode::GroupAuthorizationFailed,
                Some(Denied::Group),
            ),
            (
                RDKafkaErrorCode::TransactionalIdAuthorizationFailed,
                Some(Denied::TransactionalId),
            ),
            (
                RDKafkaErrorCode::ClusterAuthorizationFailed,
                Some(Denied::Cluster),
            ),
            (RDKafkaErrorCode::QueueFull, None),
            (RDKafkaErrorCode::BrokerNotAvailable, None),
        ];
        for (code, want) in cases {
            assert_eq!(
                denied(&KafkaError::MessageProduction(code)),
                want,
                "{code:?}"
            );
        }
        assert_eq!(denied(&KafkaError::Canceled), None);
    }

    #[test]
    fn a_denial_is_unready_until_granted() {
        let health = Health::new(std::time::Duration::from_secs(60));
        let mut access = Access::new(health.clone(), "fanout");
        let denial = Denial {
            resource: "topic",
            name: "deliveries".into(),
            operation: "Write",
        };
        health.set_ready("loop", Ok(()));
        access.refused(denial.clone(), &"TopicAuthorizationFailed");
        let verdict = health.readiness();
        assert!(!verdict.ok);
        assert!(
            verdict.detail.contains("Write on topic deliveries"),
            "{}",
            verdict.detail
        );
        access.granted();
        assert!(health.readiness().ok);
    }
}
