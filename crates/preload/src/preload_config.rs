//! [`PreloadConfig`]: the preload library's settings, read from the environment `memvisor run`
//! prepares (see `memvisor_control::launch_env`).

use std::path::PathBuf;

use memvisor_control::{launch_env, SetRules};
use memvisor_pager::{HostCache, OnSwapFull, DEFAULT_BUSY_POLL, DEFAULT_CHUNK_SIZE};
use memvisor_policy::PolicySpec;

use crate::preload_error::PreloadError;

/// Default smallest anonymous mapping that is managed.
pub const DEFAULT_MIN_REGION: usize = 16 << 20;
/// Default arena size when none is given.
pub const DEFAULT_ARENA_SIZE: usize = 64 << 30;

/// Largest chunk accepted from the environment (64 MiB).
pub const MAX_CHUNK_SIZE: usize = launch_env::MAX_CHUNK_BYTES as usize;

/// What the preload library manages and how.
#[derive(Debug, Clone)]
pub struct PreloadConfig {
    /// Process budget in bytes.
    pub budget: usize,
    /// Policy of every region.
    pub policy: PolicySpec,
    /// Swap directory.
    pub swap_dir: PathBuf,
    /// Smallest anonymous mapping managed.
    pub min_region: usize,
    /// Virtual size of the arena.
    pub arena_size: usize,
    /// Control socket directory.
    pub control_dir: PathBuf,
    /// Whether exec'd children are managed too.
    pub manage_children: bool,
    /// Paging unit.
    pub chunk_size: usize,
    /// Adaptive busy-polling window of the fault handlers (default the pager's); `None`: off.
    pub busy_poll: Option<std::time::Duration>,
    /// Whether the fault handlers ask that idle CPUs poll while they busy-poll.
    pub cpu_wake_latency: bool,
    /// What every region does while its swap filesystem is full.
    pub on_swap_full: OnSwapFull,
    /// Whether reads of disk images into guest RAM go through the swap mapper and the
    /// false-read preventer ([`image_io`](crate::image_io)).
    pub swap_mapper: bool,
    /// Whether reservations made accessible by one `mprotect` become regions
    /// ([`reservations`](crate::reservations)).
    pub reservations: bool,
    /// Whether the program's heap is managed memory (`memvisor run --malloc jemalloc`): then
    /// `fork` is refused, since a child would not have the heap.
    pub heap_managed: bool,
    /// What happens to the host page cache of disk images read into guest RAM
    /// ([`image_io`](crate::image_io), `memvisor_pager::host_cache`).
    pub host_cache: HostCache,
    /// Limit on the host page cache of each disk image read into guest RAM
    /// (`memvisor_pager::image_cache_limit`); `None`: no limit.
    pub image_cache: Option<u64>,
    /// Live migration destination: where to listen for a source's memory.
    pub migration_listen: Option<std::net::SocketAddr>,
    /// Live migration destination: the shared key file.
    pub migration_key: Option<PathBuf>,
}

