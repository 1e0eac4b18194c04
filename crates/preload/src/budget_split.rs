//! [`split_budget`]: how a process budget is divided among its regions.
//!
//! A code region (QEMU's TCG translated-code buffer) gets its allotment first
//! ([`CodeAllotment`](crate::code_allotment::CodeAllotment), set by its page-in rate), and so
//! does the arena when it holds the program's heap (`memvisor run --malloc jemalloc`: what a
//! heap has mapped or used says little of what it needs, as with code); all allotments
//! together at most a quarter of the budget, scaled down in proportion if they ask more. Guest
//! RAM, fixed regions and otherwise the arena share the rest in proportion to their weight: a
//! guest-RAM or fixed region its size, the arena the bytes mapped in it. Every share is in
//! whole chunks and at least one, so the sum may exceed the budget by one chunk per region.

use crate::code_allotment::MAX_DIVISOR;

/// A region's claim on the budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// A region whose share follows its weight in bytes.
    Weighted(usize),
    /// A region with this allotment in bytes, set by its page-in rate (a code region; the arena
    /// when it holds the program's heap, `memvisor run --malloc jemalloc`).
    Allotment(usize),
}

fn chunks_down(bytes: usize, chunk: usize) -> usize {
    (bytes / chunk * chunk).max(chunk)
}

fn proportion(budget: usize, w: usize, total: usize) -> usize {
    (budget as u128 * w as u128 / total.max(1) as u128) as usize
}

/// The budgets of the arena (claiming `arena`) and of the regions claiming `claims`, in that
/// order, out of `budget` bytes with chunks of `chunk` bytes (see the module docs).
pub fn split_budget(
    budget: usize,
    chunk: usize,
    arena: Claim,
    claims: &[Claim],
) -> (usize, Vec<usize>) {
    let mut all = Vec::with_capacity(claims.len() + 1);
    all.push(arena);
    all.extend_from_slice(claims);
    let mut out = split_claims(budget, chunk, &all);
    let arena = out.remove(0);
    (arena, out)
}

/// The budget of each of `claims`, in order.
fn split_claims(budget: usize, chunk: usize, claims: &[Claim]) -> Vec<usize> {
    let chunk = chunk.max(1);
    let others: usize = claims
        .iter()
        .map(|c| match c {
            Claim::Weighted(w) => *w,
            Claim::Allotment(_) => 0,
        })
        .sum::<usize>();
    let mut out = vec![0; claims.len()];
    // All code regions together get at most a quarter of the budget (each allotment is bounded
    // so on its own): scaled down in proportion when their sum is more.
    let asked: usize = claims
        .iter()
        .map(|c| match c {
            Claim::Allotment(a) => *a,
            Claim::Weighted(_) => 0,
        })
        .sum();
    let code_cap = budget / MAX_DIVISOR;
    let mut code_total = 0usize;
    for (o, c) in out.iter_mut().zip(claims) {
        if let Claim::Allotment(allotment) = *c {
            let share = if asked > code_cap {
                proportion(code_cap, allotment, asked)
            } else {
                allotment
            };
            *o = chunks_down(share, chunk);
            code_total += *o;
        }
    }
    let rest = budget.saturating_sub(code_total);
    for (o, c) in out.iter_mut().zip(claims) {
        if let Claim::Weighted(w) = *c {
            *o = chunks_down(proportion(rest, w, others), chunk);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const M: usize = 1 << 20;

    #[test]
    fn without_code_the_budget_follows_the_weights() {
        let (arena, fixed) = split_budget(
            128 * M,
            M,
            Claim::Weighted(M),
            &[Claim::Weighted(255 * M), Claim::Weighted(256 * M)],
        );
        assert_eq!(arena, M);
        assert_eq!(fixed, vec![63 * M, 64 * M]);
        // Tiny weights still get a chunk each.
        let (arena, fixed) = split_budget(4 * M, M, Claim::Weighted(1), &[Claim::Weighted(4 * M)]);
        assert_eq!((arena, fixed), (M, vec![3 * M]));
    }

    #[test]
    fn a_code_region_gets_its_allotment_and_the_others_share_the_rest() {
        let (arena, fixed) = split_budget(
            117 * M,
            M,
            Claim::Weighted(M),
            &[Claim::Allotment(14 * M + 5), Claim::Weighted(192 * M)],
        );
        assert_eq!(fixed, vec![14 * M, 102 * M]);
        assert_eq!(arena, M);
        // At most a quarter of the budget, at least a chunk.
        let (_, fixed) = split_budget(64 * M, M, Claim::Weighted(M), &[Claim::Allotment(900 * M)]);
        assert_eq!(fixed, vec![16 * M]);
        let (_, fixed) = split_budget(64 * M, M, Claim::Weighted(M), &[Claim::Allotment(0)]);
        assert_eq!(fixed, vec![M]);
        // Several code regions share the quarter: eight asking 8M each of 64M get 2M each.
        let mut claims = vec![Claim::Allotment(8 * M); 8];
        claims.push(Claim::Weighted(192 * M));
        let (_, fixed) = split_budget(64 * M, M, Claim::Weighted(M), &claims);
        assert_eq!(&fixed[..8], &[2 * M; 8]);
        assert_eq!(fixed[8], 47 * M);
    }

    #[test]
    fn an_arena_with_an_allotment_gets_it_and_shares_the_quarter_with_code() {
        // The heap's 10M and the code's 20M fit the quarter of 256M: guest RAM gets the rest.
        let (arena, fixed) = split_budget(
            256 * M,
            M,
            Claim::Allotment(10 * M),
            &[Claim::Allotment(20 * M), Claim::Weighted(768 * M)],
        );
        assert_eq!((arena, fixed), (10 * M, vec![20 * M, 226 * M]));
        // Asking more than the quarter together, both are scaled down.
        let (arena, fixed) = split_budget(
            64 * M,
            M,
            Claim::Allotment(16 * M),
            &[Claim::Allotment(16 * M), Claim::Weighted(768 * M)],
        );
        assert_eq!((arena, fixed), (8 * M, vec![8 * M, 48 * M]));
    }

    #[test]
    fn shares_are_whole_chunks_and_never_far_above_the_budget() {
        for budget in [M, 3 * M, 64 * M, 1000 * M + 12345] {
            for allotment in [0, M / 2, 7 * M, 50 * M, 5000 * M] {
                let claims = [
                    Claim::Allotment(allotment),
                    Claim::Weighted(192 * M),
                    Claim::Weighted(16 * M),
                ];
                let (arena, fixed) = split_budget(budget, M, Claim::Weighted(3 * M), &claims);
                let sum = arena + fixed.iter().sum::<usize>();
                assert!(sum <= budget + 4 * M, "{budget} {allotment}: {sum}");
                for b in std::iter::once(arena).chain(fixed) {
                    assert!(b >= M && b % M == 0, "{budget} {allotment}: {b}");
                }
            }
        }
    }
}
