//! [`ProcessState`]: whether a process exists and can run, from `/proc/PID/stat`.

/// What `/proc/PID/stat` says about a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcessState {
    /// Running, sleeping or waiting: it can answer.
    Alive,
    /// Stopped by a signal (`T`) or by a tracer (`t`): it cannot answer until continued.
    Stopped,
    /// Exited but not yet reaped (`Z`, `X`).
    Zombie,
    /// No such process.
    Gone,
}

impl ProcessState {
    /// The state of process `pid`.
    pub fn of(pid: u32) -> Self {
        match std::fs::read(format!("/proc/{pid}/stat")) {
            Ok(stat) => Self::from_stat_line(&stat),
            Err(_) => Self::Gone,
        }
    }

    /// The state in a `/proc/PID/stat` line: the field after the command, which is in
    /// parentheses and may itself contain spaces and parentheses.
    pub fn from_stat_line(stat: &[u8]) -> Self {
        let Some(close) = stat.iter().rposition(|&b| b == b')') else {
            return Self::Gone;
        };
        let state = stat[close + 1..].iter().find(|b| !b.is_ascii_whitespace());
        match state {
            Some(b'T' | b't') => Self::Stopped,
            Some(b'Z' | b'X' | b'x') => Self::Zombie,
            Some(_) => Self::Alive,
            None => Self::Gone,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_states() {
        let parse = |s: &str| ProcessState::from_stat_line(s.as_bytes());
        assert_eq!(parse("12 (sh) S 1 12"), ProcessState::Alive);
        assert_eq!(parse("12 (a) T) b) T 1"), ProcessState::Stopped);
        assert_eq!(parse("12 (x) t 1"), ProcessState::Stopped);
        assert_eq!(parse("12 (x) Z 1"), ProcessState::Zombie);
        assert_eq!(parse("garbage"), ProcessState::Gone);
        assert_eq!(parse("12 (x)"), ProcessState::Gone);
        assert_eq!(ProcessState::of(std::process::id()), ProcessState::Alive);
        assert_eq!(ProcessState::of(u32::MAX), ProcessState::Gone);
    }
}
