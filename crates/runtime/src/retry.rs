//! Trying an infrastructure call again until it works, or until a deadline:
//! the one home of every such loop in the services. The waits come from a
//! [`Backoff`] (pure, in `hookline-core`), with the jitter drawn here so
//! replicas that failed together do not retry in step; they run on tokio's
//! clock, so tests run them exactly under `tokio::time::pause()`. What a
//! failure logs and counts stays with the caller (its `failed` callback).

use std::{future::Future, time::Duration};

use hookline_core::Backoff;
use tokio::time::Instant;

/// A draw for [`Backoff::next`]: uniform in `[0, 1)`.
pub fn jitter() -> f64 {
    rand::random()
}

/// Sleeps the back-off's next wait (jitter drawn here) and returns it: for a
/// loop that retries in its own shape (the batch it retries is carried to its
/// next turn, say). Call [`Backoff::reset`] when the call succeeds.
pub async fn pause(backoff: &mut Backoff) -> Duration {
    let wait = backoff.next(jitter());
    tokio::time::sleep(wait).await;
    wait
}

/// What [`retry_until`] does after a failure, as its `failed` callback says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Then {
    /// Wait, then try again.
    Retry,
    /// Wait and try again, unless the wait would end past this instant: then
    /// give up with the error.
    RetryUntil(Instant),
    /// Give up at once with the error (it is not worth trying again).
    GiveUp,
}

impl Then {
    /// [`RetryUntil`](Self::RetryUntil) the deadline if there is one, else
    /// [`Retry`](Self::Retry).
    pub fn until(deadline: Option<Instant>) -> Self {
        deadline.map_or(Self::Retry, Self::RetryUntil)
    }
}

/// Runs `attempt` until it succeeds, waiting between tries as `backoff` says
/// (from its first wait: it is a template, copied) with jitter.
///
/// After each failure `failed` sees the error and the wait about to follow
/// (to log and count them) and says what [`Then`]: a deadline can so begin
/// mid-way (a stop asked for while retrying grants a grace period) or move,
/// and an error not worth retrying ends it.
pub async fn retry_until<T, E, Fut>(
    backoff: Backoff,
    mut attempt: impl FnMut() -> Fut,
    mut failed: impl FnMut(&E, Duration) -> Then,
) -> Result<T, E>
where
    Fut: Future<Output = Result<T, E>>,
{
    let mut backoff = backoff;
    backoff.reset();
    loop {
        let error = match attempt().await {
            Ok(done) => return Ok(done),
            Err(error) => error,
        };
        let wait = backoff.next(jitter());
        match failed(&error, wait) {
            Then::Retry => {}
            Then::RetryUntil(deadline) if Instant::now() + wait <= deadline => {}
            Then::RetryUntil(_) | Then::GiveUp => return Err(error),
        }
        tokio::time::sleep(wait).await;
    }
}

#[cfg(test)]
mod tests {
    use std::{cell::RefCell, rc::Rc};

    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// An attempt that fails `failures` times, recording when each try began.
    fn flaky(
        failures: usize,
        tries: Rc<RefCell<Vec<Instant>>>,
    ) -> impl FnMut() -> std::future::Ready<Result<usize, String>> {
        move || {
            let mut t = tries.borrow_mut();
            t.push(Instant::now());
            let n = t.len();
            std::future::ready(if n <= failures {
                Err(format!("failure {n}"))
            } else {
                Ok(n)
            })
        }
    }

    fn offsets(start: Instant, tries: &RefCell<Vec<Instant>>) -> Vec<Duration> {
        tries.borrow().iter().map(|t| *t - start).collect()
    }

