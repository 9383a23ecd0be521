//! What the crate's real-Kafka tests share.

use std::time::Duration;

use hookline_runtime::config::CommonArgs;
use hookline_testkit::kafka;

/// The common arguments of a stage on the test broker: no topic prefix, no
/// `-X` overrides, the ops server on an ephemeral port.
pub fn args() -> CommonArgs {
    CommonArgs {
        brokers: kafka::brokers(),
        topic_prefix: String::new(),
        kafka_config: Vec::new(),
        consumer_kafka_config: vec![],
        producer_kafka_config: vec![],
        http_addr: Some("127.0.0.1:0".parse().unwrap()),
        log_format: hookline_runtime::config::LogFormat::Text,
        log: "info".into(),
        shutdown_grace: Duration::from_secs(5),
        group_session_timeout: Duration::from_secs(10),
        group_instance_id: None,
        consumer_stall_timeout: Duration::from_secs(30),
        skip_topic_settings_check: false,
    }
}
