//! [`ThreadUsage`]: the calling thread's CPU time and involuntary context switches
//! (`getrusage(RUSAGE_THREAD)`), which tell the busy-polling fault loop whether it is taking a
//! CPU that another thread is waiting for.
//!
//! A thread that spins on a CPU nobody else wants runs the whole time it spins: its CPU time
//! grows as fast as the wall clock and nothing preempts it. When every CPU is busy (guests'
//! vCPU threads, other programs), the scheduler takes it off the CPU: its CPU time falls
//! behind the wall clock and its involuntary switches count up. (The scheduler's own
//! run-queue delay, `/proc/thread-self/schedstat`, reads zero unless schedstats are on.)

use std::time::Duration;

/// One reading of the calling thread's usage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct ThreadUsage {
    /// User plus system CPU time.
    pub cpu: Duration,
    /// Times the scheduler took the CPU away while the thread could run (preemption, or a
    /// `sched_yield` that ran another thread).
    pub involuntary_switches: u64,
}

impl ThreadUsage {
    /// The calling thread's usage now, or `None` if `getrusage` fails (it does not for
    /// `RUSAGE_THREAD` on Linux; the caller then treats the CPU as uncontended).
    pub fn now() -> Option<Self> {
        // SAFETY: `rusage` is plain data for which all-zero is a valid value.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: `ru` is a live, writable rusage; getrusage writes only into it.
        if unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) } != 0 {
            return None;
        }
        let tv = |t: libc::timeval| {
            Duration::from_secs(t.tv_sec.max(0) as u64)
                + Duration::from_micros(t.tv_usec.max(0) as u64)
        };
        Some(Self {
            cpu: tv(ru.ru_utime) + tv(ru.ru_stime),
            involuntary_switches: ru.ru_nivcsw.max(0) as u64,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn spinning_alone_counts_cpu_time_and_sleeping_does_not() {
        let a = ThreadUsage::now().unwrap();
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_millis(30) {
            std::hint::spin_loop();
        }
        let b = ThreadUsage::now().unwrap();
        // getrusage counts in ticks on some kernels: allow a coarse reading.
        assert!(b.cpu > a.cpu, "{a:?} {b:?}");
        std::thread::sleep(Duration::from_millis(50));
        let c = ThreadUsage::now().unwrap();
        assert!(c.cpu - b.cpu < Duration::from_millis(25), "{b:?} {c:?}");
        assert!(c.involuntary_switches >= a.involuntary_switches);
    }
}
