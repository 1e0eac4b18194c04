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
//!
//! Polling pays only on a CPU nobody else wants. When every CPU is busy (other guests' vCPU
//! threads), a polling handler is just one more runnable thread: after the faulting thread is
//! woken, the handler's next turn on a CPU comes only after the others' time slices, so every
//! fault waits milliseconds instead of microseconds. Measured with a TCG guest paging under a
//! 32 MiB budget beside two CPU-bound loops on 2 CPUs: 23 s per pass of its Zipf reads with
//! polling, 0.9 s without (0.4 s with idle CPUs). So the loop measures each stretch of time it
//! spends without sleeping ([`BusyPoll::on_stretch`]): if it ran less than half of it and was
//! switched out involuntarily, the CPUs are contended, and polling stops for a back-off
//! (100 ms, doubling while contention lasts, up to 5 s), during which the loop sleeps in `poll`
//! and each fault wakes it as without polling.

use std::time::{Duration, Instant};

use super::thread_usage::ThreadUsage;

/// Weight of a new gap in the smoothed gap, as a right shift (1/8, as TCP's SRTT).
const GAP_SMOOTHING_SHIFT: u32 = 3;

/// A stretch without sleep shorter than this says nothing about contention.
pub(crate) const MIN_STRETCH: Duration = Duration::from_millis(1);

/// A stretch without sleep is judged at least this often.
pub(crate) const MAX_STRETCH: Duration = Duration::from_millis(5);

/// The first back-off after contention is seen.
const FIRST_BACKOFF: Duration = Duration::from_millis(100);

/// The longest back-off.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// The busy-polling state of one fault loop.
#[derive(Debug, Clone)]
pub(crate) struct BusyPoll {
    window: Duration,
    /// When the last batch of faults was served.
    last_faults: Option<Instant>,
    /// Smoothed gap between fault batches, in nanoseconds (`u64::MAX` until two batches).
    smoothed_gap_ns: u64,
    /// No polling before this (the CPUs were contended).
    backoff_until: Option<Instant>,
    /// The next back-off's length.
    next_backoff: Duration,
    /// Back-offs so far.
    backoffs: u64,
}

impl BusyPoll {
    /// Polls for up to `window` after faults, while they arrive at least once per window.
    pub fn new(window: Duration) -> Self {
        Self {
            window,
            last_faults: None,
            smoothed_gap_ns: u64::MAX,
            backoff_until: None,
            next_backoff: FIRST_BACKOFF,
            backoffs: 0,
        }
    }

    /// Judges a stretch of `wall` time the loop spent without sleeping, ending at `now`, in
    /// which it ran for `cpu` and was switched out involuntarily `involuntary` times: ran less
    /// than half of it and preempted means another thread wanted the CPU, so polling backs
    /// off. Stretches shorter than [`MIN_STRETCH`] are ignored. Returns whether a back-off
    /// began.
    pub fn on_stretch(
        &mut self,
        now: Instant,
        wall: Duration,
        cpu: Duration,
        involuntary: u64,
    ) -> bool {
        if wall < MIN_STRETCH {
            return false;
        }
        if involuntary > 0 && cpu * 2 < wall {
            self.backoff_until = Some(now + self.next_backoff);
            self.next_backoff = (self.next_backoff * 2).min(MAX_BACKOFF);
            self.backoffs += 1;
            return true;
        }
        if self.backoff_until.is_none_or(|t| now >= t) {
            self.next_backoff = FIRST_BACKOFF;
        }
        false
    }

    /// Back-offs for contention so far.
    pub fn backoffs(&self) -> u64 {
        self.backoffs
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
        if self.backoff_until.is_some_and(|t| now < t) {
            return false;
        }
        let in_window = now.saturating_duration_since(last) < self.window;
        in_window && (reads_in_flight || self.faults_are_fast())
    }
}

/// The stretch of time the fault loop has spent polling without sleeping, measured with the
/// handler thread's own usage and judged by [`BusyPoll::on_stretch`].
#[derive(Debug, Default)]
pub(crate) struct PollStretch {
    /// When it began, and the thread's usage then.
    start: Option<(Instant, ThreadUsage)>,
}

