//! Choosing QEMU's accelerator: TCG unless KVM is asked for, or probed and proven to work.
//!
//! The `/dev/kvm` of the machines memvisor is developed on is paravirtual and cannot boot stock
//! guests (a boot hangs), so TCG is the default and KVM is used only when `MEMVISOR_ACCEL=kvm`
//! forces it or `MEMVISOR_ACCEL=auto` finds that a short real boot under KVM succeeds.

use crate::error::{Result, TestVmError};

/// A QEMU accelerator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accel {
    /// QEMU's portable binary translator: works everywhere, slow.
    Tcg,
    /// Hardware virtualization through `/dev/kvm`.
    Kvm,
}

impl Accel {
    /// QEMU's name for it (`-accel NAME`).
    pub fn as_str(self) -> &'static str {
        match self {
            Accel::Tcg => "tcg",
            Accel::Kvm => "kvm",
        }
    }
}

/// How a [`GuestConfig`] picks its accelerator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AccelChoice {
    /// `MEMVISOR_ACCEL` (`tcg`, `kvm` or `auto`); TCG when unset. The default.
    #[default]
    FromEnv,
    /// Always this accelerator.
    Fixed(Accel),
    /// KVM if a short real boot under KVM succeeds (probed once per process), else TCG.
    Auto,
}

impl AccelChoice {
    /// Parses a `MEMVISOR_ACCEL` value.
    pub fn parse(value: &str) -> Result<Self> {
        match value {
            "tcg" => Ok(AccelChoice::Fixed(Accel::Tcg)),
            "kvm" => Ok(AccelChoice::Fixed(Accel::Kvm)),
            "auto" => Ok(AccelChoice::Auto),
            _ => Err(TestVmError::InvalidAccel {
                value: value.to_string(),
            }),
        }
    }

    /// The accelerator to use; for `Auto`, asks `kvm_works` (the probe,
    /// [`kvm_works`](crate::kvm_works), which may boot a guest once per process).
    pub fn resolve(self, kvm_works: impl FnOnce() -> bool) -> Result<Accel> {
        match self {
            AccelChoice::Fixed(accel) => Ok(accel),
            AccelChoice::Auto => Ok(if kvm_works() { Accel::Kvm } else { Accel::Tcg }),
            AccelChoice::FromEnv => match std::env::var("MEMVISOR_ACCEL") {
                Ok(value) if !value.is_empty() => Self::parse(&value)?.resolve(kvm_works),
                _ => Ok(Accel::Tcg),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_accepts_the_three_names_only() {
        assert_eq!(
            AccelChoice::parse("tcg").unwrap(),
            AccelChoice::Fixed(Accel::Tcg)
        );
        assert_eq!(
            AccelChoice::parse("kvm").unwrap(),
            AccelChoice::Fixed(Accel::Kvm)
        );
        assert_eq!(AccelChoice::parse("auto").unwrap(), AccelChoice::Auto);
        let err = AccelChoice::parse("KVM").unwrap_err();
        assert_eq!(
            err.to_string(),
            "MEMVISOR_ACCEL=\"KVM\" is not one of tcg, kvm, auto"
        );
    }

    #[test]
    fn fixed_choices_resolve_without_probing() {
        // A probe that would say KVM works: fixed choices never ask it.
        let image = || true;
        assert_eq!(
            AccelChoice::Fixed(Accel::Kvm).resolve(image).unwrap(),
            Accel::Kvm
        );
        assert_eq!(
            AccelChoice::Fixed(Accel::Tcg).resolve(image).unwrap(),
            Accel::Tcg
        );
    }
}
