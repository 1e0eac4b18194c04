//! CPU time: of the calling thread (the scanner's cost) and of any process or thread, such as
//! ksmd, from `/proc/PID/stat`.

use std::time::Duration;

use crate::DedupError;

/// CPU time consumed by the calling thread.
pub fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant the kernel knows.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// CPU time (user + system) of process or thread `pid`, from `/proc/PID/stat`.
pub fn process_cpu_time(pid: i32) -> Result<Duration, DedupError> {
    let path = format!("/proc/{pid}/stat");
    let text = std::fs::read_to_string(&path)
        .map_err(|e| DedupError::from_process_io(pid, format!("reading {path}"), e))?;
    let ticks = parse_stat_cpu_ticks(&text).map_err(|message| DedupError::Parse {
        path: path.into(),
        line: 1,
        message,
    })?;
    // SAFETY: sysconf has no memory-safety preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Ok(Duration::from_nanos(
        ticks.saturating_mul(1_000_000_000 / hz),
    ))
}

/// utime + stime (fields 14 and 15) of a `/proc/PID/stat` line, in clock ticks.
pub fn parse_stat_cpu_ticks(stat: &str) -> Result<u64, String> {
    let (_, rest) = stat
        .rsplit_once(')')
        .ok_or("no ')' after the command name")?;
    // `rest` starts at field 3 (state).
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let get = |n: usize| -> Result<u64, String> {
        fields
            .get(n - 3)
            .ok_or(format!("field {n} missing"))?
            .parse()
            .map_err(|_| format!("field {n} is not a number"))
    };
    Ok(get(14)?.saturating_add(get(15)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_cpu_ticks() {
        let line = "123 (a b) c) S 2 0 0 0 -1 69238880 0 0 0 0 17 4 0 0 20 0 1 0 5 0 0";
        assert_eq!(parse_stat_cpu_ticks(line), Ok(21));
        assert!(parse_stat_cpu_ticks("123 (x").is_err());
        assert!(parse_stat_cpu_ticks("1 (x) S 2")
            .unwrap_err()
            .contains("field 14"));
        assert!(process_cpu_time(std::process::id() as i32).is_ok());
    }
}
