//! Finding VMs: QEMU processes (`/proc/PID/exe` is `qemu-system-*`), their disk images (regular
//! files among `/proc/PID/fd` outside /usr, and `-drive file=`, `-hda`..`-hdd`, `-blockdev filename=` of the
//! command line) and their guest RAM (the `memory-backend-memfd` mapping, else the largest
//! private anonymous read-write mapping).

use std::ops::Range;
use std::path::{Path, PathBuf};

use memvisor_dedup::{read_maps, DedupError, MapEntry};

use crate::ScrubError;

/// A VM as the scrubber sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vm {
    /// The VMM's pid.
    pub pid: i32,
    /// `-name` if given, else the executable's name.
    pub name: String,
    /// Disk-image files (canonical paths).
    pub images: Vec<PathBuf>,
    /// Guest RAM: address ranges in the VMM.
    pub ram: Vec<Range<u64>>,
}

/// Whether `exe` (the target of `/proc/PID/exe`) is a QEMU system emulator.
pub fn is_qemu_exe(exe: &Path) -> bool {
    exe.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with("qemu-system-"))
}

/// Every QEMU process on the host (pids in ascending order).
pub fn qemu_pids() -> Vec<i32> {
    let mut pids: Vec<i32> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .filter(|pid: &i32| {
            std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|exe| is_qemu_exe(&exe))
        })
        .collect();
    pids.sort_unstable();
    pids
}

/// The command line's arguments (NUL-separated in `/proc/PID/cmdline`).
pub fn split_cmdline(raw: &[u8]) -> Vec<String> {
    raw.split(|&b| b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect()
}

/// Splits a QEMU option string (`key=value,key=value`, `,,` is a literal comma) into pairs; a
/// part without `=` gets the key `""` (QEMU's implied first key).
pub fn parse_qemu_options(s: &str) -> Vec<(String, String)> {
    let mut parts = Vec::new();
    let mut cur = String::new();
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == ',' {
            if chars.peek() == Some(&',') {
                chars.next();
                cur.push(',');
            } else {
                parts.push(std::mem::take(&mut cur));
            }
        } else {
            cur.push(c);
        }
    }
    parts.push(cur);
    parts
        .into_iter()
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (k.to_string(), v.to_string()),
            None => (String::new(), p),
        })
        .collect()
}

/// Image paths and the `-name` named on a QEMU command line.
pub fn images_from_cmdline(args: &[String]) -> (Vec<PathBuf>, Option<String>) {
    let mut images = Vec::new();
    let mut name = None;
    let mut i = 0;
    while i < args.len() {
        let a = args[i].trim_start_matches('-');
        let is_opt = args[i].starts_with('-');
        let value = args.get(i + 1);
        match (is_opt, a, value) {
            (true, "drive", Some(v)) => {
                images.extend(
                    parse_qemu_options(v)
                        .into_iter()
                        .filter(|(k, _)| k == "file")
                        .map(|(_, f)| PathBuf::from(f)),
                );
                i += 1;
            }
            (true, "blockdev", Some(v)) => {
                images.extend(
                    parse_qemu_options(v)
                        .into_iter()
                        .filter(|(k, _)| k == "filename" || k == "file.filename")
                        .map(|(_, f)| PathBuf::from(f)),
                );
                i += 1;
            }
            (true, "hda" | "hdb" | "hdc" | "hdd", Some(v)) => {
                images.push(PathBuf::from(v));
                i += 1;
            }
            (true, "name", Some(v)) => {
                name = parse_qemu_options(v)
                    .into_iter()
                    .find(|(k, _)| k.is_empty() || k == "guest")
                    .map(|(_, n)| n);
                i += 1;
            }
            _ => {}
        }
        i += 1;
    }
    (images, name)
}

