//! CPU time of this process, split by thread: the soft NIC's workers (whose
//! work a hardware NIC would do) apart from the application's threads.
//!
//! Every figure is user + system time from `/proc/self/stat` (the whole
//! process, threads that have exited included) and
//! `/proc/self/task/<tid>/stat` (each live thread), in clock ticks.

use std::collections::HashMap;
use std::sync::OnceLock;

/// Which part of the process a thread belongs to, by its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Class {
    /// A soft RoCE NIC's worker (`nic:<device>`).
    Nic,
    /// A benchmark thread that drives transfers (`bench-<n>`).
    Bench,
    /// The I/O runtime's workers and its blocking pool (`hipobj-rt`).
    Runtime,
    /// Any other thread of the application (`main` among them).
    Other,
}

/// What the benchmark's own threads are called.
pub(crate) const BENCH_THREAD_PREFIX: &str = "bench-";
/// What the I/O runtime's threads are called.
pub(crate) const RUNTIME_THREAD_NAME: &str = "hipobj-rt";

/// The class of a thread named `comm`.
pub(crate) fn classify(comm: &str) -> Class {
    if comm.starts_with(hipobj_system::SOFTROCE_WORKER_THREAD_PREFIX) {
        Class::Nic
    } else if comm.starts_with(BENCH_THREAD_PREFIX) {
        Class::Bench
    } else if comm.starts_with(RUNTIME_THREAD_NAME) {
        Class::Runtime
    } else {
        Class::Other
    }
}

/// A `stat` file's name field and user + system ticks (fields 2, 14 and 15
/// of proc(5)). The name is between the first `(` and the last `)`: it may
/// itself hold spaces and parentheses.
pub(crate) fn parse_stat(text: &str) -> Option<(String, u64)> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let comm = text.get(open + 1..close)?.to_owned();
    let rest: Vec<&str> = text.get(close + 1..)?.split_whitespace().collect();
    // `rest` starts at field 3 (the state).
    let utime: u64 = rest.get(11)?.parse().ok()?;
    let stime: u64 = rest.get(12)?.parse().ok()?;
    Some((comm, utime + stime))
}

/// One reading of the process's CPU time.
#[derive(Clone, Debug, Default)]
pub(crate) struct Sample {
    /// The whole process, exited threads included.
    pub total: u64,
    /// Each live thread: id → (name, ticks).
    pub threads: HashMap<u32, (String, u64)>,
}

/// Reads this process's CPU time now.
pub(crate) fn sample() -> Sample {
    let total = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|t| parse_stat(&t))
        .map_or(0, |(_, t)| t);
    let mut threads = HashMap::new();
    if let Ok(dir) = std::fs::read_dir("/proc/self/task") {
        for e in dir.flatten() {
            let Some(tid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            // A thread may exit between the listing and the read: skip it
            // (its time is in `total`).
            if let Some(s) = std::fs::read_to_string(e.path().join("stat"))
                .ok()
                .and_then(|t| parse_stat(&t))
            {
                threads.insert(tid, s);
            }
        }
    }
    Sample { total, threads }
}

/// CPU seconds spent between two samples, by class.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Split {
    /// The whole process.
    pub total: f64,
    /// The soft NIC's workers.
    pub nic: f64,
    /// Benchmark threads.
    pub bench: f64,
    /// The I/O runtime.
    pub runtime: f64,
    /// Other live threads.
    pub other: f64,
    /// Threads that ended between the samples (the total less every live
    /// thread's share; 0 when the coarse ticks make it negative).
    pub exited: f64,
}

impl Split {
    /// Everything but the NIC: what the application's own threads spent
    /// (exited ones included: they were not NIC workers, which live as long
    /// as their device).
    pub(crate) fn app(&self) -> f64 {
        (self.total - self.nic).max(0.0)
    }
}

/// The CPU time spent from `a` to `b`, `hz` ticks a second. A thread alive
/// at `b` but not at `a` started in between, so all its time counts; one
/// whose id was reused shows fewer ticks than before and also counts whole.
pub(crate) fn split(a: &Sample, b: &Sample, hz: f64) -> Split {
    let mut s = Split::default();
    let mut live = 0u64;
    for (tid, (comm, after)) in &b.threads {
        let before = a
            .threads
            .get(tid)
            .filter(|(c, t)| c == comm && t <= after)
            .map_or(0, |(_, t)| *t);
        let d = after - before;
        live += d;
        let secs = d as f64 / hz;
        match classify(comm) {
            Class::Nic => s.nic += secs,
            Class::Bench => s.bench += secs,
            Class::Runtime => s.runtime += secs,
            Class::Other => s.other += secs,
        }
    }
    let total = b.total.saturating_sub(a.total);
    s.total = total as f64 / hz;
    s.exited = total.saturating_sub(live) as f64 / hz;
    s
}

