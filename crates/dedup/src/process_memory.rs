//! [`ProcessMemory`]: another process's memory, read with `process_vm_readv(2)`; only pages
//! `/proc/PID/pagemap` reports present are read, so scanning never faults memory in.

use std::fs::File;
use std::io;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

use crate::page_source::{PageSource, PageState};
use crate::process_maps::MapEntry;
use crate::{DedupError, PAGE_SIZE};

const PM_PRESENT: u64 = 1 << 63;
const PM_PFN_MASK: u64 = (1 << 55) - 1;

/// The memory of the process `pid`: its anonymous and memfd mappings (and file mappings on
/// request), optionally restricted to given address ranges.
#[derive(Debug)]
pub struct ProcessMemory {
    pid: i32,
    include_files: bool,
    only: Option<Vec<Range<u64>>>,
    pagemap: File,
    entries: Vec<u64>,
}

impl ProcessMemory {
    /// Opens process `pid`. Fails with [`DedupError::ProcessGone`] or
    /// [`DedupError::PermissionDenied`] when it cannot be read.
    pub fn open(pid: i32) -> Result<Self, DedupError> {
        if pid <= 0 {
            return Err(DedupError::InvalidArgument(format!(
                "pid {pid} is not a process id"
            )));
        }
        let path = format!("/proc/{pid}/pagemap");
        let pagemap = File::open(&path)
            .map_err(|e| DedupError::from_process_io(pid, format!("opening {path}"), e))?;
        Ok(Self {
            pid,
            include_files: false,
            only: None,
            pagemap,
            entries: Vec::new(),
        })
    }

    /// Also scans file-backed mappings (libraries, mapped files), not only the process's own
    /// anonymous and memfd memory.
    pub fn include_files(mut self, yes: bool) -> Self {
        self.include_files = yes;
        self
    }

    /// Scans only the parts of the chosen mappings inside `ranges` (e.g. a guest's RAM).
    pub fn only(mut self, ranges: Vec<Range<u64>>) -> Self {
        self.only = Some(ranges);
        self
    }

    /// The process id.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// The process's mappings (`/proc/PID/maps`).
    pub fn maps(&self) -> Result<Vec<MapEntry>, DedupError> {
        read_maps(self.pid)
    }

    fn gone_or(&self, what: &str, e: io::Error) -> DedupError {
        DedupError::from_process_io(self.pid, what, e)
    }

    /// Reads `buf.len()` bytes at `address` with one `process_vm_readv`; returns bytes read.
    fn readv(&self, address: u64, buf: &mut [u8]) -> io::Result<usize> {
        let local = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        let remote = libc::iovec {
            iov_base: address as usize as *mut libc::c_void,
            iov_len: buf.len(),
        };
        // SAFETY: `local` describes the live, writable `buf`; the remote iovec is only read by
        // the kernel, which validates it against the target's address space.
        let r = unsafe { libc::process_vm_readv(self.pid, &local, 1, &remote, 1, 0) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(r as usize)
    }
}

/// Reads and parses `/proc/PID/maps`.
pub fn read_maps(pid: i32) -> Result<Vec<MapEntry>, DedupError> {
    let path = PathBuf::from(format!("/proc/{pid}/maps"));
    let text = std::fs::read_to_string(&path)
        .map_err(|e| DedupError::from_process_io(pid, format!("reading {}", path.display()), e))?;
    MapEntry::parse_all(&text, &path)
}

/// Whether `pid` has exited (no longer listed, or a zombie).
pub fn is_exited(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name, which is in parentheses and may contain any byte.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next())
            .is_some_and(|state| state == 'Z' || state == 'X'),
        Err(_) => true,
    }
}

fn intersect(a: &Range<u64>, b: &Range<u64>) -> Option<Range<u64>> {
    let r = a.start.max(b.start)..a.end.min(b.end);
    (r.start < r.end).then_some(r)
}

impl PageSource for ProcessMemory {
    fn name(&self) -> String {
        format!("pid {}", self.pid)
    }