/// Guest RAM among the VMM's mappings: every mapping of the `memory-backend-memfd` memfd, else
/// the largest private anonymous read-write mapping.
pub fn guest_ram(maps: &[MapEntry]) -> Vec<Range<u64>> {
    let memfd: Vec<Range<u64>> = maps
        .iter()
        .filter(|m| m.read && m.pathname.contains("memory-backend-memfd"))
        .map(|m| m.start..m.end)
        .collect();
    if !memfd.is_empty() {
        return memfd;
    }
    maps.iter()
        .filter(|m| m.read && m.write && !m.shared && m.is_anonymous())
        .max_by_key(|m| m.len())
        .map(|m| std::iter::once(m.start..m.end).collect())
        .unwrap_or_default()
}

/// Regular files the process has open that may be disk images: not stdin, stdout or stderr,
/// not opened write-only or for appending (logs), not memfds or deleted files, not under /dev,
/// /proc, /sys, and not under /usr, where QEMU's firmware and option ROMs live (it holds them
/// open briefly at start-up).
fn open_regular_files(pid: i32) -> Vec<PathBuf> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| {
            let fd: u32 = e.file_name().to_str()?.parse().ok()?;
            if fd <= 2 {
                return None;
            }
            let target = std::fs::read_link(e.path()).ok()?;
            let s = target.to_str()?;
            if !s.starts_with('/')
                || s.starts_with("/memfd:")
                || s.ends_with(" (deleted)")
                || ["/dev/", "/proc/", "/sys/", "/usr/"]
                    .iter()
                    .any(|p| s.starts_with(p))
            {
                return None;
            }
            let info = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{fd}")).ok()?;
            let flags = fdinfo_flags(&info)?;
            if flags & libc::O_ACCMODE as u32 == libc::O_WRONLY as u32
                || flags & libc::O_APPEND as u32 != 0
            {
                return None;
            }
            // Follows the fd link: the metadata of the open file itself.
            std::fs::metadata(e.path())
                .ok()
                .filter(|m| m.is_file())
                .map(|_| target)
        })
        .collect()
}

/// The working directory of process `pid`.
fn cwd_of(pid: i32) -> Option<PathBuf> {
    std::fs::read_link(format!("/proc/{pid}/cwd")).ok()
}

/// Device and inode of the file at `path` (following links).
fn file_id(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// The open flags (`flags:` line, octal) of a `/proc/PID/fdinfo/N` text.
pub fn fdinfo_flags(info: &str) -> Option<u32> {
    info.lines()
        .find_map(|l| l.strip_prefix("flags:"))
        .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
}

/// Describes the VM run by `pid`. Errors (process gone, permission denied) name the pid.
pub fn describe_vm(pid: i32) -> Result<Vm, ScrubError> {
    let guest = |source| ScrubError::Guest { pid, source };
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).map_err(|e| {
        guest(DedupError::from_process_io(
            pid,
            "reading /proc/PID/cmdline",
            e,
        ))
    })?;
    let args = split_cmdline(&cmdline);
    let (mut images, name) = images_from_cmdline(&args);
    // The command line's paths are relative to QEMU's working directory.
    let cwd = cwd_of(pid);
    let open = open_regular_files(pid);
    // Only files the process has open: a command line is the process's own text (any user's),
    // and root's scrubber must not open a file because a command line names it.
    let open_ids: Vec<(u64, u64)> = open.iter().filter_map(|p| file_id(p)).collect();
    images.retain(|p| {
        let p = match (&cwd, p.is_relative()) {
            (Some(c), true) => c.join(p),
            _ => p.clone(),
        };
        file_id(&p).is_some_and(|id| open_ids.contains(&id))
    });
    images.extend(open);
    let mut images: Vec<PathBuf> = images
        .into_iter()
        .map(|p| match (&cwd, p.is_relative()) {
            (Some(c), true) => c.join(p),
            _ => p,
        })
        .map(|p| p.canonicalize().unwrap_or(p))
        .filter(|p| p.is_file())
        .collect();
    images.sort();
    images.dedup();
    let maps = read_maps(pid).map_err(guest)?;
    let exe_name = std::fs::read_link(format!("/proc/{pid}/exe"))
        .ok()
        .and_then(|e| e.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "?".into());
    Ok(Vm {
        pid,
        name: name.unwrap_or(exe_name),
        images,
        ram: guest_ram(&maps),
    })
}

