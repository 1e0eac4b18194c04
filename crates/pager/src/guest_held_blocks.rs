//! [`GuestHeldBlocks`]: the blocks of an image that the host page cache holds while the guest
//! holds them too, kept in an exclusive host cache under a limit until either the guest lets
//! them go or the room is needed (issue 12, seed 001 chapter 5).
//!
//! An exclusive host cache that drops every block the moment the guest reads it holds only
//! what memvisor itself evicts from guest RAM: the blocks the guest's own page cache lets go
//! are then in neither cache, and the guest's next read of them goes to the disk. Under a
//! limit the blocks stay instead, counted against it: when the guest lets one go (its page is
//! read over, discarded or found changed), it is already cached and becomes a block only the
//! host holds, the exclusive cache's proper content. When room is needed, a block held this
//! way is the cheapest to drop, as it costs nothing now (the guest has it); which one:
//!
//! * a block held longer than twice the median time the guest kept the blocks it let go
//!   ([`expiry`](GuestHeldBlocks::expiry), in blocks read since; a fallback the caller gives
//!   until enough blocks were let go) goes first, oldest first: the guest keeps it, probably
//!   because it uses it (the hot blocks of a Zipf reader);
//! * otherwise the newest goes first: a guest whose page cache lets its oldest blocks go
//!   (a reader looping over more than it can hold) lets go of the older ones sooner, so they
//!   are the ones worth keeping.
//!
//! Time is counted in blocks read into guest RAM ([`stage`](GuestHeldBlocks::stage) calls).

use std::collections::{BTreeMap, HashMap};

/// How many of the latest hold times the expiry is taken from.
const AGE_SAMPLES: usize = 128;
/// Hold times needed before blocks expire at all.
const MIN_SAMPLES: usize = 32;
/// The expiry is recomputed after this many new hold times.
const RECOMPUTE_EVERY: u64 = 32;

/// Blocks both the guest and the host cache hold, by when the guest read them.
#[derive(Debug, Clone, Default)]
pub struct GuestHeldBlocks {
    /// Block → the clock when the guest read it.
    stamp: HashMap<u64, u64>,
    /// Clock → block, oldest first (stamps are unique).
    order: BTreeMap<u64, u64>,
    /// Blocks read into guest RAM so far.
    clock: u64,
    /// The latest hold times (clock ticks from read to let go), a ring.
    ages: Vec<u64>,
    /// Where the next hold time goes in `ages`.
    next_age: usize,
    /// Hold times recorded since the expiry was last computed.
    since_recompute: u64,
    /// Twice the median of `ages`, once there are [`MIN_SAMPLES`].
    expiry: Option<u64>,
    /// Blocks the guest let go while they were held here (cumulative).
    released: u64,
}

impl GuestHeldBlocks {
    /// How many blocks it holds.
    pub fn len(&self) -> usize {
        self.stamp.len()
    }

    /// Whether it holds block `b`.
    pub fn contains(&self, b: u64) -> bool {
        self.stamp.contains_key(&b)
    }

