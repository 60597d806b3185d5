//! The profiler's optional columns on a 2-layer MLP's forward and backward: input shapes,
//! call sites, memory per operation, device time (`n/a` without a GPU), the table's
//! `sort_by` and `row_limit`, grouping by input shape, and the Chrome trace's `args`.

use ember_autograd::profiler::{OpStats, Phase, Profile, ProfileOptions, SortBy, TableOptions, profile_with};
use ember_autograd::{Var, profile};
use ember_tensor::{DType, Device, Result, Tensor};
use parking_lot::Mutex;

/// Memory columns read process-wide counters: the tests of this file run one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

const BATCH: usize = 32;
const INPUT: usize = 64;
const HIDDEN: usize = 128;
const OUTPUT: usize = 64;
const F32: usize = 4;

struct Mlp {
    x: Var,
    w1: Var,
    b1: Var,
    w2: Var,
}

impl Mlp {
    fn new(device: Device) -> Result<Mlp> {
        let on = |t: Tensor| t.to_device(device);
        Ok(Mlp {
            x: Var::new(on(Tensor::randn([BATCH, INPUT])?)?),
            w1: Var::param(on(Tensor::randn([INPUT, HIDDEN])?)?),
            b1: Var::param(on(Tensor::zeros([HIDDEN], DType::F32)?)?),
            w2: Var::param(on(Tensor::randn([HIDDEN, OUTPUT])?)?),
        })
    }

    /// Forward and backward; returns the line of the first matmul, for the call-site test.
    fn step(&self) -> Result<u32> {
        let (h, line) = (self.x.matmul(&self.w1)?, line!());
        let h = (&h + &self.b1)?.relu();
        h.matmul(&self.w2)?.tanh().sum_all().backward()?;
        Ok(line)
    }
}

fn profiled(options: ProfileOptions, device: Device) -> Result<(Profile, u32)> {
    let mlp = Mlp::new(device)?;
    // A first step outside the profile: one-time allocations (gradient buffers, the pool)
    // do not land in the measured one.
    mlp.step()?;
    let (line, prof) = profile_with(options, || mlp.step());
    Ok((prof, line?))
}

/// The forward events of the step proper (not nested in a backward).
fn top_level<'a>(prof: &'a Profile, name: &str) -> Vec<&'a ember_autograd::profiler::ProfileEvent> {
    prof.events().iter().filter(|e| e.name == name && e.phase == Phase::Forward && e.depth == 0).collect()
}

#[test]
fn record_shapes_lists_each_operations_input_shapes() -> Result<()> {
    let _serial = SERIAL.lock();
    let (prof, _) = profiled(ProfileOptions::new().record_shapes(true), Device::Cpu)?;
    let shapes = |name: &str| top_level(&prof, name).iter().map(|e| e.shapes.clone()).collect::<Vec<_>>();
    assert_eq!(
        shapes("matmul"),
        vec![vec![vec![BATCH, INPUT], vec![INPUT, HIDDEN]], vec![vec![BATCH, HIDDEN], vec![HIDDEN, OUTPUT]]]
    );
    assert_eq!(shapes("add"), vec![vec![vec![BATCH, HIDDEN], vec![HIDDEN]]]);
    assert_eq!(shapes("relu"), vec![vec![vec![BATCH, HIDDEN]]]);
    assert_eq!(shapes("sum"), vec![vec![vec![BATCH, OUTPUT]]]);
    // Every forward event has its shapes, also those applied by backward formulas.
    assert!(prof.events().iter().filter(|e| e.phase == Phase::Forward).all(|e| !e.shapes.is_empty()));

    // Grouped by input shape, the two matmuls of the forward are two rows; by name, one.
    let by_shape = prof.key_averages_by_input_shape();
    let forward_matmul_rows = |stats: &[OpStats]| {
        stats
            .iter()
            .filter(|s| s.name == "matmul" && s.phase == Phase::Forward)
            .map(|s| s.shapes.clone())
            .collect::<Vec<_>>()
    };
    let rows = forward_matmul_rows(&by_shape);
    assert!(rows.contains(&Some(vec![vec![BATCH, INPUT], vec![INPUT, HIDDEN]])), "{rows:?}");
    assert!(rows.contains(&Some(vec![vec![BATCH, HIDDEN], vec![HIDDEN, OUTPUT]])), "{rows:?}");
    assert_eq!(forward_matmul_rows(&prof.key_averages()), vec![None]);
    let table = prof.table_with(TableOptions { group_by_input_shape: true, ..Default::default() });
    assert!(table.contains("input shapes") && table.contains("[[32, 64], [64, 128]]"), "{table}");

    // Off, nothing is recorded.
    let (plain, _) = profiled(ProfileOptions::new(), Device::Cpu)?;
    assert!(plain.events().iter().all(|e| e.shapes.is_empty()));
    Ok(())
}

