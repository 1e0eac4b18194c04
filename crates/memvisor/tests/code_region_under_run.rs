//! Reserved address space made accessible by `mprotect` under `memvisor run`, as QEMU's TCG
//! makes its translated-code buffer: a real C program (`tests/c/jit_workload.c`) under the
//! preload library and the real pager, executing code that memvisor pages out and in.

mod common;

use std::ffi::OsStr;

use common::*;

/// The C program `jit 64` under `memvisor run --budget 16M --min-region 1M --arena 1G EXTRA`,
/// up to its `READY` line: the status then, the lines it printed before, and the run to end
/// (`finish`). The directory holding its control socket and swap lives in the result.
struct JitRun {
    _dir: tempfile::TempDir,
    child: std::process::Child,
    out: std::io::BufReader<std::process::ChildStdout>,
    status: memvisor_control::ProcessStatus,
    lines: Vec<String>,
}

impl JitRun {
    fn start(extra: &[&str]) -> Self {
        let t = tempfile::tempdir().unwrap();
        let prog = compile_c("jit_workload", t.path());
        let ctl = t.path().join("ctl");
        let swap = t.path().join("swap");
        std::fs::create_dir(&swap).unwrap();
        let mut args = vec!["--budget", "16M", "--min-region", "1M", "--arena", "1G"];
        args.extend_from_slice(extra);
        let (child, mut out) = spawn_run(
            &ctl,
            &args,
            &swap,
            &[prog.as_os_str(), OsStr::new("jit"), OsStr::new("64")],
        );
        let (pid, lines) = wait_ready(&mut out);
        let status = stat_json(&ctl, &pid);
        Self {
            _dir: t,
            child,
            out,
            status,
            lines,
        }
    }

    /// Closes the program's stdin: it checks everything again and must print `OK`.
    fn finish(mut self) {
        drop(self.child.stdin.take());
        expect_ok_exit(self.child, self.out);
    }
}

/// A 64 MiB code buffer under a 16 MiB budget: a `code` region whose pages go out and come
/// back while the program calls the functions in them (and patches them, and replaces 1 MiB of
/// them by a `MAP_FIXED` read-write-execute mapping, which stays managed); a buffer made
/// accessible in four slices, each followed by a guard page (TCG with several vCPUs): four
/// `code` regions, every page of them called and checked; a reservation made
/// read-write in one call is a `fixed` region (over which an executable `MAP_FIXED` is refused
/// and a read-write one reads as zeros); one made accessible in a small step first, by a
/// raw system call (and written), or touched by `pkey_mprotect` stays the kernel's and keeps
/// its data. Every function's result and every page's pattern is
/// checked before and after the status is read.
#[test]
fn code_in_a_reservation_made_executable_is_paged_and_runs() {
    if !userfaultfd_usable() || !cfg!(target_arch = "x86_64") {
        return;
    }
    let run = JitRun::start(&[]);
    assert_eq!(
        run.lines,
        [
            "code-managed=1",
            "guard=---p",
            "remapped-managed=1",
            "rw-managed=1",
            "rw-exec-refused=1",
            "stepped-managed=0",
            "raw-managed=0",
            "pkey-managed=0",
            "slices-managed=4",
            "slice-guard=---p"
        ]
    );
    let status = &run.status;
    assert_within_budget(status, "at READY");
    let mut code: Vec<_> = status.regions.iter().filter(|r| r.kind == "code").collect();
    code.sort_by_key(|r| std::cmp::Reverse(r.size_bytes));
    let sizes: Vec<u64> = code.iter().map(|r| r.size_bytes).collect();
    // The buffer but its guard page, and each slice but its own.
    let slice = (4u64 << 20) - 4096;
    assert_eq!(sizes, [(64 << 20) - 4096, slice, slice, slice, slice]);
    // Every slice was written through its region.
    for s in &code[1..] {
        assert!(s.missing_faults > 0, "{s:?}");
    }
    let code = code[0];
    // 64 MiB written and read twice in 16 MiB: the code went out and came back.
    assert!(code.page_outs > 0 && code.page_ins > 0, "{code:?}");
    // An allotment of at most a quarter of the budget, at least a chunk.
    assert!(
        (status.chunk_size..=4 << 20).contains(&code.budget_bytes),
        "{code:?}"
    );
    let fixed = status.regions.iter().filter(|r| r.kind == "fixed").count();
    assert_eq!(fixed, 1, "{:?}", status.regions);
    run.finish();
}

/// `--reservations off`: the same program, every reservation left to the kernel (nothing is
/// a `code` region), every function and pattern still right.
#[test]
fn with_reservations_off_nothing_reserved_is_managed() {
    if !userfaultfd_usable() || !cfg!(target_arch = "x86_64") {
        return;
    }
    let run = JitRun::start(&["--reservations", "off"]);
    assert_eq!(
        run.lines,
        [
            "code-managed=0",
            "guard=---p",
            "remapped-managed=0",
            "rw-managed=0",
            "rw-exec-refused=0",
            "stepped-managed=0",
            "raw-managed=0",
            "pkey-managed=0",
            "slices-managed=0",
            "slice-guard=---p"
        ]
    );
    assert!(
        run.status.regions.iter().all(|r| r.kind == "arena"),
        "{:?}",
        run.status.regions
    );
    run.finish();
}
