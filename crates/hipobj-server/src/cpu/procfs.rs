//! Reading one thread's name, start time and CPU time from procfs
//! (proc(5)): `task/<tid>/stat` for the name and start, `schedstat` for the
//! CPU time in nanoseconds (the scheduler's own sum, not 10 ms ticks).

use std::path::Path;

/// Clock ticks a second in `stat` (`USER_HZ`, 100 on every Linux ABI that
/// procfs exposes): only used where `schedstat` cannot be read.
const USER_HZ: u64 = 100;

/// One thread as procfs shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct ThreadStat {
    /// Thread id.
    pub tid: u32,
    /// Its name (`comm`, at most 15 bytes).
    pub name: String,
    /// When it started, in ticks since boot: with `tid`, names one thread
    /// even when the kernel reuses the id.
    pub start: u64,
    /// CPU time so far, in nanoseconds.
    pub cpu_ns: u64,
}

/// The fields of a `stat` file: id, name, start time, and user + system
/// ticks. The name is between the first `(` and the last `)`; it may hold
/// spaces and parentheses itself.
pub(super) fn parse_stat(text: &str) -> Option<(u32, String, u64, u64)> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let tid = text.get(..open)?.trim().parse().ok()?;
    let name = text.get(open + 1..close)?.to_owned();
    // `rest` starts at field 3 (the state): utime and stime are fields 14
    // and 15, starttime field 22.
    let rest: Vec<&str> = text.get(close + 1..)?.split_whitespace().collect();
    let utime: u64 = rest.get(11)?.parse().ok()?;
    let stime: u64 = rest.get(12)?.parse().ok()?;
    let start: u64 = rest.get(19)?.parse().ok()?;
    Some((tid, name, start, utime.saturating_add(stime)))
}

/// The first field of a `schedstat` file: time spent on the CPU, in ns.
pub(super) fn parse_schedstat(text: &str) -> Option<u64> {
    text.split_whitespace().next()?.parse().ok()
}

/// Reads the thread whose procfs directory is `dir` (`/proc/self/task/<tid>`
/// or `/proc/thread-self`); `None` when it has gone.
pub(super) fn read_thread(dir: &Path) -> Option<ThreadStat> {
    let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
    let (tid, name, start, ticks) = parse_stat(&stat)?;
    let cpu_ns = std::fs::read_to_string(dir.join("schedstat"))
        .ok()
        .and_then(|t| parse_schedstat(&t))
        .unwrap_or_else(|| ticks.saturating_mul(1_000_000_000 / USER_HZ));
    Some(ThreadStat {
        tid,
        name,
        start,
        cpu_ns,
    })
}

/// Every live thread of this process (one that exits during the listing
/// is left out).
pub(super) fn threads() -> Vec<ThreadStat> {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    dir.flatten().filter_map(|e| read_thread(&e.path())).collect()
}

/// The calling thread.
pub(super) fn this_thread() -> Option<ThreadStat> {
    read_thread(Path::new("/proc/thread-self"))
}

/// CPU time of the whole process, threads that ended included (`stat`'s
/// user + system ticks), in nanoseconds: coarse (10 ms), but complete.
pub(super) fn process_cpu_ns() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let (_, _, _, ticks) = parse_stat(&stat)?;
    Some(ticks.saturating_mul(1_000_000_000 / USER_HZ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stat(tid: u32, name: &str, utime: u64, stime: u64, start: u64) -> String {
        format!(
            "{tid} ({name}) S 1 4242 4242 0 -1 4194560 100 0 0 0 {utime} {stime} 0 0 20 0 3 0 {start} 1000 10 \
             18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0"
        )
    }

    #[test]
    fn stat_fields_are_read_past_a_name_with_spaces_and_parentheses() {
        assert_eq!(
            parse_stat(&stat(7, "hipobj-srv", 7, 3, 555)),
            Some((7, "hipobj-srv".into(), 555, 10))
        );
        assert_eq!(
            parse_stat(&stat(8, "a (b) c", 120, 5, 9)),
            Some((8, "a (b) c".into(), 9, 125))
        );
        // Truncated or garbled files give nothing rather than a wrong figure.
        assert_eq!(parse_stat("4242 (x) S 1 2 3"), None);
        assert_eq!(parse_stat("x (y) S"), None);
        assert_eq!(parse_stat(&stat(1, "x", 777, 0, 5).replace(" 777 ", " z ")), None);
        assert_eq!(parse_stat(""), None);
        assert_eq!(parse_schedstat("1166568 33563 3\n"), Some(1_166_568));
        assert_eq!(parse_schedstat(""), None);
        assert_eq!(parse_schedstat("x 1 2"), None);
    }

    #[test]
    fn a_busy_thread_reads_back_more_time_than_before() {
        let before = this_thread().expect("procfs is mounted");
        // Spin until the thread's own reading moves (it counts ns).
        let mut x = 0u64;
        let mut after = before.clone();
        for _ in 0..1000 {
            for i in 0..100_000u64 {
                x = x.wrapping_mul(31).wrapping_add(i);
            }
            std::hint::black_box(x);
            after = this_thread().expect("procfs is mounted");
            if after.cpu_ns > before.cpu_ns {
                break;
            }
        }
        assert_eq!((after.tid, after.start), (before.tid, before.start));
        assert!(after.cpu_ns > before.cpu_ns, "{before:?} {after:?}");
        assert!(threads().iter().any(|t| t.tid == before.tid), "listed");
        assert!(process_cpu_ns().is_some());
    }
}