impl PollStretch {
    /// Called by the handler thread before each `poll` at `now`; `spinning`: this poll would
    /// not sleep. A stretch starts with the first poll that does not sleep and is judged when
    /// the loop is about to sleep, or every [`MAX_STRETCH`] while it keeps polling. Returns
    /// whether this poll may still skip sleeping (false once a back-off has just begun).
    pub fn before_poll(&mut self, busy: &mut BusyPoll, now: Instant, spinning: bool) -> bool {
        match self.start {
            None if spinning => self.start = ThreadUsage::now().map(|u| (now, u)),
            Some((began, then))
                if !spinning || now.saturating_duration_since(began) >= MAX_STRETCH =>
            {
                let usage = ThreadUsage::now();
                let backed_off = usage.is_some_and(|u| {
                    busy.on_stretch(
                        now,
                        now.saturating_duration_since(began),
                        u.cpu.saturating_sub(then.cpu),
                        u.involuntary_switches
                            .saturating_sub(then.involuntary_switches),
                    )
                });
                if backed_off {
                    self.start = None;
                    return false;
                }
                self.start = usage.filter(|_| spinning).map(|u| (now, u));
            }
            _ => {}
        }
        spinning
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

    fn fast(p: &mut BusyPoll, t0: Instant) -> Instant {
        for i in 0..20 {
            p.on_faults(t0 + Duration::from_micros(50 * i));
        }
        t0 + Duration::from_micros(50 * 19)
    }

    #[test]
    fn a_contended_stretch_stops_polling_for_a_growing_backoff() {
        let mut p = BusyPoll::new(WINDOW);
        let last = fast(&mut p, Instant::now());
        let now = last + Duration::from_micros(10);
        assert!(p.should_spin(now, false));
        // 4 ms without sleep, 1 ms of it on a CPU, preempted: contended.
        let ms = Duration::from_millis;
        p.on_stretch(now, ms(4), ms(1), 3);
        assert_eq!(p.backoffs(), 1);
        assert!(!p.should_spin(now, true));
        // Faults after it: still no polling until the back-off ends.
        p.on_faults(now + ms(50));
        assert!(!p.should_spin(now + ms(50), true));
        p.on_faults(now + ms(101));
        assert!(p.should_spin(now + ms(101), true));
        // Contended again: twice as long.
        let t = now + ms(101);
        p.on_stretch(t, ms(4), ms(1), 1);
        p.on_faults(t + ms(150));
        assert!(!p.should_spin(t + ms(150), true));
        p.on_faults(t + ms(201));
        assert!(p.should_spin(t + ms(201), true));
    }

    #[test]
    fn running_the_whole_stretch_or_a_short_one_is_not_contention() {
        let ms = Duration::from_millis;
        let mut p = BusyPoll::new(WINDOW);
        let last = fast(&mut p, Instant::now());
        // Ran the whole time, preempted once by a kernel thread: fine.
        p.on_stretch(last, ms(5), ms(5), 1);
        // Slept in a blocking call (voluntary): not preempted, fine.
        p.on_stretch(last, ms(5), ms(1), 0);
        // Too short to judge.
        p.on_stretch(last, Duration::from_micros(500), Duration::ZERO, 4);
        assert_eq!(p.backoffs(), 0);
        assert!(p.should_spin(last + Duration::from_micros(10), false));
    }

    #[test]
    fn the_backoff_caps_and_resets_after_a_clean_stretch() {
        let ms = Duration::from_millis;
        let mut p = BusyPoll::new(WINDOW);
        let mut t = fast(&mut p, Instant::now());
        for _ in 0..12 {
            p.on_stretch(t, ms(4), ms(1), 1);
            t += ms(10_000);
        }
        assert_eq!(p.next_backoff, MAX_BACKOFF);
        p.on_stretch(t, ms(4), ms(4), 0);
        assert_eq!(p.next_backoff, FIRST_BACKOFF);
    }
}
