//! Guest RAM in a named tmpfs file (issue 11): QEMU 8.1+ skips shared RAM in an
//! `x-ignore-shared` migration only if it is a named file, so guest RAM there is
//! `-object memory-backend-file,mem-path=/dev/shm/...,share=on`, and the preload library adopts
//! such a file as it adopts QEMU's memfd (region kind `guest-file`).
//!
//! A C program (`tests/c/tmpfs_file_ram.c`, named like QEMU) maps a 64 MiB file it created `MAP_SHARED` and
//! writes and verifies all of it under a 16 MiB budget: in `/dev/shm` the file is adopted and
//! pages (the file itself never holds more than the region's budget); a file with data, a file
//! on another filesystem, a private and a read-only mapping are left to the kernel and work as
//! before. A
//! TCG guest with `memory-backend-file` RAM in `/dev/shm` verifies its memory workload under a
//! budget a quarter of its RAM, its `guest-file` region swapping.
//!
//! Skipped (with `SKIPPED`) where userfaultfd (or, for the guest, QEMU) is unavailable, unless
//! `CI=true`.

mod common;

use std::io::{BufReader, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use memvisor_control::{ProcessStatus, RegionStatus};
use memvisor_testvm::{
    qemu_binary, GuestConfig, GuestImage, MemPhaseKind, MemoryBackend, RunningGuest,
};

const MIB: u64 = 1 << 20;
/// The C program's mapping and budget.
const PROGRAM_MIB: u64 = 64;
const PROGRAM_BUDGET: &str = "16M";

/// Bytes of storage the file at `path` holds (`st_blocks * 512`).
fn file_bytes(path: &Path) -> u64 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("stat {}: {e}", path.display()))
        .blocks()
        * 512
}

/// Whether `dir` is on tmpfs.
fn on_tmpfs(dir: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).unwrap();
    let mut fs = std::mem::MaybeUninit::<libc::statfs>::zeroed();
    // SAFETY: `c` is NUL-terminated; `fs` is a writable, properly sized `struct statfs`.
    let r = unsafe { libc::statfs(c.as_ptr(), fs.as_mut_ptr()) };
    assert_eq!(r, 0, "statfs {}", dir.display());
    // SAFETY: statfs succeeded (and zeroed memory is a valid statfs too).
    unsafe { fs.assume_init() }.f_type == libc::TMPFS_MAGIC
}

/// What one run of the C program showed while it held its memory.
struct ProgramRun {
    /// `memvisor stat --json` after the program wrote and verified its file mapping.
    status: ProcessStatus,
    /// The file's storage at that moment.
    file_bytes: u64,
}

/// Runs `tmpfs_file_ram FILE 64 MODE` under `memvisor run --budget 16M`, FILE a new file in
/// `file_dir`, the program named `qemu-system-tmpfs-test` (only QEMU's shared tmpfs files are
/// taken for guest RAM); checks it verified everything twice and exited 0.
fn run_program(file_dir: &Path, mode: &str) -> ProgramRun {
    run_program_as(file_dir, mode, "qemu-system-tmpfs-test")
}

