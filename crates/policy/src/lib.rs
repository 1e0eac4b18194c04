//! Eviction policies for memvisor.
//!
//! One library decides which unit of memory (a page, or a chunk of pages) leaves a resident set
//! of fixed capacity, for the trace-driven simulator now and for the userfaultfd pager later.
//! Every policy implements [`EvictionPolicy`]; a [`PolicySpec`] names one (`"clock"`,
//! `"chunk-queues:m=8"`) and builds it.
//!
//! Two information models ([`InformationModel`]) drive the same policies: *exact*, where every
//! access is reported, and *sampled*, where hits only set a reference bit read at periodic
//! samples, as a pager sees accessed bits.
//!
//! [`RefaultHistory`] measures, from evictions and refaults alone, how many misses more memory
//! would have saved (the kernel's refault distance): the online miss-ratio curve a pager
//! exposes to a memory broker.
//!
//! Building blocks: [`UnitTable`] maps unit ids to dense slots and keeps reference bits;
//! [`SlotLists`] threads O(1) doubly linked lists through those slots. Storage is allocated at
//! construction; no policy allocates per access.

mod aging;
mod arc;
mod belady;
mod car;
mod chunk_queues;
mod clock;
mod deterministic_rng;
mod eviction_policy;
mod fifo;
mod lru;
mod mglru;
mod policy_error;
mod policy_spec;
mod refault_history;
mod s3fifo;
mod sieve;
mod slot_lists;
mod unit_table;

pub use aging::Aging;
pub use arc::Arc;
pub use belady::{Belady, Future};
pub use car::Car;
pub use chunk_queues::ChunkQueues;
pub use clock::Clock;
pub use deterministic_rng::DeterministicRng;
pub use eviction_policy::{Access, EvictionPolicy, InformationModel};
pub use fifo::Fifo;
pub use lru::Lru;
pub use mglru::Mglru;
pub use policy_error::PolicyError;
pub use policy_spec::{PolicyParams, PolicySpec};
pub use refault_history::{saved_with, Refault, RefaultHistory, RefaultScale};
pub use s3fifo::S3Fifo;
pub use sieve::Sieve;
pub use slot_lists::SlotLists;
pub use unit_table::{Slot, UnitId, UnitTable, NO_SLOT};