/// The VMs to scrub: `pids` if given (each described, errors kept per pid), else every QEMU.
pub fn discover(pids: &[i32]) -> Vec<Result<Vm, ScrubError>> {
    let pids = if pids.is_empty() {
        qemu_pids()
    } else {
        pids.to_vec()
    };
    pids.into_iter().map(describe_vm).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_images_the_process_has_open_are_taken() {
        let t = tempfile::tempdir().unwrap();
        let (open, named) = (t.path().join("open.img"), t.path().join("named.img"));
        std::fs::write(&open, b"x").unwrap();
        std::fs::write(&named, b"y").unwrap();
        // A process whose command line names both, and which holds only the first open.
        let mut child = std::process::Command::new("bash")
            .arg("-c")
            .arg(r#"exec 3<"$0"; sleep 30; true"#)
            .arg(&open)
            .arg("-drive")
            .arg(format!("file={},format=raw", named.display()))
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let vm = loop {
            let vm = describe_vm(pid).unwrap();
            if !vm.images.is_empty() || std::time::Instant::now() > deadline {
                break vm;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(vm.images, vec![open.canonicalize().unwrap()]);
    }

    fn args(s: &[&str]) -> Vec<String> {
        s.iter().map(|a| a.to_string()).collect()
    }

    #[test]
    fn qemu_options() {
        assert_eq!(
            parse_qemu_options("file=/a,,b.img,if=virtio,cache=writeback"),
            vec![
                ("file".into(), "/a,b.img".into()),
                ("if".into(), "virtio".into()),
                ("cache".into(), "writeback".into())
            ]
        );
        assert_eq!(
            parse_qemu_options("vm1,debug-threads=on")[0],
            (String::new(), "vm1".into())
        );
        assert!(parse_qemu_options("").is_empty());
    }

    #[test]
    fn images_and_name_from_a_command_line() {
        let (images, name) = images_from_cmdline(&args(&[
            "qemu-system-x86_64",
            "-name",
            "guest=web1,debug-threads=on",
            "-drive",
            "file=disk.img,if=virtio,cache=writeback",
            "-hdb",
            "/b.raw",
            "-blockdev",
            "driver=file,node-name=f,filename=/c.qcow2",
            "-m",
            "1G",
            "-drive",
        ]));
        assert_eq!(
            images,
            vec![
                PathBuf::from("disk.img"),
                PathBuf::from("/b.raw"),
                PathBuf::from("/c.qcow2")
            ]
        );
        assert_eq!(name.as_deref(), Some("web1"));
        assert_eq!(
            split_cmdline(b"a\0-drive\0file=x\0"),
            args(&["a", "-drive", "file=x"])
        );
        assert!(is_qemu_exe(Path::new("/usr/bin/qemu-system-x86_64")));
        assert!(!is_qemu_exe(Path::new("/usr/bin/qemu-img")));
    }

    #[test]
    fn fdinfo_flags_are_octal() {
        assert_eq!(
            fdinfo_flags("pos:\t0\nflags:\t0102002\nmnt_id:\t5\n"),
            Some(0o102002)
        );
        assert_eq!(fdinfo_flags("pos: 0\n"), None);
        assert_eq!(fdinfo_flags("flags: 9\n"), None);
    }

    #[test]
    fn guest_ram_prefers_the_memfd_backend() {
        let m = |l: &str| MapEntry::parse(l).unwrap();
        let maps = vec![
            m("1000-9000 rw-p 00000000 00:00 0"),
            m("10000-20000 rw-s 00000000 00:01 5 /memfd:memory-backend-memfd (deleted)"),
            m("20000-90000 rw-p 00000000 00:00 0"),
        ];
        assert_eq!(guest_ram(&maps), vec![0x10000..0x20000]);
        assert_eq!(guest_ram(&maps[..1]), vec![0x1000..0x9000]);
        assert_eq!(
            guest_ram(&[maps[0].clone(), maps[2].clone()]),
            vec![0x20000..0x90000]
        );
        assert!(guest_ram(&[]).is_empty());
    }
}
