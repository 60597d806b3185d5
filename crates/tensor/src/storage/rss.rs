//! The process's resident memory, as the operating system counts it.
//!
//! [`memory_stats`](super::memory_stats) counts tensor storage only; resident memory also
//! holds what the pool caches, what the system allocator keeps, thread stacks and the
//! program itself. Examples and benchmarks report both.

/// The process's peak resident set size in bytes (Linux's `VmHWM`), or `None` where the
/// system does not report it (other operating systems, or `/proc` not mounted).
///
/// ```
/// use ember_tensor::storage::{current_rss, peak_rss};
/// // The current size first: reading the peak afterwards covers it.
/// if let (Some(now), Some(peak)) = (current_rss(), peak_rss()) {
///     assert!(peak >= now);
/// }
/// ```
pub fn peak_rss() -> Option<usize> {
    status_field("VmHWM:")
}

/// The process's current resident set size in bytes (Linux's `VmRSS`), or `None` where the
/// system does not report it.
pub fn current_rss() -> Option<usize> {
    status_field("VmRSS:")
}

/// A `kB` line of `/proc/self/status`, in bytes.
fn status_field(key: &str) -> Option<usize> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    parse_kb(&status, key)
}

/// The value of the line `key  N kB` in `text`, in bytes.
fn parse_kb(text: &str, key: &str) -> Option<usize> {
    let line = text.lines().find(|l| l.starts_with(key))?;
    let kb: usize = line[key.len()..].trim().strip_suffix("kB")?.trim().parse().ok()?;
    kb.checked_mul(1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_kilobyte_lines() {
        let text = "Name:\tx\nVmHWM:\t  123456 kB\nVmRSS:\t    1000 kB\n";
        assert_eq!(parse_kb(text, "VmHWM:"), Some(123456 * 1024));
        assert_eq!(parse_kb(text, "VmRSS:"), Some(1000 * 1024));
        assert_eq!(parse_kb(text, "VmSwap:"), None);
        assert_eq!(parse_kb("VmHWM: lots\n", "VmHWM:"), None);
    }

    #[test]
    fn linux_reports_resident_memory() {
        if cfg!(target_os = "linux") {
            let (now, peak) = (current_rss().unwrap(), peak_rss().unwrap());
            assert!(now > 0 && peak >= now, "rss {now}, peak {peak}");
        }
    }
}
