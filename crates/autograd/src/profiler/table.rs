//! The key-averages table (PyTorch's `key_averages().table(sort_by=.., row_limit=..)`):
//! which column orders it, how many rows it shows, and the rendering.

use super::events::OpStats;
use super::options::ProfileOptions;
use ember_tensor::{Error, Result};
use std::cmp::Ordering;
use std::fmt::Write as _;
use std::time::Duration;

/// The column a table is sorted by, largest first (ties by name, then phase).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SortBy {
    /// The number of calls (`count`).
    Count,
    /// The total CPU time, nested events included (`cpu_time_total`).
    #[default]
    CpuTotal,
    /// The CPU time excluding nested events (`self_cpu_time_total`).
    CpuSelf,
    /// The mean CPU time per call (`cpu_time`).
    CpuAverage,
    /// The net bytes allocated, nested events included (`cpu_memory_usage`).
    Memory,
    /// The net bytes allocated excluding nested events (`self_cpu_memory_usage`).
    SelfMemory,
    /// The total device time (`device_time_total`, formerly `cuda_time_total`); rows
    /// without one come last.
    DeviceTotal,
}

impl SortBy {
    /// Every column, for iterating.
    pub const ALL: [SortBy; 7] = [
        SortBy::Count,
        SortBy::CpuTotal,
        SortBy::CpuSelf,
        SortBy::CpuAverage,
        SortBy::Memory,
        SortBy::SelfMemory,
        SortBy::DeviceTotal,
    ];

    /// The column named as PyTorch's `sort_by` names it (`"self_cpu_time_total"`,
    /// `"cuda_time_total"`, ...).
    ///
    /// ```
    /// use ember_autograd::profiler::SortBy;
    /// assert_eq!(SortBy::parse("self_cpu_time_total")?, SortBy::CpuSelf);
    /// assert!(SortBy::parse("flops").is_err());
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    pub fn parse(name: &str) -> Result<SortBy> {
        Ok(match name {
            "count" => SortBy::Count,
            "cpu_time_total" => SortBy::CpuTotal,
            "self_cpu_time_total" => SortBy::CpuSelf,
            "cpu_time" => SortBy::CpuAverage,
            "cpu_memory_usage" => SortBy::Memory,
            "self_cpu_memory_usage" => SortBy::SelfMemory,
            "device_time_total" | "cuda_time_total" => SortBy::DeviceTotal,
            _ => {
                return Err(Error::autograd(format!(
                    "profiler table: unknown sort_by {name:?} (expected count, cpu_time_total, \
                     self_cpu_time_total, cpu_time, cpu_memory_usage, self_cpu_memory_usage or \
                     device_time_total)"
                )));
            }
        })
    }

    /// Sorts `stats` by this column, largest first; ties by name, then phase.
    pub fn sort(self, stats: &mut [OpStats]) {
        stats.sort_by(|a, b| self.compare(b, a).then_with(|| (&a.name, a.phase).cmp(&(&b.name, b.phase))));
    }

    /// `a` against `b` in this column, ascending.
    fn compare(self, a: &OpStats, b: &OpStats) -> Ordering {
        match self {
            SortBy::Count => a.count.cmp(&b.count),
            SortBy::CpuTotal => a.total.cmp(&b.total),
            SortBy::CpuSelf => a.self_time.cmp(&b.self_time),
            SortBy::CpuAverage => a.average().cmp(&b.average()),
            SortBy::Memory => a.memory.cmp(&b.memory),
            SortBy::SelfMemory => a.self_memory.cmp(&b.self_memory),
            // `None` is less than any `Some`: rows without device time come last.
            SortBy::DeviceTotal => a.device_time.cmp(&b.device_time),
        }
    }
}

/// How [`Profile::table_with`](super::Profile::table_with) lays out its table.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TableOptions {
    /// The column the rows are sorted by.
    pub sort_by: SortBy,
    /// Show at most this many rows (PyTorch's `row_limit`); `None` shows all.
    pub row_limit: Option<usize>,
    /// One row per name, phase and input shapes (PyTorch's `group_by_input_shape`); needs
    /// [`ProfileOptions::record_shapes`].
    pub group_by_input_shape: bool,
}

