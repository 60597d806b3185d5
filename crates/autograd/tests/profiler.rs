//! The profiler: per-operation counts, total and self times of forward and backward, the
//! table, the Chrome trace, nesting, and that nothing is recorded when it is off.

use ember_autograd::profiler::{Phase, Profiler, is_profiling};
use ember_autograd::{Function, FunctionCtx, Var, grad, profile, record_function};
use ember_tensor::{DType, Result, Tensor};

fn mlp_step(x: &Var, w1: &Var, w2: &Var) -> Result<()> {
    x.matmul(w1)?.relu().matmul(w2)?.tanh().sum_all().backward()
}

fn setup() -> Result<(Var, Var, Var)> {
    Ok((Var::new(Tensor::randn([8, 16])?), Var::param(Tensor::randn([16, 32])?), Var::param(Tensor::randn([32, 4])?)))
}

#[test]
fn counts_forward_and_backward_per_operation() -> Result<()> {
    let (x, w1, w2) = setup()?;
    let (r, prof) = profile(|| mlp_step(&x, &w1, &w2));
    r?;
    let stats = prof.key_averages();
    let count = |name: &str, phase: Phase| stats.iter().find(|s| s.name == name && s.phase == phase).map(|s| s.count);
    // The forward pass proper: events not nested in a backward.
    let top = |name: &str| prof.events().iter().filter(|e| e.name == name && e.depth == 0).count();
    assert_eq!((top("matmul"), top("relu"), top("tanh"), top("sum")), (2, 1, 1, 1));
    // Backward formulas apply operations too: matmul's backward computes the weight
    // gradients (and the hidden layer's), which the profile counts as nested forwards.
    assert_eq!(count("matmul", Phase::Forward), Some(5));
    assert_eq!(count("relu", Phase::Forward), Some(1));
    assert_eq!(count("matmul", Phase::Backward), Some(2));
    assert_eq!(count("relu", Phase::Backward), Some(1));
    assert_eq!(count("backward", Phase::Range), Some(1));
    // Sorted by total time, longest first.
    assert!(stats.windows(2).all(|w| w[0].total >= w[1].total));
    // Self time never exceeds total time; the whole backward contains its nodes.
    for s in &stats {
        assert!(s.self_time <= s.total, "{s:?}");
    }
    let whole = stats.iter().find(|s| s.name == "backward").unwrap();
    let nodes: std::time::Duration = stats.iter().filter(|s| s.phase == Phase::Backward).map(|s| s.total).sum();
    assert!(whole.total >= nodes && whole.self_time <= whole.total - nodes);
    Ok(())
}

#[test]
fn backward_under_create_graph_nests_its_recorded_operations() -> Result<()> {
    let x = Var::param(Tensor::from_vec(vec![1.0f64, 2.0], [2])?);
    let (r, prof) = profile(|| -> Result<Var> {
        let y = x.exp().sum_all();
        Ok(grad(&[&y], &[&x], &[], false, true)?[0].clone().expect("dy/dx"))
    });
    r?;
    // exp's backward multiplies by its output: a forward operation nested in a backward.
    let nested = prof.events().iter().filter(|e| e.phase == Phase::Forward && e.depth >= 2).count();
    assert!(nested >= 1, "{:#?}", prof.events());
    let exp_bwd = prof.events().iter().find(|e| e.name == "exp" && e.phase == Phase::Backward).unwrap();
    assert!(exp_bwd.self_time <= exp_bwd.duration);
    Ok(())
}

#[test]
fn the_table_lists_operations_with_their_times() -> Result<()> {
    let (x, w1, w2) = setup()?;
    let (r, prof) = profile(|| mlp_step(&x, &w1, &w2));
    r?;
    let table = prof.table();
    let lines: Vec<&str> = table.lines().collect();
    assert!(lines[0].contains("name") && lines[0].contains("calls") && lines[0].contains("total (us)"));
    assert!(lines[0].contains("self (us)"));
    assert!(lines.iter().any(|l| l.starts_with("matmul") && l.contains("forward")));
    assert!(lines.iter().any(|l| l.starts_with("matmul") && l.contains("backward")));
    assert!(lines.last().unwrap().starts_with("profiled time"));
    assert_eq!(format!("{prof}"), table);
    Ok(())
}

