//! memvisor-testvm: boots real test guests under QEMU for memvisor's tests and benchmarks.
//!
//! A guest is a Debian cloud kernel with a busybox initramfs (built and cached under
//! `target/guest` by `scripts/guest-image`) whose `/init` loads the virtio modules, runs the
//! static workload program (`tools/guest/workload.c`) with the arguments given on the kernel
//! command line as `memvisor.run="..."`, prints `MEMVISOR-RESULT` lines on the serial console
//! and powers off.
//!
//! ```no_run
//! use memvisor_testvm::{GuestConfig, GuestImage, MemoryBackend};
//! # fn main() -> Result<(), memvisor_testvm::TestVmError> {
//! let image = GuestImage::locate_or_build()?;
//! let run = GuestConfig::new(512, "mem 256")
//!     .backend(MemoryBackend::Memfd)
//!     .run(&image)?
//!     .verified()?;
//! for phase in run.mem_phases() {
//!     println!("{} {:.0} ms", phase.kind, phase.ms);
//! }
//! # Ok(())
//! # }
//! ```
//!
//! To run QEMU under a wrapper (e.g. `memvisor run --`), build the command yourself from
//! [`GuestConfig::qemu_args`] and start it with [`RunningGuest::spawn`]. QEMU uses TCG unless
//! `MEMVISOR_ACCEL` says `kvm` or `auto` (see [`accel`]).

pub mod accel;
mod error;
mod guest_config;
mod guest_image;
mod guest_run;
mod process_group;
mod qemu_binary;
mod result_line;
mod running_guest;

pub use accel::{Accel, AccelChoice};
pub use error::{Result, TestVmError};
pub use guest_config::{kvm_works, DiskAio, DiskCache, DiskConfig, GuestConfig, MemoryBackend};
pub use guest_image::GuestImage;
pub use guest_run::GuestRun;
pub use process_group::{isolate, kill_group, process_exists};
pub use qemu_binary::{qemu_binary, QEMU_PROGRAM};
pub use result_line::{
    parse_console, parse_result_line, DiskPacing, DiskPattern, DiskPhase, Done, MemPhase,
    MemPhaseKind, WorkloadResult, RESULT_MARKER,
};
pub use running_guest::RunningGuest;
