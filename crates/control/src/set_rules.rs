//! [`SetRules`]: what a budget or policy change must satisfy, checked by `memvisor run` and
//! `memvisor set` before asking and by the control server before calling its handler.

use memvisor_policy::PolicySpec;

use crate::byte_size::format_bytes;
use crate::control_error::ControlError;

/// The smallest limit on an image's host cache: 1 MiB (below it, every access would drop a
/// block it just read).
pub const MIN_IMAGE_CACHE_BYTES: u64 = 1 << 20;

/// The limits a budget and policy are checked against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SetRules {
    /// Physical memory of the host (`MemTotal`): the largest budget.
    pub host_ram_bytes: u64,
    /// Chunk size of the process's regions: the smallest budget.
    pub chunk_bytes: u64,
}

impl SetRules {
    /// Refuses a budget above host RAM or below one chunk.
    pub fn check_budget(&self, bytes: u64) -> Result<(), ControlError> {
        let refuse = |reason: String| Err(ControlError::Budget { bytes, reason });
        if bytes > self.host_ram_bytes {
            return refuse(format!(
                "{} is more than this host's RAM ({})",
                format_bytes(bytes),
                format_bytes(self.host_ram_bytes)
            ));
        }
        if bytes < self.chunk_bytes.max(1) {
            return refuse(format!(
                "{} is less than one chunk ({})",
                format_bytes(bytes),
                format_bytes(self.chunk_bytes.max(1))
            ));
        }
        Ok(())
    }

    /// Refuses an image cache limit above host RAM or below [`MIN_IMAGE_CACHE_BYTES`].
    pub fn check_image_cache(&self, bytes: u64) -> Result<(), ControlError> {
        let refuse = |reason: String| Err(ControlError::ImageCache { bytes, reason });
        if bytes > self.host_ram_bytes {
            return refuse(format!(
                "{} is more than this host's RAM ({})",
                format_bytes(bytes),
                format_bytes(self.host_ram_bytes)
            ));
        }
        if bytes < MIN_IMAGE_CACHE_BYTES {
            return refuse(format!(
                "{} is less than {}",
                format_bytes(bytes),
                format_bytes(MIN_IMAGE_CACHE_BYTES)
            ));
        }
        Ok(())
    }

    /// Parses a policy spec (`memvisor sim` syntax) and refuses offline policies, which need
    /// the future and cannot page a live program.
    pub fn check_policy(&self, spec: &str) -> Result<PolicySpec, ControlError> {
        let refuse = |reason: String| ControlError::Policy {
            spec: spec.to_string(),
            reason,
        };
        let parsed: PolicySpec = spec.parse().map_err(|e| refuse(format!("{e}")))?;
        if parsed.is_offline() {
            return Err(refuse(
                "an offline policy cannot page a live program".into(),
            ));
        }
        Ok(parsed)
    }

    /// Checks both parts of a `set` request.
    pub fn check(
        &self,
        budget_bytes: Option<u64>,
        policy: Option<&str>,
    ) -> Result<(), ControlError> {
        if let Some(b) = budget_bytes {
            self.check_budget(b)?;
        }
        if let Some(p) = policy {
            self.check_policy(p)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budgets_between_one_chunk_and_host_ram() {
        let rules = SetRules {
            host_ram_bytes: 1 << 30,
            chunk_bytes: 1 << 20,
        };
        assert!(rules.check_budget(1 << 20).is_ok());
        assert!(rules.check_budget(1 << 30).is_ok());
        let e = rules.check_budget(u64::MAX).unwrap_err().to_string();
        assert!(e.contains("more than this host's RAM (1G)"), "{e}");
        let e = rules.check_budget(4096).unwrap_err().to_string();
        assert!(e.contains("less than one chunk (1M)"), "{e}");
        let no_chunk = SetRules {
            chunk_bytes: 0,
            ..rules
        };
        assert!(no_chunk.check_budget(0).is_err());
    }

    #[test]
    fn live_policies_only() {
        let rules = SetRules {
            host_ram_bytes: 1 << 30,
            chunk_bytes: 4096,
        };
        assert!(rules.check_policy("clock").is_ok());
        let e = rules.check_policy("nonsense").unwrap_err().to_string();
        assert!(e.starts_with("policy 'nonsense': "), "{e}");
        assert!(rules.check_policy("opt").is_err());
        assert!(rules.check(Some(1 << 20), Some("lru")).is_ok());
        assert!(rules.check(Some(1), None).is_err());
    }

    #[test]
    fn image_cache_limits_between_one_mib_and_host_ram() {
        let rules = SetRules {
            host_ram_bytes: 1 << 30,
            chunk_bytes: 1 << 20,
        };
        assert!(rules.check_image_cache(1 << 20).is_ok());
        assert!(rules.check_image_cache(1 << 30).is_ok());
        let e = rules.check_image_cache(4096).unwrap_err().to_string();
        assert_eq!(e, "image cache limit 4K is less than 1M");
        let e = rules.check_image_cache(2 << 30).unwrap_err().to_string();
        assert!(e.contains("more than this host's RAM (1G)"), "{e}");
    }
}
