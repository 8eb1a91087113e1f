//! The one back-off every retry loop uses: exponential, capped, with jitter.
//!
//! A thousand simulated node agents that lose the leader at the same moment must not come back
//! in lockstep, so each delay is drawn at random from the upper half of the current ceiling
//! ("equal jitter"): retries spread over a window of half the ceiling, and the rate of retries
//! stays bounded by the ceiling's lower half. The ceiling starts at `initial`, doubles on each
//! failure up to `max`, and goes back to `initial` on [`Backoff::reset`] (a success).

use std::time::Duration;

use rand::Rng;

/// Exponential back-off with jitter. Not shared between tasks: each retry loop owns one.
#[derive(Debug, Clone)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    ceiling: Duration,
}

impl Backoff {
    /// A back-off whose first delay is at most `initial` and whose delays never exceed `max`.
    pub fn new(initial: Duration, max: Duration) -> Self {
        let max = max.max(initial);
        Backoff {
            initial,
            max,
            ceiling: initial,
        }
    }

    /// The back-off of loops that talk to the store: from 100 ms up to 5 s.
    pub fn for_store() -> Self {
        Backoff::new(Duration::from_millis(100), Duration::from_secs(5))
    }

    /// The next delay, and the ceiling doubles (up to the maximum).
    pub fn next_delay(&mut self) -> Duration {
        let ceiling = self.ceiling;
        self.ceiling = (self.ceiling * 2).min(self.max);
        let half = ceiling / 2;
        let jitter = rand::rng().random_range(0..=half.as_micros().max(1) as u64);
        (half + Duration::from_micros(jitter)).min(ceiling)
    }

    /// Sleeps for [`Backoff::next_delay`].
    pub async fn wait(&mut self) {
        tokio::time::sleep(self.next_delay()).await;
    }

    /// After a success: the next failure waits about `initial` again.
    pub fn reset(&mut self) {
        self.ceiling = self.initial;
    }

    /// The most the next delay can be.
    pub fn ceiling(&self) -> Duration {
        self.ceiling
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_up_to_the_cap_within_the_upper_half() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_millis(800));
        for ceiling in [100, 200, 400, 800, 800, 800] {
            let ceiling = Duration::from_millis(ceiling);
            assert_eq!(b.ceiling(), ceiling);
            let d = b.next_delay();
            assert!(
                d >= ceiling / 2 && d <= ceiling,
                "{d:?} outside [{ceiling:?}/2, {ceiling:?}]"
            );
        }
        b.reset();
        assert_eq!(b.ceiling(), Duration::from_millis(100));
    }

    #[test]
    fn delays_are_spread() {
        let delays: std::collections::BTreeSet<Duration> = (0..64)
            .map(|_| Backoff::new(Duration::from_secs(1), Duration::from_secs(1)).next_delay())
            .collect();
        // 64 draws from 500,001 values: equal draws are possible, lockstep is not.
        assert!(delays.len() > 32, "{} distinct delays", delays.len());
    }

    #[test]
    fn a_cap_below_the_start_is_the_start() {
        let mut b = Backoff::new(Duration::from_secs(2), Duration::from_secs(1));
        b.next_delay();
        assert_eq!(b.ceiling(), Duration::from_secs(2));
    }
}
