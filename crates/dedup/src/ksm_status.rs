//! What the kernel's KSM is doing: [`KsmStatus`] (`/sys/kernel/mm/ksm`) and [`ProcessKsmStat`]
//! (`/proc/PID/ksm_stat`).

use std::path::{Path, PathBuf};

use crate::DedupError;

/// The sysfs directory of KSM.
pub const KSM_SYSFS: &str = "/sys/kernel/mm/ksm";

/// Counters and settings from `/sys/kernel/mm/ksm` (fields absent on a kernel read as 0).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KsmStatus {
    /// `run`: 0 stopped, 1 running, 2 unmerging.
    pub run: u64,
    /// Pages ksmd scans per wake-up.
    pub pages_to_scan: u64,
    /// Sleep between wake-ups, in milliseconds.
    pub sleep_millisecs: u64,
    /// KSM pages in use (one per merged content).
    pub pages_shared: u64,
    /// Pages mapped to KSM pages (the saving is `pages_sharing`).
    pub pages_sharing: u64,
    /// Pages checked but unique so far.
    pub pages_unshared: u64,
    /// Pages changing too fast to merge.
    pub pages_volatile: u64,
    /// Full scans of all mergeable memory completed.
    pub full_scans: u64,
    /// Pages scanned since KSM started.
    pub pages_scanned: u64,
    /// Zero pages merged with the kernel's zero page (`use_zero_pages`).
    pub ksm_zero_pages: u64,
    /// Bytes saved minus KSM's metadata (may be negative: stored as i64 bits).
    pub general_profit: i64,
}

impl KsmStatus {
    /// Reads `/sys/kernel/mm/ksm`.
    pub fn read() -> Result<Self, DedupError> {
        Self::read_from(Path::new(KSM_SYSFS))
    }

    /// Reads a KSM-like directory (tests use a copy).
    pub fn read_from(dir: &Path) -> Result<Self, DedupError> {
        if !dir.is_dir() {
            return Err(DedupError::File {
                path: dir.into(),
                source: std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "KSM is not available (kernel built without CONFIG_KSM?)",
                ),
            });
        }
        let mut s = Self::default();
        for (name, field) in [
            ("run", &mut s.run),
            ("pages_to_scan", &mut s.pages_to_scan),
            ("sleep_millisecs", &mut s.sleep_millisecs),
            ("pages_shared", &mut s.pages_shared),
            ("pages_sharing", &mut s.pages_sharing),
            ("pages_unshared", &mut s.pages_unshared),
            ("pages_volatile", &mut s.pages_volatile),
            ("full_scans", &mut s.full_scans),
            ("pages_scanned", &mut s.pages_scanned),
            ("ksm_zero_pages", &mut s.ksm_zero_pages),
        ] {
            if let Some(v) = read_number(&dir.join(name))? {
                *field = v as u64;
            }
        }
        if let Some(v) = read_number(&dir.join("general_profit"))? {
            s.general_profit = v as i64;
        }
        Ok(s)
    }
}