/// `stats` (already sorted and limited) as a text table. Columns whose option was off are
/// left out.
pub(crate) fn render(stats: &[OpStats], options: ProfileOptions, profiled: Duration, shapes: bool) -> String {
    let all = profiled.as_secs_f64().max(f64::MIN_POSITIVE);
    let width = stats.iter().map(|s| s.name.len()).max().unwrap_or(4).clamp(4, 48);
    let shape_texts: Vec<String> =
        stats.iter().map(|s| s.shapes.as_deref().map(shapes_text).unwrap_or_default()).collect();
    let shape_width = shape_texts.iter().map(String::len).max().unwrap_or(0).clamp(12, 60);
    let mut header = format!(
        "{:<width$}  {:<8}  {:>7}  {:>12}  {:>12}  {:>10}  {:>7}",
        "name", "phase", "calls", "total (us)", "self (us)", "avg (us)", "self %"
    );
    if options.profile_memory {
        let _ = write!(header, "  {:>12}  {:>12}", "mem", "self mem");
    }
    if options.device_time {
        let _ = write!(header, "  {:>13}  {:>13}", "device (us)", "dev avg (us)");
    }
    if shapes {
        let _ = write!(header, "  {:<shape_width$}", "input shapes");
    }
    if options.with_stack {
        header.push_str("  source");
    }
    let mut out = String::new();
    let _ = writeln!(out, "{header}");
    let _ = writeln!(out, "{}", "-".repeat(header.len()));
    for (s, shape_text) in stats.iter().zip(&shape_texts) {
        let name: String = s.name.chars().take(width).collect();
        let total = s.total.as_secs_f64() * 1e6;
        let _ = write!(
            out,
            "{name:<width$}  {:<8}  {:>7}  {:>12.1}  {:>12.1}  {:>10.2}  {:>6.1}%",
            s.phase.label(),
            s.count,
            total,
            s.self_time.as_secs_f64() * 1e6,
            total / s.count.max(1) as f64,
            s.self_time.as_secs_f64() / all * 100.0,
        );
        if options.profile_memory {
            let _ = write!(out, "  {:>12}  {:>12}", bytes_text(s.memory), bytes_text(s.self_memory));
        }
        if options.device_time {
            match s.device_time {
                Some(d) => {
                    let us = d.as_secs_f64() * 1e6;
                    let _ = write!(out, "  {:>13.1}  {:>13.2}", us, us / s.count.max(1) as f64);
                }
                None => {
                    let _ = write!(out, "  {:>13}  {:>13}", "n/a", "n/a");
                }
            }
        }
        if shapes {
            let _ = write!(out, "  {shape_text:<shape_width$}");
        }
        if options.with_stack {
            match s.stack {
                Some(site) => {
                    let _ = write!(out, "  {site}");
                }
                None => out.push_str("  -"),
            }
        }
        let line_end = out.trim_end_matches(' ').len();
        out.truncate(line_end);
        out.push('\n');
    }
    let _ = writeln!(out, "profiled time (sum of self times): {:.1} us", all * 1e6);
    out
}

/// Shapes as PyTorch prints input dims: `[[2, 4], [4, 3]]`.
pub(crate) fn shapes_text(shapes: &[Vec<usize>]) -> String {
    format!("{shapes:?}")
}

/// A byte count in the largest binary unit that keeps it at least 1 (`8.00 KiB`), signed.
fn bytes_text(bytes: i64) -> String {
    let units = ["B", "KiB", "MiB", "GiB"];
    let mut v = bytes as f64;
    let mut unit = 0;
    while v.abs() >= 1024.0 && unit + 1 < units.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 { format!("{bytes} B") } else { format!("{v:.2} {}", units[unit]) }
}
