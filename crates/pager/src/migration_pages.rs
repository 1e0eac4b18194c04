//! What a live migration moves through a region: [`MigrationPages`], a run of pages read for
//! sending (from memory, swap or the disk image, never by faulting them in), and
//! [`InstallOutcome`], where the pages a destination received went (memory or straight to
//! swap).
//!
//! A migration moves a region's memory between two pagers (seed 003, section 3): the source
//! reads every page where it is, resident pages from memory and swapped pages from the swap
//! file (*devirtualizing* without page-ins); the destination keeps what fits its budget in
//! memory and writes the rest straight to its swap file (*virtualizing* without page-outs).
//! Between rounds the source asks which pages changed since they were sent: every write the
//! dirty tracking (userfaultfd `WP_ASYNC` + `PAGEMAP_SCAN`) saw, and every discard.

/// A run of a region's pages as a migration read them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MigrationPages {
    /// Region page index of the first page.
    pub first_page: usize,
    /// Page size in bytes.
    pub page_size: usize,
    /// The pages' bytes, `zero.len()` pages.
    pub data: Vec<u8>,
    /// Per page: all zero (never written, discarded, or written with zeros).
    pub zero: Vec<bool>,
}

impl MigrationPages {
    /// How many pages the run has.
    pub fn len(&self) -> usize {
        self.zero.len()
    }

    /// Whether the run has no page.
    pub fn is_empty(&self) -> bool {
        self.zero.is_empty()
    }

    /// The runs `(first index in this run, count)` of pages that are not zero.
    pub fn nonzero_runs(&self) -> Vec<(usize, usize)> {
        runs(&self.zero, false)
    }

    /// The runs `(first index in this run, count)` of zero pages.
    pub fn zero_runs(&self) -> Vec<(usize, usize)> {
        runs(&self.zero, true)
    }

    /// The bytes of pages `first..first + n` of this run.
    pub fn bytes(&self, first: usize, n: usize) -> &[u8] {
        &self.data[first * self.page_size..(first + n) * self.page_size]
    }
}

fn runs(flags: &[bool], value: bool) -> Vec<(usize, usize)> {
    let mut out: Vec<(usize, usize)> = Vec::new();
    for (i, &f) in flags.iter().enumerate() {
        if f != value {
            continue;
        }
        match out.last_mut() {
            Some((first, n)) if *first + *n == i => *n += 1,
            _ => out.push((i, 1)),
        }
    }
    out
}

/// Where the pages of one install went.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct InstallOutcome {
    /// Pages now in memory (they fit the budget, or their page was resident already).
    pub in_memory: usize,
    /// Pages written straight to the swap file.
    pub to_swap: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_split_zero_and_nonzero_pages() {
        let p = MigrationPages {
            first_page: 10,
            page_size: 2,
            data: vec![0, 0, 1, 2, 3, 4, 0, 0, 5, 6],
            zero: vec![true, false, false, true, false],
        };
        assert_eq!(p.len(), 5);
        assert_eq!(p.nonzero_runs(), vec![(1, 2), (4, 1)]);
        assert_eq!(p.zero_runs(), vec![(0, 1), (3, 1)]);
        assert_eq!(p.bytes(1, 2), &[1, 2, 3, 4]);
    }
}