    #[tokio::test(start_paused = true)]
    async fn tries_again_after_each_growing_wait_until_it_works() {
        let start = Instant::now();
        let tries = Rc::new(RefCell::new(Vec::new()));
        let mut seen = Vec::new();
        let done = retry_until(
            Backoff::new(ms(500), ms(1_500)),
            flaky(4, Rc::clone(&tries)),
            |e: &String, wait| {
                seen.push((e.clone(), wait));
                Then::Retry
            },
        )
        .await;
        assert_eq!(done, Ok(5));
        assert_eq!(
            offsets(start, &tries),
            [ms(0), ms(500), ms(1_500), ms(3_000), ms(4_500)]
        );
        assert_eq!(
            seen,
            [
                ("failure 1".to_owned(), ms(500)),
                ("failure 2".to_owned(), ms(1_000)),
                ("failure 3".to_owned(), ms(1_500)),
                ("failure 4".to_owned(), ms(1_500)),
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_success_at_once_waits_for_nothing() {
        let start = Instant::now();
        let tries = Rc::new(RefCell::new(Vec::new()));
        let done = retry_until(
            Backoff::constant(ms(500)),
            flaky(0, Rc::clone(&tries)),
            |_, _| panic!("no failure"),
        )
        .await;
        assert_eq!((done, Instant::now() - start), (Ok(1), ms(0)));
    }

    #[tokio::test(start_paused = true)]
    async fn gives_up_with_the_error_when_the_next_wait_would_pass_the_deadline() {
        let start = Instant::now();
        let tries = Rc::new(RefCell::new(Vec::new()));
        // Waits 500 ms (ends at 0.5 s, before 1.2 s), then 1 s (would end at 1.5 s).
        let done = retry_until(
            Backoff::new(ms(500), ms(10_000)),
            flaky(usize::MAX, Rc::clone(&tries)),
            |_, _| Then::RetryUntil(start + ms(1_200)),
        )
        .await;
        assert_eq!(done, Err("failure 2".to_owned()));
        assert_eq!(offsets(start, &tries), [ms(0), ms(500)]);
        assert_eq!(Instant::now() - start, ms(500), "no wait past the last try");
    }

    #[tokio::test(start_paused = true)]
    async fn a_deadline_that_begins_mid_way_applies_from_then() {
        let start = Instant::now();
        let tries = Rc::new(RefCell::new(Vec::new()));
        let mut deadline = None;
        let mut failures = 0;
        // A stop after the third failure grants 3 s more: waits of 200, 400,
        // 800, 1600 ms, then 3.2 s would pass it.
        let done = retry_until(
            Backoff::new(ms(200), ms(10_000)),
            flaky(usize::MAX, Rc::clone(&tries)),
            |_, _| {
                failures += 1;
                if failures == 3 {
                    deadline = Some(Instant::now() + ms(3_000));
                }
                Then::until(deadline)
            },
        )
        .await;
        assert_eq!(done, Err("failure 5".to_owned()));
        assert_eq!(
            offsets(start, &tries),
            [ms(0), ms(200), ms(600), ms(1_400), ms(3_000)]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_error_not_worth_retrying_ends_it_at_once() {
        let start = Instant::now();
        let tries = Rc::new(RefCell::new(Vec::new()));
        let done = retry_until(
            Backoff::constant(ms(500)),
            flaky(usize::MAX, Rc::clone(&tries)),
            |e: &String, _| {
                if e == "failure 2" {
                    Then::GiveUp
                } else {
                    Then::Retry
                }
            },
        )
        .await;
        assert_eq!(done, Err("failure 2".to_owned()));
        assert_eq!(offsets(start, &tries), [ms(0), ms(500)]);
    }

    #[tokio::test(start_paused = true)]
    async fn the_template_starts_from_its_first_wait_every_time() {
        let mut used = Backoff::new(ms(100), ms(1_000));
        used.next(0.0);
        used.next(0.0);
        let start = Instant::now();
        let tries = Rc::new(RefCell::new(Vec::new()));
        let done = retry_until(used, flaky(1, Rc::clone(&tries)), |_, _| Then::Retry).await;
        assert_eq!(done, Ok(2));
        assert_eq!(offsets(start, &tries), [ms(0), ms(100)]);
    }

    #[tokio::test(start_paused = true)]
    async fn jittered_waits_stay_within_their_fraction() {
        let mut backoff = Backoff::new(ms(1_000), ms(8_000)).with_jitter(0.5);
        for nominal in [1_000, 2_000, 4_000, 8_000, 8_000] {
            let start = Instant::now();
            let wait = pause(&mut backoff).await;
            // tokio's timer ticks in whole milliseconds.
            let slept = Instant::now() - start;
            assert!(slept >= wait && slept < wait + ms(1), "{slept:?} {wait:?}");
            assert!(wait <= ms(nominal) && wait >= ms(nominal / 2), "{wait:?}");
        }
        backoff.reset();
        assert_eq!(backoff.current(), ms(1_000));
    }

    #[test]
    fn jitter_draws_are_in_the_unit_interval() {
        for _ in 0..10_000 {
            let j = jitter();
            assert!((0.0..1.0).contains(&j), "{j}");
        }
    }
}
