//! `save_on_cpu`: a model's saved activations on `cuda:0` (the emulated device) wait on the
//! host between forward and backward, come back to `cuda:0` for backward, and the
//! gradients equal the plain run's bit for bit; on the CPU nothing is copied.

use ember_autograd::save_on_cpu::offloaded;
use ember_autograd::{Function, FunctionCtx, SaveOnCpuGuard, Var, save_on_cpu};
use ember_tensor::{Device, Result, Tensor};
use parking_lot::Mutex;
use std::sync::Arc;

/// `offloaded()` counts for the whole process: the tests of this file take turns.
static SERIAL: Mutex<()> = Mutex::new(());

/// `x^3`, checking where backward finds the tensor it saved.
struct Cube {
    seen: Arc<Mutex<Vec<Device>>>,
}

impl Function for Cube {
    fn forward(&self, ctx: &mut FunctionCtx, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        ctx.save_for_backward(&[&inputs[0]]);
        Ok(vec![inputs[0].mul(&inputs[0])?.mul(&inputs[0])?])
    }
    fn backward(&self, ctx: &FunctionCtx, grads: &[Var]) -> Result<Vec<Option<Var>>> {
        let x = ctx.saved_tensors()?.remove(0);
        self.seen.lock().push(x.device());
        Ok(vec![Some(grads[0].mul(&x.square())?.mul_scalar(3.0))])
    }
}

struct Model {
    layers: Vec<Var>,
    seen: Arc<Mutex<Vec<Device>>>,
}

impl Model {
    fn new(device: Device) -> Result<Model> {
        let layers = (0..3u64)
            .map(|k| {
                let vals: Vec<f32> = (0..64).map(|i| ((i * 7 + k as usize * 13) % 17) as f32 / 17.0 - 0.5).collect();
                Ok(Var::param(Tensor::from_vec(vals, [8, 8])?.to_device(device)?))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Model { layers, seen: Arc::new(Mutex::new(Vec::new())) })
    }

    fn loss(&self, x: &Var) -> Result<Var> {
        let mut h = x.clone();
        for w in &self.layers {
            h = h.matmul(w)?.tanh();
        }
        let h = Cube { seen: self.seen.clone() }.apply(&[&h])?.remove(0);
        Ok(h.exp().mean_all())
    }

    fn grads(&self) -> Result<Vec<Vec<f32>>> {
        self.layers.iter().map(|w| w.grad().unwrap().to_vec::<f32>()).collect()
    }

    fn zero_grad(&self) {
        self.layers.iter().for_each(Var::zero_grad);
    }
}

fn input(device: Device) -> Result<Var> {
    let vals: Vec<f32> = (0..32).map(|i| (i % 5) as f32 * 0.2 - 0.4).collect();
    Ok(Var::new(Tensor::from_vec(vals, [4, 8])?.to_device(device)?))
}

#[test]
fn device_activations_wait_on_the_host_and_gradients_match_bit_for_bit() -> Result<()> {
    let _turn = SERIAL.lock();
    Device::emulate_cuda();
    let dev = Device::Cuda(0);
    dev.check_available()?;
    let model = Model::new(dev)?;
    let x = input(dev)?;

    model.loss(&x)?.backward()?;
    let plain = model.grads()?;
    model.zero_grad();

    let before = offloaded();
    let loss = save_on_cpu(false, || model.loss(&x))?;
    let held = offloaded();
    // Each matmul saves its two inputs and each tanh its output, Cube its input, exp its
    // output: 3 * 3 + 2 values of the device, all now on the host.
    assert_eq!(held.tensors - before.tensors, 11, "{held:?}");
    let bytes = 4 * (3 * (4 * 8 + 8 * 8 + 4 * 8) + 4 * 8 + 4 * 8);
    assert_eq!(held.bytes - before.bytes, bytes);
    loss.backward()?;
    assert_eq!(offloaded(), before, "the host copies are freed with backward");
    assert_eq!(*model.seen.lock(), vec![dev, dev], "backward read the saved tensor on cuda:0");
    assert!(model.layers.iter().all(|w| w.grad().unwrap().device() == dev));
    assert_eq!(model.grads()?, plain, "offloading changed a gradient");
    Ok(())
}

#[test]
fn the_guard_form_and_pin_memory_behave_the_same() -> Result<()> {
    let _turn = SERIAL.lock();
    Device::emulate_cuda();
    let dev = Device::Cuda(0);
    let model = Model::new(dev)?;
    let x = input(dev)?;
    model.loss(&x)?.backward()?;
    let plain = model.grads()?;
    for pin_memory in [false, true] {
        model.zero_grad();
        let before = offloaded();
        let loss = {
            let _g = SaveOnCpuGuard::new(pin_memory);
            model.loss(&x)?
        };
        let inside = offloaded();
        assert!(inside.tensors > before.tensors, "the guard offloaded nothing");
        let out_of_scope = model.loss(&x)?;
        assert_eq!(offloaded(), inside, "no offloading after the guard");
        drop(out_of_scope);
        loss.backward()?;
        assert_eq!(offloaded(), before);
        assert_eq!(model.grads()?, plain, "pin_memory {pin_memory}");
    }
    Ok(())
}

#[test]
fn on_the_cpu_nothing_is_copied() -> Result<()> {
    let _turn = SERIAL.lock();
    let model = Model::new(Device::Cpu)?;
    let x = input(Device::Cpu)?;
    model.loss(&x)?.backward()?;
    let plain = model.grads()?;
    model.zero_grad();
    let before = offloaded();
    let loss = save_on_cpu(true, || model.loss(&x))?;
    assert_eq!(offloaded(), before, "a CPU value is kept as it is, not copied");
    loss.backward()?;
    assert_eq!(model.grads()?, plain);
    assert_eq!(*model.seen.lock(), vec![Device::Cpu, Device::Cpu]);
    Ok(())
}