    /// The blocks it holds, in no order.
    pub fn blocks(&self) -> impl Iterator<Item = u64> + '_ {
        self.stamp.keys().copied()
    }

    /// Blocks the guest let go while they were held here, so far.
    pub fn released(&self) -> u64 {
        self.released
    }

    /// The hold time after which a block counts as kept by the guest, if enough blocks were
    /// let go to tell.
    #[cfg(test)]
    pub fn expiry(&self) -> Option<u64> {
        self.expiry
    }

    /// The guest read block `b` (again): it is held from now.
    pub fn stage(&mut self, b: u64) {
        if let Some(old) = self.stamp.insert(b, self.clock) {
            self.order.remove(&old);
        }
        self.order.insert(self.clock, b);
        self.clock += 1;
    }

    /// Block `b` leaves without the guest letting it go (dropped for room): whether it was
    /// held.
    pub fn remove(&mut self, b: u64) -> bool {
        match self.stamp.remove(&b) {
            Some(s) => {
                self.order.remove(&s);
                true
            }
            None => false,
        }
    }

    /// The guest let block `b` go: whether it was held here (then it is no longer, and how
    /// long the guest kept it counts towards the expiry).
    pub fn release(&mut self, b: u64) -> bool {
        let Some(s) = self.stamp.remove(&b) else {
            return false;
        };
        self.order.remove(&s);
        self.released += 1;
        let age = self.clock - s;
        if self.ages.len() < AGE_SAMPLES {
            self.ages.push(age);
        } else {
            self.ages[self.next_age] = age;
        }
        self.next_age = (self.next_age + 1) % AGE_SAMPLES;
        self.since_recompute += 1;
        if self.ages.len() >= MIN_SAMPLES && self.since_recompute >= RECOMPUTE_EVERY {
            self.since_recompute = 0;
            let mut sorted = self.ages.clone();
            sorted.sort_unstable();
            self.expiry = Some(sorted[sorted.len() / 2].saturating_mul(2).max(1));
        }
        true
    }

    /// The block to drop when room is needed: the oldest if it is past the expiry, else the
    /// newest. Until the guest has let enough blocks go to tell the expiry (or if it never
    /// does: the swap mapper off), `fallback` reads count as the expiry. `None` if it holds
    /// none.
    pub fn take_victim(&mut self, fallback: u64) -> Option<u64> {
        let (&oldest_at, &oldest) = self.order.first_key_value()?;
        let expiry = self.expiry.unwrap_or(fallback);
        let expired = self.clock - oldest_at > expiry;
        let b = if expired {
            oldest
        } else {
            *self.order.last_key_value()?.1
        };
        self.remove(b);
        Some(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fallback expiry no test reaches.
    const NEVER: u64 = u64::MAX;

    #[test]
    fn the_newest_goes_first_until_the_guest_has_let_enough_go() {
        let mut g = GuestHeldBlocks::default();
        for b in 0..10 {
            g.stage(b);
        }
        assert_eq!(g.len(), 10);
        assert_eq!(g.take_victim(NEVER), Some(9));
        assert_eq!(g.take_victim(NEVER), Some(8));
        assert!(!g.contains(8) && g.contains(7));
        // A block read again is the newest.
        g.stage(0);
        assert_eq!(g.take_victim(NEVER), Some(0));
        assert_eq!(g.expiry(), None);
        // Nothing let go yet: the fallback is the expiry (block 1 was read 10 reads ago).
        assert_eq!(g.take_victim(9), Some(1));
        assert_eq!(g.take_victim(10), Some(7));
        let mut empty = GuestHeldBlocks::default();
        assert_eq!(empty.take_victim(NEVER), None);
    }

    #[test]
    fn blocks_the_guest_keeps_past_twice_the_median_hold_go_oldest_first() {
        let mut g = GuestHeldBlocks::default();
        // Blocks 1000.. are kept by the guest (hot); 0.. are let go 10 reads after their read.
        g.stage(1000);
        g.stage(1001);
        for b in 0..MIN_SAMPLES as u64 + 10 {
            g.stage(b);
            if b >= 10 {
                assert!(g.release(b - 10));
            }
        }
        assert_eq!(g.released(), MIN_SAMPLES as u64);
        // Every hold was 11 reads (its own and the 10 after it): the expiry is 22, and the
        // hot blocks are 44 reads old.
        assert_eq!(g.expiry(), Some(22));
        // Once measured, the expiry is the measured one, whatever the fallback.
        assert_eq!(g.take_victim(NEVER), Some(1000));
        assert_eq!(g.take_victim(NEVER), Some(1001));
        // Then the newest again: nothing else is past the expiry.
        let newest = MIN_SAMPLES as u64 + 9;
        assert_eq!(g.take_victim(0), Some(newest));
        // A block not held is neither released nor removed.
        assert!(!g.release(1000));
        assert!(!g.remove(1000));
        assert_eq!(g.released(), MIN_SAMPLES as u64);
    }

    #[test]
    fn stamps_and_order_agree_under_random_operations() {
        let mut rng = crate::test_rng::TestRng::new(0x5eed_6e1d);
        let mut g = GuestHeldBlocks::default();
        let mut shadow: Vec<u64> = Vec::new(); // blocks, oldest read first
        for _ in 0..20_000 {
            let b = rng.below(64) as u64;
            match rng.below(4) {
                0 | 1 => {
                    g.stage(b);
                    shadow.retain(|&x| x != b);
                    shadow.push(b);
                }
                2 => {
                    let held = shadow.contains(&b);
                    assert_eq!(g.release(b), held);
                    shadow.retain(|&x| x != b);
                }
                _ => {
                    let v = g.take_victim(if rng.below(2) == 0 { NEVER } else { 8 });
                    match v {
                        None => assert!(shadow.is_empty()),
                        Some(v) => {
                            // The oldest or the newest, nothing in between.
                            assert!(
                                shadow.first() == Some(&v) || shadow.last() == Some(&v),
                                "{v} of {shadow:?}"
                            );
                            shadow.retain(|&x| x != v);
                        }
                    }
                }
            }
            assert_eq!(g.len(), shadow.len());
            assert_eq!(g.order.len(), g.stamp.len());
        }
        let mut held: Vec<u64> = g.blocks().collect();
        held.sort_unstable();
        shadow.sort_unstable();
        assert_eq!(held, shadow);
    }
}
