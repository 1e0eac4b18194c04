//! [`ManagedCache`]: how `memvisor run` treats the host page cache of the image in a scrub
//! evaluation run — the kernel's cache as it is (`memvisor`: what the interposition alone costs),
//! the exact exclusive cache (`exclusive`), a CAR-limited cache (`image-cache=SIZE`), or both
//! (`exclusive+image-cache=SIZE`).

use std::fmt;

use crate::bench_error::BenchError;
use crate::byte_size::{format_bytes, parse_bytes};

/// One `memvisor run` setting of the image's host cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ManagedCache {
    /// `--host-cache exclusive`: blocks the guest holds leave the host cache.
    pub exclusive: bool,
    /// `--image-cache SIZE`: the CAR model's limit on the image's host cache, in bytes.
    pub image_cache_bytes: Option<u64>,
}

impl ManagedCache {
    /// The exact exclusive host cache without a limit (the `exclusive` policy).
    pub const EXCLUSIVE: ManagedCache = ManagedCache {
        exclusive: true,
        image_cache_bytes: None,
    };

    /// Parses `memvisor`, `exclusive`, `image-cache=SIZE` or `exclusive+image-cache=SIZE`;
    /// `None` for any other name (a host policy's).
    pub fn parse(text: &str) -> Result<Option<Self>, BenchError> {
        let (exclusive, rest) = match text {
            "memvisor" => {
                return Ok(Some(ManagedCache {
                    exclusive: false,
                    image_cache_bytes: None,
                }))
            }
            "exclusive" => return Ok(Some(Self::EXCLUSIVE)),
            t => match t.strip_prefix("exclusive+") {
                Some(rest) => (true, rest),
                None => (false, t),
            },
        };
        let Some(size) = rest.strip_prefix("image-cache=") else {
            return Ok(None);
        };
        let bytes = parse_bytes("policy image-cache=SIZE", size)? as u64;
        if bytes < 1 << 20 {
            return Err(BenchError::bad(
                "policy image-cache=SIZE",
                text,
                "the limit must be at least 1M (memvisor run --image-cache's minimum)",
            ));
        }
        Ok(Some(ManagedCache {
            exclusive,
            image_cache_bytes: Some(bytes),
        }))
    }

    /// The `memvisor run` options that select this setting.
    pub fn run_args(&self) -> Vec<String> {
        let mut args = vec![
            "--host-cache".to_string(),
            if self.exclusive {
                "exclusive"
            } else {
                "default"
            }
            .to_string(),
        ];
        if let Some(bytes) = self.image_cache_bytes {
            args.push("--image-cache".into());
            args.push(format_bytes(bytes as usize));
        }
        args
    }
}

impl fmt::Display for ManagedCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.exclusive, self.image_cache_bytes) {
            (false, None) => f.write_str("memvisor"),
            (true, None) => f.write_str("exclusive"),
            (false, Some(b)) => write!(f, "image-cache={}", format_bytes(b as usize)),
            (true, Some(b)) => write!(f, "exclusive+image-cache={}", format_bytes(b as usize)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_select_the_run_options() {
        for name in [
            "memvisor",
            "exclusive",
            "image-cache=85M",
            "exclusive+image-cache=64M",
        ] {
            let m = ManagedCache::parse(name).unwrap().unwrap();
            assert_eq!(m.to_string(), name);
        }
        assert_eq!(
            ManagedCache::parse("image-cache=85M")
                .unwrap()
                .unwrap()
                .run_args(),
            ["--host-cache", "default", "--image-cache", "85M"]
        );
        assert_eq!(
            ManagedCache::EXCLUSIVE.run_args(),
            ["--host-cache", "exclusive"]
        );
        assert_eq!(ManagedCache::parse("scrub").unwrap(), None);
        assert_eq!(ManagedCache::parse("exclusive+scrub").unwrap(), None);
        let e = ManagedCache::parse("image-cache=12x")
            .unwrap_err()
            .to_string();
        assert!(e.contains("12x"), "{e}");
        let e = ManagedCache::parse("image-cache=4K")
            .unwrap_err()
            .to_string();
        assert!(e.contains("at least 1M"), "{e}");
    }
}
