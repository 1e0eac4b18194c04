//! `memvisor run --malloc`: which `malloc` the program runs with.
//!
//! glibc's `malloc` maps its heaps and large blocks with internal `mmap` calls that the
//! preload library cannot see, so a program's heap stays outside the budget (QEMU's: its
//! device state, bounce buffers, the copy of a `-kernel` image; about 40 MiB of an idle TCG
//! guest's QEMU here). jemalloc maps through the `mmap` symbol, which the library interposes:
//! preloaded after the library, it puts the program's heap in managed memory, paged under the
//! budget with the rest. A smaller `--min-region` (2M with jemalloc unless given, and no
//! less) lets the library take jemalloc's mappings, which are 2 MiB or more. Not less: QEMU's
//! coroutine stacks are 1 MiB mappings (plus a guard page), and a stack must stay the
//! kernel's: library code running on one (an interposed call from a coroutine) holds the
//! library heap's lock while its frames grow into the stack, and a fault there would wait for
//! a fault handler that needs the same lock.

use std::path::{Path, PathBuf};

use crate::run_command::RunError;

/// The names `--malloc` accepts.
pub const NAMES: [&str; 2] = ["program", "jemalloc"];

/// Where distributions install jemalloc's shared library, after Debian's multiarch directory
/// of this machine's architecture (`/usr/lib/x86_64-linux-gnu`).
const JEMALLOC_DIRS: [&str; 3] = ["/usr/lib64", "/usr/lib", "/usr/local/lib"];
const JEMALLOC_FILE: &str = "libjemalloc.so.2";
/// The smallest `--min-region` with jemalloc.
pub const MIN_REGION_WITH_JEMALLOC: u64 = 2 << 20;

/// The program's allocator under `memvisor run`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProgramMalloc {
    /// Whatever the program links with (the default).
    Program,
    /// jemalloc, preloaded after the library.
    Jemalloc,
}

impl ProgramMalloc {
    /// From a `--malloc` value (one of [`NAMES`]; clap checked it).
    pub fn from_name(name: &str) -> Self {
        if name == "jemalloc" {
            Self::Jemalloc
        } else {
            Self::Program
        }
    }

    /// The library to preload after memvisor's, if any: jemalloc's, found in `dirs`, or an
    /// error naming where it was looked for.
    pub fn library_in(self, dirs: &[&Path]) -> Result<Option<PathBuf>, RunError> {
        match self {
            Self::Program => Ok(None),
            Self::Jemalloc => dirs
                .iter()
                .map(|d| d.join(JEMALLOC_FILE))
                .find(|p| p.is_file())
                .map(Some)
                .ok_or_else(|| RunError::Value {
                    arg: "malloc",
                    given: "jemalloc".into(),
                    reason: format!(
                        "{JEMALLOC_FILE} is not in {} (Debian: apt-get install libjemalloc2)",
                        dirs.iter()
                            .map(|d| d.display().to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                }),
        }
    }

    /// [`library_in`](Self::library_in) the usual library directories. (If the loader skips
    /// the file found, the library sees no jemalloc and manages nothing more than without it.)
    pub fn library(self) -> Result<Option<PathBuf>, RunError> {
        let multiarch = PathBuf::from(format!("/usr/lib/{}-linux-gnu", std::env::consts::ARCH));
        let dirs: Vec<&Path> = std::iter::once(multiarch.as_path())
            .chain(JEMALLOC_DIRS.iter().map(Path::new))
            .collect();
        self.library_in(&dirs)
    }

    /// `--min-region` when not given: 2M with jemalloc (its mappings are 2 MiB or more), else
    /// 16M.
    pub fn default_min_region(self) -> &'static str {
        match self {
            Self::Program => "16M",
            Self::Jemalloc => "2M",
        }
    }

    /// Refuses a `--min-region` (`given`, `bytes`) below [`MIN_REGION_WITH_JEMALLOC`] with
    /// jemalloc (see the module docs: stacks must stay the kernel's).
    pub fn check_min_region(self, given: &str, bytes: u64) -> Result<(), RunError> {
        if self == Self::Jemalloc && bytes < MIN_REGION_WITH_JEMALLOC {
            return Err(RunError::Value {
                arg: "min-region",
                given: given.to_string(),
                reason: "at least 2M with --malloc jemalloc (smaller mappings include QEMU's \
                         1 MiB coroutine stacks, which must stay outside the pager)"
                    .into(),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_program_s_own_malloc_preloads_nothing() {
        assert_eq!(ProgramMalloc::from_name("program").library().unwrap(), None);
        assert_eq!(ProgramMalloc::Program.default_min_region(), "16M");
    }

    #[test]
    fn jemalloc_is_found_where_it_is_and_refused_with_the_places_looked_at() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        let empty = dir.join("empty");
        std::fs::create_dir_all(&empty).unwrap();
        let e = ProgramMalloc::Jemalloc
            .library_in(&[&empty])
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("--malloc jemalloc: libjemalloc.so.2 is not in "),
            "{e}"
        );
        assert!(e.contains(&empty.display().to_string()), "{e}");
        std::fs::write(dir.join(JEMALLOC_FILE), b"").unwrap();
        assert_eq!(
            ProgramMalloc::from_name("jemalloc")
                .library_in(&[&empty, &dir])
                .unwrap(),
            Some(dir.join(JEMALLOC_FILE))
        );
        assert_eq!(ProgramMalloc::Jemalloc.default_min_region(), "2M");
    }

    #[test]
    fn with_jemalloc_a_min_region_below_2m_is_refused() {
        let j = ProgramMalloc::Jemalloc;
        let e = j.check_min_region("1M", 1 << 20).unwrap_err().to_string();
        assert!(
            e.starts_with("--min-region 1M: at least 2M with --malloc jemalloc"),
            "{e}"
        );
        assert!(j.check_min_region("2M", 2 << 20).is_ok());
        assert!(ProgramMalloc::Program
            .check_min_region("1M", 1 << 20)
            .is_ok());
    }
}
