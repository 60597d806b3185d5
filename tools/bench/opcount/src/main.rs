//! Fixed loops of recorded ops for instruction counting under callgrind (see Cargo.toml):
//! `opcount MODE ITERS` with MODE one of record, backward, nograd, inference.
use ember_autograd::{Var, no_grad};
use ember_tensor::{DType, Tensor};
use std::hint::black_box;

const STEPS: usize = 1000;

fn chain(x: &Var) -> Var {
    let mut y = x.clone();
    for _ in 0..STEPS {
        y = y.mul_scalar(1.0001).add_scalar(0.0001);
    }
    y
}

fn main() {
    ember_tensor::threading::set_num_threads(1).ok();
    let args: Vec<String> = std::env::args().collect();
    let mode = args[1].as_str();
    let iters: usize = args[2].parse().unwrap();
    let x = Var::param(Tensor::ones([64], DType::F32).unwrap());
    for _ in 0..iters {
        match mode {
            "record" => drop(black_box(chain(&x))),
            "backward" => {
                let y = chain(&x).sum_all();
                y.backward().unwrap();
                x.zero_grad();
            }
            "nograd" => drop(black_box(no_grad(|| chain(&x)))),
            #[cfg(feature = "inference")]
            "inference" => drop(black_box(ember_autograd::inference_mode(|| chain(&x)))),
            _ => panic!("mode"),
        }
    }
}
