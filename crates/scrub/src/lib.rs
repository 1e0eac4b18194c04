//! The exclusive host cache for memvisor (seed 001, chapter 4: Singleton's cache scrubbing).
//!
//! With `cache=writeback`, every block a guest reads sits twice in host memory: in the guest's
//! page cache (inside its RAM) and in the host's page cache of the disk image. The [`Scrubber`]
//! finds each VM ([`discover`]: QEMU processes, their images, their guest RAM), indexes the
//! guest's RAM with `memvisor-dedup`'s scanner, and drops the host-cache pages of the images
//! whose bytes the guest holds ([`cachestat`], `mincore`, `posix_fadvise(DONTNEED)`), never a
//! dirty page. [`ScrubController`] is the seed's frequency control (Algorithm 2).
//!
//! ```no_run
//! use memvisor_scrub::{discover, ScrubOptions, Scrubber};
//! let mut scrubber = Scrubber::new(ScrubOptions::default());
//! for vm in discover(&[]) {
//!     match vm {
//!         Ok(vm) => println!("{:?}", scrubber.scrub_vm(&vm)),
//!         Err(e) => eprintln!("{e}"),
//!     }
//! }
//! ```

mod cached_page_reader;
mod meminfo;
mod qemu_discovery;
mod residency;
mod scrub_controller;
mod scrub_error;
mod scrub_report;
mod scrubber;

pub use cached_page_reader::CachedPageReader;
pub use meminfo::MemInfo;
pub use memvisor_pager::{cachestat, CacheStat};
pub use qemu_discovery::{
    describe_vm, discover, guest_ram, images_from_cmdline, is_qemu_exe, parse_qemu_options,
    qemu_pids, split_cmdline, Vm,
};
pub use residency::{drop_range, resident_pages};
pub use scrub_controller::{ScrubControlConfig, ScrubController, ScrubReason};
pub use scrub_error::ScrubError;
pub use scrub_report::{ImageScrub, VmScrub};
pub use scrubber::{ScrubOptions, Scrubber};
