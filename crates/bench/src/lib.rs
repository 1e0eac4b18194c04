//! Benchmarks that run real processes.
//!
//! `pager-vs-kernel` (issue 3 item 10) runs the same workload program (a) as a plain process in
//! a cgroup v1 memory group limited to the budget, with a swap file on the same disk, and (b)
//! with its memory in a memvisor [`Region`](memvisor_pager::Region) with the same budget; both
//! from the same run, alternating, with time, faults and I/O measured in the workload process
//! itself. Roles:
//!
//! * the **workload** ([`run_workload`]): allocates the data set ([`WorkloadMemory`]), fills it
//!   ([`DataSet`]: every 8-byte word describes its page, word and modification count, so every
//!   read is verified), runs a [`WorkloadSpec`] and prints a [`WorkloadReport`] JSON line;
//! * the **driver** ([`drive`]): sets up the kernel's swap ([`KernelSwapFile`]) and one
//!   [`MemoryCgroup`] per run, starts the workloads alternately, tears everything down (also on
//!   SIGINT / SIGTERM, see [`interrupt`]), and writes [`summary_markdown`] and [`csv`].
//!
//! `redis-latency` (issue 4 item 4) is seed 000's redis experiment in memvisor's terms:
//! redis-server under `memvisor run` with a budget smaller than its data, an open-loop paced
//! GET load with Zipf keys ([`paced_get_load`]) at a range of rates, per policy and chunk size
//! ([`redis_experiment`]), with the pager's counters per point, plus a hot-set-and-scan stress
//! program ([`hot_scan_stress`], binary `hot-scan-stress`) for the seed's fault-count comparison.
//! `scrub-eval` (issue 5 item 4) boots real QEMU guests ([`memvisor_testvm`]) that read their
//! own disk image with `cache=writeback`, QEMU alone in a cgroup v1 memory group, under three
//! [`HostPolicy`]s (nothing, a periodic drop of the image's whole cache, memvisor's scrubber
//! under its frequency control), samples the host once a second ([`HostSample`]) and writes a
//! table and a plot of the host cache over time ([`scrub_eval`]).
//! `migration-eval` (issue 11) live-migrates churning QEMU guests between two QEMUs on this
//! host with `memvisor migrate` and with QEMU's own precopy, into a small budget and out of
//! one, and reports time, downtime, swap traffic and the guest's speed ([`migration_eval`]).
//!
//! `broker-eval` (issue 12) runs four processes with different access patterns under one
//! memory total: `memvisor broker`, an equal split, the kernel ([`broker_eval`]).
//! `image-cache-eval` (issue 12) reads one disk image from a VMM-like process with its host
//! page cache held to one size by the kernel (a memory cgroup) and by `memvisor run
//! --image-cache` ([`image_cache_eval`]).
//! `density-eval` (issue 12, seed 001) sweeps the number of identical TCG guests under one
//! memory total and finds the most that each keep a fraction of their unconstrained
//! throughput, `memvisor broker` against the kernel ([`density_eval`]).
//!
//! See the crate README for the commands and what is measured.

pub mod balloon_trigger;
pub mod bench_error;
pub mod broker_eval;
pub mod broker_eval_guests;
pub mod broker_eval_guests_report;
pub mod broker_eval_worker;
pub mod byte_size;
pub mod churn_progress;
pub mod counters;
pub mod density_eval;
pub mod density_eval_config;
pub mod density_eval_report;
pub mod dirty_probe;
pub mod driver;
pub mod guest_fleet;
pub mod host_cache_plot;
pub mod host_policy;
pub mod host_sample;
pub mod hot_scan_stress;
pub mod image_cache_eval;
pub mod image_cache_worker;
pub use memvisor_control::interrupt;
pub mod kernel_swap;
pub mod latency_plot;
pub mod live_guest;
pub mod managed_cache;
pub mod managed_process;
pub mod memory_cgroup;
pub mod migration_end;
pub mod migration_eval;
pub mod migration_eval_config;
pub mod migration_eval_report;
pub mod migration_run;
pub mod paced_get_load;
pub mod page_pattern;
pub mod policy_driver;
pub mod preflight;
pub mod private_dir;
pub mod redis_experiment;
pub mod redis_report;
pub mod redis_values;
pub mod region_counters;
pub mod resp_connection;
pub mod results_file;
pub mod scrub_eval;
pub mod scrub_eval_config;
pub mod scrub_eval_report;
pub mod scrub_eval_run;
pub mod summary;
pub mod variant;
pub mod vswapper_eval;
pub mod workload_memory;
pub mod workload_report;
pub mod workload_run;
pub mod workload_spec;

pub use bench_error::BenchError;
pub use driver::{drive, DriverArgs, RunRecord};
pub use host_policy::HostPolicy;
pub use host_sample::HostSample;
pub use kernel_swap::KernelSwapFile;
pub use memory_cgroup::MemoryCgroup;
pub use page_pattern::DataSet;
pub use preflight::preflight;
pub use scrub_eval::{scrub_eval, ScrubEvalResult};
pub use scrub_eval_config::ScrubEvalConfig;
pub use scrub_eval_report::{scrub_eval_csv, scrub_eval_markdown};
pub use scrub_eval_run::EvalRun;
pub use summary::{csv, summary_markdown};
pub use variant::{RegionOptions, Variant};
pub use workload_memory::WorkloadMemory;
pub use workload_report::WorkloadReport;
pub use workload_run::{run_workload, WorkloadArgs};
pub use workload_spec::WorkloadSpec;
