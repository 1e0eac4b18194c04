//! [`MapEntry`]: one line of `/proc/PID/maps`, parsed, and which mappings the scanner reads.

use std::path::PathBuf;

use crate::DedupError;

/// One mapping of a process, as `/proc/PID/maps` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapEntry {
    /// First address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// `r` permission.
    pub read: bool,
    /// `w` permission.
    pub write: bool,
    /// `x` permission.
    pub exec: bool,
    /// `s` (shared) rather than `p` (private).
    pub shared: bool,
    /// Offset into the mapped file.
    pub offset: u64,
    /// Inode of the mapped file (0 for anonymous memory).
    pub inode: u64,
    /// The path or pseudo-name (`[heap]`, `/memfd:NAME (deleted)`), empty for anonymous memory.
    pub pathname: String,
}

impl MapEntry {
    /// Parses one line; `Err` carries a message naming the field that is wrong.
    pub fn parse(line: &str) -> Result<Self, String> {
        let mut rest = line;
        let mut field = |name: &str| -> Result<&str, String> {
            let t = rest.trim_start_matches(' ');
            let end = t.find(' ').unwrap_or(t.len());
            if end == 0 {
                return Err(format!("missing {name}"));
            }
            rest = &t[end..];
            Ok(&t[..end])
        };
        let range = field("address range")?;
        let perms = field("permissions")?;
        let offset = field("offset")?;
        let dev = field("device")?;
        let inode = field("inode")?;
        let pathname = rest.trim_start_matches(' ').to_string();

        let (start, end) = range
            .split_once('-')
            .ok_or_else(|| format!("address range {range:?} has no '-'"))?;
        let hex = |s: &str, what: &str| {
            u64::from_str_radix(s, 16).map_err(|_| format!("{what} {s:?} is not hexadecimal"))
        };
        let start = hex(start, "start address")?;
        let end = hex(end, "end address")?;
        if end < start {
            return Err(format!("address range {range:?} ends before it starts"));
        }
        let p = perms.as_bytes();
        if p.len() != 4 {
            return Err(format!("permissions {perms:?} are not 4 characters"));
        }
        let flag = |i: usize, c: u8| match p[i] {
            x if x == c => Ok(true),
            b'-' => Ok(false),
            _ => Err(format!(
                "permissions {perms:?}: unexpected character at {i}"
            )),
        };
        let shared = match p[3] {
            b's' => true,
            b'p' => false,
            _ => return Err(format!("permissions {perms:?}: expected 'p' or 's' last")),
        };
        if !dev.contains(':') {
            return Err(format!("device {dev:?} is not MAJOR:MINOR"));
        }
        Ok(Self {
            start,
            end,
            read: flag(0, b'r')?,
            write: flag(1, b'w')?,
            exec: flag(2, b'x')?,
            shared,
            offset: hex(offset, "offset")?,
            inode: inode
                .parse()
                .map_err(|_| format!("inode {inode:?} is not a number"))?,
            pathname,
        })
    }

    /// Parses a whole maps file; errors name `path` and the line.
    pub fn parse_all(text: &str, path: &std::path::Path) -> Result<Vec<Self>, DedupError> {
        text.lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
            .map(|(i, l)| {
                Self::parse(l).map_err(|message| DedupError::Parse {
                    path: PathBuf::from(path),
                    line: i + 1,
                    message,
                })
            })
            .collect()
    }

    /// Length in bytes.
    pub fn len(&self) -> u64 {
        self.end - self.start
    }

    /// Whether the mapping is empty.
    pub fn is_empty(&self) -> bool {
        self.end == self.start
    }

    /// Anonymous memory: no file, or the heap, a stack, or a named anonymous region.
    pub fn is_anonymous(&self) -> bool {
        self.inode == 0
            && (self.pathname.is_empty()
                || self.pathname == "[heap]"
                || self.pathname.starts_with("[stack")
                || self.pathname.starts_with("[anon:"))
    }

