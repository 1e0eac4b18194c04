//! [`EvictionPolicy`]: the interface every policy implements, for the simulator and the pager.

use crate::unit_table::{UnitId, UnitTable};

/// How much a policy learns about accesses.
///
/// A simulator can report every access; a pager cannot: hardware (or userfaultfd minor faults)
/// only sets an accessed bit, which software reads when it samples. Both models drive the same
/// [`EvictionPolicy`] and differ in which methods the driver calls on a hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum InformationModel {
    /// Every access is reported: the driver calls [`EvictionPolicy::on_hit`] on each hit.
    Exact,
    /// Misses are reported one by one; a hit only sets the unit's reference bit through
    /// [`EvictionPolicy::mark_referenced`], and the policy reads the bits when the driver calls
    /// [`EvictionPolicy::on_sample`] (or when it selects a victim, like a clock hand).
    Sampled,
}

impl InformationModel {
    /// The model's name as the CLI spells it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Exact => "exact",
            Self::Sampled => "sampled",
        }
    }
}

/// What one [`EvictionPolicy::access`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// The unit was resident.
    Hit,
    /// The unit was brought in; `victim` left to make room (or is the unit itself, declined).
    Miss {
        /// The unit evicted, if any.
        victim: Option<UnitId>,
    },
}

/// A resident set of fixed capacity over units (pages or chunks) and the rule that picks victims.
///
/// The driver (simulator or pager) calls, per access of unit `u`:
/// - `contains(u)` false (a miss): [`admit`](Self::admit), which evicts one victim first if full;
/// - `contains(u)` true (a hit): [`on_hit`](Self::on_hit) in the exact model,
///   [`mark_referenced`](Self::mark_referenced) in the sampled model;
///
/// and, every sample period in both models, [`on_sample`](Self::on_sample). A pager's page-out
/// worker calls [`evict`](Self::evict) (or [`evict_sparing`](Self::evict_sparing)) to free room
/// ahead of demand, and [`remove`](Self::remove) when memory is released.
///
/// Implementations allocate all their storage at construction: no method allocates in steady
/// state. Offline policies (Belady's OPT) are told the future at construction.
pub trait EvictionPolicy: Send {
    /// Short name, as the CLI spells it.
    fn name(&self) -> &'static str;

    /// The resident units: ids, slots and reference bits. Read-only: only the policy changes it.
    fn units(&self) -> &UnitTable;

    /// How many units may be resident.
    fn capacity(&self) -> usize {
        self.units().capacity()
    }

    /// How many units are resident.
    fn len(&self) -> usize {
        self.units().len()
    }

    /// Whether no unit is resident.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether `unit` is resident.
    fn contains(&self, unit: UnitId) -> bool {
        self.units().contains(unit)
    }

    /// Exact model: resident `unit` was accessed.
    fn on_hit(&mut self, unit: UnitId);

    /// Sampled model: sets the reference bit of resident `unit`, and nothing else.
    fn mark_referenced(&mut self, unit: UnitId);

    /// A periodic sample: the policy reads (and usually clears) the reference bits and ages its
    /// state. Called in both models; policies that need no sampling do nothing.
    fn on_sample(&mut self);

    /// Brings non-resident `unit` in. If the set is full, first selects and removes a victim,
    /// which is returned. A policy may decline to keep `unit` (admission control): it then
    /// returns `unit` itself as the victim.
    fn admit(&mut self, unit: UnitId) -> Option<UnitId>;

    /// One access of `unit` in `model`, as a driver performs it: on a hit [`on_hit`](Self::on_hit)
    /// (exact) or [`mark_referenced`](Self::mark_referenced) (sampled), on a miss
    /// [`admit`](Self::admit). One dynamic call instead of two; policies may override it to look
    /// the unit up once.
    fn access(&mut self, unit: UnitId, model: InformationModel) -> Access {
        if self.contains(unit) {
            match model {
                InformationModel::Exact => self.on_hit(unit),
                InformationModel::Sampled => self.mark_referenced(unit),
            }
            Access::Hit
        } else {
            Access::Miss {
                victim: self.admit(unit),
            }
        }
    }

    /// Selects and removes a victim without bringing anything in; `None` if nothing is resident.
    fn evict(&mut self) -> Option<UnitId>;

    /// [`evict`](Self::evict), sparing units whose eviction costs more. `costly(u)` tells
    /// whether evicting resident `u` costs more (memvisor's pager: a chunk of the program's own
    /// memory, a swap write now and a swap read if it comes back, against a chunk that a disk
    /// image holds, dropped for free).
    ///
    /// Contract: returns `None` only if nothing is resident; `costly` is called only on
    /// resident units (possibly several times each); the victim is a unit the policy's own rule
    /// accepts, and it is costly only if the policy found no acceptable unit that is not within
    /// a bounded search (for [`Clock`](crate::Clock): one revolution of the hand past costly
    /// units). Policies without such a rule use the default, which ignores `costly` and is
    /// [`evict`](Self::evict).
    fn evict_sparing(&mut self, costly: &mut dyn FnMut(UnitId) -> bool) -> Option<UnitId> {
        let _ = costly;
        self.evict()
    }

    /// Removes resident `unit` (its memory was released); returns whether it was resident.
    fn remove(&mut self, unit: UnitId) -> bool;
}
