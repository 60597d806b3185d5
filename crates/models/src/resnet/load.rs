//! Loading torchvision ResNet state dicts (`torch.save(model.state_dict())` files, or
//! safetensors) and saving them back. ember's module names are torchvision's, so keys map
//! one to one; the configuration is read off the state dict.

use super::config::ResNetConfig;
use super::model::ResNet;
use crate::bert::cast_and_load;
use crate::checkpoint::load_weights_file;
use ember_io::{LoadOptions, save_pt, save_safetensors};
use ember_nn::Module;
use ember_tensor::Result;
use std::path::Path;

impl ResNet {
    /// Loads a torchvision ResNet checkpoint (`resnet18-f37072fd.pth`, or a `.safetensors`
    /// file of the same keys), its configuration (block, depth, width, classes) read off
    /// the keys and shapes; in evaluation mode. Errors name the file and the keys that are
    /// missing, unexpected or of the wrong shape.
    ///
    /// ```no_run
    /// use ember_models::resnet::ResNet;
    /// let mut model = ResNet::from_pretrained("resnet18-f37072fd.pth".as_ref())?;
    /// model.replace_fc(10)?; // fine-tune on 10 classes
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    pub fn from_pretrained(path: &Path) -> Result<ResNet> {
        Self::from_pretrained_with(path, &LoadOptions::default())
    }

    /// [`from_pretrained`](ResNet::from_pretrained) with `options` (`dtype` converts a bf16
    /// or f16 checkpoint; without it the model takes the checkpoint's dtype).
    pub fn from_pretrained_with(path: &Path, options: &LoadOptions) -> Result<ResNet> {
        let state = load_weights_file(path, options)?;
        let config = ResNetConfig::infer(&state, path)?;
        let model = ResNet::new(&config)?;
        cast_and_load(&model, &state, path)?;
        model.eval();
        Ok(model)
    }

    /// Loads a checkpoint into a model of a configuration given up front (strictly: a
    /// checkpoint of another depth or width is an error naming its keys).
    pub fn from_pretrained_config(path: &Path, config: &ResNetConfig, options: &LoadOptions) -> Result<ResNet> {
        let state = load_weights_file(path, options)?;
        let model = ResNet::new(config)?;
        cast_and_load(&model, &state, path)?;
        model.eval();
        Ok(model)
    }

    /// Writes the state dict in torchvision's keys: safetensors for a `.safetensors` path,
    /// otherwise a `torch.save` file that `torchvision.models.resnet18().load_state_dict(
    /// torch.load(path))` reads.
    pub fn save_pretrained(&self, path: &Path) -> Result<()> {
        let state = self.state_dict();
        if path.extension().is_some_and(|e| e == "safetensors") {
            save_safetensors(path, &state)
        } else {
            save_pt(path, &state)
        }
    }
}
