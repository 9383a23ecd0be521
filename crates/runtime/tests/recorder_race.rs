//! Several stages started at once in one process (the demo, the end-to-end
//! tests) all get the one Prometheus recorder. Its own test binary, so the
//! recorder is not installed before the race starts.

use std::sync::{Arc, Barrier};

#[test]
fn stages_starting_at_once_all_get_the_recorder() {
    const STAGES: usize = 8;
    let barrier = Arc::new(Barrier::new(STAGES));
    let threads: Vec<_> = (0..STAGES)
        .map(|_| {
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || {
                barrier.wait();
                hookline_runtime::telemetry::metrics_recorder().map(|_| ())
            })
        })
        .collect();
    for (n, t) in threads.into_iter().enumerate() {
        let result = t.join().expect("no panic");
        assert!(result.is_ok(), "stage {n} got no recorder: {result:?}");
    }
}
