//! The stress workload of the redis experiment's second table (the seed's `stress-ng` fault
//! count, FIFO against approximate LRU): a program that maps `size` bytes with the public
//! `mmap` (so that `memvisor run` manages it), writes every page, then makes `accesses` page
//! accesses drawn from `memvisor_trace`'s `hotset` workload — a hot quarter of the pages takes
//! 90% of the accesses, and every `scan_every` accesses a scan sweeps `scan_len` cold pages.
//! Every access reads the page's first word (it must hold the page's index: a mismatch is
//! data corruption) and writes it back. It then prints one `DONE` line and waits for its stdin
//! to close, so the driver can read the pager's counters while it is still alive.

use std::io::{BufRead, Write};

use memvisor_trace::WorkloadSpec;

use crate::bench_error::BenchError;

const PAGE: usize = 4096;

/// The stress program's parameters.
#[derive(Debug, Clone)]
pub struct StressSettings {
    /// Bytes mapped.
    pub size: usize,
    /// Page accesses after the fill.
    pub accesses: u64,
    /// Fraction of the pages that are hot.
    pub hot: f64,
    /// Accesses between scans.
    pub scan_every: u64,
    /// Cold pages per scan.
    pub scan_len: u64,
    /// Seed of the access sequence.
    pub seed: u64,
}

impl StressSettings {
    /// The `memvisor_trace` workload spec over the pages.
    pub fn workload_spec(&self) -> String {
        format!(
            "hotset:n={}:hot={}:hot-prob=0.9:scan-every={}:scan-len={}:len={}:seed={}",
            self.size / PAGE,
            self.hot,
            self.scan_every,
            self.scan_len,
            self.accesses,
            self.seed
        )
    }
}

/// Runs the stress program in this process; prints `DONE pages=P accesses=A seconds=S`, then
/// waits for stdin to close.
pub fn run_stress(s: &StressSettings) -> Result<(), BenchError> {
    let pages = s.size / PAGE;
    if pages == 0 {
        return Err(BenchError::bad(
            "stress size",
            s.size.to_string(),
            "below one page",
        ));
    }
    let spec = s.workload_spec();
    let w: WorkloadSpec = spec
        .parse()
        .map_err(|e| BenchError::bad("stress workload", spec.clone(), format!("{e}")))?;
    // SAFETY: a fresh private anonymous mapping; no existing memory is affected.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            pages * PAGE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(BenchError::io(
            "mmap stress memory",
            "(anonymous)",
            std::io::Error::last_os_error(),
        ));
    }
    let base = p as *mut u64;
    let word = |page: usize| {
        // SAFETY: page < pages, so the word lies inside the mapping made above.
        unsafe { base.add(page * PAGE / 8) }
    };
    let started = std::time::Instant::now();
    for page in 0..pages {
        // SAFETY: in bounds (see `word`), aligned, only this thread touches the mapping.
        unsafe { word(page).write_volatile(page as u64) };
    }
    for r in w.requests() {
        let page = r.unit as usize % pages;
        // SAFETY: as above.
        let v = unsafe { word(page).read_volatile() };
        if v != page as u64 {
            return Err(BenchError::Corrupt {
                page: page as u64,
                word: 0,
                expected: page as u64,
                found: v,
            });
        }
        // SAFETY: as above.
        unsafe { word(page).write_volatile(v) };
    }
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "DONE pages={pages} accesses={} seconds={:.3}",
        s.accesses,
        started.elapsed().as_secs_f64()
    );
    let _ = out.flush();
    drop(out);
    let mut line = String::new();
    while std::io::stdin().lock().read_line(&mut line).unwrap_or(0) > 0 {
        line.clear();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_parses() {
        let s = StressSettings {
            size: 64 << 20,
            accesses: 1000,
            hot: 0.25,
            scan_every: 100,
            scan_len: 50,
            seed: 1,
        };
        let w: WorkloadSpec = s.workload_spec().parse().unwrap();
        assert_eq!(w.requests().count(), 1000);
        assert!(w.requests().all(|r| r.unit < 16384));
    }
}
