//! [`BusyPoll`]: when the fault loop checks for work without sleeping, adapting to the fault
//! rate as NAPI does for network interrupts.
//!
//! Sleeping in `poll` costs a wake-up per event: on the development VM a cross-CPU wake-up
//! costs tens of microseconds, as much as the 4 KiB read a scattered fault waits for. A
//! handler that keeps polling (`poll` with a zero timeout) sees the next fault, or the
//! completion of the page read it started, at once. Polling burns the handler's CPU, so it is
//! done only while it pays:
//! * while faults arrive fast: the smoothed gap between fault batches is shorter than the
//!   window; then the loop polls for one window after each batch (synchronous commands count
//!   as faults: their callers wait too, and a virtio-balloon inflation sends one per page);
//! * while a parallel page read is in flight (it completes within tens of microseconds), for
//!   at most one window after the last batch.
//!
//! After a window without faults the loop sleeps again: an idle region costs no CPU, and a
//! region faulting slower than one batch per window (a sequential stream reading whole
//! chunks) polls only while its reads are in flight.

use std::time::{Duration, Instant};

/// Weight of a new gap in the smoothed gap, as a right shift (1/8, as TCP's SRTT).
const GAP_SMOOTHING_SHIFT: u32 = 3;

/// The busy-polling state of one fault loop.
#[derive(Debug, Clone)]
pub(crate) struct BusyPoll {
    window: Duration,
    /// When the last batch of faults was served.
    last_faults: Option<Instant>,
    /// Smoothed gap between fault batches, in nanoseconds (`u64::MAX` until two batches).
    smoothed_gap_ns: u64,
}

impl BusyPoll {
    /// Polls for up to `window` after faults, while they arrive at least once per window.
    pub fn new(window: Duration) -> Self {
        Self {
            window,
            last_faults: None,
            smoothed_gap_ns: u64::MAX,
        }
    }

    /// Records a batch of faults served at `now`.
    pub fn on_faults(&mut self, now: Instant) {
        if let Some(last) = self.last_faults {
            // Gaps are capped at one second: one long idle period must not take a long
            // burst of fast faults to forget.
            let gap = now
                .saturating_duration_since(last)
                .min(Duration::from_secs(1))
                .as_nanos() as u64;
            self.smoothed_gap_ns = if self.smoothed_gap_ns == u64::MAX {
                gap
            } else {
                let old = self.smoothed_gap_ns;
                old - (old >> GAP_SMOOTHING_SHIFT) + (gap >> GAP_SMOOTHING_SHIFT)
            };
        }
        self.last_faults = Some(now);
    }

    /// Whether faults currently arrive faster than one batch per window.
    pub fn faults_are_fast(&self) -> bool {
        self.smoothed_gap_ns < self.window.as_nanos() as u64
    }

    /// Whether the loop should poll without sleeping at `now`; `reads_in_flight`: whether a
    /// parallel page read is under way.
    pub fn should_spin(&self, now: Instant, reads_in_flight: bool) -> bool {
        let Some(last) = self.last_faults else {
            return false;
        };
        let in_window = now.saturating_duration_since(last) < self.window;
        in_window && (reads_in_flight || self.faults_are_fast())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WINDOW: Duration = Duration::from_micros(200);

    #[test]
    fn never_spins_before_any_fault() {
        let p = BusyPoll::new(WINDOW);
        assert!(!p.should_spin(Instant::now(), true));
    }

    #[test]
    fn spins_after_fast_faults_only_within_the_window() {
        let mut p = BusyPoll::new(WINDOW);
        let t0 = Instant::now();
        for i in 0..20 {
            p.on_faults(t0 + Duration::from_micros(50 * i));
        }
        let last = t0 + Duration::from_micros(50 * 19);
        assert!(p.faults_are_fast());
        assert!(p.should_spin(last + Duration::from_micros(10), false));
        assert!(!p.should_spin(last + WINDOW, false));
        assert!(!p.should_spin(last + Duration::from_secs(1), true));
    }

    #[test]
    fn slow_faults_spin_only_while_a_read_is_in_flight() {
        let mut p = BusyPoll::new(WINDOW);
        let t0 = Instant::now();
        for i in 0..20 {
            p.on_faults(t0 + Duration::from_millis(2 * i));
        }
        let last = t0 + Duration::from_millis(38);
        assert!(!p.faults_are_fast());
        assert!(!p.should_spin(last + Duration::from_micros(10), false));
        assert!(p.should_spin(last + Duration::from_micros(10), true));
    }

    #[test]
    fn a_burst_after_idle_turns_spinning_on_within_a_few_batches() {
        let mut p = BusyPoll::new(WINDOW);
        let t0 = Instant::now();
        p.on_faults(t0);
        // An hour idle counts as one second.
        let t1 = t0 + Duration::from_secs(3600);
        p.on_faults(t1);
        assert!(!p.faults_are_fast());
        let mut t = t1;
        let mut batches = 0;
        while !p.faults_are_fast() {
            t += Duration::from_micros(30);
            p.on_faults(t);
            batches += 1;
            assert!(batches < 200, "still slow after {batches} fast batches");
        }
        // And slow gaps turn it off again.
        let mut batches = 0;
        while p.faults_are_fast() {
            t += Duration::from_millis(5);
            p.on_faults(t);
            batches += 1;
            assert!(batches < 20, "still fast after {batches} slow batches");
        }
    }
}