#[test]
fn with_stack_points_at_the_line_that_applied_the_operation() -> Result<()> {
    let _serial = SERIAL.lock();
    let (prof, line) = profiled(ProfileOptions::new().with_stack(true), Device::Cpu)?;
    let first = top_level(&prof, "matmul")[0];
    let site = first.stack.expect("a call site");
    assert_eq!((site.file, site.line), (file!(), line));
    // Operators, composite methods and backward-free ops report this file too.
    for name in ["add", "relu", "tanh", "sum"] {
        let e = top_level(&prof, name)[0];
        assert_eq!(e.stack.map(|s| s.file), Some(file!()), "{name}");
    }
    // An operator's line: `(a + b)` two lines below `let (h, line)`.
    assert_eq!(top_level(&prof, "add")[0].stack.map(|s| s.line), Some(line + 1));
    // The source column of the table, and nothing without the option.
    assert!(prof.table().contains(&format!("{}:{line}:", file!())), "{}", prof.table());
    let (plain, _) = profiled(ProfileOptions::new(), Device::Cpu)?;
    assert!(plain.events().iter().all(|e| e.stack.is_none()));
    Ok(())
}

#[test]
fn profile_memory_counts_the_bytes_each_operation_allocated() -> Result<()> {
    let _serial = SERIAL.lock();
    let (prof, _) = profiled(ProfileOptions::new().profile_memory(true), Device::Cpu)?;
    // An operation's output is its allocation: exact for outputs of 4 KiB and more.
    let memory = |name: &str| top_level(&prof, name).iter().map(|e| (e.memory, e.self_memory)).collect::<Vec<_>>();
    let hidden = (BATCH * HIDDEN * F32) as i64;
    let output = (BATCH * OUTPUT * F32) as i64;
    assert_eq!(memory("matmul"), vec![(hidden, hidden), (output, output)]);
    assert_eq!(memory("add"), vec![(hidden, hidden)]);
    assert_eq!(memory("relu"), vec![(hidden, hidden)]);
    assert_eq!(memory("tanh"), vec![(output, output)]);
    // A scalar is below the counters' 4 KiB threshold.
    assert_eq!(memory("sum"), vec![(0, 0)]);
    // Totals include nested events: a backward node's total is its self plus its children's.
    for e in prof.events() {
        let children: i64 = prof
            .events()
            .iter()
            .filter(|c| c.depth == e.depth + 1 && c.start >= e.start && c.start + c.duration <= e.start + e.duration)
            .map(|c| c.memory)
            .sum();
        assert_eq!(e.memory, e.self_memory + children, "{e:?}");
    }
    let stats = prof.key_averages();
    let matmul = stats.iter().find(|s| s.name == "matmul" && s.phase == Phase::Forward).expect("matmul");
    assert!(matmul.memory >= hidden + output, "{matmul:?}");
    assert!(prof.table().contains("self mem") && prof.table().contains("16.00 KiB"), "{}", prof.table());
    Ok(())
}

#[test]
fn device_time_is_not_available_on_the_cpu_or_the_emulated_device() -> Result<()> {
    let _serial = SERIAL.lock();
    let mut devices = vec![Device::Cpu];
    if Device::emulate_cuda() {
        devices.push(Device::Cuda(0));
    }
    for device in devices {
        // Kernels that run on the host have no device timer: their wall time is the time.
        assert!(device.start_timer()?.is_none(), "{device}");
        let (prof, _) = profiled(ProfileOptions::new().device_time(true), device)?;
        assert!(!top_level(&prof, "matmul").is_empty());
        assert!(prof.events().iter().all(|e| e.device_time.is_none()), "{device}");
        let table = prof.table();
        assert!(table.contains("device (us)"), "{table}");
        let matmul_row = table.lines().find(|l| l.starts_with("matmul ")).expect("a matmul row");
        assert!(matmul_row.contains("n/a"), "{matmul_row}");
    }
    Ok(())
}

/// The (name, phase) of each row of a table, in order.
fn rows(table: &str) -> Vec<(String, String)> {
    table
        .lines()
        .skip(2)
        .take_while(|l| !l.starts_with("profiled time"))
        .map(|l| {
            let mut words = l.split_whitespace();
            (words.next().unwrap_or("").to_string(), words.next().unwrap_or("").to_string())
        })
        .collect()
}