#[test]
fn chrome_trace_is_valid_json_with_complete_events() -> Result<()> {
    let (x, w1, w2) = setup()?;
    let (r, prof) = profile(|| record_function("train \"step\"", || mlp_step(&x, &w1, &w2)));
    r?;
    let trace: serde_json::Value = serde_json::from_str(&prof.chrome_trace()).expect("valid JSON");
    let events = trace["traceEvents"].as_array().expect("traceEvents");
    assert_eq!(events.len(), prof.events().len());
    for e in events {
        assert_eq!(e["ph"], "X");
        for key in ["ts", "dur", "pid", "tid"] {
            assert!(e[key].is_number(), "{key} in {e}");
        }
        assert!(e["name"].is_string());
    }
    let step = events.iter().find(|e| e["name"] == "train \"step\"").expect("the user range, escaped");
    let (t0, d0) = (step["ts"].as_f64().unwrap(), step["dur"].as_f64().unwrap());
    // Every other event lies inside the range.
    for e in events {
        let (t, d) = (e["ts"].as_f64().unwrap(), e["dur"].as_f64().unwrap());
        assert!(t >= t0 - 1e-3 && t + d <= t0 + d0 + 1e-3, "{e} outside {step}");
    }
    assert!(events.iter().any(|e| e["name"] == "matmul (backward)" && e["cat"] == "backward"));

    let path = std::env::temp_dir().join(format!("ember_trace_{}.json", std::process::id()));
    prof.save_chrome_trace(&path)?;
    let written = std::fs::read_to_string(&path).expect("written");
    std::fs::remove_file(&path).ok();
    assert_eq!(written, prof.chrome_trace());
    Ok(())
}

#[test]
fn nothing_is_recorded_outside_a_profile() -> Result<()> {
    let (x, w1, w2) = setup()?;
    assert!(!is_profiling());
    mlp_step(&x, &w1, &w2)?;
    let p = Profiler::start();
    assert!(is_profiling());
    let prof = p.stop();
    assert!(!is_profiling());
    assert!(prof.events().is_empty());
    // record_function without a profiler just runs its body.
    assert_eq!(record_function("idle", || 7), 7);
    Ok(())
}

#[test]
fn nested_profilers_record_into_the_innermost() -> Result<()> {
    let x = Var::param(Tensor::ones([4], DType::F32)?);
    let outer = Profiler::start();
    let _a = x.exp();
    let (_, inner) = profile(|| x.sin());
    let _b = x.cos();
    let outer = outer.stop();
    let names = |p: &ember_autograd::Profile| p.events().iter().map(|e| e.name.clone()).collect::<Vec<_>>();
    assert_eq!(names(&inner), vec!["sin"]);
    assert_eq!(names(&outer), vec!["exp", "cos"]);
    assert!(!is_profiling());
    Ok(())
}

#[test]
fn dropping_a_profiler_without_stopping_it_ends_recording() {
    {
        let _p = Profiler::start();
        assert!(is_profiling());
    }
    assert!(!is_profiling());
}

struct Double;

impl Function for Double {
    fn forward(&self, _: &mut FunctionCtx, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        Ok(vec![inputs[0].mul_scalar(2.0)])
    }
    fn backward(&self, _: &FunctionCtx, grads: &[Var]) -> Result<Vec<Option<Var>>> {
        Ok(vec![Some(grads[0].mul_scalar(2.0))])
    }
}

#[test]
fn custom_functions_and_checkpoints_are_profiled() -> Result<()> {
    let x = Var::param(Tensor::ones([4], DType::F32)?);
    let (r, prof) = profile(|| -> Result<()> {
        let y = Double.apply(&[&x])?.remove(0);
        y.checkpoint(|h| Ok(h.exp().sin()))?.sum_all().backward()
    });
    r?;
    let stats = prof.key_averages();
    let has = |name: &str, phase: Phase| stats.iter().any(|s| s.name == name && s.phase == phase);
    assert!(has("Double", Phase::Forward) && has("Double", Phase::Backward));
    assert!(has("checkpoint", Phase::Forward) && has("checkpoint", Phase::Backward));
    // The recomputation inside the checkpoint's backward: exp runs forward twice.
    assert_eq!(stats.iter().find(|s| s.name == "exp" && s.phase == Phase::Forward).map(|s| s.count), Some(2));
    Ok(())
}