    /// A memfd mapping (QEMU's `memory-backend-memfd` guest RAM is one).
    pub fn is_memfd(&self) -> bool {
        self.pathname.starts_with("/memfd:")
    }

    /// Kernel-provided pages that are not the process's memory (`[vvar]`, `[vdso]`, ...).
    pub fn is_special(&self) -> bool {
        matches!(
            self.pathname.as_str(),
            "[vvar]" | "[vvar_vclock]" | "[vdso]" | "[vsyscall]" | "[uprobes]"
        )
    }

    /// Whether the scanner reads this mapping: readable, not special, and either the process's
    /// own memory (anonymous or memfd) or, if `include_files`, any file mapping.
    pub fn is_scanned(&self, include_files: bool) -> bool {
        self.read
            && !self.is_empty()
            && !self.is_special()
            && (self.is_anonymous() || self.is_memfd() || include_files)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_kernel_lines() {
        let e = MapEntry::parse(
            "55d0c7a0b000-55d0c7a2d000 r-xp 00002000 08:01 1234                       /usr/bin/my prog",
        )
        .unwrap();
        assert_eq!(e.start, 0x55d0c7a0b000);
        assert_eq!(e.end, 0x55d0c7a2d000);
        assert!(e.read && !e.write && e.exec && !e.shared);
        assert_eq!(e.offset, 0x2000);
        assert_eq!(e.inode, 1234);
        assert_eq!(e.pathname, "/usr/bin/my prog");
        assert!(!e.is_anonymous());
        assert!(!e.is_scanned(false));
        assert!(e.is_scanned(true));

        let anon = MapEntry::parse("7f0000000000-7f0000100000 rw-p 00000000 00:00 0 ").unwrap();
        assert!(anon.is_anonymous() && anon.is_scanned(false));
        assert_eq!(anon.len(), 0x100000);

        let memfd = MapEntry::parse(
            "7f1000000000-7f1040000000 rw-s 00000000 00:01 77 /memfd:memory-backend-memfd (deleted)",
        )
        .unwrap();
        assert!(memfd.shared && memfd.is_memfd() && memfd.is_scanned(false));

        let vvar = MapEntry::parse("7ffd1000-7ffd3000 r--p 00000000 00:00 0 [vvar]").unwrap();
        assert!(vvar.is_special() && !vvar.is_scanned(true));
        let heap = MapEntry::parse("1000-2000 rw-p 00000000 00:00 0 [heap]").unwrap();
        assert!(heap.is_scanned(false));
        let none = MapEntry::parse("1000-2000 ---p 00000000 00:00 0").unwrap();
        assert!(!none.is_scanned(true));
    }

    #[test]
    fn rejects_bad_lines_with_a_reason() {
        for (line, want) in [
            ("", "missing address range"),
            ("1000 rw-p 0 00:00 0", "no '-'"),
            ("zz-1000 rw-p 0 00:00 0", "start address"),
            ("2000-1000 rw-p 0 00:00 0", "ends before"),
            ("1000-2000 rw-q 0 00:00 0", "expected 'p' or 's'"),
            ("1000-2000 rwx 0 00:00 0", "4 characters"),
            ("1000-2000 rwzp 0 00:00 0", "unexpected character"),
            ("1000-2000 rw-p 0 0000 0", "MAJOR:MINOR"),
            ("1000-2000 rw-p 0 00:00 x", "inode"),
            ("1000-2000 rw-p 0 00:00", "missing inode"),
        ] {
            let e = MapEntry::parse(line).unwrap_err();
            assert!(e.contains(want), "{line:?}: {e}");
        }
        let e = MapEntry::parse_all("1000-2000 rw-p 0 00:00 0\nbad\n", "/proc/1/maps".as_ref())
            .unwrap_err();
        assert!(e.to_string().starts_with("/proc/1/maps:2:"), "{e}");
    }
}
