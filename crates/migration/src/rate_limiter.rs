//! A token bucket that paces the source's sending to a bandwidth limit.

use std::time::{Duration, Instant};

use crate::frame_header::MAX_FRAME_LEN;

/// How much sending a full bucket allows at once, in time at the set rate (but never less than
/// one largest frame).
pub const BURST_TIME: Duration = Duration::from_millis(50);

/// A token bucket: [`RateLimiter::pace`] sleeps as needed so that bytes go out at no more than
/// the set rate on average, with bursts of [`BURST_TIME`] worth of bytes or one largest frame,
/// whichever is more. It starts full.
#[derive(Debug, Clone)]
pub struct RateLimiter {
    /// Bytes per second, or `None` for unlimited.
    rate: Option<u64>,
    /// The bucket's size in bytes.
    burst: f64,
    /// Bytes that may go out now; negative while a sleep pays off a debt.
    tokens: f64,
    /// When `tokens` was last refilled.
    refilled: Instant,
}

impl RateLimiter {
    /// A limiter at `bytes_per_second`; `None` (or `Some(0)`, as with most bandwidth options)
    /// is unlimited.
    pub fn new(bytes_per_second: Option<u64>) -> RateLimiter {
        let rate = bytes_per_second.filter(|&rate| rate > 0);
        let burst = match rate {
            Some(rate) => (rate as f64 * BURST_TIME.as_secs_f64()).max(MAX_FRAME_LEN as f64),
            None => 0.0,
        };
        RateLimiter {
            rate,
            burst,
            tokens: burst,
            refilled: Instant::now(),
        }
    }

    /// The limit in bytes per second, `None` if unlimited.
    pub fn bytes_per_second(&self) -> Option<u64> {
        self.rate
    }

    /// The bucket's size in bytes (0 if unlimited).
    pub fn burst_bytes(&self) -> u64 {
        self.burst as u64
    }

    /// Accounts for `bytes` about to be sent (or just sent), sleeping first if the bucket is
    /// in debt by then.
    pub fn pace(&mut self, bytes: u64) {
        let Some(rate) = self.rate else {
            return;
        };
        let rate = rate as f64;
        let now = Instant::now();
        let elapsed = now.duration_since(self.refilled).as_secs_f64();
        self.refilled = now;
        self.tokens = (self.tokens + elapsed * rate).min(self.burst) - bytes as f64;
        if self.tokens < 0.0 {
            let wait = Duration::try_from_secs_f64(-self.tokens / rate).unwrap_or(Duration::MAX);
            std::thread::sleep(wait);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unlimited_never_sleeps() {
        for rate in [None, Some(0)] {
            let mut limiter = RateLimiter::new(rate);
            assert_eq!(limiter.bytes_per_second(), None);
            let start = Instant::now();
            for _ in 0..1000 {
                limiter.pace(u64::MAX / 2);
            }
            assert!(start.elapsed() < Duration::from_secs(5));
        }
    }

    #[test]
    fn burst_is_at_least_one_frame_or_fifty_milliseconds() {
        assert_eq!(
            RateLimiter::new(Some(1000)).burst_bytes(),
            MAX_FRAME_LEN as u64
        );
        assert_eq!(
            RateLimiter::new(Some(1_000_000_000)).burst_bytes(),
            50_000_000
        );
    }

    #[test]
    fn paces_to_the_rate() {
        // 40 MiB/s: the burst is one largest frame; 12 MiB beyond it take at least 0.3 s.
        let rate = 40 * 1024 * 1024;
        let mut limiter = RateLimiter::new(Some(rate));
        let beyond_burst = 12 * 1024 * 1024;
        let total = limiter.burst_bytes() + beyond_burst;
        let chunk = 256 * 1024;
        let start = Instant::now();
        let mut sent = 0;
        while sent < total {
            let bytes = chunk.min(total - sent);
            limiter.pace(bytes);
            sent += bytes;
        }
        let minimum = Duration::from_secs_f64(beyond_burst as f64 / rate as f64);
        let elapsed = start.elapsed();
        assert!(
            elapsed + Duration::from_millis(1) >= minimum,
            "sent {total} bytes at {rate} B/s in {elapsed:?}, expected at least {minimum:?}"
        );
    }
}