impl PreloadConfig {
    /// Reads the configuration through `get` (the environment in production). `Ok(None)` when
    /// the budget variable is absent: the library then stays inactive.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Option<Self>, PreloadError> {
        let Some(budget) = get(launch_env::BUDGET) else {
            return Ok(None);
        };
        let bytes = |name: &'static str, value: String| -> Result<usize, PreloadError> {
            value
                .trim()
                .parse::<usize>()
                .map_err(|_| PreloadError::Env {
                    name,
                    value,
                    reason: "expected a number of bytes".into(),
                })
        };
        let chunk_size = match get(launch_env::CHUNK_SIZE) {
            Some(v) => {
                let c = bytes(launch_env::CHUNK_SIZE, v)?;
                if c == 0 || c % 4096 != 0 || c > MAX_CHUNK_SIZE {
                    return Err(PreloadError::Env {
                        name: launch_env::CHUNK_SIZE,
                        value: c.to_string(),
                        reason: format!(
                            "expected a multiple of 4096 bytes, at most {MAX_CHUNK_SIZE}"
                        ),
                    });
                }
                c
            }
            None => DEFAULT_CHUNK_SIZE,
        };
        let budget = bytes(launch_env::BUDGET, budget)?;
        // The rules of `memvisor set` and `run` (one definition). The host-RAM bound is
        // `memvisor run`'s, which knows the host; from the environment alone, the rest.
        let rules = SetRules {
            host_ram_bytes: u64::MAX,
            chunk_bytes: chunk_size as u64,
        };
        if let Err(e) = rules.check_budget(budget as u64) {
            return Err(PreloadError::Env {
                name: launch_env::BUDGET,
                value: budget.to_string(),
                reason: e.to_string(),
            });
        }
        let policy = match get(launch_env::POLICY) {
            None => memvisor_pager::DEFAULT_POLICY
                .parse()
                .unwrap_or(PolicySpec::Clock),
            Some(v) => rules.check_policy(&v).map_err(|e| PreloadError::Env {
                name: launch_env::POLICY,
                value: v.clone(),
                reason: e.to_string(),
            })?,
        };
        let min_region = match get(launch_env::MIN_REGION) {
            Some(v) => bytes(launch_env::MIN_REGION, v)?.max(4096),
            None => DEFAULT_MIN_REGION,
        };
        let arena_size = match get(launch_env::ARENA_SIZE) {
            Some(v) => bytes(launch_env::ARENA_SIZE, v)?,
            None => DEFAULT_ARENA_SIZE,
        };
        if arena_size as u64 > launch_env::MAX_ARENA_BYTES {
            return Err(PreloadError::Env {
                name: launch_env::ARENA_SIZE,
                value: arena_size.to_string(),
                reason: format!("more than {} bytes", launch_env::MAX_ARENA_BYTES),
            });
        }
        if arena_size < chunk_size {
            return Err(PreloadError::Env {
                name: launch_env::ARENA_SIZE,
                value: arena_size.to_string(),
                reason: format!("smaller than one chunk ({chunk_size} bytes)"),
            });
        }
        let busy_poll = match get(launch_env::BUSY_POLL_US) {
            None => Some(DEFAULT_BUSY_POLL),
            Some(v) => match v.trim().parse::<u64>() {
                Ok(0) => None,
                Ok(us @ 1..=1_000_000) => Some(std::time::Duration::from_micros(us)),
                _ => {
                    return Err(PreloadError::Env {
                        name: launch_env::BUSY_POLL_US,
                        value: v,
                        reason: "expected microseconds from 0 to 1000000".into(),
                    })
                }
            },
        };
        let on_swap_full = match get(launch_env::ON_SWAP_FULL) {
            None => OnSwapFull::default(),
            Some(v) => v.parse().map_err(|reason| PreloadError::Env {
                name: launch_env::ON_SWAP_FULL,
                value: v,
                reason,
            })?,
        };
        let swap_mapper = on_off(&get, launch_env::SWAP_MAPPER)?;
        let reservations = on_off(&get, launch_env::RESERVATIONS)?;
        let heap_managed = match get(launch_env::MALLOC).as_deref() {
            None | Some("program") => false,
            Some("jemalloc") => true,
            Some(v) => {
                return Err(PreloadError::Env {
                    name: launch_env::MALLOC,
                    value: v.to_string(),
                    reason: "expected program or jemalloc".into(),
                })
            }
        };
        let cpu_wake_latency = on_off(&get, launch_env::CPU_WAKE_LATENCY)?;
        let host_cache = match get(launch_env::HOST_CACHE) {
            None => HostCache::default(),
            Some(v) => v.parse().map_err(|reason| PreloadError::Env {
                name: launch_env::HOST_CACHE,
                value: v,
                reason,
            })?,
        };
        let image_cache = match get(launch_env::IMAGE_CACHE) {
            None => None,
            Some(v) => {
                let b = bytes(launch_env::IMAGE_CACHE, v)? as u64;
                if b < memvisor_control::MIN_IMAGE_CACHE_BYTES {
                    return Err(PreloadError::Env {
                        name: launch_env::IMAGE_CACHE,
                        value: b.to_string(),
                        reason: format!(
                            "less than {} bytes",
                            memvisor_control::MIN_IMAGE_CACHE_BYTES
                        ),
                    });
                }
                Some(b)
            }
        };
        let migration_listen = match get(launch_env::MIGRATION_LISTEN) {
            None => None,
            Some(v) => Some(v.trim().parse().map_err(|_| PreloadError::Env {
                name: launch_env::MIGRATION_LISTEN,
                value: v.clone(),
                reason: "expected IP:PORT".into(),
            })?),
        };
        let migration_key = get(launch_env::MIGRATION_KEY).map(PathBuf::from);
        if migration_listen.is_some() != migration_key.is_some() {
            return Err(PreloadError::Env {
                name: launch_env::MIGRATION_KEY,
                value: migration_key
                    .map(|k| k.display().to_string())
                    .unwrap_or_default(),
                reason: format!(
                    "{} and {} go together",
                    launch_env::MIGRATION_LISTEN,
                    launch_env::MIGRATION_KEY
                ),
            });
        }
        Ok(Some(Self {
            budget,
            policy,
            swap_dir: get(launch_env::SWAP_DIR)
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from("/var/tmp")),
            min_region,
            arena_size,
            control_dir: get(launch_env::CONTROL_DIR)
                .map(PathBuf::from)
                .unwrap_or_else(memvisor_control::socket_dir::default_control_dir),
            manage_children: get(launch_env::MANAGE_CHILDREN).is_some_and(|v| v == "1"),
            chunk_size,
            busy_poll,
            cpu_wake_latency,
            on_swap_full,
            swap_mapper,
            reservations,
            heap_managed,
            host_cache,
            image_cache,
            migration_listen,
            migration_key,
        }))
    }
}

