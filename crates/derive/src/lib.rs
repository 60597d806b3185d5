//! `ember-derive`: `#[derive(Module)]`, which ember-nn re-exports beside its `Module` trait
//! (`ember_nn::Module`, `ember::nn::Module`). See [`macro@Module`] for the rules.

mod attrs;
mod expand;

use proc_macro::TokenStream;
use syn::{DeriveInput, parse_macro_input, parse_quote};

/// Implements `Module` for a struct from its fields, so that a model is its struct plus an
/// inherent `forward`: the derive lists the fields as the module's parts
/// (`Module::children`), and every structural method (`named_parameters` with PyTorch's
/// dotted names, `named_buffers`, `parameters`, `train` / `eval`, `to_device`, `state_dict`
/// / `load_state_dict`, `named_modules`) follows from them.
///
#[doc = include_str!("../example.md")]
///
/// # Fields
///
/// Each field, in declaration order, is one of these, by its type:
///
/// | field type | becomes | named |
/// |---|---|---|
/// | a `Module` (a layer, a derived struct, `Box<dyn Module>`, `Arc<M>`) | a submodule | `field.weight`, ... |
/// | `Option<M>` | a submodule when `Some` | `field.…` |
/// | `Vec<M>` | submodules (PyTorch's `ModuleList`) | `field.0.…`, `field.1.…` |
/// | `Var` | a parameter | `field` |
/// | `Option<Var>` | a parameter when `Some` | `field` |
/// | `Vec<Var>` | parameters (PyTorch's `ParameterList`) | `field.0`, `field.1` |
/// | `Buffer`, `Option<Buffer>` | a buffer: in the state dict, moved by `to_device`, not trained | `field` |
/// | `TrainingFlag` | the module's own train / eval flag | |
///
/// Names and order are those of the fields, so the state-dict keys are PyTorch's when the
/// fields are named as PyTorch's attributes are (PyTorch lists a module's own parameters
/// before its submodules' ones: declare them first to get its order). A struct without a
/// `TrainingFlag` reports training while any of its submodules does.
///
/// A field of any other type (sizes, options, caches) must be marked `#[module(skip)]`;
/// otherwise the compiler says that its type is not a module field. The other field
/// attributes:
///
/// - `#[module(rename = "name")]`: the field's part is named `name`;
/// - `#[module(flatten)]`: the field (a `Module`) lends its parts to the struct without a
///   prefix, for a newtype around a layer (`struct Head(Linear)` has `weight` and `bias`).
///
/// Tuple structs name their fields `0`, `1`, .... On the struct, `#[module(crate =
/// "path")]` names the path to ember-nn when it is neither `ember_nn` nor `ember::nn`.
///
/// # `forward`
///
/// The derived `Module::forward` calls the struct's inherent `fn forward(&self, x: &Var) ->
/// Result<Var>`, public or not (ember's layers keep theirs private, so that `layer.forward(x)`
/// elsewhere is the trait's). Without one, the compiler reports "function cannot return
/// without recursing" at the struct's name. On a generic struct, put the bounds that
/// `forward` needs on the struct itself (`struct Wrapper<M: Module>`), so that the derived
/// impl has them. A module whose parts are not fields (computed names, a
/// list built at run time) implements `Module` by hand instead: `forward` and `children`.
#[proc_macro_derive(Module, attributes(module))]
pub fn derive_module(input: TokenStream) -> TokenStream {
    derive(input, parse_quote!(::ember_nn))
}

/// `#[derive(Module)]` as the `ember` crate re-exports it (`ember::nn::Module`): the derive
/// of ember-nn's `Module` (see its documentation for the rules), reaching ember-nn through
/// `::ember::nn`, for crates that depend on `ember` alone.
#[proc_macro_derive(FacadeModule, attributes(module))]
pub fn derive_facade_module(input: TokenStream) -> TokenStream {
    derive(input, parse_quote!(::ember::nn))
}

fn derive(input: TokenStream, default_crate: syn::Path) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    expand::expand(&input, default_crate).unwrap_or_else(syn::Error::into_compile_error).into()
}
