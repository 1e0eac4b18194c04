//! [`PushPlan`]: what a post-copy source sends after the switch-over, and in which order. The
//! pages left are those the guest changed since they were last sent (the destination holds
//! them as *remote*); pages that a fault on the destination waits for (`Want`) go first,
//! with the remote pages right after them in their chunk (a fault is often followed by the
//! next page's), then the rest in ascending order. Each page goes once.

use std::collections::VecDeque;

/// Pages sent after a wanted page, in the same batch, when they are remote too.
const WANTED_SPAN: usize = 16;

/// One region's pages left to push.
struct RegionPlan {
    /// Per page: still to send.
    left: Vec<bool>,
    /// The remote runs `(first, count)` in ascending order, each inside one chunk.
    runs: Vec<(usize, usize)>,
    /// The first run of `runs` not sent whole yet.
    next: usize,
    pages_per_chunk: usize,
}

impl RegionPlan {
    /// Takes the pages still left in `first..first + n` as runs, counting them in `taken`.
    fn take(&mut self, first: usize, n: usize, out: &mut Vec<(usize, usize)>) -> usize {
        let mut taken = 0;
        for p in first..(first + n).min(self.left.len()) {
            if !self.left[p] {
                continue;
            }
            self.left[p] = false;
            taken += 1;
            match out.last_mut() {
                Some((f, k)) if *f + *k == p && p % self.pages_per_chunk != 0 => *k += 1,
                _ => out.push((p, 1)),
            }
        }
        taken
    }
}

/// The post-copy push of every region: see the module documentation.
pub(crate) struct PushPlan {
    regions: Vec<RegionPlan>,
    /// Wanted pages (region, page), oldest first.
    wanted: VecDeque<(usize, usize)>,
    left: usize,
}

impl PushPlan {
    /// A plan for `remote[r]`, region `r`'s remote runs (ascending, each inside one chunk of
    /// `pages_per_chunk[r]` pages, within `region_pages[r]` pages).
    pub(crate) fn new(
        remote: Vec<Vec<(usize, usize)>>,
        region_pages: &[usize],
        pages_per_chunk: &[usize],
    ) -> Self {
        let mut left = 0;
        let regions = remote
            .into_iter()
            .enumerate()
            .map(|(r, runs)| {
                let mut pages = vec![false; region_pages[r]];
                for &(f, n) in &runs {
                    for p in pages.iter_mut().skip(f).take(n) {
                        left += usize::from(!*p);
                        *p = true;
                    }
                }
                RegionPlan {
                    left: pages,
                    runs,
                    next: 0,
                    pages_per_chunk: pages_per_chunk[r].max(1),
                }
            })
            .collect();
        Self {
            regions,
            wanted: VecDeque::new(),
            left,
        }
    }

    /// Pages not sent yet.
    pub(crate) fn left(&self) -> usize {
        self.left
    }

    /// The destination waits for page `page` of region `region`: it goes next (ignored if it
    /// was sent already or is not remote).
    pub(crate) fn want(&mut self, region: usize, page: usize) {
        if self
            .regions
            .get(region)
            .is_some_and(|r| r.left.get(page) == Some(&true))
        {
            self.wanted.push_back((region, page));
        }
    }

    /// The next batch: a region and its runs `(first, count)` (ascending, each inside one
    /// chunk), at most `max_pages` pages in at most `max_runs` runs; `None` once everything was
    /// taken. A wanted page makes a batch of its own with the remote pages after it in its
    /// chunk.
    pub(crate) fn next_batch(
        &mut self,
        max_pages: usize,
        max_runs: usize,
    ) -> Option<(usize, Vec<(usize, usize)>)> {
        while let Some((r, page)) = self.wanted.pop_front() {
            let region = &mut self.regions[r];
            let chunk_end = (page / region.pages_per_chunk + 1) * region.pages_per_chunk;
            let span = WANTED_SPAN.min(chunk_end - page).min(max_pages.max(1));
            let mut out = Vec::new();
            let taken = region.take(page, span, &mut out);
            if taken > 0 {
                self.left -= taken;
                return Some((r, out));
            }
        }
        for (r, region) in self.regions.iter_mut().enumerate() {
            let mut out = Vec::new();
            let mut pages = 0;
            while region.next < region.runs.len() && pages < max_pages && out.len() < max_runs {
                let (f, n) = region.runs[region.next];
                let room = max_pages - pages;
                if n > room {
                    // Take the front of the run; the rest stays for the next batch.
                    pages += region.take(f, room, &mut out);
                    region.runs[region.next] = (f + room, n - room);
                    break;
                }
                pages += region.take(f, n, &mut out);
                region.next += 1;
            }
            if pages > 0 {
                self.left -= pages;
                return Some((r, out));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(plan: &mut PushPlan) -> Vec<(usize, Vec<(usize, usize)>)> {
        std::iter::from_fn(|| plan.next_batch(8, 3)).collect()
    }

    #[test]
    fn every_page_goes_once_within_the_limits() {
        let remote = vec![vec![(0, 3), (4, 12), (20, 1)], vec![], vec![(7, 1)]];
        let mut plan = PushPlan::new(remote, &[32, 8, 8], &[16, 4, 4]);
        assert_eq!(plan.left(), 17);
        let batches = drain(&mut plan);
        let mut seen = vec![Vec::new(); 3];
        for (r, runs) in &batches {
            assert!(runs.len() <= 3);
            assert!(runs.iter().map(|r| r.1).sum::<usize>() <= 8);
            for &(f, n) in runs {
                assert_eq!(f / 16, (f + n - 1) / 16, "inside one chunk");
                seen[*r].extend(f..f + n);
            }
        }
        let expected: Vec<usize> = (0..3).chain(4..16).chain([20]).collect();
        assert_eq!(seen[0], expected);
        assert_eq!(seen[2], vec![7]);
        assert_eq!(plan.left(), 0);
        assert!(plan.next_batch(8, 3).is_none());
    }

    #[test]
    fn wanted_pages_go_first_with_their_neighbours_in_the_chunk() {
        let remote = vec![vec![(0, 4), (8, 8)], vec![(2, 2)]];
        let mut plan = PushPlan::new(remote, &[16, 4], &[8, 4]);
        plan.want(1, 3);
        plan.want(0, 9);
        // Not remote, out of range, or unknown region: ignored.
        plan.want(0, 5);
        plan.want(0, 99);
        plan.want(7, 0);
        assert_eq!(plan.next_batch(64, 64), Some((1, vec![(3, 1)])));
        assert_eq!(plan.next_batch(64, 64), Some((0, vec![(9, 7)])));
        // Wanted again after it went: ignored.
        plan.want(0, 9);
        assert_eq!(plan.next_batch(64, 64), Some((0, vec![(0, 4), (8, 1)])));
        assert_eq!(plan.next_batch(64, 64), Some((1, vec![(2, 1)])));
        assert_eq!(plan.next_batch(64, 64), None);
        assert_eq!(plan.left(), 0);
    }
}