/// A switch variable: absent or `on` is true, `off` false.
fn on_off(get: &impl Fn(&str) -> Option<String>, name: &'static str) -> Result<bool, PreloadError> {
    match get(name).as_deref().map(str::trim) {
        None | Some("on") => Ok(true),
        Some("off") => Ok(false),
        Some(v) => Err(PreloadError::Env {
            name,
            value: v.to_string(),
            reason: "expected on or off".into(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn read(pairs: &[(&str, &str)]) -> Result<Option<PreloadConfig>, PreloadError> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        PreloadConfig::from_lookup(|k| m.get(k).cloned())
    }

    #[test]
    fn a_migration_destination_needs_address_and_key() {
        let c = read(&[
            (launch_env::BUDGET, "67108864"),
            (launch_env::MIGRATION_LISTEN, "127.0.0.1:7070"),
            (launch_env::MIGRATION_KEY, "/etc/k"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(c.migration_listen, Some("127.0.0.1:7070".parse().unwrap()));
        assert_eq!(
            c.migration_key.as_deref(),
            Some(std::path::Path::new("/etc/k"))
        );
        let e = read(&[
            (launch_env::BUDGET, "67108864"),
            (launch_env::MIGRATION_LISTEN, "127.0.0.1:7070"),
        ])
        .unwrap_err()
        .to_string();
        assert!(e.contains("go together"), "{e}");
        let e = read(&[
            (launch_env::BUDGET, "67108864"),
            (launch_env::MIGRATION_LISTEN, "localhost:7070"),
            (launch_env::MIGRATION_KEY, "/etc/k"),
        ])
        .unwrap_err()
        .to_string();
        assert!(e.contains("IP:PORT"), "{e}");
    }

    #[test]
    fn an_unknown_malloc_is_refused_by_name() {
        let e = read(&[
            (launch_env::BUDGET, "67108864"),
            (launch_env::MALLOC, "tcmalloc"),
        ])
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("MEMVISOR_MALLOC") && e.contains("tcmalloc"),
            "{e}"
        );
    }

    #[test]
    fn inactive_without_budget() {
        assert!(read(&[]).unwrap().is_none());
    }

    #[test]
    fn reads_every_setting() {
        let c = read(&[
            (launch_env::BUDGET, "67108864"),
            (launch_env::POLICY, "clock"),
            (launch_env::SWAP_DIR, "/tmp/s"),
            (launch_env::MIN_REGION, "1048576"),
            (launch_env::ARENA_SIZE, "1073741824"),
            (launch_env::CONTROL_DIR, "/tmp/c"),
            (launch_env::MANAGE_CHILDREN, "1"),
            (launch_env::CHUNK_SIZE, "65536"),
            (launch_env::BUSY_POLL_US, "100"),
            (launch_env::ON_SWAP_FULL, "fail"),
            (launch_env::SWAP_MAPPER, "off"),
            (launch_env::RESERVATIONS, "off"),
            (launch_env::CPU_WAKE_LATENCY, "off"),
            (launch_env::IMAGE_CACHE, "67108864"),
            (launch_env::HOST_CACHE, "exclusive"),
            (launch_env::MALLOC, "jemalloc"),
        ])
        .unwrap()
        .unwrap();
        assert!(c.heap_managed);
        assert!(!c.swap_mapper);
        assert!(!c.reservations);
        assert!(!c.cpu_wake_latency);
        assert_eq!(c.host_cache, HostCache::Exclusive);
        assert_eq!(c.image_cache, Some(64 << 20));
        assert_eq!(c.chunk_size, 64 << 10);
        assert_eq!(c.busy_poll, Some(std::time::Duration::from_micros(100)));
        assert_eq!(c.budget, 64 << 20);
        assert_eq!(c.policy, PolicySpec::Clock);
        assert_eq!(c.swap_dir, PathBuf::from("/tmp/s"));
        assert_eq!((c.min_region, c.arena_size), (1 << 20, 1 << 30));
        assert!(c.manage_children);
        assert_eq!(c.on_swap_full, OnSwapFull::Stop);
    }

    #[test]
    fn chunk_size_defaults_to_the_pagers() {
        let c = read(&[(launch_env::BUDGET, "67108864")]).unwrap().unwrap();
        assert_eq!(c.chunk_size, DEFAULT_CHUNK_SIZE);
        assert_eq!(c.busy_poll, Some(DEFAULT_BUSY_POLL));
        assert_eq!(c.on_swap_full, OnSwapFull::Overrun);
        assert!(c.swap_mapper);
        assert!(c.reservations);
        assert!(!c.heap_managed);
        assert!(c.cpu_wake_latency);
        assert_eq!(c.host_cache, HostCache::Default);
        assert_eq!(c.image_cache, None);
        // A budget of one small chunk is enough with small chunks.
        let c = read(&[
            (launch_env::BUDGET, "65536"),
            (launch_env::CHUNK_SIZE, "65536"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(c.budget, c.chunk_size);
    }

    #[test]
    fn bad_values_name_the_variable() {
        for (k, v) in [
            (launch_env::BUDGET, "lots"),
            (launch_env::BUDGET, "4096"),
            (launch_env::POLICY, "nope"),
            (launch_env::POLICY, "opt"),
            (launch_env::MIN_REGION, "-1"),
            (launch_env::ARENA_SIZE, "1"),
            (launch_env::CHUNK_SIZE, "0"),
            (launch_env::CHUNK_SIZE, "5000"),
            (launch_env::IMAGE_CACHE, "4096"),
            (launch_env::IMAGE_CACHE, "big"),
            (launch_env::BUSY_POLL_US, "fast"),
            (launch_env::ON_SWAP_FULL, "ignore"),
            (launch_env::BUSY_POLL_US, "2000000"),
            (launch_env::CHUNK_SIZE, "134217728"),
            (launch_env::SWAP_MAPPER, "yes"),
            (launch_env::CPU_WAKE_LATENCY, "1"),
            (launch_env::HOST_CACHE, "on"),
        ] {
            let mut pairs = vec![(launch_env::BUDGET, "67108864")];
            pairs.retain(|p| p.0 != k);
            pairs.push((k, v));
            let e = read(&pairs).unwrap_err().to_string();
            assert!(e.contains(k), "{e}");
        }
    }
}
