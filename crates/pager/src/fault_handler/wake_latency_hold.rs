//! [`WakeLatencyHold`]: when the fault loop asks that idle CPUs poll instead of halting
//! ([`CpuWakeLatency`]).
//!
//! The request is held exactly while it pays, which is while the loop itself busy-polls
//! ([`BusyPoll`](super::busy_poll::BusyPoll)): faults arrive faster than one batch per window,
//! or a page read is in flight, and the CPUs are not contended. Then every fault's thread
//! sleeps for a read of tens of microseconds and is woken by the handler, and an idle CPU that
//! halted meanwhile adds its wake-up to every fault. Once the loop stops polling the request
//! lingers for [`LINGER`] (so that a pause between bursts does not turn it off and on), then
//! is lifted: an idle region holds nothing, and neither does a region whose handler backed off
//! because the CPUs are busy (there are no idle CPUs to keep awake then).
//!
//! What it costs: while held, idle CPUs poll in the kernel's idle loop instead of halting
//! (power, and on a VM the host's CPU time), on every CPU, for as long as the region pages
//! fast. `memvisor run --cpu-wake-latency off` turns it off; `--busy-poll 0` too.

use std::time::{Duration, Instant};

use crate::cpu_wake_latency::CpuWakeLatency;

/// How long the request outlives the last poll that did not sleep.
pub(crate) const LINGER: Duration = Duration::from_millis(20);

/// What the loop should do with the request before a poll.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HoldDecision {
    /// Take it (it was not held).
    Hold,
    /// Keep it as it is; while held, a sleeping poll must wake within this many milliseconds
    /// to lift it in time.
    Keep(Option<i32>),
    /// Lift it.
    Release,
}

/// When the request is held, apart from the device: the loop's polling over time.
#[derive(Debug, Default, Clone)]
pub(crate) struct HoldTimer {
    held: bool,
    /// The last poll that did not sleep.
    last_spin: Option<Instant>,
}

impl HoldTimer {
    /// Decides before a poll at `now`; `spinning`: this poll will not sleep.
    pub fn before_poll(&mut self, now: Instant, spinning: bool) -> HoldDecision {
        if spinning {
            self.last_spin = Some(now);
            if self.held {
                return HoldDecision::Keep(None);
            }
            self.held = true;
            return HoldDecision::Hold;
        }
        if !self.held {
            return HoldDecision::Keep(None);
        }
        let since = self
            .last_spin
            .map_or(LINGER, |t| now.saturating_duration_since(t));
        if since >= LINGER {
            self.held = false;
            return HoldDecision::Release;
        }
        let left_ms = LINGER.saturating_sub(since).as_millis().max(1) as i32;
        HoldDecision::Keep(Some(left_ms))
    }
}

/// The fault loop's request and its timer.
#[derive(Debug)]
pub(crate) struct WakeLatencyHold {
    timer: HoldTimer,
    /// `None`: not asked for, the device could not be opened (not root), or a write to it
    /// failed (then it is not tried again).
    request: Option<CpuWakeLatency>,
}

impl WakeLatencyHold {
    /// A hold on `request` (`None`: nothing is ever held).
    pub fn new(request: Option<CpuWakeLatency>) -> Self {
        Self {
            timer: HoldTimer::default(),
            request,
        }
    }

    /// Called before each poll at `now`; `spinning`: this poll will not sleep. Returns the
    /// change (`Some(true)`: the request was taken, `Some(false)`: lifted; for the region's
    /// counters) and a cap on a sleeping poll's timeout, in milliseconds.
    pub fn before_poll(&mut self, now: Instant, spinning: bool) -> (Option<bool>, Option<i32>) {
        let Some(request) = self.request.as_mut() else {
            return (None, None);
        };
        let result = match self.timer.before_poll(now, spinning) {
            HoldDecision::Hold => request.hold().map(|_| (Some(true), None)),
            HoldDecision::Keep(cap) => Ok((None, cap)),
            HoldDecision::Release => request.release().map(|_| (Some(false), None)),
        };
        result.unwrap_or_else(|_| {
            // Not tried again; dropping it lifts it (or closes it, which drops it).
            self.request = None;
            (None, None)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_from_the_first_poll_that_does_not_sleep() {
        let mut t = HoldTimer::default();
        let t0 = Instant::now();
        assert_eq!(t.before_poll(t0, false), HoldDecision::Keep(None));
        assert_eq!(t.before_poll(t0, true), HoldDecision::Hold);
        assert_eq!(t.before_poll(t0, true), HoldDecision::Keep(None));
    }

    #[test]
    fn lingers_after_polling_stops_then_is_lifted() {
        let mut t = HoldTimer::default();
        let t0 = Instant::now();
        assert_eq!(t.before_poll(t0, true), HoldDecision::Hold);
        // A sleeping poll 5 ms later keeps it and must wake by the end of the linger.
        let d = t.before_poll(t0 + Duration::from_millis(5), false);
        assert_eq!(d, HoldDecision::Keep(Some(15)));
        assert_eq!(
            t.before_poll(t0 + LINGER, false),
            HoldDecision::Release,
            "lifted once the linger is over"
        );
        assert_eq!(
            t.before_poll(t0 + LINGER * 2, false),
            HoldDecision::Keep(None),
            "nothing held, nothing to wake for"
        );
    }

    #[test]
    fn a_pause_shorter_than_the_linger_keeps_it() {
        let mut t = HoldTimer::default();
        let t0 = Instant::now();
        t.before_poll(t0, true);
        t.before_poll(t0 + Duration::from_millis(19), false);
        assert_eq!(
            t.before_poll(t0 + Duration::from_millis(19), true),
            HoldDecision::Keep(None)
        );
        // The linger counts from the last spin.
        assert_eq!(
            t.before_poll(t0 + Duration::from_millis(30), false),
            HoldDecision::Keep(Some(9))
        );
    }

    #[test]
    fn the_cap_is_never_zero() {
        let mut t = HoldTimer::default();
        let t0 = Instant::now();
        t.before_poll(t0, true);
        let d = t.before_poll(t0 + LINGER - Duration::from_micros(10), false);
        assert_eq!(d, HoldDecision::Keep(Some(1)), "a zero timeout would spin");
    }

    #[test]
    fn without_a_request_nothing_is_held_or_capped() {
        let mut h = WakeLatencyHold::new(None);
        let t0 = Instant::now();
        assert_eq!(h.before_poll(t0, true), (None, None));
        assert_eq!(
            h.before_poll(t0 + Duration::from_millis(1), false),
            (None, None)
        );
    }
}