/// Reads a sysfs file holding one integer; `None` if the file does not exist.
pub fn read_number(path: &Path) -> Result<Option<i128>, DedupError> {
    match std::fs::read_to_string(path) {
        Ok(text) => parse_number(&text)
            .map(Some)
            .map_err(|message| DedupError::Parse {
                path: path.into(),
                line: 1,
                message,
            }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(DedupError::File {
            path: path.into(),
            source,
        }),
    }
}

/// Parses one integer with optional surrounding whitespace.
pub fn parse_number(text: &str) -> Result<i128, String> {
    let t = text.trim();
    t.parse()
        .map_err(|_| format!("expected an integer, found {:?}", truncate(t)))
}

fn truncate(s: &str) -> &str {
    match s.char_indices().nth(40) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// `/proc/PID/ksm_stat`: what KSM merged of one process.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcessKsmStat {
    /// `ksm_rmap_items`: pages of the process KSM tracks.
    pub rmap_items: u64,
    /// `ksm_zero_pages`: pages merged with the zero page.
    pub zero_pages: u64,
    /// `ksm_merging_pages`: pages of the process merged into KSM pages.
    pub merging_pages: u64,
    /// `ksm_process_profit`: bytes saved minus metadata.
    pub process_profit: i64,
    /// `ksm_merge_any`: the whole process is mergeable (`PR_SET_MEMORY_MERGE`).
    pub merge_any: bool,
    /// `ksm_mergeable`: the process has mergeable memory.
    pub mergeable: bool,
}

impl ProcessKsmStat {
    /// Reads `/proc/PID/ksm_stat`.
    pub fn read(pid: i32) -> Result<Self, DedupError> {
        let path = PathBuf::from(format!("/proc/{pid}/ksm_stat"));
        let text = std::fs::read_to_string(&path).map_err(|e| {
            DedupError::from_process_io(pid, format!("reading {}", path.display()), e)
        })?;
        Self::parse(&text).map_err(|(line, message)| DedupError::Parse {
            path,
            line,
            message,
        })
    }

    /// Parses the file's `key value` / `key: yes|no` lines; unknown keys are ignored (newer
    /// kernels add some). `Err((line, message))`.
    pub fn parse(text: &str) -> Result<Self, (usize, String)> {
        let mut s = Self::default();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() {
                continue;
            }
            let err = |m: String| (i + 1, m);
            let (key, value) = line
                .split_once([' ', ':', '\t'])
                .ok_or_else(|| err(format!("{:?} has no value", truncate(line))))?;
            let value = value.trim_start_matches([':', ' ', '\t']).trim();
            let num = || -> Result<i128, (usize, String)> {
                parse_number(value).map_err(|m| err(format!("{key}: {m}")))
            };
            let flag = || match value {
                "yes" => Ok(true),
                "no" => Ok(false),
                _ => Err(err(format!(
                    "{key}: expected yes or no, found {:?}",
                    truncate(value)
                ))),
            };
            match key {
                "ksm_rmap_items" => s.rmap_items = nonneg(num()?, key).map_err(err)?,
                "ksm_zero_pages" => s.zero_pages = nonneg(num()?, key).map_err(err)?,
                "ksm_merging_pages" => s.merging_pages = nonneg(num()?, key).map_err(err)?,
                "ksm_process_profit" => {
                    s.process_profit =
                        i64::try_from(num()?).map_err(|_| err(format!("{key}: out of range")))?
                }
                "ksm_merge_any" => s.merge_any = flag()?,
                "ksm_mergeable" => s.mergeable = flag()?,
                _ => {}
            }
        }
        Ok(s)
    }
}

fn nonneg(v: i128, key: &str) -> Result<u64, String> {
    u64::try_from(v).map_err(|_| format!("{key}: {v} is out of range"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_ksm_stat() {
        let s = ProcessKsmStat::parse(
            "ksm_rmap_items 12\nksm_zero_pages 3\nksm_merging_pages 7\nksm_process_profit -400\nksm_merge_any: no\nksm_mergeable: yes\nksm_future_field 9\n",
        )
        .unwrap();
        assert_eq!(
            s,
            ProcessKsmStat {
                rmap_items: 12,
                zero_pages: 3,
                merging_pages: 7,
                process_profit: -400,
                merge_any: false,
                mergeable: true
            }
        );
        assert_eq!(
            ProcessKsmStat::parse("ksm_rmap_items x\n").unwrap_err().0,
            1
        );
        let e = ProcessKsmStat::parse("\nksm_mergeable: maybe").unwrap_err();
        assert_eq!(e.0, 2);
        assert!(e.1.contains("yes or no"), "{}", e.1);
        assert!(ProcessKsmStat::parse("ksm_zero_pages -1").is_err());
        assert!(ProcessKsmStat::parse("lonely").is_err());
    }

    #[test]
    fn reads_the_real_sysfs_and_own_stat() {
        let s = KsmStatus::read().unwrap();
        assert!(s.pages_to_scan > 0 && s.sleep_millisecs > 0, "{s:?}");
        ProcessKsmStat::read(std::process::id() as i32).unwrap();
        assert!(parse_number(" 12\n").unwrap() == 12 && parse_number("1 2").is_err());
    }
}
