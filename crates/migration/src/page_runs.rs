//! Runs of region pages `(first page, count)`, as change tracking reports them: sorted, not
//! overlapping, each inside one chunk.

/// The pages of `a` and of `b` (each sorted and not overlapping) as one such list: sorted,
/// each page once, neighbouring runs joined, and split where a chunk of `pages_per_chunk`
/// pages ends.
///
/// The source's last round uses it: the pages a round still had to send when the guest paused,
/// and those changed since that round began, go once each.
pub(crate) fn union_runs(
    a: &[(usize, usize)],
    b: &[(usize, usize)],
    pages_per_chunk: usize,
) -> Vec<(usize, usize)> {
    let pages_per_chunk = pages_per_chunk.max(1);
    let mut merged: Vec<(usize, usize)> = Vec::with_capacity(a.len() + b.len());
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        let next = if j >= b.len() || (i < a.len() && a[i].0 <= b[j].0) {
            i += 1;
            a[i - 1]
        } else {
            j += 1;
            b[j - 1]
        };
        let (first, count) = next;
        if count == 0 {
            continue;
        }
        match merged.last_mut() {
            // Overlapping or touching the previous run: extend it.
            Some((start, len)) if first <= *start + *len => {
                *len = (*len).max(first + count - *start);
            }
            _ => merged.push((first, count)),
        }
    }
    let mut out = Vec::with_capacity(merged.len());
    for (mut first, mut count) in merged {
        while count > 0 {
            let chunk_end = (first / pages_per_chunk + 1) * pages_per_chunk;
            let here = count.min(chunk_end - first);
            out.push((first, here));
            first += here;
            count -= here;
        }
    }
    out
}

/// How many pages the runs of every region in `runs` hold.
pub(crate) fn pages_in(runs: &[Vec<(usize, usize)>]) -> u64 {
    runs.iter().flatten().map(|&(_, n)| n as u64).sum()
}

/// The first run of `inner` with a page that no run of `outer` (sorted, not overlapping)
/// holds, if any. `inner` may come in any order.
///
/// A resumed post-copy source uses it: every page the destination lists as still remote must
/// be one the source named at the pause.
pub(crate) fn first_uncovered(
    outer: &[(usize, usize)],
    inner: &[(usize, usize)],
) -> Option<(usize, usize)> {
    for &(first, count) in inner {
        // A run past the largest page number holds pages no run can.
        let Some(end) = first.checked_add(count) else {
            return Some((first, count));
        };
        let mut at = first;
        while at < end {
            // The last outer run starting at or before `at`.
            let i = outer.partition_point(|&(start, _)| start <= at);
            match i.checked_sub(1).map(|i| outer[i]) {
                Some((start, len)) if at < start + len => at = start + len,
                _ => return Some((first, count)),
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// Numbers below a bound from a small linear congruential generator seeded with
    /// `state`: deterministic, no dependency.
    fn numbers(mut state: u64) -> impl FnMut(usize) -> usize {
        move |bound| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (state >> 33) as usize % bound
        }
    }

    #[test]
    fn uncovered_runs_are_found_against_a_set_model() {
        let mut next = numbers(0x9e37_79b9_7f4a_7c15);
        // Cases where some inner run is uncovered, and where all are covered.
        let mut outcomes = [0; 2];
        for _ in 0..500 {
            let mut outer = Vec::new();
            let mut at = next(4);
            for _ in 0..next(8) {
                let n = 1 + next(5);
                outer.push((at, n));
                // Touching runs too: they cover one stretch together.
                at += n + next(3);
            }
            let set = pages(&outer);
            let inner: Vec<(usize, usize)> =
                (0..next(5)).map(|_| (next(40), 1 + next(6))).collect();
            let model = inner
                .iter()
                .copied()
                .find(|&(f, n)| (f..f + n).any(|p| !set.contains(&p)));
            assert_eq!(
                first_uncovered(&outer, &inner),
                model,
                "{outer:?} {inner:?}"
            );
            outcomes[usize::from(model.is_none())] += 1;
        }
        assert!(outcomes.iter().all(|&n| n >= 50), "{outcomes:?}");
        assert_eq!(first_uncovered(&[], &[]), None);
        assert_eq!(first_uncovered(&[], &[(0, 1)]), Some((0, 1)));
        assert_eq!(first_uncovered(&[(0, 4), (4, 4)], &[(2, 5)]), None);
        assert_eq!(
            first_uncovered(&[(0, 4)], &[(usize::MAX, 2)]),
            Some((usize::MAX, 2))
        );
    }

    fn pages(runs: &[(usize, usize)]) -> BTreeSet<usize> {
        runs.iter().flat_map(|&(f, n)| f..f + n).collect()
    }

    #[test]
    fn joins_overlapping_and_touching_runs_within_a_chunk() {
        assert_eq!(
            union_runs(&[(0, 2), (10, 3)], &[(1, 3), (13, 1), (20, 1)], 256),
            vec![(0, 4), (10, 4), (20, 1)]
        );
        assert_eq!(union_runs(&[], &[(5, 1)], 4), vec![(5, 1)]);
        assert_eq!(union_runs(&[(5, 1)], &[], 4), vec![(5, 1)]);
        assert!(union_runs(&[], &[], 4).is_empty());
    }

    #[test]
    fn splits_at_chunk_ends() {
        // (2, 2) and (4, 3) touch across the chunk end at 4: joined, then split there again.
        assert_eq!(union_runs(&[(2, 2)], &[(4, 3)], 4), vec![(2, 2), (4, 3)]);
        assert_eq!(
            union_runs(&[(0, 4)], &[(3, 6)], 4),
            vec![(0, 4), (4, 4), (8, 1)]
        );
    }

    #[test]
    fn random_lists_give_exactly_the_union() {
        let mut next = numbers(0x2545_f491_4f6c_dd1d);
        for _ in 0..500 {
            let ppc = 1 + next(8);
            let mut lists = Vec::new();
            for _ in 0..2 {
                // Runs as tracking gives them: sorted, disjoint, inside one chunk.
                let mut runs = Vec::new();
                let mut page = 0;
                while page < 64 {
                    page += next(5);
                    let chunk_end = (page / ppc + 1) * ppc;
                    let n = 1 + next(chunk_end - page);
                    runs.push((page, n));
                    page += n + 1;
                }
                lists.push(runs);
            }
            let union = union_runs(&lists[0], &lists[1], ppc);
            let expected: BTreeSet<usize> =
                pages(&lists[0]).union(&pages(&lists[1])).copied().collect();
            assert_eq!(pages(&union), expected);
            assert_eq!(
                union.iter().map(|r| r.1).sum::<usize>(),
                expected.len(),
                "each page once"
            );
            for pair in union.windows(2) {
                assert!(
                    pair[0].0 + pair[0].1 <= pair[1].0,
                    "sorted, disjoint: {union:?}"
                );
            }
            for &(f, n) in &union {
                assert!(
                    n > 0 && f / ppc == (f + n - 1) / ppc,
                    "inside one chunk: {union:?}"
                );
            }
        }
    }
}
