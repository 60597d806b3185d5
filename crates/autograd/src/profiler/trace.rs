//! The Chrome trace format (`chrome://tracing`, Perfetto) of a profile's events.

use super::events::{Phase, ProfileEvent};
use super::options::ProfileOptions;
use std::fmt::Write as _;

/// `events` as complete (`"ph":"X"`) events with start and duration in microseconds; the
/// recorded columns go in each event's `args` under PyTorch's keys (`Input Dims`,
/// `Call stack`) and ember's (`Memory (bytes)`, `Self memory (bytes)`, `Device time (us)`).
pub(crate) fn chrome_trace(events: &[ProfileEvent], options: ProfileOptions, thread: u64) -> String {
    let pid = std::process::id();
    let mut out = String::from("{\"traceEvents\":[");
    for (k, e) in events.iter().enumerate() {
        if k > 0 {
            out.push(',');
        }
        let name = match e.phase {
            Phase::Backward => format!("{} (backward)", e.name),
            _ => e.name.clone(),
        };
        let _ = write!(
            out,
            "{{\"name\":\"{}\",\"cat\":\"{}\",\"ph\":\"X\",\"ts\":{:.3},\"dur\":{:.3},\"pid\":{pid},\"tid\":{thread}",
            escape_json(&name),
            e.phase.label(),
            e.start.as_secs_f64() * 1e6,
            e.duration.as_secs_f64() * 1e6,
        );
        let args = args(e, options);
        if !args.is_empty() {
            let _ = write!(out, ",\"args\":{{{args}}}");
        }
        out.push('}');
    }
    out.push_str("],\"displayTimeUnit\":\"ms\"}");
    out
}

/// The inside of an event's `args` object: the columns its options recorded.
fn args(e: &ProfileEvent, options: ProfileOptions) -> String {
    let mut fields: Vec<String> = Vec::new();
    if options.record_shapes && e.phase == Phase::Forward {
        fields.push(format!("\"Input Dims\":{:?}", e.shapes));
    }
    if let Some(site) = e.stack {
        fields.push(format!("\"Call stack\":\"{}\"", escape_json(&site.to_string())));
    }
    if options.profile_memory {
        fields.push(format!("\"Memory (bytes)\":{}", e.memory));
        fields.push(format!("\"Self memory (bytes)\":{}", e.self_memory));
    }
    if let Some(d) = e.device_time {
        fields.push(format!("\"Device time (us)\":{:.3}", d.as_secs_f64() * 1e6));
    }
    fields.join(",")
}

/// `s` as the inside of a JSON string.
fn escape_json(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}