#[test]
fn sort_by_orders_the_rows_by_each_column_and_row_limit_truncates() -> Result<()> {
    let _serial = SERIAL.lock();
    let (prof, _) = profiled(ProfileOptions::all(), Device::Cpu)?;
    let stats = prof.key_averages();
    assert!(stats.len() > 5);
    for sort_by in SortBy::ALL {
        let mut sorted = stats.clone();
        sort_by.sort(&mut sorted);
        let key = |s: &OpStats| match sort_by {
            SortBy::Count => s.count as f64,
            SortBy::CpuTotal => s.total.as_secs_f64(),
            SortBy::CpuSelf => s.self_time.as_secs_f64(),
            SortBy::CpuAverage => s.average().as_secs_f64(),
            SortBy::Memory => s.memory as f64,
            SortBy::SelfMemory => s.self_memory as f64,
            SortBy::DeviceTotal => s.device_time.map_or(-1.0, |d| d.as_secs_f64()),
        };
        assert!(sorted.windows(2).all(|w| key(&w[0]) >= key(&w[1])), "{sort_by:?}: {sorted:#?}");
        // The table shows the rows in that order.
        let table = prof.table_with(TableOptions { sort_by, ..Default::default() });
        let expected: Vec<(String, String)> =
            sorted.iter().map(|s| (s.name.clone(), s.phase.label().to_string())).collect();
        assert_eq!(rows(&table), expected, "{sort_by:?}\n{table}");
        let limited = prof.table_with(TableOptions { sort_by, row_limit: Some(3), ..Default::default() });
        assert_eq!(rows(&limited), expected[..3].to_vec(), "{sort_by:?}\n{limited}");
    }
    // Different columns give different orders on this profile (count against memory).
    let order = |sort_by| {
        let mut s = stats.clone();
        SortBy::sort(sort_by, &mut s);
        s.iter().map(|s| (s.name.clone(), s.phase)).collect::<Vec<_>>()
    };
    assert_ne!(order(SortBy::Count), order(SortBy::Memory));
    // PyTorch's names.
    assert_eq!(SortBy::parse("cpu_time_total")?, SortBy::CpuTotal);
    assert_eq!(SortBy::parse("cuda_time_total")?, SortBy::DeviceTotal);
    assert_eq!(SortBy::parse("self_cpu_memory_usage")?, SortBy::SelfMemory);
    let err = SortBy::parse("flops").expect_err("unknown");
    assert!(err.to_string().contains("flops"), "{err}");
    Ok(())
}

#[test]
fn columns_show_only_when_their_option_was_on() -> Result<()> {
    let _serial = SERIAL.lock();
    let header = |prof: &Profile| prof.table().lines().next().unwrap_or("").to_string();
    let (plain, _) = profiled(ProfileOptions::new(), Device::Cpu)?;
    let h = header(&plain);
    assert!(h.contains("calls") && h.contains("self (us)"), "{h}");
    for column in ["mem", "device", "source", "input shapes"] {
        assert!(!h.contains(column), "{column} in {h}");
    }
    let (all, _) = profiled(ProfileOptions::all(), Device::Cpu)?;
    let h = header(&all);
    for column in ["mem", "self mem", "device (us)", "source"] {
        assert!(h.contains(column), "{column} not in {h}");
    }
    // A profile with the default options is the one `profile` records.
    let mlp = Mlp::new(Device::Cpu)?;
    let (r, prof) = profile(|| mlp.step());
    r?;
    assert_eq!(prof.options(), ProfileOptions::default());
    Ok(())
}

#[test]
fn chrome_trace_is_json_with_shapes_and_call_sites_in_args() -> Result<()> {
    let _serial = SERIAL.lock();
    let (prof, line) = profiled(ProfileOptions::all(), Device::Cpu)?;
    let trace: serde_json::Value = serde_json::from_str(&prof.chrome_trace()).expect("valid JSON");
    let events = trace["traceEvents"].as_array().expect("traceEvents");
    assert_eq!(events.len(), prof.events().len());
    let forward: Vec<&serde_json::Value> = events.iter().filter(|e| e["cat"] == "forward").collect();
    assert!(!forward.is_empty());
    for e in &forward {
        assert!(e["args"]["Input Dims"].is_array(), "{e}");
        assert!(e["args"]["Memory (bytes)"].is_i64(), "{e}");
    }
    let first_matmul = forward.iter().find(|e| e["name"] == "matmul").expect("matmul");
    assert_eq!(first_matmul["args"]["Input Dims"], serde_json::json!([[BATCH, INPUT], [INPUT, HIDDEN]]));
    let site = first_matmul["args"]["Call stack"].as_str().expect("a call stack");
    assert!(site.starts_with(&format!("{}:{line}:", file!())), "{site}");
    // No device time on the CPU: no such field.
    assert!(events.iter().all(|e| e["args"].get("Device time (us)").is_none()));
    Ok(())
}
