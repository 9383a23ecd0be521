//! The consumer context: rebalance callbacks only record which partitions were
//! revoked; the fan-out loop, which owns the batch, acts on it after `recv`
//! returns. No producing or committing happens inside a callback.

use std::sync::Mutex;

use rdkafka::{
    consumer::{BaseConsumer, ConsumerContext, Rebalance},
    ClientContext,
};

/// Context of the `events` consumer.
#[derive(Debug, Default)]
pub struct FanoutContext {
    revoked: Mutex<Vec<(String, i32)>>,
}

impl FanoutContext {
    /// Partitions revoked since the last call.
    pub fn take_revoked(&self) -> Vec<(String, i32)> {
        std::mem::take(&mut *self.revoked.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

impl ClientContext for FanoutContext {}

impl ConsumerContext for FanoutContext {
    fn rebalance(
        &self,
        consumer: &BaseConsumer<Self>,
        err: rdkafka::types::RDKafkaRespErr,
        tpl: &mut rdkafka::TopicPartitionList,
    ) {
        hookline_runtime::kafka::cooperative_rebalance(self, consumer, err, tpl);
    }

    fn pre_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Revoke(tpl) => {
                let parts: Vec<(String, i32)> = tpl
                    .elements()
                    .iter()
                    .map(|e| (e.topic().to_owned(), e.partition()))
                    .collect();
                tracing::info!(partitions = ?parts, "partitions revoked");
                self.revoked
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .extend(parts);
            }
            Rebalance::Assign(tpl) => {
                let parts: Vec<(String, i32)> = tpl
                    .elements()
                    .iter()
                    .map(|e| (e.topic().to_owned(), e.partition()))
                    .collect();
                tracing::info!(partitions = ?parts, "partitions assigned");
            }
            Rebalance::Error(e) => tracing::warn!(error = %e, "rebalance error"),
        }
    }
}