    fn pass_ranges(&mut self) -> Result<Vec<Range<u64>>, DedupError> {
        let maps = self.maps()?;
        let mut out = Vec::new();
        for m in maps.iter().filter(|m| m.is_scanned(self.include_files)) {
            let r = m.start..m.end;
            match &self.only {
                None => out.push(r),
                Some(only) => out.extend(only.iter().filter_map(|o| intersect(&r, o))),
            }
        }
        for r in &mut out {
            r.start &= !(PAGE_SIZE as u64 - 1);
            r.end = r.end.next_multiple_of(PAGE_SIZE as u64);
        }
        if out.is_empty() && is_exited(self.pid) {
            // A zombie has no mappings: report it as gone rather than as empty.
            return Err(DedupError::ProcessGone {
                pid: self.pid,
                what: "no mappings left".into(),
            });
        }
        Ok(out)
    }

    fn read(
        &mut self,
        address: u64,
        buf: &mut [u8],
        states: &mut [PageState],
    ) -> Result<(), DedupError> {
        let pages = states.len();
        debug_assert_eq!(pages * PAGE_SIZE, buf.len());
        // Pagemap: one u64 per page.
        self.entries.resize(pages, 0);
        // SAFETY: a u64 slice viewed as bytes; every byte pattern is a valid u64.
        let raw = unsafe {
            std::slice::from_raw_parts_mut(self.entries.as_mut_ptr().cast::<u8>(), pages * 8)
        };
        let off = address / PAGE_SIZE as u64 * 8;
        let mut got = 0;
        while got < raw.len() {
            match self.pagemap.read_at(&mut raw[got..], off + got as u64) {
                Ok(0) => {
                    return Err(DedupError::ProcessGone {
                        pid: self.pid,
                        what: format!("pagemap ended at {:#x}", address),
                    })
                }
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.gone_or("reading /proc/PID/pagemap", e)),
            }
        }
        for (s, &e) in states.iter_mut().zip(&self.entries) {
            *s = if e & PM_PRESENT != 0 {
                let pfn = e & PM_PFN_MASK;
                PageState::Present {
                    frame: (pfn != 0).then_some(pfn),
                }
            } else {
                PageState::Absent
            };
        }
        // Read each run of present pages with one call.
        let mut i = 0;
        while i < pages {
            if !matches!(states[i], PageState::Present { .. }) {
                i += 1;
                continue;
            }
            let mut j = i + 1;
            while j < pages && matches!(states[j], PageState::Present { .. }) {
                j += 1;
            }
            let a = address + (i * PAGE_SIZE) as u64;
            let chunk = &mut buf[i * PAGE_SIZE..j * PAGE_SIZE];
            let done = match self.readv(a, chunk) {
                Ok(n) => n / PAGE_SIZE,
                Err(e) if e.raw_os_error() == Some(libc::EFAULT) => 0,
                Err(e) => {
                    return Err(match e.raw_os_error() {
                        Some(libc::ESRCH) | Some(libc::EPERM) | Some(libc::EACCES) => {
                            self.gone_or("process_vm_readv", e)
                        }
                        _ => DedupError::ReadMemory {
                            pid: self.pid,
                            address: a,
                            len: chunk.len(),
                            source: e,
                        },
                    })
                }
            };
            if i + done < j {
                // A partial read: the first page not read is unreadable; go on after it.
                states[i + done] = PageState::Unreadable;
                i += done + 1;
            } else {
                i = j;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_own_memory_by_pid() {
        let data: Vec<u8> = (0..4 * PAGE_SIZE)
            .map(|i| (i / PAGE_SIZE) as u8 + 1)
            .collect();
        let start = (data.as_ptr() as u64).next_multiple_of(PAGE_SIZE as u64);
        let mut pm = ProcessMemory::open(std::process::id() as i32).unwrap();
        let mut buf = vec![0u8; 2 * PAGE_SIZE];
        let mut states = [PageState::Absent; 2];
        pm.read(start, &mut buf, &mut states).unwrap();
        assert!(matches!(states[0], PageState::Present { frame: Some(_) }));
        let off = (start - data.as_ptr() as u64) as usize;
        assert_eq!(&buf[..], &data[off..off + 2 * PAGE_SIZE]);
    }

    #[test]
    fn bad_pids_are_named() {
        let e = ProcessMemory::open(0).unwrap_err();
        assert!(e.to_string().contains("pid 0"), "{e}");
        let e = ProcessMemory::open(i32::MAX).unwrap_err();
        assert!(matches!(e, DedupError::ProcessGone { .. }), "{e}");
    }
}