/// [`run_program`] with the program named `name`.
fn run_program_as(file_dir: &Path, mode: &str, name: &str) -> ProgramRun {
    let tmp = tempfile::tempdir().unwrap();
    let compiled = compile_c("tmpfs_file_ram", tmp.path());
    let prog = tmp.path().join(name);
    std::fs::rename(&compiled, &prog).unwrap();
    let file = file_dir.join("ram");
    let ctl = tmp.path().join("ctl");
    let mut child = memvisor(&ctl)
        .args(["run", "--budget", PROGRAM_BUDGET, "--swap-dir"])
        .arg(tmp.path())
        .arg("--")
        .arg(&prog)
        .arg(&file)
        .args([&PROGRAM_MIB.to_string(), mode])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let (pid, _) = wait_ready(&mut out);
    let status = stat_json(&ctl, &pid);
    let file_bytes = file_bytes(&file);
    child.stdin.take().unwrap().flush().unwrap();
    let o = child.wait_with_output().unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    assert!(
        o.status.success() && rest.contains("OK"),
        "{mode} in {}: status {:?}\nstdout: {rest}\nstderr: {}",
        file_dir.display(),
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    ProgramRun { status, file_bytes }
}

/// The run made no region but the arena: the mapping went to the kernel.
fn assert_left_to_the_kernel(run: &ProgramRun) {
    let kinds: Vec<&str> = run.status.regions.iter().map(|r| r.kind.as_str()).collect();
    assert_eq!(kinds, ["arena"], "{:#?}", run.status);
}

/// An empty file in `/dev/shm`, mapped shared, is adopted: a 64 MiB `guest-file` region
/// pages it within its budget (the file holds no more than that), and every byte verifies.
#[test]
fn an_empty_tmpfs_file_mapped_shared_is_adopted_and_paged() {
    if !userfaultfd_usable() {
        return;
    }
    let shm = tempfile::tempdir_in("/dev/shm").unwrap();
    let run = run_program(shm.path(), "shared");
    let st = &run.status;
    let g = st
        .regions
        .iter()
        .find(|r| r.kind == "guest-file")
        .unwrap_or_else(|| panic!("no guest-file region: {st:#?}"));
    assert_eq!(g.size_bytes, PROGRAM_MIB * MIB, "{g:?}");
    assert_eq!(
        g.read_errors + g.write_errors + g.poisoned_chunks,
        0,
        "{g:?}"
    );
    let most = g.budget_bytes + g.overrun_chunks * st.chunk_size;
    assert!(g.resident_bytes <= most, "{g:?}");
    assert!(g.page_outs > 0 && g.swapped_bytes > 0, "{g:?}");
    assert!(
        run.file_bytes <= most,
        "the adopted file holds {} bytes, more than the region's budget: {g:?}",
        run.file_bytes
    );
}

/// The same empty file mapped shared by a program that is not QEMU is left to the kernel: such
/// files are often shared with other processes (`shm_open`), which would see holes where
/// memvisor paged memory out.
#[test]
fn another_programs_shared_tmpfs_file_is_left_to_the_kernel() {
    if !userfaultfd_usable() {
        return;
    }
    let shm = tempfile::tempdir_in("/dev/shm").unwrap();
    let run = run_program_as(shm.path(), "shared", "tmpfs-file-ram");
    assert_left_to_the_kernel(&run);
    assert!(run.file_bytes >= PROGRAM_MIB * MIB, "{}", run.file_bytes);
}

/// A tmpfs file that already holds a byte when mapped is not adopted: the kernel maps it, the
/// whole 64 MiB lands in the file, and the byte was there.
#[test]
fn a_tmpfs_file_with_data_is_left_to_the_kernel() {
    if !userfaultfd_usable() {
        return;
    }
    let shm = tempfile::tempdir_in("/dev/shm").unwrap();
    let run = run_program(shm.path(), "data");
    assert_left_to_the_kernel(&run);
    assert!(run.file_bytes >= PROGRAM_MIB * MIB, "{}", run.file_bytes);
}

/// A private mapping of an empty tmpfs file is not adopted (the kernel copies each page on
/// write; it still fills the file's page cache first, so the file's size on disk says nothing
/// here).
#[test]
fn a_private_mapping_of_a_tmpfs_file_is_left_to_the_kernel() {
    if !userfaultfd_usable() {
        return;
    }
    let shm = tempfile::tempdir_in("/dev/shm").unwrap();
    let run = run_program(shm.path(), "private");
    assert_left_to_the_kernel(&run);
}

/// A read-only shared mapping of an empty tmpfs file is not adopted: the file is written with
/// `pwrite` and read through the mapping.
#[test]
fn a_read_only_mapping_of_a_tmpfs_file_is_left_to_the_kernel() {
    if !userfaultfd_usable() {
        return;
    }
    let shm = tempfile::tempdir_in("/dev/shm").unwrap();
    let run = run_program(shm.path(), "readonly");
    assert_left_to_the_kernel(&run);
}

/// An empty file on another filesystem (`/var/tmp`, ext4 here), mapped shared, is not adopted.
#[test]
fn a_file_on_another_filesystem_is_left_to_the_kernel() {
    if !userfaultfd_usable() {
        return;
    }
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    if on_tmpfs(dir.path()) {
        eprintln!("SKIPPED: /var/tmp is on tmpfs here");
        return;
    }
    let run = run_program(dir.path(), "shared");
    assert_left_to_the_kernel(&run);
}

/// The guest RAM region of `size` bytes of kind `guest-file` in a status.
fn guest_file_region(status: &ProcessStatus, size: u64) -> Option<RegionStatus> {
    status
        .regions
        .iter()
        .find(|r| r.kind == "guest-file" && r.size_bytes == size)
        .cloned()
}

/// A 512 MiB TCG guest whose RAM is the file `RAM` in a private directory in `/dev/shm`
/// (`memory-backend-file,mem-path=RAM,share=on`) writes 256 MiB and reads it sequentially and
/// at random under `--budget 128M`: every page verifies, `memvisor stat` shows a `guest-file`
/// region of 512 MiB swapping, and the file never holds more than the region's budget.
#[test]
fn a_guest_with_tmpfs_file_ram_verifies_under_a_128m_budget() {
    let test = "a_guest_with_tmpfs_file_ram_verifies_under_a_128m_budget";
    if !userfaultfd_usable() {
        return;
    }
    let Some(image) = GuestImage::for_test(test) else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let shm = tempfile::tempdir_in("/dev/shm").unwrap();
    let ram: PathBuf = shm.path().join("guest-ram");
    let size = 512 * MIB;
    let config = GuestConfig::new(512, "mem 256 --patterns seq,random")
        .backend(MemoryBackend::File(ram.clone()))
        .timeout(Duration::from_secs(300));
    let ctl = tmp.path().join("ctl");
    let mut cmd = memvisor(&ctl);
    cmd.args(["run", "--budget", "128M", "--swap-dir"])
        .arg(tmp.path())
        .arg("--")
        .arg(qemu_binary().unwrap())
        .args(config.qemu_args(&image).unwrap());
    // The last guest-file region seen, and each sample's (file bytes, region budget + overrun).
    let last: Arc<Mutex<Option<RegionStatus>>> = Arc::new(Mutex::new(None));
    let file_samples: Arc<Mutex<Vec<(u64, u64)>>> = Arc::new(Mutex::new(Vec::new()));
    let guest = RunningGuest::spawn(cmd).unwrap();
    let watch = {
        let (last, file_samples, ram) = (last.clone(), file_samples.clone(), ram.clone());
        StatusWatch::start(&ctl, Duration::from_millis(250), move |st| {
            if let Some(g) = guest_file_region(&st, size) {
                if let Ok(m) = std::fs::metadata(&ram) {
                    let most = g.budget_bytes + g.overrun_chunks * st.chunk_size;
                    file_samples.lock().unwrap().push((m.blocks() * 512, most));
                }
                *last.lock().unwrap() = Some(g);
            }
        })
    };
    let result = guest.wait(config.timeout);
    watch.stop();
    let g = last
        .lock()
        .unwrap()
        .take()
        .expect("memvisor stat never showed a guest-file region of 512 MiB");
    let run = result.unwrap_or_else(|e| panic!("guest failed: {e}\nlast stat: {g:#?}"));
    let done = run.done().expect("done line");
    assert!(
        done.ok && done.errors == 0,
        "{done:?}\n{}",
        run.console_tail(20)
    );
    let kinds: Vec<_> = run.mem_phases().map(|p| p.kind).collect();
    assert_eq!(
        kinds,
        [
            MemPhaseKind::Write,
            MemPhaseKind::Seq,
            MemPhaseKind::Random,
            MemPhaseKind::Verify
        ],
        "{}",
        run.console_tail(20)
    );
    for phase in run.mem_phases() {
        assert!(phase.ok && phase.errors == 0, "{phase:?}");
    }
    assert_eq!(
        g.read_errors + g.write_errors + g.poisoned_chunks,
        0,
        "{g:?}"
    );
    assert!(g.swapped_bytes > 0 && g.page_outs > 0, "{g:?}");
    let file_samples = file_samples.lock().unwrap();
    assert!(
        !file_samples.is_empty(),
        "the guest-RAM file was never seen"
    );
    for &(held, most) in file_samples.iter() {
        assert!(
            held <= most,
            "the guest-RAM file holds {held} bytes, the region's budget is {most}"
        );
    }
    eprintln!(
        "{test}: {:.1} s, {} samples; guest-file: page-outs {}, page-ins {}, swapped {} MiB, \
         file peak {} MiB",
        run.elapsed.as_secs_f64(),
        file_samples.len(),
        g.page_outs,
        g.page_ins,
        g.swapped_bytes / MIB,
        file_samples.iter().map(|s| s.0).max().unwrap_or(0) / MIB
    );
}