/// Clock ticks a second (`getconf CLK_TCK`; 100 where that cannot run).
pub(crate) fn ticks_per_second() -> f64 {
    static HZ: OnceLock<f64> = OnceLock::new();
    *HZ.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .filter(|&h: &f64| h > 0.0)
            .unwrap_or(100.0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stat(comm: &str, utime: u64, stime: u64) -> String {
        format!(
            "4242 ({comm}) S 1 4242 4242 0 -1 4194560 100 0 0 0 {utime} {stime} 0 0 20 0 3 0 12345 1000 10 \
             18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0"
        )
    }

    #[test]
    fn stat_fields_are_read_past_a_name_with_spaces_and_parentheses() {
        assert_eq!(parse_stat(&stat("hipobj", 7, 3)), Some(("hipobj".into(), 10)));
        assert_eq!(
            parse_stat(&stat("a (b) c", 120, 5)),
            Some(("a (b) c".into(), 125))
        );
        assert_eq!(
            parse_stat(&stat("nic:softroce0", 0, 9)),
            Some(("nic:softroce0".into(), 9))
        );
        // Truncated or garbled files give nothing rather than a wrong figure.
        assert_eq!(parse_stat("4242 (x) S 1 2 3"), None);
        assert_eq!(parse_stat("4242 x S 1"), None);
        assert_eq!(parse_stat(&stat("x", 777, 0).replace(" 777 ", " z ")), None);
        assert_eq!(parse_stat(""), None);
    }

    #[test]
    fn this_process_reads_back_its_own_threads() {
        let s = sample();
        assert!(!s.threads.is_empty());
        let live: u64 = s.threads.values().map(|(_, t)| t).sum();
        assert!(s.total >= live.saturating_sub(s.threads.len() as u64), "{s:?}");
    }

    #[test]
    fn threads_are_classified_by_name() {
        assert_eq!(classify("nic:softroce0"), Class::Nic);
        assert_eq!(classify("nic:a-very-long"), Class::Nic);
        assert_eq!(classify("bench-17"), Class::Bench);
        assert_eq!(classify("hipobj-rt"), Class::Runtime);
        assert_eq!(classify("hipobj"), Class::Other);
        assert_eq!(classify("tokio-runtime-w"), Class::Other);
        // The old worker name was no NIC class of its own.
        assert_eq!(classify("softroce0-dma"), Class::Other);
    }

    fn sample_of(total: u64, threads: &[(u32, &str, u64)]) -> Sample {
        Sample {
            total,
            threads: threads
                .iter()
                .map(|&(id, c, t)| (id, (c.to_owned(), t)))
                .collect(),
        }
    }

    #[test]
    fn the_split_counts_new_exited_and_reused_threads() {
        let a = sample_of(
            1000,
            &[
                (1, "hipobj", 100),
                (2, "nic:softroce0", 300),
                (3, "bench-0", 50),
                (4, "bench-1", 80),
            ],
        );
        // 3 ran 20 more ticks and 4 exited after 30 more; 5 is new; 6 took
        // the id of a thread that had 200 ticks and ran 10.
        let a = {
            let mut a = a;
            a.threads.insert(6, ("hipobj-rt".into(), 200));
            a
        };
        let b = sample_of(
            1000 + 10 + 150 + 20 + 30 + 40 + 10,
            &[
                (1, "hipobj", 110),
                (2, "nic:softroce0", 450),
                (3, "bench-0", 70),
                (5, "hipobj-rt", 40),
                (6, "bench-9", 10),
            ],
        );
        let s = split(&a, &b, 100.0);
        let close = |x: f64, y: f64| (x - y).abs() < 1e-9;
        assert!(close(s.total, 2.60), "{s:?}");
        assert!(close(s.nic, 1.50), "{s:?}");
        assert!(close(s.app(), 1.10), "{s:?}");
        assert!(close(s.bench, 0.30), "{s:?}");
        assert!(close(s.runtime, 0.40), "{s:?}");
        assert!(close(s.other, 0.10), "{s:?}");
        assert!(close(s.exited, 0.30), "the exited thread's 30 ticks: {s:?}");
    }

    #[test]
    fn coarse_ticks_never_go_negative() {
        let a = sample_of(100, &[(1, "hipobj", 50)]);
        let b = sample_of(100, &[(1, "hipobj", 51), (2, "nic:x", 5)]);
        let s = split(&a, &b, 100.0);
        assert_eq!(s.exited, 0.0);
        assert_eq!(s.app(), 0.0);
    }
}
